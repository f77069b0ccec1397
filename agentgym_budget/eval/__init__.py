"""Pass@(K,T) evaluation: how success depends on attempts K and turn budget T.

* :func:`evaluate` — run a policy on an env and return a :class:`PassKTResult`;
* :mod:`~agentgym_budget.eval.passkt` — the unbiased estimator and the grid with CIs;
* :mod:`~agentgym_budget.eval.metrics` — decision quality, error recovery, resilience;
* :mod:`~agentgym_budget.eval.rollout` — episode records and pluggable executors;
* :mod:`~agentgym_budget.eval.plots` — heatmaps and curves (matplotlib, imported on use).
* :mod:`~agentgym_budget.eval.transcripts` — what the agent saw and said, per turn (``--transcripts``);
* :mod:`~agentgym_budget.eval.report` — one self-contained HTML page of a run (``agentgym-budget report``).
"""

from agentgym_budget.eval.evaluate import evaluate, resolve_mode
from agentgym_budget.eval.metrics import behaviour_metrics
from agentgym_budget.eval.passkt import PassKTGrid, pass_at_k, passkt_grid
from agentgym_budget.eval.results import PassKTResult, difference
from agentgym_budget.eval.rollout import (
    EpisodeJob,
    EpisodeRecord,
    Executor,
    ProcessPoolExecutor,
    RolloutSpec,
    SerialExecutor,
    make_executor,
)

__all__ = [
    "EpisodeJob",
    "EpisodeRecord",
    "Executor",
    "PassKTGrid",
    "PassKTResult",
    "ProcessPoolExecutor",
    "RolloutSpec",
    "SerialExecutor",
    "behaviour_metrics",
    "difference",
    "evaluate",
    "make_executor",
    "pass_at_k",
    "passkt_grid",
    "resolve_mode",
]

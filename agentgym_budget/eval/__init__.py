"""Pass@(K,T) evaluation: how success depends on attempts K and turn budget T.

* :func:`evaluate` — run a policy on an env and return a :class:`PassKTResult`;
* :class:`~agentgym_budget.eval.config.EvalConfig` — every setting of an evaluation, checked once;
* :mod:`~agentgym_budget.eval.passkt` — the unbiased estimator and the grid with CIs;
* :mod:`~agentgym_budget.eval.cost` — what a cell costs (turns, tokens, seconds; parallel or sequential attempts);
* :mod:`~agentgym_budget.eval.frontier` — success against cost: the best (K,T) for a budget;
* :mod:`~agentgym_budget.eval.metrics` — decision quality, error recovery, resilience;
* :mod:`~agentgym_budget.eval.compare` — paired comparison of two results, aggregation over runs;
* :mod:`~agentgym_budget.eval.probes` — single-step quality on a fixed set of probe states;
* :mod:`~agentgym_budget.episodes.records` — the episode record and its per-turn facts;
* :mod:`~agentgym_budget.episodes.runner` — the episode runner and executors (:mod:`~agentgym_budget.episodes.process_pool`: in processes);
* :mod:`~agentgym_budget.eval.plots` — heatmaps and curves (matplotlib, imported on use).
* :mod:`~agentgym_budget.eval.transcripts` — what the agent saw and said, per turn (``--transcripts``);
* :mod:`~agentgym_budget.eval.report` — one self-contained HTML page of a run (``agentgym-budget report``).
"""

from agentgym_budget.eval.compare import aggregate_results, compare_results
from agentgym_budget.eval.config import EvalConfig
from agentgym_budget.eval.evaluate import evaluate, resolve_mode
from agentgym_budget.eval.metrics import behaviour_metrics
from agentgym_budget.eval.passkt import PassKTGrid, pass_at_k, passkt_grid
from agentgym_budget.eval.probes import build_probes, run_probes
from agentgym_budget.episodes.process_pool import EpisodeProcessPool, make_executor
from agentgym_budget.episodes.records import EpisodeJob, EpisodeRecord
from agentgym_budget.eval.results import PassKTResult, difference
from agentgym_budget.episodes.runner import Executor, RolloutSpec, SerialExecutor

__all__ = [
    "EpisodeJob",
    "EpisodeRecord",
    "EvalConfig",
    "Executor",
    "PassKTGrid",
    "PassKTResult",
    "EpisodeProcessPool",
    "RolloutSpec",
    "SerialExecutor",
    "aggregate_results",
    "behaviour_metrics",
    "build_probes",
    "compare_results",
    "difference",
    "evaluate",
    "make_executor",
    "pass_at_k",
    "passkt_grid",
    "resolve_mode",
    "run_probes",
]

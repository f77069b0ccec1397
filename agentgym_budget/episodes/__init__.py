"""Episodes: the one way an episode is played, for evaluation, training and every adapter.

The layer between the policies and their consumers (``eval``, ``train``, ``integrations``,
``distributed`` all import it, none of them plays an episode its own way):

* :mod:`~agentgym_budget.episodes.runner` — :class:`RolloutSpec` (what to play: env, budget,
  policy), :func:`~agentgym_budget.episodes.runner.play_episodes` (the one turn loop: batched
  policies, many episodes in flight) and :class:`~agentgym_budget.episodes.runner.EpisodeRunner`,
  the serial executor;
* :mod:`~agentgym_budget.episodes.outcome` — :func:`~agentgym_budget.episodes.outcome.episode_over`,
  the one end-of-episode rule;
* :mod:`~agentgym_budget.episodes.records` — the episode record and its per-turn facts;
* :mod:`~agentgym_budget.episodes.process_pool` — :class:`EpisodeProcessPool`, episodes in
  worker processes (:func:`make_executor` picks serial or pooled);
* :mod:`~agentgym_budget.episodes.signals` — SIGINT/SIGTERM during a run: stop after the current episodes;
* :mod:`~agentgym_budget.episodes.schema` — checked fields of records read back from files.

Example:
    >>> import agentgym_budget
    >>> from agentgym_budget.episodes import EpisodeJob, RolloutSpec, SerialExecutor
    >>> spec = RolloutSpec("KeyDoor-Budget-v0", "expert", seed=0, max_budget=4)
    >>> [record] = SerialExecutor().run(spec, [EpisodeJob(task=0, attempt=0, budget=4)])
    >>> record.won
    True
"""

from agentgym_budget.episodes.outcome import episode_over
from agentgym_budget.episodes.process_pool import EpisodeProcessPool, make_executor
from agentgym_budget.episodes.records import EpisodeJob, EpisodeRecord
from agentgym_budget.episodes.runner import Executor, RolloutSpec, SerialExecutor, play_episodes

__all__ = [
    "EpisodeJob",
    "EpisodeProcessPool",
    "EpisodeRecord",
    "Executor",
    "RolloutSpec",
    "SerialExecutor",
    "episode_over",
    "make_executor",
    "play_episodes",
]

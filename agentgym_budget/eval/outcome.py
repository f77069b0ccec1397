"""When an episode is over: one definition for every loop (:func:`episode_over`, defined with the loop
itself in :mod:`agentgym_budget.policies.episodes` and re-exported here).

The evaluator's :class:`~agentgym_budget.eval.runner.EpisodeRunner`, the trainer's
:func:`~agentgym_budget.train.rollout.collect_episodes` and
:class:`~agentgym_budget.integrations.session.BudgetSession` all ask this question here.  (The
other question they share, whether a turn's action was invalid, is answered by
:func:`agentgym_budget.text.is_invalid`: low enough for ``ProcessReward`` to use it too.)
Where their answers differed before this module existed, each keeps its own through a
parameter (so that no result changed), and the parameter names the difference:

* :func:`episode_over` — the env ended the episode (``terminated``) or the budget did
  (``truncated``); the evaluator also stops at a win (``stop_at_win=True``), which matters only
  for an env that does not terminate when won (the text-env contract says it does).

Example:
    >>> episode_over(terminated=False, truncated=True)
    True
    >>> episode_over(False, False, won=True), episode_over(False, False, won=True, stop_at_win=True)
    (False, True)
"""

from __future__ import annotations

from agentgym_budget.policies.episodes import episode_over

__all__ = ["episode_over"]

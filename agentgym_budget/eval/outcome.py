"""When an episode is over and when a turn's action was invalid: one definition for every loop.

The evaluator's :class:`~agentgym_budget.eval.runner.EpisodeRunner` and its metrics, the
trainer's :func:`~agentgym_budget.train.rollout.collect_episodes` and
:class:`~agentgym_budget.integrations.session.BudgetSession` all ask these two questions here.
Where their answers differed before this module existed, each keeps its own through a
parameter (so that no result changed), and the parameter names the difference:

* :func:`episode_over` — the env ended the episode (``terminated``) or the budget did
  (``truncated``); the evaluator also stops at a win (``stop_at_win=True``), which matters only
  for an env that does not terminate when won (the text-env contract says it does);
* :func:`is_invalid` — the env's own verdict (``info["action_effect"] == "invalid"``) when it
  reports one, else the action was not among the admissible commands; the trainer counts by
  the list alone (it passes no effect).

Example:
    >>> episode_over(terminated=False, truncated=True)
    True
    >>> episode_over(False, False, won=True), episode_over(False, False, won=True, stop_at_win=True)
    (False, True)
    >>> is_invalid(admissible=0), is_invalid(admissible=0, effect="progress"), is_invalid(1, effect="invalid")
    (True, False, True)
"""

from __future__ import annotations

__all__ = ["episode_over", "is_invalid"]


def episode_over(terminated: bool, truncated: bool, won: bool = False, *, stop_at_win: bool = False) -> bool:
    """Whether the episode has ended: the env ended it, the budget truncated it, or
    (``stop_at_win``) the task is ``won`` though the env plays on."""
    return bool(terminated or truncated or (stop_at_win and won))


def is_invalid(admissible: int, effect: str = "") -> bool:
    """Whether a turn's action was invalid, from the turn's facts.

    ``effect`` is the env's ``info["action_effect"]`` after the turn (``""``: not reported);
    ``admissible`` is 1 if the action was among the admissible commands, 0 if not, -1 (unknown)
    if there was no list.  The env's verdict wins when it gives one: an action the env applies
    though it was not listed is valid, and one it rejects though listed is invalid.
    """
    if effect:
        return effect == "invalid"
    return admissible == 0

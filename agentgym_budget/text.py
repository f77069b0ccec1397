"""Text and names that every layer of the package shares (the bottom layer, with ``_optional``).

* :data:`INVALID_ACTION_FEEDBACK` — what every env answers to an action it cannot apply;
* :data:`ACTION_EFFECTS` — the values of ``info["action_effect"]``, the per-step fact every
  text env reports about the action it just applied (see :mod:`agentgym_budget.envs.base`);
* :func:`family_name` — which env family an env id belongs to (``"ALFWorld-Budget-v0"`` →
  ``"ALFWorld"``), for ids of ours and of anyone else.

Example:
    >>> from agentgym_budget.text import INVALID_ACTION_FEEDBACK, family_name
    >>> INVALID_ACTION_FEEDBACK
    'Nothing happens.'
    >>> family_name("TextWorld-Cooking-Budget-v0"), family_name("my_pkg/Maze-v3")
    ('TextWorld-Cooking', 'Maze')
"""

from __future__ import annotations

from gymnasium.envs.registration import parse_env_id

__all__ = ["ACTION_EFFECTS", "BUDGET_ID_SUFFIX", "INVALID_ACTION_FEEDBACK", "NO_STATE_CHANGE", "family_name"]

#: What the environments answer to an action they do not understand or cannot apply.
INVALID_ACTION_FEEDBACK: str = "Nothing happens."
#: ``info["action_effect"]`` values, from the backend's engine state (never from its text):
#: ``"invalid"`` the engine could not apply the command; ``"no_effect"`` it applied but the
#: state did not change; ``"progress"`` the task got closer (won, score up, expert plan
#: shorter); ``"regress"`` it got further (lost, score down, expert plan longer);
#: ``"neutral"`` the state changed with neither.
ACTION_EFFECTS: tuple[str, ...] = ("invalid", "no_effect", "progress", "neutral", "regress")
#: The effects that leave the state as it was.
NO_STATE_CHANGE: frozenset[str] = frozenset({"invalid", "no_effect"})
#: ``X-Budget-v0`` is family ``X`` under a TurnBudget.
BUDGET_ID_SUFFIX: str = "-Budget"


def family_name(env_id: str) -> str:
    """The family an env id names: its name without namespace, version and ``-Budget``."""
    _, name, _ = parse_env_id(env_id)
    return name.removesuffix(BUDGET_ID_SUFFIX)

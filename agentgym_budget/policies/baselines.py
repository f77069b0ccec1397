"""Baseline policies: ``random``, ``expert`` and ``noisy-expert``.

* ``random`` picks uniformly among ``info["admissible_commands"]``;
* ``expert`` plays ``info["expert_action"]`` (the backend's expert);
* ``noisy-expert`` plays the expert action with probability ``p``, else a random admissible
  command — the default demo policy: success depends clearly on the budget and on the number
  of attempts, and its random moves are errors to recover from.

None of them reads the budget (``reads_budget = False``), so the evaluator may answer every
budget from one rollout at the largest one.  They are registered by name in
:data:`agentgym_budget.episodes.policy.POLICIES`.

Example:
    >>> from agentgym_budget.policies import NoisyExpertPolicy
    >>> policy = NoisyExpertPolicy(p=1.0)
    >>> policy.reset(seed=0)
    >>> policy.act("", {"admissible_commands": ["look", "go east"], "expert_action": "go east"})
    'go east'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ExpertPolicy", "NoisyExpertPolicy", "RandomPolicy"]


def _expert_action(info: dict[str, Any]) -> str:
    action = info.get("expert_action")
    if not isinstance(action, str) or not action:
        raise KeyError("this policy needs info['expert_action'] (a str); this env does not provide an expert")
    return action


class RandomPolicy:
    """Uniform over the admissible commands (``"look"`` when there are none)."""

    name = "random"
    reads_budget = False

    def __init__(self) -> None:
        self._rng = np.random.default_rng()

    def reset(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        commands = admissible_of(info)
        if not commands:
            return "look"
        return commands[int(self._rng.integers(len(commands)))]


class ExpertPolicy:
    """Plays ``info["expert_action"]``."""

    name = "expert"
    reads_budget = False

    def reset(self, seed: int | None = None) -> None:
        pass

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return _expert_action(info)


class NoisyExpertPolicy:
    """The expert action with probability ``p``, else a uniformly random admissible command.

    The random choice may coincide with the expert action; ``p`` is the probability of
    *deliberately* following the expert.
    """

    reads_budget = False

    def __init__(self, p: float = 0.7) -> None:
        p = float(p)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"noisy-expert: p must be in [0, 1], got {p}")
        self.p = p
        self.name = f"noisy-expert(p={p:g})"
        self._rng = np.random.default_rng()

    def reset(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        # Draw both numbers every turn so the random stream does not depend on the branch taken.
        follow = self._rng.random() < self.p
        commands = admissible_of(info)
        pick = int(self._rng.integers(len(commands))) if commands else 0
        if follow or not commands:
            return _expert_action(info)
        return commands[pick]


def admissible_of(info: dict[str, Any]) -> Sequence[str]:
    """``info["admissible_commands"]``, with a clear error when the env does not provide it."""
    try:
        return info["admissible_commands"]
    except KeyError:
        raise KeyError("this policy needs info['admissible_commands'], which the env did not provide") from None

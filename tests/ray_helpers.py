"""Policies that misbehave on one task, for the Ray fault tests (importable by Ray actors)."""

from __future__ import annotations

import os
from agentgym_budget.policies.baselines import NoisyExpertPolicy
from agentgym_budget.seeds import attempt_seed


class _OnTask(NoisyExpertPolicy):
    """A noisy expert that misbehaves when it starts an attempt at ``task`` (of base seed ``seed``)."""

    def __init__(self, seed: int, task: int) -> None:
        super().__init__(p=0.5)
        self._trigger = {attempt_seed(seed, task, attempt) for attempt in range(64)}

    def reset(self, seed: int | None = None) -> None:
        if seed in self._trigger:
            self.misbehave()
        super().reset(seed)

    def misbehave(self) -> None:
        raise NotImplementedError


class ExitOnTask(_OnTask):
    """Kills its own process (as an OOM kill or a lost node would) when it reaches the task."""

    def misbehave(self) -> None:
        os._exit(1)


class RaiseOnTask(_OnTask):
    """Raises a ``ValueError`` (a bug in a policy) when it reaches the task."""

    def misbehave(self) -> None:
        raise ValueError("policy bug on purpose")


"""Policies and an env that misbehave, for the Ray fault tests (importable by Ray actors)."""

from __future__ import annotations

import os

import gymnasium as gym

from agentgym_budget.envs.toy.key_door import KeyDoorEnv
from agentgym_budget.seeds import attempt_seed
from agentgym_budget.policies.baselines import NoisyExpertPolicy
from agentgym_budget.train.config import TrainConfig
from scripted_envs import FaultyEnv


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


FAULTY_KEY_DOOR = "FaultyKeyDoor-v0"


def faulty_key_door(fault_seeds: tuple[int, ...] = (), fault_turn: int = 1, fault_budget: int | None = None,
                    **kwargs) -> FaultyEnv:
    """KeyDoor under ``FaultyEnv``, whose settings come as env kwargs: a test's settings of the class do not
    reach an actor's process.  The process's first env sets them (its raises are counted across the process's
    envs, the retries' included, as ``FaultyEnv.budget`` is)."""
    if FaultyEnv.made == 0:
        FaultyEnv.seeds, FaultyEnv.turn, FaultyEnv.budget = set(fault_seeds), fault_turn, fault_budget
    return FaultyEnv(KeyDoorEnv(**kwargs))


if FAULTY_KEY_DOOR not in gym.registry:
    gym.register(id=FAULTY_KEY_DOOR, entry_point=faulty_key_door)


class FaultyKeyDoorConfig(TrainConfig):
    """A ``TrainConfig`` that a Ray actor unpickles by importing this module, which registers ``FAULTY_KEY_DOOR``
    in the actor's process (the actors import only ``agentgym_budget``)."""

"""Step-level group advantages: GiGPO's anchor-state groups (``TrainConfig(advantage="gigpo")``).

GiGPO (Feng, Xue, Liu and An, 2025, *Group-in-Group Policy Optimization for LLM Agent
Training*, arXiv 2505.10978; code: verl-agent, ``gigpo/core_gigpo.py``) keeps GRPO's
episode-level advantage and adds a step-level one, with no critic and no extra rollouts:

* **episode level** (the paper's Eq. 3): ``A^E(τ_i) = (R(τ_i) - mean_j R(τ_j)) / F_norm`` over
  the G episodes of a group — here :func:`~agentgym_budget.train.grpo.group_advantages`
  (``grpo``), ``F_norm`` the group's std or 1 (``scale_by_std``);
* **discounted step return** (Eq. 5): ``R_t^(i) = sum_{k >= t} gamma^(k-t) r_k^(i)``; the only
  reward here is the outcome (``r = won`` on an episode's last turn, 0 elsewhere), so
  ``R_t = gamma^(n-1-t) * won`` for an episode of ``n`` turns: a win in fewer turns is worth more;
* **anchor-state groups** (Eq. 6): the steps of *all* episodes of a GRPO group that were taken
  from the same environment state ``s̃`` — across episodes, and revisits within one episode —
  form one step group ``{(a_t^(i), R_t^(i)) | s_t^(i) = s̃}``;
* **step advantage** (Eq. 7): ``A^S = (R_t^(i) - mean) / F_norm`` over that step group (the
  same ``F_norm`` as the episode level, as verl-agent's one ``mode`` switch does: its
  ``mean_norm`` is ``scale_by_std=False``, ``mean_std_norm`` is ``True``); a step whose state
  no other step of its group visited (a singleton step group) gets ``A^S = 0``, as in verl-agent
  (its mean is its own return);
* **combined** (Eq. 8): ``A = A^E + omega * A^S`` per step (``TrainConfig.gigpo_omega``;
  the paper and verl-agent's ALFWorld scripts use ``omega = 1``, ``gamma = 0.95``).

A step's state is :func:`state_key` of the observation (and info) it acted on: the env's
``info["state_key"]`` where the env sets one, else the observation's exact text without the
budget line (the budget changes every turn; :func:`~agentgym_budget.policies.prompting.split_budget`
takes it out).  Text alone can name different states alike (KeyDoor answers ``"Nothing
happens."`` whatever the key's whereabouts); an env whose text is not enough sets
``info["state_key"]`` on every reset and step, e.g. KeyDoor's ``"key"``/``"no key"``.

The process reward, when set, stays its own per-turn term (``grpo.turn_samples``); it is not
part of the step returns here.

Example:
    >>> from agentgym_budget.train.rollout import Episode, Turn
    >>> def episode(keys, won):
    ...     return Episode(seed=0, task="t", budget=4, won=won,
    ...                    turns=[Turn([], [1], "a", state_key=k) for k in keys])
    >>> group = [episode(["hall", "key held"], won=True), episode(["hall", "alarm"], won=False)]
    >>> step_advantages(group, group_size=2, gamma=0.5, scale_by_std=False)  # "hall": returns 0.5 and 0
    [[0.25, 0.0], [-0.25, 0.0]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch

from agentgym_budget.policies.prompting import split_budget

__all__ = ["discounted_returns", "state_key", "step_advantages", "step_group_sizes"]


class _Turn(Protocol):
    """What GiGPO reads of a turn (a :class:`~agentgym_budget.train.rollout.Turn`)."""

    @property
    def state_key(self) -> str: ...


class Episode(Protocol):
    """What GiGPO reads of an episode (a :class:`~agentgym_budget.train.rollout.Episode`, which records
    each turn's :func:`state_key`, so the rollout imports this module and this module names none of it)."""

    @property
    def won(self) -> bool: ...

    @property
    def turns(self) -> Sequence[_Turn]: ...


def state_key(observation: str, info: Mapping[str, Any]) -> str:
    """The anchor state a turn acts on: ``info["state_key"]`` if the env sets one, else the observation's
    exact text without the budget line.

    Example:
        >>> state_key("A hall.\\n\\n[Turns left: 1 of 2]", {"budget_text": "[Turns left: 1 of 2]", "budget_shown": "suffix"})
        'A hall.'
        >>> state_key("Nothing happens.", {"state_key": "no key"})
        'no key'
    """
    key = info.get("state_key")
    if key is not None:
        return str(key)
    return split_budget(observation, info)[0]


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """``R_t = sum_{k >= t} gamma^(k-t) r_k`` for every step ``t`` (GiGPO's Eq. 5).

    Example:
        >>> discounted_returns([0.0, 0.0, 1.0], gamma=0.5)
        [0.25, 0.5, 1.0]
    """
    returns, to_go = [], 0.0
    for reward in reversed(rewards):
        to_go = float(reward) + gamma * to_go
        returns.append(to_go)
    return returns[::-1]


def step_advantages(
    episodes: Sequence[Episode], group_size: int, gamma: float, scale_by_std: bool = True, eps: float = 1e-6,
) -> list[list[float]]:
    """``A^S`` per turn of every episode (``[episode][turn]``), from episodes laid out group after group.

    Each turn's discounted outcome return (``r = won`` on the last turn) is compared with the returns
    of the other turns of its GRPO group that acted on the same :func:`state_key`
    (``Turn.state_key``): ``R - mean``, over ``std + eps`` (unbiased std) with ``scale_by_std``.
    A state visited once in the group gives 0.  A failed episode has no turns and joins no step group.
    """
    advantages = [[0.0] * len(episode.turns) for episode in episodes]
    for steps in _step_groups(episodes, group_size, gamma):
        if len(steps) < 2:  # a singleton step group: no other action from this state to compare with
            continue
        returns = torch.tensor([ret for _, _, ret in steps], dtype=torch.float64)
        centred = returns - returns.mean()
        scaled = centred / (returns.std() + eps) if scale_by_std else centred
        for (i, t, _), value in zip(steps, scaled.tolist()):
            advantages[i][t] = value
    return advantages


def step_group_sizes(episodes: Sequence[Episode], group_size: int) -> list[list[int]]:
    """The size of each turn's step group (``[episode][turn]``): 1 for a state no other turn of its group acted on.

    Example:
        >>> from agentgym_budget.train.rollout import Episode, Turn
        >>> group = [Episode(0, "t", 3, [Turn([], [1], "a", state_key=k) for k in keys]) for keys in (["s", "s"], ["s", "u"])]
        >>> step_group_sizes(group, group_size=2)
        [[3, 3], [3, 1]]
    """
    sizes = [[1] * len(episode.turns) for episode in episodes]
    for steps in _step_groups(episodes, group_size, gamma=1.0):
        for i, t, _ in steps:
            sizes[i][t] = len(steps)
    return sizes


def _step_groups(episodes: Sequence[Episode], group_size: int, gamma: float) -> list[list[tuple[int, int, float]]]:
    """Every step group of every GRPO group: its turns as ``(episode, turn, discounted return)``."""
    if len(episodes) % group_size:
        raise ValueError(f"episodes must be [groups * {group_size}], got {len(episodes)}")
    groups: list[list[tuple[int, int, float]]] = []
    for start in range(0, len(episodes), group_size):
        anchors: dict[str, list[tuple[int, int, float]]] = {}  # state -> its steps
        for i in range(start, start + group_size):
            turns = episodes[i].turns
            rewards = [0.0] * len(turns)
            if turns:
                rewards[-1] = float(episodes[i].won)
            for t, (turn, ret) in enumerate(zip(turns, discounted_returns(rewards, gamma))):
                anchors.setdefault(turn.state_key, []).append((i, t, ret))
        groups += anchors.values()
    return groups

"""The seed streams of episodes: every seed is derived from numbers that name the episode, never
from where or when it runs, so that every executor (and every trainer shard) plays the same episodes.

It sits at the bottom of the layers (numpy only), so that the policies' per-turn seeds, the
evaluator's and the trainer's all come from here.

* evaluation: a *task* is an env reset seed: all attempts of task ``i`` reset the env with
  ``task_seed(seed, i)`` (the same game), and differ only through the policy's seed
  ``attempt_seed(seed, i, attempt)``;
* training: episode ``i`` of one collection samples from ``episode_sampling_seed(sampling_seed, i)``
  (its env reset seed is the trainer's, shared by the episodes of a group); an update split into
  shards gives shard ``j`` the sampling seed ``shard_sampling_seed(sampling_seed, j)`` and the
  minibatch shuffle seed ``shard_shuffle_seed(shuffle_seed, j)``;
* an LLM policy samples turn ``t`` of an episode with ``turn_seed(episode_seed, t)``.

All are :func:`derived_seed` of their numbers (with a tag where two streams would otherwise meet).

Example:
    >>> task_seed(0, 3) == task_seed(0, 3) != task_seed(0, 4)
    True
    >>> attempt_seed(0, 3, 1) != attempt_seed(0, 3, 2)
    True
    >>> derived_seed(7, 2) == task_seed(7, 2) == episode_sampling_seed(7, 2)
    True
    >>> turn_seed(7, 0) != turn_seed(7, 1) and 0 <= turn_seed(7, 0) < 2**31  # 31 bits, as servers need
    True
"""

from __future__ import annotations

import numpy as np

__all__ = ["attempt_seed", "derived_seed", "episode_sampling_seed", "shard_sampling_seed", "shard_shuffle_seed",
           "task_seed", "turn_seed"]


def derived_seed(*numbers: int) -> int:
    """A 32-bit seed drawn from ``numbers`` by numpy's ``SeedSequence`` (different numbers: independent seeds)."""
    return int(np.random.SeedSequence(list(numbers)).generate_state(1)[0])


def task_seed(seed: int, task: int) -> int:
    """The env reset seed of ``task`` (the same for all its attempts)."""
    return derived_seed(seed, task)


def attempt_seed(seed: int, task: int, attempt: int) -> int:
    """The policy seed of one attempt at ``task``."""
    return derived_seed(seed, task, attempt, 0x9A55)


def episode_sampling_seed(sampling_seed: int, index: int) -> int:
    """The policy seed of episode ``index`` (its place in the update) of one trainer collection."""
    return derived_seed(sampling_seed, index)


def shard_sampling_seed(sampling_seed: int, shard: int) -> int:
    """The sampling seed of shard ``shard`` of a trainer update (31 bits)."""
    return derived_seed(sampling_seed, shard) >> 1


def shard_shuffle_seed(shuffle_seed: int, shard: int) -> int:
    """The minibatch shuffle seed of shard ``shard`` of a trainer update."""
    return derived_seed(shuffle_seed, shard)


def turn_seed(episode_seed: int, turn: int) -> int:
    """The sampling seed of one turn of an episode (31 bits: every backend and server accepts it)."""
    return derived_seed(episode_seed, turn, 0x11A) >> 1

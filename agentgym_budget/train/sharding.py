"""An update's rollouts in shards of whole groups, and the pool interface the trainer collects through.

An update's ``B * G`` episodes (``B`` tasks, ``G`` episodes per task) are split into
``shards`` of whole groups (:func:`shard_seeds`).  Each shard is one
:func:`~agentgym_budget.train.rollout.collect_episodes` call (one batched ``generate`` per
turn) with its own sampling seed derived from (the update's sampling seed, shard index).  The
sharding, not where the shards run, is part of the result: sampled tokens depend on which
episodes share a ``generate`` batch, as in any batched sampler.

The trainer collects through a :class:`RolloutPool`: :class:`LocalRolloutPool` runs the
shards one after another in this process (:func:`collect_sharded`); a scale-out backend
(``agentgym_budget.distributed.RayRolloutPool``) runs them elsewhere and returns the same
episodes.  The trainer is handed the pool's factory; it never imports a backend.

Example:
    >>> shard_seeds([7, 7, 9, 9, 11, 11], group_size=2, sampling_seed=5, shards=1)
    [([7, 7, 9, 9, 11, 11], 5)]
    >>> [seeds for seeds, _ in shard_seeds([7, 7, 9, 9, 11, 11], group_size=2, sampling_seed=5, shards=2)]
    [[7, 7, 9, 9], [11, 11]]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from agentgym_budget.seeds import shard_sampling_seed

__all__ = ["LocalRolloutPool", "RolloutPool", "RolloutPoolFactory", "collect_sharded", "set_budget_progress",
           "shard_seeds"]


def shard_seeds(seeds: Sequence[int], group_size: int, sampling_seed: int, shards: int) -> list[tuple[list[int], int]]:
    """``[(env seeds, sampling seed)]`` per shard: consecutive whole groups, seeds from (sampling_seed, shard).

    One shard keeps ``sampling_seed`` itself, so ``shards=1`` is exactly one ``collect_episodes`` call.
    """
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    if group_size < 1 or len(seeds) % group_size:
        raise ValueError(f"{len(seeds)} seeds do not split into groups of {group_size}")
    groups = len(seeds) // group_size
    per_shard = math.ceil(groups / shards)
    bounds = range(0, groups, per_shard)
    if shards == 1:
        return [(list(seeds), int(sampling_seed))]
    return [(list(seeds[g * group_size:(g + per_shard) * group_size]),
             shard_sampling_seed(sampling_seed, index))
            for index, g in enumerate(bounds)]


def set_budget_progress(envs: Sequence[Any], episodes_done: int, env_steps_done: int,
                        budget_outcomes: dict[str, Any] | None = None) -> None:
    """Tell every env copy the run's global progress (what a curriculum budget follows) and, for an
    adaptive budget, the run's outcome table (``budget_outcomes``: what it draws from)."""
    for env in envs:
        schedule = env.get_wrapper_attr("schedule")
        env.get_wrapper_attr("set_progress")(env_steps_done if getattr(schedule, "unit", "episodes") == "steps"
                                             else episodes_done)
        if budget_outcomes is not None:
            env.get_wrapper_attr("set_outcomes")(budget_outcomes)


def collect_sharded(model: Any, tokenizer: Any, envs: list[Any], seeds: Sequence[int], config: Any,
                    sampling_seed: int, shards: int) -> list[Any]:
    """The shards of ``seeds`` one after another in this process (the reference every pool matches).

    The shards play on the first envs of ``envs``; one that raised comes back replaced (see
    :func:`~agentgym_budget.train.rollout.collect_episodes`).
    """
    from agentgym_budget.train.rollout import collect_episodes  # torch: imported when episodes are collected

    episodes: list[Any] = []
    for shard_env_seeds, shard_seed in shard_seeds(seeds, config.group_size, sampling_seed, shards):
        playing = envs[:len(shard_env_seeds)]
        episodes += collect_episodes(model, tokenizer, playing, shard_env_seeds, config, sampling_seed=shard_seed)
        envs[:len(shard_env_seeds)] = playing  # an env that raised comes back replaced
    return episodes


class RolloutPool(Protocol):
    """Collects an update's episodes under the model's current weights, in the order of ``seeds``."""

    def collect(self, model: Any, seeds: Sequence[int], sampling_seed: int, shards: int, episodes_done: int = 0,
                env_steps_done: int = 0, budget_outcomes: dict[str, Any] | None = None) -> list[Any]: ...

    def close(self) -> None: ...


#: ``factory(config, model, tokenizer) -> RolloutPool``: how the trainer is handed a rollout backend.
RolloutPoolFactory = Callable[[Any, Any, Any], RolloutPool]


class LocalRolloutPool:
    """The shards in this process, on env copies kept across updates (``rollout_backend="local"``)."""

    def __init__(self, config: Any, model: Any, tokenizer: Any) -> None:
        from agentgym_budget.train.rollout import make_train_env

        self.config, self.tokenizer = config, tokenizer
        self.envs = [make_train_env(config) for _ in range(config.episodes_per_update)]

    def collect(self, model: Any, seeds: Sequence[int], sampling_seed: int, shards: int, episodes_done: int = 0,
                env_steps_done: int = 0, budget_outcomes: dict[str, Any] | None = None) -> list[Any]:
        set_budget_progress(self.envs, episodes_done, env_steps_done, budget_outcomes)
        return collect_sharded(model, self.tokenizer, self.envs, seeds, self.config, sampling_seed, shards)

    def close(self) -> None:
        for env in self.envs:
            env.close()

"""The trainer's group rollouts on Ray actors, with the learner's batch identical to a local one.

An update's episodes are split into shards of whole groups
(:func:`~agentgym_budget.train.sharding.shard_seeds`).
:func:`~agentgym_budget.train.sharding.collect_sharded` runs the shards one after another in
this process; :class:`RayRolloutPool` runs them on actors.  Both give the same episodes — hence
the same advantages and the same learner batch — for the same seeds and ``shards``, whatever
the number of actors.  The trainer gets the pool as a factory:
``Trainer(config, rollout_pool=RayRolloutPool.for_config)`` (what ``agentgym-budget train
--rollout-backend ray`` does).

The actors are :class:`~agentgym_budget.distributed.actor.EpisodeActor` s, the evaluator's
Ray executor's too.  The pool ships the config, model and tokenizer to each actor once, and then
the policy's weights once per update: one ``ray.put`` of the state dict, fetched by each actor
from the object store.  Each actor keeps its env copies across updates.  The actors, their
start and the death rule are the one Ray driver's
(:class:`~agentgym_budget.distributed.driver.ActorDriver`, the evaluator's executor's too): if an
actor dies, its shards are run again first on a fresh actor (episodes are a pure function of
weights, seeds and sampling seed, so the re-run is the same episodes).

Example (needs the ``llm`` and ``ray`` extras):
    >>> from agentgym_budget.train import TrainConfig, tiny_model_and_tokenizer  # doctest: +SKIP
    >>> config = TrainConfig(env_id="KeyDoor-v0", budget="fixed:3", max_new_tokens=4)  # doctest: +SKIP
    >>> model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0")  # doctest: +SKIP
    >>> with RayRolloutPool(config, model, tokenizer, actors=2) as pool:  # doctest: +SKIP
    ...     episodes = pool.collect(model, seeds=[7, 7, 9, 9], sampling_seed=0, shards=2)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from agentgym_budget.distributed.actor import EpisodeActor
from agentgym_budget.distributed.driver import ActorDriver
from agentgym_budget.train.sharding import shard_seeds

__all__ = ["RayRolloutPool"]


class RayRolloutPool:
    """Collects an update's episodes on ``actors`` Ray actors (see the module docstring).

    Args:
        config: the trainer's ``TrainConfig`` (env, budget, sampling parameters).
        model, tokenizer: shipped to every actor once (a CPU copy of the model).
        actors: number of actors; address: the cluster to join if Ray is not initialised.
        cpus_per_actor: logical CPUs per actor.
        max_actor_failures: actor deaths tolerated in one update's collection.
        max_shard_failures: actor deaths one shard may cause before the update gives up on it.
    """

    def __init__(self, config: Any, model: Any, tokenizer: Any, actors: int = 2, *, address: str | None = None,
                 cpus_per_actor: float = 1.0, max_actor_failures: int = 8, max_shard_failures: int = 3) -> None:
        import torch

        if actors < 1:
            raise ValueError(f"actors must be >= 1, got {actors}")
        self.config = config
        self.driver = ActorDriver(EpisodeActor, actors=actors, address=address, cpus_per_actor=cpus_per_actor,
                                  max_actor_failures=max_actor_failures, max_item_failures=max_shard_failures,
                                  actor_kwargs={"torch_threads": torch.get_num_threads()}, what="rollout actor",
                                  describe=lambda shard: f"a shard of {len(shard[0])} episodes (seeds {shard[0][:4]}...)")
        self.driver.start()
        self._model_ref = self.driver.ray.put((config, _cpu_copy(model), tokenizer))
        self._model = (self._model_ref.hex(), [self._model_ref])
        self._weights_ref: Any = None

    @classmethod
    def for_config(cls, config: Any, model: Any, tokenizer: Any) -> RayRolloutPool:
        """The pool ``config`` asks for (``rollout_actors``, ``ray_address``): the trainer's rollout-pool factory."""
        return cls(config, model, tokenizer, config.rollout_actors, address=config.ray_address)

    def __enter__(self) -> RayRolloutPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def actors(self) -> list[Any]:
        return self.driver.actors

    @property
    def actor_failures(self) -> int:
        """Actor deaths over the pool's lifetime."""
        return self.driver.actor_failures

    def collect(self, model: Any, seeds: Sequence[int], sampling_seed: int, shards: int, episodes_done: int = 0,
                env_steps_done: int = 0, budget_outcomes: dict[str, Any] | None = None) -> list[Any]:
        """The episodes of ``seeds`` (groups of ``config.group_size``), in order, under ``model``'s current weights."""
        self._weights_ref = self.driver.ray.put(
            {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()})
        weights = (self._weights_ref.hex(), [self._weights_ref])

        def submit(actor: Any, shard: tuple[list[int], int]) -> Any:
            shard_seeds_, shard_sampling_seed = shard
            return actor.collect.remote(*self._model, *weights, shard_seeds_, shard_sampling_seed, episodes_done,
                                        env_steps_done, budget_outcomes)

        work = shard_seeds(seeds, self.config.group_size, sampling_seed, shards)
        return [episode for shard in self.driver.run(work, submit) for episode in shard or ()]

    def close(self) -> None:
        """Kill the actors (and shut Ray down if this pool started it)."""
        self.driver.close()


def _cpu_copy(model: Any) -> Any:
    if all(p.device.type == "cpu" for p in model.parameters()):
        return model
    return copy.deepcopy(model).to("cpu")

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
from the object store.  Each actor keeps its env copies across updates.  If an actor dies, its shards are run
again on a fresh actor (episodes are a pure function of weights, seeds and sampling seed, so
the re-run is the same episodes).

Example (needs the ``llm`` and ``ray`` extras):
    >>> from agentgym_budget.train import TrainConfig, tiny_model_and_tokenizer  # doctest: +SKIP
    >>> config = TrainConfig(env_id="KeyDoor-v0", budget="fixed:3", max_new_tokens=4)  # doctest: +SKIP
    >>> model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0")  # doctest: +SKIP
    >>> with RayRolloutPool(config, model, tokenizer, actors=2) as pool:  # doctest: +SKIP
    ...     episodes = pool.collect(model, seeds=[7, 7, 9, 9], sampling_seed=0, shards=2)
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from typing import Any

from agentgym_budget.distributed.actor import EpisodeActor
from agentgym_budget.distributed.ray_pool import ActorPoolExhaustedError, import_ray, init_ray
from agentgym_budget.train.sharding import shard_seeds

__all__ = ["RayRolloutPool"]


class RayRolloutPool:
    """Collects an update's episodes on ``actors`` Ray actors (see the module docstring).

    Args:
        config: the trainer's ``TrainConfig`` (env, budget, sampling parameters).
        model, tokenizer: shipped to every actor once (a CPU copy of the model).
        actors: number of actors; address: the cluster to join if Ray is not initialised.
        cpus_per_actor: logical CPUs per actor.
        max_actor_failures: actor deaths tolerated over the pool's life.
    """

    def __init__(self, config: Any, model: Any, tokenizer: Any, actors: int = 2, *, address: str | None = None,
                 cpus_per_actor: float = 1.0, max_actor_failures: int = 8) -> None:
        import torch

        if actors < 1:
            raise ValueError(f"actors must be >= 1, got {actors}")
        self.config = config
        self.cpus_per_actor = cpus_per_actor
        self.max_actor_failures = max_actor_failures
        self.actor_failures = 0
        ray = self._ray = import_ray()
        self._started_ray = False
        if not ray.is_initialized():
            init_ray(ray, address)
            self._started_ray = True
        self._torch_threads = torch.get_num_threads()
        self._model_ref = ray.put((config, _cpu_copy(model), tokenizer))
        self._model = (self._model_ref.hex(), [self._model_ref])
        self._actors = [self._new_actor() for _ in range(actors)]
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
        return list(self._actors)

    def _new_actor(self) -> Any:
        remote_class = self._ray.remote(EpisodeActor).options(num_cpus=self.cpus_per_actor)
        return remote_class.remote(torch_threads=self._torch_threads)

    def collect(self, model: Any, seeds: Sequence[int], sampling_seed: int, shards: int, episodes_done: int = 0,
                env_steps_done: int = 0) -> list[Any]:
        """The episodes of ``seeds`` (groups of ``config.group_size``), in order, under ``model``'s current weights."""
        ray = self._ray
        self._weights_ref = ray.put({name: tensor.detach().cpu() for name, tensor in model.state_dict().items()})
        weights = (self._weights_ref.hex(), [self._weights_ref])
        work = shard_seeds(seeds, self.config.group_size, sampling_seed, shards)
        results: list[list[Any] | None] = [None] * len(work)
        in_flight: dict[Any, tuple[Any, int]] = {}
        for index, actor in zip(range(len(work)), _cycle(lambda: self._actors)):
            in_flight[self._submit(actor, weights, work[index], episodes_done, env_steps_done)] = (actor, index)
        try:
            while in_flight:
                [ref], _ = ray.wait(list(in_flight), num_returns=1)
                actor, index = in_flight.pop(ref)
                try:
                    results[index] = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as error:
                    replacement = self._replace(actor, error)
                    in_flight[self._submit(replacement, weights, work[index], episodes_done, env_steps_done)] = (
                        replacement, index)
        except BaseException:
            self.close()
            raise
        return [episode for shard in results for episode in shard or ()]

    def _submit(self, actor: Any, weights: tuple[str, list[Any]], shard: tuple[list[int], int], episodes_done: int,
                env_steps_done: int) -> Any:
        seeds, sampling_seed = shard
        return actor.collect.remote(*self._model, *weights, seeds, sampling_seed, episodes_done, env_steps_done)

    def _replace(self, actor: Any, error: BaseException) -> Any:
        """A live actor to re-run a dead actor's shard on (a fresh one replaces the dead one)."""
        if actor not in self._actors:  # already replaced, on the failure of another of its shards
            return self._actors[0]
        self.actor_failures += 1
        if self.actor_failures > self.max_actor_failures:
            raise ActorPoolExhaustedError(f"{self.actor_failures} rollout actors died; last error: {error}") from error
        warnings.warn(f"a rollout actor died ({type(error).__name__}); its shard is re-run on a fresh actor",
                      RuntimeWarning, stacklevel=3)
        replacement = self._new_actor()
        self._actors[self._actors.index(actor)] = replacement
        self._ray.kill(actor)
        return replacement

    def close(self) -> None:
        """Kill the actors (and shut Ray down if this pool started it)."""
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []
        if self._started_ray:
            self._ray.shutdown()
            self._started_ray = False


def _cycle(actors: Any):
    while True:
        yield from actors()


def _cpu_copy(model: Any) -> Any:
    if all(p.device.type == "cpu" for p in model.parameters()):
        return model
    return copy.deepcopy(model).to("cpu")

"""The one Ray actor type of both Ray backends: :class:`EpisodeActor`, a worker's env copies and the episodes it plays.

:class:`~agentgym_budget.distributed.ray_executor.RayExecutor` (evaluation) sends it chunks of
episode jobs (:meth:`EpisodeActor.run_chunk`: an
:class:`~agentgym_budget.episodes.runner.EpisodeRunner`);
:class:`~agentgym_budget.distributed.ray_rollouts.RayRolloutPool` (training) sends it shards of
seeds (:meth:`EpisodeActor.collect`:
:func:`~agentgym_budget.train.rollout.collect_episodes`).  Both play their episodes in the one
loop, :func:`~agentgym_budget.episodes.runner.play_episodes`; what the actor adds is shared by both:
its set-up (the env ids registered, torch's thread count, the caller's hook), its env copies kept
across calls (closed and made again only when the env they were made for changes), and the values
it takes from the object store (a rollout spec, a model, weights), each fetched once per key.

A value comes as ``(key, [ObjectRef])``: the list keeps Ray from resolving the reference on
every call; the actor fetches it only when the key differs from the last one of its kind.  (A
box may hold the value itself: the actor's body then runs in-process, as in the example below.)

Example (the actor's body runs in-process too; Ray is not needed for that):
    >>> import ray  # doctest: +SKIP
    >>> from agentgym_budget.episodes.records import EpisodeJob
    >>> from agentgym_budget.episodes.runner import RolloutSpec
    >>> spec = RolloutSpec("KeyDoor-Budget-v0", "expert", seed=0, max_budget=4)
    >>> actor = ray.remote(EpisodeActor).remote()  # doctest: +SKIP
    >>> ref = ray.put(spec)  # doctest: +SKIP
    >>> records = ray.get(actor.run_chunk.remote(ref.hex(), [ref], [EpisodeJob(0, 0, 4)]))  # doctest: +SKIP
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from agentgym_budget.episodes.records import EpisodeJob, EpisodeRecord
from agentgym_budget.episodes.runner import EpisodeRunner, RolloutSpec

__all__ = ["EpisodeActor"]


class EpisodeActor:
    """A Ray actor's body: env copies kept across calls, evaluation chunks and training shards played on them.

    Args:
        setup: called once before anything else (e.g. to register envs made at run time:
            actors are separate processes and import only the package).
        torch_threads: torch's thread count in this actor (the trainer's driver's, so that
            the actor's kernels and numerics are the driver's); ``None`` leaves torch alone
            (and unimported, for evaluation).

    Example:
        >>> from agentgym_budget.episodes.records import EpisodeJob
        >>> from agentgym_budget.episodes.runner import RolloutSpec
        >>> spec = RolloutSpec("KeyDoor-Budget-v0", "expert", seed=0, max_budget=4, concurrency=2)
        >>> actor = EpisodeActor()
        >>> [r.won for r in actor.run_chunk("spec-1", [spec], [EpisodeJob(task, 0, 4) for task in range(3)])]
        [True, True, True]
        >>> len(actor.envs)  # kept for the next chunk
        2
        >>> actor.close()
    """

    def __init__(self, setup: Callable[[], None] | None = None, torch_threads: int | None = None) -> None:
        import agentgym_budget  # noqa: F401  (registers the env ids in this worker process)

        if torch_threads is not None:
            import torch

            torch.set_num_threads(torch_threads)
        if setup is not None:
            setup()
        self.envs: list[Any] = []
        self._env_key: Any = None  # what self.envs were made for
        self._fetched: dict[str, tuple[str, Any]] = {}  # kind -> (key, value) of the last fetch
        self._runner: EpisodeRunner | None = None

    # -- evaluation -------------------------------------------------------------------------
    def run_chunk(self, spec_key: str, spec_box: list[Any], jobs: list[EpisodeJob]) -> list[EpisodeRecord]:
        """The records of ``jobs`` under the :class:`RolloutSpec` ``spec_box[0]``; its policy is built once per spec."""
        spec: RolloutSpec = self._fetch("spec", spec_key, spec_box)[0]
        env_key = ("eval", spec.env_id, spec.max_budget, spec.env_kwargs)
        if self._runner is None or self._runner.spec is not spec or self._env_key != env_key:
            self._runner = EpisodeRunner(spec, self._envs_for(env_key))
        records = self._runner.run(jobs)
        self.envs = self._runner.envs  # with the copies the runner made
        return records

    # -- training ---------------------------------------------------------------------------
    def collect(self, model_key: str, model_box: list[Any], weights_key: str, weights_box: list[Any],
                seeds: list[int], sampling_seed: int, episodes_done: int, env_steps_done: int,
                budget_outcomes: dict[str, Any] | None = None) -> list[Any]:
        """One shard of an update's episodes: ``model_box[0]`` is ``(TrainConfig, model, tokenizer)``
        (fetched once), ``weights_box[0]`` the update's state dict (loaded once per update)."""
        from agentgym_budget.train.rollout import make_train_env
        from agentgym_budget.train.sharding import collect_sharded, set_budget_progress

        (config, model, tokenizer), _ = self._fetch("model", model_key, model_box)
        weights, new_weights = self._fetch("weights", weights_key, weights_box)
        if new_weights:
            model.load_state_dict(weights)
        envs = self._envs_for(("train", config))
        while len(envs) < len(seeds):
            envs.append(make_train_env(config))
        set_budget_progress(envs[:len(seeds)], episodes_done, env_steps_done, budget_outcomes)
        # One shard is one collect_episodes call on the first envs; an env that raised comes back replaced.
        return collect_sharded(model, tokenizer, envs, seeds, config, sampling_seed, shards=1)

    # -- what both share --------------------------------------------------------------------
    def _fetch(self, kind: str, key: str, box: list[Any]) -> tuple[Any, bool]:
        """The value of ``kind`` under ``key`` — from the object store only when ``key`` is new — and whether it was."""
        last = self._fetched.get(kind)
        if last is not None and last[0] == key:
            return last[1], False
        value = _resolve(box[0])
        self._fetched[kind] = (key, value)
        return value, True

    def _envs_for(self, env_key: Any) -> list[Any]:
        """The env copies, emptied (their envs closed) when they were made for another env than ``env_key``."""
        if self._env_key != env_key:
            self.close()
            self._env_key = env_key
        return self.envs

    def close(self) -> None:
        """Close the env copies."""
        for env in self.envs:
            env.close()
        self.envs, self._runner, self._env_key = [], None, None

    def pid(self) -> int:
        import os

        return os.getpid()


def _resolve(item: Any) -> Any:
    """An ``ObjectRef``'s value from the object store; any other item is the value itself."""
    if "ray" not in sys.modules:  # no ObjectRef can exist without Ray imported
        return item
    import ray

    return ray.get(item) if isinstance(item, ray.ObjectRef) else item

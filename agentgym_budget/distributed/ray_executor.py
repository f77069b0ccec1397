"""Episode rollouts on a Ray cluster: a pool of actors implementing the evaluator's ``Executor``.

:class:`RayExecutor` runs :class:`~agentgym_budget.episodes.records.EpisodeJob` s on Ray actors
(:class:`~agentgym_budget.distributed.actor.EpisodeActor`, the trainer's rollout pool's too).
Each actor builds its own env and policy from the (picklable)
:class:`~agentgym_budget.episodes.runner.RolloutSpec` — env id + kwargs, policy name + kwargs or
a policy object — so no env object ever crosses the wire.  The spec is put once into the
object store per :meth:`RayExecutor.run`; an actor fetches and builds it once and keeps its
env (and policy) for every later chunk and run with the same spec, so a trainer that ships a
new policy per update pays one object-store transfer per actor and update, and never rebuilds
the env.

Results are identical to the local executors': every seed of an episode derives only from
(base seed, task, attempt) (see :mod:`agentgym_budget.seeds`), never from which actor
runs it or when, and records are returned in the order of the jobs.

Faults: jobs are handed out in chunks, a few per actor ahead of time, by the one Ray driver
(:class:`~agentgym_budget.distributed.driver.ActorDriver`, the trainer's rollout pool's too).  If
an actor dies (node lost, OOM, ``ray.kill``), the unfinished chunks it held are re-queued and a
fresh actor replaces it (up to ``max_actor_failures`` deaths per run, ``max_chunk_failures`` per
chunk).  A chunk's records are accepted once (keyed by job), so a re-run can never count an
episode twice.  An exception raised by the env or the policy is a bug, not a fault: it is raised
in the driver.

Example (a local Ray instance is started if none is running):
    >>> from agentgym_budget.distributed import RayExecutor          # doctest: +SKIP
    >>> from agentgym_budget.episodes.records import EpisodeJob
    >>> from agentgym_budget.episodes.runner import RolloutSpec
    >>> spec = RolloutSpec("KeyDoor-Budget-v0", "noisy-expert", seed=0, max_budget=4)
    >>> jobs = [EpisodeJob(task, attempt, 4) for task in range(10) for attempt in range(4)]
    >>> with RayExecutor(actors=2) as executor:                        # doctest: +SKIP
    ...     records = executor.run(spec, jobs)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from agentgym_budget.distributed.actor import EpisodeActor
from agentgym_budget.distributed.driver import ActorDriver
from agentgym_budget.episodes.records import EpisodeJob, EpisodeRecord
from agentgym_budget.episodes.runner import RecordCallback, RolloutSpec

__all__ = ["RayExecutor"]


class RayExecutor:
    """Runs episode jobs on ``actors`` Ray actors (the evaluator's ``Executor`` protocol).

    Args:
        actors: number of actors (``None``: one per CPU of the cluster, divided by
            ``cpus_per_actor``).
        address: the cluster to join when Ray is not initialised yet (``"auto"``, ``"ray://…"``,
            ``"HOST:PORT"``); ``None`` starts a local instance.  Ignored if Ray is initialised.
        chunk_size: episodes per chunk (``None``: about 4 chunks per actor, at most 64 episodes).
        cpus_per_actor: logical CPUs each actor reserves (fractions allowed).
        max_actor_failures: actor deaths tolerated per run; each is replaced by a fresh actor.
        max_chunk_failures: actor deaths one chunk may cause before the run gives up on it.
        worker_setup: called once in every actor before anything else (e.g. to register
            envs made at run time — actors are separate processes and import only the package).
        init_kwargs: extra keyword arguments for ``ray.init`` when this executor starts Ray.

    The actors live until :meth:`close` (or the end of a ``with`` block), so successive runs
    reuse them and their envs.
    """

    def __init__(
        self,
        actors: int | None = None,
        *,
        address: str | None = None,
        chunk_size: int | None = None,
        cpus_per_actor: float = 1.0,
        max_actor_failures: int = 8,
        max_chunk_failures: int = 3,
        worker_setup: Callable[[], None] | None = None,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.chunk_size = chunk_size
        self.driver = ActorDriver(EpisodeActor, actors=actors, address=address, cpus_per_actor=cpus_per_actor,
                                  max_actor_failures=max_actor_failures, max_item_failures=max_chunk_failures,
                                  actor_args=(worker_setup,), init_kwargs=init_kwargs, describe=_describe_chunk)
        self._spec: RolloutSpec | None = None
        self._spec_ref: Any = None

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Connect to (or start) Ray and create the actors; :meth:`run` does it when needed."""
        self.driver.start()

    def close(self) -> None:
        """Kill the actors (and shut Ray down if this executor started it)."""
        self.driver.close()
        self._spec = self._spec_ref = None

    @property
    def actors(self) -> list[Any]:
        """The live actor handles (e.g. to ``ray.kill`` one in a fault test)."""
        return self.driver.actors

    @property
    def actor_failures(self) -> int:
        """Actor deaths over the executor's lifetime (for reporting)."""
        return self.driver.actor_failures

    # -- running --------------------------------------------------------------------------
    def run(
        self, spec: RolloutSpec, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None
    ) -> list[EpisodeRecord]:
        """Run ``jobs``; return their records in job order, calling ``on_record`` once per job as it finishes."""
        if len(set(jobs)) != len(jobs):
            raise ValueError("jobs contain duplicates; every (task, attempt, budget) must appear once")
        if not jobs:
            return []
        self.start()
        spec_key, spec_box = self._put_spec(spec)
        done: dict[EpisodeJob, EpisodeRecord] = {}

        def accept(chunk: list[EpisodeJob], records: list[EpisodeRecord]) -> None:
            for job, record in zip(chunk, records):
                if job in done:  # defensive: a job is counted once, whatever happens upstream
                    continue
                done[job] = record
                if on_record is not None:
                    on_record(record)

        self.driver.run(self._chunks(jobs), lambda actor, chunk: actor.run_chunk.remote(spec_key, spec_box, chunk),
                        on_result=accept)
        return [done[job] for job in jobs]

    def _put_spec(self, spec: RolloutSpec) -> tuple[str, list[Any]]:
        if self._spec_ref is None or not _same_spec(spec, self._spec):
            self._spec, self._spec_ref = spec, self.driver.ray.put(spec)
        return self._spec_ref.hex(), [self._spec_ref]

    def _chunks(self, jobs: Sequence[EpisodeJob]) -> list[list[EpisodeJob]]:
        size = self.chunk_size or min(64, max(1, math.ceil(len(jobs) / (4 * len(self.driver.actors)))))
        return [list(jobs[i:i + size]) for i in range(0, len(jobs), size)]


def _describe_chunk(chunk: list[EpisodeJob]) -> str:
    return f"a chunk of {len(chunk)} episodes (first {chunk[0]})"


def _same_spec(a: RolloutSpec, b: RolloutSpec | None) -> bool:
    try:
        return b is not None and (a is b or bool(a == b))
    except Exception:  # a policy object whose __eq__ does not return a bool
        return False

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

Faults: jobs are handed out in chunks, a few per actor ahead of time.  If an actor dies
(node lost, OOM, ``ray.kill``), the unfinished chunks it held are re-queued for the other
actors and a fresh actor replaces it (up to ``max_actor_failures`` deaths per run).  A chunk's
records are accepted once (keyed by job), so a re-run can never count an episode twice.  An
exception raised by the env or the policy is a bug, not a fault: it is raised in the driver.

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

import collections
import contextlib
import math
import signal
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.distributed.actor import EpisodeActor
from agentgym_budget.episodes.records import EpisodeJob, EpisodeRecord
from agentgym_budget.episodes.runner import RecordCallback, RolloutSpec
from agentgym_budget.policies.served import ServedModelError

__all__ = ["ActorPoolExhaustedError", "RayExecutor", "import_ray", "init_ray", "keep_sigterm_handler"]

#: Chunks queued per actor, so that an actor never waits for the driver between chunks.
CHUNKS_IN_FLIGHT_PER_ACTOR = 2


class ActorPoolExhaustedError(RuntimeError):
    """Too many actors died during one run (or one chunk kept killing its actors)."""


def import_ray() -> Any:
    """``import ray``, or a :class:`~agentgym_budget._optional.MissingBackendError` naming the extra."""
    return require("ray", "ray", "the Ray backend (--backend ray)")


@dataclass
class _Chunk:
    jobs: list[EpisodeJob]
    failures: int = 0  # actor deaths while this chunk was in flight on it


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
        if actors is not None and actors < 1:
            raise ValueError(f"actors must be >= 1, got {actors}")
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        if cpus_per_actor <= 0:
            raise ValueError(f"cpus_per_actor must be > 0, got {cpus_per_actor}")
        self.requested_actors = actors
        self.address = address
        self.chunk_size = chunk_size
        self.cpus_per_actor = cpus_per_actor
        self.max_actor_failures = max_actor_failures
        self.max_chunk_failures = max_chunk_failures
        self.worker_setup = worker_setup
        self.init_kwargs = dict(init_kwargs or {})
        self.actor_failures = 0  # over the executor's lifetime (for reporting)
        self._ray: Any = None
        self._started_ray = False
        self._actors: list[Any] = []
        self._spec: RolloutSpec | None = None
        self._spec_ref: Any = None

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Connect to (or start) Ray and create the actors; :meth:`run` does it when needed."""
        if self._actors:
            return
        ray = self._ray = import_ray()
        if not ray.is_initialized():
            init_ray(ray, self.address, **self.init_kwargs)
            self._started_ray = True
        cluster_cpus = float(ray.cluster_resources().get("CPU", 0.0))
        actors = self.requested_actors
        if actors is None:
            actors = max(1, int(cluster_cpus // self.cpus_per_actor))
        if actors * self.cpus_per_actor > cluster_cpus:
            raise ValueError(
                f"{actors} actors x {self.cpus_per_actor:g} CPU need {actors * self.cpus_per_actor:g} CPUs but the "
                f"Ray cluster has {cluster_cpus:g}: use fewer actors, a smaller cpus_per_actor, or more nodes"
            )
        self._actors = [self._new_actor() for _ in range(actors)]

    def close(self) -> None:
        """Kill the actors (and shut Ray down if this executor started it)."""
        if self._ray is None:
            return
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []
        self._spec = self._spec_ref = None
        if self._started_ray:
            self._ray.shutdown()
            self._started_ray = False

    @property
    def actors(self) -> list[Any]:
        """The live actor handles (e.g. to ``ray.kill`` one in a fault test)."""
        return list(self._actors)

    def _new_actor(self) -> Any:
        remote_class = self._ray.remote(EpisodeActor).options(num_cpus=self.cpus_per_actor)
        return remote_class.remote(self.worker_setup)

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
        ray = self._ray
        spec_key, spec_box = self._put_spec(spec)
        pending = collections.deque(_Chunk(chunk) for chunk in self._chunks(jobs))
        in_flight: dict[Any, tuple[Any, _Chunk]] = {}
        done: dict[EpisodeJob, EpisodeRecord] = {}
        failures_this_run = 0
        try:
            while pending or in_flight:
                self._submit(pending, in_flight, spec_key, spec_box)
                [ref], _ = ray.wait(list(in_flight), num_returns=1)
                actor, chunk = in_flight.pop(ref)
                try:
                    records = ray.get(ref)
                except ray.exceptions.RayTaskError as error:
                    # A served model's failure is the one line it is in-process, not Ray's wrapper
                    # (a subclass of both, whose text is the remote traceback).
                    if isinstance(error.cause, ServedModelError):
                        raise error.cause from None
                    raise
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                        ray.exceptions.ObjectLostError) as error:
                    if self._retire(actor):
                        failures_this_run += 1
                        self._check_failures(failures_this_run, error)
                    chunk.failures += 1
                    if chunk.failures >= self.max_chunk_failures:
                        raise ActorPoolExhaustedError(
                            f"a chunk of {len(chunk.jobs)} episodes (first {chunk.jobs[0]}) lost its actor "
                            f"{chunk.failures} times; last error: {error}"
                        ) from error
                    pending.appendleft(chunk)  # re-run it first: its episodes are the oldest missing
                    continue
                for job, record in zip(chunk.jobs, records):
                    if job in done:  # defensive: a job is counted once, whatever happens upstream
                        continue
                    done[job] = record
                    if on_record is not None:
                        on_record(record)
        except BaseException:
            # Interrupted or failed: do not leave actors working on chunks nobody will collect.
            self.close()
            raise
        return [done[job] for job in jobs]

    def _put_spec(self, spec: RolloutSpec) -> tuple[str, list[Any]]:
        if self._spec_ref is None or not _same_spec(spec, self._spec):
            self._spec, self._spec_ref = spec, self._ray.put(spec)
        return self._spec_ref.hex(), [self._spec_ref]

    def _chunks(self, jobs: Sequence[EpisodeJob]) -> list[list[EpisodeJob]]:
        size = self.chunk_size or min(64, max(1, math.ceil(len(jobs) / (4 * len(self._actors)))))
        return [list(jobs[i:i + size]) for i in range(0, len(jobs), size)]

    def _submit(self, pending: collections.deque[_Chunk], in_flight: dict[Any, tuple[Any, _Chunk]],
                spec_key: str, spec_box: list[Any]) -> None:
        load = collections.Counter(actor for actor, _ in in_flight.values())
        for _ in range(CHUNKS_IN_FLIGHT_PER_ACTOR):  # round-robin, so that a short run uses every actor
            for actor in self._actors:
                if pending and load[actor] < CHUNKS_IN_FLIGHT_PER_ACTOR:
                    chunk = pending.popleft()
                    in_flight[actor.run_chunk.remote(spec_key, spec_box, chunk.jobs)] = (actor, chunk)
                    load[actor] += 1
        if not in_flight:
            raise ActorPoolExhaustedError("no live Ray actor is left to run the remaining episodes")

    def _retire(self, actor: Any) -> bool:
        """Replace a dead actor; ``False`` if it was already replaced (another of its chunks failed first)."""
        if actor not in self._actors:
            return False
        self._actors.remove(actor)
        self._ray.kill(actor)  # make sure a half-dead actor does not keep a CPU
        self.actor_failures += 1
        self._actors.append(self._new_actor())
        return True

    def _check_failures(self, failures: int, error: BaseException) -> None:
        if failures > self.max_actor_failures:
            raise ActorPoolExhaustedError(
                f"{failures} Ray actors died during this run (max_actor_failures={self.max_actor_failures}); "
                f"last error: {error}"
            ) from error
        warnings.warn(f"a Ray actor died ({type(error).__name__}); its unfinished episodes are re-run on "
                      f"another actor", RuntimeWarning, stacklevel=3)


def init_ray(ray: Any, address: str | None, **kwargs: Any) -> None:
    """``ray.init(address, **kwargs)``; a local instance (``address=None``) listens on 127.0.0.1 only.

    Ray on Linux binds every server of a local instance (GCS, raylet, driver, actors) to all
    interfaces and advertises the machine's IP, even with ``_node_ip_address="127.0.0.1"``
    (Ray resolves that to the machine's IP).  Ray's own local-only mode (the one it uses on
    macOS and Windows, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) binds them to the loopback
    address: it is switched on while the local instance starts (its processes inherit it).
    Joining a cluster (``address`` given) is left as Ray does it.  The dashboard is off by
    default for a local instance.  The caller's SIGTERM handler is kept.

    Example:
        >>> ray = import_ray()                                   # doctest: +SKIP
        >>> init_ray(ray, None, num_cpus=2)                      # doctest: +SKIP
        >>> ray._private.worker._global_node.node_ip_address     # doctest: +SKIP
        '127.0.0.1'
    """
    if address is not None:
        with keep_sigterm_handler():
            ray.init(address=address, **kwargs)
        return
    import os

    from ray._private import ray_constants  # read by ray._private.services at init time

    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("_node_ip_address", "127.0.0.1")
    old_env, old_flag = os.environ.get(_RAY_LOCAL_ONLY), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[_RAY_LOCAL_ONLY], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        with keep_sigterm_handler():
            ray.init(**kwargs)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = old_flag
        if old_env is None:
            os.environ.pop(_RAY_LOCAL_ONLY, None)
        else:
            os.environ[_RAY_LOCAL_ONLY] = old_env


_RAY_LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def keep_sigterm_handler() -> Iterator[None]:
    """``ray.init`` installs a crash handler for SIGTERM in the driver; put back the caller's.

    (The evaluator turns SIGTERM into a clean stop that leaves a resumable results file.)
    """
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _same_spec(a: RolloutSpec, b: RolloutSpec | None) -> bool:
    try:
        return b is not None and (a is b or bool(a == b))
    except Exception:  # a policy object whose __eq__ does not return a bool
        return False

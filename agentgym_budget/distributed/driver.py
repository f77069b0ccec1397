"""The one Ray driver: start or join Ray, keep a pool of actors, run work items on them, replace the dead.

Evaluation (:class:`~agentgym_budget.distributed.ray_executor.RayExecutor`: chunks of episode
jobs) and training (:class:`~agentgym_budget.distributed.ray_rollouts.RayRolloutPool`: shards of
GRPO groups) both run on :class:`ActorDriver`; they differ only in what a work item is and which
actor method plays it.  What they share, decided here once:

* **start**: join the cluster at ``address``, or start a local instance that listens on
  127.0.0.1 only (:func:`init_ray`); ``actors`` Ray actors of one class, each reserving
  ``cpus_per_actor`` logical CPUs — more than the cluster has is a one-line ``ValueError``;
* **submit**: items go out round-robin, at most :data:`ITEMS_IN_FLIGHT_PER_ACTOR` per actor, so
  an actor never waits for the driver and a short run still uses every actor;
* **the death rule**: an item whose actor died (``RayActorError``, ``WorkerCrashedError``,
  ``ObjectLostError``) is run again first, on a fresh actor that replaces the dead one (work
  items are pure functions of their input, so a re-run gives the same result); more than
  ``max_actor_failures`` deaths in one run, or ``max_item_failures`` deaths of one item, end the
  run with :class:`ActorPoolExhaustedError`; an exception raised *by the work* is raised, not
  retried (a served model's :class:`~agentgym_budget.policies.served.ServedModelError` as its own
  one line, not Ray's remote traceback);
* **close**: kill the actors, and shut Ray down if this driver started it; an interrupted or
  failed run closes the driver, so no actor goes on with work nobody will collect.

Example (needs the ``ray`` extra):
    >>> class Doubler:                                                        # doctest: +SKIP
    ...     def run(self, x): return 2 * x
    >>> with ActorDriver(Doubler, actors=2) as driver:                        # doctest: +SKIP
    ...     driver.run([1, 2, 3], lambda actor, x: actor.run.remote(x))
    [2, 4, 6]
"""

from __future__ import annotations

import collections
import contextlib
import signal
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from agentgym_budget._optional import require
from agentgym_budget.policies.served import ServedModelError

__all__ = ["ITEMS_IN_FLIGHT_PER_ACTOR", "ActorDriver", "ActorPoolExhaustedError", "import_ray", "init_ray",
           "keep_sigterm_handler"]

#: Work items queued per actor, so that an actor never waits for the driver between items.
ITEMS_IN_FLIGHT_PER_ACTOR = 2

Item = TypeVar("Item")


class ActorPoolExhaustedError(RuntimeError):
    """Too many actors died during one run (or one work item kept killing its actors)."""


def import_ray() -> Any:
    """``import ray``, or a :class:`~agentgym_budget._optional.MissingBackendError` naming the extra."""
    return require("ray", "ray", "the Ray backend (--backend ray)")


@dataclass
class _Work(Generic[Item]):
    index: int  # the item's place in the run: results come back in item order
    item: Item
    failures: int = 0  # actor deaths while this item was in flight on it


class ActorDriver:
    """A pool of Ray actors of ``actor_class`` and the one submit / wait / replace loop (see the module docstring).

    Args:
        actor_class: the actor's class (made remote here); ``actor_args``/``actor_kwargs``
            build each actor, the replacements too.
        actors: number of actors (``None``: one per cluster CPU, divided by ``cpus_per_actor``).
        address: the cluster to join when Ray is not initialised yet (``"auto"``, ``"ray://…"``,
            ``"HOST:PORT"``); ``None`` starts a local instance.  Ignored if Ray is initialised.
        cpus_per_actor: logical CPUs each actor reserves (fractions allowed).
        max_actor_failures: actor deaths tolerated in one run; each dead actor is replaced.
        max_item_failures: actor deaths one work item may cause before the run gives up on it.
        init_kwargs: extra keyword arguments for ``ray.init`` when this driver starts Ray.
        what: how warnings and errors name the actors (``"Ray actor"``, ``"rollout actor"``).
        describe: a work item in an error message (e.g. ``"a chunk of 5 episodes (first ...)"``).
    """

    def __init__(self, actor_class: type, *, actors: int | None = None, address: str | None = None,
                 cpus_per_actor: float = 1.0, max_actor_failures: int = 8, max_item_failures: int = 3,
                 actor_args: Sequence[Any] = (), actor_kwargs: dict[str, Any] | None = None,
                 init_kwargs: dict[str, Any] | None = None, what: str = "Ray actor",
                 describe: Callable[[Any], str] = repr) -> None:
        if actors is not None and actors < 1:
            raise ValueError(f"actors must be >= 1, got {actors}")
        if cpus_per_actor <= 0:
            raise ValueError(f"cpus_per_actor must be > 0, got {cpus_per_actor}")
        self.actor_class, self.actor_args, self.actor_kwargs = actor_class, tuple(actor_args), dict(actor_kwargs or {})
        self.requested_actors, self.address, self.cpus_per_actor = actors, address, cpus_per_actor
        self.max_actor_failures, self.max_item_failures = max_actor_failures, max_item_failures
        self.init_kwargs, self.what, self.describe = dict(init_kwargs or {}), what, describe
        self.actor_failures = 0  # over the driver's lifetime (for reporting)
        self.ray: Any = None
        self._started_ray = False
        self._actors: list[Any] = []

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> ActorDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def actors(self) -> list[Any]:
        """The live actor handles (e.g. to ``ray.kill`` one in a fault test)."""
        return list(self._actors)

    def start(self) -> None:
        """Connect to (or start) Ray and create the actors; :meth:`run` does it when needed."""
        if self._actors:
            return
        ray = self.ray = import_ray()
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
                f"Ray cluster has {cluster_cpus:g}: use fewer actors, a smaller cpus_per_actor, or more nodes")
        self._actors = [self._new_actor() for _ in range(actors)]

    def close(self) -> None:
        """Kill the actors (and shut Ray down if this driver started it)."""
        if self.ray is None:
            return
        for actor in self._actors:
            self.ray.kill(actor)
        self._actors = []
        if self._started_ray:
            self.ray.shutdown()
            self._started_ray = False

    def _new_actor(self) -> Any:
        remote_class = self.ray.remote(self.actor_class).options(num_cpus=self.cpus_per_actor)
        return remote_class.remote(*self.actor_args, **self.actor_kwargs)

    # -- running --------------------------------------------------------------------------
    def run(self, items: Sequence[Item], submit: Callable[[Any, Item], Any],
            on_result: Callable[[Item, Any], None] | None = None) -> list[Any]:
        """Each item's result, in item order: ``submit(actor, item)`` returns the object ref of its work.

        ``on_result(item, result)`` is called as each item finishes (in finishing order).
        """
        if not items:
            return []
        self.start()
        pending = collections.deque(_Work(index, item) for index, item in enumerate(items))
        in_flight: dict[Any, tuple[Any, _Work[Item]]] = {}
        results: list[Any] = [None] * len(items)
        deaths = 0
        try:
            while pending or in_flight:
                self._submit(pending, in_flight, submit)
                [ref], _ = self.ray.wait(list(in_flight), num_returns=1)
                actor, work = in_flight.pop(ref)
                try:
                    result = self._result(ref)
                except _ActorDied as died:
                    if self._replace(actor):
                        deaths += 1
                        self._check_deaths(deaths, died.error)
                    self._requeue(pending, work, died.error)
                    continue
                results[work.index] = result
                if on_result is not None:
                    on_result(work.item, result)
        except BaseException:
            self.close()  # interrupted or failed: no actor goes on with work nobody will collect
            raise
        return results

    def _submit(self, pending: collections.deque[_Work[Item]], in_flight: dict[Any, tuple[Any, _Work[Item]]],
                submit: Callable[[Any, Item], Any]) -> None:
        load = collections.Counter(actor for actor, _ in in_flight.values())
        for _ in range(ITEMS_IN_FLIGHT_PER_ACTOR):  # round-robin, so that a short run uses every actor
            for actor in self._actors:
                if pending and load[actor] < ITEMS_IN_FLIGHT_PER_ACTOR:
                    work = pending.popleft()
                    in_flight[submit(actor, work.item)] = (actor, work)
                    load[actor] += 1
        if not in_flight:
            raise ActorPoolExhaustedError(f"no live {self.what} is left to run the remaining work")

    def _result(self, ref: Any) -> Any:
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as error:
            # A served model's failure is the one line it is in-process, not Ray's wrapper
            # (a subclass of both, whose text is the remote traceback).
            if isinstance(error.cause, ServedModelError):
                raise error.cause from None
            raise
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.ObjectLostError) as error:
            raise _ActorDied(error) from error

    def _requeue(self, pending: collections.deque[_Work[Item]], work: _Work[Item], error: BaseException) -> None:
        work.failures += 1
        if work.failures >= self.max_item_failures:
            raise ActorPoolExhaustedError(
                f"{self.describe(work.item)} lost its actor {work.failures} times; last error: {error}"
            ) from error
        pending.appendleft(work)  # re-run it first: its results are the oldest missing

    def _replace(self, actor: Any) -> bool:
        """Replace a dead actor; ``False`` if it was already replaced (another of its items failed first)."""
        if actor not in self._actors:
            return False
        self._actors.remove(actor)
        self.ray.kill(actor)  # make sure a half-dead actor does not keep a CPU
        self.actor_failures += 1
        self._actors.append(self._new_actor())
        return True

    def _check_deaths(self, deaths: int, error: BaseException) -> None:
        if deaths > self.max_actor_failures:
            raise ActorPoolExhaustedError(
                f"{deaths} {self.what}s died during this run (max_actor_failures={self.max_actor_failures}); "
                f"last error: {error}") from error
        warnings.warn(f"a {self.what} died ({type(error).__name__}); its unfinished work is re-run on a fresh "
                      f"actor", RuntimeWarning, stacklevel=4)


class _ActorDied(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


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

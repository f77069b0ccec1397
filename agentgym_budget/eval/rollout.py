"""Running episodes: the episode record, the job list, and pluggable executors.

An evaluation is a list of :class:`EpisodeJob` — (task, attempt, budget) — that an
:class:`Executor` turns into :class:`EpisodeRecord` s.  Every seed of an episode derives only
from (base seed, task, attempt) through :func:`task_seed` and :func:`attempt_seed`, never from
where or when the episode runs, so every executor returns the same records for the same jobs:

* a *task* is an env reset seed: all attempts of task ``i`` reset the env with
  ``task_seed(seed, i)`` (the same game), and differ only through the policy's seed
  ``attempt_seed(seed, i, attempt)``;
* the budget is forced per episode with ``reset(options={"budget": T})`` on the env's
  :class:`~agentgym_budget.wrappers.TurnBudget`.

Executors: :class:`SerialExecutor` (in-process) and :class:`ProcessPoolExecutor` (a pool of
processes, one env and one policy per process, jobs sent task by task).  Another backend
implements the :class:`Executor` protocol: ``run(spec, jobs, on_record) -> records``.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from agentgym_budget.envs.registration import make_budget_env
from agentgym_budget.policies.base import Policy, make_policy
from agentgym_budget.text import INVALID_ACTION_FEEDBACK

__all__ = [
    "EpisodeJob",
    "EpisodeRecord",
    "Executor",
    "ProcessPoolExecutor",
    "RolloutSpec",
    "SerialExecutor",
    "attempt_seed",
    "die_with_parent",
    "make_executor",
    "records_for_budget",
    "run_episode",
    "task_seed",
]

UNKNOWN = -1  # marks a per-turn fact the env does not provide (no expert, no plan)


def task_seed(seed: int, task: int) -> int:
    """The env reset seed of ``task`` (the same for all its attempts)."""
    return int(np.random.SeedSequence([seed, task]).generate_state(1)[0])


def attempt_seed(seed: int, task: int, attempt: int) -> int:
    """The policy seed of one attempt at ``task``."""
    return int(np.random.SeedSequence([seed, task, attempt, 0x9A55]).generate_state(1)[0])


@dataclass(frozen=True, order=True)
class EpisodeJob:
    """One episode to run: attempt ``attempt`` at task ``task`` with a budget of ``budget`` turns."""

    task: int
    attempt: int
    budget: int


@dataclass
class EpisodeRecord:
    """What the metrics need from one episode, compactly; per-turn lists have one entry per turn.

    Per turn ``t`` (1-based; index ``t - 1``), about the action taken in the state left by
    turn ``t - 1``:

    * ``expert_match``: 1 if the action is the expert's action in that state (or one of its
      actions, ``info["expert_actions"]``), 0 if not, -1 if the env gives no expert action;
    * ``admissible``: 1 if the action was in ``info["admissible_commands"]``, 0 if not, -1 if
      the list was empty;
    * ``no_effect``: 1 if the env answered ``"Nothing happens."``;
    * ``plan_left``: ``len(info["expert_plan"])`` after the turn, -1 if unknown.

    ``plan_length`` is ``len(info["expert_plan"])`` at reset (-1 if unknown); ``won_turn`` the
    turn at which the task was won (``None``: not won within ``budget``).  ``seconds`` (wall
    time) is informational and excluded from equality.

    The trainer's :class:`~agentgym_budget.train.rollout.Episode` records the same kind of run
    for the learner (prompt and action tokens per turn, the return) rather than for the metrics.
    """

    task: int
    attempt: int
    budget: int
    won_turn: int | None
    turns: int
    plan_length: int
    actions: list[str]
    expert_match: list[int]
    admissible: list[int]
    no_effect: list[int]
    plan_left: list[int]
    seconds: float = field(default=0.0, compare=False)

    @property
    def won(self) -> bool:
        return self.won_turn is not None

    def won_within(self, turns: int) -> bool:
        """Whether the task was won within the first ``turns`` turns."""
        return self.won_turn is not None and self.won_turn <= turns

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeRecord:
        return cls(**data)


@dataclass(frozen=True)
class RolloutSpec:
    """Everything a worker needs to build its env and policy (picklable).

    ``policy`` is a registered name (built with ``policy_kwargs``) or a policy object (it must
    then be picklable to run in a process pool).  ``env_kwargs`` go to ``gym.make``; budget
    options among them (``show_budget``, ...) go to the :class:`TurnBudget`.
    """

    env_id: str
    policy: str | Policy
    seed: int
    max_budget: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    policy_kwargs: dict[str, Any] = field(default_factory=dict)

    def make_env(self) -> gym.Env:
        """The env under a :class:`TurnBudget` of ``max_budget`` (budgets are then forced per episode)."""
        if "budget" in self.env_kwargs:
            raise ValueError("do not pass budget= in env_kwargs: the evaluator sets the budget of every episode")
        return make_budget_env(self.env_id, self.max_budget, **self.env_kwargs)

    def make_policy(self) -> Policy:
        if isinstance(self.policy, str):
            return make_policy(self.policy, **self.policy_kwargs)
        if self.policy_kwargs:
            raise ValueError("policy_kwargs apply to a policy given by name, not to a policy object")
        return self.policy


def _plan_len(info: dict[str, Any]) -> int:
    plan = info.get("expert_plan")
    return len(plan) if isinstance(plan, (list, tuple)) else UNKNOWN


def _expert_match(action: str, info: dict[str, Any]) -> int:
    choices = info.get("expert_actions")
    if isinstance(choices, (list, tuple)) and choices:
        return int(action in choices)
    expert = info.get("expert_action")
    if isinstance(expert, str) and expert:
        return int(action == expert)
    return UNKNOWN


def _is_no_effect(obs: str) -> bool:
    # With show_budget the budget line is appended/prepended: look at every paragraph.
    return obs.strip() == INVALID_ACTION_FEEDBACK or INVALID_ACTION_FEEDBACK in (p.strip() for p in obs.split("\n\n"))


def run_episode(env: gym.Env, policy: Policy, seed: int, job: EpisodeJob) -> EpisodeRecord:
    """Play one episode of ``job`` and record it (the env must be wrapped in a :class:`TurnBudget`)."""
    start = time.perf_counter()
    policy.reset(seed=attempt_seed(seed, job.task, job.attempt))
    obs, info = env.reset(seed=task_seed(seed, job.task), options={"budget": job.budget})
    plan_length = _plan_len(info)
    actions: list[str] = []
    expert_match: list[int] = []
    admissible: list[int] = []
    no_effect: list[int] = []
    plan_left: list[int] = []
    won_turn: int | None = None
    for turn in range(1, job.budget + 1):
        action = policy.act(obs, info)
        commands = info.get("admissible_commands") or ()
        actions.append(action)
        expert_match.append(_expert_match(action, info))
        admissible.append(int(action in commands) if commands else UNKNOWN)
        obs, _, terminated, truncated, info = env.step(action)
        no_effect.append(int(_is_no_effect(obs)))
        plan_left.append(_plan_len(info))
        if info.get("won"):
            won_turn = turn
        if won_turn is not None or terminated or truncated:
            break
    return EpisodeRecord(
        task=job.task, attempt=job.attempt, budget=job.budget, won_turn=won_turn, turns=len(actions),
        plan_length=plan_length, actions=actions, expert_match=expert_match, admissible=admissible,
        no_effect=no_effect, plan_left=plan_left, seconds=time.perf_counter() - start,
    )


def records_for_budget(records: Iterable[EpisodeRecord], budget: int) -> list[EpisodeRecord]:
    """Per (task, attempt): the record with the smallest budget ``>= budget``.

    Whether it was won within ``budget`` turns is then the outcome of that attempt at that
    budget: in the shortcut mode this is the largest-budget rollout, in the per-budget mode
    the rollout at ``budget`` itself.
    """
    chosen: dict[tuple[int, int], EpisodeRecord] = {}
    for record in records:
        key = (record.task, record.attempt)
        if record.budget >= budget and (key not in chosen or record.budget < chosen[key].budget):
            chosen[key] = record
    return list(chosen.values())


RecordCallback = Callable[[EpisodeRecord], None]


class Executor(Protocol):
    """Runs jobs; returns their records in the order of ``jobs``, calling ``on_record`` as each finishes."""

    def run(
        self, spec: RolloutSpec, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None
    ) -> list[EpisodeRecord]: ...


class SerialExecutor:
    """Runs every job in this process with one env and one policy."""

    def run(
        self, spec: RolloutSpec, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None
    ) -> list[EpisodeRecord]:
        env, policy = spec.make_env(), spec.make_policy()
        records = []
        try:
            for job in jobs:
                record = run_episode(env, policy, spec.seed, job)
                if on_record is not None:
                    on_record(record)
                records.append(record)
        finally:
            env.close()
        return records


# One env and one policy per worker process, built by the pool initializer.
_worker_state: dict[str, Any] = {}


def _init_worker(spec: RolloutSpec) -> None:
    _worker_state["spec"] = spec
    _worker_state["env"] = spec.make_env()
    _worker_state["policy"] = spec.make_policy()


def _run_chunk(jobs: list[EpisodeJob]) -> list[EpisodeRecord]:
    spec = _worker_state["spec"]
    return [run_episode(_worker_state["env"], _worker_state["policy"], spec.seed, job) for job in jobs]


class ProcessPoolExecutor:
    """Runs jobs in ``workers`` processes; each process builds one env and one policy.

    Jobs are sent in chunks of whole tasks (all attempts and budgets of a few consecutive
    tasks), about ``chunks_per_worker`` chunks per process: few enough that messaging costs
    little next to the episodes, enough that processes finish together.  ``start_method`` is
    a ``multiprocessing`` start method (``None``: ``"fork"`` where available — fast, and
    processes inherit envs registered at run time — else the platform default).  With
    ``"fork"`` one env is built in this process before the pool starts, so that module-level
    caches it fills (e.g. loaded game files) are inherited rather than rebuilt per worker.

    Records come back as episodes finish (a few per message, at least every
    ``FLUSH_SECONDS``), so ``on_record`` sees them while chunks are still running.

    Stopping: SIGINT (Ctrl-C) or SIGTERM during :meth:`run` (main thread), or a
    ``KeyboardInterrupt`` raised by ``on_record``, tells every worker to stop after its current
    episode; the episodes finished by then are still passed to ``on_record`` (so an episode log
    keeps every one of them), workers still busy after ``STOP_SECONDS`` are terminated, and
    ``KeyboardInterrupt("signal SIGINT")`` is raised (the wait restarts while records still arrive:
    records already sent are always saved).  A second signal stops at once.  Workers
    ignore SIGINT (the terminal sends it to the whole process group; this process coordinates)
    and die with this process even when it is killed with SIGKILL (:func:`die_with_parent`).
    """

    #: Longest a worker holds finished records before sending them.
    FLUSH_SECONDS = 0.2
    #: Longest :meth:`run` waits for busy workers after a stop before terminating them.
    STOP_SECONDS = 1.5

    def __init__(self, workers: int, start_method: str | None = None, chunks_per_worker: int = 4) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if chunks_per_worker < 1:
            raise ValueError(f"chunks_per_worker must be >= 1, got {chunks_per_worker}")
        self.workers = workers
        self.chunks_per_worker = chunks_per_worker
        if start_method is None:
            start_method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
        self.start_method = start_method

    def run(
        self, spec: RolloutSpec, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None
    ) -> list[EpisodeRecord]:
        if len(set(jobs)) != len(jobs):
            raise ValueError("jobs must not repeat: a record is kept per (task, attempt, budget)")
        chunks = _chunks_of_tasks(jobs, self.workers * self.chunks_per_worker)
        if not chunks:
            return []
        context = multiprocessing.get_context(self.start_method)
        if context.get_start_method() == "fork":
            # Build one env here first: forked workers inherit what it loaded and cached at
            # module level (game files, parsed grammars) instead of each loading it again.
            spec.make_env().close()
        pool = _Pool(context, spec, chunks, min(self.workers, len(chunks)), self.FLUSH_SECONDS)
        done: dict[EpisodeJob, EpisodeRecord] = {}
        with _StopSignals() as signals:
            try:
                pool.start()
                stopped = self._collect(pool, signals, done, len(jobs), on_record)
            finally:
                pool.close()
        if stopped is not None:
            raise KeyboardInterrupt(stopped)
        return [done[job] for job in jobs]

    def _collect(self, pool: _Pool, signals: _StopSignals, done: dict[EpisodeJob, EpisodeRecord], expected: int,
                 on_record: RecordCallback | None) -> str | None:
        """Receive records until all are in (``None``) or a stop (its reason, after saving what finished)."""
        stopped: str | None = None
        deadline = float("inf")
        while len(done) < expected and not pool.all_done():
            if stopped is None and signals.received is not None:
                stopped, deadline = f"signal {signals.received}", time.monotonic() + self.STOP_SECONDS
                pool.stop()
            if stopped is not None and (time.monotonic() > deadline or signals.count > 1):
                break  # busy workers are terminated by pool.close(); their current episodes are lost
            received = pool.receive(timeout=0.05)
            if stopped is not None and received:  # still arriving: the wait is for busy workers only
                deadline = time.monotonic() + self.STOP_SECONDS
            for job, record in received:
                done[job] = record
                if on_record is None:
                    continue
                try:
                    with signals.deferred():  # a signal never splits "saved" from "counted"
                        on_record(record)
                except KeyboardInterrupt as e:  # the caller asks to stop: keep what finishes meanwhile
                    if stopped is None:
                        stopped, deadline = str(e) or "KeyboardInterrupt", time.monotonic() + self.STOP_SECONDS
                        pool.stop()
        return stopped


_RECORDS, _ERROR, _DONE = "records", "error", "done"


def die_with_parent(parent_pid: int) -> None:
    """Make this (worker) process end when ``parent_pid`` does, even if it is killed with SIGKILL.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` — the kernel kills this process when the thread
    that started it exits — then a check that the parent did not already die before that call.
    Elsewhere: a daemon thread that polls the parent pid twice a second.  Also puts SIGTERM back
    to its default action (a forked worker inherits the parent's Python handler, which would
    make ``kill`` raise ``KeyboardInterrupt`` somewhere in an episode instead of ending it) and
    ignores SIGINT (Ctrl-C reaches every process of the terminal's group; the parent decides).

    Example:
        >>> import multiprocessing, os
        >>> worker = multiprocessing.get_context("fork").Process(target=die_with_parent, args=(os.getpid(),))
        >>> worker.start(); worker.join(); worker.exitcode
        0
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        if libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0) == 0:
            if os.getppid() != parent_pid:  # the parent died before the call: nobody would signal us
                os._exit(1)
            return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def _pool_worker(spec: RolloutSpec, parent_pid: int, chunks: Any, results: Any, stop: Any,
                 flush_seconds: float) -> None:
    """A pool process: build the env and policy, run chunks until the sentinel or ``stop``, stream the records."""
    die_with_parent(parent_pid)
    buffer: list[tuple[EpisodeJob, EpisodeRecord]] = []
    lock = threading.Lock()

    def flush() -> None:
        nonlocal buffer
        with lock:
            if buffer:
                results.put((_RECORDS, buffer))
                buffer = []

    def flush_on_stop() -> None:  # the records finished before a stop leave even if an episode is still running
        while not stop.value:
            time.sleep(0.02)  # polled: an Event's set() blocks on waiters that died (multiprocessing)
        flush()

    threading.Thread(target=flush_on_stop, name="flush-on-stop", daemon=True).start()
    last_flush = time.monotonic()
    try:
        _init_worker(spec)
        while not stop.value:
            chunk = chunks.get()
            if chunk is None:
                break
            for job in chunk:
                if stop.value:
                    break
                records = _run_chunk([job])
                with lock:
                    buffer.extend(zip([job], records))
                if time.monotonic() - last_flush >= flush_seconds:
                    flush()
                    last_flush = time.monotonic()
    except BaseException as e:  # a bug in the env or the policy: the parent raises it
        flush()
        results.put((_ERROR, _transportable(e)))
    finally:
        flush()
        results.put((_DONE, None))
        env = _worker_state.get("env")
        if env is not None:
            try:
                env.close()
            except Exception:  # closing is best effort once the records are out
                pass


def _transportable(error: BaseException) -> BaseException:
    """``error`` if it pickles (the parent re-raises it), else a RuntimeError with its traceback."""
    import pickle

    try:
        pickle.dumps(error)
        return error
    except Exception:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return RuntimeError(f"a worker failed:\n{text}")


class _Pool:
    """The worker processes of one :meth:`ProcessPoolExecutor.run`, their queues and the stop event."""

    def __init__(self, context: Any, spec: RolloutSpec, chunks: list[list[EpisodeJob]], workers: int,
                 flush_seconds: float) -> None:
        # Bounded: workers faster than this process's on_record wait for it (backpressure), so that
        # what has finished but is not saved yet stays small and a stop saves it quickly.
        self._chunks, self._results = context.Queue(), context.Queue(maxsize=4 * workers)
        self._stop = context.RawValue("b", 0)
        for chunk in chunks:
            self._chunks.put(chunk)
        for _ in range(workers):
            self._chunks.put(None)
        args = (spec, os.getpid(), self._chunks, self._results, self._stop, flush_seconds)
        self._processes = [context.Process(target=_pool_worker, args=args, daemon=True, name=f"agentgym-worker-{i}")
                           for i in range(workers)]
        self._done = 0

    def start(self) -> None:
        for process in self._processes:
            process.start()

    def stop(self) -> None:
        self._stop.value = 1

    def all_done(self) -> bool:
        return self._done == len(self._processes)

    def receive(self, timeout: float) -> list[tuple[EpisodeJob, EpisodeRecord]]:
        """The records that arrive within ``timeout`` (a worker's error is raised here)."""
        received: list[tuple[EpisodeJob, EpisodeRecord]] = []
        end = time.monotonic() + timeout
        while True:
            try:
                kind, payload = self._results.get(timeout=max(end - time.monotonic(), 0.0) if not received else 0.0)
            except queue.Empty:
                break
            if kind == _RECORDS:
                received.extend(payload)
            elif kind == _DONE:
                self._done += 1
            else:
                self.stop()
                raise payload
        if not received and not self.all_done():
            dead = [p for p in self._processes if p.exitcode not in (None, 0)]
            if dead:
                self.stop()
                raise RuntimeError(f"worker process {dead[0].name} died (exit code {dead[0].exitcode}) before "
                                   f"finishing its episodes")
        return received

    def close(self) -> None:
        """Stop the workers: the ones still running after a short grace are terminated, then killed."""
        self._stop.value = 1
        started = [process for process in self._processes if process.pid is not None]
        grace = time.monotonic() + 0.2
        for process in started:
            process.join(timeout=max(grace - time.monotonic(), 0.0))
        for process in started:
            if process.is_alive():
                process.terminate()
        for process in started:
            process.join(timeout=1.0)
            if process.is_alive():
                process.kill()
                process.join()
        for q in (self._chunks, self._results):
            q.cancel_join_thread()  # never block on items nobody will read
            q.close()


class _StopSignals:
    """During :meth:`ProcessPoolExecutor.run` (main thread): SIGINT/SIGTERM only *request* a stop.

    A second signal raises ``KeyboardInterrupt`` at once.  :meth:`deferred` holds signals back
    while a record is saved, so a stop never falls between writing a record and counting it.
    """

    def __init__(self) -> None:
        self.received: str | None = None
        self.count = 0
        self._active = threading.current_thread() is threading.main_thread()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        if self._active:
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.received is None:
            self.received = signal.Signals(signum).name
        if self.count > 2:
            raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    def deferred(self) -> Any:
        import contextlib

        if not self._active or not hasattr(signal, "pthread_sigmask"):
            return contextlib.nullcontext()
        return _blocked_signals()


def _blocked_signals() -> Any:
    import contextlib

    @contextlib.contextmanager
    def block() -> Iterator[None]:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    return block()


def _chunks_of_tasks(jobs: Iterable[EpisodeJob], n_chunks: int) -> list[list[EpisodeJob]]:
    """Split ``jobs`` into at most ``n_chunks`` lists of whole, consecutive tasks."""
    by_task: dict[int, list[EpisodeJob]] = {}
    for job in jobs:
        by_task.setdefault(job.task, []).append(job)
    tasks = list(by_task.values())
    bounds = np.linspace(0, len(tasks), min(n_chunks, len(tasks)) + 1).round().astype(int)
    return [[job for task in tasks[a:b] for job in task] for a, b in zip(bounds, bounds[1:]) if b > a]


def make_executor(workers: int = 1) -> Executor:
    """:class:`SerialExecutor` for one worker, else a :class:`ProcessPoolExecutor`."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return SerialExecutor() if workers == 1 else ProcessPoolExecutor(workers)

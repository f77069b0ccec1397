"""Running episodes in a pool of processes, one :class:`~agentgym_budget.episodes.runner.EpisodeRunner` each.

:class:`EpisodeProcessPool` sends jobs task by task to worker processes that die with this
one (:func:`die_with_parent`); a signal stops it cleanly (:class:`~agentgym_budget.episodes.signals.StopSignals`).
:func:`make_executor` picks it or the in-process :class:`~agentgym_budget.episodes.runner.SerialExecutor`.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from agentgym_budget.episodes.records import EpisodeJob, EpisodeRecord
from agentgym_budget.episodes.runner import EpisodeRunner, Executor, RecordCallback, RolloutSpec, SerialExecutor
from agentgym_budget.episodes.signals import StopSignals

__all__ = ["EpisodeProcessPool", "die_with_parent", "make_executor"]


# One runner (envs + policy) per worker process, built by the pool initializer.
_worker_state: dict[str, Any] = {}


def _init_worker(spec: RolloutSpec) -> None:
    _worker_state["runner"] = EpisodeRunner(spec)


class EpisodeProcessPool:
    """Runs jobs in ``workers`` processes; each process runs them with one :class:`EpisodeRunner`.

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
        with StopSignals() as signals:
            try:
                pool.start()
                stopped = self._collect(pool, signals, done, len(jobs), on_record)
            finally:
                pool.close()
        if stopped is not None:
            raise KeyboardInterrupt(stopped)
        return [done[job] for job in jobs]

    def _collect(self, pool: _Pool, signals: StopSignals, done: dict[EpisodeJob, EpisodeRecord], expected: int,
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

        def finished(record: EpisodeRecord) -> None:
            nonlocal last_flush
            with lock:
                buffer.append((EpisodeJob(record.task, record.attempt, record.budget), record))
            if time.monotonic() - last_flush >= flush_seconds:
                flush()
                last_flush = time.monotonic()

        while not stop.value:
            chunk = chunks.get()
            if chunk is None:
                break
            _worker_state["runner"].run(chunk, finished, stop=lambda: bool(stop.value))
    except BaseException as e:  # a bug in the env or the policy: the parent raises it
        flush()
        results.put((_ERROR, _transportable(e)))
    finally:
        flush()
        results.put((_DONE, None))
        runner = _worker_state.get("runner")
        if runner is not None:
            try:
                runner.close()
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
    """The worker processes of one :meth:`EpisodeProcessPool.run`, their queues and the stop event."""

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


def _chunks_of_tasks(jobs: Iterable[EpisodeJob], n_chunks: int) -> list[list[EpisodeJob]]:
    """Split ``jobs`` into at most ``n_chunks`` lists of whole, consecutive tasks."""
    by_task: dict[int, list[EpisodeJob]] = {}
    for job in jobs:
        by_task.setdefault(job.task, []).append(job)
    tasks = list(by_task.values())
    bounds = np.linspace(0, len(tasks), min(n_chunks, len(tasks)) + 1).round().astype(int)
    return [[job for task in tasks[a:b] for job in task] for a, b in zip(bounds, bounds[1:]) if b > a]


def make_executor(workers: int = 1) -> Executor:
    """:class:`SerialExecutor` for one worker, else a :class:`EpisodeProcessPool`."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return SerialExecutor() if workers == 1 else EpisodeProcessPool(workers)

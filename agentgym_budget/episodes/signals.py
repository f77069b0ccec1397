"""How an evaluation meets SIGINT and SIGTERM: a stop is a clean stop that keeps every finished episode.

* :func:`signals_held` delays both signals while a record is saved, so that a line written is a
  line counted (the episode log, the process pool's ``on_record``);
* :class:`StopSignals` turns them into a *request* to stop while the process pool runs;
* :func:`sigterm_as_interrupt` makes ``kill`` (a cluster scheduler) stop a run like Ctrl-C.

Each acts in the main thread only (Python delivers signals there); elsewhere it does nothing.

Example:
    >>> import os, signal
    >>> with StopSignals() as signals:
    ...     os.kill(os.getpid(), signal.SIGTERM)  # noted, not raised
    >>> signals.received, signals.count
    ('SIGTERM', 1)
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["StopSignals", "sigterm_as_interrupt", "signals_held"]


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Delay SIGINT and SIGTERM until the block ends (main thread, POSIX; elsewhere a no-op)."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class StopSignals:
    """While the process pool runs (main thread): SIGINT/SIGTERM only *request* a stop.

    A second signal raises ``KeyboardInterrupt`` at once.  :meth:`deferred` holds signals back
    while a record is saved, so a stop never falls between writing a record and counting it.
    """

    def __init__(self) -> None:
        self.received: str | None = None
        self.count = 0
        self._active = threading.current_thread() is threading.main_thread()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
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

    def deferred(self) -> contextlib.AbstractContextManager[None]:
        """:func:`signals_held` when this handles the signals (made in the main thread), else a no-op."""
        return signals_held() if self._active else contextlib.nullcontext()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt`` like Ctrl-C (main thread only).

    So that ``kill`` / a cluster scheduler stopping the job runs the same cleanup as Ctrl-C.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

"""The HTTP client of a served model: each request attempt under one wall-clock deadline,
cancellable, and never redirected to another server.

httpx's timeouts bound each socket operation (a connect, one read, one write), not a
request: a server that trickles its reply a byte every half second never trips a read
timeout, however long the reply takes.  :func:`http_client` builds the ``httpx.Client`` a
served backend hands to the ``openai`` client; its connections read and write through
:class:`DeadlineBackend`, whose every socket operation is cut to the deadline of the attempt
the calling thread is in (:func:`attempt`), and whose blocked reads look every
:data:`POLL_SECONDS` whether the attempt was cancelled (Ctrl-C, SIGTERM).  A redirect to
another origin is refused (:class:`RedirectRefused`): the API key and the conversation are
for the server the user named.

Example:
    >>> origin("http://user:key@127.0.0.1:8000/v1"), origin("https://api.example.com/v1")
    ('http://127.0.0.1:8000', 'https://api.example.com:443')
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from agentgym_budget._optional import require

__all__ = ["DeadlineBackend", "POLL_SECONDS", "RedirectRefused", "attempt", "http_client", "http_libraries", "origin"]

#: How often a blocked read looks at its attempt's deadline and at cancellation.
POLL_SECONDS = 0.2
#: As many connections as the ``openai`` client's own default allows (``max_concurrency=None``
#: may put a whole batch in flight).
_MAX_CONNECTIONS, _MAX_KEEPALIVE = 1000, 100

_attempt = threading.local()  # .deadline (time.monotonic() value), .cancel (threading.Event)


class RedirectRefused(Exception):
    """The server redirected a request to another origin (scheme, host or port)."""


def http_libraries() -> tuple[Any, Any]:
    """``(httpx, httpcore)`` as the installed ``openai`` client uses them: from openai 3 on they
    are the renamed ``httpx2``/``httpcore2`` (same API), before that ``httpx``/``httpcore``."""
    openai = require("openai", "openai")
    names = ("httpx2", "httpcore2") if int(openai.__version__.split(".")[0]) >= 3 else ("httpx", "httpcore")
    return importlib.import_module(names[0]), importlib.import_module(names[1])


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``: who answers, without credentials or path."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    host = f"[{parts.hostname}]" if parts.hostname and ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port}"


@contextlib.contextmanager
def attempt(timeout: float, cancel: threading.Event) -> Iterator[None]:
    """Within the block, this thread's HTTP traffic (connect to last byte) ends by ``now + timeout``
    with a timeout error, or within :data:`POLL_SECONDS` of ``cancel`` being set with a read error."""
    _attempt.deadline, _attempt.cancel = time.monotonic() + timeout, cancel
    try:
        yield
    finally:
        _attempt.deadline = _attempt.cancel = None


def _until(timeout: float | None) -> float | None:
    """When a socket operation must end: after its own ``timeout``, and by the attempt's deadline."""
    ends = [time.monotonic() + timeout] if timeout is not None else []
    deadline = getattr(_attempt, "deadline", None)
    if deadline is not None:
        ends.append(deadline)
    return min(ends) if ends else None


def _left(until: float | None, httpcore: Any, timeout_error: type[Exception]) -> float | None:
    """Seconds left until ``until``; raises once the attempt is cancelled or out of time."""
    cancel = getattr(_attempt, "cancel", None)
    if cancel is not None and cancel.is_set():
        raise httpcore.ReadError("the request was cancelled (the run is stopping)")
    if until is None:
        return None
    left = until - time.monotonic()
    if left <= 0:
        raise timeout_error("the request attempt ran out of time")
    return left


class _DeadlineStream:
    """An ``httpcore`` network stream whose reads and writes end by the attempt's deadline."""

    def __init__(self, stream: Any, httpcore: Any) -> None:
        self._stream, self._httpcore = stream, httpcore

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        until = _until(timeout)
        while True:  # short slices, so that a cancel or the deadline is seen while a read is blocked
            left = _left(until, self._httpcore, self._httpcore.ReadTimeout)
            try:
                return self._stream.read(max_bytes, POLL_SECONDS if left is None else min(left, POLL_SECONDS))
            except self._httpcore.ReadTimeout:
                continue

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # sendall's timeout bounds the whole buffer (Python >= 3.5), so one call suffices
        self._stream.write(buffer, _left(_until(timeout), self._httpcore, self._httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        left = _left(_until(timeout), self._httpcore, self._httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, left), self._httpcore)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class DeadlineBackend:
    """An ``httpcore`` network backend (over its own ``SyncBackend``) whose streams keep the deadline."""

    def __init__(self) -> None:
        self._httpcore = http_libraries()[1]
        self._backend = self._httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> _DeadlineStream:
        left = _left(_until(timeout), self._httpcore, self._httpcore.ConnectTimeout)
        stream = self._backend.connect_tcp(host, port, left, local_address, socket_options)
        return _DeadlineStream(stream, self._httpcore)

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        left = _left(_until(timeout), self._httpcore, self._httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_unix_socket(path, left, socket_options), self._httpcore)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def _refuse_cross_origin_redirect(response: Any) -> None:
    """httpx response hook: a redirect leaving the request's origin is an error, not followed."""
    if not response.has_redirect_location:
        return
    source = str(response.request.url)
    target = str(response.request.url.join(response.headers["Location"]))
    if origin(target) != origin(source):
        raise RedirectRefused(f"redirected ({response.status_code}) from {origin(source)} to {origin(target)}, "
                              "another server: refused (set base_url to the server that answers)")


def http_client(timeout: float) -> Any:
    """The ``httpx.Client`` for the ``openai`` client: deadline per attempt, same-origin redirects only."""
    httpx = http_libraries()[0]
    transport = httpx.HTTPTransport(limits=httpx.Limits(max_connections=_MAX_CONNECTIONS,
                                                        max_keepalive_connections=_MAX_KEEPALIVE))
    # httpx takes no network backend, but its transport's connection pool (httpcore) does: one
    # attribute, checked here so that an httpx that renames it fails loudly, not silently unbounded.
    pool = transport._pool
    if not hasattr(pool, "_network_backend"):
        raise RuntimeError(f"httpx {httpx.__version__}: its connection pool has no _network_backend to bound")
    pool._network_backend = DeadlineBackend()
    return httpx.Client(transport=transport, timeout=httpx.Timeout(timeout), follow_redirects=True,
                        event_hooks={"response": [_refuse_cross_origin_redirect]})

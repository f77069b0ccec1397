"""A thread-safe ``functools.cache`` for loaders of bundled data: each value is built once.

``functools.cache`` alone does not lock: threads that ask for the same missing key at the same
time each run the function.  For a loader that decompresses and parses a bundle (the ALFWorld
game list, a WebShop catalog) that is hundreds of copies of the same heavy work when a library
builds many envs in threads at once (verifiers' ``evaluate`` does, through ``asyncio.to_thread``),
enough to stall a run for minutes.  ``load_once`` holds one lock per function around the cached
call: the first caller loads, the others wait for it and get the cached value.

    >>> calls = []
    >>> @load_once()
    ... def square(x):
    ...     calls.append(x)
    ...     return x * x
    >>> square(3), square(3), calls
    (9, 9, [3])
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["load_once"]

F = TypeVar("F", bound=Callable[..., Any])


def load_once(maxsize: int | None = None) -> Callable[[F], F]:
    """``functools.lru_cache(maxsize)`` whose calls hold one lock, so each key is computed once.

    Cache hits take the lock too (an uncontended lock costs well under a microsecond, nothing next
    to what such loaders build); ``cache_clear`` and ``cache_info`` are kept.
    """

    def decorate(fn: F) -> F:
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        # Reentrant: a loader may call itself (another key) or be asked again from a callback.
        lock = threading.RLock()

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return cached(*args, **kwargs)

        wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        wrapper.cache_info = cached.cache_info  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate

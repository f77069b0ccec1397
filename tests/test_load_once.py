"""Loaders of bundled data run once, whatever the concurrency (``agentgym_budget._once.load_once``).

Many threads asking at the same moment for a value nobody has loaded yet is what verifiers'
``evaluate`` does (hundreds of envs built through ``asyncio.to_thread``); with an unlocked
``functools.cache`` each thread ran the loader, all decompressing the ALFWorld bundle at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentgym_budget._once import load_once
from agentgym_budget.envs.alfworld import game

THREADS = 64


def at_once(fn: Callable[[], Any], threads: int = THREADS) -> list[Any]:
    """``fn()`` in ``threads`` threads released together by a barrier; their results."""
    barrier = threading.Barrier(threads)
    results: list[Any] = [None] * threads
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn()
        except BaseException as e:  # noqa: BLE001  (re-raised below, in the test's thread)
            errors.append(e)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not any(worker.is_alive() for worker in workers), "a loader thread never returned"
    if errors:
        raise errors[0]
    return results


def test_load_once_runs_a_slow_loader_once_for_many_threads_at_once() -> None:
    calls: list[int] = []

    @load_once()
    def slow(key: int) -> object:
        calls.append(key)
        time.sleep(0.2)  # keeps the window open: every thread arrives while the first one loads
        return object()

    results = at_once(lambda: slow(1))
    assert calls == [1] and all(result is results[0] for result in results)
    assert slow(2) is not results[0] and calls == [1, 2]  # another key is another load
    slow.cache_clear()  # type: ignore[attr-defined]
    slow(1)
    assert calls == [1, 2, 1]


def test_load_once_keeps_an_error_uncached() -> None:
    attempts: list[int] = []

    @load_once()
    def flaky() -> int:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("disk hiccup")
        return 7

    with pytest.raises(OSError, match="disk hiccup"):
        flaky()
    assert flaky() == 7 and flaky() == 7 and len(attempts) == 2


def test_the_bundled_alfworld_games_are_read_once_by_many_threads_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[tuple[str, ...]] = []
    real = game._data_file

    def counting(*parts: str) -> Any:
        if parts[0] == "games":
            read.append(parts)
            time.sleep(0.2)  # keeps the window open, as a slow decompression under load does
        return real(*parts)

    monkeypatch.setattr(game, "_data_file", counting)
    game._bundled_split.cache_clear()  # type: ignore[attr-defined]
    try:
        results = at_once(lambda: game._bundled_split("valid_unseen"))
    finally:
        game._bundled_split.cache_clear()  # type: ignore[attr-defined]  (the next user loads the real file again)
    assert read == [("games", "valid_unseen.jsonl.xz")], f"the bundle was read {len(read)} times"
    assert results[0] and all(result is results[0] for result in results)

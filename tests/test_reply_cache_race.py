"""One reply per cache key under load: processes racing on one reply cache, then a replay from it (issue 37).

Each round forks two runs onto a new cache folder.  Each run plays a few multi-turn episodes
through :meth:`OpenAIChatBackend.complete` (cache, thread pool and all) with a fake server whose
replies name the process that asked, so two runs that both miss a key get different replies
for it.  The invariant: every run used exactly the reply the cache holds for each key, so a
replay that may only read the cache (every request fails) reproduces every run's replies, turn
by turn (a later turn's conversation holds the earlier replies, so a run that once used another
reply asks for other keys and its replay misses).

Both runs start at a barrier, and the first reply of every round waits until both runs have
asked for it: every round has at least one key asked twice, whose loser must use the winner's
reply, and the runs open the new cache file at about the same time.  The second is what broke
before the fix (see :class:`~agentgym_budget.policies.served.ResponseCache`): sqlite answered
the concurrent switch of a new file to WAL mode with "database is locked", failing a run in
some rounds only (8 of 100 at moderate load, none of 100 at load 17), so the second test forces
that interleaving; with a cache file that already existed, 200 rounds of four processes showed
no run using another reply than the cache's, before the fix as after.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import traceback
from pathlib import Path
from typing import Any

import pytest

from agentgym_budget.policies.chat import Completion, Message, Sampling
from agentgym_budget.policies.served import OpenAIChatBackend

pytestmark = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                reason="races forked processes (no fork on this platform)")

ROUNDS, RUNS = 40, 3  # RUNS racing runs per round
EPISODES, TURNS = 2, 3
HANG_S = 60.0  # only a guard against a hang: a healthy round takes well under a second
URL = "http://127.0.0.1:9/v1"  # never contacted: the requests below are fakes


class _PerProcessReplies(OpenAIChatBackend):
    """A server that answers each request with the asking process's id (racing runs disagree)."""

    both_asked: Any = None  # a 2-party barrier: the first key of a round is asked by both runs

    def _request(self, messages: Any, seed: int, sampling: Sampling, cancel: threading.Event) -> Completion:
        if len(messages) == 2 and seed == 0:  # episode 0, turn 0
            self.both_asked.wait(HANG_S)
        return Completion(f"Action: take key {os.getpid()}-{seed}-{len(messages)}", 5, 3)


class _CacheOnly(OpenAIChatBackend):
    def _request(self, messages: Any, seed: int, sampling: Sampling, cancel: threading.Event) -> Completion:
        raise AssertionError(f"the replay missed the cache (seed {seed}, turn {len(messages) // 2 - 1})")


def _conversation(episode: int, replies: list[str]) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": "Find the key."},
                               {"role": "user", "content": f"Episode {episode}: a hall."}]
    for reply in replies:
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "Nothing happens."}]
    return messages


def _play(backend: OpenAIChatBackend) -> list[list[str]]:
    """Each episode's replies, turn by turn (each turn shows the episode's earlier replies)."""
    used: list[list[str]] = [[] for _ in range(EPISODES)]
    for _ in range(TURNS):
        conversations = [_conversation(e, used[e]) for e in range(EPISODES)]
        for replies, completion in zip(used, backend.complete(conversations, list(range(EPISODES)), Sampling())):
            replies.append(completion.text)
    return used


def _run(path: Path, arrived: Any, both_asked: Any, results: Any) -> None:
    try:
        backend = _PerProcessReplies("m", base_url=URL, cache=path, check_model=False, max_concurrency=2)
        backend.both_asked = both_asked
        with arrived.get_lock():
            arrived.value += 1
        while arrived.value < RUNS:  # spin, not sleep: the runs leave together, on the CPU
            pass
        results.put(("ok", os.getpid(), _play(backend)))
        backend.close()
    except BaseException as e:  # noqa: BLE001 - reported to the test, which fails with it
        results.put(("error", os.getpid(), "".join(traceback.format_exception(e))))


def test_racing_runs_and_a_cache_only_replay_use_the_same_replies(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    for round_ in range(ROUNDS):
        path = tmp_path / f"round{round_}" / "replies.sqlite"
        arrived, both_asked, results = context.Value("i", 0), context.Barrier(RUNS), context.Queue()
        runs = [context.Process(target=_run, args=(path, arrived, both_asked, results)) for _ in range(RUNS)]
        for process in runs:
            process.start()
        outcomes = [results.get(timeout=HANG_S) for _ in runs]
        for process in runs:
            process.join(HANG_S)
        errors = [detail for kind, _, detail in outcomes if kind == "error"]
        assert not errors, f"round {round_}: a racing run failed:\n{errors[0]}"
        with _CacheOnly("m", base_url=URL, cache=path, check_model=False) as replay_backend:
            replay = _play(replay_backend)
        for _, pid, used in outcomes:
            assert used == replay, f"round {round_}: run {pid} used other replies than the cache holds"
        # the key both runs asked for: one run's reply, used by both (the other run lost)
        assert int(replay[0][0].split()[-1].split("-")[0]) in {pid for _, pid, _ in outcomes}
        # no temporary file of a run that lost the creation is left behind
        assert sorted(os.listdir(path.parent))[0] == "replies.sqlite" and not [
            name for name in os.listdir(path.parent) if not name.startswith("replies.sqlite")]


def test_a_cache_opened_while_another_run_is_making_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window the stress test above hits now and then, forced: run B opens the new cache while
    run A has made its file and holds sqlite's write lock on it (as A does while switching the file
    to WAL).  sqlite answers B's own switch with "database is locked" at once, whatever the busy
    timeout; with the fix A works on a file of its own until it is whole, so B never sees it."""
    import sqlite3

    import agentgym_budget.policies.served as served

    path = tmp_path / "replies.sqlite"
    connect, opened = sqlite3.connect, []

    def connect_then_let_b_open(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        db = connect(database, *args, **kwargs)
        if not opened:  # run A's first connection: B opens the cache while A holds the write lock on it
            opened.append(database)
            holder = connect(database, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")
            try:
                b = served.ResponseCache(path)
                opened.append(b.put("k", Completion("Action: B's reply", 1, 1)))
                b.close()
            finally:
                holder.execute("COMMIT")
                holder.close()
        return db

    monkeypatch.setattr(served.sqlite3, "connect", connect_then_let_b_open)
    a = served.ResponseCache(path)
    try:
        assert opened[1].text == "Action: B's reply"
        assert a.put("k", Completion("Action: A's reply", 1, 1)).text == "Action: B's reply"  # B stored first
    finally:
        a.close()
    assert os.listdir(tmp_path) == ["replies.sqlite"]

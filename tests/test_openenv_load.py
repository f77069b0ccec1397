"""OpenEnv under load, on 127.0.0.1: 64 sessions at once play to the end, each its own episode; the
server holds no more sessions than it allows; closed and dropped sessions are freed (their envs
closed and garbage); malformed messages get a one-line error while every other session plays on.

Memory stays bounded because the server holds at most ``max_concurrent_envs`` envs and keeps no
reference to a session's env once the session ends (checked with weak references below).
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import weakref

import gymnasium as gym
import pytest

pytest.importorskip("agentgym_budget.integrations.openenv_env", reason="needs openenv 0.10 (the openenv extra)",
                    exc_type=ImportError)
websockets_client = pytest.importorskip("websockets.asyncio.client", reason="openenv's client needs websockets")

import agentgym_budget  # noqa: E402,F401
from agentgym_budget.integrations.openenv_env import BudgetEnvClient, TextAction, serve  # noqa: E402
from agentgym_budget.integrations.session import BudgetSession  # noqa: E402
from polling import wait_until  # noqa: E402

ENV_ID, BUDGET = "KeyDoor-Budget-v0", "mix:2,3,4"
PLAYERS, MALFORMED, DROPPED = 64, 4, 4
CAPACITY = PLAYERS + MALFORMED + DROPPED


class TrackedEnv(gym.Wrapper):
    """Every env the server makes: how many are open, and (weakly) which are still alive."""

    lock = threading.Lock()
    open = 0
    alive: weakref.WeakSet[TrackedEnv] = weakref.WeakSet()

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        with TrackedEnv.lock:
            TrackedEnv.open += 1
            TrackedEnv.alive.add(self)

    def close(self) -> None:
        with TrackedEnv.lock:
            TrackedEnv.open -= 1
        super().close()


class Gate:
    """Every session opens and resets, then waits here until the test has tried one session more."""

    def __init__(self, sessions: int) -> None:
        self.all_open = asyncio.Barrier(sessions + 1)  # + the test itself
        self.go = asyncio.Event()

    async def wait(self) -> None:
        await self.all_open.wait()
        await self.go.wait()


def choose(seed: int, turn: int, commands: list[str]) -> str:
    """A fixed policy that wins, loses or runs out of budget depending on the seed."""
    return commands[(seed + turn) % len(commands)]


def local_episode(seed: int) -> list[tuple[str, bool, bool, int, int]]:
    """The episode a player with ``seed`` must see: (text, terminated, truncated, budget, turns_left) per turn."""
    session = BudgetSession(ENV_ID, budget=BUDGET)
    session.reset(seed=seed)
    seen = [(session.observation, False, False, session.budget, session.turns_left)]
    while not session.done:
        session.step(choose(seed, session.turn, session.admissible_commands))
        seen.append((session.observation, session.terminated, session.truncated, session.budget, session.turns_left))
    session.close()
    return seen


async def play(url: str, seed: int, gate: Gate) -> list[tuple[str, bool, bool, int, int]]:
    async with BudgetEnvClient(base_url=url) as client:
        result = await client.reset(seed=seed)
        await gate.wait()
        seen = []
        while True:
            obs = result.observation
            seen.append((obs.text, obs.terminated, obs.truncated, obs.budget, obs.turns_left))
            if result.done:
                return seen
            result = await client.step(TextAction(command=choose(seed, obs.turn, obs.admissible_commands)))


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


async def send(ws, message: str) -> dict:
    await ws.send(message)
    return json.loads(await asyncio.wait_for(ws.recv(), timeout=60))


async def malformed(url: str, gate: Gate) -> list[str]:
    """A session that sends malformed messages between good ones; returns the error messages it got."""
    async with websockets_client.connect(ws_url(url)) as ws:
        first = await send(ws, json.dumps({"type": "reset", "data": {"seed": 0, "budget": 3}}))
        assert first["type"] == "observation", first
        await gate.wait()
        errors = []
        for bad in ("not json {", json.dumps({"type": "launch"}), json.dumps({"type": "step", "data": {"command": 5}}),
                    json.dumps({"type": "step", "data": {"cmd": "look"}}), json.dumps([1, 2]), b"\x00\x01"):
            answer = await send(ws, bad)
            assert answer["type"] == "error", (bad, answer)
            errors.append(answer["data"]["message"])
        # the session plays on: its episode is where it was (no turn was spent on the bad messages)
        answer = await send(ws, json.dumps({"type": "step", "data": {"command": "look"}}))
        assert answer["type"] == "observation" and answer["data"]["observation"]["turns_left"] == 2, answer
        return errors


async def dropped(url: str, gate: Gate) -> None:
    """A client that vanishes mid-episode: the TCP connection is cut, no close message is sent."""
    ws = await websockets_client.connect(ws_url(url))
    await send(ws, json.dumps({"type": "reset", "data": {"seed": 1}}))
    await gate.wait()
    await send(ws, json.dumps({"type": "step", "data": {"command": "look"}}))
    ws.transport.abort()


async def refused(url: str) -> dict:
    """One session more than the server holds."""
    async with websockets_client.connect(ws_url(url)) as ws:
        return json.loads(await asyncio.wait_for(ws.recv(), timeout=60))


async def load(url: str) -> tuple[list, list, dict]:
    gate = Gate(CAPACITY)
    players = [asyncio.create_task(play(url, seed, gate)) for seed in range(PLAYERS)]
    bad = [asyncio.create_task(malformed(url, gate)) for _ in range(MALFORMED)]
    drops = [asyncio.create_task(dropped(url, gate)) for _ in range(DROPPED)]
    await asyncio.wait_for(gate.all_open.wait(), timeout=120)  # every session is open and reset
    over = await refused(url)
    gate.go.set()
    results = await asyncio.wait_for(asyncio.gather(*players, *bad, *drops), timeout=300)
    return results[:PLAYERS], results[PLAYERS:PLAYERS + MALFORMED], over


def test_64_sessions_at_once_play_to_the_end_bounded_freed_and_robust_to_malformed_messages() -> None:
    expected = [local_episode(seed) for seed in range(PLAYERS)]
    with serve(ENV_ID, budget=BUDGET, wrappers=[TrackedEnv], max_concurrent_envs=CAPACITY) as url:
        played, errors, over = asyncio.run(load(url))

        # every player's episode is the one it would have played alone
        assert played == expected
        ends = {(seen[-1][1], seen[-1][2]) for seen in played}
        assert ends == {(True, False), (False, True)}  # some terminated, some truncated by the budget
        assert {seen[0][3] for seen in played} == {2, 3, 4}

        # one more session than the server holds is refused, not queued or crashed
        assert over["type"] == "error" and over["data"]["code"] == "CAPACITY_REACHED", over
        assert over["data"]["max_sessions"] == CAPACITY

        # each malformed message got a one-line error naming what was wrong
        for messages in errors:
            assert all(isinstance(m, str) and m and "\n" not in m for m in messages), messages
            assert messages[0].startswith("Invalid JSON") and messages[1] == "Unknown message type: launch"
            assert messages[2] == messages[3] == "Invalid message"  # OpenEnv's validation of the action
            assert messages[4].endswith("got a JSON list") and messages[5].startswith("a message must be text")

        # closed and dropped sessions alike: their envs closed, and no longer referenced by the server
        assert wait_until(lambda: TrackedEnv.open == 0, timeout=30.0), f"{TrackedEnv.open} envs still open"
        assert wait_until(lambda: gc.collect() >= 0 and len(TrackedEnv.alive) == 0, timeout=30.0), \
            f"{len(TrackedEnv.alive)} envs still referenced"

        # the freed slots are usable: as many sessions at once again
        async def refill() -> list[int]:
            clients = [BudgetEnvClient(base_url=url) for _ in range(CAPACITY)]
            try:
                return [r.observation.budget for r in await asyncio.gather(*(c.reset(seed=i) for i, c in
                                                                          enumerate(clients)))]
            finally:
                await asyncio.gather(*(c.close() for c in clients))

        assert len(asyncio.run(refill())) == CAPACITY
        assert wait_until(lambda: TrackedEnv.open == 0, timeout=30.0)

"""OpenEnv: our budgeted envs served by OpenEnv's own server, driven by OpenEnv's own client."""

from __future__ import annotations

import re
import subprocess
import sys
import threading

import gymnasium as gym
import pytest

pytest.importorskip("agentgym_budget.integrations.openenv_env", reason="needs openenv 0.10 (the openenv extra)", exc_type=ImportError)

import agentgym_budget  # noqa: E402,F401
from agentgym_budget.integrations.openenv_env import BudgetEnvClient, TextAction, serve  # noqa: E402
from agentgym_budget.integrations.session import BudgetSession  # noqa: E402
from polling import wait_until  # noqa: E402


class LiveEnvs(gym.Wrapper):
    """Counts the envs the server holds open: +1 when made, -1 when closed."""

    lock = threading.Lock()
    open = 0
    made = 0

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        with LiveEnvs.lock:
            LiveEnvs.open += 1
            LiveEnvs.made += 1

    def close(self) -> None:
        with LiveEnvs.lock:
            LiveEnvs.open -= 1
        super().close()


def test_reset_step_close_and_how_the_episode_ends() -> None:
    with serve("ALFWorld-Budget-v0", budget="mix:3,4", show_budget=True) as url:
        with BudgetEnvClient(base_url=url).sync() as client:
            # The budget truncates: done, truncated, not terminated, the shown budget counts down.
            first = client.reset(seed=0, budget=3)
            assert (first.done, first.observation.budget, first.observation.turns_left) == (False, 3, 3)
            assert first.observation.text.endswith("[Turns left: 3 of 3]")
            assert first.observation.admissible_commands
            for turn in (1, 2, 3):
                result = client.step(TextAction(command="look"))
                assert result.observation.turns_left == 3 - turn
            assert (result.done, result.observation.truncated, result.observation.terminated) == (True, True, False)
            state = client.state()
            assert (state.step_count, state.budget, state.turns_left, state.env_id) == (3, 3, 0, "ALFWorld-Budget-v0")
            # A step after the end is refused (the server answers with an error, the session stays usable).
            with pytest.raises(RuntimeError, match="episode is over"):
                client.step(TextAction(command="look"))

            # The env terminates: playing the expert wins with reward 1 inside a large budget.
            local = BudgetSession("ALFWorld-Budget-v0", budget=50)
            local.reset(seed=1)
            result = client.reset(seed=1, budget=50)
            assert result.observation.text.startswith(local.observation)
            while not result.done:
                expert = local.info["expert_action"]
                local.step(expert)
                result = client.step(TextAction(command=expert))
                assert result.observation.text.startswith(local.observation)
            assert (result.observation.terminated, result.observation.truncated, result.observation.won) == (
                True, False, True)
            assert result.reward == 1.0 and result.observation.info["won"] is True
            local.close()


def test_budget_draws_follow_the_mix_and_the_seed() -> None:
    with serve("KeyDoor-Budget-v0", budget="mix:2,3,5") as url:
        with BudgetEnvClient(base_url=url).sync() as client:
            drawn = [client.reset(seed=s).observation.budget for s in range(12)]
    local = BudgetSession("KeyDoor-Budget-v0", budget="mix:2,3,5")
    expected = [(local.reset(seed=s), local.budget)[1] for s in range(12)]
    assert drawn == expected and set(drawn) == {2, 3, 5}


def test_concurrent_sessions_are_isolated() -> None:
    LiveEnvs.open = 0
    with serve("KeyDoor-Budget-v0", budget="mix:3,4", wrappers=[LiveEnvs], max_concurrent_envs=3) as url:
        a = BudgetEnvClient(base_url=url).sync().connect()
        b = BudgetEnvClient(base_url=url).sync().connect()
        ra = a.reset(seed=0, budget=4, task="red-blue")
        rb = b.reset(seed=1, budget=3, task="blue-red")
        assert ra.observation.task != rb.observation.task
        # Interleaved steps: each session's turn count and episode are its own.
        ra = a.step(TextAction(command="take key"))
        rb = b.step(TextAction(command="look"))
        rb = b.step(TextAction(command="look"))
        ra = a.step(TextAction(command="open red door"))
        assert (ra.observation.won, ra.observation.terminated, ra.observation.turn) == (True, True, 2)
        assert (rb.done, rb.observation.turn, rb.observation.turns_left) == (False, 2, 1)
        rb = b.step(TextAction(command="look"))
        assert (rb.observation.truncated, rb.observation.won) == (True, False)
        assert LiveEnvs.open == 2
        a.close()
        b.close()
        assert wait_until(lambda: LiveEnvs.open == 0), LiveEnvs.open


CLIENT_THAT_DIES = """
import sys
from agentgym_budget.integrations.openenv_env import BudgetEnvClient, TextAction
client = BudgetEnvClient(base_url=sys.argv[1]).sync().connect()
client.reset(seed=0)
client.step(TextAction(command="look"))
print("mid-episode", flush=True)
sys.stdin.read()  # wait to be killed
"""


def test_a_client_that_dies_mid_episode_does_not_leak_its_env() -> None:
    with serve("KeyDoor-Budget-v0", budget=4, wrappers=[LiveEnvs], max_concurrent_envs=1) as url:
        LiveEnvs.open, LiveEnvs.made = 0, 0  # not counting the env the app checked its settings with (closed)
        child = subprocess.Popen([sys.executable, "-c", CLIENT_THAT_DIES, url], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "mid-episode"
            assert LiveEnvs.open == 1
        finally:
            child.kill()  # no close message: the TCP connection just drops
            child.wait(timeout=30)
        assert wait_until(lambda: LiveEnvs.open == 0), "the dead client's env was not closed"
        # Its slot is free again: with room for one session, a new client can play.
        with BudgetEnvClient(base_url=url).sync() as client:
            result = client.reset(seed=0)
            assert (result.observation.turn, result.observation.budget) == (0, 4)
        assert LiveEnvs.made == 2


# -- OpenEnv's own app over HTTP (its FastAPI app, a test client) ---------------------------------------------------
def http_client(**app_kwargs):
    from fastapi.testclient import TestClient

    from agentgym_budget.integrations.openenv_env import make_openenv_app

    return TestClient(make_openenv_app("KeyDoor-Budget-v0", budget="mix:2,3", **app_kwargs),
                      raise_server_exceptions=False)


def test_http_state_serves_the_budget_fields() -> None:
    state = http_client().get("/state")
    assert state.status_code == 200
    body = state.json()
    assert body["env_id"] == "KeyDoor-Budget-v0" and body["budget"] in (2, 3) and body["turns_left"] == body["budget"]
    assert set(body) >= {"episode_id", "step_count", "env_id", "budget", "turns_left"}


@pytest.mark.parametrize("path, body, status, message", [
    ("/reset", {"seed": 0, "budget": "abc"}, 400, r"^budget must be a positive integer, got 'abc'$"),
    ("/reset", {"seed": 0, "budget": 0}, 400, r"^budget must be a positive integer, got 0$"),
    ("/reset", {"seed": 0, "progress": -1}, 400, r"^progress must be a number >= 0, got -1$"),
    ("/reset", {"seed": 0, "task": "nope"}, 400, r"^reset refused: unknown KeyDoor task 'nope'"),
    # HTTP is stateless in OpenEnv: a /step meets a fresh env, and is told where episodes are played
    ("/step", {"action": {"command": "look"}}, 409, r"^the episode has not started: call reset first .*WebSocket"),
    ("/step", {"action": {"command": 5}}, 422, None),  # OpenEnv's own validation of the action
])
def test_bad_input_is_a_4xx_with_a_message(path, body, status, message) -> None:
    response = http_client().post(path, json=body)
    assert response.status_code == status
    detail = response.json()["detail"]
    if message is not None:
        assert isinstance(detail, str) and "\n" not in detail
        assert re.search(message, detail), detail
    assert http_client().post("/reset", json={"seed": 0, "budget": 2}).status_code == 200  # good input still plays


def test_an_env_fault_over_http_is_a_500_with_the_message() -> None:
    # over HTTP the fault is a 500 with the message, not a bare one
    class RaisesAtReset(gym.Wrapper):
        def reset(self, **kwargs):
            raise OSError("engine crashed")

    response = http_client(wrappers=[RaisesAtReset]).post("/reset", json={"seed": 0})
    assert response.status_code == 500
    detail = response.json()["detail"]
    assert detail.startswith("the env failed: OSError: engine crashed (at reset), and again in a fresh env; this "
                             "episode is lost")

"""verifiers: BudgetMultiTurnEnv.evaluate against the real llama.cpp OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

vf = pytest.importorskip("verifiers", reason="needs the verifiers extra")

import agentgym_budget  # noqa: E402,F401
from agentgym_budget.integrations.session import BudgetSession  # noqa: E402
from agentgym_budget.integrations.verifiers_env import BudgetMultiTurnEnv  # noqa: E402
from tools.llama_server import LlamaServer, export_tiny_gguf  # noqa: E402

ENV_ID = "ALFWorld-Budget-v0"


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    pytest.importorskip("gguf", reason="the 'serve-test' extra is not installed")
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the 'serve-test' extra)")
    path = export_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-alfworld.gguf", env_id="ALFWorld-v0")
    with LlamaServer(path, model="tiny-alfworld", n_ctx=4096) as server:
        yield server


def test_the_dataset_is_one_episode_per_seed() -> None:
    env = BudgetMultiTurnEnv(ENV_ID, budget="mix:2,3", num_examples=3, first_seed=10)
    assert [row["info"]["seed"] for row in env.get_eval_dataset()] == [10, 11, 12]
    assert env.max_turns == -1  # the budget is the limit


@pytest.mark.slow
def test_evaluate_against_the_real_llama_cpp_server(llama: LlamaServer) -> None:
    from openai import AsyncOpenAI

    from agentgym_budget.integrations.verifiers_env import StrictServerClient

    env = BudgetMultiTurnEnv(ENV_ID, budget="mix:2,3", num_examples=4, first_seed=4, env_kwargs={"show_budget": True})
    client = StrictServerClient(AsyncOpenAI(base_url=llama.base_url, api_key="none"))
    sampling = {"temperature": 1.0, "extra_body": {"max_tokens": 12, "seed": 0}}
    results = env.evaluate_sync(client, llama.model, sampling_args=sampling,
                                rollouts_per_example=2, max_concurrent=2)
    outputs = results["outputs"]
    assert len(outputs) == 8
    local = BudgetSession(ENV_ID, budget="mix:2,3")
    for out in outputs:
        seed = out["info"]["seed"]
        local.reset(seed=seed)
        metrics = out["metrics"]
        assert out.get("error") is None, out.get("error")
        assert metrics["budget"] == local.budget  # the row's seed drew the budget, as TurnBudget draws it
        # The rollout ended exactly when the env did or the budget did, and verifiers records which.
        assert out["stop_condition"] in ("env_terminated", "budget_truncated")
        assert (out["stop_condition"] == "budget_truncated") == bool(metrics["truncated"])
        if metrics["truncated"]:
            assert metrics["turns"] == metrics["budget"]
        assert out["reward"] == pytest.approx(float(metrics["won"]))  # no process reward here: won -> 1
        # The model saw the budget; the completion is reply, observation, ..., the final observation.
        assert f"[Turns left: {local.budget} of {local.budget}]" in out["prompt"][-1]["content"]
        roles = [m["role"] for m in out["completion"]]
        assert roles == ["assistant", "user"] * int(metrics["turns"])
        if metrics["truncated"]:
            assert out["completion"][-1]["content"].endswith("The episode is over: the turn budget is spent.")
    assert {out["metrics"]["budget"] for out in outputs} == {2, 3}


def test_an_episode_the_env_terminates_stops_on_env_terminated() -> None:
    # The rollout's own hooks, driven by hand with expert replies (the tiny served model never wins).
    import asyncio

    from agentgym_budget.integrations.verifiers_env import episode_return

    env = BudgetMultiTurnEnv(ENV_ID, budget="mix:2,3")
    mirror = BudgetSession(ENV_ID, budget=50)
    mirror.reset(seed=3)

    async def play() -> vf.State:
        state = vf.State(input={"prompt": [{"role": "system", "content": "play"}], "info": {"seed": 3, "budget": 50}})
        state["prompt"] = [{"role": "system", "content": "play"}]
        state = await env.setup_state(state)
        while not (await env.env_terminated(state) or await env.budget_truncated(state)):
            action = mirror.info["expert_action"]
            mirror.step(action)
            await env.env_response([{"role": "assistant", "content": f"Action: {action}"}], state)
        return state

    state = asyncio.run(play())
    assert asyncio.run(env.env_terminated(state)) and not asyncio.run(env.budget_truncated(state))
    assert state["episode"]["won"] and state["episode"]["budget"] == 50
    assert asyncio.run(episode_return(state)) == 1.0
    assert state["final_env_response"][0].content.endswith("the task was completed.")
    asyncio.run(env.close_episode(state))


def test_a_command_is_played_as_written_unless_fuzzy_matching_is_asked_for() -> None:
    import asyncio

    async def first_answer(env: BudgetMultiTurnEnv, reply: str) -> str:
        info = {"seed": 0, "budget": 4, "options": {"task": "red-blue"}}
        state = vf.State(input={"prompt": [{"role": "system", "content": "play"}], "info": info})
        state["prompt"] = [{"role": "system", "content": "play"}]
        state = await env.setup_state(state)
        [response] = await env.env_response([{"role": "assistant", "content": reply}], state)
        await env.close_episode(state)
        return response.content

    exact = BudgetMultiTurnEnv("KeyDoor-Budget-v0", budget=4)
    fuzzy = BudgetMultiTurnEnv("KeyDoor-Budget-v0", budget=4, action_matching="fuzzy")
    assert "You take the key." not in asyncio.run(first_answer(exact, "Action: tak key"))
    assert "You take the key." in asyncio.run(first_answer(fuzzy, "Action: tak key"))
    # no green door in a red-blue room: played as written, never as "open red door" (locked)
    for env in (exact, fuzzy):
        assert "locked" not in asyncio.run(first_answer(env, "Action: open green door"))
    with pytest.raises(ValueError, match="action matching must be one of"):
        BudgetMultiTurnEnv("KeyDoor-Budget-v0", budget=4, action_matching="closest")

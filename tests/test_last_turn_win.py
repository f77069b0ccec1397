"""One rule in every adapter: a win on the budget's last turn is a win, truncated means the budget ran out first.

``TurnBudget`` returns ``terminated=True, truncated=True`` for such a step (Gymnasium's
``TimeLimit`` convention); each library reports a single outcome, and it must be the win.  The
episodes are KeyDoor's: the expert wins in exactly two turns ("take key", "open <door>"), so a
budget of 2 makes the win land on the last turn and a budget of 1 runs out first.  Each adapter
is driven through its library's own entry point.
"""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

import agentgym_budget  # noqa: F401
from agentgym_budget.integrations.session import BudgetSession

ENV_ID = "KeyDoor-Budget-v0"
SEEDS = (0, 1, 2)


def expert_commands(seed: int) -> list[str]:
    """The two winning commands of KeyDoor's episode ``seed``."""
    session = BudgetSession(ENV_ID, budget=2)
    session.reset(seed=seed)
    door = re.search(r"open the (\w+) door", session.info["task"]).group(1)
    return ["take key", f"open {door} door"]


def test_turn_budget_reports_a_last_turn_win_with_both_flags() -> None:
    # The premise of this file: Gymnasium's convention sets both flags on that step.
    env = gym.make(ENV_ID, budget=2)
    env.reset(seed=0)
    for command in expert_commands(0):
        _, reward, terminated, truncated, info = env.step(command)
    assert (reward, terminated, truncated, info["won"]) == (1.0, True, True, True)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_session_reports_it_as_terminated(seed: int) -> None:
    session = BudgetSession(ENV_ID, budget=2)
    session.reset(seed=seed)
    for command in expert_commands(seed):
        session.step(command)
    assert session.summary() | {"env_id": None} == {
        "env_id": None, "budget": 2, "turns": 2, "turns_left": 0, "terminated": True, "truncated": False,
        "outcome": "terminated", "won": True, "return": 1.0, "failed": False, "env_failures": 0, "error": None}
    session.reset(seed=seed, budget=1)
    session.step(expert_commands(seed)[0])
    assert (session.terminated, session.truncated, session.outcome) == (False, True, "truncated")


def test_trl_outcome_column_and_metrics() -> None:
    pytest.importorskip("trl", reason="needs the trl extra")
    from agentgym_budget.integrations.trl_env import environment_factory, episode_reward

    make_env = environment_factory(ENV_ID, budget="mix:1,2")
    envs = []
    for seed, budget in [(0, 2), (1, 2), (2, 1)]:  # two last-turn wins, one budget that runs out first
        env = make_env()
        env.reset(seed=seed, budget=budget)
        for command in expert_commands(seed)[:budget]:
            last = env.act(command)
        envs.append(env)
    columns: dict = {}
    metrics: dict = {}
    assert episode_reward(envs, log_extra=columns.__setitem__, log_metric=metrics.__setitem__) == [1.0, 1.0, 0.0]
    assert columns["outcome"] == ["terminated", "terminated", "truncated"] and columns["won"] == [True, True, False]
    assert metrics["episode/terminated"] == pytest.approx(2 / 3) and metrics["episode/truncated"] == pytest.approx(1 / 3)
    assert last.endswith("The episode is over: the turn budget is spent.")


def test_verifiers_stop_condition_and_metrics_through_evaluate() -> None:
    pytest.importorskip("verifiers", reason="needs the verifiers extra")
    from tools.scripted_clients import ScriptedClient

    from agentgym_budget.integrations.verifiers_env import BudgetMultiTurnEnv

    for budget, stop, won in [(2, "env_terminated", 1.0), (1, "budget_truncated", 0.0)]:
        env = BudgetMultiTurnEnv(ENV_ID, budget=budget, num_examples=len(SEEDS))
        outputs = env.evaluate_sync(ScriptedClient(), "keydoor-expert", rollouts_per_example=2)["outputs"]
        assert len(outputs) == 2 * len(SEEDS)
        for out in outputs:
            metrics = out["metrics"]
            assert out.get("error") is None and out["stop_condition"] == stop, (budget, out["stop_condition"])
            assert (metrics["budget"], metrics["turns"], metrics["won"], out["reward"]) == (budget, budget, won, won)
            assert (metrics["terminated"], metrics["truncated"]) == (won, 1.0 - won)


def test_skyrl_metadata_and_aggregated_metrics() -> None:
    skyrl_gym = pytest.importorskip("skyrl_gym", reason="needs the skyrl extra")
    from skyrl_gym.metrics import aggregate_for_environment

    from agentgym_budget.integrations.skyrl import register_skyrl_envs

    register_skyrl_envs([ENV_ID])
    episodes = []
    for seed in SEEDS:
        env = skyrl_gym.make(ENV_ID, env_config={"budget": "mix:1,2"}, extras={"seed": seed, "budget": 2})
        env.init([{"role": "system", "content": "Answer with 'Action: <command>'."}])
        for command in expert_commands(seed):
            out = env.step(f"Action: {command}")
        assert out["done"] and out["reward"] == 1.0
        assert (out["metadata"]["terminated"], out["metadata"]["truncated"], out["metadata"]["won"]) == (True, False, True)
        episodes.append(env.get_metrics())
        env.close()
    aggregated = aggregate_for_environment(ENV_ID, episodes)
    assert aggregated["truncated"] == 0.0 and aggregated["terminated"] == 1.0 and aggregated["won"] == 1.0


def test_openenv_observation_through_its_server_and_client() -> None:
    pytest.importorskip("agentgym_budget.integrations.openenv_env", reason="needs openenv 0.10 (the openenv extra)", exc_type=ImportError)
    from agentgym_budget.integrations.openenv_env import BudgetEnvClient, TextAction, serve

    with serve(ENV_ID, budget="mix:1,2") as url, BudgetEnvClient(base_url=url).sync() as client:
        for seed, budget in [(0, 2), (1, 1)]:
            client.reset(seed=seed, budget=budget)
            for command in expert_commands(seed)[:budget]:
                result = client.step(TextAction(command=command))
            observation = result.observation
            assert result.done and observation.budget == budget and observation.turns_left == 0
            assert (observation.won, observation.terminated, observation.truncated) == (
                budget == 2, budget == 2, budget == 1)

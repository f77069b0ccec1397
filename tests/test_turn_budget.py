"""TurnBudget semantics on our text envs and on any Gymnasium env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from toy_env import CorridorEnv

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.wrappers import TurnBudget, parse_budget_spec
from agentgym_budget.wrappers.budget import BUDGET_OPTIONS
from agentgym_budget.wrappers.budget_core import SCHEDULE_OPTIONS


def run(env, actions, seed=0, options=None):
    obs, info = env.reset(seed=seed, options=options)
    steps = [(obs, 0.0, False, False, info)]
    for action in actions:
        steps.append(env.step(action))
    return steps


@pytest.mark.parametrize("budget", [1, 2, 5, 9])
def test_truncates_exactly_when_the_budget_is_spent(budget):
    env = TurnBudget(CorridorEnv(min_length=20, max_length=20), budget=budget)
    steps = run(env, ["look"] * budget)
    truncations = [s[3] for s in steps[1:]]
    assert truncations == [False] * (budget - 1) + [True]
    assert not any(s[2] for s in steps)
    assert [s[4]["turns_left"] for s in steps] == list(range(budget, -1, -1))
    assert [s[4]["turn"] for s in steps] == list(range(budget + 1))
    assert all(s[4]["budget"] == budget for s in steps)


def test_terminated_is_left_to_the_env():
    env = TurnBudget(CorridorEnv(min_length=3, max_length=3), budget=10)
    steps = run(env, ["go east"] * 3)
    assert [(s[2], s[3]) for s in steps[1:]] == [(False, False), (False, False), (True, False)]
    assert steps[-1][4]["won"]
    lost = run(TurnBudget(CorridorEnv(), budget=1), ["fall"])[-1]
    assert lost[2] and lost[3] and lost[4]["lost"]  # lost on the last turn: both flags, as TimeLimit does


def test_winning_on_the_last_turn_is_terminated_and_truncated():
    env = TurnBudget(CorridorEnv(min_length=3, max_length=3), budget=3)
    *_, last = run(env, ["go east"] * 3)
    assert last[2] and last[3] and last[4]["won"]


def test_shown_budget_suffix_and_prefix():
    env = TurnBudget(CorridorEnv(min_length=9, max_length=9), budget=3, show_budget=True)
    obs, _ = env.reset(seed=0)
    assert obs.endswith("\n\n[Turns left: 3 of 3]")
    assert env.observation_space.contains(obs)
    obs, *_ = env.step("look")
    assert obs == "You are at position 0.\n\n[Turns left: 2 of 3]"
    env = TurnBudget(CorridorEnv(), budget=4, show_budget=True, budget_position="prefix",
                     budget_template="You have {turns_left} turns left (turn {turn}).")
    obs, _ = env.reset(seed=0)
    assert obs.startswith("You have 4 turns left (turn 0).\n\nYou are at")


def test_bad_show_budget_settings_raise():
    with pytest.raises(ValueError, match="only use"):
        TurnBudget(CorridorEnv(), budget=3, show_budget=True, budget_template="{remaining}")
    with pytest.raises(ValueError, match="prefix"):
        TurnBudget(CorridorEnv(), budget=3, budget_position="middle")
    with pytest.raises(ValueError, match="Text observation space"):
        TurnBudget(gym.make("CartPole-v1"), budget=3, show_budget=True)
    with pytest.raises(ValueError, match="charset"):
        TurnBudget(CorridorEnv(), budget=3, show_budget=True, budget_template="\u00e9 {turns_left}")


def test_same_seed_same_budgets_and_the_task_sequence_is_untouched():
    def budgets_and_tasks(seed):
        env = TurnBudget(CorridorEnv(), budget="mix:10,20,30,40,50")
        _, info = env.reset(seed=seed)
        out = [(info["budget"], info["task"])]
        for _ in range(30):
            _, info = env.reset()
            out.append((info["budget"], info["task"]))
        return out

    first, again, other = budgets_and_tasks(3), budgets_and_tasks(3), budgets_and_tasks(4)
    assert first == again and first != other
    assert len({b for b, _ in first}) >= 3
    bare = CorridorEnv()
    _, info = bare.reset(seed=3)
    tasks = [info["task"]] + [bare.reset()[1]["task"] for _ in range(30)]
    assert tasks == [t for _, t in first]


def test_budget_can_be_forced_per_episode():
    env = TurnBudget(CorridorEnv(), budget="mix")
    _, info = env.reset(seed=0, options={"budget": 2})
    assert info["budget"] == 2
    *_, last = [env.step("look") for _ in range(2)]
    assert last[3]
    with pytest.raises(ValueError, match="int >= 1"):
        env.reset(options={"budget": 0})
    _, info = env.reset(options={"task": 4})  # other options pass through
    assert info["task"] == "walk 4 steps east"


def test_curriculum_by_episodes_and_by_steps():
    env = TurnBudget(CorridorEnv(), budget="curriculum", schedule=[(0, 10), (2, 20), (4, 30)], interpolation="step")
    assert [env.reset(seed=0)[1]["budget"]] + [env.reset()[1]["budget"] for _ in range(5)] == [10, 10, 20, 20, 30, 30]
    env.set_progress(0)
    assert env.reset()[1]["budget"] == 10
    by_steps = TurnBudget(CorridorEnv(min_length=50, max_length=50), budget="curriculum:10->30@20steps")
    assert by_steps.reset(seed=0)[1]["budget"] == 10
    for _ in range(10):
        by_steps.step("look")
    assert by_steps.reset()[1]["budget"] == 20
    with pytest.raises(ValueError):
        by_steps.set_progress(-1)


def test_works_on_any_gymnasium_env():
    env = TurnBudget(gym.make("CartPole-v1"), budget=5)
    env.reset(seed=0)
    flags = [env.step(0)[2:4] for _ in range(5)]
    assert flags[-1][1] or flags[-1][0]
    assert not any(truncated for _, truncated in flags[:-1])


def test_check_env_passes_on_budgeted_text_env():
    check_env(TurnBudget(CorridorEnv(), budget="mix", show_budget=True), skip_render_check=True)


def test_spec_is_preserved_and_recreates_the_budget():
    env = gym.make("CartPole-v1")
    wrapped = TurnBudget(env, budget="uniform:3-4")
    assert wrapped.spec.id == "CartPole-v1"
    assert wrapped.spec.additional_wrappers[-1].name == "TurnBudget"
    assert wrapped.spec.additional_wrappers[-1].kwargs["budget"] == "uniform:3-4"
    assert env.spec.additional_wrappers == ()  # the inner spec is not mutated
    remade = gym.make(wrapped.spec)
    _, info = remade.reset(seed=0)
    assert info["budget"] in (3, 4)


def test_composes_with_record_episode_statistics():
    env = gym.wrappers.RecordEpisodeStatistics(TurnBudget(CorridorEnv(min_length=9, max_length=9), budget=4))
    env.reset(seed=0)
    for _ in range(4):
        *_, info = env.step("look")
    assert info["episode"]["l"] == 4


def looks_until_the_end(env, options=None):
    """``(turns_left after each step, the turns on which the episode was truncated)`` of one episode of "look"s."""
    env.reset(options=options)
    turns_left, truncated_at, done, turn = [], [], False, 0
    while not done and turn < 200:
        turn += 1
        _, _, terminated, truncated, info = env.step("look")
        turns_left.append(info["turns_left"])
        truncated_at += [turn] if truncated else []
        done = terminated or truncated
    return turns_left, truncated_at


@pytest.mark.parametrize("env_id, budget", [("ALFWorld-v0", 60), ("KeyDoor-v0", 20)])
def test_a_budget_longer_than_the_registered_step_limit_lifts_it(env_id, budget):
    assert gym.spec(env_id).max_episode_steps < budget  # the README's form: TurnBudget(gym.make(id), budget=T)
    env = TurnBudget(gym.make(env_id), budget=budget)
    env.reset(seed=0)
    assert looks_until_the_end(env) == (list(range(budget - 1, -1, -1)), [budget])


def test_a_mix_a_curriculum_and_a_forced_budget_above_the_limit_are_lifted():
    mix = TurnBudget(gym.make("KeyDoor-v0"), budget="mix:5,30")  # KeyDoor-v0 stops at 8 steps
    mix.reset(seed=0)
    lengths = {looks_until_the_end(mix)[1][0] for _ in range(20)}
    assert lengths == {5, 30}
    curriculum = TurnBudget(gym.make("KeyDoor-v0"), budget="curriculum:30->5@10")
    curriculum.reset(seed=0)
    curriculum.set_progress(0)
    assert looks_until_the_end(curriculum)[1] == [30]
    forced = looks_until_the_end(mix, options={"budget": 45})  # above anything the mix draws
    assert forced == (list(range(44, -1, -1)), [45])


def test_the_spec_carries_the_budget_and_no_other_step_limit():
    env = TurnBudget(gym.make("KeyDoor-v0"), budget=20)
    assert env.spec.max_episode_steps is None and env.spec.additional_wrappers[-1].name == "TurnBudget"
    remade = gym.make(env.spec)
    remade.reset(seed=0)
    assert looks_until_the_end(remade)[1] == [20]


def test_option_lists_are_the_signatures_keywords():
    import inspect

    schedule_keywords = set(inspect.signature(parse_budget_spec).parameters) - {"spec"}
    wrapper_keywords = set(inspect.signature(TurnBudget.__init__).parameters) - {"self", "env", "schedule_options"}
    assert SCHEDULE_OPTIONS == schedule_keywords
    assert BUDGET_OPTIONS == wrapper_keywords | schedule_keywords


@pytest.mark.parametrize("vector_cls", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_composes_with_vector_envs(vector_cls):
    fns = [lambda: TurnBudget(CorridorEnv(min_length=9, max_length=9), budget=3, show_budget=True)] * 2
    kwargs = {"shared_memory": False} if vector_cls is gym.vector.AsyncVectorEnv else {}
    envs = vector_cls(fns, **kwargs)
    try:
        obs, infos = envs.reset(seed=[1, 2])
        assert len(obs) == 2 and all(o.endswith("[Turns left: 3 of 3]") for o in obs)
        for _ in range(3):
            obs, rewards, terminated, truncated, infos = envs.step(("look", "look"))
        assert truncated.tolist() == [True, True] and not terminated.any()
        assert np.asarray(infos["budget"]).tolist() == [3, 3]
        envs.call("set_progress", 5)
        assert list(envs.get_attr("progress")) == [5.0, 5.0]
    finally:
        envs.close()

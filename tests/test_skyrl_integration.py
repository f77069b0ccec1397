"""SkyRL-gym: episodes through skyrl_gym's registry and the env calls of SkyRL's generator loop."""

from __future__ import annotations

import copy

import numpy as np
import pytest

skyrl_gym = pytest.importorskip("skyrl_gym", reason="needs the skyrl extra")

from omegaconf import DictConfig  # noqa: E402
from skyrl_gym.metrics import aggregate_for_environment  # noqa: E402

import agentgym_budget  # noqa: E402,F401
from agentgym_budget.integrations.session import BudgetSession  # noqa: E402
from agentgym_budget.integrations.skyrl import (  # noqa: E402
    SkyRLBudgetEnv, register_skyrl_envs, reset_shared_progress, shared_progress)
from agentgym_budget.wrappers import ProcessReward  # noqa: E402

SYSTEM = [{"role": "system", "content": "You play a text game. Answer with 'Action: <command>'."}]


def agent_loop(env_class: str, env_config: DictConfig, extras: dict, generate) -> tuple[list, list, dict]:
    """The environment side of SkyRL's ``SkyRLGymGenerator.agent_loop_trajectory_wise`` (skyrl-train):
    make by class name with ``env_config``/``extras`` (plus ``max_turns``), ``init`` on a copy of the
    prompt, ``step`` the generated text until ``done``, ``get_metrics``, ``close``."""
    extras = {**extras, "max_turns": 2}  # SkyRL's generator always sets it; the budget must win
    env = skyrl_gym.make(env_class, env_config=env_config, extras=extras)
    chat_history, _ = env.init(copy.deepcopy(SYSTEM))
    outputs, done = [], False
    while not done:
        output = generate(chat_history)
        out = env.step(output)
        outputs.append(out)
        chat_history = [*chat_history, {"role": "assistant", "content": output}, *out["observations"]]
        done = out["done"]
    metrics = env.get_metrics()
    env.close()
    return chat_history, outputs, metrics


def test_every_budget_id_is_registered_in_skyrl_gym() -> None:
    ids = register_skyrl_envs()
    assert "ALFWorld-Budget-v0" in ids and "KeyDoor-Budget-v0" in ids
    assert register_skyrl_envs() == ids  # idempotent
    for env_id in ids:
        assert skyrl_gym.registry[env_id].kwargs == {"env_id": env_id}


def test_mix_budget_episodes_end_at_the_budget_or_the_env_end() -> None:
    register_skyrl_envs()
    config = DictConfig({"budget": "mix", "budgets": [2, 3, 5], "show_budget": True})
    rng = np.random.default_rng(0)
    budgets, metrics = [], []

    def random_reply(chat):
        commands = chat[-1]["content"].rsplit("Available commands: ", 1)[1].split(", ")
        return f"Thought: let me try.\nAction: {rng.choice(commands)}"

    for seed in range(10):
        chat, outputs, m = agent_loop("ALFWorld-Budget-v0", config, {"seed": seed}, random_reply)
        last = outputs[-1]["metadata"]
        budgets.append(last["budget"])
        metrics.append(m)
        assert chat[1]["content"].splitlines()[-2].startswith(f"[Turns left: {last['budget']} of {last['budget']}]")
        # Every step before the last is not done; the last is done exactly because the env ended or the budget did.
        assert [o["done"] for o in outputs] == [False] * (len(outputs) - 1) + [True]
        assert last["terminated"] or last["truncated"]
        assert last["truncated"] == (len(outputs) == last["budget"])
        assert len(outputs) <= last["budget"]  # SkyRL's max_turns=2 did not cut the episode short
        assert outputs[-1]["observations"] == []
        assert m == {"budget": last["budget"], "turns": len(outputs), "won": float(last["won"]),
                     "terminated": float(last["terminated"]), "truncated": float(last["truncated"]),
                     "return": sum(o["reward"] for o in outputs), "failed": 0.0, "env_failures": 0.0}
    # The budget is drawn per episode, by seed, as TurnBudget draws it.
    local = BudgetSession("ALFWorld-Budget-v0", budget="mix", budgets=[2, 3, 5])
    assert budgets == [(local.reset(seed=s), local.budget)[1] for s in range(10)]
    assert len(set(budgets)) > 1
    aggregated = aggregate_for_environment("ALFWorld-Budget-v0", metrics)
    assert aggregated["budget"] == pytest.approx(np.mean(budgets))


def test_the_expert_wins_with_reward_one_and_terminates() -> None:
    register_skyrl_envs()
    mirror = BudgetSession("ALFWorld-Budget-v0", budget=50)
    mirror.reset(seed=3)

    def expert(chat):
        action = mirror.info["expert_action"]
        mirror.step(action)
        return f"Thought: the expert would.\nAction: {action}"

    _, outputs, metrics = agent_loop("ALFWorld-Budget-v0", DictConfig({"budget": 50}), {"seed": 3}, expert)
    last = outputs[-1]
    assert (last["metadata"]["terminated"], last["metadata"]["truncated"], last["metadata"]["won"]) == (
        True, False, True)
    assert last["reward"] == 1.0 and metrics["return"] == 1.0 and metrics["turns"] == len(outputs) < 50


def test_forced_budget_process_reward_and_bad_config() -> None:
    env = SkyRLBudgetEnv({"budget": "mix:5,6"}, {"seed": 0, "budget": 2, "options": {"task": "red-blue"}},
                         env_id="KeyDoor-Budget-v0",
                         wrappers=[lambda e: ProcessReward(e, "invalid_penalty", 0.5, potential_based=False)])
    prompt, meta = env.init([])
    assert meta["budget"] == 2 and meta["task"] == "open the red door"
    out = env.step("Action: dance")  # not admissible: the process reward penalises it
    assert out["reward"] == -0.5 and out["metadata"]["command"] == "dance" and not out["done"]
    out = env.step("Open red door.\nbecause")  # no "Action:" line: the first line, matched to a command
    assert out["metadata"]["command"] == "open red door" and out["done"] and out["metadata"]["truncated"]
    env.close()
    with pytest.raises(ValueError, match="env_id"):
        SkyRLBudgetEnv({"budget": 3})


def test_a_command_is_played_as_written_unless_fuzzy_matching_is_asked_for() -> None:
    def first_command(reply: str, **env_config) -> str:
        env = SkyRLBudgetEnv({"budget": 4, **env_config}, {"seed": 0, "options": {"task": "red-blue"}},
                             env_id="KeyDoor-Budget-v0")
        env.init([])
        command = env.step(reply)["metadata"]["command"]
        env.close()
        return command

    assert first_command("Action: open green door") == "open green door"  # no green door: not mapped to red
    assert first_command("Action: tak key") == "tak key"
    assert first_command("Action: tak key", action_matching="fuzzy") == "take key"
    assert first_command("Action: open green door", action_matching="fuzzy") == "open green door"
    with pytest.raises(ValueError, match="action matching must be one of"):
        SkyRLBudgetEnv({"budget": 4, "action_matching": "closest"}, env_id="KeyDoor-Budget-v0")


def test_a_curriculum_follows_the_progress_the_trainer_passes() -> None:
    # SkyRL makes a fresh env per trajectory, so a curriculum needs the trainer's progress.
    register_skyrl_envs()
    config = DictConfig({"budget": "curriculum:8->2@100"})
    budgets = []
    for progress in (0, 50, 100, 1000):
        env = skyrl_gym.make("KeyDoor-Budget-v0", env_config=config, extras={"seed": 0, "progress": progress})
        budgets.append(env.init([])[1]["budget"])
        env.close()
    assert budgets == [8, 5, 2, 2]


def _budgets(config: DictConfig, episodes: int, reply: str = "Action: look") -> list[int]:
    """Each episode's budget, every episode made and played as SkyRL's generator does (no progress in extras)."""
    budgets = []
    for seed in range(episodes):
        _, outputs, _ = agent_loop("KeyDoor-Budget-v0", config, {"seed": seed}, lambda chat: reply)
        budgets.append(outputs[-1]["metadata"]["budget"])
    return budgets


def test_a_curriculum_advances_over_trajectories_made_through_skyrl_gym_make() -> None:
    register_skyrl_envs()
    reset_shared_progress()
    config = DictConfig({"budget": "curriculum:6->2@4"})
    assert _budgets(config, 6) == [6, 5, 4, 3, 2, 2]  # a fresh env per trajectory, and still the curriculum moves
    assert shared_progress("KeyDoor-Budget-v0", config) == 6
    # another env config is another curriculum; the counters start again on request
    assert _budgets(DictConfig({"budget": "curriculum:6->2@4", "show_budget": True}), 2) == [6, 5]
    reset_shared_progress()
    assert _budgets(config, 1) == [6]


def test_a_curriculum_in_steps_counts_every_envs_steps() -> None:
    register_skyrl_envs()
    reset_shared_progress()
    config = DictConfig({"budget": "curriculum:6->2@8steps"})
    # "look" never ends a KeyDoor episode: each runs to its budget; progress = the steps before it
    assert _budgets(config, 3) == [6, 3, 2]  # progress 0, 6, 9
    assert shared_progress("KeyDoor-Budget-v0", config) == 6 + 3 + 2


def test_wrappers_and_budget_options_through_env_config() -> None:
    register_skyrl_envs()
    for setting in ("invalid_penalty", {"signal": "invalid_penalty", "coef": 0.5, "potential_based": False}):
        config = DictConfig({"budget": 3, "show_budget": True, "process_reward": setting})
        env = skyrl_gym.make("KeyDoor-Budget-v0", env_config=config, extras={"seed": 0})
        prompt, _ = env.init([])
        assert "[Turns left: 3 of 3]" in prompt[-1]["content"]  # show_budget reached TurnBudget
        out = env.step("Action: dance")
        assert out["reward"] < 0 and out["metadata"]["process_reward"] < 0  # ProcessReward is on top
        env.close()


@pytest.mark.parametrize("config, message", [
    ({"budget": 3, "show_budgte": True}, r"^unknown env_config key 'show_budgte' for KeyDoor-Budget-v0; known: "),
    ({"budget": 3, "process_reward": {"signal": "subgoal", "coeff": 1}},
     r"^env_config process_reward: got an unexpected keyword argument 'coeff'$"),
])
def test_a_wrong_env_config_key_is_a_one_line_error(config, message) -> None:
    register_skyrl_envs()
    with pytest.raises(ValueError, match=message) as error:
        skyrl_gym.make("KeyDoor-Budget-v0", env_config=DictConfig(config), extras={"seed": 0})
    assert "\n" not in str(error.value)

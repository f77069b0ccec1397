"""ProcessReward: potential-based shaping telescopes, each signal on scripted episodes, composition."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentgym_budget  # noqa: F401  (registers the env ids)
from agentgym_budget.envs.alfworld.subgoals import alfworld_subgoals
from agentgym_budget.envs.base import TextEnv
from agentgym_budget.wrappers import ProcessReward, TurnBudget
from agentgym_budget.wrappers.process_reward import (
    SUBGOAL_DETECTORS,
    register_subgoal_detector,
)
from scripted_envs import LineWorld


def play(env: gym.Env, actions: list[str], seed: int = 0, options: dict | None = None):
    """Run ``actions`` (stopping at the episode end); return (reset info, list of step tuples)."""
    _, info0 = env.reset(seed=seed, options=options)
    steps = []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        steps.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return info0, steps


# -- the potential form telescopes ----------------------------------------------------------
@pytest.mark.parametrize("gamma", [1.0, 0.9])
@pytest.mark.parametrize("signal", ["expert_progress", "subgoal", "invalid_penalty"])
@pytest.mark.parametrize("seed", range(8))
def test_potential_shaping_telescopes(signal: str, gamma: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    env = ProcessReward(TurnBudget(LineWorld(report_subgoals=True), budget=12), signal, gamma=gamma)
    actions = [str(a) for a in rng.choice(["forward", "forward", "back", "wait", "jump", "fly"], size=12)]
    info0, steps = play(env, actions, seed=seed)
    discounted = sum(gamma**t * info["process_reward"] for t, (*_, info) in enumerate(steps))
    _, _, terminated, truncated, last = steps[-1]
    assert terminated or truncated
    end = 0.0 if terminated else last["potential"]
    assert discounted == pytest.approx(gamma ** len(steps) * end - info0["potential"])


def test_potential_form_total_is_policy_independent_for_ended_episodes() -> None:
    """Every terminated episode gets the same total shaping, -Φ(s0): the optimal policy is unchanged."""
    totals = set()
    for actions in (["forward"] * 4, ["forward", "jump"], ["wait", "back", "forward", "forward", "fly", "forward", "forward"]):
        env = ProcessReward(LineWorld(), "expert_progress")
        info0, steps = play(env, actions, options={"task": 4})
        assert steps[-1][2], "the scripted episode should terminate"
        totals.add(round(sum(s[4]["process_reward"] for s in steps), 9))
        assert info0["potential"] == -4.0
    assert totals == {4.0}


# -- each signal, scripted ------------------------------------------------------------------
def test_expert_progress_raw_is_the_plan_length_decrease() -> None:
    env = ProcessReward(LineWorld(), "expert_progress", coef=0.5, potential_based=False)
    _, steps = play(env, ["forward", "back", "wait", "forward", "forward", "forward"], options={"task": 3})
    assert [s[4]["process_reward"] for s in steps] == [0.5, -0.5, 0.0, 0.5, 0.5, 0.5]
    assert [s[4]["outcome_reward"] for s in steps] == [0, 0, 0, 0, 0, 1.0]
    assert [s[1] for s in steps] == [0.5, -0.5, 0.0, 0.5, 0.5, 1.5]


@pytest.mark.parametrize("env_id, seed", [("KeyDoor-v0", 0), ("KeyDoorRooms-v0", 12)])
def test_expert_progress_pays_the_winning_door_and_not_the_wrong_one(env_id: str, seed: int) -> None:
    # Issue 40: the toy envs keep the final state's plan (["open red door"]) after the win, so the
    # winning turn earned 0 — the same as opening the wrong door.  A won game has no plan left.
    probe = gym.make(env_id)
    _, info = probe.reset(seed=seed, options={"task": "red-blue"})
    plan = list(info["expert_plan"])
    assert plan[-1] == "open red door"

    def raw(actions: list[str]) -> list[float]:
        env = ProcessReward(gym.make(env_id), "expert_progress", potential_based=False)
        _, steps = play(env, actions, seed=seed, options={"task": "red-blue"})
        return [s[4]["process_reward"] for s in steps]

    win, loss = raw(plan), raw(plan[:-1] + ["open blue door"])
    assert win == [1.0] * len(plan)  # every expert turn shortens the plan, the winning one too
    assert loss == [1.0] * (len(plan) - 1) + [0.0]  # the wrong door leaves the plan as it was
    assert sum(win) == len(plan)  # the whole plan: a win is credited the expert's full progress


def test_subgoal_from_info_counts_distinct_subgoals_and_potential_takes_them_back() -> None:
    raw = ProcessReward(LineWorld(report_subgoals=True), "subgoal", potential_based=False)
    _, steps = play(raw, ["forward", "forward", "back", "forward", "forward", "forward"], options={"task": 5})
    # checkpoint 2 is reached twice but counts once; checkpoint 4 once.
    assert [s[4]["process_reward"] for s in steps] == [0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    shaped = ProcessReward(LineWorld(report_subgoals=True), "subgoal")
    _, steps = play(shaped, ["forward"] * 5, options={"task": 5})
    assert [s[4]["process_reward"] for s in steps] == [0.0, 1.0, 0.0, 1.0, -2.0]


class ReplayEnv(TextEnv):
    """Replays fixed ALFWorld-style feedback lines, one per step, whatever the action."""

    def __init__(self, lines: list[str], task: str) -> None:
        super().__init__()
        self.lines, self.task = lines, task
        self.index = 0

    def _info(self) -> dict[str, Any]:
        return {"admissible_commands": ["look"], "won": False, "task": self.task}

    def _reset_game(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.index = 0
        return "-= Welcome to TextWorld, ALFRED! =-", self._info()

    def _step_game(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        line = self.lines[self.index]
        self.index += 1
        won = self.index == len(self.lines)
        return line, float(won), won, {**self._info(), "won": won}


ALFWORLD_HEAT = [
    "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a mug 2.",
    "You pick up the mug 2 from the countertop 1.",  # not the task's object
    "You move the mug 2 to the countertop 1.",
    "You pick up the apple 1 from the countertop 1.",
    "You heat the apple 1 using the microwave 1.",
    "Nothing happens.",
    "You move the apple 1 to the fridge 1.",
]


def test_alfworld_subgoal_detector_reads_task_relevant_events() -> None:
    info = {"task": "put a hot apple in fridge"}
    found = [alfworld_subgoals(line, "", info) for line in ALFWORLD_HEAT]
    assert found == [[], [], [], ["pick up apple 1"], ["heat apple 1"], [], ["put apple 1 to fridge 1"]]
    assert alfworld_subgoals("You put the apple 1 in/on the fridge 1.", "", info) == ["put apple 1 to fridge 1"]
    assert alfworld_subgoals("You turn on the desklamp 1.", "", {"task": "look at alarmclock under the desklamp"}) \
        == ["turn on desklamp 1"]


def test_subgoal_detector_is_found_by_family_name() -> None:
    assert SUBGOAL_DETECTORS["ALFWorld"] is alfworld_subgoals
    register_subgoal_detector("ReplayAlf", alfworld_subgoals)
    gym.register("ReplayAlf-v0", entry_point=ReplayEnv, kwargs={"lines": ALFWORLD_HEAT, "task": "put a hot apple in fridge"})
    try:
        env = ProcessReward(gym.make("ReplayAlf-v0", disable_env_checker=True), "subgoal", potential_based=False)
        _, steps = play(env, ["look"] * len(ALFWORLD_HEAT))
        assert [s[4]["process_reward"] for s in steps] == [0, 0, 0, 1, 1, 0, 1]
    finally:
        del gym.registry["ReplayAlf-v0"]
        del SUBGOAL_DETECTORS["ReplayAlf"]


def test_invalid_penalty_counts_inadmissible_and_no_effect_actions() -> None:
    # "jump" is inadmissible at square 0; "fly" gets "Nothing happens."; the budget text is shown.
    env = ProcessReward(TurnBudget(LineWorld(), budget=10, show_budget=True), "invalid_penalty",
                        coef=0.1, potential_based=False)
    _, steps = play(env, ["jump", "forward", "fly", "wait", "back"], options={"task": 5})
    assert [round(s[4]["process_reward"], 9) for s in steps] == [-0.1, 0.0, -0.1, 0.0, 0.0]
    assert steps[2][0].startswith("Nothing happens.") and "[Turns left" in steps[2][0]


def test_callable_signal_gets_the_transition_and_is_summed_as_a_potential() -> None:
    calls = []

    def prm(prev_obs: Any, action: Any, obs: Any, info: dict[str, Any]) -> float:
        calls.append((prev_obs, action, obs))
        return 0.5 if action == "forward" else -0.25

    raw = ProcessReward(LineWorld(), prm, potential_based=False)
    _, steps = play(raw, ["forward", "wait", "forward"], options={"task": 2})
    assert [s[4]["process_reward"] for s in steps] == [0.5, -0.25, 0.5]
    assert calls[0] == ("You stand on square 0 of 2.", "forward", "You stand on square 1.")
    assert calls[1][0] == "You stand on square 1."

    shaped = ProcessReward(LineWorld(), prm)
    _, steps = play(shaped, ["forward", "wait", "forward"], options={"task": 2})
    # f on the way, the running sum taken back when the episode terminates.
    assert [s[4]["process_reward"] for s in steps] == [0.5, -0.25, 0.0 - (0.5 - 0.25)]


# -- composition ------------------------------------------------------------------------------
def _rewards(env: gym.Env, actions: list[str]) -> list[float]:
    _, steps = play(env, actions, options={"task": 6})
    return [s[1] for s in steps]


@pytest.mark.parametrize("signal", ["expert_progress", "subgoal", "invalid_penalty"])
def test_order_with_turn_budget_does_not_change_rewards(signal: str) -> None:
    actions = ["forward", "fly", "forward", "back", "forward", "forward"]
    outer = ProcessReward(TurnBudget(LineWorld(report_subgoals=True), budget=4), signal)
    inner = TurnBudget(ProcessReward(LineWorld(report_subgoals=True), signal), budget=4)
    assert _rewards(outer, actions) == _rewards(inner, actions)


def test_end_potential_done_zeroes_the_potential_at_budget_truncation() -> None:
    env = ProcessReward(TurnBudget(LineWorld(), budget=2), "expert_progress", end_potential="done")
    info0, steps = play(env, ["forward", "forward"], options={"task": 6})
    assert steps[-1][3] and not steps[-1][2]
    assert sum(s[4]["process_reward"] for s in steps) == -info0["potential"] == 6.0


def test_stacked_process_rewards_add_up_and_keep_the_outcome() -> None:
    env = ProcessReward(ProcessReward(LineWorld(), "expert_progress", potential_based=False),
                        "invalid_penalty", coef=0.5, potential_based=False)
    _, steps = play(env, ["fly", "forward", "forward"], options={"task": 2})
    assert [s[4]["outcome_reward"] for s in steps] == [0.0, 0.0, 1.0]
    assert [s[4]["process_reward"] for s in steps] == [-0.5, 1.0, 1.0]
    assert [s[1] for s in steps] == [-0.5, 1.0, 2.0]


# -- errors -----------------------------------------------------------------------------------
def test_bad_arguments_raise_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown process signal"):
        ProcessReward(LineWorld(), "progress")
    with pytest.raises(ValueError, match="gamma"):
        ProcessReward(LineWorld(), gamma=1.5)
    with pytest.raises(ValueError, match="end_potential"):
        ProcessReward(LineWorld(), end_potential="truncated")
    with pytest.raises(TypeError, match="signal must be"):
        ProcessReward(LineWorld(), 3)
    with pytest.raises(KeyError, match="subgoal detector"):
        ProcessReward(LineWorld(), "subgoal").reset(seed=0)
    with pytest.raises(KeyError, match="expert_plan"):
        ProcessReward(ReplayEnv(["x"], "t"), "expert_progress").reset(seed=0)
    env = ProcessReward(LineWorld(), lambda *args: float("nan"))
    env.reset(seed=0)
    with pytest.raises(ValueError, match="finite"):
        env.step("wait")


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped")
def test_registered_env_passes_the_env_checker_with_process_reward() -> None:
    from gymnasium.utils.env_checker import check_env

    env = ProcessReward(gym.make("KeyDoor-Budget-v0"), "expert_progress")
    check_env(env, skip_render_check=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alfworld_subgoal_detector_on_real_expert_episodes(seed: int) -> None:
    """On the embedded ALFWorld (fast engine), the registered detector sees the expert's subgoals
    (the fixed expert's: it wins every game, upstream's default loses most pick-two ones)."""
    import re

    env = ProcessReward(gym.make("ALFWorld-v0", engine="fast", split="valid_seen", expert_type="fixed"), "subgoal",
                        potential_based=False)
    obs, info = env.reset(seed=seed)
    events = []
    for _ in range(50):
        obs, reward, terminated, truncated, info = env.step(info["expert_action"])
        if info["process_reward"]:
            events.append(obs)
        if terminated or truncated:
            break
    assert info["won"]
    assert any(e.startswith("You pick up the") for e in events)
    # the winning step is the last subgoal: a placement, or turning on the lamp (look-at tasks)
    assert re.match(r"You (move|put) the|You turn on the", events[-1])
    assert info["potential"] == len(events) >= 2


def test_invalid_penalty_reads_the_envs_action_effect() -> None:
    # KeyDoor: a locked door and a second "take key" are admissible but change nothing.
    env = ProcessReward(gym.make("KeyDoor-v0"), "invalid_penalty", coef=1.0, potential_based=False)
    _, steps = play(env, ["open red door", "take key", "take key", "dance", "open red door"],
                    options={"task": "red-blue"})
    assert [s[4]["action_effect"] for s in steps] == ["no_effect", "progress", "no_effect", "invalid", "progress"]
    assert [s[4]["process_reward"] for s in steps] == [-1.0, 0.0, -1.0, -1.0, 0.0]

"""KeyDoor: the toy env of the trainer's learning check."""

from fractions import Fraction

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym_budget  # noqa: F401  (registers the ids)
from agentgym_budget.envs.toy.key_door import COLOURS, SPLITS, TASK_IDS, random_play_win_rate
from agentgym_budget.wrappers.budget_spec import MixBudget


def test_env_checker_passes():
    check_env(gym.make("KeyDoor-v0").unwrapped, skip_render_check=True)


@pytest.mark.parametrize("task", TASK_IDS)
def test_expert_plan_wins_in_two_turns(task):
    env = gym.make("KeyDoor-v0")
    _, info = env.reset(seed=1, options={"task": task})
    for turn, command in enumerate(info["expert_plan"], start=1):
        _, reward, terminated, truncated, info = env.step(command)
    assert (turn, reward, terminated, truncated, info["won"]) == (2, 1.0, True, False, True)


def test_wrong_door_with_key_loses_and_locked_door_does_not():
    env = gym.make("KeyDoor-v0")
    env.reset(seed=0, options={"task": "red-blue"})
    obs, _, terminated, _, _ = env.step("open blue door")
    assert (obs, terminated) == ("The blue door is locked.", False)
    env.step("take key")
    obs, reward, terminated, _, info = env.step("open  Blue door")
    assert (reward, terminated, info["won"], info["lost"]) == (0.0, True, False, True)


def test_invalid_action_is_an_in_game_outcome():
    env = gym.make("KeyDoor-v0")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("dance wildly")
    assert (obs, reward, terminated, info["turn"]) == ("Nothing happens.", 0.0, False, 1)


def test_same_seed_same_episode_and_tasks_cover_all_ids():
    env = gym.make("KeyDoor-v0")
    assert env.reset(seed=3) == env.reset(seed=3)
    seen = {env.reset(seed=s)[1]["task_id"] for s in range(200)}
    assert seen == set(TASK_IDS)


def test_splits_partition_the_pairs_and_every_colour_is_a_training_goal_and_distractor():
    train, test = set(SPLITS["train"]), set(SPLITS["test"])
    assert not train & test and train | test == set(TASK_IDS) and (len(train), len(test)) == (8, 4)
    door_pairs = {split: {frozenset(t.split("-")) for t in ids} for split, ids in (("train", train), ("test", test))}
    assert not door_pairs["train"] & door_pairs["test"]  # held-out set-ups show doors never seen together
    for doors in door_pairs["train"]:  # either door is the goal: no shortcut without reading the task
        assert {"-".join(sorted(doors)), "-".join(sorted(doors, reverse=True))} <= train
    for colour in COLOURS:
        assert sum(t.startswith(colour + "-") for t in train) == 2 and sum(t.startswith(colour + "-") for t in test) == 1
    for split, ids in (("train", train), ("test", test)):
        env = gym.make("KeyDoor-v0", split=split)
        setups = {env.reset(seed=s)[1]["game"] for s in range(400)}
        assert {game.split(":")[0] for game in setups} == ids and len(setups) == 2 * len(ids)  # both door orders
    with pytest.raises(ValueError, match="in split 'test'"):
        gym.make("KeyDoor-v0", split="test").reset(options={"task": "red-green"})
    with pytest.raises(ValueError, match="split must be one of"):
        gym.make("KeyDoor-v0", split="valid")


def test_the_default_split_draws_as_before():
    """Seeds keep drawing the same set-ups as before splits existed (results stay comparable)."""
    env = gym.make("KeyDoor-v0")
    assert [env.reset(seed=s)[1]["game"] for s in range(6)] == [  # drawn by the code before splits (01caa2b)
        "yellow-blue:yellow,blue", "blue-yellow:blue,yellow", "yellow-blue:blue,yellow", "yellow-red:yellow,red",
        "green-yellow:green,yellow", "green-yellow:yellow,green"]


def test_unknown_task_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown KeyDoor task"):
        gym.make("KeyDoor-v0").reset(options={"task": "purple-red"})


def test_random_policy_win_rate_matches_the_documented_chance_level():
    """The learning check's 'untrained' baseline: a uniform policy over the 3 commands, exact and played."""
    assert random_play_win_rate(2) == Fraction(1, 9)
    assert round(float(random_play_win_rate(4)), 3) == 0.309
    mean = (random_play_win_rate(2) + random_play_win_rate(3) + random_play_win_rate(4) + random_play_win_rate(6)) / 4
    assert random_play_win_rate("mix:2,3,4,6") == mean and round(float(mean), 3) == 0.264
    assert random_play_win_rate("uniform:2-3") == (random_play_win_rate(2) + random_play_win_rate(3)) / 2
    weighted = MixBudget(budgets=(2, 4), weights=(0.25, 0.75))
    assert random_play_win_rate(weighted) == (random_play_win_rate(2) + 3 * random_play_win_rate(4)) / 4
    with pytest.raises(ValueError, match="no fixed distribution"):
        random_play_win_rate("curriculum:6->2@100")
    env = gym.make("KeyDoor-Budget-v0", budget=4)
    import numpy as np

    rng = np.random.default_rng(0)
    wins = 0
    for seed in range(3000):
        _, info = env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(str(rng.choice(info["admissible_commands"])))
            done = terminated or truncated
        wins += info["won"]
    assert wins / 3000 == pytest.approx(0.309, abs=0.03)

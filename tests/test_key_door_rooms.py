"""KeyDoorRooms: KeyDoor's task along a corridor of rooms (a 4-6-turn expert)."""

from collections import Counter
from fractions import Fraction

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym_budget  # noqa: F401  (registers the ids)
from agentgym_budget.envs.base import INVALID_ACTION_FEEDBACK
from agentgym_budget.envs.registration import family_of
from agentgym_budget.envs.toy.key_door_rooms import ROOM_COUNTS, SPLITS, TASK_IDS


def test_env_checker_passes_and_the_ids_are_registered():
    check_env(gym.make("KeyDoorRooms-v0").unwrapped, skip_render_check=True)
    assert family_of("KeyDoorRooms-Budget-v0").ids == ("KeyDoorRooms-v0", "KeyDoorRooms-Budget-v0")
    assert gym.spec("KeyDoorRooms-v0").max_episode_steps == 16
    assert gym.make("KeyDoorRooms-Budget-v0").reset(seed=0)[1]["budget"] == 8


@pytest.mark.parametrize("task", TASK_IDS)
def test_the_expert_plan_wins_in_exactly_its_length_for_every_task(task):
    env = gym.make("KeyDoorRooms-v0")
    lengths = set()
    for seed in range(40):
        _, info = env.reset(seed=seed, options={"task": task})
        plan = info["expert_plan"]
        assert len(plan) == info["expert_plan_length"] == int(info["game"].split("rooms=")[1][0]) + 1
        for turn, command in enumerate(plan, start=1):
            assert command in info["admissible_commands"] and len(info["admissible_commands"]) <= 4
            _, reward, terminated, truncated, info = env.step(command)
            assert terminated == (turn == len(plan)) and info["action_effect"] == "progress"
        assert (reward, truncated, info["won"], info["expert_plan_length"]) == (1.0, False, True, 0)
        lengths.add(len(plan))
    assert lengths == {4, 5, 6}


def test_wrong_door_with_the_key_loses_and_a_door_without_it_is_locked():
    env = gym.make("KeyDoorRooms-v0")
    _, info = env.reset(seed=12, options={"task": "red-blue"})  # 4 rooms, the key in room 2
    assert info["game"] == "red-blue:blue,red:rooms=4,key=2"
    for command in ("go east", "go east", "go east"):  # past the key
        env.step(command)
    obs, reward, terminated, _, info = env.step("open red door")
    assert (obs, reward, terminated, info["action_effect"]) == ("The red door is locked.", 0.0, False, "no_effect")
    assert info["expert_plan"] == ["go west", "go west", "take key", "go east", "go east", "open red door"]
    _, _, _, _, info = env.step("go west")
    assert (info["action_effect"], info["expert_plan_length"]) == ("progress", 5)
    _, _, _, _, info = env.step("go east")
    assert info["action_effect"] == "regress"
    for command in ("go west", "go west", "take key", "go east", "go east"):
        env.step(command)
    obs, reward, terminated, _, info = env.step("open  Blue door")
    assert obs == "You open the blue door. An alarm rings. You lose."
    assert (reward, terminated, info["won"], info["lost"], info["action_effect"]) == (0.0, True, False, True, "regress")
    assert info["expert_plan_length"] is None
    obs, _, _, _, info = env.step("open red door")  # the game is over
    assert (obs, info["action_effect"]) == (INVALID_ACTION_FEEDBACK, "invalid")


@pytest.mark.parametrize("action", ["dance wildly", "go north", "go west", "open red door", "take key ", ""])
def test_an_invalid_command_is_an_in_game_outcome(action):
    env = gym.make("KeyDoorRooms-v0")
    _, before = env.reset(seed=3, options={"task": "red-blue"})  # 5 rooms, the key in room 1 (here)
    assert before["admissible_commands"] == ["go east", "take key"]
    obs, reward, terminated, truncated, info = env.step(action)
    if action == "take key ":  # whitespace is normalised: a valid command
        assert obs == "You take the key."
        return
    assert (obs, reward, terminated, truncated, info["turn"]) == (INVALID_ACTION_FEEDBACK, 0.0, False, False, 1)
    assert info["action_effect"] == "invalid" and info["expert_plan"] == before["expert_plan"]


def test_same_seed_same_episode_and_draws_cover_every_set_up():
    env = gym.make("KeyDoorRooms-v0")
    assert env.reset(seed=3) == env.reset(seed=3)
    games = [env.reset(seed=s)[1]["game"] for s in range(3000)]
    assert len(set(games)) == 12 * 2 * sum(ROOM_COUNTS)  # 288 set-ups
    rooms = Counter(int(game.split("rooms=")[1][0]) for game in games)
    assert sorted(rooms) == list(ROOM_COUNTS) and all(abs(n / 3000 - 1 / 3) < 0.04 for n in rooms.values())


def test_splits_are_keydoors_and_hold_out_whole_door_pairs():
    train, test = set(SPLITS["train"]), set(SPLITS["test"])
    assert not train & test and train | test == set(TASK_IDS) and (len(train), len(test)) == (8, 4)
    for split, ids in (("train", train), ("test", test)):
        env = gym.make("KeyDoorRooms-v0", split=split)
        games = {env.reset(seed=s)[1]["game"] for s in range(3000)}
        assert {game.split(":")[0] for game in games} == ids and len(games) == len(ids) * 2 * sum(ROOM_COUNTS)
    pairs = {split: {frozenset(t.split("-")) for t in SPLITS[split]} for split in ("train", "test")}
    assert not pairs["train"] & pairs["test"]
    with pytest.raises(ValueError, match="in split 'test'"):
        gym.make("KeyDoorRooms-v0", split="test").reset(options={"task": "red-green"})
    with pytest.raises(ValueError, match="split must be one of"):
        gym.make("KeyDoorRooms-v0", split="valid")
    with pytest.raises(ValueError, match="reset options are 'task'"):
        gym.make("KeyDoorRooms-v0").reset(options={"rooms": 3})


def _random_policy_win_rate(budget: int) -> Fraction:
    """Exact: the corridor as a Markov chain under a uniform policy over the admissible commands.

    Written apart from the env: a state is (room, key held); the set-up is drawn as ``reset`` does
    (rooms uniform over 3, 4, 5, the key's room uniform); opening a door with the key wins or loses
    with one command each, without the key it changes nothing.
    """
    total = Fraction(0)
    for rooms in ROOM_COUNTS:
        for key_room in range(rooms):
            alive, won = {(0, False): Fraction(1)}, Fraction(0)
            for _ in range(budget):
                after: dict = {}
                for (room, key), p in alive.items():
                    moves = [(room + 1, key)] * (room < rooms - 1) + [(room - 1, key)] * (room > 0)
                    moves += [(room, True)] * (room == key_room and not key)
                    doors = 2 if room == rooms - 1 else 0
                    share = p / (len(moves) + doors)
                    for state in moves + [(room, key)] * (doors if not key else 0):
                        after[state] = after.get(state, 0) + share
                    won += share if key and doors else 0  # one of the two doors is the goal
                alive = after
            total += won / (len(ROOM_COUNTS) * rooms)
    return total


def test_random_policy_win_rate_is_exact_and_matches_simulation():
    """The 'untrained' baseline of a learning check, per turn budget; the expert needs 4-6 turns."""
    exact = {budget: _random_policy_win_rate(budget) for budget in (2, 4, 6, 8)}
    assert exact[2] == 0 and exact[4] == Fraction(13, 648)  # 4 turns: only 3 rooms, every choice right
    assert {b: round(float(r), 3) for b, r in exact.items()} == {2: 0.0, 4: 0.020, 6: 0.058, 8: 0.100}
    rng = np.random.default_rng(0)
    for budget in (4, 8):
        env = gym.make("KeyDoorRooms-Budget-v0", budget=budget)
        wins = 0
        for seed in range(4000):
            _, info = env.reset(seed=seed)
            done = False
            while not done:
                assert 1 <= len(info["admissible_commands"]) <= 4
                _, _, terminated, truncated, info = env.step(str(rng.choice(info["admissible_commands"])))
                done = terminated or truncated
            wins += info["won"]
        assert wins / 4000 == pytest.approx(float(exact[budget]), abs=0.02)

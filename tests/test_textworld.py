"""TextWorld backend: challenge levels, the one-command guard, the envs on the real engine."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget._optional import MissingBackendError, is_installed
from agentgym_budget.envs.textworld.challenges import CHALLENGES, COOKING_LEVELS, settings_key
from agentgym_budget.envs.textworld.commands import refusal, to_engine

needs_textworld = pytest.mark.skipif(
    not is_installed("textworld"), reason="needs pip install 'agentgym-budget[textworld]'"
)
CHALLENGE_IDS = {
    "cooking": "TextWorld-Cooking-v0",
    "coin_collector": "TextWorld-CoinCollector-v0",
    "treasure_hunter": "TextWorld-TreasureHunter-v0",
}
NASTY_ACTIONS = [
    "", " ", "\x00", "\t\n", "xyzzy", "é à ü", "a" * 3000, "look. look", "look\nlook", "go north then go south",
    "restart", "quit", "q", "superbrief", "script", "save", "restore", "undo", "take all", "x", "1", "#", "...",
    "🙂" * 50, "é" * 200,
]  # fmt: skip


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A fresh game cache for this module (default ids read AGENTGYM_BUDGET_CACHE)."""
    path = tmp_path_factory.mktemp("agentgym_budget_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTGYM_BUDGET_CACHE", str(path))
        yield path


# -- pure logic (no TextWorld needed) ---------------------------------------------------
def test_levels_map_to_the_generators_settings():
    assert CHALLENGES["coin_collector"].settings(level=300) == {"level": 300}
    assert CHALLENGES["treasure_hunter"].settings() == {"level": 5}
    cooking = CHALLENGES["cooking"]
    assert cooking.settings(level=10, split="test") == {
        "recipe": 3, "take": 3, "go": 12, "open": True, "cook": True, "cut": True, "drop": False,
        "recipe_seed": 0, "split": "test",
    }  # fmt: skip
    assert set(COOKING_LEVELS) == set(range(1, 11))
    assert settings_key(cooking.settings(level=2)) == "cook+go1+open+recipe1+recipe_seed0+take1+train"


@pytest.mark.parametrize(
    ("name", "kwargs", "match"),
    [
        ("coin_collector", {"level": 0}, "level must be an int in \\[1, 300\\]"),
        ("treasure_hunter", {"level": 31}, "\\[1, 30\\]"),
        ("cooking", {"level": True}, "level must be an int"),
        ("cooking", {"split": "dev"}, "split must be one of"),
        ("cooking", {"settings": {"go": 7}}, "'go'"),
        ("cooking", {"settings": {"take": 2}}, "take <= recipe"),
        ("cooking", {"settings": {"spice": True}}, "unknown tw-cooking settings"),
        ("cooking", {"level": 1, "settings": {}}, "either level= or settings="),
    ],
)
def test_bad_settings_are_clear_errors(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        CHALLENGES[name].settings(**kwargs)


def test_guard_keeps_one_command_per_turn():
    for macro in ["take milk. eat meal", "take milk then eat meal", "look\nlook", "take milk;eat meal"]:
        assert refusal(macro) == "Only one command per turn is accepted."
    for meta in ["restart", "QUIT", "q", "superbrief", "script on", "undo"]:
        assert "is not available in this game" in refusal(meta)
    for fine in ["take milk from fridge", "take milk from fridge.", "  go   north ", "", "examine the queen"]:
        assert refusal(fine) is None
    assert to_engine(" take\x00 milk  from fridge. ") == "take milk from fridge"

    assert len(to_engine("🙂" * 50).encode()) <= 190 and to_engine("é" * 300) == "é" * 95
    for escape in ["\\g", "  \\q", "\\help", "\\x", "\\boxed{take milk}", "look \\x"]:
        assert "\\" not in to_engine(escape)


# Run in a child with a wall-clock limit: before the fix, the interpreter looped for ever on these
# (dumb-frotz escapes), printing to stderr without end and ignoring SIGINT.
_BACKSLASH_SCRIPT = """
import sys, gymnasium as gym, agentgym_budget
env = gym.make("TextWorld-Budget-v0")
obs, info = env.reset(seed=0)
for action in ["\\\\g", "\\\\q", "\\\\help", "\\\\x", "   \\\\g", "\\\\boxed{go east}", "look \\\\x", "\\\\"]:
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs and not terminated, (action, obs)
for _ in range(len(info["expert_plan"])):
    obs, reward, terminated, truncated, info = env.step(info["expert_action"])
print("WON" if info["won"] else "LOST")
"""


@needs_textworld
def test_backslash_commands_do_not_hang_the_interpreter(cache):
    try:
        done = subprocess.run([sys.executable, "-c", _BACKSLASH_SCRIPT], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("a backslash command hung the TextWorld interpreter (no answer within 120 s)")
    assert done.returncode == 0 and done.stdout.strip() == "WON"


# -- the envs on the real engine --------------------------------------------------------
def _play(env, actions):
    """Observations, rewards and flags of playing ``actions`` (stops when terminated)."""
    trace = []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        trace.append((obs, reward, terminated, info["won"], info["lost"]))
        if terminated:
            break
    return trace


@needs_textworld
@pytest.mark.parametrize("env_id", ["TextWorld-v0", *CHALLENGE_IDS.values()])
def test_check_env_and_invalid_actions_never_raise(cache, env_id):
    env = gym.make(env_id)
    try:
        check_env(env.unwrapped, skip_render_check=True)
        obs, info = env.reset(seed=0)
        assert not obs.startswith("\n") and "$$" not in obs  # banner stripped
        for action in NASTY_ACTIONS:
            obs, reward, terminated, truncated, info = env.step(action)
            assert env.observation_space.contains(obs) and obs
            assert reward == 0.0 and not terminated and not info["won"]
            assert not obs.rstrip().endswith("=-") and "\n>" not in obs  # no prompt / status line
        # The refused commands left the game playable: the expert still wins from here.
        for _ in range(len(info["expert_plan"])):
            obs, reward, terminated, truncated, info = env.step(info["expert_action"])
        assert terminated and info["won"]
    finally:
        env.close()


@needs_textworld
@pytest.mark.parametrize("challenge", sorted(CHALLENGE_IDS))
def test_expert_wins_every_shipped_game_within_its_plan(cache, challenge):
    env = gym.make(CHALLENGE_IDS[challenge])
    try:
        for task in range(env.unwrapped.n_games):
            obs, info = env.reset(options={"task": task})
            plan = list(info["expert_plan"])
            assert plan and info["expert_action"] == plan[0] and info["task_id"] == f"train-{task}"
            assert info["task"] and info["task"] in env.unwrapped._state.feedback
            trace = _play(env, plan)
            *_, last = trace
            rewards = [step[1] for step in trace]
            assert last[2] and last[3] and not last[4], f"expert did not win {challenge} game {task}"
            assert len(trace) <= len(plan)
            # reward = change of TextWorld's cumulative score: the rewards add up to the score
            assert sum(rewards) == env.unwrapped._state["score"] == env.unwrapped._state["max_score"]
            assert all(r in (0.0, 1.0) for r in rewards)
            obs, reward, terminated, truncated, info = env.step("look")  # after the end: inert
            assert (obs, reward, terminated, info["expert_action"]) == ("Nothing happens.", 0.0, True, None)
    finally:
        env.close()


@needs_textworld
def test_expert_replans_after_a_deviation(cache):
    env = gym.make("TextWorld-CoinCollector-v0")
    _, info = env.reset(seed=3)
    first = info["expert_action"]
    opposite = {"north": "south", "south": "north", "east": "west", "west": "east"}
    detour = [c for c in info["admissible_commands"] if c.startswith("go ") and c != first]
    if detour:  # go elsewhere, then the plan must start by coming back
        _, _, _, _, info = env.step(detour[0])
        assert info["expert_action"] == f"go {opposite[detour[0].split()[1]]}"
    for _ in range(len(info["expert_plan"])):
        *_, terminated, _, info = env.step(info["expert_action"])
    assert terminated and info["won"]
    env.close()


@needs_textworld
@pytest.mark.parametrize("env_id", ["TextWorld-Cooking-v0", "TextWorld-TreasureHunter-v0"])
def test_same_seed_same_episode(cache, env_id):
    def rollout(seed):
        env = gym.make(env_id)
        obs, info = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        trace = [(obs, info["task_id"])]
        for _ in range(15):
            commands = info["admissible_commands"]
            obs, reward, terminated, _, info = env.step(commands[int(rng.integers(len(commands)))])
            trace.append((obs, reward, terminated))
            if terminated:
                break
        env.close()
        return trace

    assert rollout(5) == rollout(5)
    assert len({rollout(seed)[0] for seed in range(6)}) > 1  # seeds draw different games


@needs_textworld
def test_random_episodes_do_not_crash(cache):
    env = gym.make("TextWorld-Cooking-v0")
    env.action_space.seed(0)
    rng = np.random.default_rng(0)
    for episode in range(3):
        _, info = env.reset(seed=episode)
        for _ in range(30):
            if rng.random() < 0.3:
                action = env.action_space.sample()
            else:
                action = info["admissible_commands"][int(rng.integers(len(info["admissible_commands"])))]
            obs, reward, terminated, truncated, info = env.step(action)
            assert env.observation_space.contains(obs) and reward in (0.0, 1.0)
            if terminated:
                assert info["won"] or info["lost"]
                break
    env.close()


@needs_textworld
def test_macro_commands_cannot_win_in_one_turn(cache):
    env = gym.make("TextWorld-Cooking-v0")
    _, info = env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(". ".join(info["expert_plan"]))
    assert obs == "Only one command per turn is accepted." and not terminated and reward == 0.0
    env.close()


@needs_textworld
def test_reset_options_and_constructor_errors(cache):
    from agentgym_budget.envs.textworld.env import TextWorldChallengeEnv

    env = gym.make("TextWorld-TreasureHunter-v0")
    assert env.reset(options={"task": 2})[1]["task_id"] == "train-2"
    assert env.reset(options={"task": "1"})[1]["task_id"] == "train-1"
    for bad in (4, -1, "two", True):
        with pytest.raises(ValueError, match="game index"):
            env.reset(options={"task": bad})
    with pytest.raises(ValueError, match="reset options are 'task'"):
        env.reset(options={"variation": 1})
    env.close()
    with pytest.raises(ValueError, match="unknown TextWorld challenge"):
        TextWorldChallengeEnv("zork")
    with pytest.raises(ValueError, match="n_games"):
        TextWorldChallengeEnv("cooking", n_games=0)
    with pytest.raises(ValueError, match="level"):
        gym.make("TextWorld-CoinCollector-v0", level=301)


@needs_textworld
def test_user_game_files_any_name_directory_and_errors(cache, tmp_path):
    shipped = gym.make("TextWorld-TreasureHunter-v0")
    reference, _ = shipped.reset(options={"task": 0})
    expected = _play(shipped, ["xyzzy", "look"])
    source = shipped.unwrapped._engine_game
    shipped.close()
    games = tmp_path / "games"
    games.mkdir()
    shutil.copy(source, games / "my game.z8")  # not named tw-*: Jericho would leave the status line in
    shutil.copy(source.with_suffix(".json"), games / "my game.json")

    for game_file in (games / "my game.z8", str(games), [games / "my game.z8"]):
        env = gym.make("TextWorld-v0", game_file=game_file)
        obs, info = env.reset(seed=0)
        assert obs == reference and info["task_id"] == "my game"
        assert _play(env, ["xyzzy", "look"]) == expected
        assert env.reset(options={"task": str(games / "my game.z8")})[1]["task_id"] == "my game"
        env.close()

    (games / "lonely.z8").write_bytes(source.read_bytes())
    with pytest.raises(ValueError, match="has no lonely.json"):
        gym.make("TextWorld-v0", game_file=games / "lonely.z8")
    with pytest.raises(FileNotFoundError):
        gym.make("TextWorld-v0", game_file=tmp_path / "missing.z8")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no TextWorld games"):
        gym.make("TextWorld-v0", game_file=empty)


@needs_textworld
@pytest.mark.slow  # generates one game: ~5 s on an idle core, more on a busy machine
def test_generation_is_offline_deterministic_and_cached(tmp_path, cache):
    """A game generated here equals the shipped one of the same key; generated games are reused."""
    from agentgym_budget.envs.textworld.env import TextWorldChallengeEnv
    from agentgym_budget.envs.textworld.games import ensure_game, game_path, game_seed

    challenge = CHALLENGES["treasure_hunter"]
    settings = challenge.settings()
    shipped = ensure_game(challenge, settings, 0, cache)
    generated = ensure_game(challenge, settings, 0, tmp_path, bundled=False)
    assert generated != shipped and generated.name == shipped.name
    game_record = [json.loads(path.with_suffix(".json").read_text()) for path in (generated, shipped)]
    for record in game_record:  # TextWorld stores its own install path: differs between machines
        assert Path(record["KB"].pop("text_grammars_path")).name == "text_grammars"
    assert game_record[0] == game_record[1]

    mtime = generated.stat().st_mtime_ns
    env = TextWorldChallengeEnv("treasure_hunter", n_games=1, cache_dir=tmp_path)
    assert env.prepare() == [generated] and generated.stat().st_mtime_ns == mtime  # reused, not remade
    _, info = env.reset(seed=0)
    trace = _play(env, info["expert_plan"])
    assert trace[-1][3] and len(trace) == len(info["expert_plan"])
    env.close()
    test_game = game_path(challenge, challenge.settings(split="test"), game_seed("test", 0), tmp_path)
    assert test_game.name == "tw-treasure_hunter-seed2000000.z8"


@pytest.mark.parametrize("env_id", ["TextWorld-v0", *CHALLENGE_IDS.values()])
def test_missing_textworld_names_the_extra(monkeypatch, env_id):
    monkeypatch.setitem(sys.modules, "textworld", None)  # import textworld -> ImportError
    with pytest.raises(MissingBackendError, match=r"pip install 'agentgym-budget\[textworld\]'"):
        gym.make(env_id)


@needs_textworld
def test_loading_a_game_holds_the_parser_lock_the_alfworld_engine_takes(cache, monkeypatch):
    # TextWorld's logic parser is one object per process: loading a game parses with it, as ALFWorld's
    # real engine does on every step, so both take the same lock.
    import threading

    import textworld

    from agentgym_budget.envs.alfworld import textworld_engine
    from agentgym_budget.envs.textworld.parser_lock import TEXTWORLD_LOCK

    assert textworld_engine.TEXTWORLD_LOCK is TEXTWORLD_LOCK
    real_start, held = textworld.start, []

    def try_lock() -> None:  # from another thread: fails while the loading thread holds the lock
        acquired = TEXTWORLD_LOCK.acquire(blocking=False)
        held.append(not acquired)
        if acquired:
            TEXTWORLD_LOCK.release()

    def start(*args, **kwargs):
        other = threading.Thread(target=try_lock)
        other.start()
        other.join()
        return real_start(*args, **kwargs)

    monkeypatch.setattr(textworld, "start", start)
    env = gym.make("TextWorld-v0")
    try:
        env.reset(seed=0)
    finally:
        env.close()
    assert held == [True]

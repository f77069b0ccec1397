"""ALFWorldEnv on the bundled games: API, data, expert, determinism, upstream data_dir loading."""

from __future__ import annotations

import json
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import agentgym_budget  # noqa: F401  (registers the ids)
from agentgym_budget._optional import MissingBackendError, is_installed
from agentgym_budget.envs.alfworld.env import ALFWorldEnv
from agentgym_budget.envs.alfworld.game import SPLITS, TASK_TYPES, bundled_manifest, load_games

pytestmark = pytest.mark.skipif(
    not is_installed("agentgym_budget.envs.alfworld.fast"), reason="the fast ALFWorld engine is not there"
)
FAST = {"engine": "fast"}


def play_expert(env: gym.Env, max_turns: int = 50, **reset_kwargs) -> tuple[list[str], list[float], dict]:
    """Follow info['expert_action'] until the episode ends; the observations and rewards seen."""
    obs, info = env.reset(**reset_kwargs)
    observations, rewards = [obs], []
    for _ in range(max_turns):
        obs, reward, terminated, truncated, info = env.step(info["expert_action"])
        observations.append(obs)
        rewards.append(reward)
        if terminated or truncated:
            break
    return observations, rewards, info


def test_check_env_passes() -> None:
    env = gym.make("ALFWorld-v0", split="valid_seen", **FAST)
    check_env(env.unwrapped, skip_render_check=True)


def test_budget_id_truncates_at_its_budget() -> None:
    env = gym.make("ALFWorld-Budget-v0", budget="fixed:3", split="valid_seen", **FAST)
    env.reset(seed=0)
    results = [env.step("look") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]  # truncated, never terminated
    assert not any(r[2] for r in results)


@pytest.mark.parametrize("split", SPLITS)
def test_every_split_has_all_six_task_types_and_matches_its_manifest(split: str) -> None:
    games = load_games(split)
    counts = {t: sum(g.task_type == t for g in games) for t in TASK_TYPES.values()}
    assert all(count > 0 for count in counts.values()), counts
    entry = bundled_manifest()["splits"][split]
    assert entry["games"] == len(games) and entry["per_task_type"] == counts
    assert len({g.id for g in games}) == len(games)


def test_valid_unseen_rooms_are_never_seen_in_train() -> None:
    def floor_plan(game_id: str) -> int:
        return int(game_id.split("/")[0].rsplit("-", 1)[1])

    train_plans = {floor_plan(g.id) for g in load_games("train")}
    unseen_plans = {floor_plan(g.id) for g in load_games("valid_unseen")}
    seen_plans = {floor_plan(g.id) for g in load_games("valid_seen")}
    assert not train_plans & unseen_plans
    assert seen_plans <= train_plans


@pytest.mark.parametrize("split", ["valid_seen", "valid_unseen"])
def test_fixed_expert_wins_at_least_99_percent_of_eval_games_within_upstreams_200_steps(split: str) -> None:
    env = ALFWorldEnv(split=split, expert_type="fixed", **FAST)
    wins = 0
    for index in range(len(env.games)):  # seeded unlike the bundle's check (game id), so not always its plan
        _, rewards, info = play_expert(env, max_turns=200, options={"task": index}, seed=index)
        wins += info["won"]
        assert rewards.count(1.0) == int(info["won"]) and sum(rewards) == float(info["won"])
    assert wins / len(env.games) >= 0.99, f"{wins}/{len(env.games)}"


def test_upstream_expert_loses_most_pick_two_and_sliced_tasks_like_upstream_and_wins_the_rest() -> None:
    """Upstream's ``move`` bookkeeping bug (``expert_type="upstream"`` keeps it) keeps a placed object
    (or the knife) in its inventory: measured on valid_unseen 12/21 pick-two wins, 0/18 sliced, all the rest."""
    env = ALFWorldEnv(split="valid_unseen", expert_type="upstream", **FAST)
    wins: dict[str, list[bool]] = {"pick two": [], "sliced": [], "rest": []}
    for index, game in enumerate(env.games):
        _, _, info = play_expert(env, max_turns=200, options={"task": index}, seed=index)
        kind = "pick two" if game.task_type == "pick_two_obj_and_place" else "sliced" if game.object_sliced else "rest"
        wins[kind].append(info["won"])
    assert sum(wins["rest"]) / len(wins["rest"]) >= 0.99
    assert sum(wins["pick two"]) / len(wins["pick two"]) < 0.75
    assert sum(wins["sliced"]) / len(wins["sliced"]) < 0.25


def test_the_default_expert_is_upstreams() -> None:
    assert ALFWorldEnv(split="valid_seen", **FAST).expert_type == "upstream"
    assert gym.make("ALFWorld-v0", split="valid_seen", **FAST).unwrapped.expert_type == "upstream"


def test_plan_length_and_action_effect_come_from_the_fixed_reference_whatever_the_expert_type() -> None:
    """``expert_type`` changes ``expert_action`` / ``expert_plan`` only: the same turns get the same
    ``expert_plan_length`` and ``action_effect``, and pick-two games (which upstream's expert mostly
    loses) keep a known, winning reference plan."""
    envs = {expert_type: ALFWorldEnv(split="valid_unseen", task_types=["pick_two_obj_and_place"],
                                     expert_plan_horizon=100, expert_type=expert_type, **FAST)
            for expert_type in ("upstream", "fixed")}
    plans_differ = 0
    for seed in range(3):
        plans_differ += _play_both_experts_side_by_side(envs, seed)
    assert plans_differ > 0


def _play_both_experts_side_by_side(envs: dict[str, ALFWorldEnv], seed: int) -> int:
    """Mixed play on both envs: equal plan lengths and action effects each turn; turns whose plans differed."""
    import random

    infos = {expert_type: env.reset(seed=seed)[1] for expert_type, env in envs.items()}
    rng = random.Random(seed)
    known = plans_differ = 0
    for turn in range(40):
        upstream, fixed = infos["upstream"], infos["fixed"]
        assert upstream["expert_plan_length"] == fixed["expert_plan_length"], turn
        known += fixed["expert_plan_length"] is not None
        plans_differ += upstream["expert_plan"] != fixed["expert_plan"]
        roll = rng.random()
        action = (upstream["expert_action"] if roll < 0.4 else fixed["expert_action"] if roll < 0.8
                  else rng.choice(fixed["admissible_commands"]) if roll < 0.95 else "xyzzy")
        steps = {expert_type: env.step(action) for expert_type, env in envs.items()}
        infos = {expert_type: step[-1] for expert_type, step in steps.items()}
        assert infos["upstream"]["action_effect"] == infos["fixed"]["action_effect"], (turn, action)
        if steps["fixed"][2]:
            break
    assert known >= 0.9 * (turn + 1)
    return plans_differ


@pytest.mark.parametrize("split", ["valid_seen", "valid_unseen"])
def test_stored_walkthroughs_win_on_their_last_step(split: str) -> None:
    env = ALFWorldEnv(split=split, **FAST)
    for index, game in enumerate(env.games):
        env.reset(options={"task": index})
        for turn, action in enumerate(game.walkthrough, start=1):
            _, reward, terminated, _, info = env.step(action)
            assert terminated == (turn == len(game.walkthrough)), (game.id, turn)
        assert reward == 1.0 and info["won"]


def test_same_seed_same_episode_and_seeds_spread_over_games() -> None:
    first, second = ALFWorldEnv(split="valid_seen", **FAST), ALFWorldEnv(split="valid_seen", **FAST)
    for seed in (0, 1, 2):
        assert play_expert(first, seed=seed) == play_expert(second, seed=seed)
    games = {first.reset(seed=seed)[1]["game"] for seed in range(10)}
    assert len(games) > 5


def test_reset_info_and_first_expert_action_are_upstreams() -> None:
    env = ALFWorldEnv(split="valid_seen", task_types=[1], **FAST)
    obs, info = env.reset(seed=0)
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.")
    assert obs.endswith(f"Your task is to: {info['task']}.")
    assert info["task_type"] == "pick_and_place_simple" and info["game"] == env.game.id
    assert info["expert_action"] == "look" and info["expert_plan"] == ["look"]  # AlfredExpert at reset
    assert info["admissible_commands"] == sorted(set(info["admissible_commands"]))
    assert not info["won"] and info["turn"] == 0


@settings(max_examples=60, deadline=None)
@given(action=st.text(max_size=40))
def test_any_string_is_a_turn_and_never_raises(action: str) -> None:
    env = _shared_env()
    _, info = env.reset(seed=7)
    obs, reward, terminated, truncated, info_after = env.step(action)
    if action.strip() not in info["admissible_commands"]:
        assert obs == "Nothing happens."
        assert info_after["admissible_commands"] == info["admissible_commands"]
    assert reward == 0.0 and not terminated and not truncated and info_after["turn"] == 1


_ENV_CACHE: dict[str, ALFWorldEnv] = {}


def _shared_env() -> ALFWorldEnv:
    if "env" not in _ENV_CACHE:
        _ENV_CACHE["env"] = ALFWorldEnv(split="valid_seen", **FAST)
    return _ENV_CACHE["env"]


def test_random_admissible_play_never_raises() -> None:
    env = ALFWorldEnv(split="valid_unseen", **FAST)
    _, info = env.reset(seed=3)
    for turn in range(200):
        command = info["admissible_commands"][int(env.np_random.integers(len(info["admissible_commands"])))]
        _, _, terminated, _, info = env.step(command)
        assert info["expert_action"] in info["admissible_commands"] or info["expert_action"] == "look"
        if terminated:
            _, info = env.reset(seed=turn)


def test_reset_task_option_by_index_and_id_and_bad_values() -> None:
    env = ALFWorldEnv(split="valid_seen", **FAST)
    _, by_index = env.reset(options={"task": 5})
    _, by_id = env.reset(options={"task": env.games[5].id})
    assert by_index["game"] == by_id["game"] == env.games[5].id
    for bad in (-1, len(env.games), "no-such-game", 1.5, True):
        with pytest.raises(ValueError):
            env.reset(options={"task": bad})


def test_task_types_by_name_or_id_and_bad_values() -> None:
    assert {g.task_type for g in ALFWorldEnv(split="valid_seen", task_types=[2, "pick_two_obj_and_place"], **FAST).games} == {
        "look_at_obj_in_light",
        "pick_two_obj_and_place",
    }
    for bad in ([7], ["pick"], []):
        with pytest.raises(ValueError):
            ALFWorldEnv(split="valid_seen", task_types=bad, **FAST)
    with pytest.raises(ValueError, match="split"):
        ALFWorldEnv(split="test", **FAST)
    with pytest.raises(ValueError, match="engine"):
        ALFWorldEnv(split="valid_seen", engine="thor")


def test_max_plan_len_keeps_the_games_the_expert_wins_within_it_and_rejects_bad_values() -> None:
    every = load_games("valid_seen")
    assert all(g.expert_plan_len == len(g.walkthrough) for g in every if g.walkthrough)  # read from older records
    short = ALFWorldEnv(split="valid_seen", max_plan_len=10, **FAST).games
    assert short == [g for g in every if g.expert_plan_len is not None and g.expert_plan_len <= 10]
    assert 0 < len(short) < len(every)
    for bad in (0, -3, 2.5, True, "10"):
        with pytest.raises(ValueError, match="max_plan_len must be None or a positive int"):
            load_games("valid_seen", max_plan_len=bad)
    with pytest.raises(ValueError, match="relax the filters"):
        ALFWorldEnv(split="valid_seen", max_plan_len=1, **FAST)


def test_include_sliced_false_leaves_out_the_sliced_tasks() -> None:
    games = load_games("valid_seen")
    sliced = [g for g in games if g.object_sliced]
    assert sliced and all(g.task_params["object_sliced"] is True for g in sliced)
    assert ALFWorldEnv(split="valid_seen", include_sliced=False, **FAST).games == [g for g in games if not g.object_sliced]


def test_expert_plan_rolls_out_to_the_win_on_a_copyable_engine() -> None:
    env = ALFWorldEnv(split="valid_seen", task_types=[1], expert_plan_horizon=50, **FAST)
    _, info = env.reset(seed=1)
    *_, info = env.step(info["expert_action"])
    plan = info["expert_plan"]
    assert plan[0] == info["expert_action"] and len(plan) > 1
    for turn, action in enumerate(plan, start=1):
        _, reward, terminated, _, info = env.step(action)
        assert terminated == (turn == len(plan))
    assert reward == 1.0


def _fresh_rollout(env: ALFWorldEnv, expert) -> tuple[list[str], bool]:
    """An expert's plan recomputed from scratch (deep copies: the env's cache and clones are not used),
    and whether it wins."""
    import copy

    plan, engine, twin = [expert.action], env.engine.clone(), copy.deepcopy(expert.expert)
    while len(plan) < env.expert_plan_horizon:
        step = engine.step(plan[-1])
        if step.won:
            return plan, True
        plan.append(twin.reported_action(plan[-1], step.observation, step.admissible_commands))
    return plan, False


@pytest.mark.parametrize("expert_type", ["upstream", "fixed"])
@pytest.mark.parametrize("horizon", [6, 40])  # 6: plans cut short, whose tails must not be reused
@pytest.mark.parametrize("seed", range(4))
def test_expert_plans_equal_a_fresh_rollout_at_every_turn(seed: int, horizon: int, expert_type: str) -> None:
    """Reusing the plan's tail when the agent follows it, and the cheap expert clone, change nothing:
    ``expert_plan`` is the reporting expert's rollout, ``expert_plan_length`` the fixed reference's."""
    import random

    env = ALFWorldEnv(split="valid_seen", expert_plan_horizon=horizon, expert_type=expert_type, **FAST)
    rng = random.Random(seed)
    _, info = env.reset(seed=seed)
    for _ in range(40):
        assert info["expert_plan"] == _fresh_rollout(env, env._expert)[0]
        reference, wins = _fresh_rollout(env, env._reference)
        assert info["expert_plan_length"] == (len(reference) if wins else None)
        follow = rng.random() < 0.7
        _, _, terminated, _, info = env.step(info["expert_action"] if follow else rng.choice(info["admissible_commands"]))
        if terminated:
            assert info["expert_plan"] == [info["expert_action"]] and info["expert_plan_length"] == 0
            break


@pytest.mark.parametrize("expert_type", ["upstream", "fixed"])
def test_plans_near_the_experts_step_limit_equal_a_fresh_rollout(expert_type: str) -> None:
    """Past upstream's 200 expert steps the expert only says "look": plans that reach that point end
    in looks filled in without playing them, which must equal what playing them gives."""
    import random

    env = ALFWorldEnv(split="valid_seen", expert_plan_horizon=200, expert_type=expert_type, **FAST)
    rng = random.Random(0)
    _, info = env.reset(seed=0)
    checked = 0
    for turn in range(215):
        if turn >= 185:
            plan = info["expert_plan"]
            assert plan == _fresh_rollout(env, env._expert)[0]
            reference, wins = _fresh_rollout(env, env._reference)
            assert info["expert_plan_length"] == (len(reference) if wins else None)
            checked += len(plan) == 200 and plan[-1] == "look"
        follow = turn >= 200 and rng.random() < 0.5  # following a plan extends the copy's rollout
        _, _, terminated, _, info = env.step(info["expert_action"] if follow else rng.choice(info["admissible_commands"]))
        if terminated:
            break
    assert checked >= 10


def test_missing_alfworld_extra_names_the_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "textworld", None)  # makes `import textworld` fail
    with pytest.raises(MissingBackendError, match=r"pip install 'agentgym-budget\[alfworld\]'"):
        ALFWorldEnv(split="valid_seen", engine="textworld")


# -- upstream data (json_2.1.1 layout) -------------------------------------------------------------
def _write_trial(root, split: str, task_dir: str, game, solvable: bool | None = True, task_type: str | None = None) -> None:
    trial = root / split / task_dir / "trial_T20190001_000001_000001"
    trial.mkdir(parents=True)
    traj = {
        "task_type": task_type or game.task_type,
        "pddl_params": {
            "object_target": game.object_target.capitalize(),
            "parent_target": game.parent_target.capitalize(),
            "toggle_target": game.toggle_target.capitalize(),
            "mrecep_target": "",
            "object_sliced": False,
        },
    }
    (trial / "traj_data.json").write_text(json.dumps(traj))
    (trial / "game.tw-pddl").write_text(json.dumps({**game.to_tw_pddl(), "solvable": solvable}))


@pytest.fixture
def upstream_dir(tmp_path):
    tmp_path = tmp_path / "json_2.1.1"
    games = load_games("valid_seen")
    simple = next(g for g in games if g.task_type == "pick_and_place_simple")
    light = next(g for g in games if g.task_type == "look_at_obj_in_light" and g.toggle_target == "desklamp")
    _write_trial(tmp_path, "valid_seen", "pick_and_place_simple-A-None-B-1", simple)
    _write_trial(tmp_path, "valid_seen", "look_at_obj_in_light-A-None-DeskLamp-301", light)
    _write_trial(tmp_path, "valid_seen", "pick_and_place_simple-C-None-D-2", simple, solvable=False)
    _write_trial(tmp_path, "valid_seen", "pick_and_place_with_movable_recep-A-B-C-3", simple)
    _write_trial(tmp_path, "valid_seen", "pick_and_place_simple-AppleSliced-None-D-4", simple)
    (tmp_path / "valid_seen" / "no-game-here" / "trial_x").mkdir(parents=True)
    (tmp_path / "valid_seen" / "no-game-here" / "trial_x" / "traj_data.json").write_text(json.dumps({"task_type": "pick_and_place_simple"}))
    return tmp_path, simple, light


def test_data_dir_loads_upstream_layout_with_upstreams_filters(upstream_dir) -> None:
    root, simple, light = upstream_dir
    games = load_games("valid_seen", data_dir=root)
    assert [g.id for g in games] == [
        "look_at_obj_in_light-A-None-DeskLamp-301/trial_T20190001_000001_000001",
        "pick_and_place_simple-A-None-B-1/trial_T20190001_000001_000001",
    ]
    assert games[1].goal == simple.goal and games[1].pddl_problem == simple.pddl_problem
    assert games[1].task_params == simple.task_params and games[0].toggle_target == "desklamp"
    assert [g.task_type for g in load_games("valid_seen", task_types=[2], data_dir=root)] == ["look_at_obj_in_light"]
    assert [g.id for g in load_games("valid_seen", data_dir=root.parent)] == [g.id for g in games]  # json_2.1.1's parent
    with pytest.raises(FileNotFoundError, match="json_2.1.1"):
        load_games("valid_unseen", data_dir=root)


def test_data_dir_without_playable_games_says_how_many_were_skipped_and_why(upstream_dir, tmp_path) -> None:
    root = tmp_path / "unverified" / "json_2.1.1"
    simple = upstream_dir[1]
    for index in range(3):  # what alfworld-generate leaves when it did not verify the games
        _write_trial(root, "valid_seen", f"pick_and_place_simple-A-None-B-{index}", simple, solvable=None)
    with pytest.raises(ValueError, match=r"no ALFWorld games in split 'valid_seen'.*skipped 3 trial\(s\): "
                                         r"3 marked unsolvable \(\"solvable\" null or false"):
        ALFWorldEnv(split="valid_seen", data_dir=root, **FAST)
    with pytest.raises(ValueError, match=r"skipped 6 trial\(s\): 2 movable-receptacle or sliced task\(s\).*; "
                                         r"3 of other task types; 1 without game.tw-pddl"):
        ALFWorldEnv(split="valid_seen", task_types=[3], data_dir=upstream_dir[0], **FAST)


def test_env_plays_upstream_games_from_the_alfworld_data_variable(upstream_dir, monkeypatch) -> None:
    root, simple, _ = upstream_dir
    monkeypatch.setenv("ALFWORLD_DATA", str(root.parent))
    env = ALFWorldEnv(split="valid_seen", task_types=[1], **FAST)
    assert len(env.games) == 1
    monkeypatch.setenv("ALFWORLD_DATA", str(root.parent / "empty-cache"))  # what `import alfworld` sets
    assert len(ALFWorldEnv(split="valid_seen", task_types=[1], **FAST).games) > 1  # bundled games
    env.reset(seed=0)
    for action in simple.walkthrough:
        _, reward, terminated, _, info = env.step(action)
    assert terminated and reward == 1.0 and info["task"] == simple.goal


JUNK = ["xyzzy", "", "\\boxed{go to desk 1}", "take the universe", "go to nowhere 99", "open", "```json\n{}\n```",
        "look around carefully", "put everything everywhere", "\x00\x07", "move it to them", "go to"]


@pytest.mark.parametrize("horizon", [1, 30])
def test_junk_turns_never_disturb_the_fixed_expert(horizon: int) -> None:
    """Over >= 10k refused ("Nothing happens.") turns, the expert's action and plan stay as they were,
    and an episode with junk interleaved plays the same expert actions as one without."""
    import random

    env = ALFWorldEnv(split="valid_seen", expert_plan_horizon=horizon, expert_type="fixed", **FAST)
    clean = ALFWorldEnv(split="valid_seen", expert_plan_horizon=horizon, expert_type="fixed", **FAST)
    rng = random.Random(horizon)
    junk_turns, seed = 0, 0
    while junk_turns < 5_000 * (2 if horizon == 1 else 1) or seed < 10:
        _, info = env.reset(seed=seed)
        _, reference = clean.reset(seed=seed)
        for _ in range(60):
            assert (info["expert_action"], info["expert_plan"]) == (reference["expert_action"],
                                                                   reference["expert_plan"])
            for _ in range(rng.randrange(0, 6)):
                obs, _, terminated, _, after = env.step(rng.choice(JUNK))
                if obs != "Nothing happens.":
                    continue  # e.g. a junk string that happens to be a valid command: no claim then
                junk_turns += 1
                assert not terminated
                assert (after["expert_action"], after["expert_plan"]) == (info["expert_action"], info["expert_plan"])
            action = info["expert_action"]
            _, _, terminated, _, info = env.step(action)
            _, _, clean_terminated, _, reference = clean.step(action)
            assert terminated == clean_terminated
            if terminated:
                assert info["won"]
                break
        seed += 1
    assert junk_turns >= 5_000

"""The offline ALFWorld game generator: determinism, upstream PDDL form, task invariants, checks."""

from __future__ import annotations

import json
import re

import pytest

from agentgym_budget._optional import is_installed
from agentgym_budget.envs.alfworld.game import TASK_TYPES, load_games

pytestmark = pytest.mark.skipif(not is_installed("alfworld"), reason="generation reads the alfworld wheel's layouts")


@pytest.fixture(scope="module")
def generated():
    from tools.alfworld.generate import generate_games

    return generate_games("valid_seen", 24, seed=0)


@pytest.fixture(scope="module")
def train():
    """Enough games (about 1 s to generate) for every variant and start state to occur."""
    from tools.alfworld.generate import generate_games

    return generate_games("train", 150, seed=0)


def _init(pddl: str) -> str:
    return pddl[pddl.index("(:init") : pddl.index("(:goal")]


def test_same_seed_same_games_and_the_bundled_splits_are_that_output(generated) -> None:
    from tools.alfworld.generate import generate_games

    assert generate_games("valid_seen", 24, seed=0) == generated
    assert generate_games("valid_seen", 24, seed=1) != generated
    bundled = {g.id: g for g in load_games("valid_seen")}
    kept = [g for g in generated if g.id in bundled]  # the expert check dropped a few
    assert len(kept) >= 20
    assert all(bundled[g.id].pddl_problem == g.pddl_problem and bundled[g.id].goal == g.goal for g in kept)


def test_six_task_types_in_turn(generated) -> None:
    assert [g.task_type for g in generated[:6]] == list(TASK_TYPES.values())


def test_problems_have_upstreams_form_and_mangled_thor_ids(generated) -> None:
    for game in generated:
        pddl = game.pddl_problem
        assert pddl.lstrip().startswith("(define (problem plan_") and "(:domain alfred)" in pddl
        assert "agent1 - agent" in pddl and "(:goal" in pddl
        assert re.search(r"\(atLocation agent1 loc_bar_[_a-z0-9]+\)", pddl)
        assert "(opened " not in pddl  # every receptacle starts closed; nothing hot, clean, sliced or on:
        init = _init(pddl)
        assert not re.search(r"\((isHot|isClean|isOn|isSliced) ", init)
        assert "|" not in pddl and "+" not in pddl  # fix_pddl_str_chars applied
        assert pddl.count("(") == pddl.count(")")


def _in_receptacle(pddl: str) -> list[tuple[str, str, str]]:
    """(object id, object type, receptacle type) of every initial inReceptacle fact."""
    init = _init(pddl)
    type_of = dict(re.findall(r"\((?:objectType|receptacleType) (\S+) (\S+)Type\)", init))
    return [(o, type_of[o], type_of[r]) for o, r in re.findall(r"\(inReceptacle (\S+) (\S+)\)", init)]


def _targets_in_place(game) -> int:
    return sum(t.lower() == game.object_target and r.lower() == game.parent_target for _, t, r in _in_receptacle(game.pddl_problem))


def test_no_game_is_won_at_reset_and_targets_start_in_place_only_where_upstream_allows(train) -> None:
    from agentgym_budget.envs.alfworld.fast import FastAlfredEngine

    engine = FastAlfredEngine()
    in_place = {task_type: 0 for task_type in TASK_TYPES.values()}
    for game in train:
        assert not engine.reset(game).won, game.id
        pairs = _in_receptacle(game.pddl_problem)
        targets = [r for _, o, r in pairs if o.lower() == game.object_target]
        assert targets, game.id  # the target object exists somewhere
        in_place[game.task_type] += _targets_in_place(game) > 0
        if game.task_type == "pick_two_obj_and_place":
            assert len(targets) >= 2 and _targets_in_place(game) <= 1, game.id
        if game.task_type == "pick_and_place_simple" and not game.object_sliced:
            assert _targets_in_place(game) == 0, game.id  # one in place would win
        if game.task_type == "look_at_obj_in_light":
            assert any(o in ("DeskLamp", "FloorLamp") for _, o, _ in pairs)
    assert in_place["pick_two_obj_and_place"] > 0 and in_place["pick_heat_then_place_in_recep"] > 0
    assert in_place["look_at_obj_in_light"] == 0


def test_targets_in_a_fridge_start_cold_like_upstreams_state_to_pddl(train) -> None:
    cold_games = 0
    for game in train:
        cold = set(re.findall(r"\(isCool (\S+)\)", _init(game.pddl_problem)))
        in_fridge = {o for o, t, r in _in_receptacle(game.pddl_problem) if r == "Fridge" and t.lower() == game.object_target}
        assert cold == in_fridge, game.id  # exactly the targets in a fridge, as upstream writes it
        cold_games += bool(cold)
    assert cold_games >= 10


def test_sliced_tasks_follow_upstreams_slice_goals_and_the_expert_slices_then_wins(train) -> None:
    from alfworld.gen.goal_library import gdict

    from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
    from tools.alfworld.generate import expert_walkthrough

    sliced = [g for g in train if g.object_sliced]
    assert len(sliced) >= 10 and len(sliced) < len(train) / 2
    assert {g.task_type for g in sliced} == set(TASK_TYPES.values()) - {"pick_two_obj_and_place", "look_at_obj_in_light"}
    engine = FastAlfredEngine()
    for game in sliced:
        assert f"-{game.object_target}sliced-" in game.id.lower()  # ALFRED's dir naming: AppleSliced
        assert "(isSliced ?o)" in game.pddl_problem and "(objectType ?o " in game.pddl_problem
        sentences = {t.format(obj=game.object_target, recep=game.parent_target) for t in gdict[f"{game.task_type}_slice"]["templates"]}
        assert game.goal in sentences
        assert any(t == "Knife" for _, t, _ in _in_receptacle(game.pddl_problem))
    for game in sliced[:6]:
        walkthrough = expert_walkthrough(game, engine)
        assert walkthrough is not None, game.id
        assert any(a.startswith(f"slice {game.object_target} ") for a in walkthrough), walkthrough


def test_floor_lamps_are_look_at_targets_and_never_pickupable() -> None:
    from tools.alfworld.generate import Scene, _candidate_tasks, _load_alfworld, _Task, scene_to_pddl

    alf = _load_alfworld()
    scene = Scene(301, receptacles={"Desk|+01.00|+00.00|+01.00": "Desk", "Bed|+02.00|+00.00|+02.00": "Bed"},
                  poses={"Desk|+01.00|+00.00|+01.00": (4, 4, 0, 30), "Bed|+02.00|+00.00|+02.00": (8, 8, 0, 30)},
                  object_types={"FloorLamp|+01.50|+00.00|+01.50": "FloorLamp", "Book|+01.00|+00.80|+01.00": "Book"},
                  placement={"FloorLamp|+01.50|+00.00|+01.50": "Desk|+01.00|+00.00|+01.00", "Book|+01.00|+00.80|+01.00": "Bed|+02.00|+00.00|+02.00"})
    assert _candidate_tasks(alf, scene, "look_at_obj_in_light") == [_Task("look_at_obj_in_light", "Book", toggle_target="FloorLamp")]
    pddl = scene_to_pddl(alf, scene, _Task("look_at_obj_in_light", "Book", toggle_target="FloorLamp"), "p")
    assert "(objectType ?ot FloorLampType)" in pddl and "(toggleable FloorLamp_bar_" in pddl
    assert "(pickupable FloorLamp" not in pddl and "(pickupable Book" in pddl


def test_goal_sentence_comes_from_upstream_templates(generated) -> None:
    from alfworld.gen.goal_library import gdict

    for game in generated:
        sentences = {
            t.format(obj=game.object_target, recep=game.parent_target, toggle=game.toggle_target, mrecep="")
            for t in gdict[game.task_type + ("_slice" if game.object_sliced else "")]["templates"]
        }
        assert game.goal in sentences


def test_the_check_plays_up_to_upstreams_200_steps() -> None:
    import inspect

    from tools.alfworld.generate import EXPERT_MAX_TURNS, expert_walkthrough

    assert EXPERT_MAX_TURNS == 200
    assert inspect.signature(expert_walkthrough).parameters["max_turns"].default == EXPERT_MAX_TURNS


def test_check_and_apply_drop_unsolved_games_and_record_engines(tmp_path, generated) -> None:
    from agentgym_budget.envs.alfworld.game import AlfredGame
    from tools.alfworld.generate import _read_split, apply_checks, write_split

    games = generated[:4]
    write_split(games, tmp_path / "valid_seen.jsonl.xz")
    fast = tmp_path / "fast.jsonl"
    fast.write_text("".join(json.dumps({"id": g.id, "engine": "fast", "walkthrough": ["look"] if i else None}) + "\n" for i, g in enumerate(games[:3])))
    real = tmp_path / "real.jsonl"
    real.write_text(json.dumps({"id": games[1].id, "engine": "textworld", "walkthrough": ["go to x"]}) + "\n")
    summary = apply_checks(tmp_path, "valid_seen", [fast, real], seed=0)
    assert summary["generated"] == 4 and summary["games"] == 3 and summary["unsolvable_dropped"] == 1
    assert summary["checked_by_engine"] == {"fast": 3, "textworld": 1} and summary["engine_disagreements"] == 1
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["splits"]["valid_seen"] == summary
    assert manifest["expert_max_turns"] == 200 and "expert_plan_len" in manifest["check"]
    kept = _read_split(tmp_path / "valid_seen.jsonl.xz", "valid_seen")
    assert [g.expert_plan_len for g in kept] == [1, 1, None]  # the walkthroughs' lengths; unchecked: unknown
    assert summary["expert_plan_len"] == {"min": 1, "median": 1, "max": 1}
    old_record = {k: v for k, v in kept[0].to_record().items() if k not in ("expert_plan_len", "object_sliced")}
    assert AlfredGame.from_record(old_record) == kept[0]  # records written before these fields read the same
    # the first apply wrote the 3 kept games over the split: applying again keeps the first 2
    cut = apply_checks(tmp_path, "valid_seen", [fast, real], seed=0, out_dir=tmp_path / "cut", keep=2)
    assert cut["generated"] == 3 and cut["games"] == 2 and cut["surplus_dropped"] == 1 and cut["unsolvable_dropped"] == 0
    assert [g.id for g in _read_split(tmp_path / "cut" / "valid_seen.jsonl.xz", "valid_seen")] == [g.id for g in kept[:2]]
    with pytest.raises(ValueError, match="only 3 valid_seen games passed the check, fewer than keep=4"):
        apply_checks(tmp_path, "valid_seen", [fast, real], seed=0, out_dir=tmp_path / "cut", keep=4)


@pytest.mark.slow
@pytest.mark.skipif(not all(is_installed(m) for m in ("textworld", "fast_downward")), reason="needs the real engine")
def test_sliced_and_start_state_games_play_identically_on_both_engines(train) -> None:
    """Observations, admissible commands, ``won`` and expert actions step for step (about 20 s)."""
    import random

    from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
    from agentgym_budget.envs.alfworld.textworld_engine import TextWorldAlfredEngine
    from tools.alfworld.differential import compare_episode
    from tools.alfworld.generate import expert_walkthrough

    sliced = [g for g in train if g.object_sliced][:2]
    cold = [g for g in train if "(isCool " in _init(g.pddl_problem)][:1]
    reference = TextWorldAlfredEngine()
    for index, game in enumerate(sliced + cold):
        report = compare_episode(reference, FastAlfredEngine(), game, random.Random(index), steps=25, mode="random")
        assert not report.mismatches, str(report.mismatches[0])
        walkthrough = expert_walkthrough(game, FastAlfredEngine())
        assert walkthrough is not None and expert_walkthrough(game, reference) == walkthrough
    reference.close()


# -- rooms (generator version 2) ---------------------------------------------------------------
@pytest.fixture(scope="module")
def unseen_rooms():
    """Generated games per held-out floor plan (FloorPlan10, 219, 308, 424)."""
    from tools.alfworld.generate import generate_games

    games = generate_games("valid_unseen", 36, seed=0)
    return {int(g.id.split("/")[0].rsplit("-", 1)[1]): g for g in games}


def _receptacles(pddl: str) -> dict[str, str]:
    """Receptacle id -> type of a problem."""
    return dict(re.findall(r"\(receptacleType (\S+) (\S+)Type\)", _init(pddl)))


def test_bathrooms_have_every_receptacle_the_layout_lists(unseen_rooms) -> None:
    types = sorted(_receptacles(unseen_rooms[424].pddl_problem).values())
    # FloorPlan424 as upstream's transcripts show it: 13 receptacles
    assert types == sorted(["Cabinet"] * 4 + ["CounterTop", "GarbageCan", "HandTowelHolder", "HandTowelHolder"]
                           + ["SinkBasin"] * 2 + ["Toilet", "ToiletPaperHanger", "TowelHolder"])


def test_only_receptacles_with_an_openable_json_entry_are_openable(unseen_rooms) -> None:
    pddl = unseen_rooms[10].pddl_problem
    cabinets = [r for r, t in _receptacles(pddl).items() if t == "Cabinet"]
    openable = set(re.findall(r"\(openable (\S+)\)", _init(pddl)))
    assert len(cabinets) == 6 and len(openable & set(cabinets)) == 3  # upstream: "On the cabinet 1, you see ..."
    assert openable <= set(_receptacles(pddl))
    assert all("GarbageCan" not in r for r in openable)


def test_every_receptacle_has_its_own_location(unseen_rooms) -> None:
    for game in unseen_rooms.values():
        locations = re.findall(r"\(receptacleAtLocation \S+ (\S+)\)", _init(game.pddl_problem))
        assert len(locations) == len(set(locations)) == len(_receptacles(game.pddl_problem))


def test_kitchens_are_as_cluttered_as_upstreams(unseen_rooms) -> None:
    pairs = _in_receptacle(unseen_rooms[10].pddl_problem)
    per_receptacle = re.findall(r"\(inReceptacle \S+ (\S+)\)", _init(unseen_rooms[10].pddl_problem))
    assert len(pairs) >= 40  # 1..3 instances of each pickupable type (ALFRED's MAX_NUM_OF_OBJ_INSTANCES)
    assert max(per_receptacle.count(r) for r in set(per_receptacle)) >= 10  # countertops collect most


def test_floor_lamps_stand_in_a_receptacle_and_are_not_pickupable(unseen_rooms) -> None:
    pddl = unseen_rooms[219].pddl_problem  # the layout lists a FloorLamp
    lamps = re.findall(r"\(objectType (\S+) FloorLampType\)", pddl)
    assert len(lamps) == 1
    holders = {r for o, r in re.findall(r"\(inReceptacle (\S+) (\S+)\)", _init(pddl)) if o == lamps[0]}
    assert len(holders) == 1 and f"(receptacleAtLocation {holders.pop()} " in pddl
    assert f"(pickupable {lamps[0]})" not in pddl and f"(toggleable {lamps[0]})" in pddl


def test_rooms_are_deterministic_from_the_seed(unseen_rooms) -> None:
    from tools.alfworld.generate import generate_games

    again = generate_games("valid_unseen", 36, seed=0)
    assert {int(g.id.split("/")[0].rsplit("-", 1)[1]): g for g in again} == unseen_rooms
    assert generate_games("valid_unseen", 4, seed=1)[0].pddl_problem != again[0].pddl_problem

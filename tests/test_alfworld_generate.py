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
        assert "(opened " not in pddl  # every receptacle starts closed; nothing hot, cold, clean or on:
        init = pddl[pddl.index("(:init") : pddl.index("(:goal")]
        assert not re.search(r"\((isHot|isCool|isClean|isOn) ", init)
        assert "|" not in pddl and "+" not in pddl  # fix_pddl_str_chars applied
        assert pddl.count("(") == pddl.count(")")


def _in_receptacle_types(pddl: str) -> list[tuple[str, str]]:
    """(object type, receptacle type) of every initial inReceptacle fact."""
    pddl = pddl[pddl.index("(:init") : pddl.index("(:goal")]
    type_of = dict(re.findall(r"\((?:objectType|receptacleType) (\S+) (\S+)Type\)", pddl))
    return [(type_of[o], type_of[r]) for o, r in re.findall(r"\(inReceptacle (\S+) (\S+)\)", pddl)]


def test_no_game_starts_with_its_target_already_in_place(generated) -> None:
    for game in generated:
        pairs = _in_receptacle_types(game.pddl_problem)
        targets = [r for o, r in pairs if o.lower() == game.object_target]
        assert targets, game.id  # the target object exists somewhere
        if game.parent_target:
            assert game.parent_target not in {r.lower() for r in targets}, game.id
        if game.task_type == "pick_two_obj_and_place":
            assert len(targets) >= 2
        if game.task_type == "look_at_obj_in_light":
            assert any(o == "DeskLamp" for o, _ in pairs)


def test_goal_sentence_comes_from_upstream_templates(generated) -> None:
    from alfworld.gen.goal_library import gdict

    for game in generated:
        sentences = {
            t.format(obj=game.object_target, recep=game.parent_target, toggle=game.toggle_target, mrecep="")
            for t in gdict[game.task_type]["templates"]
        }
        assert game.goal in sentences


def test_check_and_apply_drop_unsolved_games_and_record_engines(tmp_path, generated) -> None:
    from tools.alfworld.generate import apply_checks, write_split

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


# -- rooms (generator version 2) ---------------------------------------------------------------
@pytest.fixture(scope="module")
def unseen_rooms():
    """Generated games per held-out floor plan (FloorPlan10, 219, 308, 424)."""
    from tools.alfworld.generate import generate_games

    games = generate_games("valid_unseen", 36, seed=0)
    return {int(g.id.split("/")[0].rsplit("-", 1)[1]): g for g in games}


def _init(pddl: str) -> str:
    return pddl[pddl.index("(:init") : pddl.index("(:goal")]


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
    pairs = _in_receptacle_types(unseen_rooms[10].pddl_problem)
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

"""The bundled ALFWorld splits: upstream's sizes, upstream-like rooms, every task variant in every split."""

from __future__ import annotations

import pytest

from agentgym_budget.envs.alfworld.game import TASK_TYPES, load_games
from tools.alfworld.bundle_stats import SPLITS, room_of, room_table, split_table


@pytest.fixture(scope="module")
def bundle():
    return {split: load_games(split) for split in SPLITS}


def test_splits_have_upstreams_sizes_and_all_six_task_types(bundle) -> None:
    assert {split: len(games) for split, games in bundle.items()} == {"train": 3553, "valid_seen": 140, "valid_unseen": 134}
    for games in bundle.values():
        assert {g.task_type for g in games} == set(TASK_TYPES.values())


@pytest.mark.parametrize("split", SPLITS)
def test_every_split_has_sliced_floor_lamp_and_long_plan_games(bundle, split: str) -> None:
    games = bundle[split]
    assert any(g.object_sliced for g in games)
    assert any(g.toggle_target == "floorlamp" for g in games) and any(g.toggle_target == "desklamp" for g in games)
    assert all(g.expert_plan_len == len(g.walkthrough) for g in games)
    assert max(g.expert_plan_len for g in games) > 50  # the old 50-turn cut is gone


def test_rooms_have_upstreams_receptacles_and_clutter(bundle) -> None:
    unseen = [(g, room_of(g)) for g in bundle["valid_unseen"]]
    bathroom = next(room for g, room in unseen if g.id.split("/")[0].endswith("-424"))
    kitchen = next(room for g, room in unseen if g.id.split("/")[0].endswith("-10"))
    assert bathroom.receptacles == 13 and bathroom.has_garbagecan  # as upstream's FloorPlan424
    assert kitchen.non_openable_cabinets_drawers == 3 and kitchen.fullest_receptacle >= 10  # FloorPlan10
    assert "| kitchen |" in room_table([g for g, _ in unseen]) and "| valid_unseen | 134 |" in split_table(bundle)

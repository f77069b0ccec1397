"""The distribution of a set of ALFWorld games, as markdown tables (docs/alfworld.md's figures).

Per split: games per task type, sliced tasks, look-at lamps, start states, the fixed expert's
plan lengths; per room type: receptacles, non-openable receptacles, objects and the fullest
receptacle per game (median / max).  Everything is read from the games' PDDL problems, so it
works on any bundle::

    python -m tools.alfworld.bundle_stats            # the bundled splits
    PYTHONPATH=/tmp/v1 python -m tools.alfworld.bundle_stats   # another checkout's bundle
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from agentgym_budget.envs.alfworld.game import TASK_TYPES, AlfredGame, load_games
from tools.alfworld.generate import floor_plan_of, room_type

SPLITS = ("train", "valid_seen", "valid_unseen")
#: ALFRED's room types (generate.room_type) as the tables print them, in row order.
_ROOM_LABELS = {"Kitchen": "kitchen", "LivingRoom": "living room", "Bedroom": "bedroom", "Bathroom": "bathroom"}


@dataclass(frozen=True)
class Room:
    """What one game's initial state holds."""

    room_type: str
    receptacles: int
    non_openable_cabinets_drawers: int
    objects: int
    fullest_receptacle: int
    has_garbagecan: bool


def _init(game: AlfredGame) -> str:
    """The problem's initial state (the goal also names predicates such as ``isCool``)."""
    return game.pddl_problem[game.pddl_problem.index("(:init") : game.pddl_problem.index("(:goal")]


def room_of(game: AlfredGame) -> Room:
    init = _init(game)
    receptacles = dict(re.findall(r"\(receptacleType (\S+) (\S+)Type\)", init))
    openable = set(re.findall(r"\(openable (\S+)\)", init))
    holders = Counter(r for _, r in re.findall(r"\(inReceptacle (\S+) (\S+)\)", init))
    return Room(
        room_type=_ROOM_LABELS[room_type(floor_plan_of(game.id))],
        receptacles=len(receptacles),
        non_openable_cabinets_drawers=sum(t in ("Cabinet", "Drawer") and r not in openable for r, t in receptacles.items()),
        objects=len(re.findall(r"\(objectType \S+ \S+Type\)", init)),
        fullest_receptacle=max(holders.values(), default=0),
        has_garbagecan="GarbageCan" in receptacles.values(),
    )


def _median_max(values: Sequence[float]) -> str:
    return f"{statistics.median(values):g} / {max(values):g}" if values else "-"


def split_table(games_by_split: dict[str, list[AlfredGame]]) -> str:
    short = {"pick_and_place_simple": "simple", "look_at_obj_in_light": "look", "pick_clean_then_place_in_recep": "clean",
             "pick_heat_then_place_in_recep": "heat", "pick_cool_then_place_in_recep": "cool", "pick_two_obj_and_place": "two"}
    lines = ["| split | games | " + " | ".join(short[t] for t in TASK_TYPES.values())
             + " | sliced | floor-lamp look-at | target starts in place | target starts cold | plan length min / median / max |",
             "|---" * 13 + "|"]
    for split, games in games_by_split.items():
        types = Counter(g.task_type for g in games)
        plans = [len(g.walkthrough) for g in games if g.walkthrough]
        in_place = sum(_target_in_place(g) for g in games)
        cold = sum("(isCool " in _init(g) for g in games)
        lines.append(f"| {split} | {len(games)} | " + " | ".join(str(types[t]) for t in TASK_TYPES.values())
                     + f" | {sum(bool(getattr(g, 'object_sliced', False)) for g in games)}"
                     + f" | {sum(g.toggle_target == 'floorlamp' for g in games)} | {in_place} | {cold}"
                     + f" | {min(plans)} / {statistics.median(plans):g} / {max(plans)} |")
    return "\n".join(lines)


def _target_in_place(game: AlfredGame) -> bool:
    """An object of the target type starts in a receptacle of the goal type."""
    init = _init(game)
    types = {k.lower(): v.lower() for k, v in re.findall(r"\((?:objectType|receptacleType) (\S+) (\S+)Type\)", init)}
    return bool(game.parent_target) and any(
        types.get(o.lower()) == game.object_target and types.get(r.lower()) == game.parent_target
        for o, r in re.findall(r"\(inReceptacle (\S+) (\S+)\)", init))


def room_table(games: Sequence[AlfredGame]) -> str:
    rooms = [room_of(g) for g in games]
    lines = ["| room type | games | receptacles | non-openable cabinets + drawers | objects | objects in the fullest receptacle | rooms with a garbage can |",
             "|---|---|---|---|---|---|---|"]
    for name in _ROOM_LABELS.values():
        of_type = [r for r in rooms if r.room_type == name]
        if not of_type:
            continue
        lines.append(f"| {name} | {len(of_type)} | {_median_max([r.receptacles for r in of_type])}"
                     f" | {_median_max([r.non_openable_cabinets_drawers for r in of_type])}"
                     f" | {_median_max([r.objects for r in of_type])} | {_median_max([r.fullest_receptacle for r in of_type])}"
                     f" | {sum(r.has_garbagecan for r in of_type) / len(of_type):.0%} |")
    return "\n".join(lines)


def main() -> None:
    games_by_split = {split: load_games(split) for split in SPLITS}
    print(split_table(games_by_split))
    print()
    print("All splits, per game (median / max):\n")
    print(room_table([g for games in games_by_split.values() for g in games]))


if __name__ == "__main__":
    main()

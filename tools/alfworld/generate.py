"""Generate ALFWorld task instances offline, in the upstream ``initial_state.pddl`` form.

Upstream ALFWorld's games (``json_2.1.1``) were dumped from AI2-THOR scenes that ALFRED had
randomised (object positions from the physics simulator).  The alfworld wheel ships, per
THOR floor plan, the object *types* present (``FloorPlanN-objects.json``) and the static
receptacles with the agent pose used to reach them (``FloorPlanN-openable.json``), but not
which object lies where.  This generator rebuilds scenes from those files:

* receptacles = every static receptacle type the floor plan's ``-objects.json`` lists; instances
  and poses from ``-openable.json`` (its THOR ids, so the ``AlfredDemangler`` numbering, e.g.
  "cabinet 3", is the real one for that room), one instance (four stove burners) with a
  synthetic id and a free layout point for types only ``-objects.json`` lists, and the few
  counts upstream's transcripts show beyond that (``_UPSTREAM_TRANSCRIPT_COUNTS``); only
  openable-class receptacles with an ``-openable.json`` entry are ``openable`` (upstream's rule);
* small objects = the floor plan's pickupable types, 1..3 instances each (uniform, ALFRED's
  ``MAX_NUM_OF_OBJ_INSTANCES``), each in a receptacle that may hold it
  (``constants.VAL_RECEPTACLE_OBJECTS``) drawn by surface size (``_SURFACE_WEIGHTS``), with
  THOR-like ids (``Apple|+01.20|+00.90|-02.35``); desk and floor lamps (not pickupable) in
  furniture (``_LAMP_RECEPTACLES``);
* the task (type, object, parent receptacle, lamp) is sampled among those the scene allows
  (``constants.GOALS_VALID`` room types, ``VAL_ACTION_OBJECTS`` for clean/heat/cool), the goal
  PDDL comes from ``alfworld/gen/goal_library.py`` and the sentence from its templates;
* sliced variants (``goal_library``'s ``*_slice`` goals; ``object_sliced`` in the game, ``AppleSliced``
  in its id as ALFRED names the dirs) of simple / clean / heat / cool tasks where a knife and a
  sliceable target are in the room; look-at tasks under a desk lamp or a floor lamp;
* start states as upstream has them, each by chance: a target instance already in a
  receptacle of the goal type where that does not win at reset (pick-two: one of the two;
  clean/heat/cool/sliced: a not yet clean/hot/cool/sliced one; never for simple
  pick-and-place, where it would win), and a coolable target starting cold in the fridge
  (``isCool``, as upstream's ``state_to_pddl`` writes it for objects in a fridge); otherwise no
  target instance starts in a goal-type receptacle.  All receptacles start closed, nothing
  starts hot, clean, sliced or on.

The PDDL text follows upstream's ``scripts/augment_pddl_states.py`` (``TextWorldTaskGameStateFullKnowledge``):
same sections, facts and id mangling.  Splits: ``train`` and ``valid_seen`` use the same
floor plans; ``valid_unseen`` uses ALFRED's held-out validation rooms (FloorPlan10, 219, 308,
424), which train never sees.  Everything is drawn from one ``random.Random(seed)``.

Usage (generation needs the ``alfworld`` extra for the layout files)::

    python -m tools.alfworld.generate generate --out DIR --seed 0 \\
        --train 3000 --valid-seen 140 --valid-unseen 140
    python -m tools.alfworld.generate check --games DIR --split valid_seen \\
        --engine textworld --progress valid_seen.progress.jsonl
    python -m tools.alfworld.generate apply --games DIR --split valid_seen \\
        --progress valid_seen.progress.jsonl

``check`` plays the handcoded expert on every game (resumable); ``apply`` drops the games it
did not win within 200 turns (upstream ``AlfredExpert``'s limit: long plans are kept), stores
its winning actions as the walkthrough and their count as ``expert_plan_len`` (filter with
``load_games(max_plan_len=...)``), and records in ``manifest.json`` how many games were checked
and with which engine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import lzma
import random
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.envs.alfworld.game import TASK_TYPES, AlfredGame

__all__ = ["EXPERT_MAX_TURNS", "GENERATOR_VERSION", "UNSEEN_FLOOR_PLANS", "Scene", "generate_games", "main", "write_split"]

#: Bumped whenever the generator's output for a given seed changes.
GENERATOR_VERSION = "2"
#: ALFRED's valid_unseen rooms (one kitchen, living room, bedroom, bathroom): held out of train.
UNSEEN_FLOOR_PLANS: tuple[int, ...] = (10, 219, 308, 424)
_ROOM_TYPES = {"Kitchen": range(1, 31), "LivingRoom": range(201, 231), "Bedroom": range(301, 331), "Bathroom": range(401, 431)}
#: Layout names of receptacles whose PDDL type is the basin (THOR ids ``Sink|...|SinkBasin``).
_LAYOUT_RECEPTACLE_NAMES = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}
#: Instances of a receptacle type the layout lists only in ``-objects.json`` (no ids there):
#: 1, except the four burners every THOR kitchen stove has.
_UNLISTED_COUNTS = {"StoveBurner": 4}
#: Counts read off published upstream transcripts (issue 17), where the wheel's files list fewer
#: instances: the extras get no ``-openable.json`` entry, hence no ``openable`` fact upstream
#: (FloorPlan10's three extra cabinets show "On the cabinet 1, you see ...").
_UPSTREAM_TRANSCRIPT_COUNTS = {3: {"Drawer": 8}, 10: {"Cabinet": 6}, 424: {"HandTowelHolder": 2}}
#: Relative chance that a spawned object lands in a receptacle of this type (others: 1).  THOR's
#: random spawn fills free surface points, so large surfaces collect most objects; the wheel has no
#: surface areas, so these are size classes, set so kitchens come near upstream's counts (issue 17:
#: FloorPlan3's one countertop holds 23 objects, a dining table 16).
_SURFACE_WEIGHTS = {
    "CounterTop": 12, "DiningTable": 12,
    "Desk": 6, "Bed": 6, "Sofa": 6, "Dresser": 6, "CoffeeTable": 6, "TVStand": 4, "Cart": 4,
    "SideTable": 3, "Shelf": 2, "ArmChair": 2, "Ottoman": 2, "Fridge": 2, "BathtubBasin": 2, "Toilet": 2,
}
#: Where lamps stand.  Desk lamps: on furniture (not in VAL_RECEPTACLE_OBJECTS).  Floor lamps:
#: upstream's look_at_obj_in_light goal needs ``inReceptacle lamp r`` with ``receptacleAtLocation
#: r l`` and upstream has FloorLamp look-at games (valid_unseen
#: ``look_at_obj_in_light-RemoteControl-None-FloorLamp-219``), so its floor lamps have a parent
#: receptacle; augment_pddl_states takes it from THOR's ``parentReceptacles``, which for a lamp on
#: the floor is the furniture its base touches [inferred, not read from a game]: the seating and
#: tables of living rooms and bedrooms.  Neither lamp is pickupable (THOR flag).
_LAMP_RECEPTACLES = {
    "DeskLamp": ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "TVStand"),
    "FloorLamp": ("SideTable", "Sofa", "ArmChair", "Ottoman", "Dresser", "Desk", "CoffeeTable", "TVStand", "Bed"),
}
_TASK_REQUIREMENTS = {  # task type -> (VAL_ACTION_OBJECTS key the object needs, receptacle type the scene needs)
    "pick_clean_then_place_in_recep": ("Cleanable", "SinkBasin"),
    "pick_heat_then_place_in_recep": ("Heatable", "Microwave"),
    "pick_cool_then_place_in_recep": ("Coolable", "Fridge"),
}


@dataclass
class _Alfworld:
    """The parts of the alfworld package the generator reads."""

    constants: Any
    goals: dict[str, Any]
    layouts: Any  # importlib.resources Traversable of alfworld/gen/layouts


def _load_alfworld() -> _Alfworld:
    require("alfworld", "alfworld", "generating ALFWorld games")
    from importlib import resources

    import alfworld.gen.constants as constants
    import alfworld.gen.goal_library as goal_library

    return _Alfworld(constants, goal_library.gdict, resources.files("alfworld.gen").joinpath("layouts"))


@dataclass
class Scene:
    """A room: receptacles (THOR id -> type, pose) and objects (THOR id -> type, receptacle id)."""

    floor_plan: int
    receptacles: dict[str, str] = field(default_factory=dict)
    poses: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    object_types: dict[str, str] = field(default_factory=dict)
    placement: dict[str, str] = field(default_factory=dict)
    openable: set[str] = field(default_factory=set)  # receptacle ids with an ``openable`` fact
    agent_pose: tuple[int, int, int, int] = (0, 0, 0, 30)

    def receptacles_of(self, rtype: str) -> list[str]:
        return sorted(r for r, t in self.receptacles.items() if t == rtype)

    def objects_of(self, otype: str) -> list[str]:
        return sorted(o for o, t in self.object_types.items() if t == otype)


def room_type(floor_plan: int) -> str:
    """ALFRED's room type of a THOR floor plan (``"Kitchen"``, ``"LivingRoom"``, ``"Bedroom"``, ``"Bathroom"``)."""
    return next(room for room, plans in _ROOM_TYPES.items() if floor_plan in plans)


def floor_plan_of(game_id: str) -> int:
    """The floor plan a game id names (``pick_and_place_simple-Apple-None-Fridge-10/trial_...`` -> 10)."""
    return int(game_id.split("/")[0].rsplit("-", 1)[1])


def _thor_coord(value: float) -> str:
    return f"{value:+06.2f}"


def _grid_xz(x: float, z: float) -> tuple[int, int]:
    """A layout point (metres) on THOR's 0.25 m grid."""
    return round(float(x) / 0.25), round(float(z) / 0.25)


def _grid_pose(pose: Sequence[float]) -> tuple[int, int, int, int]:
    x, z, rotation, horizon = pose
    return (round(x / 0.25), round(z / 0.25), round(rotation / 90) % 4, round(horizon))


def _build_scene(alf: _Alfworld, floor_plan: int, rng: random.Random) -> Scene:
    """The room's receptacles (every static receptacle type the layout lists), then its clutter."""
    c = alf.constants
    types = set(json.loads(alf.layouts.joinpath(f"FloorPlan{floor_plan}-objects.json").read_text()))
    openable = json.loads(alf.layouts.joinpath(f"FloorPlan{floor_plan}-openable.json").read_text())
    points = _layout_points(alf, floor_plan)
    static_types = c.RECEPTACLES - c.MOVABLE_RECEPTACLES_SET
    scene = Scene(floor_plan)
    for thor_id, pose in sorted(openable.items()):
        rtype = _receptacle_type(thor_id)
        if rtype in static_types:
            scene.receptacles[thor_id] = rtype
            scene.poses[thor_id] = _grid_pose(pose)
            if rtype in c.OPENABLE_CLASS_SET:  # upstream: openable iff its class is and the id is in -openable.json
                scene.openable.add(thor_id)
    listed = {_LAYOUT_RECEPTACLE_NAMES.get(t, t) for t in types} & static_types
    for rtype, count in sorted(_receptacle_counts(floor_plan, listed, scene).items()):
        for _ in range(count - len(scene.receptacles_of(rtype))):
            _add_unlisted_receptacle(scene, rtype, points, rng)
    _make_locations_unique(scene)
    _add_clutter(alf, scene, types, rng)
    for lamp, holder_types in _LAMP_RECEPTACLES.items():
        holders = [r for r, t in sorted(scene.receptacles.items()) if t in holder_types]
        if lamp in types and holders:
            _add_object(scene, lamp, rng.choice(holders), rng)
    scene.agent_pose = _agent_start(scene, points, rng)
    return scene


def _receptacle_type(thor_id: str) -> str:
    """``Cabinet|+00.68|+00.50|-02.20`` -> Cabinet; ``Sink|...|SinkBasin`` -> SinkBasin."""
    parts = thor_id.split("|")
    return parts[-1] if len(parts) == 5 else parts[0]


def _receptacle_counts(floor_plan: int, listed: set[str], scene: Scene) -> dict[str, int]:
    """Instances per receptacle type: the ``-openable.json`` ids where it has any, else
    ``_UNLISTED_COUNTS`` (default 1), raised to ``_UPSTREAM_TRANSCRIPT_COUNTS`` where those apply."""
    counts = {rtype: len(scene.receptacles_of(rtype)) or _UNLISTED_COUNTS.get(rtype, 1) for rtype in listed}
    for rtype, count in _UPSTREAM_TRANSCRIPT_COUNTS.get(floor_plan, {}).items():
        counts[rtype] = max(counts.get(rtype, 0), count)
    return counts


def _add_unlisted_receptacle(scene: Scene, rtype: str, points: Any, rng: random.Random) -> None:
    """A receptacle the layout files give no id or pose for: a THOR-like id and a pose at a layout
    point no other receptacle stands at (not openable: upstream's rule, see ``_build_scene``)."""
    used = {(x, z) for x, z, _, _ in scene.poses.values()}
    free = [i for i, (x, z) in enumerate(points) if _grid_xz(x, z) not in used]
    x, z = points[rng.choice(free or range(len(points)))]
    prefix = {basin: name for name, basin in _LAYOUT_RECEPTACLE_NAMES.items()}.get(rtype, rtype)
    while True:
        coords = [_thor_coord(rng.uniform(-4, 4)), _thor_coord(rng.uniform(0, 2)), _thor_coord(rng.uniform(-4, 4))]
        thor_id = "|".join([prefix, *coords] + ([rtype] if prefix != rtype else []))
        if thor_id not in scene.receptacles:
            break
    scene.receptacles[thor_id] = rtype
    scene.poses[thor_id] = (*_grid_xz(x, z), rng.randrange(4), 30)


def _make_locations_unique(scene: Scene) -> None:
    """Give every receptacle its own location (shared ones make receptacles unreachable from
    each other in the PDDL domain); bumps the camera horizon of later duplicates."""
    used: set[tuple[int, int, int, int]] = set()
    for thor_id in sorted(scene.receptacles):
        x, z, rotation, horizon = scene.poses[thor_id]
        while (x, z, rotation, horizon) in used:
            horizon += 15
        scene.poses[thor_id] = (x, z, rotation, horizon)
        used.add((x, z, rotation, horizon))


def _add_clutter(alf: _Alfworld, scene: Scene, types: set[str], rng: random.Random) -> None:
    """ALFRED's spawn rule: every pickupable type the layout lists, 1..MAX_NUM_OF_OBJ_INSTANCES
    instances (uniform), each in a receptacle that may hold it, drawn with ``_SURFACE_WEIGHTS``."""
    c = alf.constants
    placeable = set().union(*c.VAL_RECEPTACLE_OBJECTS.values())
    for otype in sorted(types):
        if otype in c.RECEPTACLES - c.MOVABLE_RECEPTACLES_SET or otype not in placeable or otype not in c.OBJECTS:
            continue  # static receptacles, sliced parts (not in OBJECTS), fixtures no receptacle holds
        holders = sorted(r for r, t in scene.receptacles.items() if otype in c.VAL_RECEPTACLE_OBJECTS.get(t, ()))
        if not holders:
            continue
        weights = [_SURFACE_WEIGHTS.get(scene.receptacles[r], 1) for r in holders]
        for _ in range(rng.randint(1, c.MAX_NUM_OF_OBJ_INSTANCES)):
            _add_object(scene, otype, rng.choices(holders, weights=weights)[0], rng)


def _add_object(scene: Scene, otype: str, receptacle: str, rng: random.Random) -> str:
    while True:
        thor_id = "|".join([otype, _thor_coord(rng.uniform(-4, 4)), _thor_coord(rng.uniform(0.2, 2)), _thor_coord(rng.uniform(-4, 4))])
        if thor_id not in scene.object_types:
            break
    scene.object_types[thor_id] = otype
    scene.placement[thor_id] = receptacle
    return thor_id


def _layout_points(alf: _Alfworld, floor_plan: int) -> Any:
    import numpy as np  # a core dependency; only the layout points need it

    with alf.layouts.joinpath(f"FloorPlan{floor_plan}-layout.npy").open("rb") as f:
        return np.load(f)


def _agent_start(scene: Scene, points: Any, rng: random.Random) -> tuple[int, int, int, int]:
    taken = set(scene.poses.values())
    while True:
        x, z = points[rng.randrange(len(points))]
        pose = (*_grid_xz(x, z), rng.randrange(4), 30)
        if pose not in taken:
            return pose


# -- task sampling ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Task:
    task_type: str
    object_target: str
    parent_target: str = ""
    toggle_target: str = ""
    sliced: bool = False

    @property
    def goal_key(self) -> str:
        """The task's entry in upstream's ``goal_library.gdict`` (``*_slice`` for sliced tasks)."""
        return f"{self.task_type}_slice" if self.sliced else self.task_type


#: Lamps a look-at task may name (``pddl_params["toggle_target"]`` in ALFRED: DeskLamp or FloorLamp).
_LAMPS = tuple(_LAMP_RECEPTACLES)  # DeskLamp, FloorLamp
#: Task types with a sliced variant here.  Upstream's goal library also has
#: ``pick_two_obj_and_place_slice`` (the expert would need two knife rounds) and
#: ``look_at_obj_in_light_slice`` (its goal leaves ``?o`` unbound): not generated.
_SLICED_TASK_TYPES = frozenset({
    "pick_and_place_simple", "pick_clean_then_place_in_recep", "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep",
})
#: The knife a sliced task's scene must hold (the expert fetches a "knife"; a ButterKnife slices too).
_KNIFE = "Knife"
_SLICED_PROB = 0.3  # share of sliced tasks where the scene allows one
_IN_PLACE_PROB = 0.3  # a target instance starts in a goal-type receptacle, where that does not win
_COLD_START_PROB = 0.3  # a coolable target instance starts in the fridge (cold: upstream writes isCool)


def _candidate_tasks(alf: _Alfworld, scene: Scene, task_type: str) -> list[_Task]:
    """The tasks of ``task_type`` the scene allows (sliced variants included where a knife is)."""
    c = alf.constants
    object_types = sorted({t for t in scene.object_types.values() if t not in _LAMPS})
    receptacle_types = sorted(set(scene.receptacles.values()))
    if task_type == "look_at_obj_in_light":
        lamps = sorted(set(_LAMPS) & set(scene.object_types.values()))
        return [_Task(task_type, o, toggle_target=lamp) for lamp in lamps for o in object_types]
    needed_action, needed_receptacle = _TASK_REQUIREMENTS.get(task_type, (None, None))
    if needed_receptacle is not None and needed_receptacle not in receptacle_types:
        return []
    can_slice = task_type in _SLICED_TASK_TYPES and _KNIFE in object_types
    tasks = []
    for otype in object_types:
        if needed_action is not None and otype not in c.VAL_ACTION_OBJECTS[needed_action]:
            continue
        holders = {t for t in receptacle_types if otype in c.VAL_RECEPTACLE_OBJECTS.get(t, ())}
        for parent in sorted(holders - {needed_receptacle}):
            if holders - {parent}:  # somewhere else for the object to start
                tasks.append(_Task(task_type, otype, parent))
                if can_slice and otype in c.VAL_ACTION_OBJECTS["Sliceable"]:
                    tasks.append(_Task(task_type, otype, parent, sliced=True))
    return tasks


def _choose_task(candidates: Sequence[_Task], rng: random.Random) -> _Task:
    """A sliced task with probability ``_SLICED_PROB`` when there is one, else another task."""
    sliced = [t for t in candidates if t.sliced]
    plain = [t for t in candidates if not t.sliced]
    if sliced and (not plain or rng.random() < _SLICED_PROB):
        return rng.choice(sliced)
    return rng.choice(plain)


def _fit_scene_to_task(alf: _Alfworld, scene: Scene, task: _Task, rng: random.Random) -> None:
    """Set the task's start state: no target instance in a parent-type receptacle (so the game
    is not won at reset), two targets for pick-two, then upstream's start states by chance
    (:func:`_place_start_states`)."""
    c = alf.constants
    holders = sorted(
        r for r, t in scene.receptacles.items()
        if task.object_target in c.VAL_RECEPTACLE_OBJECTS.get(t, ()) and t != task.parent_target
    )
    for obj in scene.objects_of(task.object_target):
        if scene.receptacles[scene.placement[obj]] == task.parent_target:
            scene.placement[obj] = rng.choice(holders)
    if task.task_type == "pick_two_obj_and_place":
        while len(scene.objects_of(task.object_target)) < 2:
            _add_object(scene, task.object_target, rng.choice(holders), rng)
    _place_start_states(alf, scene, task, rng)


def _in_place_allowed(task: _Task) -> bool:
    """Whether a target instance may start in a parent-type receptacle without winning at reset:
    pick-two (one of two), clean/heat/cool (not yet clean/hot/cool) and sliced tasks (not
    sliced); never simple pick-and-place (one in place wins) nor look-at (no parent)."""
    if task.task_type == "pick_two_obj_and_place" or task.sliced:
        return True
    return task.task_type in _TASK_REQUIREMENTS


def _place_start_states(alf: _Alfworld, scene: Scene, task: _Task, rng: random.Random) -> None:
    """Upstream's start states, each by chance: a target instance already in a goal-type
    receptacle (when :func:`_in_place_allowed`; pick-two keeps its other target elsewhere) and a
    coolable target instance in the fridge (cold: :func:`scene_to_pddl` writes ``isCool``)."""
    c = alf.constants
    targets = scene.objects_of(task.object_target)
    parents = scene.receptacles_of(task.parent_target) if task.parent_target else []
    if parents and _in_place_allowed(task) and rng.random() < _IN_PLACE_PROB:
        scene.placement[targets.pop(rng.randrange(len(targets)))] = rng.choice(parents)
    fridges = scene.receptacles_of("Fridge")
    coolable = task.object_target in c.VAL_ACTION_OBJECTS["Coolable"]
    fridge_holds_it = task.object_target in c.VAL_RECEPTACLE_OBJECTS.get("Fridge", ())
    # a pick-and-place (simple or two) into a fridge asks for nothing a cold target lacks: it
    # would (with one already in place, for pick-two) be won at reset
    fridge_is_goal = task.parent_target == "Fridge" and task.task_type not in _TASK_REQUIREMENTS and not task.sliced
    if targets and fridges and coolable and fridge_holds_it and not fridge_is_goal and rng.random() < _COLD_START_PROB:
        scene.placement[rng.choice(targets)] = rng.choice(fridges)


def _starts_cold(scene: Scene, task: _Task) -> list[str]:
    """Target instances lying in a fridge: cold, as upstream's ``state_to_pddl`` writes them
    (``isCool`` for every object of the target type that was in a fridge, coolable or not)."""
    return [o for o in scene.objects_of(task.object_target) if scene.receptacles[scene.placement[o]] == "Fridge"]


def _goal_sentence(alf: _Alfworld, task: _Task, rng: random.Random) -> str:
    template = rng.choice(alf.goals[task.goal_key]["templates"])
    return template.format(obj=task.object_target.lower(), recep=task.parent_target.lower(), toggle=task.toggle_target.lower(), mrecep="")


# -- PDDL ------------------------------------------------------------------------------------
_MANGLE = {"-": "_minus_", "#": "-", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}


def _mangle(text: str) -> str:
    """``fix_pddl_str_chars``: one simultaneous replacement pass (like ``py_util.multireplace``)."""
    return "".join(_MANGLE.get(char, char) for char in text)


def _loc(pose: tuple[int, int, int, int]) -> str:
    return "loc|%d|%d|%d|%d" % pose


def scene_to_pddl(alf: _Alfworld, scene: Scene, task: _Task, problem_id: str) -> str:
    """The problem text, section by section as ``augment_pddl_states.state_to_pddl`` writes it."""
    c = alf.constants
    static_types = c.RECEPTACLES - c.MOVABLE_RECEPTACLES_SET
    type_constants = sorted(c.OBJECTS_SET - static_types)
    start = "\n(define (problem plan_%s)\n(:domain alfred)\n(:objects\nagent1 # agent\n%s\n%s\n%s\n" % (
        problem_id,
        "\n        ".join(f"{o} # object" for o in type_constants),
        "\n        ".join(f"{o}Type # otype" for o in type_constants),
        "\n        ".join(f"{r}Type # rtype" for r in sorted(static_types)),
    )
    objects = sorted(scene.object_types)
    receptacles = sorted(scene.receptacles)
    locations = sorted({_loc(scene.poses[r]) for r in receptacles})
    mid_start = "\n        %s\n        %s\n        %s\n        )\n    " % (
        "\n        ".join(f"{o} # object" for o in objects),
        "\n        ".join(f"{r} # receptacle" for r in receptacles),
        "\n        ".join([f"{loc} # location" for loc in locations] + [f"{_loc(scene.agent_pose)} # location"]),
    )
    types_in_scene = set(scene.object_types.values())
    can_contain = []
    for rtype in sorted(set(scene.receptacles.values())):
        can_contain += [f"(canContain {rtype}Type {o}Type)" for o in sorted(c.VAL_RECEPTACLE_OBJECTS.get(rtype, ())) if o in types_in_scene]

    def facts(predicate: str, items: Sequence[str]) -> str:
        return "\n        ".join(f"({predicate} {item})" for item in items)

    def of_action(kind: str) -> list[str]:
        return [o for o in objects if scene.object_types[o] in c.VAL_ACTION_OBJECTS[kind]]

    sections = [
        "\n        ".join(f"(receptacleType {r} {scene.receptacles[r]}Type)" for r in receptacles),
        "\n        ".join(f"(objectType {o} {scene.object_types[o]}Type)" for o in objects),
        "\n        ".join(can_contain),
        facts("pickupable", [o for o in objects if scene.object_types[o] not in _LAMPS]),
        facts("isReceptacleObject", [o for o in objects if scene.object_types[o] in c.MOVABLE_RECEPTACLES_SET]),
        facts("openable", [r for r in receptacles if r in scene.openable]),
        f"\n        (atLocation agent1 {_loc(scene.agent_pose)})",
        "",  # opened: every receptacle starts closed
        facts("cleanable", of_action("Cleanable")),
        "",  # isClean
        facts("heatable", of_action("Heatable")),
        facts("coolable", of_action("Coolable")),
        "",  # isHot
        facts("isCool", _starts_cold(scene, task)),
        facts("toggleable", of_action("Toggleable")),
        "",  # isOn
        "",  # isReceptacleObject of movable receptacles that are the mrecep target
        facts("sliceable", of_action("Sliceable")),
        "",  # isSliced
        "\n        ".join(f"(inReceptacle {o} {scene.placement[o]})" for o in objects),
        "",  # wasInReceptacle
        "",  # distances
        "\n        ".join(f"(receptacleAtLocation {r} {_loc(scene.poses[r])})" for r in receptacles),
        "\n        ".join(f"(objectAtLocation {o} {_loc(scene.poses[scene.placement[o]])})" for o in objects),
    ]
    mid_init = "\n" + "".join(f"        {s}\n" for s in sections) + "        )\n    "
    goal = alf.goals[task.goal_key]["pddl"].format(
        obj=task.object_target, recep=task.parent_target, toggle=task.toggle_target, mrecep=""
    )
    return _mangle(start) + "\n" + _mangle(mid_start) + "\n" + "\n(:init\n" + "\n" + _mangle(mid_init) + "\n" + _mangle(goal)


# -- splits ----------------------------------------------------------------------------------
def _floor_plans(alf: _Alfworld) -> list[int]:
    names = [p.name for p in alf.layouts.iterdir() if p.name.endswith("-openable.json")]
    return sorted(int(n[len("FloorPlan") : -len("-openable.json")]) for n in names)


def generate_games(split: str, count: int, seed: int, floor_plans: Sequence[int] | None = None) -> list[AlfredGame]:
    """``count`` games for ``split`` (task types in turn, so all six are balanced)."""
    alf = _load_alfworld()
    if floor_plans is None:
        all_plans = _floor_plans(alf)
        unseen = split == "valid_unseen"
        floor_plans = [p for p in all_plans if (p in UNSEEN_FLOOR_PLANS) == unseen]
    rng = random.Random(f"{seed}/{split}")
    task_types = list(TASK_TYPES.values())
    games: list[AlfredGame] = []
    attempts = 0
    while len(games) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise RuntimeError(f"could not generate {count} {split} games from floor plans {list(floor_plans)}")
        task_type = task_types[len(games) % len(task_types)]
        plans = [p for p in floor_plans if room_type(p) in alf.constants.GOALS_VALID[task_type]]
        floor_plan = rng.choice(plans)
        scene = _build_scene(alf, floor_plan, rng)
        candidates = _candidate_tasks(alf, scene, task_type)
        if not candidates:
            continue
        task = _choose_task(candidates, rng)
        _fit_scene_to_task(alf, scene, task, rng)
        target = task.object_target + ("Sliced" if task.sliced else "")  # ALFRED's dir naming, e.g. AppleSliced
        game_id = f"{task.task_type}-{target}-None-{task.parent_target or task.toggle_target}-{floor_plan}/trial_{split}_{len(games):05d}"
        games.append(
            AlfredGame(
                id=game_id,
                split=split,
                task_type=task.task_type,
                goal=_goal_sentence(alf, task, rng),
                pddl_problem=scene_to_pddl(alf, scene, task, game_id.replace("/", "_")),
                object_target=task.object_target.lower(),
                parent_target=task.parent_target.lower(),
                toggle_target=task.toggle_target.lower(),
                object_sliced=task.sliced,
            )
        )
    return games


def write_split(games: Sequence[AlfredGame], path: Path) -> None:
    """One JSON line per game (without ``split``, which is the file name), xz-compressed.

    xz rather than gzip: the games share most of their PDDL text, and xz's 8 MiB window sees
    across games (3000 train games: 112 MB of text -> about 3 MB; gzip: 8.8 MB)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(path, "wt", encoding="utf-8", preset=6) as f:
        for game in games:
            record = game.to_record()
            record.pop("split")
            f.write(json.dumps(record, sort_keys=True) + "\n")


# -- solvability check ------------------------------------------------------------------------
#: The check's turn limit: upstream ``AlfredExpert``'s (its expert gives up after 200 steps).
EXPERT_MAX_TURNS = 200


def expert_walkthrough(game: AlfredGame, engine: Any, max_turns: int = EXPERT_MAX_TURNS) -> tuple[str, ...] | None:
    """The handcoded expert's winning actions on ``game`` within ``max_turns``, else ``None``.

    The expert is played exactly as an agent following ``info["expert_action"]`` would play it
    (its first action is upstream's ``"look"``), seeded from the game id.
    """
    from agentgym_budget.envs.alfworld.expert import HandCodedExpert

    expert = HandCodedExpert.for_game(game, random.Random(game.id), expert_type="fixed")  # as bundled
    step = engine.reset(game)
    action = expert.start(step.observation)
    actions: list[str] = []
    for _ in range(max_turns):
        step = engine.step(action)
        actions.append(action)
        if step.won:
            return tuple(actions)
        action = expert.reported_action(action, step.observation, step.admissible_commands)
    return None


def check_split(games_dir: Path, split: str, engine_name: str, limit: int | None, progress: Path) -> None:
    """Run the expert on the games of ``split`` (the first ``limit``), appending results to ``progress``.

    Resumable: games already in ``progress`` are skipped.
    """
    from agentgym_budget.envs.alfworld.engine import make_engine

    games = _read_split(games_dir / f"{split}.jsonl.xz", split)[:limit]
    done = {json.loads(line)["id"] for line in progress.read_text().splitlines()} if progress.exists() else set()
    engine = make_engine(engine_name)
    with progress.open("a") as out:
        for game in games:
            if game.id in done:
                continue
            walkthrough = expert_walkthrough(game, engine)
            out.write(json.dumps({"id": game.id, "engine": engine_name, "walkthrough": walkthrough}) + "\n")
            out.flush()


def apply_checks(
    games_dir: Path, split: str, progress_files: Sequence[Path], seed: int, out_dir: Path | None = None, keep: int | None = None
) -> dict[str, Any]:
    """Keep the games the expert won on every engine that checked them; store its walkthrough.

    ``keep``: write only the first ``keep`` of those (generate a few more than a split's target
    size, since some games are dropped, and cut to the size here).

    Writes ``<out_dir>/<split>.jsonl.xz`` and the split's entry of ``<out_dir>/manifest.json``:
    counts per task type, how many games each engine checked, and on how many games checked by
    both engines the expert's actions differed (they should not: the engines are identical).
    """
    out_dir = out_dir or games_dir
    games = _read_split(games_dir / f"{split}.jsonl.xz", split)
    results: dict[str, dict[str, list[str] | None]] = {}  # engine -> game id -> walkthrough
    for path in progress_files:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            results.setdefault(record["engine"], {})[record["id"]] = record["walkthrough"]
    kept, disagreements = [], 0
    for game in games:
        found = [by_id[game.id] for by_id in results.values() if game.id in by_id]
        disagreements += len({json.dumps(w) for w in found}) > 1
        if found and all(w is not None for w in found):
            walkthrough = tuple(found[0])  # type: ignore[arg-type]
            kept.append(dataclasses.replace(game, walkthrough=walkthrough, expert_plan_len=len(walkthrough)))
        elif not found:
            kept.append(game)  # unchecked: kept, and counted as such in the manifest
    solvable = len(kept)
    if keep is not None and solvable < keep:
        raise ValueError(f"only {solvable} {split} games passed the check, fewer than keep={keep}; generate more")
    kept = kept[:keep]
    write_split(kept, out_dir / f"{split}.jsonl.xz")
    summary = {
        "generated": len(games),
        "checked_by_engine": {engine: sum(g.id in by_id for g in games) for engine, by_id in sorted(results.items())},
        "engine_disagreements": disagreements,
        "unsolvable_dropped": len(games) - solvable,
        "surplus_dropped": solvable - len(kept),
        "games": len(kept),
        "per_task_type": {t: sum(g.task_type == t for g in kept) for t in TASK_TYPES.values()},
        "floor_plans": sorted({floor_plan_of(g.id) for g in kept}),
        "sliced": sum(g.object_sliced for g in kept),
        "per_toggle_target": dict(sorted(Counter(g.toggle_target for g in kept if g.toggle_target).items())),
        "expert_plan_len": _min_median_max([g.expert_plan_len for g in kept if g.expert_plan_len is not None]),
    }
    manifest_path = out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest.update({
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "expert_max_turns": EXPERT_MAX_TURNS,
        "check": "the handcoded expert (expert.HandCodedExpert, expert_type='fixed', seeded from the game id) played "
        "as an agent following info['expert_action'] (first action 'look'); a game is kept if it won within "
        "expert_max_turns (upstream AlfredExpert's limit, so long plans stay) on every engine that checked it; "
        "its walkthrough length is stored as expert_plan_len (load_games(max_plan_len=...) filters on it)",
    })
    manifest.pop("max_turns", None)
    manifest.setdefault("splits", {})[split] = summary
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return summary


def _min_median_max(values: Sequence[int]) -> dict[str, float] | None:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)} if values else None


def _read_split(path: Path, split: str) -> list[AlfredGame]:
    with lzma.open(path, "rt", encoding="utf-8") as lines:
        return [AlfredGame.from_record({**json.loads(line), "split": split}) for line in lines if line.strip()]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="write <out>/<split>.jsonl.xz")
    gen.add_argument("--out", type=Path, required=True)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--train", type=int, default=3000)
    gen.add_argument("--valid-seen", type=int, default=140)
    gen.add_argument("--valid-unseen", type=int, default=140)
    check = commands.add_parser("check", help="run the expert on a split, appending to a progress file")
    check.add_argument("--games", type=Path, required=True)
    check.add_argument("--split", required=True)
    check.add_argument("--engine", default="textworld")
    check.add_argument("--limit", type=int, default=None)
    check.add_argument("--progress", type=Path, required=True)
    apply = commands.add_parser("apply", help="drop unsolvable games, store walkthroughs, write the manifest")
    apply.add_argument("--games", type=Path, required=True)
    apply.add_argument("--split", required=True)
    apply.add_argument("--progress", type=Path, nargs="+", required=True)
    apply.add_argument("--seed", type=int, default=0)
    apply.add_argument("--out", type=Path, default=None, help="folder to write to (default: --games)")
    apply.add_argument("--keep", type=int, default=None, help="write only the first KEEP games that passed the check")
    args = parser.parse_args(argv)
    if args.command == "generate":
        for split, count in (("train", args.train), ("valid_seen", args.valid_seen), ("valid_unseen", args.valid_unseen)):
            games = generate_games(split, count, args.seed)
            write_split(games, args.out / f"{split}.jsonl.xz")
            print(f"{split}: {len(games)} games -> {args.out / f'{split}.jsonl.xz'}")
    elif args.command == "check":
        check_split(args.games, args.split, args.engine, args.limit, args.progress)
    else:
        print(json.dumps(apply_checks(args.games, args.split, args.progress, args.seed, args.out, args.keep), indent=1))


if __name__ == "__main__":
    main()

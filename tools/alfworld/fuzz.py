"""Random small ALFWorld games that exercise the engine's corner cases (for differential tests).

The bundled games follow upstream's conventions (one location per receptacle, everything
closed and cold at the start).  These games deliberately do not: receptacles share
locations, the agent may start next to one, objects may start in two receptacles, hot, cool,
clean, sliced, toggled or held, and movable receptacles hold things.  About a third of the
pick-two, heat, cool and clean games start with a target object already in a receptacle of
the goal's type, or (cool tasks) cold in a fridge: start states upstream's data has, where
upstream's expert acts on its facts.  The real engine accepts
all of them, so the fast engine must match it there too.

Example:
    >>> import random
    >>> game = fuzz_game(random.Random(0), index=0)
    >>> game.id, game.split
    ('fuzz-0', 'fuzz')
"""

from __future__ import annotations

import random

from agentgym_budget.envs.alfworld.game import AlfredGame

__all__ = ["fuzz_game"]

_RECEPTACLES = ("Cabinet", "CounterTop", "Drawer", "Fridge", "Microwave", "SinkBasin", "DiningTable", "Desk", "Shelf", "CoffeeMachine")
_OPENABLE = {"Cabinet", "Drawer", "Fridge", "Microwave"}
_OBJECTS = ("Apple", "Egg", "Mug", "Knife", "ButterKnife", "DeskLamp", "AlarmClock", "Pen", "Bowl", "Potato", "Tomato", "Plate")
_RECEPTACLE_OBJECTS = {"Mug", "Bowl", "Plate"}
_ACTIONS = {
    "cleanable": {"Apple", "Egg", "Mug", "Knife", "ButterKnife", "Bowl", "Potato", "Tomato", "Plate"},
    "heatable": {"Apple", "Egg", "Mug", "Potato", "Tomato", "Plate", "Bowl"},
    "coolable": {"Apple", "Egg", "Mug", "Potato", "Tomato", "Plate", "Bowl"},
    "sliceable": {"Apple", "Potato", "Tomato"},
    "toggleable": {"DeskLamp"},
}
_GOALS = {
    "pick_and_place_simple": "(and (exists (?r - receptacle) (exists (?o - object) (and (inReceptacle ?o ?r) (objectType ?o {obj}Type) (receptacleType ?r {recep}Type)))))",
    "pick_clean_then_place_in_recep": "(and (exists (?r - receptacle) (exists (?o - object) (and (cleanable ?o) (objectType ?o {obj}Type) (receptacleType ?r {recep}Type) (isClean ?o) (inReceptacle ?o ?r)))))",
    "pick_heat_then_place_in_recep": "(and (exists (?r - receptacle) (exists (?o - object) (and (heatable ?o) (objectType ?o {obj}Type) (receptacleType ?r {recep}Type) (isHot ?o) (inReceptacle ?o ?r)))))",
    "pick_cool_then_place_in_recep": "(and (exists (?r - receptacle) (exists (?o - object) (and (coolable ?o) (objectType ?o {obj}Type) (receptacleType ?r {recep}Type) (isCool ?o) (inReceptacle ?o ?r)))))",
    "pick_two_obj_and_place": "(and (exists (?r - receptacle) (exists (?o1 - object) (and (objectType ?o1 {obj}Type) (receptacleType ?r {recep}Type) (inReceptacle ?o1 ?r) (exists (?o2 - object) (and (not (= ?o1 ?o2)) (objectType ?o2 {obj}Type) (receptacleType ?r {recep}Type) (inReceptacle ?o2 ?r)))))))",
    "look_at_obj_in_light": "(and (exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and (objectType ?ot {toggle}Type) (toggleable ?ot) (isToggled ?ot) (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?ot ?r))) (exists (?o - object ?a - agent) (and (objectType ?o {obj}Type) (holds ?a ?o))))",
}


def _mangle(text: str) -> str:
    table = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}
    return "".join(table.get(c, c) for c in text)


def _thor_id(rng: random.Random, kind: str) -> str:
    coords = "|".join(f"{rng.choice('+-')}{rng.randint(0, 3):02d}.{rng.randint(0, 99):02d}" for _ in range(3))
    if kind == "SinkBasin":  # upstream ids: Sink|x|y|z|SinkBasin -> "sinkbasin N"
        return f"Sink|{coords}|SinkBasin"
    return f"{kind}|{coords}"


def fuzz_game(rng: random.Random, index: int = 0) -> AlfredGame:
    """A random game (id ``fuzz-<index>``, split ``fuzz``) drawn from ``rng``.

    Its goal is reachable in Fast Downward's relaxed sense (the real engine fails with
    ``KeyError: 'val1'`` on games whose goal the translator proves unreachable).
    """
    while True:
        game = _draw_game(rng, index)
        if game is not None:
            return game


def _reachable_task(
    rng: random.Random, init: list[tuple[str, ...]], objects: list[tuple[str, str]], receptacles: list[tuple[str, str]]
) -> tuple[str, str, str]:
    """A (task type, object kind, receptacle kind) whose goal can be reached, or ("", "", "")."""
    facts = set(init)
    placed = {f[1] for f in init if f[0] == "inReceptacle"} | {f[2] for f in init if f[0] == "holds"}
    takeable: dict[str, int] = {}
    for o, k in objects:
        if ("pickupable", o) in facts and o in placed:
            takeable[k] = takeable.get(k, 0) + 1
    receptacle_kinds = {k for _, k in receptacles}
    lamp_placed = any(k == "DeskLamp" and o in placed for o, k in objects)
    needs = {"pick_clean_then_place_in_recep": ("cleanable", "SinkBasin"), "pick_heat_then_place_in_recep": ("heatable", "Microwave"),
             "pick_cool_then_place_in_recep": ("coolable", "Fridge")}
    options = []
    for task_type in sorted(_GOALS):
        for obj_kind, count in sorted(takeable.items()):
            if task_type == "look_at_obj_in_light":
                if lamp_placed:
                    options.append((task_type, obj_kind, rng.choice(sorted(receptacle_kinds))))
                continue
            if task_type == "pick_two_obj_and_place" and count < 2:
                continue
            if task_type in needs:
                predicate, appliance = needs[task_type]
                if obj_kind not in _ACTIONS[predicate] or appliance not in receptacle_kinds:
                    continue
            for recep_kind in sorted(receptacle_kinds):
                if ("canContain", f"{recep_kind}Type", f"{obj_kind}Type") in facts:
                    options.append((task_type, obj_kind, recep_kind))
    if not options:
        return ("", "", "")
    task_type = rng.choice(sorted({o[0] for o in options}))
    return rng.choice([o for o in options if o[0] == task_type])


_TARGET_IN_GOAL_TASKS = ("pick_two_obj_and_place", "pick_clean_then_place_in_recep", "pick_heat_then_place_in_recep",
                         "pick_cool_then_place_in_recep")


def _start_target_in_goal_receptacle(
    rng: random.Random, init: list[tuple[str, ...]], objects: list[tuple[str, str]],
    receptacles: list[tuple[str, str]], location_of: dict[str, str], task: tuple[str, str, str],
) -> None:
    """Sometimes move one target object into a goal-type receptacle, or (cool tasks) cold into a fridge.

    Only for tasks where that alone does not win (pick-two needs a second object; heat, cool and
    clean need the state change), so the game still has something to play.
    """
    task_type, obj_kind, recep_kind = task
    if task_type not in _TARGET_IN_GOAL_TASKS or rng.random() >= 0.35:
        return
    in_fridge = task_type == "pick_cool_then_place_in_recep" and recep_kind != "Fridge" and rng.random() < 0.5
    kind = "Fridge" if in_fridge else recep_kind
    targets = [o for o, k in objects if k == obj_kind and any(f[0] == "inReceptacle" and f[1] == o for f in init)]
    homes = [r for r, k in receptacles if k == kind]
    if not targets or not homes or ("canContain", f"{kind}Type", f"{obj_kind}Type") not in init:
        return
    target, home = rng.choice(targets), rng.choice(homes)
    init[:] = [f for f in init if not (f[0] in ("inReceptacle", "objectAtLocation") and f[1] == target)]
    init += [("inReceptacle", target, home), ("objectAtLocation", target, location_of[home])]
    if in_fridge and ("isCool", target) not in init:
        init.append(("isCool", target))


def _draw_game(rng: random.Random, index: int) -> AlfredGame | None:
    receptacle_kinds = rng.sample(_RECEPTACLES, rng.randint(3, len(_RECEPTACLES)))
    receptacles = [(_thor_id(rng, kind), kind) for kind in receptacle_kinds for _ in range(rng.choice((1, 1, 2, 3)))]
    n_locations = max(1, len(receptacles) - rng.randint(0, 3))  # some locations are shared
    locations = [f"loc|{i}|{rng.randint(-9, 9)}|{rng.choice((0, 90, 180, 270))}|30" for i in range(n_locations)]
    location_of = {r: locations[i] if i < n_locations else rng.choice(locations) for i, (r, _) in enumerate(receptacles)}
    agent_location = rng.choice(locations) if rng.random() < 0.3 else "loc|99|0|0|30"
    object_kinds = rng.sample(_OBJECTS, rng.randint(3, 7))
    objects = [(_thor_id(rng, kind), kind) for kind in object_kinds for _ in range(rng.choice((1, 2, 2, 3)))]
    init: list[tuple[str, ...]] = [("atLocation", "agent1", agent_location)]
    init += [("receptacleType", r, f"{k}Type") for r, k in receptacles]
    init += [("receptacleAtLocation", r, location_of[r]) for r, _ in receptacles]
    init += [("openable", r) for r, k in receptacles if k in _OPENABLE]
    init += [("opened", r) for r, k in receptacles if k in _OPENABLE and rng.random() < 0.15]
    init += [("objectType", o, f"{k}Type") for o, k in objects]
    kinds_present = {k for _, k in objects}
    for r_kind in set(receptacle_kinds):
        allowed = [k for k in kinds_present if rng.random() < 0.7 or r_kind in ("CounterTop", "DiningTable")]
        init += [("canContain", f"{r_kind}Type", f"{k}Type") for k in allowed]
    held = None
    for o, k in objects:
        if k != "DeskLamp":
            init.append(("pickupable", o))
        if k in _RECEPTACLE_OBJECTS:
            init.append(("isReceptacleObject", o))
        for predicate, kinds in _ACTIONS.items():
            if k in kinds:
                init.append((predicate, o))
        for state in ("isClean", "isHot", "isCool", "isSliced", "isToggled", "isOn"):
            if rng.random() < 0.05:
                init.append((state, o))
        if held is None and k != "DeskLamp" and rng.random() < 0.08:
            held = o
            init += [("holds", "agent1", o), ("holdsAny", "agent1")]
            continue
        homes = rng.sample(receptacles, 2 if rng.random() < 0.07 else 1)
        for r, _ in homes:
            init.append(("inReceptacle", o, r))
            if rng.random() < 0.8:
                init.append(("objectAtLocation", o, location_of[r]))
    containers = [o for o, k in objects if k in _RECEPTACLE_OBJECTS]
    for o, k in objects:
        if containers and k not in _RECEPTACLE_OBJECTS and rng.random() < 0.1:
            init.append(("inReceptacleObject", o, rng.choice(containers)))

    task_type, obj_kind, recep_kind = _reachable_task(rng, init, objects, receptacles)
    if not task_type:
        return None
    _start_target_in_goal_receptacle(rng, init, objects, receptacles, location_of, (task_type, obj_kind, recep_kind))
    goal = _GOALS[task_type].format(obj=obj_kind, recep=recep_kind, toggle="DeskLamp")
    task = f"{task_type.replace('_', ' ')} {obj_kind.lower()} {recep_kind.lower()}"

    type_names = sorted({k for _, k in objects} | {"DeskLamp", obj_kind})
    lines = ["(define (problem plan_fuzz)", "(:domain alfred)", "(:objects", "agent1 - agent"]
    lines += [f"{k}Type - otype" for k in type_names]
    lines += [f"{k}Type - rtype" for k in sorted(set(receptacle_kinds))]
    lines += [f"{_mangle(o)} - object" for o, _ in objects]
    lines += [f"{_mangle(r)} - receptacle" for r, _ in receptacles]
    lines += [f"{_mangle(loc)} - location" for loc in sorted(set(locations) | {agent_location})]
    lines += [")", "(:init"]
    lines += ["(" + " ".join(_mangle(part) for part in fact) + ")" for fact in init]
    lines += [")", f"(:goal {goal})", ")"]
    return AlfredGame(
        id=f"fuzz-{index}",
        split="fuzz",
        task_type=task_type,
        goal=task,
        pddl_problem="\n".join(lines),
        object_target=obj_kind.lower(),
        parent_target=recep_kind.lower(),
        toggle_target="desklamp" if task_type == "look_at_obj_in_light" else "",
    )

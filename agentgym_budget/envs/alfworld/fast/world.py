"""The static part of an ALFWorld game, compiled once from its PDDL problem.

:func:`compile_world` reads the problem the way the real engine does (Fast Downward's
translator + TextWorld's ``PddlState`` + ALFWorld's ``AlfredDemangler``) and keeps what the
fast engine needs: display names, receptacle locations, the static predicates as sets, and
the initial values of the fluents.

Naming follows ``alfworld.agents.utils.misc.Demangler``: the entities are every name that
occurs in an initial fact; their (mangled, lower-cased) ids are sorted, and per class name
(the text before the first ``_bar_``, plus ``basin`` when the id contains ``basin``) the
numbers ``1..n`` are handed out with ``list.pop()`` — the alphabetically first id gets the
highest number.  Names without ``_bar_`` (``agent1``, ``appletype``) get a trailing space.

Example:
    >>> demangle(["apple_bar__plus_00_dot_10", "apple_bar__minus_00_dot_20", "agent1"])
    {'agent1': 'agent1 ', 'apple_bar__minus_00_dot_20': 'apple 2', 'apple_bar__plus_00_dot_10': 'apple 1'}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agentgym_budget.envs.alfworld.fast.pddl import Fact, GoalChecker, PddlSyntaxError, parse_problem

__all__ = ["FLUENT_PREDICATES", "UnsupportedGameError", "World", "compile_world", "demangle"]


class UnsupportedGameError(ValueError):
    """The game is valid for the real engine but uses something the fast engine does not model
    (another domain or grammar, several agents, a receptacle at two locations, ...).
    Play it with ``engine="textworld"``."""


#: Parameter types of the ``alfred.pddl`` predicates (``object`` is the root type: anything).
PREDICATE_TYPES: dict[str, tuple[str, ...]] = {
    "atlocation": ("agent", "location"),
    "receptacleatlocation": ("receptacle", "location"),
    "objectatlocation": ("object", "location"),
    "openable": ("receptacle",),
    "opened": ("receptacle",),
    "inreceptacle": ("object", "receptacle"),
    "isreceptacleobject": ("object",),
    "inreceptacleobject": ("object", "object"),
    "isreceptacleobjectfull": ("object",),
    "wasinreceptacle": ("object", "receptacle"),
    "checked": ("receptacle",),
    "examined": ("location",),
    "receptacletype": ("receptacle", "rtype"),
    "cancontain": ("rtype", "otype"),
    "objecttype": ("object", "otype"),
    "holds": ("agent", "object"),
    "holdsany": ("agent",),
    "holdsanyreceptacleobject": ("agent",),
    "full": ("receptacle",),
    **{p: ("object",) for p in (
        "isclean", "cleanable", "ishot", "heatable", "iscool", "coolable", "pickupable",
        "moveable", "toggleable", "ison", "istoggled", "sliceable", "issliced",
    )},
}
#: Predicates some action changes (the others are static).
FLUENT_PREDICATES = frozenset({
    "atlocation", "objectatlocation", "opened", "inreceptacle", "holds", "holdsany",
    "isclean", "ishot", "iscool", "ison", "istoggled", "issliced", "checked",
})
_DEMANGLE = (("_bar_", "|"), ("_minus_", "-"), ("_plus_", "+"), ("_dot_", "."), ("_comma_", ","))


def demangle(ids: Iterable[str]) -> dict[str, str]:
    """Display names of entity ids, exactly as ALFWorld's ``Demangler`` (without shuffling)."""
    ordered = sorted(ids)
    counts: Counter[str] = Counter()
    for entity in ordered:
        parts = entity.split("_bar_", 1)
        if len(parts) > 1:
            counts[parts[0] + ("basin" if "basin" in entity else "")] += 1
    numbers = {name: list(range(1, count + 1)) for name, count in counts.items()}
    names: dict[str, str] = {}
    for entity in ordered:
        text = entity
        for old, new in _DEMANGLE:
            text = text.replace(old, new)
        parts = text.split("|", 1)
        if len(parts) == 1:
            names[entity] = f"{text} "
            continue
        name = parts[0] + ("basin" if "basin" in entity else "")
        if name not in numbers:  # the real Demangler fails with a KeyError here
            raise UnsupportedGameError(f"entity id {entity!r} cannot be named by ALFWorld's Demangler")
        names[entity] = f"{name} {numbers[name].pop()}"
    return names


@dataclass(frozen=True, eq=False)
class World:
    """Everything about a game that no action changes, plus the initial fluents."""

    task: str
    names: dict[str, str]
    agent: str
    start_location: str
    receptacle_location: dict[str, str]
    #: receptacles by location, sorted by id (the order TextWorld lists them in).
    receptacles_at: dict[str, tuple[str, ...]]
    #: all (receptacle, location) facts sorted — the intro's "you see ..." order.
    receptacles_sorted: tuple[str, ...]
    #: location -> ("go to <r>", r) for every receptacle elsewhere (a move to where the agent
    #: already is has no effect, and Fast Downward drops effect-less operators).
    goto_commands: dict[str, tuple[tuple[str, str], ...]]
    openable: frozenset[str]
    pickupable: frozenset[str]
    cleanable: frozenset[str]
    heatable: frozenset[str]
    coolable: frozenset[str]
    toggleable: frozenset[str]
    sliceable: frozenset[str]
    receptacle_objects: frozenset[str]
    sinks: frozenset[str]
    microwaves: frozenset[str]
    fridges: frozenset[str]
    knives: frozenset[str]
    #: (object, receptacle) pairs allowed by canContain(receptacleType, objectType).
    object_types: dict[str, frozenset[str]]
    receptacle_types: dict[str, frozenset[str]]
    can_contain: frozenset[tuple[str, str]]
    #: inReceptacleObject contents of each movable receptacle (static), sorted by id.
    object_contents: dict[str, tuple[str, ...]]
    static_facts: dict[str, frozenset[tuple[str, ...]]]
    initial_fluents: dict[str, frozenset[tuple[str, ...]]]
    goal: GoalChecker
    _index: dict[tuple[str, tuple[bool, ...]], dict[tuple[str, ...], list[tuple[str, ...]]]] = field(
        default_factory=dict, repr=False
    )
    #: engine-side caches (the initial state, ready to copy), filled on first use.
    cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def static_match(self, predicate: str, pattern: tuple[str | None, ...]) -> list[tuple[str, ...]]:
        """Static facts of ``predicate`` matching ``pattern`` (``None`` = any), sorted."""
        mask = tuple(p is not None for p in pattern)
        index = self._index.get((predicate, mask))
        if index is None:
            index = {}
            for args in sorted(self.static_facts.get(predicate, ())):
                if len(args) == len(mask):
                    index.setdefault(tuple(a for a, bound in zip(args, mask) if bound), []).append(args)
            self._index[(predicate, mask)] = index
        return index.get(tuple(p for p in pattern if p is not None), [])

    def can_put(self, obj: str, receptacle: str) -> bool:
        """``objectType(o, ot) & receptacleType(r, rt) & canContain(rt, ot)`` for some ot, rt."""
        can_contain = self.can_contain
        return any(
            (rt, ot) in can_contain
            for ot in self.object_types.get(obj, ())
            for rt in self.receptacle_types.get(receptacle, ())
        )


def compile_world(pddl_problem: str, task: str) -> World:
    """Compile a PDDL problem (``game.tw-pddl``'s ``pddl_problem``) and its task sentence."""
    try:
        problem = parse_problem(pddl_problem)
    except PddlSyntaxError as error:
        raise UnsupportedGameError(f"cannot read the PDDL problem: {error}") from error
    types = problem.types
    by_predicate: dict[str, set[tuple[str, ...]]] = {}
    for fact in sorted(problem.init):
        _check_fact(fact, types)
        by_predicate.setdefault(fact[0], set()).add(fact[1:])

    def unary(predicate: str) -> frozenset[str]:
        return frozenset(args[0] for args in by_predicate.get(predicate, ()))

    def pairs(predicate: str) -> set[tuple[str, ...]]:
        return by_predicate.get(predicate, set())

    agents = sorted(name for name, type_name in types.items() if type_name == "agent")
    if len(agents) != 1:
        raise UnsupportedGameError(f"the fast engine models exactly one agent, the problem declares {agents}")
    agent = agents[0]
    agent_locations = sorted(loc for who, loc in pairs("atlocation") if who == agent)
    if len(agent_locations) != 1:
        raise UnsupportedGameError(f"the agent must start at exactly one location, found {agent_locations}")

    receptacle_location: dict[str, str] = {}
    for receptacle, location in sorted(pairs("receptacleatlocation")):
        if receptacle in receptacle_location:
            raise UnsupportedGameError(f"receptacle {receptacle!r} is at two locations")
        receptacle_location[receptacle] = location
    receptacles_at: dict[str, list[str]] = {}
    for receptacle in sorted(receptacle_location):
        receptacles_at.setdefault(receptacle_location[receptacle], []).append(receptacle)

    def of_type(type_constant: str, predicate: str) -> frozenset[str]:
        return frozenset(name for name, t in pairs(predicate) if t == type_constant)

    object_types: dict[str, set[str]] = {}
    for obj, otype in pairs("objecttype"):
        object_types.setdefault(obj, set()).add(otype)
    receptacle_types: dict[str, set[str]] = {}
    for receptacle, rtype in pairs("receptacletype"):
        receptacle_types.setdefault(receptacle, set()).add(rtype)
    object_contents: dict[str, list[str]] = {}
    for inner, outer in sorted(pairs("inreceptacleobject")):
        if inner != outer:  # TextWorld never binds two placeholders to one variable
            object_contents.setdefault(outer, []).append(inner)

    entities = {arg for fact in problem.init for arg in fact[1:]}
    names = demangle(entities)
    receptacles_sorted = tuple(sorted(receptacle_location))
    goto_commands = {
        location: tuple(("go to " + names[r], r) for r in receptacles_sorted if receptacle_location[r] != location)
        for location in {agent_locations[0], *receptacle_location.values()}
    }
    return World(
        task=task,
        names=names,
        agent=agent,
        start_location=agent_locations[0],
        receptacle_location=receptacle_location,
        receptacles_at={loc: tuple(rs) for loc, rs in receptacles_at.items()},
        receptacles_sorted=receptacles_sorted,
        goto_commands=goto_commands,
        openable=unary("openable"),
        pickupable=unary("pickupable"),
        cleanable=unary("cleanable"),
        heatable=unary("heatable"),
        coolable=unary("coolable"),
        toggleable=unary("toggleable"),
        sliceable=unary("sliceable"),
        receptacle_objects=unary("isreceptacleobject"),
        sinks=of_type("sinkbasintype", "receptacletype"),
        microwaves=of_type("microwavetype", "receptacletype"),
        fridges=of_type("fridgetype", "receptacletype"),
        knives=of_type("knifetype", "objecttype") | of_type("butterknifetype", "objecttype"),
        object_types={k: frozenset(v) for k, v in object_types.items()},
        receptacle_types={k: frozenset(v) for k, v in receptacle_types.items()},
        can_contain=frozenset(pairs("cancontain")),  # type: ignore[arg-type]
        object_contents={k: tuple(v) for k, v in object_contents.items()},
        static_facts={p: frozenset(v) for p, v in by_predicate.items() if p not in FLUENT_PREDICATES},
        initial_fluents={p: frozenset(v) for p, v in by_predicate.items() if p in FLUENT_PREDICATES},
        goal=GoalChecker(problem.goal, types),
    )


def _check_fact(fact: Fact, types: dict[str, str]) -> None:
    predicate, args = fact[0], fact[1:]
    signature = PREDICATE_TYPES.get(predicate)
    if signature is None:
        raise UnsupportedGameError(f"initial fact {fact!r} uses a predicate alfred.pddl does not declare")
    if len(signature) != len(args):
        raise UnsupportedGameError(f"initial fact {fact!r} has {len(args)} arguments, {predicate} takes {len(signature)}")
    for wanted, arg in zip(signature, args):
        if wanted != "object" and types[arg] != wanted:
            raise UnsupportedGameError(f"initial fact {fact!r}: {arg!r} is a {types[arg]}, not a {wanted}")

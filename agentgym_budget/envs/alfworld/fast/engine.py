"""``FastAlfredEngine``: ALFWorld's game semantics in plain Python, step-for-step like the real engine.

The real engine (TextWorld ``PddlEnv`` over Fast Downward, wrapped in ALFWorld's
``AlfredDemangler``) grounds the PDDL domain, lists the applicable operators each step and
derives every text from the grammar.  This engine applies the same ``alfred.pddl`` actions
directly to sets and dicts and writes the same texts (:mod:`~agentgym_budget.envs.alfworld.fast.text`), including what the real
engine does that the domain file does not say:

* ``examine <object>`` is admissible only for the held object: the domain's
  ``(exists (?l - location, ?r - receptacle) ...)`` parses ``location,`` as a type with no
  objects, so the other branch never grounds;
* going to a receptacle at the agent's own location is not admissible (Fast Downward drops
  operators with no effect);
* ``Next to it, you see ...`` lists objects at the location whose ``not_inreceptacle`` fact
  TextWorld holds, i.e. objects once taken from another receptacle at that location;
* admissible commands are ``sorted(set(...))``; a command is matched after ``strip()``,
  exactly; anything else is answered ``"Nothing happens."`` without changing the state.

Games are compiled once (:func:`~.world.compile_world`, cached by problem text) so ``reset``
only copies the initial fluents.

Example:
    >>> from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
    >>> from agentgym_budget.envs.alfworld.game import load_games
    >>> engine = FastAlfredEngine()
    >>> first = engine.reset(load_games("valid_seen")[0])
    >>> first.observation.startswith("-= Welcome to TextWorld, ALFRED! =-")
    True
    >>> engine.step("  look  ").observation.startswith("You are in the middle of a room.")
    True
    >>> engine.step("Look").observation
    'Nothing happens.'
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from agentgym_budget.envs.alfworld.engine import EngineStep
from agentgym_budget.envs.alfworld.fast import text
from agentgym_budget.envs.alfworld.fast.world import UnsupportedGameError, World, compile_world

__all__ = ["FastAlfredEngine", "UnsupportedGameError", "clear_world_cache", "load_world"]

#: An applicable action: (kind, *entity ids), e.g. ("take", apple, countertop).
_Action = tuple[Any, ...]
#: Compiled games kept in memory (~220 KiB each with its initial state; compiling one
#: again costs ~5 ms).
_WORLD_CACHE_SIZE = 256


class FastAlfredEngine:
    """A pure-Python ALFWorld engine (the ``"fast"`` engine of :func:`~..engine.make_engine`).

    ``reset`` accepts an :class:`~agentgym_budget.envs.alfworld.game.AlfredGame`, a
    ``game.tw-pddl`` dict, or the path of a ``game.tw-pddl`` file.  :meth:`clone` copies the
    current state (cheap), e.g. to roll an expert forward.
    """

    def __init__(self) -> None:
        self._world: World | None = None
        self._actions: dict[str, _Action] = {}
        self._admissible: list[str] = []
        #: What the state but the agent's location gives, by (what, where): the actions at a
        #: location, the text on arriving at a receptacle, the look around a location.  Valid while
        #: only the location changes; replaced (never cleared: clones and resets share it) on any
        #: other change.  Rollouts walk from receptacle to receptacle, and an expert's rollouts
        #: (each on a clone) revisit the same places in the same state again and again.
        self._memo: dict[tuple[str, str], Any] = {}
        self._won = False
        self._location = ""
        self._opened: set[str] = set()
        self._contents: dict[str, set[str]] = {}
        self._containers: dict[str, set[str]] = {}
        self._in: set[tuple[str, ...]] = set()
        self._objects_at: dict[str, set[str]] = {}
        self._held: set[str] = set()
        self._holds_any = False
        self._clean: set[str] = set()
        self._hot: set[str] = set()
        self._cool: set[str] = set()
        self._on: set[str] = set()
        self._toggled: set[str] = set()
        self._sliced: set[str] = set()
        self._taken_from: set[tuple[str, str]] = set()
        self._intro_text = ""

    # -- the engine protocol ------------------------------------------------------------
    def reset(self, game: Any) -> EngineStep:
        world = load_world(game)
        initial = world.cache.get("initial")
        if initial is None:
            initial = world.cache["initial"] = FastAlfredEngine._initial_state(world)
        self.__dict__.update(initial.clone().__dict__)
        return EngineStep(initial._intro_text, list(self._admissible), self._won)

    @staticmethod
    def _initial_state(world: World) -> FastAlfredEngine:
        """An engine in the game's initial state (copied by every ``reset``)."""
        engine = FastAlfredEngine()
        engine._world = world
        fluents = world.initial_fluents
        engine._location = world.start_location
        engine._opened = {args[0] for args in fluents.get("opened", ())}
        engine._contents = {}
        engine._containers = {}
        engine._in = set(fluents.get("inreceptacle", ()))
        for obj, receptacle in engine._in:
            engine._contents.setdefault(receptacle, set()).add(obj)
            engine._containers.setdefault(obj, set()).add(receptacle)
        engine._objects_at = {}
        for obj, location in fluents.get("objectatlocation", ()):
            engine._objects_at.setdefault(location, set()).add(obj)
        engine._held = {obj for who, obj in fluents.get("holds", ()) if who == world.agent}
        engine._holds_any = any(who == world.agent for (who,) in fluents.get("holdsany", ()))
        engine._clean = {args[0] for args in fluents.get("isclean", ())}
        engine._hot = {args[0] for args in fluents.get("ishot", ())}
        engine._cool = {args[0] for args in fluents.get("iscool", ())}
        engine._on = {args[0] for args in fluents.get("ison", ())}
        engine._toggled = {args[0] for args in fluents.get("istoggled", ())}
        engine._sliced = {args[0] for args in fluents.get("issliced", ())}
        #: TextWorld-only ``not_inreceptacle(o, r)`` facts (made by ``take``, undone by ``move``).
        engine._taken_from = set()
        engine._update()
        engine._intro_text = engine._intro()
        return engine

    def step(self, command: str) -> EngineStep:
        if self._world is None:
            raise RuntimeError("FastAlfredEngine.step() called before reset()")
        action = self._actions.get(command.strip())
        if action is None:
            return EngineStep(text.NOTHING_HAPPENS, list(self._admissible), self._won)
        kind = action[0]
        if kind != "goto" and kind in _CHANGES:
            self._memo = {}  # before the change: what it computes is then stored for the new state
        feedback = _APPLY[kind](self, *action[1:])
        if kind in _CHANGES_ADMISSIBLE:
            self._refresh_actions()
        if not _CHANGES.get(kind, frozenset()).isdisjoint(self.world.goal.predicates):
            self._won = self.world.goal.holds(self)
        return EngineStep(feedback, list(self._admissible), self._won)

    def close(self) -> None:
        self._world = None

    def clone(self) -> FastAlfredEngine:
        """An independent copy of this engine in its current state."""
        twin = FastAlfredEngine.__new__(FastAlfredEngine)
        twin.__dict__.update(self.__dict__)
        for name in ("_opened", "_held", "_clean", "_hot", "_cool", "_on", "_toggled", "_sliced", "_taken_from", "_in"):
            setattr(twin, name, set(getattr(self, name)))
        for name in ("_contents", "_containers", "_objects_at"):
            setattr(twin, name, {k: set(v) for k, v in getattr(self, name).items()})
        twin._actions = dict(self._actions)
        twin._admissible = list(self._admissible)
        return twin

    # -- extras -------------------------------------------------------------------------
    @property
    def world(self) -> World:
        if self._world is None:
            raise RuntimeError("no game loaded; call reset(game) first")
        return self._world

    @property
    def admissible_commands(self) -> list[str]:
        return list(self._admissible)

    @property
    def won(self) -> bool:
        return self._won

    def state_key(self) -> str:
        """The game state as one string: the agent's location and what it holds, then a digest of every
        other fluent (receptacles opened, objects' places, clean/hot/cool/on/toggled/sliced, taken-from).
        Equal states give equal keys (GiGPO's anchor states, ``info["state_key"]``)."""
        fluents = (sorted(self._opened), sorted(self._in), sorted(self._clean), sorted(self._hot),
                   sorted(self._cool), sorted(self._on), sorted(self._toggled), sorted(self._sliced),
                   sorted(self._taken_from))
        digest = hashlib.blake2b(repr(fluents).encode(), digest_size=8).hexdigest()
        return f"at {self._location}; holding {','.join(sorted(self._held)) or 'nothing'}; {digest}"

    def facts(self, predicate: str) -> frozenset[tuple[str, ...]] | set[tuple[str, ...]]:
        """The current facts of ``predicate`` as argument tuples (as Fast Downward holds them)."""
        world = self.world
        getter = _FLUENT_FACTS.get(predicate)
        if getter is not None:
            return getter(self)
        return world.static_facts.get(predicate, frozenset())

    def has(self, predicate: str, args: tuple[str, ...]) -> bool:
        """Whether the fact ``predicate(*args)`` holds now (the goal checker's look-up)."""
        check = _HAS.get(predicate)
        if check is not None:
            return check(self, args)
        return args in self.world.static_facts.get(predicate, ())

    def match(self, predicate: str, pattern: tuple[str | None, ...]) -> list[tuple[str, ...]]:
        """The current facts of ``predicate`` whose arguments match ``pattern`` (``None`` = any)."""
        if predicate == "inreceptacle" and len(pattern) == 2:
            obj, receptacle = pattern
            if obj is not None and receptacle is None:
                return [(obj, r) for r in self._containers.get(obj, ())]
            if receptacle is not None and obj is None:
                return [(o, receptacle) for o in self._contents.get(receptacle, ())]
        if predicate not in _FLUENT_FACTS:
            return self.world.static_match(predicate, pattern)
        return [
            args
            for args in self.facts(predicate)
            if len(args) == len(pattern) and all(p is None or p == a for p, a in zip(pattern, args))
        ]

    # -- state update -------------------------------------------------------------------
    def _update(self) -> None:
        self._memo = {}
        self._refresh_actions()
        self._won = self.world.goal.holds(self)

    def _refresh_actions(self) -> None:
        """The applicable actions in the current state (both only ever replaced, never changed in place)."""
        self._actions, self._admissible = self._memoised(("actions", self._location), self._actions_and_commands)

    def _actions_and_commands(self) -> tuple[dict[str, _Action], list[str]]:
        actions = self._applicable_actions()
        return actions, sorted(actions)

    def _memoised(self, key: tuple[str, str], compute: Callable[[], Any]) -> Any:
        """``compute()``, a function of the state but the location, remembered under ``key`` (see ``_memo``)."""
        value = self._memo.get(key)
        if value is None:
            value = self._memo[key] = compute()
        return value

    def _applicable_actions(self) -> dict[str, _Action]:
        """Command -> action for every applicable operator (first grounding wins, like TextWorld)."""
        world = self.world
        names = world.names
        here = world.receptacles_at.get(self._location, ())
        actions: dict[str, _Action] = {"help": ("help",), "inventory": ("inventory",), "look": ("look",)}
        for command, receptacle in world.goto_commands[self._location]:
            actions[command] = ("goto", receptacle)
        for r in here:
            rname = names[r]
            actions.setdefault("examine " + rname, ("examine_receptacle", r))
            accessible = True
            if r in world.openable:
                if r in self._opened:
                    actions["close " + rname] = ("close", r)
                else:
                    actions["open " + rname] = ("open", r)
                    accessible = False
            contents = self._contents.get(r, ())
            if accessible and not self._holds_any:
                for o in contents:
                    if o in world.pickupable:
                        actions.setdefault(f"take {names[o]} from {rname}", ("take", o, r))
            for o in contents:
                if o in world.toggleable:
                    actions.setdefault("use " + names[o], ("use", o))
            for o in self._held:
                oname = names[o]
                if accessible and world.can_put(o, r):
                    actions.setdefault(f"move {oname} to {rname}", ("move", o, r))
                if o in world.cleanable and r in world.sinks:
                    actions.setdefault(f"clean {oname} with {rname}", ("clean", o, r))
                if o in world.heatable and r in world.microwaves:
                    actions.setdefault(f"heat {oname} with {rname}", ("heat", o, r))
                if o in world.coolable and r in world.fridges:
                    actions.setdefault(f"cool {oname} with {rname}", ("cool", o, r))
        for o in self._held:
            actions.setdefault("examine " + names[o], ("examine_object", o))
        knives = [k for k in self._held if k in world.knives]
        if knives:
            for co in self._objects_at.get(self._location, ()):
                if co in world.sliceable:
                    for ko in knives:
                        actions.setdefault(f"slice {names[co]} with {names[ko]}", ("slice", co, ko))
        return actions

    # -- texts --------------------------------------------------------------------------
    def _a(self, entities: list[str]) -> list[str]:
        names = self.world.names
        return ["a " + names[e] for e in entities]

    def _receptacle_text(self, r: str) -> str:
        """``examineReceptacle.feedback``."""
        world = self.world
        name = world.names[r]
        if r in world.openable:
            if r not in self._opened:
                return f"The {name} is closed."
            return f"The {name} is open. In it, you see {text.listing(self._a(sorted(self._contents.get(r, ()))))}."
        return f"On the {name}, you see {text.listing(self._a(sorted(self._contents.get(r, ()))))}."

    def _look(self, with_appliances: bool) -> str:
        """``look.feedback`` at the agent's location (the intro lists every receptacle)."""
        world = self.world
        here = world.receptacles_at.get(self._location, ())
        next_to = [
            o
            for o in sorted(self._objects_at.get(self._location, ()))
            for r in here
            if (o, r) in self._taken_from
        ]
        appliances = self._a(list(world.receptacles_sorted)) if with_appliances else []
        return text.look_text([world.names[r] for r in here], self._a(next_to), appliances)

    def _intro(self) -> str:
        return f"{text.INTRO_HEADER}{self._look(with_appliances=True)}\n\nYour task is to: {self.world.task}."

    # -- actions (return the feedback, derived on the post-action state) ----------------
    def _do_goto(self, r: str) -> str:
        self._location = self.world.receptacle_location[r]
        return self._memoised(("arrive", r), lambda: f"You arrive at {self.world.names[r]}. {self._receptacle_text(r)}")

    def _do_open(self, r: str) -> str:
        self._opened.add(r)
        return f"You open the {self.world.names[r]}. {self._receptacle_text(r)}"

    def _do_close(self, r: str) -> str:
        self._opened.discard(r)
        return f"You close the {self.world.names[r]}."

    def _do_take(self, o: str, r: str) -> str:
        self._contents[r].discard(o)
        self._containers[o].discard(r)
        self._in.discard((o, r))
        self._held.add(o)
        self._holds_any = True
        at_here = self._objects_at.get(self._location)
        if at_here is not None:
            at_here.discard(o)
        self._taken_from.add((o, r))
        names = self.world.names
        return f"You pick up the {names[o]} from the {names[r]}."

    def _do_move(self, o: str, r: str) -> str:
        self._contents.setdefault(r, set()).add(o)
        self._containers.setdefault(o, set()).add(r)
        self._in.add((o, r))
        self._objects_at.setdefault(self._location, set()).add(o)
        self._held.discard(o)
        self._holds_any = False
        self._taken_from.discard((o, r))
        names = self.world.names
        return f"You move the {names[o]} to the {names[r]}."

    def _do_use(self, o: str) -> str:
        self._toggled.add(o)
        if o in self._on:
            self._on.discard(o)
        else:
            self._on.add(o)
        return f"You turn on the {self.world.names[o]}."  # toggleObject.feedback: istoggled now holds

    def _do_clean(self, o: str, r: str) -> str:
        self._clean.add(o)
        return f"You clean the {self.world.names[o]} using the {self.world.names[r]}."

    def _do_heat(self, o: str, r: str) -> str:
        self._hot.add(o)
        self._cool.discard(o)
        return f"You heat the {self.world.names[o]} using the {self.world.names[r]}."

    def _do_cool(self, o: str, r: str) -> str:
        self._cool.add(o)
        self._hot.discard(o)
        return f"You cool the {self.world.names[o]} using the {self.world.names[r]}."

    def _do_slice(self, co: str, ko: str) -> str:
        self._sliced.add(co)
        return f"You sliced the {self.world.names[co]} with the {self.world.names[ko]}."

    def _do_examine_receptacle(self, r: str) -> str:
        return self._receptacle_text(r)

    def _do_examine_object(self, o: str) -> str:
        world = self.world
        return text.examine_object_text(
            world.names[o],
            receptacle_object=o in world.receptacle_objects,
            contents=self._a(list(world.object_contents.get(o, ()))),
            clean=o in self._clean,
            hot=o in self._hot,
            cool=o in self._cool,
            sliced=o in self._sliced,
            toggleable=o in world.toggleable,
            toggled=o in self._toggled,
            sliceable=o in world.sliceable,
        )

    def _do_look(self) -> str:
        return self._memoised(("look", self._location), lambda: self._look(with_appliances=False))

    def _do_inventory(self) -> str:
        if not self._holds_any:
            return "You are not carrying anything."
        return f"You are carrying: {text.listing(self._a(sorted(self._held)))}."

    def _do_help(self) -> str:
        return text.HELP_TEXT


_APPLY: dict[str, Callable[..., str]] = {
    name[len("_do_"):]: function for name, function in vars(FastAlfredEngine).items() if name.startswith("_do_")
}

#: The fluents each action changes ("look", "examine", "inventory" and "help" only set
#: Fast Downward's unobservable ``checked`` facts): the goal is re-checked only when one of
#: its predicates changed.
_CHANGES: dict[str, frozenset[str]] = {
    "goto": frozenset({"atlocation"}),
    "open": frozenset({"opened"}),
    "close": frozenset({"opened"}),
    "take": frozenset({"inreceptacle", "holds", "holdsany", "objectatlocation"}),
    "move": frozenset({"inreceptacle", "holds", "holdsany", "objectatlocation"}),
    "use": frozenset({"istoggled", "ison"}),
    "clean": frozenset({"isclean"}),
    "heat": frozenset({"ishot", "iscool"}),
    "cool": frozenset({"iscool", "ishot"}),
    "slice": frozenset({"issliced"}),
}
#: Actions after which the admissible commands can differ (no precondition reads the
#: isClean/isHot/isCool/isSliced/isToggled/isOn facts the other actions change).
_CHANGES_ADMISSIBLE = frozenset({"goto", "open", "close", "take", "move"})

_FLUENT_FACTS: dict[str, Callable[[FastAlfredEngine], set[tuple[str, ...]]]] = {
    "atlocation": lambda e: {(e.world.agent, e._location)},
    "inreceptacle": lambda e: e._in,
    "objectatlocation": lambda e: {(o, loc) for loc, objects in e._objects_at.items() for o in objects},
    "opened": lambda e: {(r,) for r in e._opened},
    "holds": lambda e: {(e.world.agent, o) for o in e._held},
    "holdsany": lambda e: {(e.world.agent,)} if e._holds_any else set(),
    "isclean": lambda e: {(o,) for o in e._clean},
    "ishot": lambda e: {(o,) for o in e._hot},
    "iscool": lambda e: {(o,) for o in e._cool},
    "ison": lambda e: {(o,) for o in e._on},
    "istoggled": lambda e: {(o,) for o in e._toggled},
    "issliced": lambda e: {(o,) for o in e._sliced},
    "checked": lambda e: set(),
}


# -- loading games -------------------------------------------------------------------------
def load_world(game: Any) -> World:
    """The compiled :class:`World` of an ``AlfredGame``, a ``game.tw-pddl`` dict or its path."""
    if isinstance(game, (str, os.PathLike)):
        with open(game, encoding="utf-8") as handle:
            game = json.load(handle)
    if isinstance(game, Mapping):
        missing = {"pddl_domain", "grammar", "pddl_problem"} - set(game)
        if missing:
            raise ValueError(f"a game.tw-pddl dict needs the keys {sorted(missing)}")
        from agentgym_budget.envs.alfworld.fast.gamefile import task_from_game_texts

        task = task_from_game_texts(game["pddl_domain"], game["grammar"])
        return _compile_cached(game["pddl_problem"], task)
    pddl_problem = getattr(game, "pddl_problem", None)
    goal = getattr(game, "goal", None)
    if not isinstance(pddl_problem, str) or not isinstance(goal, str):
        raise TypeError(
            "FastAlfredEngine.reset() takes an AlfredGame, a game.tw-pddl dict or its path; "
            f"got {type(game).__name__}"
        )
    return _compile_cached(pddl_problem, goal)


_HAS: dict[str, Callable[[FastAlfredEngine, tuple[str, ...]], bool]] = {
    "inreceptacle": lambda e, args: args in e._in,
    "atlocation": lambda e, args: args == (e.world.agent, e._location),
    "holds": lambda e, args: len(args) == 2 and args[0] == e.world.agent and args[1] in e._held,
    "holdsany": lambda e, args: e._holds_any and args == (e.world.agent,),
    "opened": lambda e, args: args[0] in e._opened,
    "objectatlocation": lambda e, args: len(args) == 2 and args[0] in e._objects_at.get(args[1], ()),
    "isclean": lambda e, args: args[0] in e._clean,
    "ishot": lambda e, args: args[0] in e._hot,
    "iscool": lambda e, args: args[0] in e._cool,
    "ison": lambda e, args: args[0] in e._on,
    "istoggled": lambda e, args: args[0] in e._toggled,
    "issliced": lambda e, args: args[0] in e._sliced,
    "checked": lambda e, args: False,
}


@functools.lru_cache(maxsize=_WORLD_CACHE_SIZE)
def _compile_cached(pddl_problem: str, task: str) -> World:
    return compile_world(pddl_problem, task)


def clear_world_cache() -> None:
    """Forget the compiled worlds (so that the next reset of each game compiles it: a cold start)."""
    _compile_cached.cache_clear()


"""ALFWorld's handcoded expert, ported to work from observations and admissible commands only.

This is upstream ALFWorld's ``HandCodedTWAgent`` (``alfworld/agents/expert/handcoded_expert.py``
and ``handcoded_expert_tw.py``, alfworld 0.4.2, MIT licence, (c) 2020 Mohit Shridhar and
others), driven the way ``AlfredExpert`` drives it.  Two behaviours (:data:`EXPERT_TYPES`):

* ``"upstream"`` (:class:`~agentgym_budget.envs.alfworld.env.ALFWorldEnv`'s default): upstream's
  next action exactly, bugs included, so results compare with published numbers.  Checked action for action against upstream's
  ``AlfredExpert`` on the real engine (``benchmarks/alfworld_equivalence.py``).
* ``"fixed"``: upstream's bookkeeping looks for ``put`` in the last command, but ALFWorld
  >= 0.4 (json_2.1.2 grammar) says ``move X to R``, so upstream's expert never drops a placed
  object from its inventory and then tries to move the first object again in pick-two tasks;
  ``"fixed"`` (this class's default) drops it.  It also starts from no facts (objects already lying in a
  goal-type receptacle are taken out and put back, where upstream examines them again and again), and the
  env keeps its action through turns the game refuses.  It wins every bundled game, so the env always
  runs it as the reference behind ``expert_plan_length`` (see :class:`~agentgym_budget.envs.alfworld.env.ALFWorldEnv`).

What stays different from upstream in both modes:

* **No PDDL facts at run time.**  Upstream reads three kinds of facts from TextWorld: ``holds
  agent X``, ``ishot/iscool/isclean X`` and ``inreceptacle X R``.  Here they start from
  ``start_facts`` (the game's initial state, :func:`start_facts`; upstream mode) and are
  tracked from the engine's feedback (``You pick up the X from the R.``, ``You move the X to
  the R.``, ``You heat/cool/clean the X using the R.``).  So the expert runs on any engine.
* **Seeded randomness.**  Upstream calls the global ``random.choice``; here an injected
  ``random.Random`` (seeded per episode by the env), so the same observations give the same
  actions on every engine.
* Where upstream's ``AlfredExpert`` raises (timeout after 200 steps, subgoals exhausted, an
  empty ``random.choice``) and ends the run, :meth:`HandCodedExpert.reported_action` says ``"look"``.
* Sliced-object tasks (``task_params["object_sliced"]``): upstream's released games have none
  (``collect_game_files`` skips ``Sliced`` dirs) and its six policies no slicing subgoal, only
  the ``slice`` branch of ``BasePolicy.act`` (ported as is: ``examine`` the receptacle when
  nothing is visible, else ``slice <random target> with <first held object>``).  Here the
  subgoals of a sliced task are ALFRED's (``"fixed"`` only): find a knife, take it, find the object,
  slice it, then the task's own subgoals, taking a sliced instance; the knife is put down right
  after slicing (on the receptacle there, else where it was taken from).  ``"upstream"`` plays
  a sliced task exactly as upstream's expert would (as its plain twin, never slicing), so it
  loses them.
* Upstream picks "the" already placed object of a pick-two task from TextWorld's fact set,
  whose order depends on Python's hash seed; here: the start facts in name order, then the
  placement order.

Like ``AlfredExpert``: at reset the expert only reads the intro (its action is ``"look"``);
after every step it proposes an action, which is reported only when admissible (else ``"look"``).

Example:
    >>> import random
    >>> from agentgym_budget.envs.alfworld.expert import HandCodedExpert
    >>> from agentgym_budget.envs.alfworld.engine import make_engine
    >>> from agentgym_budget.envs.alfworld.game import load_games
    >>> game, engine = load_games("valid_seen")[0], make_engine("fast")
    >>> expert = HandCodedExpert.for_game(game, random.Random(0))
    >>> step = engine.reset(game)
    >>> action = expert.start(step.observation)
    >>> for _ in range(50):
    ...     step = engine.step(action)
    ...     if step.won:
    ...         break
    ...     action = expert.next_action(action, step.observation, step.admissible_commands)
    >>> step.won
    True
"""

from __future__ import annotations

import copy
import functools
import json
import random
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, NamedTuple

from agentgym_budget._once import load_once

__all__ = ["EXPERT_TYPES", "ExpertFailed", "HandCodedExpert", "expert_priors", "start_facts"]

#: ``"upstream"``: upstream ``AlfredExpert``'s actions exactly (the env's default); ``"fixed"``: see the module docstring.
EXPERT_TYPES = ("upstream", "fixed")
#: The facts upstream's expert reads, by predicate: ``holds`` (object), ``ishot`` / ``iscool`` /
#: ``isclean`` (object) and ``inreceptacle`` (object, receptacle), as display names ("apple 1").
StartFacts = Mapping[str, Sequence[tuple[str, ...]]]


class ExpertFailed(Exception):
    """The expert gave up (upstream ``HandCodedAgentTimeout`` / ``HandCodedAgentFailed``)."""


@load_once()
def expert_priors() -> dict[str, Any]:
    """Upstream's object/receptacle priors (``alfworld/gen/constants.py``), bundled as JSON."""
    text = resources.files("agentgym_budget.envs.alfworld").joinpath("data").joinpath("expert_priors.json").read_text()
    return json.loads(text)


@functools.lru_cache(maxsize=1 << 16)  # hot: called for every admissible command at every expert step
def _remove_num_ids(text: str) -> str:
    return " ".join("".join(c for c in text if not c.isdigit()).split())


@functools.lru_cache(maxsize=1 << 10)  # rollouts see the same receptacle texts again and again
def _objects_and_classes(obs: str) -> tuple[tuple[str, str], ...]:
    """Upstream ``BasePolicy.get_objects_and_classes``: the objects listed after "you see", with their classes."""
    obj_str = (
        re.split("you see", obs, flags=re.IGNORECASE)[-1]
        .replace(" and a ", "")
        .replace(" a ", "")
        .split("Your task is to", 1)[0]
        .strip(".,\n\r")
    )
    return tuple({o: HandCodedExpert.object_id_to_cls(o) for o in obj_str.split(",")}.items())


class _AdmissibleView(NamedTuple):
    """An admissible list as upstream's subgoal checks read it, prepared once per distinct list.

    Upstream scans the de-numbered list with ``any(pattern in command ...)`` at every expert step,
    over v2's long lists and again at every step of every rollout; a substring test on the
    newline-joined list is the same test (no pattern holds a newline, so no match spans two
    commands) done in C, and a set answers ``pattern in list``.
    """

    commands_text: str  # "\n".join(commands): substring tests on the commands as they are
    wo_num_ids: frozenset[str]  # the de-numbered commands ("take apple from countertop"): membership
    wo_num_ids_text: str  # "\n".join of the de-numbered commands: substring tests


@functools.lru_cache(maxsize=1 << 10)  # keyed by the whole list (a changed list is a new entry, never stale); an episode uses ~100
def _admissible_view(commands: tuple[str, ...]) -> _AdmissibleView:
    wo_num_ids = [_remove_num_ids(command) for command in commands]
    return _AdmissibleView("\n".join(commands), frozenset(wo_num_ids), "\n".join(wo_num_ids))


class _FeedbackFacts:
    """The PDDL facts upstream's expert reads, tracked from the engine's feedback text."""

    _PICK = re.compile(r"^You pick up the (.+?) from the (.+?)\.$")
    _MOVE = re.compile(r"^You move the (.+?) to the (.+?)\.$")
    _CHANGE = re.compile(r"^You (heat|cool|clean) the (.+?) using the (.+?)\.$")
    _SLICE = re.compile(r"^You sliced the (.+?) with the (.+?)\.$")

    def __init__(self, start: StartFacts | None = None) -> None:
        start = start or {}
        self.held: list[str] = [obj for (obj,) in start.get("holds", ())]
        self.hot: set[str] = {obj for (obj,) in start.get("ishot", ())}
        self.cool: set[str] = {obj for (obj,) in start.get("iscool", ())}
        self.clean: set[str] = {obj for (obj,) in start.get("isclean", ())}
        self.sliced: set[str] = set()  # no game starts with a sliced object; tracked for sliced tasks
        # the start state's, then in the order things were put there
        self.in_receptacle: list[tuple[str, str]] = [(obj, recep) for obj, recep in start.get("inreceptacle", ())]

    #: How every feedback that changes these facts starts: any other skips the four patterns (hot: every step).
    _CHANGING_FEEDBACK = ("You pick up the ", "You move the ", "You heat the ", "You cool the ", "You clean the ",
                          "You sliced the ")

    def update(self, feedback: str) -> None:
        if not feedback.startswith(self._CHANGING_FEEDBACK):
            return
        if match := self._PICK.match(feedback):
            obj, receptacle = match.groups()
            self.held.append(obj)
            if (obj, receptacle) in self.in_receptacle:
                self.in_receptacle.remove((obj, receptacle))
        elif match := self._MOVE.match(feedback):
            obj, receptacle = match.groups()
            if obj in self.held:
                self.held.remove(obj)
            self.in_receptacle.append((obj, receptacle))
        elif match := self._CHANGE.match(feedback):
            verb, obj, _ = match.groups()
            if verb == "heat":
                self.hot.add(obj)
                self.cool.discard(obj)
            elif verb == "cool":
                self.cool.add(obj)
                self.hot.discard(obj)
            else:
                self.clean.add(obj)
        elif match := self._SLICE.match(feedback):
            self.sliced.add(match.group(1))

    def clone(self) -> _FeedbackFacts:
        twin = _FeedbackFacts.__new__(_FeedbackFacts)
        twin.held, twin.in_receptacle = list(self.held), list(self.in_receptacle)
        twin.hot, twin.cool, twin.clean, twin.sliced = set(self.hot), set(self.cool), set(self.clean), set(self.sliced)
        return twin

    def holds_class(self, obj_cls: str, sliced_only: bool = False) -> bool:
        """``"holds agent {obj_cls}" in facts_wo_num_ids`` (and, if ``sliced_only``, ``issliced``)."""
        return any(_remove_num_ids(obj) == obj_cls and (obj in self.sliced or not sliced_only) for obj in self.held)

    def any_sliced_of_class(self, obj_cls: str) -> bool:
        return any(_remove_num_ids(obj) == obj_cls for obj in self.sliced)

    def in_receptacle_of_classes(self, obj_cls: str, recep_cls: str) -> list[str]:
        """Objects of ``obj_cls`` lying in a receptacle of ``recep_cls`` (``inreceptacle`` facts)."""
        return [o for o, r in self.in_receptacle if _remove_num_ids(o) == obj_cls and _remove_num_ids(r) == recep_cls]


def start_facts(game: Any) -> dict[str, list[tuple[str, ...]]]:
    """The facts upstream's expert reads, as they hold in ``game``'s initial state (its PDDL problem).

    ``game`` is anything :class:`~agentgym_budget.envs.alfworld.fast.FastAlfredEngine` loads
    (an ``AlfredGame``, a ``game.tw-pddl`` dict or its path).

    Example:
        >>> from agentgym_budget.envs.alfworld.game import load_games
        >>> facts = start_facts(load_games("valid_seen")[0])
        >>> sorted(facts), facts["holds"]
        (['holds', 'inreceptacle', 'isclean', 'iscool', 'ishot'], [])
    """
    from agentgym_budget.envs.alfworld.fast.engine import load_world

    world = load_world(game)

    def named(predicate: str) -> list[tuple[str, ...]]:
        facts = world.initial_fluents.get(predicate, ())
        return sorted(tuple(world.names[entity].strip() for entity in args) for args in facts)

    facts = {predicate: named(predicate) for predicate in ("inreceptacle", "ishot", "iscool", "isclean")}
    facts["holds"] = [args[1:] for args in named("holds") if args[0] == world.names[world.agent].strip()]
    return facts


# The expert's per-episode containers (of strings), copied by HandCodedExpert.clone().
_EPISODE_DICTS = ("receptacles", "visible_objects", "obj_cls_to_receptacle_map", "obs_at_recep")
_EPISODE_LISTS = ("receptacles_to_check", "inventory", "action_backlog", "object_blacklist")


class HandCodedExpert:
    """Upstream's handcoded expert for one episode (see the module docstring).

    Args:
        task_params: ``task_type``, ``object_target``, ``parent_target``, ``toggle_target``
            (lower-case class names) and ``object_sliced`` (:attr:`AlfredGame.task_params`).
        rng: the episode's random generator.
        max_steps: upstream ``AlfredExpert`` uses 200; after that the expert gives up.
        expert_type: ``"upstream"`` or ``"fixed"`` (:data:`EXPERT_TYPES`, see the module docstring).
        start_facts: the game's initial facts (:func:`start_facts`): required by upstream's expert
            (it reads the engine's facts), refused for the ``"fixed"`` one (it starts from none).
            :meth:`for_game` passes them as the type needs.
    """

    def __init__(
        self,
        task_params: Mapping[str, Any],
        rng: random.Random,
        max_steps: int = 200,
        expert_type: str = "fixed",
        start_facts: StartFacts | None = None,
    ) -> None:
        if expert_type not in EXPERT_TYPES:
            raise ValueError(f"unknown expert_type {expert_type!r}; expected one of {list(EXPERT_TYPES)}")
        if (start_facts is None) == (expert_type == "upstream"):
            needs = "needs the game's start facts" if start_facts is None else "starts from no facts"
            raise ValueError(f"the {expert_type} expert {needs}: build it with HandCodedExpert.for_game(game, rng, "
                             f"expert_type={expert_type!r})")
        priors = expert_priors()
        self.rng = rng
        self.max_steps = max_steps
        self.expert_type = expert_type
        # Upstream only checks "put" (the json_2.1.1 verb) in its bookkeeping; ALFWorld >= 0.4 says "move".
        self.upstream_move_bug = expert_type == "upstream"
        self.task_params = dict(task_params)
        self.task_type = self.task_params["task_type"]
        # Upstream's policies have no slicing subgoals (its released games have no sliced tasks):
        # in upstream mode a sliced task is played like its plain twin, and lost.
        self.sliced_task = bool(self.task_params.get("object_sliced")) and expert_type == "fixed"
        self.OBJECTS = priors["objects"]
        self.RECEPTACLES = priors["receptacles"]
        self.OPENABLE_OBJECTS = priors["openable"]
        self.OBJECT_TO_VAL_RECEPTACLE = {
            o: [r for r, objs in priors["val_receptacle_objects"].items() if o in objs] for o in self.OBJECTS
        }
        self.subgoals = _subgoals(self.task_type, self.task_params, self.sliced_task)
        self.facts = _FeedbackFacts(start_facts)
        self.receptacles: dict[str, str] = {}
        self.visible_objects: dict[str, str] = {}
        self.obj_cls_to_receptacle_map: dict[str, str] = {}
        self.subgoal_idx = 0
        self.curr_recep = ""
        self.checked_inside_curr_recep = False
        self.receptacles_to_check: list[str] = []
        self.inventory: list[str] = []
        self.obs_at_recep: dict[str, str] = {}
        self.got_inventory_from_recep = ""
        self.action_backlog: list[str] = []
        self.object_blacklist: list[str] = []
        self.steps = 0
        self.is_agent_holding_right_object = False

    @classmethod
    def for_game(cls, game: Any, rng: random.Random, expert_type: str = "fixed", max_steps: int = 200) -> HandCodedExpert:
        """The ``expert_type`` expert for ``game`` (an :class:`~agentgym_budget.envs.alfworld.game.AlfredGame`),
        with the start facts its type reads: the one place that decides them.

        Example:
            >>> import random
            >>> from agentgym_budget.envs.alfworld.game import load_games
            >>> game = load_games("valid_seen")[0]
            >>> HandCodedExpert.for_game(game, random.Random(0), expert_type="upstream").facts.in_receptacle != []
            True
            >>> HandCodedExpert.for_game(game, random.Random(0)).facts.in_receptacle
            []
        """
        facts = start_facts(game) if expert_type == "upstream" else None
        return cls(game.task_params, rng, max_steps=max_steps, expert_type=expert_type, start_facts=facts)

    def clone(self) -> HandCodedExpert:
        """An independent copy that acts exactly as this expert would (same RNG state).

        Much cheaper than ``copy.deepcopy`` (the env clones the expert to roll its plan out):
        the task's constants are shared, only the episode's state is copied.
        """
        twin = copy.copy(self)
        twin.rng = random.Random()
        twin.rng.setstate(self.rng.getstate())
        twin.facts = self.facts.clone()
        for name in _EPISODE_DICTS:
            setattr(twin, name, dict(getattr(self, name)))
        for name in _EPISODE_LISTS:
            setattr(twin, name, list(getattr(self, name)))
        return twin

    @property
    def timed_out(self) -> bool:
        """Whether the expert has used its ``max_steps``: from now on it reports ``"look"`` only."""
        return self.steps >= self.max_steps

    # -- the AlfredExpert interface ---------------------------------------------------------
    def start(self, intro: str) -> str:
        """Read the intro (receptacles); upstream's first expert action is always ``"look"``."""
        self.observe(intro)
        return "look"

    def next_action(self, last_action: str, observation: str, admissible_commands: Sequence[str]) -> str:
        """The expert's next action after ``last_action`` produced ``observation``.

        Raises:
            ExpertFailed: when upstream's expert would raise (timeout or no subgoal left).
        """
        self.facts.update(observation)
        action = self._policy_act(observation, admissible_commands, last_action)
        if action == last_action or (last_action == "look" and action not in admissible_commands):
            return self.rng.choice(list(admissible_commands))
        return action

    def reported_action(self, last_action: str, observation: str, admissible_commands: Sequence[str]) -> str:
        """Upstream ``AlfredExpert``'s ``extra.expert_plan[0]`` after ``last_action``: the next action
        when it is admissible, else ``"look"`` (also where upstream's expert raises)."""
        if last_action == "" and self.expert_type == "upstream":
            # AlfredExpert takes an empty previous command for a reset: its expert only observes.
            self.observe(observation)
            return "look"
        try:
            proposal = self.next_action(last_action, observation, admissible_commands)
        except (ExpertFailed, IndexError, KeyError, ValueError):
            return "look"
        return proposal if proposal in admissible_commands else "look"

    # -- BasePolicy (upstream handcoded_expert.py) ------------------------------------------
    def get_objects_and_classes(self, obs: str) -> dict[str, str]:
        return dict(_objects_and_classes(obs))  # a fresh dict: the expert deletes from it

    @staticmethod
    def object_id_to_cls(object_hash: str, special_char: str = " ") -> str:
        return object_hash.split(special_char)[0]

    def get_list_of_objects_of_class(self, obj_cls: str, obj_dict: Mapping[str, str]) -> list[str]:
        return [name for name, cls in obj_dict.items() if cls == obj_cls]

    def get_next_subgoal(self) -> tuple[str, str, list[str]]:
        subgoal = self.subgoals[self.subgoal_idx]
        sub_action, sub_param = subgoal
        objs_of_interest = self.get_list_of_objects_of_class(sub_param, self.visible_objects)
        if self.sliced_task and sub_action == "take" and sub_param == self.task_params["object_target"]:
            objs_of_interest = [o for o in objs_of_interest if o in self.facts.sliced] or objs_of_interest
        if sub_param == "sinkbasin" and not any("sinkbasin" in r for r in self.receptacles.values()):
            sub_param = "bathtubbasin"
        return sub_action, sub_param, objs_of_interest

    def get_list_of_receptacles_to_search_for_object_cls(self, obj_cls: str) -> list[str]:
        obj_found_in_receps = self.OBJECT_TO_VAL_RECEPTACLE[obj_cls]
        return [r_name for r_name, r_cls in self.receptacles.items() if r_cls in obj_found_in_receps]

    def get_list_of_receptacles_of_type(self, recep_cls: str) -> list[str]:
        return [r_name for r_name, r_cls in self.receptacles.items() if r_cls == recep_cls]

    def is_receptacle_openable(self, recep: str) -> bool:
        return bool(recep) and recep in self.receptacles and self.receptacles[recep] in self.OPENABLE_OBJECTS

    def is_already_at_receptacle(self, sub_param: str) -> bool:
        return (
            sub_param in self.obj_cls_to_receptacle_map and self.curr_recep == self.obj_cls_to_receptacle_map[sub_param]
        ) or (self.curr_recep in self.receptacles and self.receptacles[self.curr_recep] == sub_param)

    def blacklist_obj(self, obj: str) -> None:
        obj_cls = self.object_id_to_cls(obj)
        if obj_cls in self.obj_cls_to_receptacle_map:
            del self.obj_cls_to_receptacle_map[obj_cls]
        if obj in self.visible_objects:
            del self.visible_objects[obj]
        if self.curr_recep in self.obs_at_recep:
            self.obs_at_recep[self.curr_recep] = self.obs_at_recep[self.curr_recep].replace(obj, "")

    def observe(self, obs: str) -> None:
        if "Welcome" in obs:  # intro text with receptacles
            self.receptacles = self.get_objects_and_classes(obs)
        elif "you see nothing" in obs:
            self.visible_objects = {}
        elif "you see" in obs:
            if "You open the" in obs:
                curr_recep = " ".join(obs.split("You open the", 1)[-1].split()[:2]).strip(",.")
            elif "is open." in obs:
                curr_recep = " ".join(obs.split("is open.", 1)[0].split()[-2:]).strip(",.")
            else:
                curr_recep = " ".join(obs.split("On the", 1)[-1].split()[:2]).strip(",.")
            self.visible_objects = self.get_objects_and_classes(obs)
            self.obs_at_recep[curr_recep] = str(obs)
            for obj in self.object_blacklist:
                if obj in self.visible_objects:
                    del self.visible_objects[obj]
            for o_name, o_cls in self.visible_objects.items():
                self.obj_cls_to_receptacle_map[o_cls] = curr_recep

    def update_state_tracking(self, obs: str, last_action: str) -> None:
        was_last_action_successful = "Nothing happens" not in obs
        if "go to" in last_action:
            went_to_receptacle = last_action.replace("go to", "").strip()
            self.curr_recep = str(went_to_receptacle)
            if went_to_receptacle in self.receptacles_to_check:
                self.receptacles_to_check.remove(went_to_receptacle)
            self.checked_inside_curr_recep = (not self.is_receptacle_openable(self.curr_recep)) or "open" in obs
        if not was_last_action_successful:
            return
        if "open" in last_action:
            open_curr_recep_str = f"open {self.curr_recep}"
            if open_curr_recep_str == last_action:
                self.checked_inside_curr_recep = True
                self.action_backlog.append(f"close {self.curr_recep}")
        elif "close" in last_action:
            close_curr_recep_str = f"close {self.curr_recep}"
            if close_curr_recep_str == last_action and close_curr_recep_str in self.action_backlog:
                self.action_backlog.remove(close_curr_recep_str)
        elif "take" in last_action:
            inv_obj = " ".join(last_action.split()[1:3])
            self.got_inventory_from_recep = " ".join(last_action.split()[-2:])
            self.inventory.append(inv_obj)
            self.blacklist_obj(inv_obj)
        elif "put" in last_action or (not self.upstream_move_bug and last_action.startswith("move ")):
            # Upstream only checks "put" (the json_2.1.1 verb); ALFWorld >= 0.4 says "move".
            inv_obj = self.inventory.pop()
            self.got_inventory_from_recep = ""
            self.blacklist_obj(inv_obj)
            if self.task_params["object_target"] in last_action:
                self.object_blacklist.append(inv_obj)

    def _policy_act(self, obs: str, admissible_commands: Sequence[str], last_action: str) -> str:
        self.steps += 1
        if self.steps > self.max_steps:
            raise ExpertFailed(f"the expert timed out after {self.max_steps} steps")
        if self.subgoal_idx >= len(self.subgoals):
            if self.action_backlog:
                return self.action_backlog.pop()
            raise ExpertFailed("the expert ran out of subgoals without winning")
        self.update_state_tracking(obs, last_action)
        self.observe(obs)
        self.subgoal_idx = self.check_subgoal_completion(admissible_commands)
        sub_action, sub_param, objs_of_interest = self.get_next_subgoal()
        if self.sliced_task and self.subgoal_idx >= _SLICING_SUBGOAL_COUNT and self.facts.holds_class(_KNIFE):
            return self._put_knife_down(admissible_commands)

        if sub_action == "find":
            if len(objs_of_interest) > 0 or (
                self.is_already_at_receptacle(sub_param) and self.checked_inside_curr_recep
            ) and (len(self.inventory) == 0 or (len(self.inventory) > 0 and self.is_agent_holding_right_object)):
                self.receptacles_to_check = []
                self.action_backlog = []
            else:
                return self._find(sub_param, obs, last_action)
        self.receptacles_to_check = []

        if sub_action == "goto":
            return f"go to {self.get_list_of_receptacles_of_type(sub_param)[0]}"
        if sub_action == "take":
            if "closed" in obs and not self.checked_inside_curr_recep and len(self.visible_objects) == 0:
                return f"open {self.curr_recep}"
            if len(self.visible_objects) == 0 or not any(sub_param in o for o in self.visible_objects):
                return f"examine {self.curr_recep}"
            return f"take {self.rng.choice(objs_of_interest)} from {self.curr_recep}"
        if sub_action == "put":
            if "closed" in obs and not self.checked_inside_curr_recep:
                return f"open {self.curr_recep}"
            return f"move {self.inventory[0]} to {self.curr_recep}"
        if sub_action in ("heat", "cool", "clean"):
            return f"{sub_action} {self.inventory[0]} with {self.curr_recep}"
        if sub_action == "slice":  # upstream BasePolicy.act's branch
            if len(self.visible_objects) == 0:
                return f"examine {self.curr_recep}"
            return f"slice {self.rng.choice(objs_of_interest)} with {self.inventory[0]}"
        if sub_action == "use":
            if len(self.visible_objects) == 0:
                return f"examine {self.curr_recep}"
            return f"use {self.rng.choice(objs_of_interest)}"
        # Unreachable for the six task types (upstream falls through to these defaults too).
        if len(self.inventory) > 0 and not self.is_agent_holding_right_object:
            if self.curr_recep == self.got_inventory_from_recep:
                return f"move {self.inventory[0]} to {self.got_inventory_from_recep}"
            return f"go to {self.got_inventory_from_recep}"
        return f"open {self.curr_recep}" if "closed" in obs else f"examine {self.curr_recep}"

    def _put_knife_down(self, admissible_commands: Sequence[str]) -> str:
        """After slicing: put the knife on the receptacle here, else back where it came from
        (opening it first: upstream's "holding something irrelevant" rule would not)."""
        knife = next(obj for obj in self.facts.held if _remove_num_ids(obj) == _KNIFE)
        for here in (self.curr_recep, self.got_inventory_from_recep):
            if f"move {knife} to {here}" in admissible_commands:
                return f"move {knife} to {here}"
        if self.curr_recep == self.got_inventory_from_recep and f"open {self.curr_recep}" in admissible_commands:
            return f"open {self.curr_recep}"
        return f"go to {self.got_inventory_from_recep}"

    def _find(self, sub_param: str, obs: str, last_action: str) -> str:
        if sub_param in self.obj_cls_to_receptacle_map:
            self.receptacles_to_check = [self.obj_cls_to_receptacle_map[sub_param]]
        elif len(self.receptacles_to_check) == 0:
            if sub_param in self.RECEPTACLES:
                self.receptacles_to_check = self.get_list_of_receptacles_of_type(sub_param)
            else:
                priors = self.get_list_of_receptacles_to_search_for_object_cls(sub_param)
                self.receptacles_to_check = [r for r in self.receptacles if r not in priors] + priors
            if len(self.receptacles_to_check) == 0:
                self.receptacles_to_check = list(self.receptacles.keys())
        if self.curr_recep in self.receptacles_to_check and self.checked_inside_curr_recep:
            self.receptacles_to_check.remove(self.curr_recep)
        if len(self.inventory) > 0 and not self.is_agent_holding_right_object:
            if self.curr_recep == self.got_inventory_from_recep:
                return f"move {self.inventory[0]} to {self.got_inventory_from_recep}"
            return f"go to {self.got_inventory_from_recep}"
        if (
            sub_param not in self.obj_cls_to_receptacle_map
            and "closed" in obs
            and not self.checked_inside_curr_recep
            and last_action.split()[0] not in {"heat", "cool", "clean", "slice"}
        ):
            return f"open {self.curr_recep}"
        if len(self.action_backlog) == 0:
            return f"go to {self.receptacles_to_check[-1]}"
        return self.action_backlog.pop()

    # -- check_subgoal_completion / get_predicates (upstream *Policy and *TWPolicy) ----------
    def _common_predicates(self, obj: str, admissible: _AdmissibleView) -> tuple[bool, bool]:
        """(is ``obj`` in the current receptacle's observation, can one take an ``obj``); also
        updates ``is_agent_holding_right_object``."""
        self.is_agent_holding_right_object = self.facts.holds_class(obj)
        obs_at_curr_recep = self.obs_at_recep.get(self.curr_recep, "")
        is_obj_in_obs = "you see" in obs_at_curr_recep and f" {obj} " in obs_at_curr_recep
        can_take_object = f"take {obj}" in admissible.wo_num_ids_text  # upstream: any(... in ac for ac in de-numbered)
        return is_obj_in_obs, can_take_object

    def check_subgoal_completion(self, admissible_commands: Sequence[str]) -> int:
        obj, parent = self.task_params["object_target"], self.task_params["parent_target"]
        admissible = _admissible_view(tuple(admissible_commands))
        if self.sliced_task and not self.facts.any_sliced_of_class(obj):
            return self._slicing_subgoal(obj, admissible)
        is_obj_in_obs, can_take_object = self._common_predicates(obj, admissible)
        if self.sliced_task:
            self.is_agent_holding_right_object = self.facts.holds_class(obj, sliced_only=True)
        holding = self.is_agent_holding_right_object
        n = len(self.subgoals)
        first = _SLICING_SUBGOAL_COUNT if self.sliced_task else 0  # the task's own subgoals start here
        if self.task_type == "look_at_obj_in_light":
            can_toggle_lamp = f"use {self.task_params['toggle_target']}" in admissible.wo_num_ids
            if holding and can_toggle_lamp:
                return n - 1
            if holding:
                return n - 2
            if can_take_object and is_obj_in_obs:
                return n - 3
            return first
        at_right_recep = parent in self.curr_recep
        can_put_object = f"move {obj} to {parent}" in admissible.wo_num_ids
        if self.task_type == "pick_and_place_simple":
            if holding and can_put_object and at_right_recep:
                return n - 1
            if holding:
                return n - 2
            if can_take_object and is_obj_in_obs:
                return n - 3
            return first
        if self.task_type == "pick_two_obj_and_place":
            placed = self.facts.in_receptacle_of_classes(obj, parent)
            one_inside = len(placed) > 0
            first_placed = placed[0] if placed else ""
            taking_same = f"take {first_placed}" in admissible.commands_text  # upstream: any(... in ac for ac in commands)
            if one_inside and holding and can_put_object and at_right_recep:
                return n - 1
            if one_inside and holding:
                return n - 2
            if one_inside and not holding and not taking_same and can_take_object and is_obj_in_obs:
                return n - 3
            if one_inside:
                return n - 4
            if holding and can_put_object and at_right_recep:
                return n - 5
            if holding:
                return n - 6
            if can_take_object and is_obj_in_obs:
                return n - 7
            return first
        # clean / heat / cool
        verb, appliance, done_set = {
            "pick_clean_then_place_in_recep": ("clean", "sinkbasin", self.facts.clean),
            "pick_heat_then_place_in_recep": ("heat", "microwave", self.facts.hot),
            "pick_cool_then_place_in_recep": ("cool", "fridge", self.facts.cool),
        }[self.task_type]
        is_done = len(self.inventory) > 0 and self.inventory[0] in done_set
        can_change_object = f"{verb} {obj} with {appliance}" in admissible.wo_num_ids
        if is_done and holding and can_put_object and at_right_recep:
            return n - 1
        if is_done and holding:
            return n - 2
        if holding and can_change_object:
            return n - 3
        if holding:
            return n - 4
        if can_take_object and is_obj_in_obs:
            return n - 5
        return first

    def _slicing_subgoal(self, obj: str, admissible: _AdmissibleView) -> int:
        """Index into :func:`_slicing_subgoals` (find knife, take it, find ``obj``, slice it)."""
        knife_in_obs, can_take_knife = self._common_predicates(_KNIFE, admissible)
        obs_at_curr_recep = self.obs_at_recep.get(self.curr_recep, "")
        is_obj_in_obs = "you see" in obs_at_curr_recep and f" {obj} " in obs_at_curr_recep
        holding_knife = self.is_agent_holding_right_object  # holds a knife: the right object for now
        if holding_knife and is_obj_in_obs and f"slice {obj} with {_KNIFE}" in admissible.wo_num_ids:
            return 3
        if holding_knife:
            return 2
        if can_take_knife and knife_in_obs:
            return 1
        return 0


#: The knife class a sliced task's expert fetches (a butter knife slices too, but the expert looks for a knife).
_KNIFE = "knife"


def _slicing_subgoals(obj: str) -> list[tuple[str, str]]:
    """ALFRED's plan prefix of a sliced task: get a knife and slice the object where it lies."""
    return [("find", _KNIFE), ("take", _KNIFE), ("find", obj), ("slice", obj)]


_SLICING_SUBGOAL_COUNT = 4  # _slicing_subgoals' length: a sliced task's own subgoals start there


def _subgoals(task_type: str, params: Mapping[str, Any], sliced: bool) -> list[tuple[str, str]]:
    if sliced:
        return _slicing_subgoals(params["object_target"]) + _task_subgoals(task_type, params)
    return _task_subgoals(task_type, params)


def _task_subgoals(task_type: str, params: Mapping[str, Any]) -> list[tuple[str, str]]:
    obj, parent, toggle = params["object_target"], params["parent_target"], params.get("toggle_target", "")
    place = [("find", obj), ("take", obj), ("find", parent), ("put", parent)]
    if task_type == "pick_and_place_simple":
        return place
    if task_type == "pick_two_obj_and_place":
        return place + place
    if task_type == "look_at_obj_in_light":
        return [("find", obj), ("take", obj), ("find", toggle), ("use", toggle)]
    appliance, verb = {
        "pick_clean_then_place_in_recep": ("sinkbasin", "clean"),
        "pick_heat_then_place_in_recep": ("microwave", "heat"),
        "pick_cool_then_place_in_recep": ("fridge", "cool"),
    }[task_type]
    return [("find", obj), ("take", obj), ("goto", appliance), (verb, obj), ("find", parent), ("put", parent)]

"""A multi-agent text world as a PettingZoo ``ParallelEnv`` (and AEC env): ``SharedHousehold``.

Several agents share one household task — *put the apple 1 and the mug 1 on the diningtable 1*
— in the same room, each with its own text observation and admissible commands (the ALFWorld
command grammar: ``go to R``, ``take O from R``, ``move O to R``, ``look``, ``inventory``,
plus ``wait``).  Each agent carries one object at a time, so splitting the work pays: two
agents need about half the turns of one.

* Observations are strings (``gymnasium.spaces.Text``); every agent's ``info`` has
  ``admissible_commands``, ``won``, ``lost``, ``task``, ``turn``, ``expert_action`` and
  ``expert_plan`` (a greedy joint expert that assigns one object per free agent).
* Agents act simultaneously; if two take the same object in one step, the one listed first in
  ``possible_agents`` gets it and the other is told so.  Each agent also hears what the
  others did (``"bob: You pick up the mug 1 from the cabinet 1."``).
* The team reward is shared: ``1.0`` for every agent on the step the last object is placed;
  all agents then terminate.  The env never truncates: wrap it in
  :class:`~agentgym_budget.integrations.pettingzoo_budget.ParallelTurnBudget` for a turn
  budget (per-agent or shared).
* Object placement and the task's objects are drawn from ``reset(seed=...)``;
  ``reset(options={"task": i})`` fixes the task draw; unknown options are ignored (PettingZoo's
  API test passes one).

:func:`parallel_env` builds the ``ParallelEnv``, :func:`env` the AEC env through PettingZoo's
standard ``parallel_to_aec`` conversion.

Example:
    >>> from agentgym_budget.envs.household import parallel_env
    >>> env = parallel_env(n_agents=2)
    >>> observations, infos = env.reset(seed=0)
    >>> env.agents, infos["alice"]["task"]
    (['alice', 'bob'], 'put the plate 1 and the tomato 1 on the diningtable 1')
    >>> actions = {agent: infos[agent]["expert_action"] for agent in env.agents}
    >>> actions
    {'alice': 'go to cabinet 1', 'bob': 'go to shelf 1'}
    >>> observations, rewards, terminations, truncations, infos = env.step(actions)
    >>> print(observations["alice"])
    You arrive at cabinet 1. On the cabinet 1, you see a cup 1, a knife 1, a mug 1, and a plate 1.
    <BLANKLINE>
    bob: You arrive at shelf 1. On the shelf 1, you see a tomato 1.
    >>> while env.agents:
    ...     actions = {agent: infos[agent]["expert_action"] for agent in env.agents}
    ...     observations, rewards, terminations, truncations, infos = env.step(actions)
    >>> rewards, terminations, infos["bob"]["turn"]
    ({'alice': 1.0, 'bob': 1.0}, {'alice': True, 'bob': True}, 4)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_budget._optional import require
from agentgym_budget.envs.base import INVALID_ACTION_FEEDBACK, MAX_ACTION_LENGTH, text_space, to_charset

require("pettingzoo", extra="multiagent", what="agentgym_budget.envs.household")
from pettingzoo import ParallelEnv  # noqa: E402
from pettingzoo.utils.conversions import parallel_to_aec  # noqa: E402

__all__ = ["AGENT_NAMES", "OBJECTS", "RECEPTACLES", "SharedHouseholdEnv", "env", "parallel_env"]

AGENT_NAMES: tuple[str, ...] = ("alice", "bob", "carol", "dave")
RECEPTACLES: tuple[str, ...] = ("cabinet 1", "countertop 1", "diningtable 1", "fridge 1", "shelf 1", "sinkbasin 1")
OBJECTS: tuple[str, ...] = ("apple 1", "bread 1", "cup 1", "knife 1", "mug 1", "plate 1", "spoon 1", "tomato 1")
TARGET = "diningtable 1"
_START = "the middle of the room"
_MAX_OBSERVATION_LENGTH = 2048


def _listing(items: Sequence[str]) -> str:
    """ALFWorld's list style: ``nothing`` / ``a x`` / ``a x, and a y``."""
    if not items:
        return "nothing"
    named = [f"a {item}" for item in items]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + f", and {named[-1]}"


class SharedHouseholdEnv(ParallelEnv):
    """Agents share one household task (see the module docstring).

    Args:
        n_agents: 1 to 4 agents (``alice``, ``bob``, ``carol``, ``dave``).
        n_objects: objects the task asks for (default: ``n_agents``, at least 2).
        render_mode: ``None``, ``"ansi"`` (``render()`` returns the last observations) or ``"human"``.
    """

    metadata: dict[str, Any] = {"name": "shared_household_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(self, n_agents: int = 2, n_objects: int | None = None, render_mode: str | None = None) -> None:
        if not 1 <= n_agents <= len(AGENT_NAMES):
            raise ValueError(f"n_agents must be in 1..{len(AGENT_NAMES)}, got {n_agents}")
        n_objects = max(n_agents, 2) if n_objects is None else n_objects
        if not 1 <= n_objects <= len(OBJECTS):
            raise ValueError(f"n_objects must be in 1..{len(OBJECTS)}, got {n_objects}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.n_objects = n_objects
        self.render_mode = render_mode
        self.possible_agents = list(AGENT_NAMES[:n_agents])
        self.agents: list[str] = []
        self._observation_space = text_space(_MAX_OBSERVATION_LENGTH)
        self._action_space = text_space(MAX_ACTION_LENGTH)
        self.np_random, _ = gym.utils.seeding.np_random(None)
        self.where: dict[str, str] = {}  # object -> receptacle ("" while held)
        self.location: dict[str, str] = {}
        self.holding: dict[str, str | None] = {}
        self.goal: tuple[str, ...] = ()
        self.turn = 0
        self._last: dict[str, str] = {}

    # -- PettingZoo API ---------------------------------------------------------------------
    def observation_space(self, agent: str) -> gym.spaces.Text:
        return self._observation_space

    def action_space(self, agent: str) -> gym.spaces.Text:
        return self._action_space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self.np_random, _ = gym.utils.seeding.np_random(seed)
            self._action_space.seed(seed)
        options = options or {}
        task_rng = np.random.default_rng(options["task"]) if "task" in options else self.np_random
        self.goal = tuple(sorted(task_rng.choice(OBJECTS, size=self.n_objects, replace=False).tolist()))
        sources = [r for r in RECEPTACLES if r != TARGET]
        self.where = {o: sources[int(self.np_random.integers(len(sources)))] for o in OBJECTS}
        self.agents = list(self.possible_agents)
        self.location = dict.fromkeys(self.agents, _START)
        self.holding = dict.fromkeys(self.agents, None)
        self.turn = 0
        intro = (f"You are in the middle of a room with {len(self.agents) - 1} teammate(s). Looking quickly "
                 f"around you, you see {_listing(RECEPTACLES)}.\n\nYour task is to: {self.task}.")
        observations = {agent: intro for agent in self.agents}
        self._last = observations
        return observations, {agent: self._info(agent, won=False) for agent in self.agents}

    def step(self, actions: dict[str, Any]):
        self.turn += 1
        # Commands are checked against the state at the start of the step (simultaneous moves).
        admissible = {agent: self.admissible_commands(agent) for agent in self.agents}
        feedback = {agent: self._act(agent, actions.get(agent, "wait"), admissible[agent]) for agent in self.agents}
        won = all(self.where[o] == TARGET for o in self.goal)
        observations = {agent: self._observation(agent, feedback) for agent in self.agents}
        rewards = {agent: float(won) for agent in self.agents}
        terminations = dict.fromkeys(self.agents, won)
        truncations = dict.fromkeys(self.agents, False)
        infos = {agent: self._info(agent, won) for agent in self.agents}
        if won:
            self.agents = []
        self._last = observations
        if self.render_mode == "human":
            self.render()
        return observations, rewards, terminations, truncations, infos

    def render(self) -> str | None:
        text = "\n\n".join(f"[{agent}] {obs}" for agent, obs in self._last.items())
        if self.render_mode == "human":
            print(text)
            return None
        return text if self.render_mode == "ansi" else None

    def close(self) -> None:
        pass

    # -- the world ----------------------------------------------------------------------------
    @property
    def task(self) -> str:
        return f"put the {' and the '.join(self.goal)} on the {TARGET}"

    def _contents(self, receptacle: str) -> list[str]:
        return [o for o in OBJECTS if self.where[o] == receptacle]

    def admissible_commands(self, agent: str) -> list[str]:
        here, held = self.location[agent], self.holding[agent]
        commands = [f"go to {r}" for r in RECEPTACLES if r != here] + ["inventory", "look", "wait"]
        if here in RECEPTACLES:
            if held is None:
                commands += [f"take {o} from {here}" for o in self._contents(here)]
            else:
                commands.append(f"move {held} to {here}")
        return sorted(commands)

    def _act(self, agent: str, action: Any, admissible: list[str]) -> str:
        command = " ".join(action.split()) if isinstance(action, str) else ""
        if command not in admissible:
            return INVALID_ACTION_FEEDBACK
        verb = command.split()[0]
        here = self.location[agent]
        if verb == "go":
            self.location[agent] = target = command[len("go to "):]
            return f"You arrive at {target}. On the {target}, you see {_listing(self._contents(target))}."
        if verb == "take":
            item = command[len("take "):].split(" from ")[0]
            if self.where[item] != here:  # a teammate listed earlier took it this very step
                return f"You reach for the {item}, but it is gone."
            self.where[item], self.holding[agent] = "", item
            return f"You pick up the {item} from the {here}."
        if verb == "move":
            item = command[len("move "):].split(" to ")[0]  # what the agent holds: "move" is admissible only then
            self.where[item], self.holding[agent] = here, None
            return f"You move the {item} to the {here}."
        if verb == "inventory":
            return f"You are carrying: a {self.holding[agent]}." if self.holding[agent] else "You are not carrying anything."
        if verb == "look":
            return f"You are at {here}." if here in RECEPTACLES else f"You are in {_START}."
        return "You wait."

    def _observation(self, agent: str, feedback: dict[str, str]) -> str:
        others = [f"{other}: {text}" for other, text in feedback.items() if other != agent]
        text = feedback[agent] + ("\n\n" + "\n".join(others) if others else "")
        return to_charset(text, _MAX_OBSERVATION_LENGTH)

    def _info(self, agent: str, won: bool) -> dict[str, Any]:
        plan = self.expert_plan(agent)
        return {
            "admissible_commands": self.admissible_commands(agent),
            "won": won, "lost": False, "task": self.task, "turn": self.turn,
            "expert_action": plan[0], "expert_plan": plan,
        }

    def expert_plan(self, agent: str) -> list[str]:
        """The greedy joint expert's remaining plan for ``agent`` (``["wait"]`` when it has nothing to do)."""
        held = self.holding[agent]
        if held is not None:
            return ([] if self.location[agent] == TARGET else [f"go to {TARGET}"]) + [f"move {held} to {TARGET}"]
        todo = [o for o in self.goal if self.where[o] not in (TARGET, "")]
        free = [a for a in self.possible_agents if a in self.holding and self.holding[a] is None]
        if agent not in free or free.index(agent) >= len(todo):
            return ["wait"]
        item = todo[free.index(agent)]
        source = self.where[item]
        return ([] if self.location[agent] == source else [f"go to {source}"]) + [
            f"take {item} from {source}", f"go to {TARGET}", f"move {item} to {TARGET}"]


def parallel_env(n_agents: int = 2, n_objects: int | None = None, render_mode: str | None = None) -> SharedHouseholdEnv:
    """The ``SharedHousehold`` ``ParallelEnv``."""
    return SharedHouseholdEnv(n_agents=n_agents, n_objects=n_objects, render_mode=render_mode)


def env(n_agents: int = 2, n_objects: int | None = None, render_mode: str | None = None):
    """The ``SharedHousehold`` AEC env (PettingZoo's ``parallel_to_aec`` conversion)."""
    return parallel_to_aec(parallel_env(n_agents=n_agents, n_objects=n_objects, render_mode=render_mode))

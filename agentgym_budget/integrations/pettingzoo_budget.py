"""Turn budgets for any PettingZoo env: :class:`ParallelTurnBudget` and :class:`AECTurnBudget`.

The multi-agent counterparts of :class:`~agentgym_budget.wrappers.TurnBudget`.  Budgets come
from the same schedules (an ``int``, ``"fixed:T"``, ``"mix:..."``, ``"uniform:L-H"``,
``"curriculum:..."`` or a :class:`~agentgym_budget.wrappers.budget_spec.BudgetSchedule`; see
:mod:`agentgym_budget.wrappers.budget_spec`), drawn at ``reset`` from the wrapper's own RNG
seeded by ``reset(seed=...)``.  Two modes:

* ``mode="shared"`` — one budget for the team; a turn is one joint step of a ``ParallelEnv``,
  one move of an AEC env.  When the budget is spent every agent is truncated.
* ``mode="per_agent"`` — every agent draws its own budget and spends it with its own actions.
  An agent whose budget is spent is truncated and leaves ``agents``; the others play on.
  The wrapped env still runs that agent: the wrapper plays ``noop_action`` for it (a fixed
  action or a function ``agent -> action``).  Without ``noop_action`` a ``ParallelEnv`` gets
  no action for it (fine for envs that default missing actions, such as ``SharedHousehold``),
  while an AEC env, which cannot skip a player's move, ends for everyone (all truncated).

``infos[agent]`` gains ``budget``, ``turn`` (turns spent: the team's in shared mode, the
agent's own in per-agent mode) and ``turns_left``; ``reset(options={"budget": T})`` forces one
episode's budget; truncation is reported, termination is never touched.  ``show_budget=True``
adds ``[Turns left: x of T]`` to text observations.  Curriculum progress counts resets or
(joint) steps, or is set with :meth:`set_progress`.

Example:
    >>> from agentgym_budget.integrations.pettingzoo import parallel_env
    >>> from agentgym_budget.integrations.pettingzoo_budget import ParallelTurnBudget
    >>> env = ParallelTurnBudget(parallel_env(n_agents=2), budget="mix:1,2", mode="per_agent")
    >>> observations, infos = env.reset(seed=2)
    >>> infos["alice"]["budget"], infos["bob"]["budget"]
    (1, 2)
    >>> _, _, terminations, truncations, infos = env.step({"alice": "look", "bob": "look"})
    >>> truncations, env.agents, infos["bob"]["turns_left"]
    ({'alice': True, 'bob': False}, ['bob'], 1)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from agentgym_budget._optional import require
from agentgym_budget.wrappers.budget import DEFAULT_BUDGET_TEMPLATE
from agentgym_budget.wrappers.budget_spec import (
    BudgetSchedule,
    BudgetSpec,
    CurriculumBudget,
    Interpolation,
    ProgressUnit,
    parse_budget_spec,
)

pettingzoo = require("pettingzoo", extra="multiagent", what="agentgym_budget.integrations.pettingzoo_budget")
from pettingzoo.utils.wrappers import BaseParallelWrapper, BaseWrapper  # noqa: E402

__all__ = ["AECTurnBudget", "BudgetMode", "ParallelTurnBudget", "TeamBudget"]

BudgetMode = Literal["shared", "per_agent"]
NoopAction = Callable[[str], Any] | Any
# Budget seeds get their own stream so that wrapping never changes the wrapped env's draws.
_BUDGET_STREAM = 0x7B5D6E8
_SHARED = "__shared__"


class TeamBudget:
    """The budget bookkeeping both wrappers share: schedule, per-episode draws, turns spent."""

    def __init__(self, budget: BudgetSpec, mode: BudgetMode, *, budgets: Sequence[int] | None = None,
                 weights: Sequence[float] | None = None, low: int | None = None, high: int | None = None,
                 schedule: Sequence[tuple[float, int]] | None = None, progress_unit: ProgressUnit = "episodes",
                 interpolation: Interpolation = "linear", show_budget: bool = False,
                 budget_template: str = DEFAULT_BUDGET_TEMPLATE) -> None:
        if mode not in ("shared", "per_agent"):
            raise ValueError(f"mode must be 'shared' or 'per_agent', got {mode!r}")
        self.schedule: BudgetSchedule = parse_budget_spec(
            budget, budgets=budgets, weights=weights, low=low, high=high, schedule=schedule,
            progress_unit=progress_unit, interpolation=interpolation,
        )
        self.mode = mode
        self.show_budget = bool(show_budget)
        self.budget_template = budget_template
        self.progress = 0.0
        self.rng = np.random.default_rng()
        self.budgets: dict[str, int] = {}
        self.turns: dict[str, int] = {}
        self._forced: int | None = None
        self._spaces: dict[str, tuple[gym.spaces.Space, gym.spaces.Space]] = {}

    def start(self, seed: int | None, options: dict[str, Any] | None) -> dict[str, Any] | None:
        """Begin an episode; returns the options without ``budget`` for the wrapped env."""
        if seed is not None:
            self.rng = np.random.default_rng([seed, _BUDGET_STREAM])
        options = dict(options or {})
        forced = options.pop("budget", None)
        if forced is not None and (isinstance(forced, bool) or not isinstance(forced, (int, np.integer)) or forced < 1):
            raise ValueError(f"reset(options={{'budget': ...}}) needs an int >= 1, got {forced!r}")
        self._forced = None if forced is None else int(forced)
        self.budgets, self.turns = {}, {}
        if self.mode == "shared":
            self._draw(_SHARED)
        if self.counts_in("episodes"):
            self.progress += 1
        return options or None

    def _key(self, agent: str) -> str:
        return _SHARED if self.mode == "shared" else agent

    def _draw(self, key: str) -> None:
        if key not in self.budgets:
            sampled = self.schedule.sample(self.rng, self.progress)
            self.budgets[key] = self._forced if self._forced is not None else int(sampled)
            self.turns[key] = 0

    def budget(self, agent: str) -> int:
        key = self._key(agent)
        self._draw(key)  # agents that appear mid-episode draw on first sight
        return self.budgets[key]

    def spend(self, agent: str | None = None) -> None:
        """One turn: of ``agent`` (per-agent mode) or of the team (shared mode, ``agent=None``)."""
        key = _SHARED if agent is None else self._key(agent)
        self._draw(key)
        self.turns[key] += 1
        if self.counts_in("steps"):
            self.progress += 1

    def turn(self, agent: str) -> int:
        self.budget(agent)
        return self.turns[self._key(agent)]

    def exhausted(self, agent: str) -> bool:
        return self.turn(agent) >= self.budget(agent)

    def counts_in(self, unit: str) -> bool:
        return isinstance(self.schedule, CurriculumBudget) and self.schedule.unit == unit

    def annotate(self, agent: str, info: dict[str, Any]) -> dict[str, Any]:
        info["budget"], info["turn"] = self.budget(agent), self.turn(agent)
        info["turns_left"] = max(info["budget"] - info["turn"], 0)
        return info

    def observe(self, agent: str, observation: Any) -> Any:
        if not self.show_budget or not isinstance(observation, str):
            return observation
        budget, turn = self.budget(agent), self.turn(agent)
        shown = self.budget_template.format(turns_left=max(budget - turn, 0), budget=budget, turn=turn)
        return f"{observation}\n\n{shown}"

    def observation_space(self, agent: str, space: gym.spaces.Space) -> gym.spaces.Space:
        """``space`` widened for the shown budget; the same object while ``space`` is (PettingZoo's API test checks)."""
        if not self.show_budget:
            return space
        cached = self._spaces.get(agent)
        if cached is not None and cached[0] is space:
            return cached[1]
        if not isinstance(space, gym.spaces.Text):
            raise ValueError(f"show_budget=True needs Text observation spaces, got {space}")
        widest = self.budget_template.format(turns_left=10**9 - 1, budget=10**9 - 1, turn=10**9 - 1)
        shown = gym.spaces.Text(max_length=space.max_length + len(widest) + 2, min_length=space.min_length,
                                charset=space.character_set)
        self._spaces[agent] = (space, shown)
        return shown

    def set_progress(self, progress: float) -> None:
        if not np.isfinite(progress) or progress < 0:
            raise ValueError(f"progress must be finite and >= 0, got {progress!r}")
        self.progress = float(progress)


def _noop_for(noop_action: NoopAction | None, agent: str) -> Any:
    return noop_action(agent) if callable(noop_action) else noop_action


class ParallelTurnBudget(BaseParallelWrapper):
    """A turn budget (shared or per-agent) for a PettingZoo ``ParallelEnv`` (see the module docstring).

    Args:
        env: any ``ParallelEnv``.
        budget, budgets, weights, low, high, schedule, progress_unit, interpolation: the budget
            schedule, as for :class:`~agentgym_budget.wrappers.TurnBudget`.
        mode: ``"shared"`` (one budget of joint steps) or ``"per_agent"``.
        noop_action: per-agent mode: the action played for agents whose budget is spent
            (a value or ``agent -> action``); ``None``: they get no action.
        show_budget, budget_template: show ``[Turns left: x of T]`` in text observations.
    """

    def __init__(self, env: Any, budget: BudgetSpec, *, mode: BudgetMode = "shared",
                 noop_action: NoopAction | None = None, show_budget: bool = False,
                 budget_template: str = DEFAULT_BUDGET_TEMPLATE, **schedule_options: Any) -> None:
        super().__init__(env)
        self.team = TeamBudget(budget, mode, show_budget=show_budget, budget_template=budget_template,
                               **schedule_options)
        self.noop_action = noop_action
        self.agents: list[str] = []
        self._removed: set[str] = set()  # agents whose budget ran out (they left `agents`)

    def observation_space(self, agent: str) -> gym.spaces.Space:
        return self.team.observation_space(agent, self.env.observation_space(agent))

    def set_progress(self, progress: float) -> None:
        """Set the curriculum progress (episodes or joint steps, per the schedule's unit)."""
        self.team.set_progress(progress)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        env_options = self.team.start(seed, options)
        observations, infos = self.env.reset(seed=seed, options=env_options)
        self.agents = list(self.env.agents)
        self._removed = set()
        return ({a: self.team.observe(a, o) for a, o in observations.items()},
                {a: self.team.annotate(a, i) for a, i in infos.items()})

    def step(self, actions: dict[str, Any]):
        live = list(self.agents)
        sent = {a: actions[a] for a in live if a in actions}
        if self.noop_action is not None:  # agents out of budget still live in the wrapped env
            sent.update({a: _noop_for(self.noop_action, a) for a in self.env.agents if a in self._removed})
        observations, rewards, terminations, truncations, infos = self.env.step(sent)
        if self.team.mode == "shared":
            self.team.spend()
        else:
            for agent in live:
                self.team.spend(agent)
        # Report the agents live at the start of the step and any the env added; not those removed before.
        keep = [a for a in rewards if a not in self._removed]
        truncations = {a: bool(truncations.get(a, False)) or self.team.exhausted(a) for a in keep}
        terminations = {a: bool(terminations.get(a, False)) for a in keep}
        self._removed.update(a for a in keep if self.team.exhausted(a))
        self.agents = [a for a in self.env.agents if a not in self._removed]
        return ({a: self.team.observe(a, observations[a]) for a in keep if a in observations},
                {a: rewards[a] for a in keep}, terminations, truncations,
                {a: self.team.annotate(a, infos.get(a, {})) for a in keep})

    def __str__(self) -> str:
        return f"ParallelTurnBudget<{self.env!s}>"


class AECTurnBudget(BaseWrapper):
    """A turn budget (shared or per-agent) for a PettingZoo AEC env (see the module docstring).

    Same arguments as :class:`ParallelTurnBudget`; a turn is one move.  Agents the budget
    truncates are shown dead (``truncations[agent] = True``, selected first, as PettingZoo does)
    until the caller's ``step(None)`` removes them; the wrapper keeps its own ``agents``,
    ``rewards``, ``terminations``, ``truncations``, ``infos`` and ``agent_selection`` for
    that, and plays ``noop_action`` in the wrapped env whenever it selects a removed agent.
    """

    def __init__(self, env: Any, budget: BudgetSpec, *, mode: BudgetMode = "shared",
                 noop_action: NoopAction | None = None, show_budget: bool = False,
                 budget_template: str = DEFAULT_BUDGET_TEMPLATE, **schedule_options: Any) -> None:
        super().__init__(env)
        self.team = TeamBudget(budget, mode, show_budget=show_budget, budget_template=budget_template,
                               **schedule_options)
        self.noop_action = noop_action
        self._ended: list[str] = []  # out of budget, still shown (dead) until the caller's step(None)
        self._removed: set[str] = set()  # removed for the caller; the wrapped env may still run them
        self._closing = False  # the episode is over for everyone: dead steps are served here

    def observation_space(self, agent: str) -> gym.spaces.Space:
        return self.team.observation_space(agent, self.env.observation_space(agent))

    def observe(self, agent: str) -> Any:
        return self.team.observe(agent, self.env.observe(agent))

    def set_progress(self, progress: float) -> None:
        """Set the curriculum progress (episodes or moves, per the schedule's unit)."""
        self.team.set_progress(progress)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.env.reset(seed=seed, options=self.team.start(seed, options))
        self._ended, self._removed, self._closing = [], set(), False
        self._sync({a: self.env.rewards[a] for a in self.env.agents})

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if agent in self._ended:  # the caller's dead step for an agent out of budget
            if action is not None:
                raise ValueError("when an agent is dead, the only valid action is None")
            self._ended.remove(agent)
            self._removed.add(agent)
            rewards = self._autopilot() if not self._closing else {}
            self._sync(rewards)
            return
        live = not (self.env.terminations[agent] or self.env.truncations[agent])
        self.env.step(action)
        rewards = dict(self.env.rewards)
        if live:
            self._spend(agent)
        for a, r in self._autopilot().items():
            rewards[a] = rewards.get(a, 0) + r
        self._sync(rewards)

    # -- helpers ------------------------------------------------------------------------------
    def _spend(self, agent: str) -> None:
        self.team.spend(None if self.team.mode == "shared" else agent)
        if not self.team.exhausted(agent):
            return
        if self.team.mode == "shared" or self.noop_action is None:
            self._closing = True  # everyone stops: the team's budget, or a player who cannot be skipped
            self._ended = [a for a in self.env.agents if a not in self._removed and a not in self._ended]
        else:
            self._ended.append(agent)

    def _autopilot(self) -> dict[str, float]:
        """Play the wrapped env's turns of removed agents (noop, or their dead step); their rewards summed."""
        rewards: dict[str, float] = {}
        while (not self._closing and self.env.agent_selection in self._removed
               and any(a not in self._removed for a in self.env.agents)):
            selected = self.env.agent_selection
            dead = self.env.terminations[selected] or self.env.truncations[selected]
            self.env.step(None if dead else _noop_for(self.noop_action, selected))
            for a, r in self.env.rewards.items():
                rewards[a] = rewards.get(a, 0) + r
        return rewards

    def _sync(self, rewards: dict[str, float]) -> None:
        """The caller's view: the env's bookkeeping minus removed agents, plus budget truncations."""
        env = self.env
        self.agents = [a for a in env.agents if a not in self._removed]
        self.terminations = {a: bool(env.terminations[a]) for a in self.agents}
        self.truncations = {a: bool(env.truncations[a]) or a in self._ended for a in self.agents}
        self.rewards = {a: rewards.get(a, 0) for a in self.agents}
        self._cumulative_rewards = {a: env._cumulative_rewards[a] for a in self.agents}
        self.infos = {a: self.team.annotate(a, dict(env.infos[a])) for a in self.agents}
        shown_dead = [a for a in self._ended if a in self.agents]
        self.agent_selection = shown_dead[0] if shown_dead else env.agent_selection

    def __str__(self) -> str:
        return f"AECTurnBudget<{self.env!s}>"

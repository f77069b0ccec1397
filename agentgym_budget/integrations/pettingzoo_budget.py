"""Turn budgets for any PettingZoo env: :class:`ParallelTurnBudget` and :class:`AECTurnBudget`.

The multi-agent counterparts of :class:`~agentgym_budget.wrappers.TurnBudget`.  Budgets come
from the same schedules (an ``int``, ``"fixed:T"``, ``"mix:..."``, ``"uniform:L-H"``,
``"curriculum:..."`` or a :class:`~agentgym_budget.wrappers.budget_spec.BudgetSchedule`; see
:mod:`agentgym_budget.wrappers.budget_spec`), drawn at ``reset`` from the wrapper's own RNG
seeded by ``reset(seed=...)`` — the same :class:`~agentgym_budget.wrappers.budget_core.BudgetCore`
(draws, seed stream, forcing, annotation, shown text) as ``TurnBudget``.  Two modes:

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
    >>> from agentgym_budget.envs.household import parallel_env
    >>> from agentgym_budget.integrations.pettingzoo_budget import ParallelTurnBudget
    >>> env = ParallelTurnBudget(parallel_env(n_agents=2), budget="mix:1,2", mode="per_agent")
    >>> observations, infos = env.reset(seed=6)
    >>> infos["alice"]["budget"], infos["bob"]["budget"]
    (1, 2)
    >>> _, _, terminations, truncations, infos = env.step({"alice": "look", "bob": "look"})
    >>> truncations, env.agents, infos["bob"]["turns_left"]
    ({'alice': True, 'bob': False}, ['bob'], 1)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import gymnasium as gym

from agentgym_budget._optional import require
from agentgym_budget.wrappers.budget_core import BudgetCore
from agentgym_budget.wrappers.budget_spec import BudgetSpec

pettingzoo = require("pettingzoo", extra="multiagent", what="agentgym_budget.integrations.pettingzoo_budget")
from pettingzoo.utils.wrappers import BaseParallelWrapper, BaseWrapper  # noqa: E402

__all__ = ["AECTurnBudget", "AgentBudgets", "BudgetMode", "ParallelTurnBudget"]

BudgetMode = Literal["shared", "per_agent"]
NoopAction = Callable[[str], Any] | Any
_SHARED = "__shared__"


class AgentBudgets:
    """Whose turns count: one budget for the team or one per agent, over a shared :class:`BudgetCore`.

    The core draws (one RNG, one seed stream, forced budgets), annotates and shows the text;
    this class only keeps each key's (budget, turns spent).
    """

    def __init__(self, budget: BudgetSpec, mode: BudgetMode = "shared", **budget_options: Any) -> None:
        if mode not in ("shared", "per_agent"):
            raise ValueError(f"mode must be 'shared' or 'per_agent', got {mode!r}")
        self.core, self.mode = BudgetCore(budget, **budget_options), mode
        self.budgets: dict[str, int] = {}
        self.turns: dict[str, int] = {}
        self._forced: int | None = None

    def start(self, seed: int | None, options: dict[str, Any] | None) -> dict[str, Any] | None:
        """Begin an episode; returns the options without ``budget`` for the wrapped env."""
        self.core.seed(seed)
        self._forced, env_options = self.core.take_forced(options)
        self.budgets, self.turns = {}, {}
        if self.mode == "shared":
            self._draw(_SHARED)
        if self.core.counts_episodes:
            self.core.progress += 1
        return env_options

    def _key(self, agent: str) -> str:
        return _SHARED if self.mode == "shared" else agent

    def _draw(self, key: str) -> None:
        if key not in self.budgets:
            self.budgets[key] = self.core.draw(self._forced)
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
        if self.core.counts_steps:
            self.core.progress += 1

    def turn(self, agent: str) -> int:
        self.budget(agent)
        return self.turns[self._key(agent)]

    def exhausted(self, agent: str) -> bool:
        return self.turn(agent) >= self.budget(agent)

    def annotate(self, agent: str, info: dict[str, Any]) -> dict[str, Any]:
        return self.core.annotate(info, self.budget(agent), self.turn(agent))

    def observe(self, agent: str, observation: Any) -> Any:
        return self.core.show(observation, self.budget(agent), self.turn(agent))


class _TurnBudgetMixin:
    """What both PettingZoo wrappers share: their :class:`AgentBudgets` and its public controls."""

    env: Any

    def _init_budgets(self, budget: BudgetSpec, mode: BudgetMode, noop_action: NoopAction | None,
                      budget_options: dict[str, Any]) -> None:
        self.team = AgentBudgets(budget, mode, **budget_options)
        self.noop_action = noop_action

    def observation_space(self, agent: str) -> gym.spaces.Space:
        return self.team.core.observation_space(self.env.observation_space(agent))

    def set_progress(self, progress: float) -> None:
        """Set the curriculum progress (episodes or turns, per the schedule's unit)."""
        self.team.core.set_progress(progress)


def _noop_for(noop_action: NoopAction | None, agent: str) -> Any:
    return noop_action(agent) if callable(noop_action) else noop_action


class ParallelTurnBudget(_TurnBudgetMixin, BaseParallelWrapper):
    """A turn budget (shared or per-agent) for a PettingZoo ``ParallelEnv`` (see the module docstring).

    Args:
        env: any ``ParallelEnv``.
        budget, budget_options: the budget and (as keyword arguments) the options of
            :class:`~agentgym_budget.wrappers.TurnBudget` (schedule keywords such as ``budgets=``,
            ``low=``, ``schedule=``; ``show_budget``, ``budget_template``, ``budget_position``).
        mode: ``"shared"`` (one budget of joint steps) or ``"per_agent"``.
        noop_action: per-agent mode: the action played for agents whose budget is spent
            (a value or ``agent -> action``); ``None``: they get no action.
    """

    def __init__(self, env: Any, budget: BudgetSpec, *, mode: BudgetMode = "shared",
                 noop_action: NoopAction | None = None, **budget_options: Any) -> None:
        super().__init__(env)
        self._init_budgets(budget, mode, noop_action, budget_options)
        self.agents: list[str] = []
        self._removed: set[str] = set()  # agents whose budget ran out (they left `agents`)

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


class AECTurnBudget(_TurnBudgetMixin, BaseWrapper):
    """A turn budget (shared or per-agent) for a PettingZoo AEC env (see the module docstring).

    Same arguments as :class:`ParallelTurnBudget`; a turn is one move.  Agents the budget
    truncates are shown dead (``truncations[agent] = True``, selected first, as PettingZoo does)
    until the caller's ``step(None)`` removes them; the wrapper keeps its own ``agents``,
    ``rewards``, ``terminations``, ``truncations``, ``infos`` and ``agent_selection`` for
    that, and plays ``noop_action`` in the wrapped env whenever it selects a removed agent.
    """

    def __init__(self, env: Any, budget: BudgetSpec, *, mode: BudgetMode = "shared",
                 noop_action: NoopAction | None = None, **budget_options: Any) -> None:
        super().__init__(env)
        self._init_budgets(budget, mode, noop_action, budget_options)
        self._ended: list[str] = []  # out of budget, still shown (dead) until the caller's step(None)
        self._removed: set[str] = set()  # removed for the caller; the wrapped env may still run them
        self._closing = False  # the episode is over for everyone: dead steps are served here

    def observe(self, agent: str) -> Any:
        return self.team.observe(agent, self.env.observe(agent))

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

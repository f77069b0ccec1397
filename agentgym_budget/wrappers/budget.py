"""The :class:`TurnBudget` wrapper: a per-episode turn budget — fixed, BudgetMix or curriculum.

``TurnBudget`` is :class:`gymnasium.wrappers.TimeLimit`'s bigger sibling.  Where
``TimeLimit`` has one ``max_episode_steps``, ``TurnBudget`` draws each episode's budget
from a schedule (see :mod:`agentgym_budget.wrappers.budget_spec`), reports it in ``info``,
can show the remaining budget to the agent, and truncates exactly when it is spent.  It is
the only step limit of the env it wraps: a ``TimeLimit`` inside (``gym.make`` adds one from
the registered ``max_episode_steps``) that would end an episode before its budget is raised
to that budget, so ``info["turns_left"]`` is always the truth.
"""

from __future__ import annotations

import dataclasses
from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec
from gymnasium.wrappers import TimeLimit

from agentgym_budget.wrappers.budget_core import DEFAULT_BUDGET_TEMPLATE, SCHEDULE_OPTIONS, BudgetCore
from agentgym_budget.wrappers.budget_spec import BudgetOutcomes, BudgetSchedule, BudgetSpec

__all__ = ["BUDGET_OPTIONS", "DEFAULT_BUDGET_TEMPLATE", "TurnBudget", "find_turn_budget"]


class TurnBudget(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Limit each episode to a turn budget drawn at ``reset``: fixed, BudgetMix or curriculum.

    * ``budget``: an ``int``, a budget-spec string (``"fixed:30"``, ``"mix"``,
      ``"mix:10,20,30,50"``, ``"uniform:5-50"``, ``"curriculum:50->10@20000"``) or a
      :class:`~agentgym_budget.wrappers.budget_spec.BudgetSchedule`.  ``budget="mix"``
      takes ``budgets=`` (with optional ``weights=``) or ``low=``/``high=``;
      ``budget="curriculum"`` takes ``schedule=[(progress, budget), ...]``,
      ``progress_unit=`` (``"episodes"`` or ``"steps"``) and ``interpolation=``
      (``"linear"`` or ``"step"``).
    * The budget is drawn from the wrapper's own RNG, seeded from ``reset(seed=...)``: the
      same seed gives the same budget sequence, and the wrapped env's own RNG (its task
      sequence) is left untouched.  ``reset(options={"budget": T})`` forces one episode's
      budget.
    * ``info`` gains ``budget``, ``turn`` (steps taken) and ``turns_left``.
    * ``truncated`` becomes ``True`` on the step that spends the budget (as ``TimeLimit``
      does, also when that step terminates); ``terminated`` is never touched.
    * The budget is the episode's only step limit: every ``TimeLimit`` in the wrapped chain
      shorter than the largest budget the schedule can draw is raised to it, in place (and
      again at ``reset`` for a larger forced budget); ``spec.max_episode_steps`` is ``None``,
      so ``gym.make(env.spec)`` rebuilds the env under this budget and no other limit.
    * ``show_budget=True`` appends (``budget_position="suffix"``) or prepends
      (``"prefix"``) ``budget_template.format(turns_left=..., budget=..., turn=...)`` to
      each text observation, separated by a blank line.
    * Curriculum progress counts finished resets (``"episodes"``) or steps (``"steps"``)
      of *this* env copy; a trainer that knows the global progress sets it with
      :meth:`set_progress` (``vector_env.call("set_progress", value)`` on vector envs).
    * An adaptive schedule (``"adaptive:2..8"``) draws per task from the outcome table the
      trainer hands it with :meth:`set_outcomes` (empty until then: the tightest budget).

    Example:
        >>> import gymnasium as gym
        >>> import agentgym_budget
        >>> from agentgym_budget.wrappers import TurnBudget
        >>> env = TurnBudget(gym.make("ALFWorld-v0"), budget=2, show_budget=True)
        >>> obs, info = env.reset(seed=0)
        >>> info["budget"], info["turns_left"], obs.endswith("[Turns left: 2 of 2]")
        (2, 2, True)
        >>> obs, reward, terminated, truncated, info = env.step("look")
        >>> terminated, truncated, info["turns_left"]
        (False, False, 1)
        >>> obs, reward, terminated, truncated, info = env.step("look")
        >>> terminated, truncated, info["turns_left"]
        (False, True, 0)

        A budget longer than the env's registered step limit (``KeyDoor-v0`` stops at 8) lifts it:

        >>> env = TurnBudget(gym.make("KeyDoor-v0"), budget=20)
        >>> _ = env.reset(seed=0)
        >>> steps = [env.step("look") for _ in range(20)]
        >>> [turn for turn, (*_, truncated, info) in enumerate(steps, 1) if truncated], steps[-1][4]["turns_left"]
        ([20], 0)

    Change log:
        * v0.1.0 - Initially added.
        * Unreleased - Lifts a shorter inner ``TimeLimit`` (it ended episodes before the budget while
          ``turns_left`` was still positive); ``spec.max_episode_steps`` is ``None``.
    """

    def __init__(
        self,
        env: gym.Env,
        budget: BudgetSpec,
        *,
        show_budget: bool = False,
        budget_template: str = DEFAULT_BUDGET_TEMPLATE,
        budget_position: str = "suffix",
        **schedule_options: Any,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, budget=budget, show_budget=show_budget, budget_template=budget_template,
            budget_position=budget_position, **schedule_options,
        )
        gym.Wrapper.__init__(self, env)
        self.core = BudgetCore(budget, show_budget=show_budget, budget_template=budget_template,
                               budget_position=budget_position, **schedule_options)
        if self.core.show_budget:
            self.observation_space = self.core.observation_space(env.observation_space)
        self._budget: int = self.schedule.max_budget
        self._turn: int = 0
        self._turns_allowed = 0  # steps the chain below is known to allow (no TimeLimit ends it sooner)
        self._allow(self._budget)

    # -- public state ---------------------------------------------------------------------
    @property
    def schedule(self) -> BudgetSchedule:
        return self.core.schedule

    @property
    def show_budget(self) -> bool:
        return self.core.show_budget

    @property
    def progress(self) -> float:
        """Curriculum progress: finished resets or steps of this env copy, or what :meth:`set_progress` set."""
        return self.core.progress

    @property
    def budget(self) -> int:
        """The current episode's budget."""
        return self._budget

    @property
    def turns_left(self) -> int:
        return max(self._budget - self._turn, 0)

    @property
    # gymnasium declares Env.spec a writable attribute and overrides it in Wrapper with a read-only property
    # (its TimeLimit overrides it as this does); mypy checks the override against Env's attribute.
    def spec(self) -> EnvSpec | None:  # type: ignore[override]
        """The wrapped env's spec plus this wrapper, with ``max_episode_steps=None``: the budget is the limit."""
        if self._cached_spec is None:
            spec = super().spec  # a deep copy with this wrapper added, as every gym.Wrapper builds it
            self._cached_spec = None if spec is None else dataclasses.replace(spec, max_episode_steps=None)
        return self._cached_spec

    def set_progress(self, progress: float) -> None:
        """Set the curriculum progress (episodes or env steps, per the schedule's unit)."""
        self.core.set_progress(progress)

    @property
    def outcomes(self) -> BudgetOutcomes:
        """An adaptive schedule's outcome table: what :meth:`set_outcomes` set (empty before)."""
        return self.core.outcomes

    def set_outcomes(self, outcomes: BudgetOutcomes) -> None:
        """Set the outcome table an adaptive schedule draws from (``{task key: {budget: [wins, losses]}}``)."""
        self.core.set_outcomes(outcomes)

    def _allow(self, turns: int) -> None:
        """Make sure no ``TimeLimit`` below ends an episode before ``turns`` steps."""
        if turns > self._turns_allowed:
            _lift_time_limits(self, turns)
            self._turns_allowed = turns

    # -- the gymnasium API --------------------------------------------------------------
    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env; ``truncated=True`` on the step that spends the budget."""
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._turn += 1
        if self.core.counts_steps:
            self.core.progress += 1

        if self._turn >= self._budget:
            truncated = True

        observation = self.core.show(observation, self._budget, self._turn)
        return observation, reward, terminated, truncated, self.core.annotate(info, self._budget, self._turn)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the env and draw the episode's budget (``options={"budget": T}`` forces it)."""
        self.core.seed(seed)
        forced, env_options = self.core.take_forced(options)
        observation, info = self.env.reset(seed=seed, options=env_options)
        # drawn after the env's reset, which leaves the budget's RNG alone: an adaptive draw reads the task
        key = self.core.task_key(info, seed)
        self._budget, self._turn = self.core.draw(forced, key), 0
        self._allow(self._budget)  # a forced budget may be larger than any the schedule draws
        if key:
            info["budget_key"] = key  # what the trainer counts this episode's outcome under
        if self.core.counts_episodes:
            self.core.progress += 1
        return self.core.show(observation, self._budget, 0), self.core.annotate(info, self._budget, 0)


#: The keyword options of :class:`TurnBudget` (what a budgeted-env factory routes to it, not to the env);
#: ``tests/test_turn_budget.py`` checks them against the signature.
BUDGET_OPTIONS: frozenset[str] = frozenset(
    {"budget", "show_budget", "budget_template", "budget_position"}) | SCHEDULE_OPTIONS


def _lift_time_limits(env: gym.Env, turns: int) -> None:
    """Raise every ``TimeLimit`` in ``env``'s wrapper chain shorter than ``turns`` to ``turns``, in place.

    ``TimeLimit`` has no public setter; it reads ``_max_episode_steps`` at every step and caches
    its spec in ``_cached_spec`` (as every ``gym.Wrapper`` does), the same in all gymnasium 1.x.
    Raising it in place, rather than cutting it out of the chain, keeps every wrapper's place.
    """
    chain: list[gym.Wrapper] = []
    while isinstance(env, gym.Wrapper):
        chain.append(env)
        env = env.env
    short = [w for w in chain if isinstance(w, TimeLimit) and w._max_episode_steps < turns]
    for limit in short:
        limit._max_episode_steps = turns
    if short:
        for wrapper in chain:  # specs computed from the old limit (TimeLimit caches its own) are stale
            wrapper._cached_spec = None


def find_turn_budget(env: gym.Env) -> TurnBudget | None:
    """The outermost :class:`TurnBudget` in ``env``'s wrapper chain, if any.

    Example:
        >>> import gymnasium as gym
        >>> import agentgym_budget
        >>> find_turn_budget(gym.make("KeyDoor-Budget-v0")).budget, find_turn_budget(gym.make("KeyDoor-v0"))
        (4, None)
    """
    while True:
        if isinstance(env, TurnBudget):
            return env
        if not isinstance(env, gym.Wrapper):
            return None
        env = env.env

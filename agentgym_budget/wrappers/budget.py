"""The :class:`TurnBudget` wrapper: a per-episode turn budget — fixed, BudgetMix or curriculum.

``TurnBudget`` is :class:`gymnasium.wrappers.TimeLimit`'s bigger sibling.  Where
``TimeLimit`` has one ``max_episode_steps``, ``TurnBudget`` draws each episode's budget
from a schedule (see :mod:`agentgym_budget.wrappers.budget_spec`), reports it in ``info``,
can show the remaining budget to the agent, and truncates exactly when it is spent.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agentgym_budget.wrappers.budget_spec import (
    BudgetSchedule,
    BudgetSpec,
    CurriculumBudget,
    Interpolation,
    ProgressUnit,
    parse_budget_spec,
)

__all__ = ["BUDGET_OPTIONS", "DEFAULT_BUDGET_TEMPLATE", "TurnBudget", "find_turn_budget"]

#: How the remaining budget is shown to the agent when ``show_budget=True``.
DEFAULT_BUDGET_TEMPLATE = "[Turns left: {turns_left} of {budget}]"
# Budget seeds get their own stream so that wrapping an env never changes its task sequence.
_BUDGET_STREAM = 0x7B5D6E7
# Shown-budget texts kept formatted, over all budgets (huge budgets: later turns are formatted anew).
_MAX_SHOWN_TEXTS = 4096
# Width reserved for the numbers in a shown budget (budgets forced via options may be large).
_NUMBER_WIDTH = 9


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
    * ``show_budget=True`` appends (``budget_position="suffix"``) or prepends
      (``"prefix"``) ``budget_template.format(turns_left=..., budget=..., turn=...)`` to
      each text observation, separated by a blank line.
    * Curriculum progress counts finished resets (``"episodes"``) or steps (``"steps"``)
      of *this* env copy; a trainer that knows the global progress sets it with
      :meth:`set_progress` (``vector_env.call("set_progress", value)`` on vector envs).

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

    Change log:
        * v0.1.0 - Initially added.
    """

    def __init__(
        self,
        env: gym.Env,
        budget: BudgetSpec,
        *,
        budgets: Sequence[int] | None = None,
        weights: Sequence[float] | None = None,
        low: int | None = None,
        high: int | None = None,
        schedule: Sequence[tuple[float, int]] | None = None,
        progress_unit: ProgressUnit = "episodes",
        interpolation: Interpolation = "linear",
        show_budget: bool = False,
        budget_template: str = DEFAULT_BUDGET_TEMPLATE,
        budget_position: str = "suffix",
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, budget=budget, budgets=budgets, weights=weights, low=low, high=high, schedule=schedule,
            progress_unit=progress_unit, interpolation=interpolation, show_budget=show_budget,
            budget_template=budget_template, budget_position=budget_position,
        )
        gym.Wrapper.__init__(self, env)
        self.schedule: BudgetSchedule = parse_budget_spec(
            budget, budgets=budgets, weights=weights, low=low, high=high, schedule=schedule,
            progress_unit=progress_unit, interpolation=interpolation,
        )
        self.show_budget = bool(show_budget)
        self.budget_template = budget_template
        if budget_position not in ("prefix", "suffix"):
            raise ValueError(f"budget_position must be 'prefix' or 'suffix', got {budget_position!r}")
        self.budget_position = budget_position
        if self.show_budget:
            self.observation_space = self._shown_budget_space(env.observation_space)

        self.progress: float = 0.0
        # Resolved once: step() is a hot path (a fast engine steps in tens of microseconds).
        counted_in = self.schedule.unit if isinstance(self.schedule, CurriculumBudget) else None
        self._counts_episodes, self._counts_steps = counted_in == "episodes", counted_in == "steps"
        self._prefix = budget_position == "prefix"
        # Shown-budget texts by budget, then by turn; ``_episode_texts`` is the current budget's.
        self._shown_texts: dict[int, dict[int, str]] = {}
        self._episode_texts: dict[int, str] = {}
        self._shown_count = 0  # texts cached over all budgets (at most _MAX_SHOWN_TEXTS)
        self._budget_rng: np.random.Generator = np.random.default_rng()
        self._budget: int = self.schedule.max_budget
        self._turn: int = 0

    # -- public state ---------------------------------------------------------------------
    @property
    def budget(self) -> int:
        """The current episode's budget."""
        return self._budget

    @property
    def turns_left(self) -> int:
        return max(self._budget - self._turn, 0)

    def set_progress(self, progress: float) -> None:
        """Set the curriculum progress (episodes or env steps, per the schedule's unit)."""
        if not np.isfinite(progress) or progress < 0:
            raise ValueError(f"progress must be finite and >= 0, got {progress!r}")
        self.progress = float(progress)

    # -- the gymnasium API --------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self._budget_rng = np.random.default_rng([seed, _BUDGET_STREAM])
        options = dict(options or {})
        forced = options.pop("budget", None)
        self._budget = self._draw_budget(forced)
        self._turn = 0
        if len(self._shown_texts) >= 256:  # many forced budgets: do not grow without bound
            self._shown_texts.clear()
            self._shown_count = 0
        self._episode_texts = self._shown_texts.setdefault(self._budget, {})
        obs, info = self.env.reset(seed=seed, options=options or None)
        if self._counts_episodes:
            self.progress += 1
        return self._observe(obs), self._annotate(info)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        # Written out flat: this wraps engines that step in ~10 µs, so every call counts.
        obs, reward, terminated, truncated, info = self.env.step(action)
        turn = self._turn = self._turn + 1
        budget = self._budget
        if self._counts_steps:
            self.progress += 1
        if turn >= budget:
            truncated = True
        info["budget"] = budget
        info["turn"] = turn
        info["turns_left"] = budget - turn if turn < budget else 0
        if self.show_budget:  # _show() inlined for the common case: this turn's text is cached
            shown = self._episode_texts.get(turn)
            if shown is None:
                return self._show(obs, turn), reward, terminated, truncated, info
            obs = f"{shown}\n\n{obs}" if self._prefix else f"{obs}\n\n{shown}"
        return obs, reward, terminated, truncated, info

    # -- helpers ------------------------------------------------------------------------
    def _draw_budget(self, forced: Any) -> int:
        if forced is None:
            return int(self.schedule.sample(self._budget_rng, self.progress))
        if isinstance(forced, bool) or not isinstance(forced, (int, np.integer)) or forced < 1:
            raise ValueError(f"reset(options={{'budget': ...}}) needs an int >= 1, got {forced!r}")
        return int(forced)

    def _annotate(self, info: dict[str, Any]) -> dict[str, Any]:
        info["budget"] = self._budget
        info["turn"] = self._turn
        info["turns_left"] = self._budget - self._turn if self._turn < self._budget else 0
        return info

    def _observe(self, obs: Any) -> Any:
        return self._show(obs, self._turn) if self.show_budget else obs

    def _show(self, obs: str, turn: int) -> str:
        shown = self._episode_texts.get(turn)
        if shown is None:  # a budget has few texts: format each once, keep them per budget
            shown = self.budget_template.format(turns_left=max(self._budget - turn, 0), budget=self._budget, turn=turn)
            if self._shown_count < _MAX_SHOWN_TEXTS:
                self._episode_texts[turn] = shown
                self._shown_count += 1
        return f"{shown}\n\n{obs}" if self._prefix else f"{obs}\n\n{shown}"

    def _shown_budget_space(self, space: spaces.Space) -> spaces.Text:
        if not isinstance(space, spaces.Text):
            raise ValueError(f"show_budget=True needs a Text observation space, got {space}")
        big = 10**_NUMBER_WIDTH - 1
        try:
            widest = self.budget_template.format(turns_left=big, budget=big, turn=big)
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(
                f"budget_template {self.budget_template!r} may only use {{turns_left}}, {{budget}} and {{turn}}: {e}"
            ) from e
        outside = set(widest) - set(space.character_set)
        if outside:
            raise ValueError(f"budget_template has characters outside the observation charset: {sorted(outside)}")
        return spaces.Text(
            max_length=space.max_length + len(widest) + 2,
            min_length=space.min_length,
            charset=space.character_set,
        )


#: The keyword options of :class:`TurnBudget` (what a budgeted-env factory routes to it, not to the env).
BUDGET_OPTIONS: frozenset[str] = frozenset(inspect.signature(TurnBudget.__init__).parameters) - {"self", "env"}


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

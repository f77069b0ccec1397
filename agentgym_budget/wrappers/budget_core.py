"""The budget bookkeeping every turn-budget wrapper shares: :class:`BudgetCore`.

:class:`~agentgym_budget.wrappers.TurnBudget` (one env) and the PettingZoo wrappers
(``integrations.pettingzoo_budget``: a team, or one budget per agent) differ only in *whose* turns they
count.  Everything else lives here, once:

* the schedule, parsed from ``budget`` and the schedule keywords of
  :func:`~agentgym_budget.wrappers.budget_spec.parse_budget_spec` (:data:`SCHEDULE_OPTIONS`);
* the draw: from the core's own RNG, seeded from ``reset(seed=...)`` on a stream of its own
  (:data:`BUDGET_STREAM`), so wrapping an env never changes its task sequence; a budget
  forced with ``reset(options={"budget": T})`` replaces the draw;
* curriculum progress: finished resets or steps, or set from outside with :meth:`set_progress`;
* an adaptive schedule's outcome table (:class:`~agentgym_budget.wrappers.budget_spec.OutcomeSchedule`),
  set from outside with :meth:`set_outcomes` (the trainer's, kept across updates); the draw then
  is for the episode's task key (:meth:`task_key`, from the reset's ``info`` and seed), which
  ``info["budget_key"]`` reports so that the trainer counts the outcome under it;
* ``info`` annotation (``budget``, ``turn``, ``turns_left``, and what the agent is or may be
  told: ``budget_text``, the remaining budget in ``budget_template``, and ``budget_shown``, where
  the observation shows it: ``"prefix"``, ``"suffix"`` or ``""`` for nowhere).  The one prompt
  renderer (:func:`agentgym_budget.policies.prompting.turn_message`) reads the budget line from
  these two keys only, so ``budget_template`` is the one place the line's wording is set;
* the shown text (``show_budget=True``): ``budget_template`` before or after the observation,
  and the observation space widened to fit it.

Example:
    >>> import numpy as np
    >>> core = BudgetCore("mix:3,5", show_budget=True)
    >>> core.seed(0)
    >>> budget = core.draw()
    >>> budget in (3, 5), core.show("You are in a kitchen.", budget, turn=1).splitlines()[-1]
    (True, '[Turns left: 4 of 5]')
    >>> core.annotate({}, budget=5, turn=2)
    {'budget': 5, 'turn': 2, 'turns_left': 3, 'budget_text': '[Turns left: 3 of 5]', 'budget_shown': 'suffix'}
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from gymnasium import spaces

from agentgym_budget.wrappers.budget_spec import (BudgetOutcomes, BudgetSchedule, BudgetSpec, CurriculumBudget,
                                                  OutcomeSchedule, parse_budget_spec)

__all__ = ["BUDGET_SEPARATOR", "BUDGET_STREAM", "DEFAULT_BUDGET_TEMPLATE", "SCHEDULE_OPTIONS", "BudgetCore"]

#: How the remaining budget is shown to the agent when ``show_budget=True``.
DEFAULT_BUDGET_TEMPLATE = "[Turns left: {turns_left} of {budget}]"
#: What separates the shown budget from the observation (``show_budget=True``).
BUDGET_SEPARATOR = "\n\n"
#: The seed stream of budget draws: ``default_rng([seed, BUDGET_STREAM])``, apart from the env's own.
BUDGET_STREAM = 0x7B5D6E7
#: The schedule keywords ``budget=`` takes with it: :func:`parse_budget_spec`'s keyword arguments
#: (``tests/test_turn_budget.py`` checks them against its signature).
SCHEDULE_OPTIONS: frozenset[str] = frozenset(
    {"budgets", "weights", "low", "high", "schedule", "progress_unit", "interpolation"})
# Width reserved for the numbers in a shown budget (budgets forced via options may be large).
_NUMBER_WIDTH = 9


class BudgetCore:
    """Schedule, draws, progress, annotation and shown text of a turn budget (see the module docstring)."""

    def __init__(self, budget: BudgetSpec, *, show_budget: bool = False,
                 budget_template: str = DEFAULT_BUDGET_TEMPLATE, budget_position: str = "suffix",
                 **schedule_options: Any) -> None:
        self.schedule: BudgetSchedule = parse_budget_spec(budget, **schedule_options)
        if not isinstance(budget_template, str):
            raise ValueError(f"budget_template must be a str such as {DEFAULT_BUDGET_TEMPLATE!r}, "
                             f"got {type(budget_template).__name__} {budget_template!r}")
        if budget_position not in ("prefix", "suffix"):
            raise ValueError(f"budget_position must be 'prefix' or 'suffix', got {budget_position!r}")
        self.show_budget = bool(show_budget)
        self.budget_template = budget_template
        self.budget_position = budget_position
        self.progress = 0.0
        self.outcomes: BudgetOutcomes = {}  # an OutcomeSchedule's table (set_outcomes); unused by the others
        unit = self.schedule.unit if isinstance(self.schedule, CurriculumBudget) else None
        self.counts_episodes, self.counts_steps = unit == "episodes", unit == "steps"
        self._rng: np.random.Generator = np.random.default_rng()
        self._widened: dict[int, tuple[spaces.Space, spaces.Text]] = {}

    # -- draws ----------------------------------------------------------------------------
    def seed(self, seed: int | None) -> None:
        """Reseed the draws from ``reset(seed=...)`` (``None``: keep the current stream)."""
        if seed is not None:
            self._rng = np.random.default_rng([seed, BUDGET_STREAM])

    @staticmethod
    def take_forced(options: dict[str, Any] | None) -> tuple[int | None, dict[str, Any] | None]:
        """``(forced budget or None, the options left for the wrapped env)`` from ``reset``'s options."""
        options = dict(options or {})
        forced = options.pop("budget", None)
        if forced is not None and (isinstance(forced, bool) or not isinstance(forced, (int, np.integer)) or forced < 1):
            raise ValueError(f"reset(options={{'budget': ...}}) needs an int >= 1, got {forced!r}")
        return (None if forced is None else int(forced)), (options or None)

    def task_key(self, info: dict[str, Any], seed: int | None) -> str:
        """The episode's task key for an :class:`OutcomeSchedule` (from its reset ``info`` and seed), else ``""``."""
        return self.schedule.task_key(info, seed) if isinstance(self.schedule, OutcomeSchedule) else ""

    def draw(self, forced: int | None = None, key: str = "") -> int:
        """The next budget: ``forced``, else a draw from the schedule at the current progress (an
        :class:`OutcomeSchedule`'s: for task ``key``, from :attr:`outcomes`)."""
        if forced is not None:
            return forced
        if isinstance(self.schedule, OutcomeSchedule):
            return int(self.schedule.sample_task(self._rng, self.progress, key, self.outcomes))
        return int(self.schedule.sample(self._rng, self.progress))

    def set_outcomes(self, outcomes: BudgetOutcomes) -> None:
        """Set the outcome table an adaptive schedule draws from (the trainer's; plain data, not copied)."""
        if not isinstance(outcomes, dict):
            raise ValueError(f"outcomes must be a dict {{task key: {{budget: [wins, losses]}}}}, "
                             f"got {type(outcomes).__name__}")
        self.outcomes = outcomes

    def set_progress(self, progress: float) -> None:
        """Set the curriculum progress (episodes or env steps, per the schedule's unit)."""
        if not np.isfinite(progress) or progress < 0:
            raise ValueError(f"progress must be finite and >= 0, got {progress!r}")
        self.progress = float(progress)

    # -- what the agent sees ----------------------------------------------------------------
    def annotate(self, info: dict[str, Any], budget: int, turn: int) -> dict[str, Any]:
        """``info`` with the budget, the turn, the turns left, the budget's text and where it is shown."""
        info["budget"] = budget
        info["turn"] = turn
        info["turns_left"] = budget - turn if turn < budget else 0
        info["budget_text"] = _budget_text(self.budget_template, budget, turn)
        info["budget_shown"] = self.budget_position if self.show_budget else ""
        return info

    def show(self, observation: Any, budget: int, turn: int) -> Any:
        """``observation`` with the remaining budget shown (text observations, ``show_budget=True``)."""
        if not self.show_budget or not isinstance(observation, str):
            return observation
        shown = _budget_text(self.budget_template, budget, turn)
        if self.budget_position == "prefix":
            return f"{shown}{BUDGET_SEPARATOR}{observation}"
        return f"{observation}{BUDGET_SEPARATOR}{shown}"

    def observation_space(self, space: spaces.Space) -> spaces.Space:
        """``space`` widened for the shown text; the same object for the same ``space`` (PettingZoo checks it)."""
        if not self.show_budget:
            return space
        cached = self._widened.get(id(space))
        if cached is not None and cached[0] is space:
            return cached[1]
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
        widened = spaces.Text(max_length=space.max_length + len(widest) + 2, min_length=space.min_length,
                              charset=space.character_set)
        self._widened[id(space)] = (space, widened)
        return widened


@functools.lru_cache(maxsize=4096)  # a budget has few texts; formatting one costs ~0.4 us, a hit ~0.05 us
def _budget_text(template: str, budget: int, turn: int) -> str:
    return template.format(turns_left=budget - turn if turn < budget else 0, budget=budget, turn=turn)

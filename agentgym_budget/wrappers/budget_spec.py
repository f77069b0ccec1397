"""Turn-budget schedules and the budget-spec grammar.

A *budget schedule* decides how many turns an episode may take.  Three kinds exist:

* :class:`FixedBudget` — always ``T`` turns;
* :class:`MixBudget` / :class:`UniformBudget` — BudgetMix: a budget drawn at random per
  episode, from a set (optionally weighted) or from a uniform integer range;
* :class:`CurriculumBudget` — a budget that follows a schedule of ``(progress, budget)``
  points, progress counted in episodes or env steps, with step or linear interpolation.

Budget-spec strings (what ``budget=`` accepts besides an ``int`` or a schedule object)::

    "30" | "fixed:30"                 a fixed budget of 30 turns
    "mix"                             BudgetMix over the default set (10, 20, 30, 40, 50)
                                      (or over ``budgets=`` / ``low=``..``high=`` when given)
    "mix:10,20,30,50"                 BudgetMix over that set, equal weights
    "uniform:5-50"                    BudgetMix, uniform over the integers 5..50
    "curriculum:50->10@20000"         linear from 50 turns at progress 0 to 10 at progress 20000
    "curriculum:50->10@20000steps"    same, progress counted in env steps (default: episodes)
    "curriculum:10->30@300episodes:step"  piecewise-constant (step) interpolation

Example:
    >>> import numpy as np
    >>> parse_budget_spec("mix:10,20,30")
    MixBudget(budgets=(10, 20, 30), weights=None)
    >>> parse_budget_spec("curriculum:50->10@100").value_at(50)
    30
    >>> parse_budget_spec("uniform:5-50").sample(np.random.default_rng(0), progress=0) in range(5, 51)
    True
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Union, runtime_checkable

import numpy as np

__all__ = [
    "ACCEPTED_FORMS",
    "DEFAULT_MIX_BUDGETS",
    "MAX_BUDGET",
    "BudgetSchedule",
    "CurriculumBudget",
    "FixedBudget",
    "MixBudget",
    "UniformBudget",
    "BudgetSpec",
    "parse_budget_spec",
]

#: The budgets ``"mix"`` draws from when no set or range is given.
DEFAULT_MIX_BUDGETS: tuple[int, ...] = (10, 20, 30, 40, 50)

#: The largest budget any schedule accepts: no text-env episode needs more turns, and per-turn
#: records (and the shown budget text, 9 digits wide) grow with it.
MAX_BUDGET: int = 1_000_000

ACCEPTED_FORMS = (
    f"an int T in 1..{MAX_BUDGET}, 'T', 'fixed:T', 'mix', 'mix:T1,T2,...', 'uniform:LOW-HIGH', "
    "'curriculum:START->END@N' (optionally 'N' followed by 'episodes' or 'steps', and ':linear' or ':step'), "
    "or a BudgetSchedule object"
)

ProgressUnit = Literal["episodes", "steps"]
Interpolation = Literal["linear", "step"]


@runtime_checkable
class BudgetSchedule(Protocol):
    """What :class:`~agentgym_budget.wrappers.TurnBudget` needs from a budget schedule."""

    def sample(self, rng: np.random.Generator, progress: float) -> int:
        """The budget of the next episode."""

    @property
    def max_budget(self) -> int:
        """The largest budget the schedule can return."""


def _show(value: object) -> str:
    """``repr(value)``, short: a huge int's repr fails past 4300 digits, a long string floods the message."""
    if isinstance(value, int) and abs(value) > 10**30:
        return f"an int of {len(str(value)) if value.bit_length() < 14_000 else 'over 4000'} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"


def _check_budget(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_BUDGET:
        raise ValueError(f"{where}: a budget must be an int in 1..{MAX_BUDGET}, got {_show(value)}. "
                         f"Accepted forms: {ACCEPTED_FORMS}")
    return int(value)


def _items(value: object, what: str) -> tuple[Any, ...]:
    """``value`` as a tuple, or a ``ValueError`` when it is not a sequence (an int, a string, ...).

    The items are not checked (``Any``): the schedule built from them checks each one.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(f"{what} must be a sequence, got {type(value).__name__} {_show(value)}")
    return tuple(value)


def _real(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what} must be a real number, got {type(value).__name__} {_show(value)}")
    return float(value)


@dataclass(frozen=True)
class FixedBudget:
    """Every episode gets ``budget`` turns."""

    budget: int

    def __post_init__(self) -> None:
        _check_budget(self.budget, "fixed budget")

    def sample(self, rng: np.random.Generator, progress: float) -> int:
        return self.budget

    @property
    def max_budget(self) -> int:
        return self.budget


@dataclass(frozen=True)
class MixBudget:
    """BudgetMix over a set: each episode's budget is drawn from ``budgets`` (with ``weights``)."""

    budgets: tuple[int, ...]
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        budgets = _items(self.budgets, "mix budget: budgets")
        if len(budgets) == 0:
            raise ValueError(f"mix budget: the set of budgets is empty. Accepted forms: {ACCEPTED_FORMS}")
        object.__setattr__(self, "budgets", tuple(_check_budget(b, "mix budget") for b in budgets))
        if self.weights is not None:
            weights = tuple(_real(w, "mix budget: a weight") for w in _items(self.weights, "mix budget: weights"))
            if len(weights) != len(self.budgets):
                raise ValueError(f"mix budget: {len(weights)} weights for {len(self.budgets)} budgets")
            if any(not np.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
                raise ValueError(f"mix budget: weights must be finite, >= 0 and not all 0, got {weights}")
            object.__setattr__(self, "weights", weights)

    def sample(self, rng: np.random.Generator, progress: float) -> int:
        if self.weights is None:
            return self.budgets[int(rng.integers(len(self.budgets)))]
        p = np.asarray(self.weights) / sum(self.weights)
        return self.budgets[int(rng.choice(len(self.budgets), p=p))]

    @property
    def max_budget(self) -> int:
        return max(b for b, w in zip(self.budgets, self.weights or [1] * len(self.budgets)) if w > 0)


@dataclass(frozen=True)
class UniformBudget:
    """BudgetMix over a range: each episode's budget is uniform over ``low..high`` (inclusive)."""

    low: int
    high: int

    def __post_init__(self) -> None:
        _check_budget(self.low, "uniform budget low")
        _check_budget(self.high, "uniform budget high")
        if self.low > self.high:
            raise ValueError(f"uniform budget: low={self.low} > high={self.high}. Accepted forms: {ACCEPTED_FORMS}")

    def sample(self, rng: np.random.Generator, progress: float) -> int:
        return int(rng.integers(self.low, self.high + 1))

    @property
    def max_budget(self) -> int:
        return self.high


@dataclass(frozen=True)
class CurriculumBudget:
    """A budget that follows ``schedule`` — ``(progress, budget)`` points — as training goes on.

    Before the first point the first budget holds, after the last point the last one.
    ``interpolation="linear"`` rounds the interpolated budget to the nearest int;
    ``"step"`` keeps each point's budget until the next point (AgentGym-RL's ScalingInter).
    """

    schedule: tuple[tuple[float, int], ...]
    unit: ProgressUnit = "episodes"
    interpolation: Interpolation = "linear"

    def __post_init__(self) -> None:
        schedule = _items(self.schedule, "curriculum budget: schedule")
        if len(schedule) == 0:
            raise ValueError(f"curriculum budget: empty schedule. Accepted forms: {ACCEPTED_FORMS}")
        points = []
        for point in schedule:
            pair = _items(point, "curriculum budget: a schedule point")
            if len(pair) != 2:
                raise ValueError(f"curriculum budget: schedule points are (progress, budget) pairs, got {_show(point)}")
            progress, budget = _real(pair[0], "curriculum budget: progress"), pair[1]
            if not np.isfinite(progress) or progress < 0:
                raise ValueError(f"curriculum budget: progress must be finite and >= 0, got {progress!r}")
            points.append((float(progress), _check_budget(budget, "curriculum budget")))
        if any(b[0] < a[0] for a, b in zip(points, points[1:])):
            raise ValueError(f"curriculum budget: progress values must not decrease, got {[p for p, _ in points]}")
        if self.unit not in ("episodes", "steps"):
            raise ValueError(f"curriculum budget: unit must be 'episodes' or 'steps', got {self.unit!r}")
        if self.interpolation not in ("linear", "step"):
            raise ValueError(f"curriculum budget: interpolation must be 'linear' or 'step', got {self.interpolation!r}")
        object.__setattr__(self, "schedule", tuple(points))

    def value_at(self, progress: float) -> int:
        """The budget at ``progress`` (episodes or env steps, per :attr:`unit`)."""
        xs = [p for p, _ in self.schedule]
        ys = [b for _, b in self.schedule]
        if self.interpolation == "step":
            index = int(np.searchsorted(xs, progress, side="right")) - 1
            return ys[max(index, 0)]
        return int(round(float(np.interp(progress, xs, ys))))

    def sample(self, rng: np.random.Generator, progress: float) -> int:
        return self.value_at(progress)

    @property
    def max_budget(self) -> int:
        return max(b for _, b in self.schedule)


BudgetSpec = Union[int, str, BudgetSchedule]

# ASCII digits only: \d would take "١٠" (Arabic-Indic digits) for 10.
_INT = r"\s*([0-9]+)\s*"
_CURRICULUM = re.compile(
    rf"^{_INT}->{_INT}@\s*([0-9]+(?:\.[0-9]+)?)\s*(episodes?|steps?)?\s*(?::\s*(linear|step)\s*)?$"
)


def _bad(spec: str, part: str) -> ValueError:
    return ValueError(f"malformed budget spec {_show(spec)}: bad part {_show(part)}. Accepted forms: {ACCEPTED_FORMS}")


def _to_int(digits: str, spec: str) -> int:
    if len(digits.lstrip("0")) > len(str(MAX_BUDGET)):  # before int(): Python refuses > 4300 digits
        raise ValueError(f"budget spec {_show(spec)}: {_show(digits)} is more than the largest budget, {MAX_BUDGET}")
    return int(digits)


def _parse_int(text: str, spec: str) -> int:
    if not re.fullmatch(_INT, text):
        raise _bad(spec, text)
    return _check_budget(_to_int(text.strip(), spec), f"budget spec {_show(spec)}")


def parse_budget_spec(
    spec: BudgetSpec,
    *,
    budgets: Sequence[int] | None = None,
    weights: Sequence[float] | None = None,
    low: int | None = None,
    high: int | None = None,
    schedule: Sequence[tuple[float, int]] | None = None,
    progress_unit: ProgressUnit = "episodes",
    interpolation: Interpolation = "linear",
) -> BudgetSchedule:
    """Turn ``spec`` (plus the keyword options of its mode) into a :class:`BudgetSchedule`.

    Raises ``ValueError`` naming the bad part and the accepted forms when ``spec`` or an
    option is malformed, or when options are given that the mode does not use.
    """
    if progress_unit not in ("episodes", "steps"):
        raise ValueError(f"progress_unit must be 'episodes' or 'steps', got {_show(progress_unit)}")
    if interpolation not in ("linear", "step"):
        raise ValueError(f"interpolation must be 'linear' or 'step', got {_show(interpolation)}")
    if isinstance(spec, BudgetSchedule) and not isinstance(spec, (str, int)):
        return spec
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        mode, arg, sep = "fixed", str(_check_budget(spec, "budget")), ":"
    elif isinstance(spec, str):
        mode, sep, arg = spec.strip().partition(":")
        mode = mode.strip().lower()
        if mode.isascii() and mode.isdigit() and not sep:
            mode, arg = "fixed", mode
    else:
        raise ValueError(f"budget must be an int, a str or a BudgetSchedule, got {type(spec).__name__} "
                         f"{_show(spec)}. Accepted forms: {ACCEPTED_FORMS}")
    text = str(spec)
    options = {"budgets": budgets, "weights": weights, "low": low, "high": high, "schedule": schedule}
    used = {"fixed": set(), "mix": {"budgets", "weights", "low", "high"}, "uniform": set(),
            "curriculum": {"schedule"}}
    if mode not in used:
        raise _bad(text, mode)
    unused = sorted(k for k, v in options.items() if v is not None and k not in used[mode])
    if unused:
        raise ValueError(f"budget spec {_show(text)} does not use the option(s) {unused}. Accepted forms: {ACCEPTED_FORMS}")

    if mode == "fixed":
        return FixedBudget(_parse_int(arg, text))
    if mode == "uniform":
        low_text, dash, high_text = arg.partition("-")
        if not dash:
            raise _bad(text, arg)
        return UniformBudget(_parse_int(low_text, text), _parse_int(high_text, text))
    if mode == "mix":
        if sep and not arg.strip():  # "mix:" is a set left empty, not the default set
            raise _bad(text, "(an empty set after 'mix:')")
        return _parse_mix(text, arg, budgets, weights, low, high)
    return _parse_curriculum(text, arg, schedule, progress_unit, interpolation)


def _parse_mix(text: str, arg: str, budgets, weights, low, high) -> BudgetSchedule:
    given_set, given_range = budgets is not None, low is not None or high is not None
    if sum([bool(arg.strip()), given_set, given_range]) > 1:
        raise ValueError(f"budget spec {_show(text)}: give the mix set in the string, or budgets=, or low=/high=, not several")
    if given_range:
        if low is None or high is None:
            raise ValueError(f"budget spec {_show(text)}: a uniform mix needs both low= and high=")
        if weights is not None:
            raise ValueError(f"budget spec {_show(text)}: weights= applies to a budget set, not to low=/high=")
        return UniformBudget(low, high)
    if arg.strip():
        return MixBudget(tuple(_parse_int(part, text) for part in arg.split(",")), weights)
    return MixBudget(_items(budgets, "budgets=") if given_set else DEFAULT_MIX_BUDGETS, weights)


def _parse_curriculum(text: str, arg: str, schedule, progress_unit, interpolation) -> BudgetSchedule:
    if arg.strip() and schedule is not None:
        raise ValueError(f"budget spec {_show(text)}: give the schedule in the string or as schedule=, not both")
    if schedule is not None:
        return CurriculumBudget(_items(schedule, "schedule="), progress_unit, interpolation)
    match = _CURRICULUM.match(arg)
    if not match:
        raise _bad(text, arg or "(no schedule)")
    start, end, horizon, unit, interp = match.groups()
    progress: ProgressUnit = "steps" if unit and unit.startswith("step") else ("episodes" if unit else progress_unit)
    shape: Interpolation = "step" if interp == "step" else ("linear" if interp else interpolation)
    points = ((0.0, _check_budget(_to_int(start, text), _show(text))),
              (float(horizon), _check_budget(_to_int(end, text), _show(text))))
    return CurriculumBudget(points, progress, shape)

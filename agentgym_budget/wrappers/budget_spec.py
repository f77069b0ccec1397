"""Turn-budget schedules and the budget-spec grammar.

A *budget schedule* decides how many turns an episode may take.  Four kinds exist:

* :class:`FixedBudget` — always ``T`` turns;
* :class:`MixBudget` / :class:`UniformBudget` — BudgetMix: a budget drawn at random per
  episode, from a set (optionally weighted) or from a uniform integer range;
* :class:`CurriculumBudget` — a budget that follows a schedule of ``(progress, budget)``
  points, progress counted in episodes or env steps, with step or linear interpolation;
* :class:`AdaptiveBudget` — per task, a budget chosen from the agent's outcomes so far (an
  :class:`OutcomeSchedule`: the trainer feeds it every finished episode).

Budget-spec strings (what ``budget=`` accepts besides an ``int`` or a schedule object)::

    "30" | "fixed:30"                 a fixed budget of 30 turns
    "mix"                             BudgetMix over the default set (10, 20, 30, 40, 50)
                                      (or over ``budgets=`` / ``low=``..``high=`` when given)
    "mix:10,20,30,50"                 BudgetMix over that set, equal weights
    "uniform:5-50"                    BudgetMix, uniform over the integers 5..50
    "curriculum:50->10@20000"         linear from 50 turns at progress 0 to 10 at progress 20000
    "curriculum:50->10@20000steps"    same, progress counted in env steps (default: episodes)
    "curriculum:10->30@300episodes:step"  piecewise-constant (step) interpolation
    "adaptive:2..8"                   per task, the tightest budget of 2..8 whose success is still
                                      uncertain, the largest with probability 0.1 (AdaptiveBudget)
    "adaptive:2,3,4,6:explore=0.2,by=seed"  over a set; options after a second ':'

Each mode is registered by name (:func:`register_budget_schedule`: the parser of its strings,
its accepted forms, the keyword options it takes), so a new schedule string is one class and one
registration; :func:`parse_budget_spec` only looks the mode up.

Example:
    >>> import numpy as np
    >>> parse_budget_spec("mix:10,20,30")
    MixBudget(budgets=(10, 20, 30), weights=None)
    >>> parse_budget_spec("curriculum:50->10@100").value_at(50)
    30
    >>> parse_budget_spec("uniform:5-50").sample(np.random.default_rng(0), progress=0) in range(5, 51)
    True
    >>> parse_budget_spec("adaptive:2..4:explore=0.2")
    AdaptiveBudget(budgets=(2, 3, 4), explore=0.2, by='task', hopeless=0.1, mastered=0.9, pool=True, memory=40)
"""

from __future__ import annotations

import inspect
import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Union, runtime_checkable

import numpy as np

__all__ = [
    "ACCEPTED_FORMS",
    "DEFAULT_MIX_BUDGETS",
    "MAX_BUDGET",
    "AdaptiveBudget",
    "BudgetOutcomes",
    "BudgetSchedule",
    "CurriculumBudget",
    "FixedBudget",
    "MixBudget",
    "OutcomeSchedule",
    "ScheduleForm",
    "UniformBudget",
    "BudgetSpec",
    "parse_budget_spec",
    "register_budget_schedule",
    "unregister_budget_schedule",
]

#: The budgets ``"mix"`` draws from when no set or range is given.
DEFAULT_MIX_BUDGETS: tuple[int, ...] = (10, 20, 30, 40, 50)

#: The largest budget any schedule accepts: no text-env episode needs more turns, and per-turn
#: records (and the shown budget text, 9 digits wide) grow with it.
MAX_BUDGET: int = 1_000_000

#: What ``budget=`` accepts, in words (every error of the grammar ends with it).  Rebuilt from the
#: registered modes by :func:`register_budget_schedule`; the errors read the current text.
ACCEPTED_FORMS = f"an int T in 1..{MAX_BUDGET}, 'T', or a BudgetSchedule object"

# ASCII digits only: \d would take "١٠" (Arabic-Indic digits) for 10.
_INT = r"\s*([0-9]+)\s*"
_CURRICULUM = re.compile(
    rf"^{_INT}->{_INT}@\s*([0-9]+(?:\.[0-9]+)?)\s*(episodes?|steps?)?\s*(?::\s*(linear|step)\s*)?$"
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

    @classmethod
    def from_spec(cls, spec: str, arg: str | None) -> FixedBudget:
        """``"fixed:T"`` (and ``"T"``, ``T``): ``arg`` is ``T``."""
        return cls(_parse_int(arg or "", spec))


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

    @classmethod
    def from_spec(cls, spec: str, arg: str | None, budgets: Sequence[int] | None = None,
                  weights: Sequence[float] | None = None, low: int | None = None,
                  high: int | None = None) -> MixBudget | UniformBudget:
        """``"mix"`` (the default set, or ``budgets=`` / ``low=``..``high=``) and ``"mix:T1,T2,..."``."""
        if arg is not None and not arg.strip():  # "mix:" is a set left empty, not the default set
            raise _bad(spec, "(an empty set after 'mix:')")
        arg = arg or ""
        given_set, given_range = budgets is not None, low is not None or high is not None
        if sum([bool(arg.strip()), given_set, given_range]) > 1:
            raise ValueError(f"budget spec {_show(spec)}: give the mix set in the string, or budgets=, or low=/high=, "
                             "not several")
        if given_range:
            if low is None or high is None:
                raise ValueError(f"budget spec {_show(spec)}: a uniform mix needs both low= and high=")
            if weights is not None:
                raise ValueError(f"budget spec {_show(spec)}: weights= applies to a budget set, not to low=/high=")
            return UniformBudget(low, high)
        if arg.strip():
            return cls(tuple(_parse_int(part, spec) for part in arg.split(",")), _maybe_tuple(weights))
        return cls(_items(budgets, "budgets=") if given_set else DEFAULT_MIX_BUDGETS, _maybe_tuple(weights))


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

    @classmethod
    def from_spec(cls, spec: str, arg: str | None) -> UniformBudget:
        """``"uniform:LOW-HIGH"``."""
        low_text, dash, high_text = (arg or "").partition("-")
        if not dash:
            raise _bad(spec, arg or "")
        return cls(_parse_int(low_text, spec), _parse_int(high_text, spec))


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

    @classmethod
    def from_spec(cls, spec: str, arg: str | None, schedule: Sequence[tuple[float, int]] | None = None,
                  progress_unit: ProgressUnit = "episodes", interpolation: Interpolation = "linear") -> CurriculumBudget:
        """``"curriculum:START->END@N[episodes|steps][:linear|:step]"``, or ``"curriculum"`` with ``schedule=``."""
        arg = arg or ""
        if arg.strip() and schedule is not None:
            raise ValueError(f"budget spec {_show(spec)}: give the schedule in the string or as schedule=, not both")
        if schedule is not None:
            return cls(_items(schedule, "schedule="), progress_unit, interpolation)
        match = _CURRICULUM.match(arg)
        if not match:
            raise _bad(spec, arg or "(no schedule)")
        start, end, horizon, unit, interp = match.groups()
        progress: ProgressUnit = "steps" if unit and unit.startswith("step") else ("episodes" if unit else progress_unit)
        shape: Interpolation = "step" if interp == "step" else ("linear" if interp else interpolation)
        points = ((0.0, _check_budget(_to_int(start, spec), _show(spec))),
                  (float(horizon), _check_budget(_to_int(end, spec), _show(spec))))
        return cls(points, progress, shape)


@runtime_checkable
class OutcomeSchedule(BudgetSchedule, Protocol):
    """A schedule that draws per task from the outcomes so far (:class:`AdaptiveBudget`).

    The trainer feeds it: after every update it :meth:`record` s each finished episode in one
    :data:`BudgetOutcomes` table and hands the table to every env copy (local, vectorised or on Ray
    actors) with the run's progress; :class:`~agentgym_budget.wrappers.TurnBudget` draws with
    :meth:`sample_task` from the table it was handed.  The table is plain data (saved in checkpoints).
    """

    def task_key(self, info: Mapping[str, Any], seed: int | None) -> str:
        """The key an episode's outcomes are counted under, from its reset ``info`` and reset seed."""

    def sample_task(self, rng: np.random.Generator, progress: float, key: str, outcomes: BudgetOutcomes) -> int:
        """The budget of the next episode of task ``key``, given ``outcomes``."""

    def record(self, outcomes: BudgetOutcomes, key: str, budget: int, turns: int, won: bool,
               terminated: bool) -> None:
        """Count one finished episode of task ``key`` (its budget, turns taken, win, MDP end) in ``outcomes``."""


#: Outcome counts of an :class:`OutcomeSchedule`: ``{task key: {budget: [wins, losses]}}`` (plain data).
BudgetOutcomes = MutableMapping[str, dict[int, list[float]]]

TaskKeyRule = Literal["task", "seed", "all"]
# One posterior standard deviation: how sure a budget's success must be to be called hopeless or mastered.
_CONFIDENCE_SD = 1.0
# More budgets than any text-env episode needs to tell apart; each is a counted cell per task.
_MAX_ADAPTIVE_BUDGETS = 64


@dataclass(frozen=True)
class AdaptiveBudget:
    """Per task, the tightest budget whose success is still uncertain; the largest with probability ``explore``.

    For each task key (:meth:`task_key`: ``by="task"`` the reset's ``info["task_id"]``, else
    ``info["task"]``, else the reset seed where an env names no task — KeyDoor's and
    KeyDoorRooms' ``task_id``, the door pair, is a family of set-ups; ``"seed"`` the reset seed,
    for envs whose seeds repeat tasks; ``"all"`` one key for every episode, where tasks are
    unique) and each budget, the success rate has a Beta(1 + wins, 1 + losses)
    posterior.  A budget is *hopeless* when its posterior mean plus one sd is below
    ``hopeless``, *mastered* when the mean minus one sd is above ``mastered``, else *uncertain*:
    the budgets whose groups still hold mixed outcomes, i.e. GRPO learning signal.  A draw is the
    largest budget with probability ``explore``; else the tightest uncertain budget; else (every
    budget settled) the tightest one not hopeless; else the largest.

    ``pool=True`` counts each episode at every budget its outcome decides, not only at the one it
    was played with: a win in ``t`` turns is a win at every budget >= ``t`` and a loss (time-out)
    below ``t``; a loss by the env (``terminated``) a loss at every budget; a time-out at ``B`` a
    loss at every budget <= ``B`` (larger ones stay unknown).  That is exact when the agent's
    play does not depend on its budget (``show_budget=False``, the trainer's default), an
    approximation when it is shown.  ``pool=False`` counts the played budget only.  The agent
    changes as it trains, so old outcomes fade: once a cell holds more than ``memory`` episodes,
    its counts are scaled down to ``memory`` (same ratio), and a budget written off as hopeless
    comes back when wins at larger budgets show it is now within reach.

    Example (an agent that always wins in 4 turns):
        >>> schedule, outcomes, rng = AdaptiveBudget((2, 3, 4, 6, 8), explore=0.0), {}, np.random.default_rng(0)
        >>> schedule.sample_task(rng, 0, "red-blue", outcomes)  # nothing known: the tightest budget
        2
        >>> for _ in range(60):
        ...     budget = schedule.sample_task(rng, 0, "red-blue", outcomes)
        ...     schedule.record(outcomes, "red-blue", budget, turns=min(budget, 4), won=budget >= 4, terminated=budget >= 4)
        >>> schedule.states(outcomes, "red-blue"), schedule.sample_task(rng, 0, "red-blue", outcomes)
        (['hopeless', 'hopeless', 'mastered', 'mastered', 'mastered'], 4)
    """

    budgets: tuple[int, ...]
    explore: float = 0.1
    by: TaskKeyRule = "task"
    hopeless: float = 0.1
    mastered: float = 0.9
    pool: bool = True
    memory: int = 40

    def __post_init__(self) -> None:
        budgets = tuple(_check_budget(b, "adaptive budget") for b in _items(self.budgets, "adaptive budget: budgets"))
        if not budgets:
            raise ValueError(f"adaptive budget: the set of budgets is empty. Accepted forms: {ACCEPTED_FORMS}")
        if len(set(budgets)) != len(budgets) or len(budgets) > _MAX_ADAPTIVE_BUDGETS:
            raise ValueError(f"adaptive budget: budgets must be distinct, at most {_MAX_ADAPTIVE_BUDGETS}, "
                             f"got {_show(budgets)}")
        object.__setattr__(self, "budgets", tuple(sorted(budgets)))
        for name in ("explore", "hopeless", "mastered"):
            value = _real(getattr(self, name), f"adaptive budget: {name}")
            if not 0 <= value <= 1:
                raise ValueError(f"adaptive budget: {name} must be in 0..1, got {value!r}")
            object.__setattr__(self, name, value)
        if not self.hopeless < self.mastered:
            raise ValueError(f"adaptive budget: hopeless={self.hopeless} must be below mastered={self.mastered}")
        if self.by not in ("task", "seed", "all"):
            raise ValueError(f"adaptive budget: by must be 'task', 'seed' or 'all', got {_show(self.by)}")
        if not isinstance(self.pool, bool):
            raise ValueError(f"adaptive budget: pool must be a bool, got {_show(self.pool)}")
        if isinstance(self.memory, bool) or not isinstance(self.memory, (int, np.integer)) or self.memory < 1:
            raise ValueError(f"adaptive budget: memory must be an int >= 1 (episodes per cell), got {_show(self.memory)}")

    @property
    def max_budget(self) -> int:
        return self.budgets[-1]

    def sample(self, rng: np.random.Generator, progress: float) -> int:
        """A draw with no outcomes known (outside a trainer that feeds them): the tightest, or the largest."""
        return self.sample_task(rng, progress, "", {})

    def task_key(self, info: Mapping[str, Any], seed: int | None) -> str:
        if self.by == "all":
            return "*"
        task = info.get("task_id") or info.get("task") if self.by == "task" else None
        if task:
            return str(task)
        return "" if seed is None else f"seed:{seed}"

    def states(self, outcomes: Mapping[str, Mapping[int, Sequence[float]]], key: str) -> list[str]:
        """``"hopeless"``, ``"uncertain"`` or ``"mastered"`` for each budget of task ``key``."""
        counts = outcomes.get(key, {})
        return [self._state(*counts.get(budget, (0, 0))) for budget in self.budgets]

    def _state(self, wins: float, losses: float) -> str:
        mean = (1 + wins) / (2 + wins + losses)  # Beta(1 + wins, 1 + losses)
        sd = math.sqrt(mean * (1 - mean) / (3 + wins + losses))
        if mean + _CONFIDENCE_SD * sd < self.hopeless:
            return "hopeless"
        if mean - _CONFIDENCE_SD * sd > self.mastered:
            return "mastered"
        return "uncertain"

    def sample_task(self, rng: np.random.Generator, progress: float, key: str, outcomes: BudgetOutcomes) -> int:
        if rng.random() < self.explore:  # one draw every time, so the stream does not depend on explore
            return self.budgets[-1]
        states = self.states(outcomes, key)
        for wanted in ("uncertain", "mastered"):
            if wanted in states:
                return self.budgets[states.index(wanted)]
        return self.budgets[-1]

    def record(self, outcomes: BudgetOutcomes, key: str, budget: int, turns: int, won: bool,
               terminated: bool) -> None:
        counts = outcomes.setdefault(key, {})
        for b in self.budgets:
            if not self.pool:
                win: bool | None = bool(won) if b == budget else None
            elif won:
                win = b >= turns
            else:  # lost by the env: a loss everywhere; timed out at `budget`: unknown above it
                win = False if terminated or b <= budget else None
            if win is not None:
                cell = counts.setdefault(b, [0.0, 0.0])
                cell[0 if win else 1] += 1
                if sum(cell) > self.memory:  # forget: the agent that lost long ago is not today's
                    cell[:] = [count * self.memory / sum(cell) for count in cell]

    @classmethod
    def from_spec(cls, spec: str, arg: str | None, budgets: Sequence[int] | None = None,
                  low: int | None = None, high: int | None = None) -> AdaptiveBudget:
        """``"adaptive:LOW..HIGH"`` or ``"adaptive:T1,T2,..."``, then ``":key=value,..."`` options
        (``explore``, ``by``, ``hopeless``, ``mastered``, ``pool``, ``memory``); or ``"adaptive"`` with ``budgets=`` /
        ``low=``..``high=``."""
        budget_text, _, option_text = (arg or "").partition(":")
        given = [bool(budget_text.strip()), budgets is not None, low is not None or high is not None]
        if sum(given) != 1:
            raise ValueError(f"budget spec {_show(spec)}: give the adaptive budgets once: in the string "
                             "('adaptive:2..8' or 'adaptive:2,4,8'), or budgets=, or low= and high=")
        if given[2]:
            if low is None or high is None:
                raise ValueError(f"budget spec {_show(spec)}: an adaptive range needs both low= and high=")
            chosen: tuple[Any, ...] = tuple(range(_check_budget(low, "low="), _check_budget(high, "high=") + 1))
        elif given[1]:
            chosen = _items(budgets, "budgets=")
        else:
            chosen = _adaptive_budgets(budget_text, spec)
        return cls(chosen, **_adaptive_options(option_text, spec))


_RANGE = re.compile(rf"^{_INT}\.\.{_INT}$")
_ADAPTIVE_OPTIONS: dict[str, Callable[[str], Any]] = {
    "explore": float, "hopeless": float, "mastered": float, "by": str.strip, "memory": int,
    "pool": lambda text: {"yes": True, "true": True, "no": False, "false": False}[text.strip().lower()],
}


def _adaptive_budgets(text: str, spec: str) -> tuple[int, ...]:
    match = _RANGE.match(text)
    if not match:
        return tuple(_parse_int(part, spec) for part in text.split(","))
    low, high = (_check_budget(_to_int(m, spec), f"budget spec {_show(spec)}") for m in match.groups())
    if low > high or high - low >= _MAX_ADAPTIVE_BUDGETS:
        raise ValueError(f"budget spec {_show(spec)}: the range {low}..{high} must go up and hold at most "
                         f"{_MAX_ADAPTIVE_BUDGETS} budgets")
    return tuple(range(low, high + 1))


def _adaptive_options(text: str, spec: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for part in text.split(",") if text.strip() else ():
        name, eq, value = part.partition("=")
        name = name.strip().lower()
        if not eq or name not in _ADAPTIVE_OPTIONS or name in options:
            raise ValueError(f"budget spec {_show(spec)}: bad adaptive option {_show(part)}; options are "
                             f"{', '.join(f'{n}=...' for n in _ADAPTIVE_OPTIONS)}, each at most once")
        try:
            options[name] = _ADAPTIVE_OPTIONS[name](value)
        except (ValueError, KeyError):
            raise ValueError(f"budget spec {_show(spec)}: bad value in adaptive option {_show(part)} "
                             "(explore, hopeless, mastered: a number in 0..1; by: task, seed or all; "
                             "pool: yes or no; memory: an int >= 1)") from None
    return options


BudgetSpec = Union[int, str, BudgetSchedule]

#: ``parse(spec, arg, **options) -> BudgetSchedule``: ``arg`` is what follows the mode's first ``:``
#: (``None`` without one), ``options`` the keyword options of :func:`parse_budget_spec` the mode takes.
ScheduleParser = Callable[..., BudgetSchedule]
# parse_budget_spec's keyword options that default to None: refused by a mode that does not take them.
_OPTIONAL_KEYWORDS = ("budgets", "weights", "low", "high", "schedule")


@dataclass(frozen=True)
class ScheduleForm:
    """A registered budget-spec mode: the parser of ``"<name>:..."`` strings, its forms and keyword options."""

    name: str
    parse: ScheduleParser
    forms: tuple[str, ...]
    options: frozenset[str]


_SCHEDULES: dict[str, ScheduleForm] = {}


def register_budget_schedule(name: str, parse: ScheduleParser, *, forms: Sequence[str],
                             options: Iterable[str] = ()) -> None:
    """Make ``"<name>"`` and ``"<name>:..."`` budget specs parse with ``parse`` (see :data:`ScheduleParser`).

    ``forms`` are the accepted forms in words (added to :data:`ACCEPTED_FORMS`, which every error of
    the grammar ends with); ``options`` the keyword options of :func:`parse_budget_spec` it takes
    (any other one given is refused).

    Example:
        >>> @dataclass(frozen=True)
        ... class Doubling:
        ...     start: int
        ...     def sample(self, rng, progress): return min(self.start * 2 ** int(progress // 100), 64)
        ...     max_budget = 64
        ...     @classmethod
        ...     def from_spec(cls, spec, arg): return cls(int(arg))
        >>> register_budget_schedule("doubling", Doubling.from_spec, forms=["'doubling:START'"])
        >>> parse_budget_spec("doubling:4").sample(None, progress=250)
        16
        >>> unregister_budget_schedule("doubling")
    """
    key = name.strip().lower() if isinstance(name, str) else ""
    if not (key.isascii() and key.isidentifier()) or key in _SCHEDULES:
        raise ValueError(f"budget schedule name must be a new identifier, got {_show(name)} "
                         f"(registered: {sorted(_SCHEDULES)})")
    keywords = frozenset(options)
    unknown = keywords - set(inspect.signature(parse_budget_spec).parameters) - {"spec"}
    if unknown:
        raise ValueError(f"budget schedule {key!r}: {sorted(unknown)} are not keyword options of parse_budget_spec")
    _SCHEDULES[key] = ScheduleForm(key, parse, tuple(forms), keywords)
    _refresh_accepted_forms()


def unregister_budget_schedule(name: str) -> None:
    """Remove a mode :func:`register_budget_schedule` added (tests, plug-ins)."""
    _SCHEDULES.pop(name, None)
    _refresh_accepted_forms()


def _refresh_accepted_forms() -> None:
    global ACCEPTED_FORMS
    forms = [form for schedule in _SCHEDULES.values() for form in schedule.forms]
    ACCEPTED_FORMS = f"an int T in 1..{MAX_BUDGET}, 'T', " + ", ".join(forms) + ", or a BudgetSchedule object"


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


def _maybe_tuple(value: object) -> tuple[Any, ...] | None:
    return None if value is None else _items(value, "mix budget: weights")


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

    The mode (the text before the first ``:``; an int or a string of digits is ``fixed``) is
    looked up among the registered ones (:func:`register_budget_schedule`).  Raises ``ValueError``
    naming the bad part and the accepted forms when ``spec`` or an option is malformed, or when
    options are given that the mode does not use.
    """
    if progress_unit not in ("episodes", "steps"):
        raise ValueError(f"progress_unit must be 'episodes' or 'steps', got {_show(progress_unit)}")
    if interpolation not in ("linear", "step"):
        raise ValueError(f"interpolation must be 'linear' or 'step', got {_show(interpolation)}")
    if isinstance(spec, BudgetSchedule) and not isinstance(spec, (str, int)):
        return spec
    arg: str | None
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        mode, arg = "fixed", str(_check_budget(spec, "budget"))
    elif isinstance(spec, str):
        mode, sep, arg = spec.strip().partition(":")
        mode = mode.strip().lower()
        if mode.isascii() and mode.isdigit() and not sep:
            mode, arg = "fixed", mode
        elif not sep:
            arg = None
    else:
        raise ValueError(f"budget must be an int, a str or a BudgetSchedule, got {type(spec).__name__} "
                         f"{_show(spec)}. Accepted forms: {ACCEPTED_FORMS}")
    text = str(spec)
    form = _SCHEDULES.get(mode)
    if form is None:
        raise _bad(text, mode)
    options = {"budgets": budgets, "weights": weights, "low": low, "high": high, "schedule": schedule,
               "progress_unit": progress_unit, "interpolation": interpolation}
    unused = sorted(k for k in _OPTIONAL_KEYWORDS if options[k] is not None and k not in form.options)
    if unused:
        raise ValueError(f"budget spec {_show(text)} does not use the option(s) {unused}. Accepted forms: {ACCEPTED_FORMS}")
    return form.parse(text, arg, **{k: options[k] for k in form.options})


register_budget_schedule("fixed", FixedBudget.from_spec, forms=["'fixed:T'"])
register_budget_schedule("mix", MixBudget.from_spec, forms=["'mix'", "'mix:T1,T2,...'"],
                         options=["budgets", "weights", "low", "high"])
register_budget_schedule("uniform", UniformBudget.from_spec, forms=["'uniform:LOW-HIGH'"])
register_budget_schedule(
    "curriculum", CurriculumBudget.from_spec,
    forms=["'curriculum:START->END@N' (optionally 'N' followed by 'episodes' or 'steps', and ':linear' or ':step')"],
    options=["schedule", "progress_unit", "interpolation"])
register_budget_schedule(
    "adaptive", AdaptiveBudget.from_spec,
    forms=["'adaptive:LOW..HIGH' or 'adaptive:T1,T2,...' (optionally ':explore=P,by=task|seed|all,hopeless=P,"
           "mastered=P,pool=yes|no,memory=N')"],
    options=["budgets", "low", "high"])

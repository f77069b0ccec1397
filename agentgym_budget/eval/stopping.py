"""Stopping rules: abandon an attempt early and spend its turns on the next one, scored exactly from records.

A :class:`StoppingRule` looks at one recorded attempt and says after which turn it would have
been abandoned (:meth:`StoppingRule.cut_turn`; ``None``: never).  Rules here only read the
per-turn facts every :class:`~agentgym_budget.episodes.records.EpisodeRecord` keeps, so they only
*cut a recorded attempt short*: the attempt under the rule is the recorded one's first turns, and
its outcome and cost follow from the record without re-running anything.

* ``never`` — never cuts (the plain sequential Pass@(K,T) retry loop);
* ``no-progress:m`` — abandon after ``m`` turns in a row in which the expert's remaining plan
  (``plan_left``) did not shrink below its best so far (turns with an unknown plan never trigger);
* ``no-effect:m`` — abandon after ``m`` turns in a row whose action had no effect (``no_effect``).

Rules that need live signals (a process reward model, the model's own "give up") cannot be read
back from a record; they are not implemented here.

**The experiment scored.**  Attempts at a task are run one after another, each of at most ``t``
turns, each cut by the rule; the loop stops at the first win, after ``k`` attempts, or when
``budget`` turns in all are spent (the attempt running then is cut at the budget: it wins iff it
wins within the turns left).  An attempt won at turn ``w`` with the rule cutting at ``c``
counts as won iff ``w <= c`` (the rule is checked after a turn that did not end the episode).
Its **success** is whether a win happened and its **cost** the turns spent.

**Estimate.**  With ``n`` recorded attempts of a task (``k <= n``), the estimate is the exact
expectation of the experiment over a uniformly random order of the ``n`` attempts (computed by
recursion over the subsets already played — ``2^n`` states — not by sampling).  As every fixed
order of i.i.d. attempts is a sample of the experiment with fresh attempts, the average over
orders is unbiased for its success and expected turns (for ``budget`` ≥ ``k·t`` and ``never``
it *is* ``pass@k`` at ``t`` and the sequential cost of :mod:`~agentgym_budget.eval.cost`).  A
rule point is the mean over tasks; its CI a percentile bootstrap over tasks.

Example:
    >>> rule = parse_rule("no-effect:2")
    >>> rule.name, rule.cut_turn(_toy([0, 1, 1, 0], None))
    ('no-effect:2', 3)
    >>> parse_rule("no-effect:0")
    Traceback (most recent call last):
    ...
    ValueError: stopping rule 'no-effect:0': m must be a whole number >= 1
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agentgym_budget.episodes.records import UNKNOWN, EpisodeRecord
from agentgym_budget.eval.frontier import Frontier, FrontierCell

__all__ = ["RULES", "STOPPING_FILE", "NeverStop", "NoEffect", "NoProgress", "RulePoint", "StoppingRule", "attempt_outcome",
           "best_fixed", "fixed_mix", "parse_rule", "parse_rules", "rule_frontier", "rule_point", "rule_points",
           "rule_rows", "rule_settings", "save_stopping_csv", "stopping_table", "task_value", "task_values"]


@runtime_checkable
class StoppingRule(Protocol):
    """Says after which turn a recorded attempt is abandoned; ``name`` is its spec (``no-effect:2``)."""

    @property
    def name(self) -> str: ...

    def cut_turn(self, record: EpisodeRecord) -> int | None:
        """The turn after which the attempt is abandoned (1-based), ``None`` if the rule never triggers."""
        ...


@dataclass(frozen=True)
class NeverStop:
    """Never abandons an attempt: the plain sequential retry loop."""

    @property
    def name(self) -> str:
        return "never"

    def cut_turn(self, record: EpisodeRecord) -> int | None:
        return None


def _first_run(flags: Sequence[bool], m: int) -> int | None:
    """The 1-based turn that completes the first run of ``m`` true flags in a row (``None``: no such run)."""
    run = 0
    for turn, flag in enumerate(flags, start=1):
        run = run + 1 if flag else 0
        if run >= m:
            return turn
    return None


@dataclass(frozen=True)
class NoEffect:
    """Abandons after ``m`` turns in a row whose action had no effect (the record's ``no_effect``)."""

    m: int

    @property
    def name(self) -> str:
        return f"no-effect:{self.m}"

    def cut_turn(self, record: EpisodeRecord) -> int | None:
        return _first_run([bool(x) for x in record.no_effect], self.m)


@dataclass(frozen=True)
class NoProgress:
    """Abandons after ``m`` turns in a row in which the expert's remaining plan did not reach a new low.

    Progress is ``plan_left`` dropping below the lowest value seen so far (from ``plan_length`` at
    reset); a turn whose plan is unknown (``-1``) is neither progress nor stall: it resets the count.
    """

    m: int

    @property
    def name(self) -> str:
        return f"no-progress:{self.m}"

    def cut_turn(self, record: EpisodeRecord) -> int | None:
        best = record.plan_length if record.plan_length != UNKNOWN else math.inf
        stalls = []
        for left in record.plan_left:
            if left == UNKNOWN:
                stalls.append(False)
                continue
            stalls.append(left >= best)
            best = min(best, left)
        return _first_run(stalls, self.m)


#: Rule names and their classes (``never`` takes no parameter, the others ``:m``).
RULES: dict[str, type] = {"never": NeverStop, "no-effect": NoEffect, "no-progress": NoProgress}


def parse_rule(spec: str) -> StoppingRule:
    """The rule of a spec (``never``, ``no-effect:2``, ``no-progress:3``); a bad spec is a one-line ``ValueError``."""
    name, _, arg = spec.strip().partition(":")
    if name not in RULES:
        raise ValueError(f"stopping rule {spec!r}: unknown rule {name!r}; one of never, no-effect:M, no-progress:M")
    if name == "never":
        if arg:
            raise ValueError(f"stopping rule {spec!r}: 'never' takes no parameter")
        return NeverStop()
    if not arg.isdigit() or int(arg) < 1:
        raise ValueError(f"stopping rule {spec!r}: m must be a whole number >= 1")
    rule: StoppingRule = RULES[name](int(arg))
    return rule


def parse_rules(specs: str) -> list[StoppingRule]:
    """The rules of a comma-separated list (``no-progress:3,no-effect:2``).

    Example:
        >>> [r.name for r in parse_rules("no-progress:3, no-effect:2")]
        ['no-progress:3', 'no-effect:2']
    """
    parts = [part for part in specs.split(",") if part.strip()]
    if not parts:
        raise ValueError(f"stopping rules {specs!r}: give at least one, e.g. no-progress:3,no-effect:2")
    return [parse_rule(part) for part in parts]


def attempt_outcome(record: EpisodeRecord, rule: StoppingRule, t: int) -> tuple[bool, int, int]:
    """``(won, turns, win_turn)`` of the attempt capped at ``t`` turns and cut by ``rule``.

    ``win_turn`` is the turn it is won at (``0`` if not won), to cut it again at a total budget.
    """
    cut = rule.cut_turn(record)
    limit = t if cut is None else min(t, cut)
    if record.won_turn is not None and record.won_turn <= limit:
        return True, record.won_turn, record.won_turn
    return False, min(record.turns, limit), 0


def task_value(outcomes: Sequence[tuple[bool, int, int]], k: int, budget: float) -> tuple[float, float]:
    """Exact ``(success, expected turns)`` over a uniformly random order of a task's attempts.

    At most ``k`` attempts, at most ``budget`` turns in all (``math.inf``: no total budget).

    Example:
        >>> task_value([(True, 3, 3), (False, 10, 0)], k=2, budget=math.inf)   # 1/2: win at 3; 1/2: 10 then 3
        (1.0, 8.0)
    """
    n = len(outcomes)
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= {n} attempts, got k={k}")

    @lru_cache(maxsize=None)
    def value(played: int, spent: int, count: int) -> tuple[float, float]:
        if count == k or spent >= budget:
            return 0.0, float(spent)
        left = [i for i in range(n) if not played >> i & 1]
        success = cost = 0.0
        for i in left:
            won, turns, win_turn = outcomes[i]
            room = budget - spent
            if turns >= room:  # the budget runs out during this attempt
                success += float(won and win_turn <= room)
                cost += spent + min(turns, room)
            elif won:
                success, cost = success + 1.0, cost + spent + turns
            else:
                s, c = value(played | 1 << i, spent + turns, count + 1)
                success, cost = success + s, cost + c
        return success / len(left), cost / len(left)

    return value(0, 0, 0)


@dataclass(frozen=True)
class RulePoint:
    """One rule at one (k, t, budget): success (mean over tasks, bootstrap CI) against expected turns."""

    rule: str
    k: int
    t: int
    budget: float
    success: float
    ci_low: float
    ci_high: float
    turns: float
    turns_ci_low: float
    turns_ci_high: float
    cut_rate: float

    @property
    def label(self) -> str:
        total = "" if math.isinf(self.budget) else f" ≤{self.budget:g}"
        return f"{self.rule} {self.k}×{self.t}{total}"


def _by_task(records: Sequence[EpisodeRecord]) -> list[list[EpisodeRecord]]:
    """The records grouped by task (one per attempt: the one of the largest budget), in task order."""
    best: dict[tuple[int, int], EpisodeRecord] = {}
    for record in records:
        key = (record.task, record.attempt)
        if key not in best or record.budget > best[key].budget:
            best[key] = record
    tasks = sorted({task for task, _ in best})
    return [[best[key] for key in sorted(best) if key[0] == task] for task in tasks]


def _bootstrap(values: np.ndarray, resamples: int, level: float, seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean over tasks (the same resampled tasks for every statistic by seed)."""
    if resamples <= 0 or len(values) < 2:
        return float(values.mean()), float(values.mean())
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    alpha = (1 - level) / 2
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def task_values(records: Sequence[EpisodeRecord], rule: StoppingRule, k: int, t: int,
                budget: float = math.inf) -> np.ndarray:
    """Per task (in task order), the exact ``(success, expected turns)`` of :func:`task_value`: shape ``(tasks, 2)``."""
    tasks = _by_task(records)
    if not tasks:
        raise ValueError("no episode records to score a stopping rule on")
    longest = min(r.budget for attempts in tasks for r in attempts)
    if t > longest:
        raise ValueError(f"t={t} exceeds the recorded budget {longest}: a record can only be cut short")
    return np.array([task_value([attempt_outcome(r, rule, t) for r in attempts], k, budget) for attempts in tasks])


def rule_point(records: Sequence[EpisodeRecord], rule: StoppingRule, k: int, t: int, budget: float = math.inf, *,
               bootstrap: int = 1000, ci_level: float = 0.95, seed: int = 0) -> RulePoint:
    """The :class:`RulePoint` of ``rule`` over an evaluation's records (see the module docstring).

    ``t`` must not exceed the budget the records were run at (a cut can only shorten a record).
    """
    tasks = _by_task(records)
    values = task_values(records, rule, k, t, budget)
    cuts = [rule.cut_turn(r) for attempts in tasks for r in attempts]
    cut_rate = float(np.mean([c is not None and c < min(t, r.turns) for c, r in
                              zip(cuts, (r for attempts in tasks for r in attempts))]))
    s_low, s_high = _bootstrap(values[:, 0], bootstrap, ci_level, seed)
    c_low, c_high = _bootstrap(values[:, 1], bootstrap, ci_level, seed)
    return RulePoint(rule.name, k, t, float(budget), float(values[:, 0].mean()), s_low, s_high,
                     float(values[:, 1].mean()), c_low, c_high, cut_rate)


def rule_settings(records: Sequence[EpisodeRecord], rules: Sequence[StoppingRule], ks: Sequence[int],
                  ts: Sequence[int]) -> list[tuple[StoppingRule, int, int, float]]:
    """The ``(rule, attempts, t, total budget)`` of every point :func:`rule_points` places: each rule at
    each (k, t) of the grid with the cell's own allotment ``k·t`` and all ``n`` recorded attempts.

    Example:
        >>> [(r.name, n, t, b) for r, n, t, b in rule_settings([_toy([0, 1], None)], [NeverStop()], (1, 2), (2,))]
        [('never', 1, 2, 2.0)]
    """
    tasks = _by_task(records)
    if not tasks:
        raise ValueError("no episode records to score a stopping rule on")
    n = min(len(attempts) for attempts in tasks)
    return [(rule, n, t, float(k * t)) for rule in rules for k in ks for t in ts if k <= n]


def rule_points(records: Sequence[EpisodeRecord], rules: Sequence[StoppingRule], ks: Sequence[int],
                ts: Sequence[int], **kwargs: float | int) -> list[RulePoint]:
    """Each rule at each (k, t) with the cell's own allotment ``k·t`` as the total budget and every
    recorded attempt available: the turns a cut saves go to further attempts (:func:`rule_settings`)."""
    return [rule_point(records, rule, n, t, budget, **kwargs)  # type: ignore[arg-type]
            for rule, n, t, budget in rule_settings(records, rules, ks, ts)]


def rule_rows(points: Sequence[RulePoint], frontier: Frontier) -> list[tuple[RulePoint, FrontierCell | None]]:
    """Each rule's own frontier points beside the best fixed sequential cell costing no more: the rows of
    the stopping table (the report's, and ``eval --stopping-rules``'s)."""
    return [(p, best_fixed(frontier, p.turns)) for p in rule_frontier(points)]


def stopping_table(points: Sequence[RulePoint], frontier: Frontier) -> Any:
    """The :func:`rule_rows` as a ``rich`` table (what ``agentgym-budget eval --stopping-rules`` prints)."""
    from rich import box
    from rich.table import Table

    table = Table(title="Stopping rules: attempts of at most T turns cut by the rule, one after another within the "
                        "total turns, against the best fixed K×T at no more expected turns", box=box.SIMPLE_HEAD,
                  caption="total: turns in all (T: at most per attempt); turns: expected turns per task; cut: share "
                          "of attempts the rule abandons; fixed: the best fixed cell @its expected turns. Exact from "
                          f"episodes.jsonl; under each rate its bootstrap CI over tasks; every point in {STOPPING_FILE}")
    for column in ("rule", "total (T)", "turns", "success", "cut", "fixed K×T", "Pass"):
        table.add_column(column, justify="left" if column == "rule" else "right", no_wrap=True)
    for p, cell in rule_rows(points, frontier):
        fixed = ("none", "") if cell is None else (f"{cell.label} @{cell.cost:.1f}",
                                                   _with_ci(cell.success, cell.ci_low, cell.ci_high))
        table.add_row(p.rule, f"{p.budget:g} ({p.t})", f"{p.turns:.1f}", _with_ci(p.success, p.ci_low, p.ci_high),
                      f"{p.cut_rate:.0%}", *fixed)
    return table


def _with_ci(value: float, low: float, high: float) -> str:
    """``0.417`` over a dim ``0.29–0.54``: a rate and its CI on two short lines (the table fits 80 columns)."""
    return f"{value:.3f}\n[dim]{low:.2f}–{high:.2f}[/dim]"


def _toy(no_effect: list[int], won_turn: int | None) -> EpisodeRecord:
    """A record of ``len(no_effect)`` turns for the examples."""
    turns = len(no_effect)
    return EpisodeRecord(0, 0, turns, won_turn, turns, -1, ["a"] * turns, [-1] * turns, [-1] * turns,
                         no_effect, [-1] * turns)


#: The file :func:`save_stopping_csv` writes beside ``frontier.csv``.
STOPPING_FILE = "stopping.csv"


def rule_frontier(points: Sequence[RulePoint]) -> list[RulePoint]:
    """The points of each rule that no cheaper point of the same rule beats, cheapest first."""
    kept = []
    for name in dict.fromkeys(p.rule for p in points):
        best = -math.inf
        for p in sorted((p for p in points if p.rule == name), key=lambda p: (p.turns, -p.success)):
            if p.success > best:
                kept.append(p)
                best = p.success
    return kept


def best_fixed(frontier: Frontier, turns: float) -> FrontierCell | None:
    """The best sequential fixed (K,T) cell whose expected turns do not exceed ``turns``."""
    return frontier.best("sequential", "turns", turns + 1e-9)


def fixed_mix(frontier: Frontier, turns: float) -> list[tuple[FrontierCell, float]]:
    """The best fixed baseline at exactly ``turns`` expected turns: a coin-flip mix of two sequential cells.

    Running cell ``a`` with chance ``w`` and cell ``b`` otherwise costs and succeeds in proportion,
    so any point on the upper concave hull of the fixed cells is reachable; this is that hull at
    ``turns`` (cells with their weights; one cell at weight 1 at or beyond the costliest, nothing
    below the cheapest).  It is the fair baseline for a rule point, whose cost never equals a cell's.

    Example:
        >>> from agentgym_budget.eval.frontier import FrontierCell, Frontier
        >>> cells = [FrontierCell("sequential", "turns", 1, t, c, s, s, s, True)
        ...          for t, c, s in ((10, 10.0, 0.2), (20, 20.0, 0.3), (30, 30.0, 0.6))]
        >>> [(c.t, w) for c, w in fixed_mix(Frontier(tuple(cells)), 25.0)]  # 20 is under the hull of 10 and 30
        [(10, 0.25), (30, 0.75)]
    """
    hull: list[FrontierCell] = []
    for cell in frontier.frontier("sequential", "turns"):
        while len(hull) >= 2 and _not_above(hull[-2], hull[-1], cell):
            hull.pop()
        hull.append(cell)
    if not hull or turns < hull[0].cost - 1e-9:
        return []
    if turns >= hull[-1].cost:
        return [(hull[-1], 1.0)]
    for a, b in zip(hull, hull[1:]):
        if a.cost <= turns <= b.cost:
            w = (b.cost - turns) / (b.cost - a.cost)
            return [(a, w), (b, 1.0 - w)]
    return [(hull[0], 1.0)]


def _not_above(a: FrontierCell, b: FrontierCell, c: FrontierCell) -> bool:
    """Whether ``b`` lies on or under the line from ``a`` to ``c`` (so it is no hull vertex)."""
    return (b.success - a.success) * (c.cost - a.cost) <= (c.success - a.success) * (b.cost - a.cost)


def save_stopping_csv(points: Sequence[RulePoint], frontier: Frontier, path: str | Path) -> Path:
    """Write every rule point beside the best fixed cell costing no more (``stopping.csv``)."""
    path = Path(path)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["rule", "k", "t", "total_budget", "pass", "ci_low", "ci_high", "turns", "turns_ci_low",
                         "turns_ci_high", "cut_rate", "rule_frontier", "fixed_k", "fixed_t", "fixed_turns",
                         "fixed_pass", "fixed_ci_low", "fixed_ci_high"])
        on = set(map(id, rule_frontier(points)))
        for p in points:
            cell = best_fixed(frontier, p.turns)
            fixed = ["", "", "", "", "", ""] if cell is None else [
                cell.k, cell.t, f"{cell.cost:.6g}", f"{cell.success:.6f}", f"{cell.ci_low:.6f}", f"{cell.ci_high:.6f}"]
            writer.writerow([p.rule, p.k, p.t, f"{p.budget:g}", f"{p.success:.6f}", f"{p.ci_low:.6f}",
                             f"{p.ci_high:.6f}", f"{p.turns:.6g}", f"{p.turns_ci_low:.6g}", f"{p.turns_ci_high:.6g}",
                             f"{p.cut_rate:.6f}", int(id(p) in on), *fixed])
    return path

"""Comparing results: paired differences of two results, and aggregation over several runs.

* :func:`compare_results` — ``B - A`` for every Pass@(K,T) cell and every behaviour metric,
  with paired bootstrap CIs over tasks (:func:`~agentgym_budget.eval.stats.paired_bootstrap`).
  It refuses (:class:`IncomparableResults`) two results that do not share their env, task
  seeds (and the games they drew), attempts and budgets: only then is task ``i`` the same
  task in both, which is what a paired comparison needs.  Probe metrics are paired by probe
  when both results ran the same probe set.  The two runs' frontiers
  (:mod:`~agentgym_budget.eval.frontier`) are compared at matched cost: at each cost level where
  either frontier has a cell, each run's best cell costing at most that many expected turns per
  task, and the paired difference of their successes (:class:`FrontierDifference`).  Given
  stopping rules and both runs' episode records, each rule at each point of the stopping table
  (:func:`~agentgym_budget.eval.stopping.rule_settings`), ``B - A`` of its success and of its
  expected turns, paired over tasks (:class:`RuleDifference`): does B still win more, or spend
  fewer turns, when both abandon hopeless attempts the same way.
* :func:`aggregate_results` — several runs of one recipe (e.g. training seeds, each
  evaluated): per cell and metric the mean over runs, the standard deviation between runs,
  min / max and a Student-t CI of the mean.

Example:
    >>> import agentgym_budget
    >>> from agentgym_budget.eval import evaluate
    >>> a = evaluate("KeyDoor-Budget-v0", "noisy-expert", ks=(1,), ts=(2, 4), tasks=8, attempts=2, bootstrap=0)
    >>> comparison = compare_results(a, a)
    >>> comparison.passkt[(1, 4)].as_tuple()
    (0.0, 0.0, 0.0)
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentgym_budget.eval.cost import STRATEGIES
from agentgym_budget.eval.frontier import FrontierCell
from agentgym_budget.eval.results import PassKTResult, grid_table, number_text
from agentgym_budget.eval.stats import PairedDifference, paired_bootstrap, ratio, t_interval
from agentgym_budget.eval.stopping import StoppingRule, rule_settings, task_values
from agentgym_budget.episodes.records import EpisodeRecord

__all__ = ["Aggregate", "Comparison", "FrontierDifference", "IncomparableResults", "RuleDifference", "aggregate_results",
           "check_comparable", "compare_frontiers", "compare_results", "compare_rules", "scalar_metrics"]


class IncomparableResults(ValueError):
    """Two results that a paired comparison cannot pair (different env, tasks, attempts or budgets)."""


def check_comparable(a: PassKTResult, b: PassKTResult) -> None:
    """Raise :class:`IncomparableResults` naming every difference that breaks the pairing of tasks."""
    problems = []
    if a.env_id != b.env_id:
        problems.append(f"env {a.env_id!r} vs {b.env_id!r}")
    if a.task_seeds != b.task_seeds:
        first = next((i for i, (x, y) in enumerate(zip(a.task_seeds, b.task_seeds)) if x != y), None)
        where = f"first differing task {first}" if first is not None else "a prefix of the other"
        problems.append(f"task seeds ({len(a.task_seeds)} vs {len(b.task_seeds)} tasks, {where}: use the same "
                        "--seed and --tasks)")
    elif a.task_games and b.task_games and a.task_games != b.task_games:
        first = next(i for i, (x, y) in enumerate(zip(a.task_games, b.task_games)) if x != y)
        problems.append(f"games: the same seeds drew different games (task {first}: {a.task_games[first]!r} vs "
                        f"{b.task_games[first]!r}; different env arguments such as split=?)")
    if a.attempts != b.attempts:
        problems.append(f"attempts {a.attempts} vs {b.attempts}")
    if a.ts != b.ts:
        problems.append(f"budgets T {list(a.ts)} vs {list(b.ts)}")
    if problems:
        raise IncomparableResults("cannot compare these results pairwise: they differ in " + "; ".join(problems))


def scalar_metrics(result: PassKTResult) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The per-task ``(num, den)`` of every behaviour metric stored in ``result`` (empty for old files)."""
    per_task = result.metrics.get("per_task", {})
    return {name: (np.asarray(t["num"], dtype=float), np.asarray(t["den"], dtype=float)) for name, t in per_task.items()}


@dataclass(frozen=True)
class FrontierDifference:
    """At one cost level (expected turns per task) and strategy: each run's best cell costing at most
    ``level``, and ``b - a`` of their successes, paired over tasks."""

    strategy: str
    level: float
    a: FrontierCell
    b: FrontierCell
    difference: PairedDifference

    def to_dict(self) -> dict[str, Any]:
        d = self.difference
        return {"strategy": self.strategy, "turns_at_most": self.level, "a_k": self.a.k, "a_t": self.a.t,
                "a_turns": self.a.cost, "b_k": self.b.k, "b_t": self.b.t, "b_turns": self.b.cost, "a": d.a, "b": d.b,
                "diff": d.diff, "ci_low": d.ci_low, "ci_high": d.ci_high, "significant": d.significant}


def compare_frontiers(a: PassKTResult, b: PassKTResult, ks: Sequence[int], options: dict[str, Any]
                      ) -> list[FrontierDifference]:
    """The frontiers of ``a`` and ``b`` (over ``ks``) in expected turns, matched at every cost level where
    either has a frontier cell and both have a cell that cheap.  The cells are chosen on the full
    results; the CI is that of the chosen cells' difference (the choice is not bootstrapped)."""
    frontier_a, frontier_b = a.frontier(ks), b.frontier(ks)
    if frontier_a is None or frontier_b is None:
        return []
    out = []
    ones = np.ones(a.n_tasks)
    for strategy in STRATEGIES:
        levels = sorted({c.cost for f in (frontier_a, frontier_b) for c in f.frontier(strategy, "turns")})
        for level in levels:
            cell_a, cell_b = frontier_a.best(strategy, "turns", level), frontier_b.best(strategy, "turns", level)
            if cell_a is None or cell_b is None:
                continue
            per_task_a = a.grid.per_task[a.ks.index(cell_a.k), a.ts.index(cell_a.t)]
            per_task_b = b.grid.per_task[b.ks.index(cell_b.k), b.ts.index(cell_b.t)]
            out.append(FrontierDifference(strategy, level, cell_a, cell_b,
                                          paired_bootstrap(per_task_a, ones, per_task_b, ones, **options)))
    return out


@dataclass(frozen=True)
class RuleDifference:
    """One stopping rule at one point (attempts of at most ``t`` turns, ``budget`` turns in all, ``attempts``
    recorded attempts each): ``b - a`` of its success and of its expected turns per task, paired over tasks."""

    rule: str
    t: int
    budget: float
    attempts: int
    success: PairedDifference
    turns: PairedDifference

    def to_dict(self) -> dict[str, Any]:
        def row(d: PairedDifference) -> dict[str, Any]:
            return {"a": d.a, "b": d.b, "diff": d.diff, "ci_low": d.ci_low, "ci_high": d.ci_high,
                    "significant": d.significant}

        return {"rule": self.rule, "t": self.t, "total_budget": self.budget, "attempts": self.attempts,
                "success": row(self.success), "turns": row(self.turns)}


def compare_rules(records_a: Sequence[EpisodeRecord], records_b: Sequence[EpisodeRecord], rules: Sequence[StoppingRule],
                  ks: Sequence[int], ts: Sequence[int], options: dict[str, Any]) -> list[RuleDifference]:
    """Each rule at each point of ``a``'s stopping table, scored exactly on both runs' records (the
    per-task values of :func:`~agentgym_budget.eval.stopping.task_values`), ``b - a`` paired over tasks."""
    out = []
    for rule, n, t, budget in rule_settings(records_a, rules, ks, ts):
        values_a, values_b = (task_values(records, rule, n, t, budget) for records in (records_a, records_b))
        if len(values_a) != len(values_b):
            raise IncomparableResults(f"stopping rules: the episode records hold {len(values_a)} vs {len(values_b)} "
                                      "tasks; compare the episodes.jsonl of the two passkt.json files")
        ones = np.ones(len(values_a))
        out.append(RuleDifference(rule.name, t, budget, n,
                                  *(paired_bootstrap(values_a[:, i], ones, values_b[:, i], ones, **options)
                                    for i in (0, 1))))
    return out


@dataclass
class Comparison:
    """``B - A``: Pass@(K,T) cells by ``(k, t)``, behaviour metrics and probe metrics by name."""

    labels: tuple[str, str]
    ks: tuple[int, ...]
    ts: tuple[int, ...]
    passkt: dict[tuple[int, int], PairedDifference]
    metrics: dict[str, PairedDifference]
    probes: dict[str, PairedDifference] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    n_tasks: int = 0  # the paired tasks
    frontier: list[FrontierDifference] = field(default_factory=list)
    rules: list[RuleDifference] = field(default_factory=list)

    def diff_grid(self) -> tuple[np.ndarray, np.ndarray]:
        """``(diff, significant)`` arrays of shape ``(len(ks), len(ts))``."""
        diff = np.array([[self.passkt[(k, t)].diff for t in self.ts] for k in self.ks], dtype=float)
        significant = np.array([[self.passkt[(k, t)].significant for t in self.ts] for k in self.ks])
        return diff, significant

    def to_dict(self) -> dict[str, Any]:
        def row(d: PairedDifference) -> dict[str, Any]:
            return {"a": d.a, "b": d.b, "diff": d.diff, "ci_low": d.ci_low, "ci_high": d.ci_high,
                    "significant": d.significant}

        return {
            "labels": list(self.labels), "ci_level": next(iter(self.passkt.values())).level,
            "passkt": [{"k": k, "t": t, **row(d)} for (k, t), d in self.passkt.items()],
            "metrics": {name: row(d) for name, d in self.metrics.items()},
            "probes": {name: row(d) for name, d in self.probes.items()},
            "frontier": [row.to_dict() for row in self.frontier],
            "stopping_rules": [row.to_dict() for row in self.rules],
            "notes": self.notes,
        }

    def save_json(self, path: Path) -> Path:
        """Write :meth:`to_dict` to ``path`` as JSON."""
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    def tables(self) -> tuple[Any, ...]:
        """``rich`` tables: the Pass@(K,T) differences with their CIs, the metrics' (a, b, b - a), and
        (when both results hold attempt costs) the frontiers at matched cost."""
        from rich.table import Table

        a, b = self.labels
        level = f"{next(iter(self.passkt.values())).level:.0%}"
        grid = grid_table(f"Pass@(K,T): {b} minus {a}, {self.n_tasks} paired tasks",
                          f"difference, under it its {level} paired bootstrap CI over tasks; * = CI excludes 0",
                          self.ks, self.ts, lambda k, t: _cell_text(self.passkt[(k, t)]))
        metrics = Table(title=f"Behaviour metrics: b = {b} minus a = {a}",
                        caption=f"paired over tasks (probes: over probes); {level} CI; * = CI excludes 0")
        for column in ("metric", "a", "b", "b - a [CI]"):
            metrics.add_column(column, justify="left" if column == "metric" else "right", no_wrap=True)
        for name, d in {**self.metrics, **self.probes}.items():
            metrics.add_row(name, number_text(d.a), number_text(d.b), _diff_text(d))
        return (grid, metrics, *([self.frontier_table()] if self.frontier else []),
                *([self.rules_table()] if self.rules else []))

    def frontier_table(self) -> Any:
        """The frontiers at matched cost: per strategy and level, each run's best cell K×T and ``b - a``."""
        from rich.table import Table

        a, b = self.labels
        table = Table(title=f"Best (K,T) for a budget of expected turns per task: {b} minus {a}",
                      caption="each run's best cell costing at most the level (K×T, Pass@(K,T)); paired bootstrap CI "
                              "over tasks of the chosen cells; * = CI excludes 0")
        for column in ("strategy", "turns ≤", f"a = {a}", f"b = {b}", "b - a [CI]"):
            table.add_column(column, justify="left" if column == "strategy" else "right", no_wrap=True)
        for row in self.frontier:
            table.add_row(row.strategy, f"{row.level:.1f}", f"{row.a.label} {row.a.success:.3f}",
                          f"{row.b.label} {row.b.success:.3f}", _diff_text(row.difference))
        return table


    def rules_table(self) -> Any:
        """The stopping rules: per rule and point, each run's success @expected turns and ``b - a`` of both."""
        from rich import box
        from rich.table import Table

        a, b = self.labels
        table = Table(title=f"Stopping rules, each run the same way on both: b = {b} minus a = {a}",
                      caption="total: turns in all (T: at most per attempt), attempts cut by the rule and run one "
                              "after another; a, b: success @expected turns per task, exact from episodes.jsonl; "
                              "under each difference its paired bootstrap CI over tasks; * = CI excludes 0",
                      box=box.SIMPLE_HEAD)
        for column in ("rule", "total (T)", "a", "b", "success b-a", "turns b-a"):
            table.add_column(column, justify="left" if column == "rule" else "right", no_wrap=True)
        for row in self.rules:
            s, t = row.success, row.turns
            table.add_row(row.rule, f"{row.budget:g} ({row.t})", f"{s.a:.3f}\n[dim]@{t.a:.1f}[/dim]",
                          f"{s.b:.3f}\n[dim]@{t.b:.1f}[/dim]", _cell_text(s), _cell_text(t))
        return table


def _diff_text(d: PairedDifference) -> str:
    """``+0.120 [+0.050, +0.190]*`` (``*``: the CI excludes 0; no CI from a single task)."""
    if d.diff is None:
        return "n/a"
    ci = "(no CI: one task)" if d.ci_low is None else f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]"
    return f"{d.diff:+.3f} {ci}{'*' if d.significant else ' '}"


def _cell_text(d: PairedDifference) -> str:
    """A grid cell on two short lines: ``+0.120*`` over ``[+.05,+.19]``."""
    if d.diff is None:
        return "n/a"

    def short(x: float) -> str:  # "+.08": the grid has five columns in 80 characters
        return f"{x:+.2f}".replace("0.", ".", 1)

    ci = "no CI" if d.ci_low is None or d.ci_high is None else f"[{short(d.ci_low)},{short(d.ci_high)}]"
    return f"{d.diff:+.3f}{'*' if d.significant else ' '}\n[dim]{ci}[/dim]"


def compare_results(a: PassKTResult, b: PassKTResult, *, resamples: int = 1000, level: float = 0.95, seed: int = 0,
                    labels: tuple[str, str] | None = None, rules: Sequence[StoppingRule] = (),
                    records: tuple[Sequence[EpisodeRecord], Sequence[EpisodeRecord]] | None = None) -> Comparison:
    """Paired differences ``b - a`` with bootstrap CIs over tasks (see the module docstring); ``rules``
    (stopping rules) are compared on ``records``, the two runs' episode records."""
    check_comparable(a, b)
    if rules and records is None:
        raise ValueError("comparing stopping rules needs both runs' episode records (records=(a's, b's))")
    ks = tuple(k for k in a.ks if k in b.ks)
    if not ks:
        raise IncomparableResults(f"the results share no K: {list(a.ks)} vs {list(b.ks)}")
    ones = np.ones(a.n_tasks)
    options: dict[str, Any] = {"resamples": resamples, "level": level, "seed": seed}
    passkt = {
        (k, t): paired_bootstrap(a.grid.per_task[a.ks.index(k), j], ones, b.grid.per_task[b.ks.index(k), j], ones,
                                 **options)
        for k in ks for j, t in enumerate(a.ts)
    }
    notes = []
    terms_a, terms_b = scalar_metrics(a), scalar_metrics(b)
    if not terms_a or not terms_b:
        notes.append("behaviour metrics not compared: a result file predates per-task metric terms; re-run eval")
    if a.metrics.get("plan_lengths_known") != b.metrics.get("plan_lengths_known"):
        notes.append("plan lengths are known in one result only: plan-length metrics are not comparable")
    metrics = {}
    for name in [*terms_a, *(name for name in terms_b if name not in terms_a)]:  # the order task_terms gives
        zeros = (np.zeros(a.n_tasks), np.zeros(a.n_tasks))
        (num_a, den_a), (num_b, den_b) = terms_a.get(name, zeros), terms_b.get(name, zeros)
        metrics[name] = paired_bootstrap(num_a, den_a, num_b, den_b, **options)
    if a.costs is None or b.costs is None:
        notes.append("frontiers not compared: a result file predates attempt costs (attempt_costs); re-run eval")
    return Comparison(labels or (a.policy, b.policy), ks, a.ts, passkt, metrics, _compare_probes(a, b, options, notes),
                      notes, a.n_tasks, compare_frontiers(a, b, ks, options),
                      compare_rules(*records, rules, ks, a.ts, options) if rules and records else [])


def _compare_probes(a: PassKTResult, b: PassKTResult, options: dict[str, Any], notes: list[str]
                    ) -> dict[str, PairedDifference]:
    pa, pb = a.metrics.get("probes"), b.metrics.get("probes")
    if not pa or not pb:
        return {}
    if pa["set_id"] != pb["set_id"]:
        notes.append(f"probe metrics not compared: different probe sets ({pa['set_id']} vs {pb['set_id']})")
        return {}
    out = {}
    for name in ("agreement", "success_to_go"):
        (num_a, den_a), (num_b, den_b) = _probe_terms(pa[name]), _probe_terms(pb[name])
        out[f"probes.{name}"] = paired_bootstrap(num_a, den_a, num_b, den_b, **options)
    return out


def _probe_terms(values: Sequence[int | None]) -> tuple[np.ndarray, np.ndarray]:
    """Per-probe 0/1 outcomes (``None``: undefined at that probe) as ``(num, den)``."""
    return (np.array([v or 0 for v in values], dtype=float), np.array([v is not None for v in values], dtype=float))


# -- aggregation over runs -------------------------------------------------------------------
@dataclass
class Aggregate:
    """Several runs of one recipe: per Pass@(K,T) cell and per metric, statistics over runs."""

    env_id: str
    policies: list[str]
    ks: tuple[int, ...]
    ts: tuple[int, ...]
    runs: int
    level: float
    passkt: dict[tuple[int, int], dict[str, Any]]
    metrics: dict[str, dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "policies": self.policies, "ks": list(self.ks), "ts": list(self.ts),
                "runs": self.runs, "ci_level": self.level,
                "passkt": [{"k": k, "t": t, **cell} for (k, t), cell in self.passkt.items()], "metrics": self.metrics}

    def save(self, folder: Path) -> tuple[Path, Path]:
        """Write ``aggregate.json`` (:meth:`to_dict`) and ``aggregate.csv`` (a row per cell and metric) into ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        json_path, csv_path = folder / "aggregate.json", folder / "aggregate.csv"
        json_path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        with csv_path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["metric", "mean", "std", "min", "max", "ci_low", "ci_high", "runs"])
            rows = [(f"pass@({k},{t})", cell) for (k, t), cell in self.passkt.items()] + list(self.metrics.items())
            for name, cell in rows:
                writer.writerow([name, *(cell[key] for key in ("mean", "std", "min", "max", "ci_low", "ci_high")),
                                 self.runs])
        return json_path, csv_path

    def tables(self) -> tuple[Any, Any]:
        """Two ``rich`` tables: Pass@(K,T) and the metrics, each as mean, spread and CI over runs."""
        from rich.table import Table

        grid = grid_table(f"Pass@(K,T) over {self.runs} runs — {self.env_id}",
                          f"mean sd (between runs) [{self.level:.0%} Student-t CI of the mean]",
                          self.ks, self.ts, lambda k, t: _over_runs_text(self.passkt[(k, t)]))
        metrics = Table(title="Behaviour metrics over runs")
        metrics.add_column("metric")
        metrics.add_column("mean sd [CI]", justify="right")
        for name, cell in self.metrics.items():
            metrics.add_row(name, _over_runs_text(cell))
        return grid, metrics


def _over_runs_text(cell: dict[str, Any]) -> str:
    """``0.500 sd 0.100 [0.250, 0.750]``: a cell of :func:`aggregate_results`."""
    if cell["mean"] is None:
        return "n/a"
    spread = "" if cell["std"] is None else f" sd {cell['std']:.3f}"
    ci = "" if cell["ci_low"] is None else f" [{cell['ci_low']:.3f}, {cell['ci_high']:.3f}]"
    return f"{cell['mean']:.3f}{spread}{ci}"


def _over_runs(values: Sequence[float | None], level: float) -> dict[str, Any]:
    known = np.array([v for v in values if v is not None], dtype=float)
    low, high = t_interval(known, level)
    return {
        "values": list(values),
        "mean": float(known.mean()) if len(known) else None,
        "std": float(known.std(ddof=1)) if len(known) > 1 else None,
        "min": float(known.min()) if len(known) else None,
        "max": float(known.max()) if len(known) else None,
        "ci_low": low,
        "ci_high": high,
    }


def aggregate_results(results: Sequence[PassKTResult], level: float = 0.95) -> Aggregate:
    """Mean, spread (std between runs, min, max) and Student-t CI of the mean for every cell and metric.

    The runs must share the env, K, T and attempts (their tasks may differ: each run's value
    is its own estimate, and the spread between runs is what the CI measures).
    """
    if not results:
        raise ValueError("aggregate needs at least one result")
    first = results[0]
    for other in results[1:]:
        differing = [name for name in ("env_id", "ks", "ts", "attempts") if getattr(other, name) != getattr(first, name)]
        if differing:
            raise IncomparableResults("cannot aggregate runs that differ in " + ", ".join(
                f"{name} ({getattr(first, name)!r} vs {getattr(other, name)!r})" for name in differing))
    passkt = {(k, t): _over_runs([r.value(k, t) for r in results], level) for k in first.ks for t in first.ts}
    names = sorted(set().union(*(scalar_metrics(r) for r in results)))
    metrics = {}
    for name in names:
        values = []
        for r in results:
            terms = scalar_metrics(r).get(name)
            values.append(None if terms is None else ratio(*terms))
        metrics[name] = _over_runs(values, level)
    return Aggregate(first.env_id, [r.policy for r in results], first.ks, first.ts, len(results), level, passkt, metrics)

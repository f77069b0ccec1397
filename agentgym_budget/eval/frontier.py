"""The best way to spend a budget: success against cost over the (K,T) cells, and its frontier.

Every Pass@(K,T) cell is a point: its expected cost per task (:mod:`~agentgym_budget.eval.cost`:
turns, tokens or seconds; attempts run in parallel or sequentially) against its success, Pass@(K,T)
with its bootstrap CI over tasks.  The **frontier** of a strategy and a cost kind is the set of
cells no other cell beats: walking up in cost, a cell is on it iff its success is higher than
that of every cell costing no more.  So for any cost level ``C`` the best cell affordable at
``C`` (highest success among the cells with cost ``<= C``) is the frontier's last cell at or
under ``C`` (:meth:`Frontier.best`); along the frontier cost and success both rise.

``frontier.csv`` (written beside ``passkt.csv``) holds every cell whose cost is known:
``strategy, cost_kind, k, t, allotted_turns, cost, pass, ci_low, ci_high, frontier`` —
``allotted_turns`` is ``K × T``, the most turns the cell can spend, ``frontier`` 1 on the frontier.

Example:
    >>> pareto_mask(np.array([10.0, 20.0, 15.0, 30.0]), np.array([0.5, 0.4, 0.6, 0.6]))
    array([ True, False,  True, False])
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agentgym_budget.eval.cost import COST_KINDS, STRATEGIES, AttemptCosts, cell_costs
from agentgym_budget.eval.passkt import PassKTGrid

__all__ = ["FRONTIER_FILE", "Frontier", "FrontierCell", "frontier_of", "pareto_mask"]

FRONTIER_FILE = "frontier.csv"


def pareto_mask(cost: np.ndarray, success: np.ndarray) -> np.ndarray:
    """Which points no other beats: walking up in cost (ties: higher success first), a point is kept
    iff its success exceeds every cheaper-or-equal point's.  ``nan`` costs are never kept."""
    cost, success = np.asarray(cost, dtype=float), np.asarray(success, dtype=float)
    keep = np.zeros(len(cost), dtype=bool)
    best = -np.inf
    for i in sorted(np.flatnonzero(np.isfinite(cost)), key=lambda i: (cost[i], -success[i])):
        if success[i] > best:
            keep[i], best = True, success[i]
    return keep


@dataclass(frozen=True)
class FrontierCell:
    """One (K,T) cell of one strategy and cost kind: its expected cost per task and its success."""

    strategy: str
    kind: str
    k: int
    t: int
    cost: float
    success: float
    ci_low: float
    ci_high: float
    on_frontier: bool

    @property
    def label(self) -> str:
        """``2×30``: K attempts of T turns."""
        return f"{self.k}×{self.t}"


@dataclass(frozen=True)
class Frontier:
    """Every cell with a known cost, per strategy and cost kind (:func:`frontier_of`)."""

    cells: tuple[FrontierCell, ...]

    def of(self, strategy: str, kind: str) -> list[FrontierCell]:
        """The cells of ``strategy`` and ``kind``, cheapest first."""
        return sorted((c for c in self.cells if c.strategy == strategy and c.kind == kind),
                      key=lambda c: (c.cost, -c.success))

    def frontier(self, strategy: str, kind: str) -> list[FrontierCell]:
        """The frontier's cells, cheapest first: cost and success both rise along it."""
        return [c for c in self.of(strategy, kind) if c.on_frontier]

    def best(self, strategy: str, kind: str, level: float) -> FrontierCell | None:
        """The most successful cell costing at most ``level`` (``None``: none is that cheap)."""
        affordable = [c for c in self.frontier(strategy, kind) if c.cost <= level]
        return affordable[-1] if affordable else None

    def kinds(self) -> list[str]:
        """The cost kinds with at least one known cell (turns always; tokens only for LLM policies)."""
        return [kind for kind in COST_KINDS if any(c.kind == kind for c in self.cells)]

    def save_csv(self, path: str | Path) -> Path:
        """Write ``frontier.csv`` (see the module docstring)."""
        path = Path(path)
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["strategy", "cost_kind", "k", "t", "allotted_turns", "cost", "pass", "ci_low", "ci_high",
                             "frontier"])
            for strategy in STRATEGIES:
                for kind in COST_KINDS:
                    for c in self.of(strategy, kind):
                        writer.writerow([strategy, kind, c.k, c.t, c.k * c.t, f"{c.cost:.6g}", f"{c.success:.6f}",
                                         f"{c.ci_low:.6f}", f"{c.ci_high:.6f}", int(c.on_frontier)])
        return path


def frontier_of(grid: PassKTGrid, costs: AttemptCosts, ks: Sequence[int] | None = None) -> Frontier:
    """Every cell of ``grid`` (or of its ``ks``) with its mean cost over tasks, per strategy and cost
    kind; a cell whose cost is unknown for some task is left out (its mean is not known)."""
    if tuple(costs.ts) != tuple(grid.ts):
        raise ValueError(f"the costs' budgets {list(costs.ts)} are not the grid's {list(grid.ts)}")
    ks = tuple(grid.ks if ks is None else ks)
    rows = [grid.ks.index(k) for k in ks]
    cells = []
    for strategy in STRATEGIES:
        for kind in COST_KINDS:
            cost = cell_costs(costs, ks, kind, strategy).mean(axis=-1)  # (ks, ts); nan if any task's is unknown
            success = grid.mean[rows]
            keep = pareto_mask(cost.ravel(), success.ravel()).reshape(cost.shape)
            for i, k in enumerate(ks):
                for j, t in enumerate(grid.ts):
                    if np.isfinite(cost[i, j]):
                        cells.append(FrontierCell(strategy, kind, k, t, float(cost[i, j]), float(success[i, j]),
                                                  float(grid.ci_low[rows[i], j]), float(grid.ci_high[rows[i], j]),
                                                  bool(keep[i, j])))
    return Frontier(tuple(cells))

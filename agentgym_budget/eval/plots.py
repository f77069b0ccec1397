"""PNG plots of Pass@(K,T) results: heatmap (K x T), curves (Pass@K vs T), difference heatmap, and
success against cost with the frontier.

matplotlib is imported inside the functions (``import agentgym_budget`` stays light) and
used through its object API with the Agg canvas, so no display is needed.

The HTML report (:mod:`agentgym_budget.eval.report`) draws the same figures again, as SVG of its
own, on purpose: its page must open in any browser, offline, as one file, and its figures
are part of the page (each heatmap cell an element with its CI and a hover title, ids the page's
script and tests find), which matplotlib's SVG (every glyph a path, no per-cell elements: 37 kB for
a 3 x 4 heatmap) does not give.  What a figure shows comes from one place for both:
the grid and its CIs from :class:`~agentgym_budget.eval.results.PassKTResult`, the difference from
:func:`~agentgym_budget.eval.results.difference`, success against cost from
:meth:`PassKTResult.frontier <agentgym_budget.eval.results.PassKTResult.frontier>`; only the
drawing is twice.

Example:
    >>> from agentgym_budget.eval.plots import plot_heatmap  # doctest: +SKIP
    >>> plot_heatmap(result, "results/passkt_heatmap.png")  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agentgym_budget.eval.results import PassKTResult, difference

if TYPE_CHECKING:
    from agentgym_budget.eval.compare import Comparison

__all__ = ["plot_curves", "plot_diff_heatmap", "plot_frontier", "plot_heatmap", "save_plots"]


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=120, layout="constrained")


def _heatmap(ax: Any, values: np.ndarray, ks: tuple[int, ...], ts: tuple[int, ...], cmap: str,
             vmin: float, vmax: float, fmt: str) -> Any:
    image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, origin="lower", aspect="auto")
    ax.set_xticks(range(len(ts)), [str(t) for t in ts])
    ax.set_yticks(range(len(ks)), [str(k) for k in ks])
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("attempts K")
    middle = (vmin + vmax) / 2
    for i in range(len(ks)):
        for j in range(len(ts)):
            dark = values[i, j] > middle if cmap == "viridis" else abs(values[i, j]) > 0.6 * vmax
            color = "black" if (cmap == "viridis") == dark else "white"
            ax.text(j, i, format(values[i, j], fmt), ha="center", va="center", fontsize=8, color=color)
    return image


def plot_heatmap(result: PassKTResult, path: str | Path) -> Path:
    """Pass@(K,T) as a K x T heatmap with the value in each cell."""
    fig = _figure(1.1 * len(result.ts) + 2.0, 0.6 * len(result.ks) + 1.8)
    ax = fig.add_subplot()
    image = _heatmap(ax, result.mean, result.ks, result.ts, "viridis", 0.0, 1.0, ".2f")
    fig.colorbar(image, ax=ax, label="Pass@(K,T)")
    ax.set_title(f"{result.env_id} — {result.policy}\n{result.n_tasks} tasks x {result.attempts} attempts, {result.mode}",
                 fontsize=9)
    fig.savefig(path)
    return Path(path)


def plot_curves(result: PassKTResult, path: str | Path) -> Path:
    """Pass@K against the budget T, one line per K, with the bootstrap CI as a band."""
    fig = _figure(6.0, 4.0)
    ax = fig.add_subplot()
    for i, k in enumerate(result.ks):
        (line,) = ax.plot(result.ts, result.mean[i], marker="o", label=f"K={k}")
        ax.fill_between(result.ts, result.grid.ci_low[i], result.grid.ci_high[i], color=line.get_color(), alpha=0.15)
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("Pass@K")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{result.env_id} — {result.policy} ({result.grid.ci_level:.0%} CI)", fontsize=9)
    fig.savefig(path)
    return Path(path)


def plot_diff_heatmap(a: PassKTResult, b: PassKTResult, path: str | Path,
                      labels: tuple[str, str] | None = None, comparison: Comparison | None = None) -> Path:
    """Heatmap of ``b - a`` on the cells both results share (red: b lower, blue: b higher).

    With a paired ``comparison`` (:func:`~agentgym_budget.eval.compare.compare_results`) the
    cells whose CI contains 0 are hatched and their value is greyed: not significant.
    """
    if comparison is None:
        ks, ts, diff = difference(a, b)
        significant = np.ones_like(diff, dtype=bool)
    else:
        ks, ts = comparison.ks, comparison.ts
        diff, significant = comparison.diff_grid()
    name_a, name_b = labels or (a.policy, b.policy)
    bound = max(float(np.abs(diff).max()), 0.05)
    fig = _figure(1.1 * len(ts) + 2.0, 0.6 * len(ks) + 1.8)
    ax = fig.add_subplot()
    image = _heatmap(ax, diff, ks, ts, "RdBu", -bound, bound, "+.2f")
    from matplotlib.patches import Rectangle

    for i, j in zip(*np.nonzero(~significant)):
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="0.5", linewidth=0))
    fig.colorbar(image, ax=ax, label="difference in Pass@(K,T)")
    title = f"{name_b} minus {name_a}"
    if comparison is not None:
        level = next(iter(comparison.passkt.values())).level
        title += f"\nhatched: {level:.0%} paired bootstrap CI contains 0"
    ax.set_title(title, fontsize=9)
    fig.savefig(path)
    return Path(path)


def plot_frontier(result: PassKTResult, path: str | Path) -> Path | None:
    """Success against expected cost per task, every (K,T) cell a labelled point ``K×T`` with its CI,
    the frontier drawn as a step line: one panel per strategy (parallel, sequential) and per cost
    kind known for every cell (turns; tokens for LLM policies).  ``None`` without the attempts' costs."""
    frontier = result.frontier()
    if frontier is None:
        return None
    kinds = [kind for kind in ("turns", "tokens") if len(frontier.of("parallel", kind)) == len(result.ks) * len(result.ts)]
    fig = _figure(11.0, 4.2 * len(kinds))
    axes = fig.subplots(len(kinds), 2, squeeze=False)
    for row, kind in enumerate(kinds):
        for column, strategy in enumerate(("parallel", "sequential")):
            ax, cells = axes[row][column], frontier.of(strategy, kind)
            cost = [c.cost for c in cells]
            ax.errorbar(cost, [c.success for c in cells], yerr=[[c.success - c.ci_low for c in cells],
                                                              [c.ci_high - c.success for c in cells]],
                        fmt="o", color="0.55", markersize=3.5, elinewidth=0.6, capsize=0, label="cell (CI)")
            for c in cells:
                ax.annotate(c.label, (c.cost, c.success), textcoords="offset points", xytext=(3, -9), fontsize=6,
                            color="black" if c.on_frontier else "0.45")
            line = frontier.frontier(strategy, kind)
            ax.step([c.cost for c in line] + [max(cost)], [c.success for c in line] + [line[-1].success],
                    where="post", color="tab:red", linewidth=1.6, label="frontier: best cell at each cost")
            ax.plot([c.cost for c in line], [c.success for c in line], "o", color="tab:red", markersize=4.5)
            ax.set_xlabel(f"expected {kind} per task ({strategy}: "
                          f"{'all K attempts run' if strategy == 'parallel' else 'stop at the first success'})")
            ax.set_ylabel("Pass@(K,T)")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{result.env_id} — {result.policy}: success against cost, labels K×T "
                 f"({result.grid.ci_level:.0%} bootstrap CI over tasks)", fontsize=9)
    fig.savefig(path)
    return Path(path)


def save_plots(result: PassKTResult, folder: str | Path) -> list[Path]:
    """Write ``passkt_heatmap.png``, ``passkt_curves.png`` and (with the attempts' costs) ``frontier.png`` into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    frontier = plot_frontier(result, folder / "frontier.png")
    return [plot_heatmap(result, folder / "passkt_heatmap.png"), plot_curves(result, folder / "passkt_curves.png"),
            *([] if frontier is None else [frontier])]

"""One self-contained HTML page of an evaluation: ``agentgym-budget report RESULTS_DIR [RESULTS_DIR_B]``.

The page needs no network (inline CSS, JS and SVG drawn here; nothing fetched) and shows:

* the run's identity: env, policy and their kwargs, seed, mode, grid, versions;
* the Pass@(K,T) heatmap (each cell with its bootstrap CI) and Pass@K-vs-T curves with CI bands;
* the behaviour metrics (the rows of the terminal's table);
* success against cost: every (K,T) cell at its expected turns per task, attempts run in
  parallel and sequentially, with the frontier (:mod:`~agentgym_budget.eval.frontier`) drawn
  and listed (results written before attempt costs were kept say so instead);
* every episode in a filterable list (run, task, attempt, budget, won/lost, errors); clicking one
  opens it turn by turn — observation, raw reply, action — with errors (of each kind the metrics
  count: invalid, no effect, loss, detour, stall), actions that are not the expert's, and
  recoveries (the first on-plan turn after an error) highlighted.  Without ``transcripts.jsonl.gz`` the turns show the actions and flags of
  ``episodes.jsonl``; ``#episode=RUN-TASK-ATTEMPT-BUDGET`` in the URL opens that episode;
* given a second folder, a comparison: the difference heatmap (second minus first) and per-task
  successes at the largest shared budget, wins and losses.

Episodes are embedded as JSON; each transcript is its own ``<script type="application/json">``,
parsed only when opened, and the list draws its first rows only, so a 400-episode page opens
at once.

The figures are drawn here as SVG, not taken from :mod:`agentgym_budget.eval.plots` (the PNG files
``eval`` writes), on purpose: the page needs nothing but itself, and each figure is part of it (a
heatmap cell is an element with its CI and a hover title; ids the page's script finds), which
matplotlib's SVG does not give.  The values come from where the PNGs take theirs
(``PassKTResult``'s grid and CIs, ``results.difference``, ``PassKTResult.frontier``), so the two
drawings of a figure cannot disagree on a number.

Example:
    >>> import tempfile
    >>> import agentgym_budget
    >>> from agentgym_budget.eval import evaluate
    >>> folder = tempfile.mkdtemp()
    >>> result = evaluate("KeyDoor-Budget-v0", "noisy-expert", ks=(1, 2), ts=(2, 4), tasks=3, attempts=2,
    ...                   out=folder, transcripts=True, bootstrap=10)
    >>> _ = result.save(folder)
    >>> path = write_report(folder)
    >>> path.name, 'id="heatmap"' in path.read_text()
    ('report.html', True)
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentgym_budget.eval.episode_log import EPISODES_FILE, read_episodes
from agentgym_budget.eval.frontier import Frontier
from agentgym_budget.eval.stopping import RulePoint, StoppingRule, rule_points, rule_rows
from agentgym_budget.eval.metrics import ERROR_KINDS, error_kinds, error_turns, on_plan_turns, without_plans
from agentgym_budget.eval.results import PassKTResult, difference
from agentgym_budget.episodes.records import EpisodeRecord
from agentgym_budget.eval.transcripts import read_transcripts

__all__ = ["REPORT_FILE", "RunData", "build_report", "episode_summary", "load_run", "turn_tags", "write_report"]

REPORT_FILE = "report.html"
#: Tags of the turns that are errors in the metrics' sense (``eval.metrics.ERROR_KINDS``, ``_`` as ``-``).
ERROR_TAGS = tuple(kind.replace("_", "-") for kind in ERROR_KINDS)
_VIRIDIS = ["#440154", "#3b528b", "#21918c", "#5ec962", "#fde725"]
_DIVERGING = ["#b2182b", "#ef8a62", "#f7f7f7", "#67a9cf", "#2166ac"]
_LINES = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


@dataclass
class RunData:
    """What a report shows of one results folder."""

    folder: Path
    result: PassKTResult
    records: list[EpisodeRecord]
    transcripts: dict[tuple[int, int, int], dict[str, Any]]


def load_run(folder: str | Path) -> RunData:
    """Read ``passkt.json``, ``episodes.jsonl`` and ``transcripts.jsonl.gz`` (the last two if present)."""
    folder = Path(folder)
    if not (folder / "passkt.json").exists():
        raise FileNotFoundError(f"{folder} has no passkt.json: write one with agentgym-budget eval --out {folder}")
    result = PassKTResult.load(folder)
    records = read_episodes(folder) if (folder / EPISODES_FILE).exists() else []
    # The log may hold more (an earlier, larger run resumed smaller): keep the result's episodes.
    records = [r for r in records if r.task < result.n_tasks and r.attempt < result.attempts]
    if not result.metrics.get("plan_lengths_known", True):
        records = [without_plans(r) for r in records]  # as the metrics did: one-step plans say nothing
    return RunData(folder, result, records, read_transcripts(folder))


def turn_tags(record: EpisodeRecord) -> list[list[str]]:
    """Per turn, what to highlight: the error kind the metrics give it (:data:`ERROR_TAGS`),
    ``off-expert`` (not the expert's action), ``recovery`` (the first on-plan turn after an error).

    Example:
        >>> r = EpisodeRecord(0, 0, 4, None, 3, 2, ["a", "b", "c"], [1, 0, 1], [1, 0, 1], [0, 1, 0], [1, 1, 0])
        >>> turn_tags(r)
        [[], ['invalid', 'off-expert'], ['recovery']]
    """
    kinds = dict(error_kinds(record))
    on_plan = set(on_plan_turns(record))
    tags: list[list[str]] = []
    after_error = False
    for turn in range(1, record.turns + 1):
        row = [kinds[turn].replace("_", "-")] if turn in kinds else []
        if record.expert_match[turn - 1] == 0:
            row.append("off-expert")
        if turn in kinds:
            after_error = True
        elif after_error and turn in on_plan:
            row.append("recovery")
            after_error = False
        tags.append(row)
    return tags


def episode_summary(record: EpisodeRecord, run: int, has_transcript: bool) -> dict[str, Any]:
    """The list entry of one episode (JSON): ids, outcome, counts, actions and per-turn tags."""
    tags = turn_tags(record)
    return {
        "id": f"{run}-{record.task}-{record.attempt}-{record.budget}", "run": run, "task": record.task,
        "attempt": record.attempt, "budget": record.budget, "won": record.won_turn, "turns": record.turns,
        "errors": len(error_turns(record)), "off": sum("off-expert" in t for t in tags), "actions": record.actions,
        "tags": tags, "tr": has_transcript,
    }


# -- SVG ------------------------------------------------------------------------------------

def _mix(colors: list[str], x: float) -> str:
    """The colour at ``x`` in [0, 1] along evenly spaced ``colors``."""
    x = min(max(x, 0.0), 1.0) * (len(colors) - 1)
    i = min(int(x), len(colors) - 2)
    a, b = (np.array([int(c[k:k + 2], 16) for k in (1, 3, 5)]) for c in colors[i:i + 2])
    r, g, bl = (a + (b - a) * (x - i)).round().astype(int)
    return f"#{r:02x}{g:02x}{bl:02x}"


def _svg_heatmap(element_id: str, values: np.ndarray, ks: tuple[int, ...], ts: tuple[int, ...], *,
                 low: np.ndarray | None, high: np.ndarray | None, diverging: bool, title: str) -> str:
    cell_w, cell_h, left, top, bottom = 62, 42, 50, 6, 40
    width, height = left + cell_w * len(ts) + 10, top + cell_h * len(ks) + bottom
    bound = max(float(np.abs(values).max()), 0.05) if diverging else 1.0
    parts = [f'<figure style="width: {max(width, 300)}px"><figcaption>{html.escape(title)}</figcaption>'
             f'<svg id="{element_id}" class="heatmap" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)}">']
    for i, k in enumerate(ks):
        y = top + cell_h * (len(ks) - 1 - i)  # K grows upwards, as in the PNG
        parts.append(f'<text x="{left - 8}" y="{y + cell_h / 2 + 4}" text-anchor="end">{_esc(k)}</text>')
        for j, t in enumerate(ts):
            v = float(values[i, j])
            x = left + cell_w * j
            position = (v / bound + 1) / 2 if diverging else v
            fill = _mix(_DIVERGING if diverging else _VIRIDIS, position)
            dark_text = abs(v) < 0.6 * bound if diverging else v > 0.55
            ink = "#111" if dark_text else "#fff"
            tip = _esc(f"K={k}, T={t}: {v:+.3f}" if diverging else f"Pass@({k},{t}) = {v:.3f}")
            label = f"{v:+.2f}" if diverging else f"{v:.2f}"
            parts.append(f'<g class="cell" data-k="{_esc(k)}" data-t="{_esc(t)}"><title>{tip}'
                         + (f", {low[i, j]:.3f} to {high[i, j]:.3f}" if low is not None and high is not None else "")
                         + f'</title><rect x="{x}" y="{y}" width="{cell_w - 2}" height="{cell_h - 2}" rx="3" '
                         f'fill="{fill}"/><text x="{x + cell_w / 2 - 1}" y="{y + (18 if low is not None else 25)}" '
                         f'text-anchor="middle" fill="{ink}" class="v">{label}</text>')
            if low is not None and high is not None:
                parts.append(f'<text x="{x + cell_w / 2 - 1}" y="{y + 33}" text-anchor="middle" fill="{ink}" '
                             f'class="ci">{low[i, j]:.2f}–{high[i, j]:.2f}</text>')
            parts.append("</g>")
    for j, t in enumerate(ts):
        parts.append(f'<text x="{left + cell_w * j + cell_w / 2 - 1}" y="{top + cell_h * len(ks) + 14}" '
                     f'text-anchor="middle">{_esc(t)}</text>')
    parts.append(f'<text x="{left + cell_w * len(ts) / 2}" y="{height - 6}" text-anchor="middle" class="axis">'
                 f'turn budget T</text><text x="12" y="{top + cell_h * len(ks) / 2}" text-anchor="middle" '
                 f'class="axis" transform="rotate(-90 12 {top + cell_h * len(ks) / 2})">attempts K</text>'
                 "</svg></figure>")
    return "".join(parts)


def _rate_grid(left: float, plot_w: float, y: Callable[[float], float]) -> list[str]:
    """The horizontal grid lines of a rate axis (0 to 1 by quarters), each labelled on the left."""
    return [f'<line x1="{left}" x2="{left + plot_w}" y1="{y(v)}" y2="{y(v)}" class="grid"/>'
            f'<text x="{left - 6}" y="{y(v) + 4}" text-anchor="end">{v:g}</text>' for v in (0, 0.25, 0.5, 0.75, 1.0)]


def _svg_curves(result: PassKTResult) -> str:
    width, height, left, right, top, bottom = 440, 250, 44, 70, 8, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    t_min, t_max = min(result.ts), max(result.ts)

    def x(t: float) -> float:
        return left + (plot_w * (t - t_min) / (t_max - t_min) if t_max > t_min else plot_w / 2)

    def y(v: float) -> float:
        return top + plot_h * (1 - v)

    level = f"{result.grid.ci_level:.0%}"
    parts = [f'<figure><figcaption>Pass@K against the budget T ({level} CI bands)</figcaption>'
             f'<svg id="curves" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="Pass@K against T">']
    parts += _rate_grid(left, plot_w, y)
    for t in result.ts:
        parts.append(f'<text x="{x(t)}" y="{top + plot_h + 15}" text-anchor="middle">{_esc(t)}</text>')
    for i, k in enumerate(result.ks):
        color = _LINES[i % len(_LINES)]
        band = [(x(t), y(hi)) for t, hi in zip(result.ts, result.grid.ci_high[i])]
        band += [(x(t), y(lo)) for t, lo in reversed(list(zip(result.ts, result.grid.ci_low[i])))]
        points = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(result.ts, result.mean[i]))
        parts.append(f'<g class="curve" data-k="{_esc(k)}"><polygon points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in band)}" '
                     f'fill="{color}" opacity="0.15"/><polyline points="{points}" fill="none" stroke="{color}" '
                     f'stroke-width="2"/>')
        for t, v, lo, hi in zip(result.ts, result.mean[i], result.grid.ci_low[i], result.grid.ci_high[i]):
            parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3.2" fill="{color}"><title>Pass@({_esc(k)},{_esc(t)}) = '
                         f'{v:.3f} ({level} CI {lo:.3f} to {hi:.3f})</title></circle>')
        legend_y = top + 8 + 18 * i
        parts.append(f'<line x1="{left + plot_w + 12}" x2="{left + plot_w + 30}" y1="{legend_y}" y2="{legend_y}" '
                     f'stroke="{color}" stroke-width="2"/><text x="{left + plot_w + 34}" y="{legend_y + 4}">K={_esc(k)}'
                     f'</text></g>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle" class="axis">turn budget T'
                 f'</text><text x="12" y="{top + plot_h / 2}" text-anchor="middle" class="axis" '
                 f'transform="rotate(-90 12 {top + plot_h / 2})">Pass@K</text></svg></figure>')
    return "".join(parts)


def _svg_frontier(frontier: Frontier, strategy: str, element_id: str, rules: Sequence[RulePoint] = ()) -> str:
    """Success against expected turns per task: every cell a labelled point, the frontier a red step line;
    stopping-rule points (``rules``) as blue diamonds."""
    cells = frontier.of(strategy, "turns")
    width, height, left, right, top, bottom = 440, 260, 44, 14, 8, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    high = max([c.cost for c in cells] + [p.turns for p in rules]) or 1.0

    def x(cost: float) -> float:
        return left + plot_w * cost / high

    def y(v: float) -> float:
        return top + plot_h * (1 - v)

    what = "all K attempts run" if strategy == "parallel" else "stop at the first success"
    parts = [f'<figure><figcaption>{strategy.capitalize()} ({what}): Pass@(K,T) against expected turns per task'
             f'</figcaption><svg id="{element_id}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="success against cost">']
    parts += _rate_grid(left, plot_w, y)
    for tick in np.linspace(0, high, 5):
        parts.append(f'<text x="{x(tick):.1f}" y="{top + plot_h + 15}" text-anchor="middle">{tick:.0f}</text>')
    line = frontier.frontier(strategy, "turns")
    steps = [f"{x(line[0].cost):.1f},{y(line[0].success):.1f}"]
    for before, after in zip(line, line[1:]):
        steps += [f"{x(after.cost):.1f},{y(before.success):.1f}", f"{x(after.cost):.1f},{y(after.success):.1f}"]
    steps.append(f"{x(high):.1f},{y(line[-1].success):.1f}")
    parts.append(f'<polyline class="frontier" points="{" ".join(steps)}" fill="none" stroke="#d62728" '
                 f'stroke-width="2"/>')
    for c in cells:
        color = "#d62728" if c.on_frontier else "#888"
        parts.append(f'<g class="point" data-k="{c.k}" data-t="{c.t}"><circle cx="{x(c.cost):.1f}" '
                     f'cy="{y(c.success):.1f}" r="3" fill="{color}"><title>{c.label}: {c.cost:.1f} turns, '
                     f'Pass@({c.k},{c.t}) = {c.success:.3f} (CI {c.ci_low:.3f} to {c.ci_high:.3f})</title></circle>'
                     f'<text x="{x(c.cost) + 3:.1f}" y="{y(c.success) + 10:.1f}" class="ci">{c.label}</text></g>')
    for p in rules:
        cx, cy = x(p.turns), y(p.success)
        parts.append(f'<g class="rule-point" data-rule="{_esc(p.rule)}" data-k="{p.k}" data-t="{p.t}"><polygon '
                     f'points="{cx:.1f},{cy - 4:.1f} {cx + 4:.1f},{cy:.1f} {cx:.1f},{cy + 4:.1f} {cx - 4:.1f},{cy:.1f}" '
                     f'fill="#1f77b4"><title>{_esc(p.label)}: {p.turns:.1f} turns, success {p.success:.3f} (CI '
                     f'{p.ci_low:.3f} to {p.ci_high:.3f})</title></polygon></g>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle" class="axis">expected turns '
                 f'per task</text><text x="12" y="{top + plot_h / 2}" text-anchor="middle" class="axis" '
                 f'transform="rotate(-90 12 {top + plot_h / 2})">Pass@(K,T)</text></svg></figure>')
    return "".join(parts)


def _rules_table(points: Sequence[RulePoint], frontier: Frontier, element_id: str) -> str:
    """Each rule's best points (its own frontier) beside the best fixed sequential cell costing no more."""
    rows = []
    for p, cell in rule_rows(points, frontier):
        fixed = "<td>none</td><td></td><td></td>" if cell is None else (
            f"<td>{cell.label} @{cell.cost:.1f}</td><td>{cell.success:.3f}</td>"
            f"<td>{cell.ci_low:.3f}–{cell.ci_high:.3f}</td>")
        rows.append(f"<tr><td>{_esc(p.rule)}</td><td>{p.budget:g} (T={p.t})</td><td>{p.turns:.1f}</td>"
                    f"<td>{p.success:.3f}</td><td>{p.ci_low:.3f}–{p.ci_high:.3f}</td><td>{p.cut_rate:.0%}</td>"
                    f"{fixed}</tr>")
    return ('<figure><figcaption>Stopping rules (blue diamonds): attempts of at most T turns cut by the rule, '
            'run one after another within the total budget, against the best fixed cell at no more expected '
            f'turns</figcaption><div class="scroll"><table class="metrics" id="{element_id}"><thead><tr><th>rule'
            '</th><th>total turns</th><th>expected turns</th><th>success</th><th>CI</th><th>attempts cut</th>'
            '<th>best fixed K×T @turns</th><th>its Pass@(K,T)</th><th>CI</th></tr></thead><tbody>'
            f'{"".join(rows)}</tbody></table></div></figure>')


def _frontier_section(run: RunData, index: int, label: str | None, rules: Sequence[StoppingRule] = ()) -> str:
    """The success-against-cost panel of one run: both strategies' plots and the sequential frontier's cells."""
    suffix = "-b" if index else ""
    heading = (f"{'AB'[index]}: " if label else "") + "Success against cost: the best (K,T) for a budget"
    frontier = run.result.frontier()
    if frontier is None:
        return (f'<section class="frontier" id="frontier{suffix}"><h2>{_esc(heading)}</h2><p class="note">This result '
                'predates attempt costs (passkt.json has no attempt_costs): re-run eval to see them.</p></section>')
    rows = "".join(f"<tr><td>{c.cost:.1f}</td><td>{c.label}</td><td>{c.k * c.t}</td><td>{c.success:.3f}</td>"
                   f"<td>{c.ci_low:.3f}–{c.ci_high:.3f}</td></tr>" for c in frontier.frontier("sequential", "turns"))
    tokens = ("tokens: in frontier.csv" if "tokens" in frontier.kinds()
              else "tokens: not recorded (the policy reports none)")
    table = (f'<figure><figcaption>The frontier, sequential: the best cell up to each cost ({tokens})</figcaption>'
             f'<div class="scroll"><table class="metrics" id="frontier-table{suffix}"><thead><tr><th>expected turns'
             f'</th><th>K×T</th><th>at most</th><th>Pass@(K,T)</th><th>{run.result.grid.ci_level:.0%} CI</th></tr>'
             f'</thead><tbody>{rows}</tbody></table></div></figure>')
    points = rule_points(run.records, rules, run.result.ks, run.result.ts) if rules and run.records else []
    plots = "".join(_svg_frontier(frontier, strategy, f"frontier-{strategy}{suffix}",
                                  points if strategy == "sequential" else ())
                    for strategy in ("parallel", "sequential"))
    if points:
        table += _rules_table(points, frontier, f"stopping-table{suffix}")
    elif rules:
        table += '<p class="note">Stopping rules need the episode records (episodes.jsonl): none in this folder.</p>'
    return (f'<section class="frontier" id="frontier{suffix}"><h2>{_esc(heading)}</h2><div class="row wide">{plots}'
            f'{table}</div></section>')


# -- HTML -----------------------------------------------------------------------------------

def _esc(value: Any) -> str:
    return html.escape(str(value))


def _json_script(element_id: str, data: Any) -> str:
    # \u003c etc.: a "</script>" inside an observation must not end the element.
    text = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e").replace(
        "&", "\\u0026")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def _kwargs(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={json.dumps(v)}" for k, v in kwargs.items()) or "–"


def _count(value: Any) -> str:
    """A count from ``timing`` as an integer ("400", not "400.0": the file's schema reads numbers as
    floats), or ``?`` when the results did not record it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        return str(int(value))
    return "?" if value is None else str(value)


def _identity(run: RunData, label: str) -> str:
    r, config = run.result, run.result.config
    versions = config.get("versions")
    version_text = (", ".join(f"{name} {v}" for name, v in versions.items()) if versions
                    else "not recorded (written before results kept them)")
    timing = r.timing
    rows = [
        ("results", str(run.folder)), ("env", r.env_id), ("env kwargs", _kwargs(config.get("env_kwargs", {}))),
        ("env settings", _kwargs(config["env_settings"]) if config.get("env_settings")
         else "not recorded (written before results kept them)"),
        ("policy", r.policy), ("policy kwargs", _kwargs(config.get("policy_kwargs", {}))),
        ("seed", r.seed), ("grid", f"K {', '.join(map(str, r.ks))} × T {', '.join(map(str, r.ts))}"),
        ("episodes", f"{r.n_tasks} tasks × {r.attempts} attempts, mode {r.mode}"
                     + (", budget shown to the agent" if r.show_budget else "")),
        ("run", f"{_count(timing.get('episodes'))} episodes, {_count(timing.get('steps'))} turns in "
                f"{timing.get('rollout_seconds', 0):.1f} s ({config.get('executor', '?')}, workers "
                f"{config.get('workers', '?')}); bootstrap {config.get('bootstrap', '?')} × {r.grid.ci_level:.0%} CI"),
        ("transcripts", f"{len(run.transcripts)} of {len(run.records)} episodes" if run.transcripts else
         "none stored (agentgym-budget eval --transcripts keeps observations and replies)"),
        ("versions", version_text),
    ]
    body = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in rows)
    return f'<section class="identity"><h2>{_esc(label)}</h2><dl>{body}</dl></section>'


def _metrics_table(run: RunData, label: str | None, element_id: str) -> str:
    body = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in run.result.metrics_rows())
    caption = f"Agent behaviour (episodes at T={run.result.metrics.get('budget')})"
    caption = f"{label}: {caption[0].lower()}{caption[1:]}" if label else caption
    return (f'<figure class="behaviour"><figcaption>{_esc(caption)}</figcaption>'
            f'<table class="metrics" id="{element_id}">{body}</table></figure>')


def _compare(a: RunData, b: RunData, labels: tuple[str, str]) -> str:
    ks, ts, diff = difference(a.result, b.result)
    heatmap = _svg_heatmap("diff-heatmap", diff, ks, ts, low=None, high=None, diverging=True,
                           title=f"Pass@(K,T): {labels[1]} minus {labels[0]} (blue: {labels[1]} higher)")
    t = max(ts)
    n = min(a.result.n_tasks, b.result.n_tasks)
    same_tasks = a.result.task_seeds[:n] == b.result.task_seeds[:n]
    if not same_tasks:
        return (f'<section id="compare"><h2>Comparison</h2>{heatmap}<p class="note">The two runs played different '
                f'tasks (other seeds or envs): no per-task comparison.</p></section>')
    sa = a.result.successes[a.result.ts.index(t), :n]
    sb = b.result.successes[b.result.ts.index(t), :n]
    ra, rb = sa / a.result.attempts, sb / b.result.attempts
    order = sorted(range(n), key=lambda task: (rb[task] - ra[task], task))
    wins, losses = int((rb > ra).sum()), int((rb < ra).sum())
    rows = []
    for task in order:
        delta = rb[task] - ra[task]
        cls = "win" if delta > 0 else "loss" if delta < 0 else ""
        cells = (task, a.result.plan_lengths[task], f"{sa[task]}/{a.result.attempts}",
                 f"{sb[task]}/{b.result.attempts}", f"{delta:+.2f}")
        rows.append(f'<tr class="{cls}" data-task="{task}" title="show its episodes">'
                    + "".join(f"<td>{_esc(cell)}</td>" for cell in cells) + "</tr>")
    return (f'<section id="compare"><h2>Comparison: {_esc(labels[1])} vs {_esc(labels[0])}</h2>'
            f'<div class="row">{heatmap}<div><p class="summary">At T={_esc(t)}, {_esc(labels[1])} wins more attempts '
            f'than {_esc(labels[0])} on <b class="win-text">{wins}</b> tasks, fewer on <b class="loss-text">{losses}'
            f'</b>, as many on {n - wins - losses} (of {n}).</p><div class="scroll"><table id="per-task">'
            f'<thead><tr><th>task</th><th>plan</th><th>{_esc(labels[0])}</th><th>{_esc(labels[1])}</th>'
            f'<th>Δ success</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div></div></div></section>')


def _episodes(runs: list[RunData], labels: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[str]]:
    """The list data of each run, and one JSON ``<script>`` per stored transcript (parsed when opened)."""
    episodes, scripts = [], []
    for index, run in enumerate(runs):
        summaries = []
        for record in sorted(run.records, key=lambda r: (r.task, r.attempt, r.budget)):
            line = run.transcripts.get((record.task, record.attempt, record.budget))
            summary = episode_summary(record, index, line is not None)
            summaries.append(summary)
            if line is not None:
                scripts.append(_json_script(f"tr-{summary['id']}", {
                    "turns": line.get("turns", []), "final_observation": line.get("final_observation")}))
        episodes.append({"label": labels[index], "episodes": summaries})
    return episodes, scripts


def _results(run: RunData, index: int, label: str | None) -> str:
    """Heatmap, curves and metrics of one run (``label``: its name in a comparison)."""
    r = run.result
    title = (f"{'AB'[index]}: " if label else "") + (
        f"Pass@(K,T), {r.n_tasks} tasks × {r.attempts} attempts ({r.grid.ci_level:.0%} CI)")
    suffix = "-b" if index else ""
    heat = _svg_heatmap(f"heatmap{suffix}", r.mean, r.ks, r.ts, low=r.grid.ci_low, high=r.grid.ci_high,
                        diverging=False, title=title)
    curves = _svg_curves(r).replace('id="curves"', f'id="curves{suffix}"')
    metrics = _metrics_table(run, label, f"metrics{suffix}")
    return f'<section class="results"><div class="row wide">{heat}{curves}{metrics}</div></section>'


def _options(values: Any) -> str:
    return '<option value="">any</option>' + "".join(f"<option>{_esc(v)}</option>" for v in values)


def _browse(episodes: list[dict[str, Any]], labels: tuple[str, ...], attempts: int) -> str:
    """The filters, the episode list (filled by the page's script) and the transcript panel."""
    compare = len(episodes) == 2
    run_filter = ('<label>run <select id="f-run"><option value="">both</option>'
                  + "".join(f'<option value="{i}">{"AB"[i]}: {_esc(labels[i])}</option>' for i in range(2))
                  + "</select></label>") if compare else ""
    budgets = sorted({e["budget"] for run in episodes for e in run["episodes"]})
    return f'''<section id="browse"><h2>Episodes</h2>
<div class="filters">{run_filter}
<label>task <input id="f-task" type="number" min="0" placeholder="any"></label>
<label>attempt <select id="f-attempt">{_options(range(attempts))}</select></label>
<label>budget <select id="f-budget">{_options(budgets)}</select></label>
<label>outcome <select id="f-outcome">{_options(["won", "lost"])}</select></label>
<label>errors ≥ <input id="f-errors" type="number" min="0" value="0"></label>
<span id="ep-count" class="muted"></span></div>
<div class="browse">
<div class="list scroll"><table id="episodes"><thead><tr>{"<th>run</th>" if compare else ""}<th>task</th><th>att.</th>
<th>T</th><th>outcome</th><th>turns</th><th title="invalid, no-effect, loss, detour or stall turns">errors</th>
<th title="turns whose action is not the expert's">off-expert</th></tr></thead><tbody></tbody></table>
<button id="more" hidden>show all</button></div>
<div id="transcript" class="transcript"><p class="muted">Click an episode to read it turn by turn.</p></div>
</div>
<p class="legend"><span class="tag err">invalid</span> not a valid command · <span class="tag err">no-effect</span>
valid but changed nothing · <span class="tag err">loss</span> lost the task · <span class="tag err">detour</span> the
expert's plan got longer · <span class="tag err">stall</span> the plan got no shorter ·
<span class="tag warn">off-expert</span> not the expert's action · <span class="tag ok">recovery</span> first on-plan
turn after an error (errors as the metrics count them)</p>
</section>'''


def build_report(folder: str | Path, folder_b: str | Path | None = None,
                 labels: tuple[str, str] | None = None, rules: Sequence[StoppingRule] = ()) -> str:
    """The report page of ``folder`` (and its comparison with ``folder_b``) as HTML text; ``rules``: stopping
    rules to place on the frontier (:mod:`~agentgym_budget.eval.stopping`)."""
    runs = [load_run(folder)] + ([load_run(folder_b)] if folder_b is not None else [])
    compare = len(runs) == 2
    if labels is None:
        labels = (runs[0].result.policy, runs[-1].result.policy)
        if compare and labels[0] == labels[1]:
            labels = (f"{runs[0].folder.name} ({labels[0]})", f"{runs[1].folder.name} ({labels[1]})")
    names = labels if compare else (runs[0].result.policy,)
    episodes, scripts = _episodes(runs, names)
    main = runs[0].result
    title = f"{main.env_id} — {main.policy}" + (f" vs {runs[1].result.policy}" if compare else "")
    sections = [
        f'<header><h1>{_esc(title)}</h1><p class="muted">agentgym-budget evaluation report: Pass@(K,T), agent '
        f'behaviour and every episode. Offline page, nothing is loaded from the network.</p></header>',
        '<div class="row">' + "".join(_identity(run, f"{'AB'[i]}: {labels[i]}" if compare else "The run")
                                      for i, run in enumerate(runs)) + "</div>",
        *(_results(run, i, labels[i] if compare else None) for i, run in enumerate(runs)),
        *(_frontier_section(run, i, labels[i] if compare else None, rules) for i, run in enumerate(runs)),
        *([_compare(runs[0], runs[1], labels)] if compare else []),
        _browse(episodes, names, max(run.result.attempts for run in runs)),
    ]
    # the error tags travel with the data: the script's "errors" filter is the metrics' own list
    data = _json_script("report-data", {"runs": episodes, "compare": compare, "error_tags": list(ERROR_TAGS)})
    return _PAGE.format(title=_esc(title), css=_CSS, mode="compare" if compare else "single",
                        body="\n".join(sections), data=data, transcripts="\n".join(scripts), js=_JS)


def write_report(folder: str | Path, out: str | Path | None = None, folder_b: str | Path | None = None,
                 labels: tuple[str, str] | None = None, rules: Sequence[StoppingRule] = ()) -> Path:
    """Write the report of ``folder`` (compared with ``folder_b``) to ``out`` (default ``folder/report.html``)."""
    path = Path(out) if out is not None else Path(folder) / REPORT_FILE
    path.write_text(build_report(folder, folder_b, labels, rules), encoding="utf-8")
    return path


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>{css}</style></head>
<body class="{mode}">
{body}
{data}
{transcripts}
<script>{js}</script>
</body></html>
"""

_CSS = """
:root { --ink: #1d232b; --muted: #66707c; --line: #dde2e8; --bg: #f6f7f9; --err: #d4453a; --warn: #c98a00;
  --ok: #2e8b57; --sel: #e8f0fe; }
* { box-sizing: border-box; }
body { margin: 0; padding: 18px 24px 40px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--ink); background: var(--bg); }
h1 { font-size: 21px; margin: 0 0 2px; } h2 { font-size: 16px; margin: 0 0 10px; }
.muted, .note { color: var(--muted); } header { margin-bottom: 12px; }
.row { display: flex; flex-wrap: wrap; gap: 14px; align-items: flex-start; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; margin-top: 14px; }
.row > section.identity { margin-top: 0; flex: 1 1 520px; }
.row.wide { gap: 24px 26px; }
.row.wide > .behaviour { flex: 1 1 auto; min-width: 0; overflow-x: auto; }
table { border-collapse: collapse; }
.identity dl { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 3px 14px; margin: 0;
  font-size: 13px; }
.identity dt { font-weight: 600; color: var(--muted); } .identity dd { margin: 0; word-break: break-word; }
body.single .identity dl { grid-template-columns: max-content minmax(0, 1fr) max-content minmax(0, 1fr); }
figure { margin: 0; } figcaption { font-weight: 700; font-size: 13px; margin: 0 0 6px; }
table.metrics th { text-align: left; font-weight: 600; color: var(--muted); padding: 3px 10px; white-space: nowrap; }
table.metrics { font-size: 13px; } table.metrics td { text-align: right; padding: 3px 10px; white-space: nowrap;
  font-variant-numeric: tabular-nums; }
table.metrics tr:nth-child(odd), #episodes tbody tr:nth-child(odd) { background: #fafbfc; }
svg { font: 11px system-ui, sans-serif; fill: var(--ink); }
svg .svg-title { font-weight: 600; font-size: 12px; } svg .axis { fill: var(--muted); }
svg .v { font-size: 13px; font-weight: 600; } svg .ci { font-size: 9.5px; opacity: .85; }
svg .grid { stroke: #e6e9ee; } svg .cell:hover rect { stroke: #111; stroke-width: 1.5; }
.filters { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin-bottom: 10px; }
.filters input { width: 70px; } .filters input, .filters select { font: inherit; padding: 2px 4px; }
.browse { display: grid; grid-template-columns: minmax(380px, 2fr) 3fr; gap: 14px; }
.scroll { max-height: 640px; overflow: auto; border: 1px solid var(--line); border-radius: 6px; }
#episodes, #per-task { width: 100%; font-size: 13px; font-variant-numeric: tabular-nums; }
#episodes th, #per-task th { position: sticky; top: 0; background: #eef1f5; text-align: right; padding: 4px 8px; }
#episodes td, #per-task td { text-align: right; padding: 3px 8px; border-top: 1px solid #f0f2f5; }
#episodes tbody tr { cursor: pointer; } #episodes tbody tr:hover { background: #f1f5fb; }
#episodes tbody tr.sel { background: var(--sel); outline: 1px solid #9bb8f0; }
.won { color: var(--ok); font-weight: 600; } .lost { color: var(--err); font-weight: 600; }
.nerr { color: var(--err); font-weight: 600; }
#per-task tbody tr { cursor: pointer; } #per-task tbody tr:hover { background: #f1f5fb; }
#per-task tr.win td:last-child, .win-text { color: #2166ac; }
#per-task tr.loss td:last-child, .loss-text { color: #b2182b; }
.transcript { border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; max-height: 640px;
  overflow: auto; background: #fcfcfd; }
.transcript h3 { margin: 0 0 4px; font-size: 15px; }
.turn { border-left: 4px solid #cfd6de; background: #fff; border-radius: 4px; padding: 6px 10px; margin: 8px 0;
  box-shadow: 0 1px 0 #eceff3; }
.turn.err { border-left-color: var(--err); background: #fff6f5; }
.turn.warn { border-left-color: var(--warn); background: #fffbf0; }
.turn.rec { border-left-color: var(--ok); background: #f3fbf6; }
.turn-head { display: flex; gap: 6px; align-items: center; font-size: 12px; color: var(--muted); }
.tno { font-weight: 700; color: var(--ink); min-width: 52px; }
pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0; font: 12.5px/1.4 ui-monospace, SFMono-Regular,
  Menlo, Consolas, monospace; }
pre.obs { color: #39424d; } pre.reply { color: #4a3d8f; background: #f6f4ff; padding: 4px 6px; border-radius: 4px; }
.act { font: 600 13px ui-monospace, Menlo, Consolas, monospace; color: #0b4fa8; }
.expert { font: 12px ui-monospace, Menlo, Consolas, monospace; color: var(--warn); }
.final { border-left: 4px solid #8c99a6; } .tokens { margin-left: auto; }
.tag { display: inline-block; border-radius: 9px; padding: 0 7px; font-size: 11px; font-weight: 600; color: #fff; }
.tag.err { background: var(--err); } .tag.warn { background: var(--warn); } .tag.ok { background: var(--ok); }
.tag.won { background: #2166ac; }
.legend { font-size: 12px; color: var(--muted); margin: 10px 0 0; }
button { font: inherit; margin: 6px; }
"""

_JS = r"""
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const $ = (s) => document.querySelector(s);
  // Every piece of HTML the script makes goes through the html`...` tag: it escapes each ${value}
  // (text, numbers, anything from the data), except fragments the tag made itself.  setHtml, the
  // one place that assigns innerHTML, takes nothing else, so data can never become markup.
  const ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;", "`": "&#96;"};
  class Html { constructor(text) { this.text = text; } }
  const esc = (v) => v instanceof Html ? v.text : Array.isArray(v) ? v.map(esc).join("")
    : String(v).replace(/[&<>"'`]/g, (c) => ENTITIES[c]);
  const html = (strings, ...values) => new Html(strings.reduce((out, s, i) => out + esc(values[i - 1]) + s));
  const setHtml = (el, fragment) => {
    if (!(fragment instanceof Html)) throw new TypeError("setHtml takes html`...` fragments only");
    el.innerHTML = fragment.text;
  };
  const ERRORS = new Set(data.error_tags);
  const byId = new Map();
  let total = 0;
  data.runs.forEach((run) => run.episodes.forEach((e) => { byId.set(e.id, e); total += 1; }));
  const f = {run: $("#f-run"), task: $("#f-task"), attempt: $("#f-attempt"), budget: $("#f-budget"),
             outcome: $("#f-outcome"), errors: $("#f-errors")};
  let limit = 200, current = null;

  function matches(e) {
    if (f.run && f.run.value !== "" && String(e.run) !== f.run.value) return false;
    const task = f.task.value.trim();
    if (task !== "" && String(e.task) !== task) return false;
    if (f.attempt.value !== "" && String(e.attempt) !== f.attempt.value) return false;
    if (f.budget.value !== "" && String(e.budget) !== f.budget.value) return false;
    if (f.outcome.value === "won" && e.won === null) return false;
    if (f.outcome.value === "lost" && e.won !== null) return false;
    return e.errors >= (parseInt(f.errors.value, 10) || 0);
  }

  function rowHtml(e) {
    return html`<tr data-id="${e.id}"${e.id === current ? html` class="sel"` : ""}>${data.compare
      ? html`<td title="${data.runs[e.run].label}">${"AB"[e.run]}</td>` : ""}<td>${e.task}</td><td>${e.attempt
      }</td><td>${e.budget}</td>${e.won === null ? html`<td class="lost">lost</td>` : html`<td class="won">won @${e.won
      }</td>`}<td>${e.turns}</td><td${e.errors ? html` class="nerr"` : ""}>${e.errors}</td><td>${e.off}</td></tr>`;
  }

  function renderList() {
    const shown = [];
    data.runs.forEach((run) => run.episodes.forEach((e) => { if (matches(e)) shown.push(e); }));
    $("#ep-count").textContent = shown.length + " of " + total + " episodes";
    setHtml($("#episodes tbody"), html`${shown.slice(0, limit).map(rowHtml)}`);
    const more = $("#more");
    more.hidden = shown.length <= limit;
    more.textContent = "show all " + shown.length;
  }

  function badge(tag) {
    const kind = ERRORS.has(tag) ? "err" : tag === "recovery" ? "ok" : "warn";
    return html`<span class="tag ${kind}">${tag}</span>`;
  }

  function turnHtml(e, i, t) {  // turn i + 1 of episode e; t: its transcript row (null: none stored)
    const tags = e.tags[i] || [];
    const cls = tags.some((x) => ERRORS.has(x)) ? "err"
      : tags.includes("recovery") ? "rec" : tags.includes("off-expert") ? "warn" : "";
    const known = (n) => (n == null ? "?" : n);
    const tokens = t && (t.prompt_tokens != null || t.completion_tokens != null)
      ? html`<span class="tokens">${known(t.prompt_tokens)} + ${known(t.completion_tokens)} tokens</span>` : "";
    const won = e.won === i + 1 ? html`<span class="tag won">won</span>` : "";
    return html`<div class="turn ${cls}" id="turn-${i + 1}"><div class="turn-head"><span class="tno">turn ${i + 1
      }</span>${tags.map(badge)}${won}${tokens}</div>${[
      t ? html`<pre class="obs">${t.observation}</pre>` : "",
      t && t.reply ? html`<pre class="reply">${t.reply}</pre>` : "",
      html`<div class="act">&gt; ${e.actions[i]}</div>`,
      t && t.expert_action && tags.includes("off-expert") ? html`<div class="expert">expert: ${t.expert_action}</div>` : "",
      t && t.action_effect != null ? html`<div class="muted">effect: ${JSON.stringify(t.action_effect)}</div>` : "",
    ]}</div>`;
  }

  function openEpisode(id) {
    const e = byId.get(id), box = $("#transcript");
    if (!e) { setHtml(box, html`<p class="muted">No episode ${id} in this report.</p>`); return; }
    current = id;
    document.querySelectorAll("#episodes tr.sel").forEach((tr) => tr.classList.remove("sel"));
    const row = [...document.querySelectorAll("#episodes tr[data-id]")].find((tr) => tr.dataset.id === id);
    if (row) row.classList.add("sel");
    const node = document.getElementById("tr-" + id);
    const tr = node ? JSON.parse(node.textContent) : null;  // parsed only now: lazily
    const run = data.compare ? html`${data.runs[e.run].label} · ` : "";
    const outcome = e.won === null ? html`<span class="lost">lost</span>` : html`<span class="won">won at turn ${e.won}</span>`;
    const missing = tr ? "" : ". No transcript stored: actions and flags only " +
      "(agentgym-budget eval --transcripts keeps the observations and replies)";
    const turns = [];
    for (let i = 0; i < e.turns; i++) turns.push(turnHtml(e, i, tr && tr.turns[i]));
    const end = tr && tr.final_observation != null ? html`<div class="turn final"><div class="turn-head"><span
      class="tno">end</span></div><pre class="obs">${tr.final_observation}</pre></div>` : "";
    setHtml(box, html`<div id="episode" data-episode="${id}"><h3>${run}task ${e.task}, attempt ${e.attempt
      }, budget ${e.budget} — ${outcome}</h3><p class="muted">${e.turns} turns, ${e.errors} errors, ${e.off
      } actions off the expert's${missing}</p>${turns}${end}</div>`);
    box.scrollTop = 0;
  }

  function fromHash() {
    const m = /episode=([\w-]+)/.exec(location.hash);
    if (m) openEpisode(m[1]);
  }

  Object.values(f).forEach((el) => el && el.addEventListener("input", () => { limit = 200; renderList(); }));
  $("#more").addEventListener("click", () => { limit = Infinity; renderList(); });
  $("#episodes tbody").addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr[data-id]");
    if (tr) { history.replaceState(null, "", "#episode=" + tr.dataset.id); openEpisode(tr.dataset.id); }
  });
  const perTask = $("#per-task tbody");  // comparison: a task's row filters the list to its episodes
  if (perTask) perTask.addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr[data-task]");
    if (tr) { f.task.value = tr.dataset.task; limit = 200; renderList(); $("#browse").scrollIntoView(); }
  });
  window.addEventListener("hashchange", fromHash);
  renderList();
  fromHash();
  document.body.dataset.renderedMs = performance.now().toFixed(1);  // read by the browser test and benchmark
})();
"""

"""The result of a Pass@(K,T) evaluation: its table, and its JSON / CSV files.

Files written by :meth:`PassKTResult.save` into an output folder:

* ``passkt.json`` — everything: the configuration, the grid (mean, standard error, CI per
  cell), every task's success counts per budget, the behaviour metrics and timings;
  :meth:`PassKTResult.load` reads it back;
* ``passkt.csv`` — the grid in tidy form: ``k, t, pass, stderr, ci_low, ci_high``;
* ``task_counts.csv`` — ``task, reset_seed, plan_length, t, attempts, successes``: every
  per-task count the grid is computed from;
* ``frontier.csv`` — every cell's expected cost (turns, tokens, seconds; attempts in parallel or
  sequentially) and success, and which cells form the frontier
  (:mod:`~agentgym_budget.eval.frontier`); written when the result holds its attempts' costs
  (``passkt.json``'s ``attempt_costs``; results written before it lack them and load without).

(The evaluator also streams ``episodes.jsonl``, one :class:`EpisodeRecord` per line, and with
transcripts on ``transcripts.jsonl.gz``; ``agentgym-budget report`` turns the folder into one HTML
page, see :mod:`~agentgym_budget.eval.report`.)
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from agentgym_budget.eval.cost import AttemptCosts
from agentgym_budget.eval.frontier import FRONTIER_FILE, Frontier, frontier_of
from agentgym_budget.eval.passkt import PassKTGrid, passkt_grid
from agentgym_budget.episodes.schema import (Bit, CheckedAs, Index, Known, NonNegative, Positive, RecordError,
                                             Turn, UnitInterval, checked, parse_json)

__all__ = ["AttemptCostsFile", "PassKTFile", "PassKTResult", "RunConfig", "difference", "grid_table", "number_text"]

RESULT_FORMAT = "agentgym-budget/passkt/1"


@dataclass
class PassKTResult:
    """A Pass@(K,T) grid with the counts it comes from and the behaviour metrics.

    ``successes[i, j]`` is the number of the ``attempts`` attempts at task ``j`` won within
    ``ts[i]`` turns.  ``mode`` is ``"shortcut"`` (every budget answered from one rollout at
    the largest) or ``"per_t"`` (one rollout per budget).  ``usage``: the tokens an LLM
    policy's backend reported, summed over the episodes (``prompt_tokens``,
    ``completion_tokens``; ``None`` for policies that report none).  ``costs``: every attempt's
    outcome and cost at every T (:class:`~agentgym_budget.eval.cost.AttemptCosts`; ``None`` in
    results written before it), from which :meth:`frontier` is computed.
    """

    env_id: str
    policy: str
    mode: str
    show_budget: bool
    ks: tuple[int, ...]
    ts: tuple[int, ...]
    attempts: int
    seed: int
    successes: np.ndarray
    task_seeds: list[int]
    plan_lengths: list[int]
    grid: PassKTGrid
    metrics: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    #: The game each task's seed drew (``""``: the env does not say), to detect repeated games.
    task_games: list[str] = field(default_factory=list)
    costs: AttemptCosts | None = None

    @property
    def n_tasks(self) -> int:
        return int(self.successes.shape[1])

    @property
    def mean(self) -> np.ndarray:
        """Pass@(K,T), shape ``(len(ks), len(ts))``."""
        return self.grid.mean

    def value(self, k: int, t: int) -> float:
        """Pass@(k,t)."""
        return float(self.grid.mean[self.ks.index(k), self.ts.index(t)])

    def frontier(self, ks: Sequence[int] | None = None) -> Frontier | None:
        """Success against cost of every cell (of ``ks``), with the frontier; ``None`` without the attempts' costs."""
        return None if self.costs is None else frontier_of(self.grid, self.costs, ks)

    # -- serialisation --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        g = self.grid
        return {
            "format": RESULT_FORMAT,
            "env_id": self.env_id,
            "policy": self.policy,
            "mode": self.mode,
            "show_budget": self.show_budget,
            "ks": list(self.ks),
            "ts": list(self.ts),
            "tasks": self.n_tasks,
            "attempts": self.attempts,
            "seed": self.seed,
            "pass": g.mean.tolist(),
            "stderr": g.stderr.tolist(),
            "ci_low": g.ci_low.tolist(),
            "ci_high": g.ci_high.tolist(),
            "ci_level": g.ci_level,
            "successes": self.successes.tolist(),
            "task_seeds": list(self.task_seeds),
            "plan_lengths": list(self.plan_lengths),
            "task_games": list(self.task_games),
            "metrics": self.metrics,
            "config": self.config,
            "timing": self.timing,
            "usage": self.usage,
            **({} if self.costs is None else {"attempt_costs": _costs_dict(self.costs)}),
        }

    @classmethod
    def from_dict(cls, data: Any) -> PassKTResult:
        """The result of a parsed ``passkt.json``, checked (:class:`PassKTFile`): a wrong key, type,
        range or shape is a :class:`~agentgym_budget.episodes.schema.RecordError` naming the field."""
        if not isinstance(data, dict) or data.get("format") != RESULT_FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise RecordError(f"not a Pass@(K,T) result file (format {found!r}, expected {RESULT_FORMAT!r})")
        file = PassKTFile.read(data)
        ks, ts = tuple(file.ks), tuple(file.ts)
        successes = np.asarray(file.successes, dtype=np.int64).reshape(len(ts), file.tasks)
        per_task = passkt_grid(successes, file.attempts, ks, ts, bootstrap=0).per_task
        grid = PassKTGrid(ks, ts, np.asarray(file.pass_), np.asarray(file.stderr), np.asarray(file.ci_low),
                          np.asarray(file.ci_high), per_task, file.ci_level)
        result = cls(
            env_id=file.env_id, policy=file.policy, mode=file.mode, show_budget=file.show_budget, ks=ks, ts=ts,
            attempts=file.attempts, seed=file.seed, successes=successes, task_seeds=file.task_seeds,
            plan_lengths=file.plan_lengths, grid=grid, metrics=file.metrics, config=file.config, timing=file.timing,
            usage=file.usage, task_games=file.task_games,
            costs=None if file.attempt_costs is None else _costs_of(file.attempt_costs, ts),
        )
        # The nested metrics are checked by reading them as every consumer does (the table rows):
        # a structure the evaluator does not write is refused here, not a traceback in 'report'.
        try:
            result.metrics_rows()
        except (TypeError, AttributeError, KeyError, IndexError, ValueError) as e:
            raise RecordError(f"metrics: not as the evaluator writes them ({type(e).__name__}: {e})") from None
        return result

    def save_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> PassKTResult:
        """Read a ``passkt.json`` (or a folder holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / "passkt.json"
        try:
            return cls.from_dict(parse_json(path.read_bytes()))
        except ValueError as e:  # not JSON, not UTF-8, or a RecordError: name the file
            raise RecordError(f"{path}: {e}") from None

    def save_csv(self, folder: str | Path) -> tuple[Path, Path]:
        """Write ``passkt.csv`` (the grid) and ``task_counts.csv`` (per-task counts) into ``folder``."""
        folder = Path(folder)
        grid_path, counts_path = folder / "passkt.csv", folder / "task_counts.csv"
        g = self.grid
        with grid_path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["k", "t", "pass", "stderr", "ci_low", "ci_high", "tasks", "attempts", "mode"])
            for i, k in enumerate(self.ks):
                for j, t in enumerate(self.ts):
                    writer.writerow([k, t, f"{g.mean[i, j]:.6f}", f"{g.stderr[i, j]:.6f}", f"{g.ci_low[i, j]:.6f}",
                                     f"{g.ci_high[i, j]:.6f}", self.n_tasks, self.attempts, self.mode])
        with counts_path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["task", "reset_seed", "plan_length", "t", "attempts", "successes"])
            for task in range(self.n_tasks):
                for j, t in enumerate(self.ts):
                    writer.writerow([task, self.task_seeds[task], self.plan_lengths[task], t, self.attempts,
                                     int(self.successes[j, task])])
        return grid_path, counts_path

    def save(self, folder: str | Path) -> list[Path]:
        """Write ``passkt.json``, ``passkt.csv``, ``task_counts.csv`` and (with the attempts' costs)
        ``frontier.csv`` into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        frontier = self.frontier()
        return [self.save_json(folder / "passkt.json"), *self.save_csv(folder),
                *([] if frontier is None else [frontier.save_csv(folder / FRONTIER_FILE)])]

    # -- display --------------------------------------------------------------------------
    def table(self) -> Any:
        """A ``rich.table.Table``: Pass@(K,T) ± standard error, K down, T across."""
        from rich.text import Text

        # Text, not markup: an env id or a served model's name may hold "[/]"
        title = Text(f"Pass@(K,T) — {self.env_id}, {self.policy}\n{self.n_tasks} tasks x {self.attempts} attempts, "
                 f"mode={self.mode}", style="table.title")
        caption = f"mean±standard error over tasks; {self.grid.ci_level:.0%} bootstrap CIs in passkt.csv"

        def cell(k: int, t: int) -> str:
            i, j = self.ks.index(k), self.ts.index(t)
            return f"{self.grid.mean[i, j]:.3f}[dim]±{self.grid.stderr[i, j]:.2f}[/dim]"

        return grid_table(title, caption, self.ks, self.ts, cell)

    def metrics_rows(self) -> list[tuple[str, str]]:
        """The behaviour metrics as ``(label, value)`` rows (the terminal table's and the report's)."""

        def fmt(value: Any, digits: int = 3) -> str:
            return "n/a" if value is None else f"{value:.{digits}f}"

        m = self.metrics
        cis = m.get("ci", {})

        def ci(name: str) -> str:
            return _ci_text(cis.get(name) or {})

        dq, er, res = m.get("decision_quality", {}), m.get("error_recovery", {}), m.get("resilience", {})
        early = m.get("early_turns")
        rows = [
            (f"expert agreement: all / t<={early} / later",
             f"{fmt(dq.get('overall'))}{ci('decision_quality.overall')} / {fmt(dq.get('early'))} / "
             f"{fmt(dq.get('late'))}"),
            ("errors per episode", fmt(er.get("errors_per_episode"), 2) + ci("errors_per_episode")),
        ]
        kinds = er.get("errors_by_kind")
        if kinds:
            rows.append(("  by kind (" + " / ".join(kinds) + ")", " / ".join(str(n) for n in kinds.values())))
        rows += [
            ("success with / without an error",
             f"{fmt(er.get('success_after_error'))}{ci('success_after_error')} / "
             f"{fmt(er.get('success_without_error'))}{ci('success_without_error')}"),
            ("turns to get back on plan", fmt(er.get("mean_turns_to_recover"), 2) + ci("mean_turns_to_recover")),
        ]
        probes = m.get("probes", {}).get("summary")
        if probes:
            rows += [(f"probe states ({probes['agreement']['probes']}): expert agreement",
                      fmt(probes["agreement"]["value"]) + _ci_text(probes["agreement"])),
                     ("probe states: expert success-to-go",
                      fmt(probes["success_to_go"]["value"]) + _ci_text(probes["success_to_go"]))]
        if m.get("plan_lengths_known", True):
            rows.append(("turns per expert plan step (wins)", fmt(res.get("mean_turns_per_plan_step"), 2)))
        else:
            rows.append(("expert plan lengths", "unknown (one-step plans)"))
        largest = str(max(self.ts))
        for label, bucket in res.get("by_plan_length", {}).items():
            rows.append((f"success T={largest}, plan {label} ({bucket['episodes']} ep.)",
                         fmt(bucket["success"].get(largest))))
        return rows

    def metrics_table(self) -> Any:
        """A ``rich.table.Table`` summarising the behaviour metrics."""
        from rich.table import Table

        from rich.markup import escape

        caption = f"[...] = {self.grid.ci_level:.0%} bootstrap CI over tasks" if self.metrics.get("ci") else None
        table = Table(title=f"Agent behaviour (episodes at T={self.metrics.get('budget')})", show_header=False,
                      caption=caption)
        table.add_column("metric", style="bold")
        table.add_column("value", justify="right")
        for label, value in self.metrics_rows():
            table.add_row(escape(label), escape(value))  # "[0.12, 0.34]" is text, not rich markup
        return table


@dataclass
class RunConfig:
    """``passkt.json``'s ``config``: the settings of the run (every key optional: older files lack some)."""

    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: every setting of the env, defaults included (files before it: only env_kwargs)
    env_settings: dict[str, Any] = field(default_factory=dict)
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    workers: Positive | None = None
    concurrency: Positive = 1
    executor: str = ""
    bootstrap: Index = 0
    requested_mode: str = ""
    transcripts: bool | None = None
    versions: dict[str, str] = field(default_factory=dict)


@dataclass
class AttemptCostsFile:
    """``passkt.json``'s ``attempt_costs``: per T, task and attempt (nested lists), whether it was won
    within T (1 or 0) and its turns, tokens and seconds (to 0.1 ms) under T (``null``: unknown)."""

    won: list[list[list[Bit]]]
    turns: list[list[list[Index]]]
    tokens: list[list[list[Index | None]]]
    seconds: list[list[list[NonNegative | None]]]


def _costs_dict(costs: AttemptCosts) -> dict[str, Any]:
    def listed(values: np.ndarray, cast: Callable[[float], Any]) -> list[Any]:
        return [[[None if np.isnan(v) else cast(v) for v in row] for row in rows] for rows in values]

    return {"won": costs.won.astype(int).tolist(), "turns": costs.turns.tolist(), "tokens": listed(costs.tokens, int),
            "seconds": listed(costs.seconds, lambda v: round(float(v), 4))}


def _costs_of(data: dict[str, Any], ts: tuple[int, ...]) -> AttemptCosts:
    def array(key: str) -> np.ndarray:
        return np.array([[[np.nan if v is None else v for v in row] for row in rows] for rows in data[key]],
                        dtype=float)

    return AttemptCosts(ts, np.array(data["won"], dtype=bool), np.array(data["turns"], dtype=np.int64),
                        array("tokens"), array("seconds"))


@dataclass
class PassKTFile:
    """What ``passkt.json`` holds (:meth:`PassKTResult.to_dict`), for
    :func:`~agentgym_budget.episodes.schema.checked`: keys that later versions added have defaults."""

    format: str
    env_id: str
    policy: str
    mode: str
    show_budget: bool
    ks: list[Positive]
    ts: list[Turn]
    tasks: Index
    attempts: Positive
    seed: int
    pass_: list[list[UnitInterval]]
    stderr: list[list[NonNegative]]
    ci_low: list[list[UnitInterval]]
    ci_high: list[list[UnitInterval]]
    ci_level: UnitInterval
    successes: list[list[Index]]
    task_seeds: list[int]
    plan_lengths: list[Known]
    task_games: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    config: Annotated[dict[str, Any], CheckedAs(RunConfig)] = field(default_factory=dict)
    timing: dict[str, NonNegative] = field(default_factory=dict)
    usage: dict[str, Index | None] = field(default_factory=dict)
    # absent in files before it (None); in a file, checked as an AttemptCostsFile alone (not '| None': a union
    # would hide which value is wrong)
    attempt_costs: Annotated[dict[str, Any] | None, CheckedAs(AttemptCostsFile)] = None

    @classmethod
    def read(cls, data: Any) -> PassKTFile:
        """``data`` (a parsed ``passkt.json``) if its fields and shapes agree, else a :class:`RecordError`."""
        file = cls(**checked(cls, data))
        if not file.ks or not file.ts:
            raise RecordError(f"the grid needs at least one K and one T, got ks={file.ks}, ts={file.ts}")
        k, t = len(file.ks), len(file.ts)
        shapes: dict[str, tuple[Sequence[Sized], int, int]] = {
            "pass": (file.pass_, k, t), "stderr": (file.stderr, k, t), "ci_low": (file.ci_low, k, t),
            "ci_high": (file.ci_high, k, t), "successes": (file.successes, t, file.tasks)}
        for key, (rows, n_rows, n_columns) in shapes.items():
            if len(rows) != n_rows or any(len(row) != n_columns for row in rows):
                raise RecordError(f"{key}: expected {n_rows} rows of {n_columns} values (K {k}, T {t}, "
                                  f"tasks {file.tasks})")
        for key, values in (("task_seeds", file.task_seeds), ("plan_lengths", file.plan_lengths),
                            ("task_games", file.task_games or [""] * file.tasks)):  # task_games: [] in old files
            if len(values) != file.tasks:
                raise RecordError(f"{key}: {len(values)} entries for {file.tasks} tasks")
        if any(n > file.attempts for row in file.successes for n in row):
            raise RecordError(f"successes: more than the {file.attempts} attempts per task")
        if file.attempt_costs is not None:
            _check_costs(file.attempt_costs, file)
        return file


def _check_costs(costs: dict[str, Any], file: PassKTFile) -> None:
    """``attempt_costs`` of ``file``: shaped (T, tasks, attempts), its wins adding up to ``successes``,
    and no attempt under T longer than T or won in 0 turns."""
    shape = (len(file.ts), file.tasks, file.attempts)
    for key, values in costs.items():
        if (len(values) != shape[0] or any(len(rows) != shape[1] for rows in values)
                or any(len(row) != shape[2] for rows in values for row in rows)):
            raise RecordError(f"attempt_costs.{key}: expected {shape[0]} x {shape[1]} x {shape[2]} values (T, tasks, "
                              f"attempts)")
    for i, t in enumerate(file.ts):
        for task in range(file.tasks):
            won, turns = costs["won"][i][task], costs["turns"][i][task]
            if sum(won) != file.successes[i][task]:
                raise RecordError(f"attempt_costs.won: task {task} at T={t} has {sum(won)} wins, successes says "
                                  f"{file.successes[i][task]}")
            if any(n > t or (w and n < 1) for w, n in zip(won, turns)):
                raise RecordError(f"attempt_costs.turns: task {task} at T={t}: {turns} (won: {won})")


def grid_table(title: Any, caption: str, ks: Sequence[int], ts: Sequence[int], cell: Callable[[int, int], str]) -> Any:
    """A K x T ``rich`` table (K down, T across) whose cell (k, t) reads ``cell(k, t)``.

    Example:
        >>> table = grid_table("Pass@(K,T)", "", ks=(1, 2), ts=(5, 10), cell=lambda k, t: f"{k}/{t}")
        >>> [column.header for column in table.columns], list(table.columns[2].cells)
        (['K \\\\ T', '5', '10'], ['1/10', '2/10'])
    """
    from rich.table import Table

    table = Table(title=title, caption=caption)
    table.add_column("K \\ T", justify="right", style="bold")
    for t in ts:
        table.add_column(str(t), justify="right")
    for k in ks:
        table.add_row(str(k), *(cell(k, t) for t in ts))
    return table


def number_text(value: float | None) -> str:
    """``0.123`` (three decimals), or ``n/a`` for no value.

    Example:
        >>> number_text(0.12345), number_text(None)
        ('0.123', 'n/a')
    """
    return "n/a" if value is None else f"{value:.3f}"


def _ci_text(row: dict[str, Any]) -> str:
    """`` [low, high]`` of a metric's CI row (plain text: the terminal table and the HTML report show it)."""
    return "" if row.get("ci_low") is None else f" [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"


def difference(a: PassKTResult, b: PassKTResult) -> tuple[tuple[int, ...], tuple[int, ...], np.ndarray]:
    """``b - a`` on the (K, T) cells both results have: ``(ks, ts, diff)``."""
    ks = tuple(k for k in a.ks if k in b.ks)
    ts = tuple(t for t in a.ts if t in b.ts)
    if not ks or not ts:
        raise ValueError(f"the results share no (K, T) cell: K {a.ks} vs {b.ks}, T {a.ts} vs {b.ts}")
    diff = np.array([[b.value(k, t) - a.value(k, t) for t in ts] for k in ks])
    return ks, ts, diff


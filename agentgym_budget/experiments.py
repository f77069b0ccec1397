"""Studies as data: one sweep runner for ``experiments/<study>/study.toml``.

A study file names its seeds, the :class:`~agentgym_budget.train.config.TrainConfig` overrides
shared by every arm (``[train]``), each arm's own overrides (``[arms.NAME]``, applied after
``[train]``), the held-out evaluation of every final checkpoint (``[eval]``) and the paired
comparisons over seeds (``[[compare]]``, ``a − b`` at each T).  :func:`sweep` trains every arm x
seed, evaluates it on the env's held-out split (an evaluation that overlaps training is refused
before anything runs), records each finished run in ``OUT/<arm>/seed_<s>/run.json`` with its
settings (a rerun reuses a run whose recorded settings match and retrains one whose do not), and
writes the study's results file: provenance (command, commit, dirty flag, load), per-seed
held-out Pass@(1,T), the means with t-CIs and the paired differences.

Example:
    >>> study = parse_study('''
    ... [study]
    ... name = "demo"
    ... seeds = [0, 1]
    ... [train]
    ... total_updates = 2
    ... [eval]
    ... ts = [2, 4]
    ... [arms.fixed4]
    ... budget = "fixed:4"
    ... [arms.mix]
    ... budget = "mix:2,4"
    ... [[compare]]
    ... a = "mix"
    ... b = "fixed4"
    ... ''')
    >>> [run.label for run in planned_runs(study)]
    ['fixed4 seed 0', 'fixed4 seed 1', 'mix seed 0', 'mix seed 1']
    >>> planned_runs(study)[3].overrides
    {'total_updates': 2, 'budget': 'mix:2,4'}
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

__all__ = ["PlannedRun", "Study", "StudyError", "load_study", "parse_study", "planned_runs", "sweep",
           "with_overrides"]

STUDY_KEYS = {"name", "question", "seeds", "results", "baselines", "workers"}
EVAL_KEYS = {"ts", "tasks", "attempts"}  # what the held-out evaluation of a checkpoint takes today
SECTIONS = {"study", "sft", "train", "eval", "arms", "compare"}


class StudyError(ValueError):
    """A study file that cannot be run (its message is one line)."""


@dataclasses.dataclass(frozen=True)
class Study:
    """A parsed ``study.toml``: see the module docstring for the sections."""

    name: str
    seeds: tuple[int, ...]
    train: dict[str, Any]
    arms: dict[str, dict[str, Any]]
    ts: tuple[int, ...]
    eval_tasks: int = 40
    eval_attempts: int = 2
    compare: tuple[tuple[str, str], ...] = ()
    question: str = ""
    results: str | None = None
    workers: int = 1


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One arm x seed of a study: its TrainConfig overrides and where it runs."""

    arm: str
    seed: int
    overrides: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.arm} seed {self.seed}"

    def folder(self, out: Path) -> Path:
        return out / folder_name(self.arm) / f"seed_{self.seed}"


def folder_name(arm: str) -> str:
    """``fixed:2`` → ``fixed2``, ``mix+pr`` → ``mix_pr`` (a folder name a shell glob needs no quotes for)."""
    return arm.replace(":", "").replace("+", "_")


def load_study(path: str | Path) -> Study:
    """Read and check ``path`` (a ``study.toml``); a :class:`StudyError` in one line when it cannot run."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise StudyError(f"{path}: cannot read the study file ({error.strerror})") from None
    try:
        return parse_study(text)
    except StudyError as error:
        raise StudyError(f"{path}: {error}") from None


def parse_study(text: str) -> Study:
    """The :class:`Study` of a ``study.toml``'s text, every key checked (TrainConfig fields included)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise StudyError(f"not valid TOML: {error}") from None
    _only(data, SECTIONS, "section")
    head = _table(data, "study")
    _only(head, STUDY_KEYS, "[study] key")
    if "sft" in data or head.get("baselines"):
        raise StudyError("[sft] and [study] baselines are not run by this runner yet; remove them")
    if not isinstance(head.get("name"), str) or not head["name"]:
        raise StudyError("[study] needs name = \"...\" (the run folder runs/<name>/)")
    seeds = head.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise StudyError(f"[study] seeds must be a list of integers, got {seeds!r}")
    train, evaluation, arms = _table(data, "train"), _table(data, "eval"), _table(data, "arms")
    _only(evaluation, EVAL_KEYS, "[eval] key")
    if not arms:
        raise StudyError("a study needs at least one [arms.NAME] table")
    for name, arm in arms.items():
        if not isinstance(arm, dict):
            raise StudyError(f"arms.{name} must be a table of TrainConfig overrides")
        _check_train_fields({**train, **arm}, f"[arms.{name}]")
    ts = evaluation.get("ts", [2, 3, 4, 6])
    if not isinstance(ts, list) or not ts or not all(isinstance(t, int) and t > 0 for t in ts):
        raise StudyError(f"[eval] ts must be a list of positive integers, got {ts!r}")
    compare = []
    for row in data.get("compare", []):
        if not isinstance(row, dict) or set(row) != {"a", "b"} or not {row["a"], row["b"]} <= set(arms):
            raise StudyError(f"each [[compare]] needs a and b, both arms of {sorted(arms)}; got {row!r}")
        compare.append((row["a"], row["b"]))
    return Study(name=head["name"], seeds=tuple(seeds), train=train, arms=arms, ts=tuple(ts),
                 eval_tasks=int(evaluation.get("tasks", 40)), eval_attempts=int(evaluation.get("attempts", 2)),
                 compare=tuple(compare), question=str(head.get("question", "")), results=head.get("results"),
                 workers=int(head.get("workers", 1)))


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise StudyError(f"{key} must be a table ([{key}])")
    return value


def _only(table: dict[str, Any], allowed: set[str], what: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise StudyError(f"unknown {what} {unknown[0]!r}; the {what}s are {sorted(allowed)}")


def _check_train_fields(overrides: dict[str, Any], where: str) -> None:
    from agentgym_budget.train.config import TrainConfig  # torch-free

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(overrides) - fields - {"seed", "output_dir"})
    if unknown:
        raise StudyError(f"{where}: {unknown[0]!r} is not a TrainConfig field")
    if "seed" in overrides or "output_dir" in overrides:
        raise StudyError(f"{where}: seed and output_dir are set by the runner ([study] seeds, --out)")
    try:
        TrainConfig(**overrides)
    except (TypeError, ValueError) as error:
        raise StudyError(f"{where}: {error}") from None


def with_overrides(study: Study, overrides: dict[str, Any]) -> Study:
    """``study`` with ``overrides`` (TrainConfig fields) set in every arm, over ``[train]`` and the arm's own
    values (``sweep --set``: a smaller or changed study; its runs' recorded settings differ, so none is
    mistaken for a run of the file as written).

    Example:
        >>> study = parse_study('[study]\\nname = "s"\\n[arms.a]\\nbudget = "fixed:2"\\n')
        >>> with_overrides(study, {"total_updates": 3}).arms
        {'a': {'budget': 'fixed:2', 'total_updates': 3}}
    """
    arms = {name: {**arm, **overrides} for name, arm in study.arms.items()}
    for name, arm in arms.items():
        _check_train_fields({**study.train, **arm}, f"--set in arm {name}")
    return dataclasses.replace(study, arms=arms)


def planned_runs(study: Study, seeds: Sequence[int] | None = None, arms: Sequence[str] | None = None
                 ) -> list[PlannedRun]:
    """The study's runs, arm by arm, seed by seed (``seeds``/``arms``: a subset)."""
    unknown = [a for a in arms or () if a not in study.arms]
    if unknown:
        raise StudyError(f"unknown arm {unknown[0]!r}; the arms are {list(study.arms)}")
    return [PlannedRun(arm, seed, {**study.train, **study.arms[arm]})
            for arm in (arms or study.arms) for seed in (seeds if seeds is not None else study.seeds)]


def run_settings(study: Study, run: PlannedRun) -> dict[str, Any]:
    """What a recorded run must match to be reused: its overrides, seed and evaluation."""
    return json.loads(json.dumps({"train": run.overrides, "seed": run.seed, "eval_tasks": study.eval_tasks,
                                  "eval_attempts": study.eval_attempts, "ts": list(study.ts)}))


def recorded_run(folder: Path, settings: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """``(run, stale)``: the run recorded in ``folder/run.json`` when its settings match, else ``None``;
    ``stale`` when a record with other settings is there (it is retrained, and said so)."""
    try:
        record = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return None, False
    if record.get("settings") == settings and (folder / "held_out_eval" / "passkt.json").exists():
        return record["run"], False
    return None, True


def sweep(study: Study, out: Path, seeds: Sequence[int] | None = None, arms: Sequence[str] | None = None,
          dry_run: bool = False, argv: Sequence[str] | None = None, results: Path | None = None,
          echo: Any = print) -> dict[str, Any] | None:
    """Run (or with ``dry_run`` list) the study's runs under ``out``; returns the study's figures."""
    from agentgym_budget.train.config import TrainConfig
    from agentgym_budget.train.learning_check import held_out_env_kwargs

    runs = planned_runs(study, seeds, arms)
    for name in dict.fromkeys(run.arm for run in runs):  # refused here, in one line, before training anything
        try:
            held_out_env_kwargs(TrainConfig(**{**study.train, **study.arms[name]}))
        except ValueError as error:
            raise StudyError(f"arm {name}: {error}") from None
    plan = []
    for run in runs:
        done, stale = recorded_run(run.folder(out), run_settings(study, run))
        plan.append((run, done, stale))
        if dry_run:
            state = "reuse (finished)" if done is not None else "retrain (settings changed)" if stale else "train"
            echo(f"{run.label:<20} {state:<26} {run.folder(out)}  {json.dumps(study.arms[run.arm])}")
    if dry_run:
        return None
    from agentgym_budget.provenance import provenance

    started, start = provenance(argv if argv is not None else sys.argv), time.perf_counter()
    finished = _execute(study, out, plan, echo)
    figures = study_figures(study, out, runs, finished)
    figures = {"provenance": {**started, "load_average_end": [round(x, 2) for x in os.getloadavg()]}, **figures,
               "wall_seconds": time.perf_counter() - start}
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.json").write_text(json.dumps(figures, indent=1) + "\n")
    if results is not None:
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(json.dumps(figures, indent=1) + "\n")
        echo(f"wrote {results}")
    echo(f"wrote {out / 'study.json'}")
    return figures


def _execute(study: Study, out: Path, plan: list[tuple[PlannedRun, dict[str, Any] | None, bool]],
             echo: Any) -> dict[tuple[str, int], dict[str, Any]]:
    from concurrent.futures import ProcessPoolExecutor

    from agentgym_budget.train.learning_check import run_seed

    finished: dict[tuple[str, int], dict[str, Any]] = {}
    failed = []
    with ProcessPoolExecutor(max_workers=max(1, study.workers)) as pool:
        futures = [(run, done, stale, None if done is not None else pool.submit(
            run_seed, run.seed, str(run.folder(out)), study.eval_tasks, study.eval_attempts, list(study.ts),
            smoke=False, **run.overrides)) for run, done, stale in plan]
        for run, done, stale, future in futures:
            try:
                record = done if future is None else future.result()
            except Exception as error:  # noqa: BLE001 — one failed run must not lose the others' records
                failed.append(f"{run.label}: {type(error).__name__}: {error} (log: {run.folder(out)}.log)")
                continue
            assert record is not None
            if future is not None:
                (run.folder(out) / "run.json").write_text(
                    json.dumps({"settings": run_settings(study, run), "run": record}, indent=1))
            finished[(run.arm, run.seed)] = record
            held = " ".join(f"T={t}:{v:.2f}" for t, v in record["held_out_pass1"].items())
            note = "  (finished earlier: reused)" if future is None else "  (settings changed: retrained)" \
                if stale else ""
            echo(f"{run.label:>20}: held-out Pass@(1,T) {held}  train success (last 20) "
                 f"{record['last_success']:.2f}  CPU {record['cpu_seconds'] / 60:.1f} min{note}")
    if failed:
        raise StudyError(f"{len(failed)} run(s) failed; the same command reruns only them: " + "; ".join(failed))
    return finished


def study_figures(study: Study, out: Path, runs: list[PlannedRun],
                  finished: dict[tuple[str, int], dict[str, Any]]) -> dict[str, Any]:
    """Per-seed held-out Pass@(1,T), means with t-CIs over seeds and the paired comparisons (the results
    file format the docs tables read: tools/docs_tables.py ``process_reward_study_table``)."""
    from agentgym_budget.eval import PassKTResult, aggregate_results
    from agentgym_budget.eval.stats import paired_over_seeds

    arms = list(dict.fromkeys(run.arm for run in runs))
    seeds = sorted({run.seed for run in runs})
    results = {arm: {run.seed: PassKTResult.load(run.folder(out) / "held_out_eval")
                     for run in runs if run.arm == arm} for arm in arms}
    ts = list(study.ts)
    pass1 = {}
    for arm, by_seed in results.items():
        aggregate = aggregate_results(list(by_seed.values()))
        pass1[arm] = {str(t): {key: aggregate.passkt[(1, t)][key] for key in ("mean", "ci_low", "ci_high", "values")}
                      for t in ts}
    paired = {f"{a} − {b}": {str(t): paired_over_seeds({s: r.value(1, t) for s, r in results[a].items()},
                                                      {s: r.value(1, t) for s, r in results[b].items()})
                            for t in ts}
              for a, b in study.compare if a in results and b in results}
    per_seed = {arm: {str(seed): {"held_out_pass1": {str(t): r.value(1, t) for t in ts},
                                  "train_success_last20": finished[(arm, seed)]["last_success"],
                                  "cpu_seconds": finished[(arm, seed)]["cpu_seconds"]}
                      for seed, r in sorted(by_seed.items())} for arm, by_seed in results.items()}
    keys = ("budget", "advantage", "process_reward", "process_reward_coef", "gigpo_omega", "gigpo_gamma")
    from agentgym_budget.train.config import TrainConfig

    configs = {arm: TrainConfig(**{**study.train, **study.arms[arm]}) for arm in arms}
    return {"study": study.name, "env_id": configs[arms[0]].env_id, "ts": ts, "seeds": seeds,
            "updates": configs[arms[0]].total_updates, "eval_tasks": study.eval_tasks,
            "eval_attempts": study.eval_attempts,
            "arms": {arm: {key: getattr(config, key) for key in keys} for arm, config in configs.items()},
            "per_seed": per_seed, "pass1": pass1, "paired": paired,
            "cpu_seconds": sum(run["cpu_seconds"] for run in finished.values())}

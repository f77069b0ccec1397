"""Studies as data: one sweep runner for ``experiments/<study>/study.toml``.

A study file names its seeds, the :class:`~agentgym_budget.train.config.TrainConfig` overrides
shared by every arm (``[train]``), each arm's own overrides (``[arms.NAME]``, applied after
``[train]``), the held-out evaluation of every final checkpoint (``[eval]``) and the paired
comparisons over seeds (``[[compare]]``, ``a − b`` at each (K, T)).  ``[eval]`` takes ``ts``, ``ks``,
``tasks``, ``attempts`` and the evaluator's ``probes``, ``seed``, ``concurrency``, ``bootstrap`` and
``env_kwargs`` (on the held-out split only).  An ``[sft]`` table (SFTConfig overrides) makes one SFT
start in ``OUT/sft`` that every arm trains from; ``[study] baselines = ["sft", "base"]`` adds the rows
before RL: the SFT start and the model it was made from, evaluated exactly as the arms' checkpoints.

:func:`sweep` makes the SFT start, evaluates the baselines, trains every arm x seed and evaluates it
on the env's held-out split (an evaluation that overlaps training is refused before anything runs).
Each run is recorded in its folder's ``run.json`` with its settings when it starts and with its
figures when it ends: a rerun reuses a finished run whose settings match, resumes an interrupted one
(the trainer from its last checkpoint, the evaluation from its saved episodes) and reruns one whose
settings differ.  The study's results file holds provenance (command, commit, dirty flag, load),
per-seed held-out Pass@(K,T) and behaviour metrics, the means with t-CIs, the paired differences and
the baselines with their bootstrap CIs over tasks.

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
#: The held-out evaluation of every checkpoint: EvalConfig fields (env_kwargs merged over the held-out split's).
EVAL_KEYS = {"ts", "ks", "tasks", "attempts", "probes", "seed", "env_kwargs", "concurrency", "bootstrap"}
SECTIONS = {"study", "sft", "train", "eval", "arms", "compare"}
#: The rows before RL a study may ask for: the model it starts from, zero-shot, and its SFT start.
BASELINES = ("base", "sft")
#: Baseline rows have no seeds to spread over: their CI is the evaluator's bootstrap over tasks.
BASELINE_BOOTSTRAP = 1000
#: What the study's results file keeps of the SFT start's ``sft.json``.
SFT_SUMMARY_KEYS = ("episodes", "turns", "reply_loss_before", "reply_loss_after", "seconds", "cpu_seconds")


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
    ks: tuple[int, ...] = (1,)
    eval_extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # probes, seed, env_kwargs, ...
    sft: dict[str, Any] | None = None  # SFTConfig overrides of the arms' shared start (OUT/sft)
    baselines: tuple[str, ...] = ()

    def eval_settings(self) -> dict[str, Any]:
        """The ``[eval]`` fields beyond ``ts``/``tasks``/``attempts`` (``held_out_settings``' ``extra``)."""
        return {"ks": self.ks, **self.eval_extra}


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
    ks = evaluation.get("ks", [1])
    if not isinstance(ks, list) or not ks or not all(isinstance(k, int) and k > 0 for k in ks):
        raise StudyError(f"[eval] ks must be a list of positive integers, got {ks!r}")
    sft, baselines = _sft_table(data), _baselines(head, "sft" in data)
    if sft is not None and "model" in train:
        raise StudyError("[train] model is the SFT start when there is an [sft] table: name the base model there")
    extra = {key: value for key, value in evaluation.items() if key not in {"ts", "ks", "tasks", "attempts"}}
    attempts = int(evaluation.get("attempts", max(2, max(ks))))
    if attempts < max(ks):
        raise StudyError(f"[eval] attempts ({attempts}) must be at least the largest K ({max(ks)})")
    return Study(name=head["name"], seeds=tuple(seeds), train=train, arms=arms, ts=tuple(ts),
                 eval_tasks=int(evaluation.get("tasks", 40)), eval_attempts=attempts,
                 compare=tuple(compare), question=str(head.get("question", "")), results=head.get("results"),
                 workers=int(head.get("workers", 1)), ks=tuple(ks), eval_extra=extra, sft=sft, baselines=baselines)


def _sft_table(data: dict[str, Any]) -> dict[str, Any] | None:
    """``[sft]``'s SFTConfig overrides (``shared = true``: one start for every arm and seed), checked."""
    if "sft" not in data:
        return None
    table = dict(_table(data, "sft"))
    if table.pop("shared", True) is not True:
        raise StudyError("[sft] shared = false (a start per seed) is not run by this runner; one shared start is")
    from agentgym_budget.train.config import SFTConfig  # torch-free

    fields = {f.name for f in dataclasses.fields(SFTConfig)} - {"output_dir"}
    unknown = sorted(set(table) - fields)
    if unknown:
        raise StudyError(f"[sft]: {unknown[0]!r} is not an SFTConfig field (output_dir is the runner's: OUT/sft)")
    try:
        SFTConfig(**table)
    except (TypeError, ValueError) as error:
        raise StudyError(f"[sft]: {error}") from None
    return table


def _baselines(head: dict[str, Any], has_sft: bool) -> tuple[str, ...]:
    names = head.get("baselines", [])
    if not isinstance(names, list) or not set(names) <= set(BASELINES):
        raise StudyError(f"[study] baselines must be a list of {list(BASELINES)}, got {names!r}")
    if "sft" in names and not has_sft:
        raise StudyError("[study] baselines names sft, but there is no [sft] table to make the SFT start")
    return tuple(names)


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
    """What a recorded run must match to be reused: its overrides, seed, evaluation and SFT start."""
    return _jsonable({"train": run.overrides, "seed": run.seed, "eval_tasks": study.eval_tasks,
                      "eval_attempts": study.eval_attempts, "ts": list(study.ts), "eval": study.eval_settings(),
                      "sft": study.sft})


def baseline_settings(study: Study, name: str) -> dict[str, Any]:
    """What a recorded baseline row must match: the model, the policy's settings (``[train]``), the evaluation."""
    return _jsonable({"baseline": name, "model": baseline_model(study, name), "train": study.train,
                      "eval_tasks": study.eval_tasks, "eval_attempts": study.eval_attempts, "ts": list(study.ts),
                      "eval": baseline_eval_settings(study), "sft": study.sft if name == "sft" else None})


def baseline_model(study: Study, name: str) -> str:
    """``base``: the model the study starts from (``[sft] model``, else ``[train] model``); ``sft``: ``OUT/sft``."""
    from agentgym_budget.train.config import SFTConfig, TrainConfig

    if name == "sft":
        return "{out}/sft"
    if study.sft is not None:
        return str(study.sft.get("model", SFTConfig.model))
    return str(study.train.get("model", TrainConfig.model))


def baseline_eval_settings(study: Study) -> dict[str, Any]:
    return {"bootstrap": BASELINE_BOOTSTRAP, **study.eval_settings()}


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


def run_state(folder: Path, settings: dict[str, Any], finished_marker: str = "held_out_eval/passkt.json"
              ) -> tuple[dict[str, Any] | None, str]:
    """``(record, state)`` of a run's folder: ``reuse`` (finished with these settings: its record), ``resume``
    (started with these settings and interrupted: it goes on from its checkpoint and saved episodes),
    ``retrain`` (recorded with other settings, or files without a record: removed and run afresh) or ``new``."""
    try:
        record = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return None, "retrain" if folder.exists() else "new"
    if not isinstance(record, dict) or record.get("settings") != settings:
        return None, "retrain"
    if "run" in record and (folder / finished_marker).exists():
        return record["run"], "reuse"
    return None, "resume"


_STATE_TEXT = {"reuse": "reuse (finished)", "resume": "resume (interrupted)", "retrain": "retrain (settings changed)",
               "new": "train"}


@dataclasses.dataclass
class _Job:
    """One thing the sweep runs in a worker: a baseline row or an arm x seed."""

    label: str
    folder: Path
    settings: dict[str, Any]
    record: dict[str, Any] | None
    state: str
    submit: Any  # (pool) -> Future, for a job that is not reused
    what: str = ""  # what the dry run shows of it (an arm's overrides)


def sweep(study: Study, out: Path, seeds: Sequence[int] | None = None, arms: Sequence[str] | None = None,
          dry_run: bool = False, argv: Sequence[str] | None = None, results: Path | None = None,
          echo: Any = print, before_rl: bool = False) -> dict[str, Any] | None:
    """Run (or with ``dry_run`` list) the study's runs under ``out``: the SFT start (``[sft]``: ``out/sft``,
    once), the rows before RL (``baselines``: ``out/baselines/<name>``), then every arm x seed (none with
    ``before_rl``); returns the study's figures."""
    from agentgym_budget.train.config import TrainConfig
    from agentgym_budget.train.learning_check import held_out_settings

    runs = [] if before_rl else planned_runs(study, seeds, arms)
    for name in dict.fromkeys(run.arm for run in runs):  # refused here, in one line, before training anything
        try:
            held_out_settings(TrainConfig(**{**study.train, **study.arms[name]}), study.eval_tasks,
                              study.eval_attempts, study.ts, study.eval_settings())
        except ValueError as error:
            raise StudyError(f"arm {name}: {error}") from None
    sft_job = _sft_job(study, out)
    jobs = [*_baseline_jobs(study, out), *_arm_jobs(study, out, runs)]
    if dry_run:
        for job in ([sft_job] if sft_job else []) + jobs:
            echo(f"{job.label:<20} {_STATE_TEXT[job.state]:<26} {job.folder}  {job.what}".rstrip())
        return None
    from agentgym_budget.provenance import provenance

    started, start = provenance(argv if argv is not None else sys.argv), time.perf_counter()
    sft_summary = None if sft_job is None else _execute(study, [sft_job], echo)[sft_job.label]
    finished = _execute(study, jobs, echo)
    figures = study_figures(study, out, runs, {(run.arm, run.seed): finished[run.label] for run in runs},
                            {name: finished[f"{name} (before RL)"] for name in study.baselines})
    if sft_summary is not None:
        figures["sft"] = {key: sft_summary.get(key) for key in SFT_SUMMARY_KEYS}
        figures["cpu_seconds"] += float(sft_summary.get("cpu_seconds") or 0.0)
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


def _sft_job(study: Study, out: Path) -> _Job | None:
    if study.sft is None:
        return None
    from agentgym_budget.train.learning_check import run_sft_start

    folder, settings = out / "sft", _jsonable({"sft": study.sft})
    record, state = run_state(folder, settings, finished_marker="sft.json")
    return _Job("sft start", folder, settings, record, state,
                lambda pool: pool.submit(run_sft_start, str(folder), **(study.sft or {})))


def _baseline_jobs(study: Study, out: Path) -> list[_Job]:
    from agentgym_budget.train.learning_check import run_baseline

    jobs = []
    for name in study.baselines:
        folder, settings = out / "baselines" / name, baseline_settings(study, name)
        model = baseline_model(study, name).format(out=out)
        record, state = run_state(folder, settings)
        jobs.append(_Job(f"{name} (before RL)", folder, settings, record, state,
                         lambda pool, folder=folder, model=model: pool.submit(
                             run_baseline, str(folder), model, study.eval_tasks, study.eval_attempts, list(study.ts),
                             baseline_eval_settings(study), **study.train)))
    return jobs


def _arm_jobs(study: Study, out: Path, runs: list[PlannedRun]) -> list[_Job]:
    from agentgym_budget.train.learning_check import run_seed

    jobs = []
    for run in runs:
        folder, settings = run.folder(out), run_settings(study, run)
        start = {} if study.sft is None else {"model": str(out / "sft")}
        record, state = run_state(folder, settings)
        jobs.append(_Job(run.label, folder, settings, record, state, lambda pool, run=run, folder=folder, start=start:
                         pool.submit(run_seed, run.seed, str(folder), study.eval_tasks, study.eval_attempts,
                                     list(study.ts), smoke=False, eval_settings=study.eval_settings(),
                                     **{**run.overrides, **start, "resume": "auto"}),
                         json.dumps(study.arms[run.arm])))
    return jobs


def _execute(study: Study, jobs: list[_Job], echo: Any) -> dict[str, dict[str, Any]]:
    """Run the jobs that are not reused in a process pool (``[study] workers``), each recorded as it ends."""
    import shutil
    from concurrent.futures import ProcessPoolExecutor

    finished: dict[str, dict[str, Any]] = {}
    failed = []
    with ProcessPoolExecutor(max_workers=max(1, study.workers)) as pool:
        futures = []
        for job in jobs:
            if job.state == "reuse":
                futures.append((job, None))
                continue
            if job.state == "retrain":
                echo(f"{job.label}: removing {job.folder} (a run recorded with other settings, or files no run recorded)")
                shutil.rmtree(job.folder, ignore_errors=True)
            job.folder.mkdir(parents=True, exist_ok=True)  # recorded as started: interrupted, it resumes
            (job.folder / "run.json").write_text(json.dumps({"settings": job.settings}, indent=1))
            futures.append((job, job.submit(pool)))
        for job, future in futures:
            try:
                record = job.record if future is None else future.result()
            except Exception as error:  # noqa: BLE001 — one failed run must not lose the others' records
                failed.append(f"{job.label}: {type(error).__name__}: {error} (log: {job.folder}.log)")
                continue
            assert record is not None
            if future is not None:
                (job.folder / "run.json").write_text(json.dumps({"settings": job.settings, "run": record}, indent=1))
            finished[job.label] = record
            echo(_finished_line(job, record, reused=future is None))
    if failed:
        raise StudyError(f"{len(failed)} run(s) failed; the same command reruns only them: " + "; ".join(failed))
    return finished


def _finished_line(job: _Job, record: dict[str, Any], reused: bool) -> str:
    note = "  (finished earlier: reused)" if reused else {"retrain": "  (settings changed: retrained)",
                                                          "resume": "  (resumed)"}.get(job.state, "")
    if "held_out_pass1" in record:
        held = " ".join(f"T={t}:{v:.2f}" for t, v in record["held_out_pass1"].items())
        return (f"{job.label:>20}: held-out Pass@(1,T) {held}  train success (last 20) "
                f"{record['last_success']:.2f}  CPU {record['cpu_seconds'] / 60:.1f} min{note}")
    return f"{job.label:>20}: done  CPU {record.get('cpu_seconds', 0.0) / 60:.1f} min  ({job.folder}){note}"


def study_figures(study: Study, out: Path, runs: list[PlannedRun], finished: dict[tuple[str, int], dict[str, Any]],
                  baselines: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The study's results: per-seed held-out Pass@(1,T), means with t-CIs over seeds and the paired
    comparisons at K = 1 (``pass1``/``paired``: the format tools/docs_tables.py reads), the same at every
    (K, T) (``pass_kt``/``paired_kt``), the behaviour metrics of every arm over seeds (``behaviour``), the
    rows before RL with the evaluator's bootstrap CI over tasks (``baselines``), the CPU-s of every run they
    come from (``cpu_seconds``: the SFT start, the rows and the arms) and, with an SFT row, each
    arm's behaviour minus the SFT start's, paired over seeds (``behaviour_vs_sft``: the SFT row is one
    evaluation, so that CI is the RL seeds' spread only)."""
    from agentgym_budget.eval import PassKTResult, aggregate_results
    from agentgym_budget.eval.stats import paired_over_seeds

    arms = list(dict.fromkeys(run.arm for run in runs))
    seeds = sorted({run.seed for run in runs})
    results = {arm: {run.seed: PassKTResult.load(run.folder(out) / "held_out_eval")
                     for run in runs if run.arm == arm} for arm in arms}
    ts, cells = list(study.ts), [(k, t) for k in study.ks for t in study.ts]
    pass1, pass_kt, behaviour = {}, {}, {}
    for arm, by_seed in results.items():
        if not by_seed:
            continue
        aggregate = aggregate_results(list(by_seed.values()))
        pass1[arm] = {str(t): _over_seeds(aggregate.passkt[(1, t)]) for t in ts}
        pass_kt[arm] = {_cell(k, t): _over_seeds(aggregate.passkt[(k, t)]) for k, t in cells}
        behaviour[arm] = _behaviour_over_seeds([_scalars(r) for r in by_seed.values()])
    paired = {f"{a} − {b}": {str(t): paired_over_seeds(_by_seed(results[a], 1, t), _by_seed(results[b], 1, t))
                            for t in ts}
              for a, b in study.compare if a in results and b in results}
    paired_kt = {f"{a} − {b}": {_cell(k, t): paired_over_seeds(_by_seed(results[a], k, t), _by_seed(results[b], k, t))
                               for k, t in cells}
                 for a, b in study.compare if a in results and b in results}
    per_seed = {arm: {str(seed): {"held_out_pass1": {str(t): r.value(1, t) for t in ts},
                                  "held_out_pass_kt": {_cell(k, t): r.value(k, t) for k, t in cells},
                                  "behaviour": _scalars(r),
                                  "train_success_last20": finished[(arm, seed)]["last_success"],
                                  "train_success": finished[(arm, seed)]["success"],
                                  "cpu_seconds": finished[(arm, seed)]["cpu_seconds"]}
                      for seed, r in sorted(by_seed.items())} for arm, by_seed in results.items()}
    keys = ("budget", "advantage", "process_reward", "process_reward_coef", "gigpo_omega", "gigpo_gamma")
    from agentgym_budget.train.config import TrainConfig

    configs = {arm: TrainConfig(**{**study.train, **study.arms[arm]}) for arm in arms}
    first = configs[arms[0]] if arms else TrainConfig(**study.train)
    figures = {"study": study.name, "question": study.question, "env_id": first.env_id, "ks": list(study.ks),
               "ts": ts, "seeds": seeds, "updates": first.total_updates, "eval_tasks": study.eval_tasks,
               "eval_attempts": study.eval_attempts, "eval": _jsonable(study.eval_settings()),
               "arms": {arm: {key: getattr(config, key) for key in keys} for arm, config in configs.items()},
               "per_seed": per_seed, "pass1": pass1, "paired": paired, "pass_kt": pass_kt, "paired_kt": paired_kt,
               "behaviour": behaviour,
               "cpu_seconds": sum(run["cpu_seconds"] for run in [*finished.values(), *(baselines or {}).values()])}
    if baselines:
        rows = {name: PassKTResult.load(out / "baselines" / name / "held_out_eval") for name in baselines}
        figures["baselines"] = {name: {"model": record["model"], "cpu_seconds": record["cpu_seconds"],
                                       "pass_kt": {_cell(k, t): _with_ci(row, k, t) for k, t in cells},
                                       "behaviour": _scalars(row)}
                                for (name, record), row in zip(baselines.items(), rows.values())}
        if "sft" in rows:
            figures["behaviour_vs_sft"] = {arm: _minus_start(by_seed, _scalars(rows["sft"]))
                                           for arm, by_seed in results.items()}
    return figures


def _behaviour_over_seeds(per_seed: list[dict[str, float | None]]) -> dict[str, dict[str, Any]]:
    """Each behaviour metric's mean over seeds with its t-CI (seeds where it is undefined left out)."""
    import numpy as np

    from agentgym_budget.eval.stats import t_interval

    rows = {}
    for name in sorted(set().union(*per_seed)):
        values = [row.get(name) for row in per_seed]
        known = np.array([v for v in values if v is not None], dtype=float)
        low, high = t_interval(known)
        rows[name] = {"mean": float(known.mean()) if len(known) else None, "ci_low": low, "ci_high": high,
                      "values": values}
    return rows


def _minus_start(by_seed: dict[int, Any], start: dict[str, float | None]) -> dict[str, Any]:
    """Each behaviour metric of an arm's seeds minus the start's value, paired over the seeds."""
    from agentgym_budget.eval.stats import paired_over_seeds

    rows = {}
    for name, value in start.items():
        arm = {seed: v for seed, r in by_seed.items() if (v := _scalars(r).get(name)) is not None}
        if value is not None and arm:
            rows[name] = paired_over_seeds(arm, {seed: value for seed in arm})
    return rows


def _cell(k: int, t: int) -> str:
    return f"K={k},T={t}"


def _by_seed(by_seed: dict[int, Any], k: int, t: int) -> dict[int, float]:
    return {seed: result.value(k, t) for seed, result in by_seed.items()}


def _over_seeds(cell: dict[str, Any]) -> dict[str, Any]:
    return {key: cell[key] for key in ("mean", "ci_low", "ci_high", "values")}


def _with_ci(result: Any, k: int, t: int) -> dict[str, float]:
    """One result's Pass@(K,T) with its bootstrap CI over tasks."""
    i, j = result.ks.index(k), result.ts.index(t)
    return {"value": result.value(k, t), "ci_low": float(result.grid.ci_low[i, j]),
            "ci_high": float(result.grid.ci_high[i, j])}


def _scalars(result: Any) -> dict[str, float | None]:
    """Every behaviour metric of one evaluation as one number (its per-task ratio), and its probe states'
    rates (``probes.agreement``: the expert's action chosen; ``probes.success_to_go``: won from there)."""
    from agentgym_budget.eval.compare import scalar_metrics
    from agentgym_budget.eval.stats import ratio

    values = {name: ratio(*terms) for name, terms in sorted(scalar_metrics(result).items())}
    summary = result.metrics.get("probes", {}).get("summary", {})
    values.update({f"probes.{name}": row["value"] for name, row in sorted(summary.items())})
    return values

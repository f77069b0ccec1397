"""The BudgetMix study on the reliable trainer: fixed-T vs BudgetMix vs a curriculum, outcome vs process reward.

The BudgetMix study itself is now data run by the sweep runner (``agentgym-budget sweep
experiments/budgetmix/study.toml``); this script stays for the process-reward study's commands
(experiments/process_reward/README.md) until that study moves to experiments/ too.

Every arm is the documented smoke run (:func:`agentgym_budget.train.keydoor_smoke_config`: the
tiny offline model, format warm-up, GRPO on KeyDoor's ``train`` set-ups, 200 updates x 64
episodes), **one flag apart**:

* ``fixed:2``    — ``budget="fixed:2"``   (the smallest budget; ``--fixed`` sets them);
* ``fixed:6``    — ``budget="fixed:6"``   (the largest);
* ``mix``        — ``budget="mix:2,3,4,6"`` (``--mix``; the smoke run's own budget);
* ``curriculum`` — ``budget="curriculum:6->2@12800"``: linear from the largest fixed budget to the
  smallest over the run's episodes (updates x episodes per update);
* ``mix+pr``     — ``mix`` plus ``process_reward="expert_progress"`` (coefficient
  ``--process-reward-coef``, 0.5 as in the first study);
* ``mix+gigpo``  — ``mix`` with ``advantage="gigpo"`` (step-level group advantages over anchor
  states, :mod:`agentgym_budget.train.gigpo`, at its default omega and gamma);
* ``adaptive``   — ``budget="adaptive:2,3,4,6"`` (the mix's budgets, per task the tightest whose
  success is uncertain: :class:`~agentgym_budget.wrappers.budget_spec.AdaptiveBudget`; the study
  experiments/adaptive_budgets/).

Seed ``s`` of every arm starts from the same model (the tiny model's init and format warm-up
depend on the seed only), so arms pair up by seed.  Each trained model is evaluated with the
evaluator on the env's held-out split (KeyDoor: ``test``, door pairs never seen in training, the format
warm-up and the tiny tokenizer's text included; an overlapping evaluation is refused):
Pass@(1,T) for every T of ``--ts``, on the same evaluation tasks (the config's ``eval_seed``) for
every arm and seed.  Each result is saved as an evaluator result folder,
``OUT/<arm>/seed_<s>/held_out_eval/passkt.json``, so the CLI reads them::

    agentgym-budget aggregate OUT/mix/seed_*/held_out_eval/passkt.json --out OUT/mix/aggregate
    agentgym-budget compare OUT/fixed2/seed_0/held_out_eval/passkt.json OUT/mix/seed_0/held_out_eval/passkt.json

The study's own comparisons are **paired over seeds**: per seed, the arm's Pass@(1,T) minus the
other arm's, its mean over seeds, and a 95 % paired percentile bootstrap CI over seeds
(:func:`agentgym_budget.eval.stats.paired_bootstrap`, seeds as the resampled units): mix − fixed:2,
mix − fixed:6, curriculum − mix, mix+pr − mix, mix+gigpo − mix and mix+gigpo − mix+pr at each T.  With 5 seeds the bootstrap has few
distinct resamples: read a CI that excludes 0 as a hint, not a verdict.  Per arm, the mean over
seeds with a Student-t CI comes from :func:`agentgym_budget.eval.aggregate_results`.  Written to
``OUT/budgetmix_study.json`` and ``OUT/budgetmix_study.md``; printed as tables.  Each finished run
is recorded in ``OUT/<arm>/seed_<s>/run.json``: after an interruption, the same command trains
only the runs that are missing (its CPU total then counts the reused runs' recorded CPU).

Cost: about 2.7 CPU-minutes per run of 200 updates on this machine (training, warm-up and
evaluation; one core per run), so the defaults (5 arms x 5 seeds) take about 68 CPU-minutes
(34 minutes of wall time on 2 free cores).  To stay under 45 CPU-minutes: ``--updates 120``
(5 x 5 x 1.6 ≈ 41, a little more for the fixed warm-up and evaluation; 150 updates ≈ 51 and 4
seeds ≈ 54 are still over), or ``--seeds 0,1,2`` (5 x 3 x 2.7 ≈ 41), or fewer arms
(``--arms fixed:2,mix,curriculum``: 3 x 5 x 2.7 ≈ 41).  The total CPU time is printed.

Another KeyDoor-like family: ``--env-id`` and its budgets by flags, e.g.
``--env-id KeyDoorRooms-v0 --fixed 4,8 --mix 4,5,6,8`` (``--ts`` defaults to the union of the
fixed and mix budgets).

Run::

    python benchmarks/budgetmix_study.py --out runs/budgetmix_study                  # issue 25, step 4
    python benchmarks/budgetmix_study.py --out runs/budgetmix_study --updates 120     # <= 45 CPU-minutes
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any


# run from a checkout without installing; and not from benchmarks/, whose kernels.py would shadow the
# `kernels` package that transformers imports
sys.path[0] = str(Path(__file__).resolve().parents[1])

from agentgym_budget.eval import PassKTResult, aggregate_results  # noqa: E402
from agentgym_budget.eval.stats import paired_over_seeds  # noqa: E402
from agentgym_budget.train.config import keydoor_smoke_config  # noqa: E402
from agentgym_budget.train.learning_check import held_out_env_kwargs, parse_overrides, run_seed  # noqa: E402
from benchmarks.provenance import provenance  # noqa: E402

ARM_NAMES = ("fixed:lo", "fixed:hi", "mix", "curriculum", "mix+pr", "mix+gigpo", "adaptive")  # fixed:lo/hi: by their budgets
#: ``(a, b)``: the study reports ``a − b``.
COMPARISONS = (("mix", "fixed:lo"), ("mix", "fixed:hi"), ("curriculum", "mix"), ("mix+pr", "mix"),
               ("mix+gigpo", "mix"), ("mix+gigpo", "mix+pr"), ("adaptive", "mix"), ("adaptive", "fixed:lo"),
               ("adaptive", "fixed:hi"))


def arm_overrides(fixed: list[int], mix: list[int], episodes: int, process_reward_coef: float
                  ) -> dict[str, dict[str, Any]]:
    """The arms by display name, each the config fields it sets (the rest is the smoke run).

    Example:
        >>> arms = arm_overrides([2, 6], [2, 3, 4, 6], 12800, 0.5)
        >>> list(arms)
        ['fixed:2', 'fixed:6', 'mix', 'curriculum', 'mix+pr', 'mix+gigpo', 'adaptive']
        >>> arms["curriculum"]
        {'budget': 'curriculum:6->2@12800'}
    """
    lo, hi = min(fixed), max(fixed)
    mix_spec = "mix:" + ",".join(map(str, mix))
    return {
        f"fixed:{lo}": {"budget": f"fixed:{lo}"},
        f"fixed:{hi}": {"budget": f"fixed:{hi}"},
        "mix": {"budget": mix_spec},
        "curriculum": {"budget": f"curriculum:{hi}->{lo}@{episodes}"},
        "mix+pr": {"budget": mix_spec, "process_reward": "expert_progress", "process_reward_coef": process_reward_coef},
        "mix+gigpo": {"budget": mix_spec, "advantage": "gigpo"},
        "adaptive": {"budget": mix_spec.replace("mix:", "adaptive:")},
    }


def folder_name(arm: str) -> str:
    """``fixed:2`` → ``fixed2``, ``mix+pr`` → ``mix_pr`` (a folder name a shell glob needs no quotes for)."""
    return arm.replace(":", "").replace("+", "_")


def points(value: float | None, signed: bool = False) -> str:
    return "n/a" if value is None else f"{100 * value:{'+' if signed else ''}.1f}"


def markdown_tables(pass1: dict[str, dict[str, Any]], paired: dict[str, dict[str, dict[str, Any]]],
                    ts: list[int]) -> str:
    header = "| {} | " + " | ".join(f"T={t}" for t in ts) + " |\n|---|" + "---|" * len(ts) + "\n"
    lines = ["Pass@(1,T) on held-out tasks, mean over seeds [95 % t-CI over seeds], points\n",
             header.format("arm")]
    for arm, cells in pass1.items():
        lines.append(f"| {arm} | " + " | ".join(f"{points(c['mean'])} [{points(c['ci_low'])}, {points(c['ci_high'])}]"
                                               for c in map(cells.get, map(str, ts))) + " |\n")
    lines += ["\nPaired differences over seeds, points (95 % paired bootstrap CI over seeds; * = excludes 0)\n",
              header.format("comparison")]
    for name, cells in paired.items():
        lines.append(f"| {name} | " + " | ".join(
            f"{points(c['diff'], True)} [{points(c['ci_low'], True)}, {points(c['ci_high'], True)}]"
            f"{'*' if c['significant'] else ''}" for c in map(cells.get, map(str, ts))) + " |\n")
    return "".join(lines)


def finished_run(folder: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The run recorded in ``folder/run.json`` by an earlier invocation with the same settings, else ``None``
    (so an interrupted study, run again with the same command, trains only what is missing)."""
    try:
        record = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return None
    held_out = folder / "held_out_eval" / "passkt.json"
    return record["run"] if record.get("settings") == settings and held_out.exists() else None


def write_results(path: Path, started: dict[str, Any], report: dict[str, Any],
                  results: dict[str, dict[int, PassKTResult]], ts: list[int]) -> None:
    """The study's figures as a results file (docs tables are generated from it: tools/docs_tables.py):
    command, commit and load, the arms' settings, per-seed held-out Pass@(1,T) and training success,
    the means with t-CIs and the paired differences."""
    per_seed = {name: {str(seed): {"held_out_pass1": {str(t): r.value(1, t) for t in ts},
                                   "train_success_last20": run["last_success"], "cpu_seconds": run["cpu_seconds"],
                                   **{k: run[k] for k in ("train_episodes", "train_turns", "train_cpu_seconds")
                                      if k in run}}
                       for (seed, r), run in zip(sorted(by_seed.items()),
                                                 sorted(report["runs"][name], key=lambda run: run["seed"]))}
                for name, by_seed in results.items()}
    figures = {"provenance": {**started, "load_average_end": [round(x, 2) for x in os.getloadavg()]},
               "env_id": report["env_id"], "ts": ts, "seeds": report["seeds"], "updates": report["args"]["updates"],
               "eval_tasks": report["args"]["eval_tasks"], "eval_attempts": report["args"]["eval_attempts"],
               "arms": {name: {key: arm[key] for key in ("budget", "advantage", "process_reward",
                                                         "process_reward_coef", "gigpo_omega", "gigpo_gamma")}
                        for name, arm in report["arms"].items()},
               "per_seed": per_seed, "pass1": report["pass1"], "paired": report["paired"],
               "cpu_seconds": report["cpu_seconds"], "wall_seconds": report["wall_seconds"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"wrote {path}")


def training_cost(folder: Path) -> dict[str, float]:
    """The run's training cost from its ``metrics.jsonl``: episodes, turns (env steps), and the CPU seconds of
    its rollouts and updates (warm-up and evaluation not counted)."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return {"train_episodes": rows[-1]["episodes"], "train_turns": rows[-1]["env_steps"],
            "train_cpu_seconds": sum(r["cpu_rollout_seconds"] + r["cpu_update_seconds"] for r in rows)}


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/budgetmix_study")
    parser.add_argument("--env-id", default="KeyDoor-v0", help="a KeyDoor-like family trained on split='train'")
    parser.add_argument("--fixed", default="2,6", help="the two fixed budgets (the curriculum goes from max to min)")
    parser.add_argument("--mix", default="2,3,4,6", help="the BudgetMix budgets")
    parser.add_argument("--ts", default=None, help="evaluation budgets T (default: the fixed and mix budgets)")
    parser.add_argument("--arms", default=None, help="a comma-separated subset of the arms (default: the five "
                        "of the BudgetMix study, all but mix+gigpo and adaptive)")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--process-reward-coef", type=float, default=0.5)
    parser.add_argument("--eval-tasks", type=int, default=40, help="held-out evaluation tasks per run")
    parser.add_argument("--eval-attempts", type=int, default=2)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="runs in parallel processes")
    parser.add_argument("--results", default=None, help="also write the study's figures (per-seed Pass@(1,T), "
                        "paired differences, command and commit) to this JSON file, e.g. under docs/data/")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a TrainConfig field in every arm (repeatable)")
    args = parser.parse_args(argv)

    fixed, mix, seeds = ints(args.fixed), ints(args.mix), ints(args.seeds)
    if len(set(fixed)) != 2:
        raise SystemExit(f"--fixed takes two different budgets (the fixed arms and the curriculum's ends), "
                         f"got {args.fixed!r}")
    ts = ints(args.ts) if args.ts else sorted({*fixed, *mix})
    common = {"env_id": args.env_id, "total_updates": args.updates, **parse_overrides(args.set)}
    episodes = args.updates * keydoor_smoke_config(**common).episodes_per_update
    arms = arm_overrides(fixed, mix, episodes, args.process_reward_coef)
    if args.arms:
        unknown = [a for a in args.arms.split(",") if a not in arms]
        if unknown:
            raise SystemExit(f"unknown arms {unknown}; the arms are {list(arms)}")
        arms = {name: arms[name] for name in args.arms.split(",")}
    else:
        arms = {name: arm for name, arm in arms.items() if name not in ("mix+gigpo", "adaptive")}
    for name, arm in arms.items():  # refused here, in one line, rather than in every worker
        try:
            held_out_env_kwargs(keydoor_smoke_config(**common, **arm))
        except ValueError as error:
            raise SystemExit(f"budgetmix_study: arm {name}: {error}") from None
    names = list(arm_overrides(fixed, mix, episodes, args.process_reward_coef))
    comparisons = [(names[ARM_NAMES.index(a)], names[ARM_NAMES.index(b)]) for a, b in COMPARISONS]
    comparisons = [(a, b) for a, b in comparisons if a in arms and b in arms]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    started = provenance(sys.argv)
    start = time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in arms}
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = {}
        for seed in seeds:  # seed-major: an interrupted study still has whole seeds to pair
            for name, arm in arms.items():
                folder = out / folder_name(name) / f"seed_{seed}"
                settings = json.loads(json.dumps({**common, **arm, "seed": seed, "eval_tasks": args.eval_tasks,
                                                  "eval_attempts": args.eval_attempts, "ts": ts}))
                done = finished_run(folder, settings)
                futures[(name, seed)] = (folder, settings, done or pool.submit(
                    run_seed, seed, str(folder), args.eval_tasks, args.eval_attempts, ts, **common, **arm))
        failed = []
        for (name, seed), (folder, settings, future) in futures.items():
            try:
                run = future if isinstance(future, dict) else future.result()
            except Exception as e:  # noqa: BLE001 — one failed run must not lose the others' records
                failed.append(f"{name} seed {seed}: {type(e).__name__}: {e} (log: {folder}.log)")
                print(f"{name:>10} seed {seed}: FAILED ({type(e).__name__}: {e}); log {folder}.log", flush=True)
                continue
            if not isinstance(future, dict):
                run.update(training_cost(folder))
                (folder / "run.json").write_text(json.dumps({"settings": settings, "run": run}, indent=1))
            runs[name].append(run)
            held = " ".join(f"T={t}:{v:.2f}" for t, v in run["held_out_pass1"].items())
            print(f"{name:>10} seed {seed}: held-out Pass@(1,T) {held}  train success (last 20) "
                  f"{run['last_success']:.2f}  CPU {run['cpu_seconds'] / 60:.1f} min"
                  f"{'  (finished earlier: reused)' if isinstance(future, dict) else ''}", flush=True)

    if failed:
        raise SystemExit(f"{len(failed)} run(s) failed; the same command re-runs only them:\n" + "\n".join(failed))
    results = {name: {seed: PassKTResult.load(out / folder_name(name) / f"seed_{seed}" / "held_out_eval")
                      for seed in seeds} for name in arms}
    pass1 = {}
    for name, by_seed in results.items():
        aggregate = aggregate_results(list(by_seed.values()))
        pass1[name] = {str(t): {key: aggregate.passkt[(1, t)][key] for key in ("mean", "ci_low", "ci_high", "values")}
                       for t in ts}
    paired = {f"{a} − {b}": {str(t): paired_over_seeds({s: r.value(1, t) for s, r in results[a].items()},
                                                       {s: r.value(1, t) for s, r in results[b].items()})
                             for t in ts}
              for a, b in comparisons}
    table = markdown_tables(pass1, paired, ts)
    cpu = sum(run["cpu_seconds"] for arm_runs in runs.values() for run in arm_runs)
    wall = time.perf_counter() - start
    report = {"args": vars(args), "env_id": args.env_id, "ts": ts, "seeds": seeds,
              "arms": {name: {**dataclasses.asdict(keydoor_smoke_config(**common, **arm)), "output_dir": None}
                       for name, arm in arms.items()},
              "pass1": pass1, "paired": paired, "runs": runs, "cpu_seconds": cpu, "wall_seconds": wall}
    (out / "budgetmix_study.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "budgetmix_study.md").write_text(
        f"# BudgetMix study: {args.env_id}, {len(seeds)} seeds x {args.updates} updates, "
        f"{args.eval_tasks} held-out tasks x {args.eval_attempts} attempts\n\n" + table)
    if args.results:
        write_results(Path(args.results), started, report, results, ts)
    print("\n" + table)
    print(f"total CPU {cpu / 60:.1f} min ({cpu / 60 / max(1, len(seeds) * len(arms)):.1f} per run); "
          f"wall {wall / 60:.1f} min with {args.workers} workers")
    print(f"wrote {out / 'budgetmix_study.json'} and {out / 'budgetmix_study.md'}")


if __name__ == "__main__":
    main()

"""Fixed budget vs BudgetMix with SmolLM2-135M-Instruct (issue 36, requirement 3), paired over seeds.

Each arm is a set of finished ``benchmarks/smollm2_rl.py`` runs, one per seed, from the same SFT
folder and one flag apart (``--budget``); seed ``s`` of every arm starts from the same SFT model and
LoRA initialisation, so arms pair up by seed.  Every run's checkpoint is evaluated the same way
(``benchmarks/smollm2_table.py``: the trainer's policy and prompt, temperature 1, the same held-out
KeyDoor ``test`` tasks for every arm and seed, Pass@(1,T) for each ``--ts``); a row file that an
earlier invocation (or a direct ``smollm2_table.py`` call) wrote with the same settings is reused.

The results file has the format of ``benchmarks/budgetmix_study.py --results`` (per seed, the means
with a Student-t CI over seeds, and the first arm minus each other arm, paired over seeds with a
percentile bootstrap), plus each arm's run commands, so ``tools/docs_tables.py`` renders both studies
the same way.  An arm is named by its budget spec, and each run's own recorded budget must be that spec.

Run (the committed table: ``docs/data/smollm2-arms/study.json``; ~3 CPU-minutes per evaluation)::

    python benchmarks/smollm2_budget_arms.py --arm 'mix:2,3,4=runs/long-seed{seed}' \\
        --arm 'fixed:4=runs/fixed4-seed{seed}' --seeds 0,1,2 --update 50 \\
        --results docs/data/smollm2-arms/study.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from agentgym_budget.eval.stats import t_interval  # noqa: E402
from benchmarks import smollm2_table  # noqa: E402
from agentgym_budget.eval.stats import paired_over_seeds  # noqa: E402
from benchmarks.budgetmix_study import folder_name, ints  # noqa: E402
from benchmarks.provenance import provenance, write_results  # noqa: E402


def parse_arm(text: str) -> tuple[str, str]:
    """``'BUDGET=RUN_FOLDER_PATTERN'`` (the pattern holds ``{seed}``) as ``(budget, pattern)``; else a one-line error."""
    budget, sep, pattern = text.partition("=")
    if not sep or "{seed}" not in pattern or not budget.strip():
        raise SystemExit(f"--arm {text!r}: expected BUDGET=RUN_FOLDER with {{seed}} in it, "
                         "e.g. 'mix:2,3,4=runs/long-seed{seed}'")
    return budget.strip(), pattern


def arm_name(budget: str) -> str:
    """A budget spec as a file name: ``mix:2,3,4`` → ``mix234``, ``fixed:4`` → ``fixed4``."""
    return folder_name(budget).replace(",", "")


def checkpoint(run: Path, update: int, budget: str) -> tuple[Path, dict[str, Any]]:
    """The run's LoRA checkpoint at ``update`` and its training config, after checking it trained with ``budget``."""
    folder = run / "rl" / "checkpoints" / f"update_{update:06d}"
    if not (folder / "trainer_state.pt").is_file():
        raise SystemExit(f"{folder}: no checkpoint (run benchmarks/smollm2_rl.py with --eval-every dividing {update})")
    from agentgym_budget.train.trainer import load_trainer_state

    config = load_trainer_state(folder / "trainer_state.pt")["config"]
    if config.get("budget") != budget:
        raise SystemExit(f"{folder}: trained with budget {config.get('budget')!r}, not the arm's {budget!r}")
    return folder, config


def evaluated_row(args: argparse.Namespace, row: str, model: str, adapter: Path | None) -> dict[str, Any]:
    """The row file ``<out>/<row>.json``, evaluated now unless one with the same model, adapter and tasks exists."""
    path = Path(args.out) / f"{row}.json"
    wanted = {"model": model, "adapter": None if adapter is None else str(adapter), "ts": args.ts,
              "tasks": args.tasks, "prompt": args.prompt, "seed": 0}
    if path.is_file():
        facts = json.loads(path.read_text())
        if {key: facts["settings"].get(key) for key in wanted} == wanted:
            return facts
    argv = ["--row", row, "--model", model, "--out", args.out, "--work", args.work, "--ts", args.ts,
            "--tasks", str(args.tasks), "--prompt", args.prompt, "--threads", str(args.threads)]
    return smollm2_table.main(argv + (["--adapter", str(adapter)] if adapter else []))


def runs_by_work(results_root: Path) -> dict[str, dict[str, Any]]:
    """Each training run's command and CPU time, by its ``--work`` folder, from the ``results.json`` files
    smollm2_rl.py wrote under ``results_root``."""
    runs = {}
    for path in sorted(results_root.glob("**/results.json")):
        results = json.loads(path.read_text())
        work = results.get("settings", {}).get("work")
        if work is not None:
            runs[work] = {"command": results["provenance"]["command"], "results_file": path.as_posix(),
                          "cpu_seconds_of_updates": results.get("rl", {}).get("cpu_seconds_of_updates")}
    return runs


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", action="append", required=True, metavar="BUDGET=RUN_FOLDER",
                        help="an arm: its budget spec and its runs' --work folder with {seed}; the first arm is "
                             "compared with each other one")
    parser.add_argument("--runs-results", default="docs/data/smollm2-rl",
                        help="where the runs' results.json files are (each gives its run's command)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--update", type=int, default=50, help="the checkpoint evaluated")
    parser.add_argument("--ts", default="2,3,4")
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--prompt", default="short")
    parser.add_argument("--out", default="docs/data/smollm2-arms", help="the row files")
    parser.add_argument("--work", default="runs/smollm2-arms")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--results", default="docs/data/smollm2-arms/study.json")
    args = parser.parse_args(argv)
    started = provenance(sys.argv if argv is None else ["benchmarks/smollm2_budget_arms.py", *argv])
    arms = [parse_arm(text) for text in args.arm]
    seeds, ts = ints(args.seeds), ints(args.ts)
    start = time.process_time()

    known_runs = runs_by_work(Path(args.runs_results))
    missing = {"command": None, "results_file": None, "cpu_seconds_of_updates": None}
    rows: dict[str, dict[int, dict[str, Any]]] = {}
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for budget, pattern in arms:
        rows[budget], runs[budget] = {}, {}
        for seed in seeds:
            run = Path(pattern.format(seed=seed))
            adapter, config = checkpoint(run, args.update, budget)  # its SFT folder is the row's model
            rows[budget][seed] = evaluated_row(args, f"{arm_name(budget)}-seed{seed}", config["model"], adapter)
            runs[budget][seed] = known_runs.get(str(run), missing)

    def pass1(budget: str, seed: int, t: int) -> float:
        return rows[budget][seed]["held_out_pass1"][str(t)]["pass1"]

    names = [budget for budget, _ in arms]
    report = {
        "env_id": "KeyDoor-v0", "ts": ts, "seeds": seeds, "updates": args.update, "eval_tasks": args.tasks,
        "eval_attempts": 1, "arms": {budget: {"budget": budget, "advantage": rows[budget][seeds[0]]["rl"]["config"]
                                              .get("advantage")} for budget in names},
        "per_seed": {budget: {str(seed): {
            "held_out_pass1": {str(t): pass1(budget, seed, t) for t in ts},
            "train_success_last20": sum(rows[budget][seed]["rl"]["success_rate"][-20:]) / 20,
            "cpu_seconds": rows[budget][seed]["rl"]["cpu_seconds"],
            "run_command": runs[budget][seed]["command"], "run_results": runs[budget][seed]["results_file"],
            "eval_command": rows[budget][seed]["provenance"]["command"]} for seed in seeds} for budget in names},
        "pass1": {budget: {str(t): _mean_with_ci([pass1(budget, s, t) for s in seeds]) for t in ts}
                  for budget in names},
        "paired": {f"{names[0]} − {other}": {str(t): paired_over_seeds({s: pass1(names[0], s, t) for s in seeds},
                                                                       {s: pass1(other, s, t) for s in seeds})
                                             for t in ts} for other in names[1:]},
        "cpu_seconds": sum(rows[b][s]["rl"]["cpu_seconds"] for b in names for s in seeds),
        "eval_cpu_seconds": sum(rows[b][s]["eval_cpu_seconds"] for b in names for s in seeds),
        "aggregation_cpu_seconds": time.process_time() - start,
    }
    path = write_results(args.results, started, report)
    for budget in names:
        print(budget, {t: round(report["pass1"][budget][str(t)]["mean"], 3) for t in ts})
    for name, cells in report["paired"].items():
        print(name, {t: (round(c["diff"], 3), round(c["ci_low"], 3), round(c["ci_high"], 3)) for t, c in cells.items()})
    print(f"wrote {path}")
    return report


def _mean_with_ci(values: list[float]) -> dict[str, Any]:
    low, high = t_interval(values)
    return {"mean": sum(values) / len(values), "ci_low": low, "ci_high": high, "values": values}


if __name__ == "__main__":
    main()

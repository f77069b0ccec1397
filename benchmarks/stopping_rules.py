"""Stopping rules against the best fixed (K,T) cells, scored exactly from an evaluation's episode records.

Runs ``agentgym-budget eval`` with the given arguments (or reads a folder it wrote, ``--from``), then
places every rule at each (K,T)'s allotment ``K·T`` (:func:`~agentgym_budget.eval.stopping.rule_points`)
and writes one JSON file: the fixed sequential frontier, every rule point, and for each rule's own
frontier point the best fixed baseline at the same expected turns (a coin-flip mix of two fixed
cells on the upper hull, :func:`~agentgym_budget.eval.stopping.fixed_mix`) with the paired
difference (rule − baseline, per task, percentile bootstrap over tasks).

    python benchmarks/stopping_rules.py --eval "--out X" --rules no-progress:3,no-effect:2 \\
        --json docs/data/stopping-rules/alfworld-noisy-expert.json
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path[0] = str(Path(__file__).resolve().parents[1])  # the checkout, not benchmarks/

from agentgym_budget.cli import main as cli_main  # noqa: E402
from agentgym_budget.eval.episode_log import read_episodes  # noqa: E402
from agentgym_budget.eval.passkt import pass_at_k_array  # noqa: E402
from agentgym_budget.eval.results import PassKTResult  # noqa: E402
from agentgym_budget.eval.stopping import fixed_mix, parse_rules, rule_frontier, rule_points, task_values  # noqa: E402
from benchmarks.provenance import provenance, write_results  # noqa: E402

RESAMPLES = 2000


def _interval(values: np.ndarray, rng: np.random.Generator) -> list[float]:
    means = values[rng.integers(0, len(values), size=(RESAMPLES, len(values)))].mean(axis=1)
    return [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))]


def score(folder: Path, rule_specs: str) -> dict[str, Any]:
    """The study's numbers for one eval folder."""
    result = PassKTResult.load(folder)
    records = [r for r in read_episodes(folder) if r.task < result.n_tasks and r.attempt < result.attempts]
    frontier = result.frontier()
    assert frontier is not None, "the result has no attempt costs"
    rules = {rule.name: rule for rule in parse_rules(rule_specs)}
    points = rule_points(records, list(rules.values()), result.ks, result.ts, bootstrap=RESAMPLES)
    rng = np.random.default_rng(0)
    best = []
    for p in rule_frontier(points):
        mix = fixed_mix(frontier, p.turns)
        entry: dict[str, Any] = {"rule": p.rule, "t": p.t, "total_budget": p.budget, "turns": p.turns,
                                 "success": p.success, "ci": [p.ci_low, p.ci_high], "cut_rate": p.cut_rate}
        if mix:
            rule_tasks = task_values(records, rules[p.rule], p.k, p.t, p.budget)[:, 0]
            mix_tasks = sum(w * pass_at_k_array(result.attempts, result.successes[result.ts.index(c.t)], c.k)
                            for c, w in mix)
            gain = rule_tasks - mix_tasks
            entry["fixed"] = {"cells": [{"k": c.k, "t": c.t, "turns": c.cost, "weight": w} for c, w in mix],
                              "label": " + ".join(f"{w:.2f}·{c.label}" for c, w in mix),
                              "success": float(mix_tasks.mean()), "ci": _interval(mix_tasks, rng)}
            entry["gain"] = {"mean": float(gain.mean()), "ci": _interval(gain, rng)}
        best.append(entry)
    return {
        "env_id": result.env_id, "policy": result.policy, "mode": result.mode, "tasks": result.n_tasks,
        "attempts": result.attempts, "ks": list(result.ks), "ts": list(result.ts),
        "fixed_frontier": [{"k": c.k, "t": c.t, "turns": c.cost, "success": c.success, "ci": [c.ci_low, c.ci_high]}
                           for c in frontier.frontier("sequential", "turns")],
        "points": [{"rule": p.rule, "k": p.k, "t": p.t, "total_budget": p.budget, "success": p.success,
                    "ci": [p.ci_low, p.ci_high], "turns": p.turns, "turns_ci": [p.turns_ci_low, p.turns_ci_high],
                    "cut_rate": p.cut_rate} for p in points],
        "rule_frontier": best,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", required=True, help="agentgym-budget eval arguments (without --out)")
    parser.add_argument("--from", dest="source", help="an eval folder already written with exactly --eval")
    parser.add_argument("--rules", default="no-progress:3,no-progress:5,no-effect:2,no-effect:3")
    parser.add_argument("--json", required=True)
    parser.add_argument("--setup", default="", help="how the policy's model was made (recorded as is)")
    args = parser.parse_args()
    started = provenance(sys.argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.source) if args.source else Path(tmp) / "run"
        if not args.source:
            cli_main(["eval", *shlex.split(args.eval), "--out", str(folder), "--no-plots"])
        results = {"eval_command": "agentgym-budget eval " + args.eval, "setup": args.setup, "rules": args.rules, **score(folder, args.rules)}
    path = write_results(args.json, started, results)
    for entry in results["rule_frontier"]:
        fixed = entry.get("fixed")
        versus = "" if fixed is None else (f" | fixed {fixed['label']} {fixed['success']:.3f}"
                                           f" | gain {entry['gain']['mean']:+.3f} [{entry['gain']['ci'][0]:+.3f}, "
                                           f"{entry['gain']['ci'][1]:+.3f}]")
        print(f"{entry['rule']:>14} <= {entry['total_budget']:g} (T={entry['t']}) {entry['success']:.3f} "
              f"[{entry['ci'][0]:.3f}, {entry['ci'][1]:.3f}] @{entry['turns']:.1f}{versus}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

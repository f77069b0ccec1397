"""How hard the bundled ALFWorld split is: Pass@(K,T) of the scripted policies, one table.

Runs ``expert`` (both expert types), ``noisy-expert`` and ``random`` on one split of
``ALFWorld-Budget-v0`` (fast engine) and prints Pass@(1,T) and Pass@(8,T) for each, plus the
split's plan lengths (the fixed expert's stored walkthroughs, checkouts before v2 included).  To compare two bundles, run it
once per checkout with the same arguments, e.g. the bundle before generator v2::

    python benchmarks/alfworld_difficulty.py
    git worktree add /tmp/v1 24e8cad && PYTHONPATH=/tmp/v1 python benchmarks/alfworld_difficulty.py

``--policies random`` runs one row (its seconds column times the env's expert rollouts).

Tasks are env reset seeds ``seed .. seed+tasks-1`` (each draws one game of the split, so some
games repeat and some are not drawn); the printed line says how many distinct games were played.

``--json-out FILE`` writes every cell, each row's wall and CPU seconds and the split's plan lengths
with the command, commit and machine load (``benchmarks/provenance.py``); docs/alfworld.md's table
is generated from that file.  All four rows take about 6.5 CPU-minutes, three quarters of it ``random``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import agentgym_budget  # noqa: E402,F401  (registers the envs)
from agentgym_budget.envs.alfworld.game import load_games  # noqa: E402
from agentgym_budget.eval import evaluate  # noqa: E402
from benchmarks.provenance import provenance, write_results  # noqa: E402

#: (row label, policy, env kwargs): the expert types named, so older checkouts (default "fixed") run the same.
ROWS = (
    ("expert (upstream, default)", "expert", {"expert_type": "upstream"}),
    ("expert (fixed)", "expert", {"expert_type": "fixed"}),
    ("noisy-expert p=0.5 (upstream)", "noisy-expert", {"expert_type": "upstream"}),
    ("random", "random", {}),
)
POLICIES = tuple(dict.fromkeys(policy for _, policy, _ in ROWS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="valid_unseen")
    parser.add_argument("--tasks", type=int, default=134)
    parser.add_argument("--attempts", type=int, default=8)
    parser.add_argument("--t", default="10,20,30,50,100")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help="comma-separated: run only these policies' rows (e.g. random)")
    parser.add_argument("--json-out", default=None, help="write every cell (and provenance) to this JSON file")
    args = parser.parse_args()
    started = provenance(sys.argv)
    policies = args.policies.split(",")
    unknown = set(policies) - set(POLICIES)
    if unknown:
        parser.error(f"unknown policies {sorted(unknown)}; choose from {list(POLICIES)}")
    ts = tuple(int(t) for t in args.t.split(","))
    plans = [len(g.walkthrough) for g in load_games(args.split) if g.walkthrough]
    print(f"{args.split}: {len(plans)} games; fixed expert's plan length min/median/max "
          f"{min(plans)}/{statistics.median(plans)}/{max(plans)}")
    cells = [f"({k},{t})" for k in (1, args.attempts) for t in ts]
    print(f"| policy (Pass@(K,T)) | {' | '.join(cells)} | distinct games | s |")
    rows = []
    for label, policy, env_kwargs in (row for row in ROWS if row[1] in policies):
        start, cpu_start = time.perf_counter(), time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # repeated games are expected with seeds as tasks (reported below)
            result = evaluate("ALFWorld-Budget-v0", policy, ks=(1, args.attempts), ts=ts, tasks=args.tasks,
                              attempts=args.attempts, seed=args.seed, bootstrap=0, plots=False,
                              env_kwargs={"split": args.split, **env_kwargs})
        one = " | ".join(f"{result.value(1, t):.3f}" for t in ts)
        many = " | ".join(f"{result.value(args.attempts, t):.3f}" for t in ts)
        wall_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
        print(f"| {label} | {one} | {many} | {len(set(result.task_games))} | {wall_s:.0f} |")
        rows.append({"label": label, "policy": policy, "env_kwargs": env_kwargs, "wall_s": wall_s, "cpu_s": cpu_s,
                     "distinct_games": len(set(result.task_games)),
                     "pass": {f"{k},{t}": result.value(k, t) for k in (1, args.attempts) for t in ts}})
    if args.json_out:
        results = {"split": args.split, "tasks": args.tasks, "attempts": args.attempts, "ts": list(ts), "seed": args.seed,
                   "games": len(plans), "plan_length": {"min": min(plans), "median": statistics.median(plans),
                                                        "max": max(plans)}, "rows": rows}
        print(f"wrote {write_results(args.json_out, started, results)}")


if __name__ == "__main__":
    main()

"""Do concurrent verifiers rollouts overlap on the real ALFWorld engine?  (issue 27)

verifiers runs a group's rollouts as concurrent asyncio tasks.  An env that resets or steps
*on* the event loop serialises them and stalls everything else on it (the model calls of the
other rollouts); :class:`~agentgym_budget.integrations.verifiers_env.BudgetMultiTurnEnv` runs
them in worker threads.  This evaluates ``--rollouts`` episodes of ``ALFWorld-Budget-v0`` on
``--engine`` (default ``textworld``, the real TextWorld + Fast Downward engine) twice through
``env.evaluate``: one at a time (``max_concurrent=1``, the sum of the rollouts' times) and all
at once, with a stand-in model that answers a random admissible command after ``--latency``
seconds (a served model's wait), and reports both wall times, the longest the event loop
went without running (a 5 ms heartbeat task) and the share of the run spent in stalls over
``STALL_S`` (the sum of the heartbeat's gaps longer than that, over the wall time).

Run (a few CPU-minutes on the real engine; ``--out`` writes the rows with the command, commit
and machine load, the file the docs table of docs/integrations.md is made from):
    python benchmarks/verifiers_concurrency.py --rollouts 4 --budget 5 --latencies 0.1,1.0 \
        --out docs/data/verifiers-concurrency/real-engine.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout: tools/ is the checkout's

import agentgym_budget  # noqa: E402,F401  (registers the envs)
from agentgym_budget.integrations.verifiers_env import BudgetMultiTurnEnv  # noqa: E402
from tools.scripted_clients import ScriptedClient, random_admissible  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance  # noqa: E402  (benchmarks/provenance.py)

#: A gap of the 5 ms heartbeat longer than this counts as a stall of the event loop.
STALL_S = 0.1


async def timed_evaluate(env: BudgetMultiTurnEnv, latency: float, max_concurrent: int) -> dict[str, float]:
    gaps: list[float] = []
    done = asyncio.Event()

    async def heartbeat() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    beat = asyncio.create_task(heartbeat())
    start = time.perf_counter()
    results = await env.evaluate(ScriptedClient(random_admissible(), latency), "stand-in", rollouts_per_example=1,
                                 max_concurrent=max_concurrent)
    wall = time.perf_counter() - start
    done.set()
    await beat
    turns = sum(out["metrics"]["turns"] for out in results["outputs"])
    stalls = [gap for gap in gaps if gap > STALL_S]
    return {"max_concurrent": max_concurrent, "wall_s": round(wall, 2), "max_loop_stall_s": round(max(gaps), 3),
            "stalls_over_0.1s": len(stalls), "stall_share": round(sum(stalls) / wall, 3),
            "turns": turns, "errors": sum(out.get("error") is not None for out in results["outputs"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--budget", type=int, default=5)
    parser.add_argument("--engine", default="textworld")
    parser.add_argument("--latencies", default="0.1", help="the stand-in model's seconds per reply, comma-separated")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the rows and their provenance to this JSON file")
    args = parser.parse_args()
    started = provenance(sys.argv)
    env = BudgetMultiTurnEnv("ALFWorld-Budget-v0", budget=args.budget, num_examples=args.rollouts,
                             first_seed=args.first_seed, env_kwargs={"engine": args.engine})
    rows = []
    for latency in (float(x) for x in args.latencies.split(",")):
        for max_concurrent in (1, args.rollouts):
            row = {"engine": args.engine, "rollouts": args.rollouts, "budget": args.budget, "latency_s": latency,
                   **asyncio.run(timed_evaluate(env, latency, max_concurrent))}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        record = {"provenance": {**started, "load_average_end": [round(x, 2) for x in os.getloadavg()]}, "rows": rows}
        out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

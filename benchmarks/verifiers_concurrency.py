"""Do concurrent verifiers rollouts overlap on the real ALFWorld engine?  (issue 27)

verifiers runs a group's rollouts as concurrent asyncio tasks.  An env that resets or steps
*on* the event loop serialises them and stalls everything else on it (the model calls of the
other rollouts); :class:`~agentgym_budget.integrations.verifiers_env.BudgetMultiTurnEnv` runs
them in worker threads.  This evaluates ``--rollouts`` episodes of ``ALFWorld-Budget-v0`` on
``--engine`` (default ``textworld``, the real TextWorld + Fast Downward engine) twice through
``env.evaluate``: one at a time (``max_concurrent=1``, the sum of the rollouts' times) and all
at once, with a stand-in model that answers a random admissible command after ``--latency``
seconds (a served model's wait), and reports both wall times and the longest the event loop
went without running (a 5 ms heartbeat task).

Run (about a CPU-minute on the real engine):
    python benchmarks/verifiers_concurrency.py --rollouts 4 --budget 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout: tools/ is the checkout's

import agentgym_budget  # noqa: E402,F401  (registers the envs)
from agentgym_budget.integrations.verifiers_env import BudgetMultiTurnEnv  # noqa: E402
from tools.scripted_clients import ScriptedClient, random_admissible  # noqa: E402


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
    return {"max_concurrent": max_concurrent, "wall_s": round(wall, 2), "max_loop_stall_s": round(max(gaps), 3),
            "turns": turns, "errors": sum(out.get("error") is not None for out in results["outputs"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--budget", type=int, default=5)
    parser.add_argument("--engine", default="textworld")
    parser.add_argument("--latency", type=float, default=0.1, help="the stand-in model's seconds per reply")
    parser.add_argument("--first-seed", type=int, default=0)
    args = parser.parse_args()
    env = BudgetMultiTurnEnv("ALFWorld-Budget-v0", budget=args.budget, num_examples=args.rollouts,
                             first_seed=args.first_seed, env_kwargs={"engine": args.engine})
    for max_concurrent in (1, args.rollouts):
        row = asyncio.run(timed_evaluate(env, args.latency, max_concurrent))
        print(json.dumps({"engine": args.engine, "rollouts": args.rollouts, "budget": args.budget,
                          "latency_s": args.latency, **row}), flush=True)


if __name__ == "__main__":
    main()

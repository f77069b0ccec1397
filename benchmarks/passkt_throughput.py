"""Pass@(K,T) evaluation throughput: --workers 1 vs --workers 2, and the cost of the metrics pass.

Runs the same evaluation (default: the Quickstart main job, ALFWorld-Budget-v0 x noisy-expert,
50 tasks x 8 attempts, T up to 50) once in-process and once with a pool of 2 processes, side
by side, and prints:

* episodes/s of each and the speedup (target >= 1.7x on 2 cores), with the env's one-time
  start-up (loading its game files) done once before timing and reported separately;
* that both gave identical success counts (the result must not depend on --workers);
* the behaviour-metrics pass as a fraction of rollout time (target < 5 %).

    python benchmarks/passkt_throughput.py
    python benchmarks/passkt_throughput.py --env KeyDoor-Budget-v0 --tasks 200 --t 1,2,4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import numpy as np

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.eval import evaluate
from agentgym_budget.envs.registration import make_budget_env


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the pool's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALFWorld-Budget-v0")
    parser.add_argument("--policy", default="noisy-expert")
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--attempts", type=int, default=8)
    parser.add_argument("--k", default="1,2,4,8")
    parser.add_argument("--t", default="5,10,20,30,50")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="pool size compared with 1 worker")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="gym.make option, repeatable (e.g. engine=fast); values parsed as JSON when possible")
    args = parser.parse_args()
    env_kwargs = {}
    for item in args.env_arg:
        key, _, raw = item.partition("=")
        try:
            env_kwargs[key] = json.loads(raw)
        except json.JSONDecodeError:
            env_kwargs[key] = raw
    ks = [int(k) for k in args.k.split(",")]
    ts = [int(t) for t in args.t.split(",")]

    # Build the env once before timing: loading game files is a one-time start-up cost (cached
    # per process and inherited by forked workers), reported on its own, not a throughput.
    start = time.perf_counter()
    make_budget_env(args.env, max(ts), **env_kwargs).close()
    startup = time.perf_counter() - start

    runs = {}
    load_before = os.getloadavg()[0]
    for workers in (1, args.workers):
        cpu_start = _cpu_seconds()
        start = time.perf_counter()
        result = evaluate(args.env, args.policy, ks=ks, ts=ts, tasks=args.tasks, attempts=args.attempts,
                          seed=args.seed, workers=workers, env_kwargs=env_kwargs, bootstrap=1000)
        runs[workers] = (result, time.perf_counter() - start, _cpu_seconds() - cpu_start)

    print(f"{args.env} {env_kwargs or ''} x {args.policy}: {args.tasks} tasks x {args.attempts} attempts, T={ts}, "
          f"mode={runs[1][0].mode}")
    print(f"{'workers':>8} {'episodes':>9} {'turns':>7} {'rollout s':>10} {'episodes/s':>11} {'turns/s':>8} "
          f"{'metrics ms':>11} {'metrics/rollout':>16} {'total s':>8} {'CPU s':>7}")
    for workers, (result, total, cpu) in runs.items():
        t = result.timing
        print(f"{workers:>8} {t['episodes']:>9} {t['steps']:>7} {t['rollout_seconds']:>10.2f} "
              f"{t['episodes_per_second']:>11.1f} {t['steps'] / t['rollout_seconds']:>8.0f} "
              f"{t['metrics_seconds'] * 1000:>11.1f} {t['metrics_seconds'] / t['rollout_seconds']:>15.2%} {total:>8.2f} {cpu:>7.2f}")
    print(f"one-time env start-up before timing (first gym.make in this process): {startup:.2f} s")
    one, many = runs[1][0], runs[args.workers][0]
    speedup = many.timing["episodes_per_second"] / one.timing["episodes_per_second"]
    print(f"speedup workers={args.workers} vs 1: {speedup:.2f}x (target >= 1.7x on 2 cores)")
    print(f"CPU seconds (all processes) workers={args.workers} / workers=1: {runs[args.workers][2] / runs[1][2]:.2f} "
          f"(1.00 = the pool adds no work; on {args.workers} idle cores the speedup is then ~{args.workers}x)")
    print(f"machine: {os.cpu_count()} CPUs, 1-min load average {load_before:.1f} before / {os.getloadavg()[0]:.1f} after "
          "(other busy processes share the cores: the speedup is only meaningful on an otherwise idle machine)")
    print(f"identical success counts: {bool(np.array_equal(one.successes, many.successes))}")
    print(f"metrics pass / rollout time (workers=1): {one.timing['metrics_seconds'] / one.timing['rollout_seconds']:.2%} "
          f"(target < 5%)")
    print("Pass@(K,T) at workers=1 (K down, T across):")
    print("      " + " ".join(f"{t:>6}" for t in ts))
    for i, k in enumerate(ks):
        print(f"K={k:<3} " + " ".join(f"{v:6.3f}" for v in one.mean[i]))


if __name__ == "__main__":
    main()

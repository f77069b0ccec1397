"""Ray vs local multiprocessing for Pass@(K,T) rollouts: episodes/s, overhead, and correctness.

Runs the same episode jobs (default: ALFWorld-Budget-v0 x noisy-expert, 40 tasks x 8 attempts
at T=50, i.e. the shortcut-mode rollouts of a Pass@(K,T) grid) side by side in one process:

* local ``--workers 1`` (in-process) and ``--workers 2`` (a process pool);
* Ray with 1 and 2 actors, warm (actors started and envs built by a first run, as in a long
  study or a trainer), plus the one-off actor start-up ("cold");
* Ray with 2 actors and one episode per chunk (per-episode dispatch: the worst case);

rounds interleaved (so that load from other programs hits every configuration alike); the
median and the best round are reported (on a shared machine the best is the least disturbed).  Overhead = local episodes/s / Ray episodes/s - 1 at equal worker count
(target <= 10 % at episode granularity).  Then a correctness run: a local Ray instance with
more logical CPUs than this machine has cores, more actors than cores, must return exactly the
records of the in-process run (its speed measures nothing and is not printed).

    python benchmarks/ray_scaling.py
    python benchmarks/ray_scaling.py --env KeyDoor-Budget-v0 --tasks 400 --budget 6

``--json-out FILE`` writes every round's seconds, the start-up costs and the correctness checks with
the command, commit and machine load (``benchmarks/provenance.py``); docs/ray.md's table is generated
from that file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local instance
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import agentgym_budget  # noqa: E402,F401  (registers the envs)
from agentgym_budget.distributed import RayExecutor  # noqa: E402
from agentgym_budget.episodes.process_pool import EpisodeProcessPool  # noqa: E402
from agentgym_budget.episodes.records import EpisodeJob, EpisodeRecord  # noqa: E402
from agentgym_budget.episodes.runner import RolloutSpec, SerialExecutor  # noqa: E402
from benchmarks.provenance import provenance, write_results  # noqa: E402

FALLBACK_ENV = "KeyDoor-Budget-v0"


def usable_spec(args: argparse.Namespace) -> RolloutSpec:
    spec = RolloutSpec(args.env, args.policy, seed=args.seed, max_budget=args.budget)
    try:
        spec.make_env().close()
    except Exception as e:  # e.g. the ALFWorld data not generated in this checkout
        print(f"!! {args.env} cannot be built here ({type(e).__name__}: {e}); measuring {FALLBACK_ENV} instead")
        spec = RolloutSpec(FALLBACK_ENV, args.policy, seed=args.seed, max_budget=min(args.budget, 6))
    return spec


def timed(run: Callable[[], list[EpisodeRecord]]) -> tuple[float, list[EpisodeRecord]]:
    start = time.perf_counter()
    records = run()
    return time.perf_counter() - start, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALFWorld-Budget-v0")
    parser.add_argument("--policy", default="noisy-expert")
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--attempts", type=int, default=8)
    parser.add_argument("--budget", type=int, default=50, help="T of every episode (the grid's largest)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    parser.add_argument("--logical-cpus", type=int, default=8, help="CPUs the local Ray instance claims")
    parser.add_argument("--oversubscribed-actors", type=int, default=6, help="actors of the correctness run")
    parser.add_argument("--json-out", default=None, help="write every round (and provenance) to this JSON file")
    args = parser.parse_args()
    started = provenance(sys.argv)

    import ray

    spec = usable_spec(args)
    jobs = [EpisodeJob(task, attempt, spec.max_budget) for task in range(args.tasks) for attempt in range(args.attempts)]
    print(f"{spec.env_id} x {spec.policy}: {len(jobs)} episodes (T={spec.max_budget}), {os.cpu_count()} cores, "
          f"{args.rounds} interleaved rounds")

    start = time.perf_counter()
    ray.init(num_cpus=args.logical_cpus, include_dashboard=False, log_to_driver=False,
             object_store_memory=200 * 2**20)
    ray_start = time.perf_counter() - start
    ray_executors = {"ray, 1 actor": RayExecutor(actors=1), "ray, 2 actors": RayExecutor(actors=2),
                     "ray, 2 actors, 1 episode/chunk": RayExecutor(actors=2, chunk_size=1)}
    cold = {}
    for name, executor in ray_executors.items():  # start actors and build their envs: the one-off cost
        cold[name], _ = timed(lambda executor=executor: executor.run(spec, jobs[:8]))
    configs: dict[str, Callable[[], list[EpisodeRecord]]] = {
        "local, workers 1": lambda: SerialExecutor().run(spec, jobs),
        "local, workers 2": lambda: EpisodeProcessPool(2).run(spec, jobs),
        **{name: (lambda executor=executor: executor.run(spec, jobs)) for name, executor in ray_executors.items()},
    }
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    reference = None
    identical = True
    for _ in range(args.rounds):
        for name, run in configs.items():
            elapsed, records = timed(run)
            seconds[name].append(elapsed)
            reference = reference if reference is not None else records
            identical &= records == reference

    rate = {name: len(jobs) / statistics.median(times) for name, times in seconds.items()}
    best = {name: len(jobs) / min(times) for name, times in seconds.items()}
    print(f"\n{'configuration':<34}{'episodes/s median':>18}{'best':>8}{'actor start-up s':>19}")
    for name in seconds:
        startup = f"{cold[name]:.1f}" if name in cold else "-"
        print(f"{name:<34}{rate[name]:>18.0f}{best[name]:>8.0f}{startup:>19}")
    print(f"(ray.init of the local instance: {ray_start:.1f} s, once; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores at the end)")
    for workers, ray_name in ((1, "ray, 1 actor"), (2, "ray, 2 actors"), (2, "ray, 2 actors, 1 episode/chunk")):
        local_name = f"local, workers {workers}"
        print(f"overhead of {ray_name!r} vs {local_name!r}: median {rate[local_name] / rate[ray_name] - 1:+.1%}, "
              f"best {best[local_name] / best[ray_name] - 1:+.1%}")
    print(f"speedup 2 vs 1 (best): local {best['local, workers 2'] / best['local, workers 1']:.2f}x, "
          f"ray {best['ray, 2 actors'] / best['ray, 1 actor']:.2f}x")
    print(f"every configuration returned identical records: {identical}")
    for executor in ray_executors.values():
        executor.close()

    actors = args.oversubscribed_actors
    with RayExecutor(actors=actors, chunk_size=max(1, len(jobs) // (3 * actors))) as executor:
        same = executor.run(spec, jobs) == reference
    print(f"correctness: {actors} actors on a Ray instance claiming {args.logical_cpus} CPUs "
          f"({os.cpu_count()} cores): identical records: {same}")
    ray.shutdown()
    if args.json_out:
        results = {"env": spec.env_id, "policy": spec.policy, "episodes": len(jobs), "max_budget": spec.max_budget,
                   "rounds": args.rounds, "ray_init_s": ray_start, "actor_startup_s": cold, "seconds_by_round": seconds,
                   "identical_records": identical, "oversubscribed": {"actors": actors, "logical_cpus": args.logical_cpus,
                                                                      "identical_records": same}}
        print(f"wrote {write_results(args.json_out, started, results)}")
    if not (identical and same):
        raise SystemExit("records differ between executors")


if __name__ == "__main__":
    main()

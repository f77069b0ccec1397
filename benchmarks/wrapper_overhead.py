"""Steps/s of a bare env vs the same env under ``TurnBudget(show_budget=True)``, in one run.

Run: python benchmarks/wrapper_overhead.py [--env ALFWorld-v0] [--steps 30000] [--rounds 21]
Target: wrapped / bare >= 0.97.

"Bare" is the env as ``gym.make`` gives it (its step limit included); "wrapped" is the same
env object under ``TurnBudget(budget=<that limit>, show_budget=True)``, so both variants play
the same episodes on the same engine.  Both replay the same seeded random admissible
commands, after one untimed warm-up round each (game caches), in alternating rounds; each
figure is the median over rounds, and the ratio the median of the per-round ratios.  Two
figures per variant:

* whole loop: steps per CPU second of this process for the loop with its resets (waiting for
  a core on a shared machine is not counted) — what a rollout loop sees;
* step calls only: the summed time inside ``env.step`` (``perf_counter_ns`` around each call),
  resets excluded — the wrapper's per-step cost against the env's step alone.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.wrappers import TurnBudget


def play(env: gym.Env, steps: int, seed: int) -> tuple[float, float]:
    """Step ``env`` with random admissible commands (seeded), resetting on episode end.

    Returns (steps per CPU second of the whole loop, steps per second inside ``env.step``).
    """
    picks = np.random.default_rng(seed).integers(1 << 30, size=steps).tolist()
    _, info = env.reset(seed=seed)
    in_step = 0
    clock = time.perf_counter_ns
    start = time.process_time()
    for pick in picks:
        commands = info["admissible_commands"]
        command = commands[pick % len(commands)]
        before = clock()
        _, _, terminated, truncated, info = env.step(command)
        in_step += clock() - before
        if terminated or truncated:
            _, info = env.reset()
    return steps / (time.process_time() - start), steps / (in_step / 1e9)


def _row(name: str, loop: list[float], step_only: list[float]) -> str:
    return f"{name:<36}{statistics.median(loop):>14,.0f}{statistics.median(step_only):>18,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="ALFWorld-v0")
    parser.add_argument("--steps", type=int, default=30_000, help="steps per round")
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()

    bare = gym.make(args.env)
    limit = bare.spec.max_episode_steps if bare.spec is not None and bare.spec.max_episode_steps else 50
    # The same env object under the wrapper: two instances differ by a few % in speed on their own
    # (where their game caches landed in memory), which would swamp a wrapper's cost.
    wrapped = TurnBudget(bare, budget=limit, show_budget=True)
    for env in (bare, wrapped):  # warm-up: every game the rounds will play gets loaded and cached
        for round_index in range(args.rounds):
            play(env, args.steps, seed=round_index)
    figures: dict[str, list[tuple[float, float]]] = {"bare": [], "wrapped": []}
    for round_index in range(args.rounds):
        figures["bare"].append(play(bare, args.steps, seed=round_index))
        figures["wrapped"].append(play(wrapped, args.steps, seed=round_index))
    (bare_loop, bare_step), (wrapped_loop, wrapped_step) = (zip(*figures[k]) for k in ("bare", "wrapped"))
    loop_ratio = statistics.median(w / b for w, b in zip(wrapped_loop, bare_loop))
    step_ratio = statistics.median(w / b for w, b in zip(wrapped_step, bare_step))
    overhead_us = statistics.median(1e6 / w - 1e6 / b for w, b in zip(wrapped_step, bare_step))
    print(f"env: {args.env} (step limit {limit}), {args.rounds} rounds x {args.steps} steps each")
    print(f"{'variant':<36}{'loop steps/CPU-s':>14}{'steps/s in step()':>18}")
    print(_row("bare env (gym.make)", bare_loop, bare_step))
    print(_row(f"TurnBudget({limit}, show_budget=True)", wrapped_loop, wrapped_step))
    for name, ratio in (("whole loop", loop_ratio), ("step calls only", step_ratio)):
        verdict = "meets" if ratio >= 0.97 else "MISSES"
        print(f"ratio wrapped/bare, {name}: {ratio:.3f} ({verdict} the >= 0.97 target)")
    print(f"wrapper cost per step: {overhead_us:.2f} us")


if __name__ == "__main__":
    main()

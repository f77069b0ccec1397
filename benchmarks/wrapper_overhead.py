"""Steps/s of a bare env vs the same env under ``TurnBudget(show_budget=True)``, in one run.

Run: python benchmarks/wrapper_overhead.py [--env ALFWorld-v0] [--steps 20000]
Target: wrapped / bare >= 0.97.  Both variants replay the same seeded action sequence, after
one untimed warm-up round each (game compilation caches), in alternating rounds; each round
is timed in CPU seconds of this process (waiting for a core on a shared machine is not
counted) and the figure is the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.wrappers import TurnBudget


def steps_per_second(env: gym.Env, steps: int, seed: int) -> float:
    """Step ``env`` with random admissible commands (seeded), resetting on episode end."""
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    start = time.process_time()
    for _ in range(steps):
        commands = info["admissible_commands"]
        _, _, terminated, truncated, info = env.step(commands[int(rng.integers(len(commands)))])
        if terminated or truncated:
            _, info = env.reset()
    return steps / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="ALFWorld-v0")
    parser.add_argument("--steps", type=int, default=5_000, help="steps per round")
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()

    bare = gym.make(args.env).unwrapped
    # A budget far above the episode length, so both variants run the same episodes.
    wrapped = TurnBudget(gym.make(args.env).unwrapped, budget=10**6, show_budget=True)
    for env in (bare, wrapped):  # warm-up: compile every game the rounds will play
        for round_index in range(args.rounds):
            steps_per_second(env, args.steps, seed=round_index)
    bare_rates, wrapped_rates = [], []
    for round_index in range(args.rounds):
        bare_rates.append(steps_per_second(bare, args.steps, seed=round_index))
        wrapped_rates.append(steps_per_second(wrapped, args.steps, seed=round_index))
    bare_sps, wrapped_sps = statistics.median(bare_rates), statistics.median(wrapped_rates)
    ratio = statistics.median(w / b for w, b in zip(wrapped_rates, bare_rates))
    print(f"env: {args.env}, {args.rounds} rounds x {args.steps} steps each")
    print(f"{'variant':<36}{'steps per CPU-s':>16}")
    print(f"{'bare env':<36}{bare_sps:>16,.0f}")
    print(f"{'TurnBudget(show_budget=True)':<36}{wrapped_sps:>16,.0f}")
    print(f"ratio wrapped/bare (median of per-round ratios): {ratio:.3f} "
          f"({'meets' if ratio >= 0.97 else 'MISSES'} the >= 0.97 target)")


if __name__ == "__main__":
    main()

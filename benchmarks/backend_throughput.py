"""Steps/s of each real-engine backend: the raw engine vs our Gymnasium env, side by side.

For each backend the same action sequence (recorded once from our env: admissible commands
drawn by a seeded RNG, every fifth action an unknown verb, resets where episodes end) is
replayed on

* the raw engine: ``textworld.start(game, request_infos=<the same EnvInfos>)`` stepped
  directly, or ``scienceworld.ScienceWorldEnv`` (``load`` + ``reset`` + ``step``);
* our env: ``TextWorldChallengeEnv`` / ``ScienceWorldEnv`` (``expert=False``, as the raw
  engine computes no gold path).

Only ``step`` calls are timed.  The two envs replay the sequence in lockstep (each action on
both, alternating which goes first) so machine load hits both alike, and the median of the
rounds (after one warm-up round) is reported.  Target: ours / raw >= 0.9.
The last column, the fraction of our steps' time spent inside the engine's own ``step``
(measured on the same calls), shows what our env adds: ``1 - share``.

Run:  python benchmarks/backend_throughput.py [--steps 200] [--rounds 5] [--sw-steps 40]
          [--backends textworld,scienceworld] [--json-out FILE]

``--json-out`` writes every row (and every round's rates) with the command, commit and machine load
(``benchmarks/provenance.py``); the tables of docs/textworld.md and docs/scienceworld.md are generated from such files.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from agentgym_budget._optional import is_installed  # noqa: E402
from benchmarks.provenance import provenance, write_results  # noqa: E402

BACKENDS = ("textworld", "scienceworld")
RESET = None  # marks an episode boundary in a recorded action sequence


def record_actions(env: Any, n_steps: int, seed: int = 0, reset_options: dict | None = None) -> list[str | None]:
    """A replayable action sequence from ``env`` (RESET where an episode ended)."""
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed, options=reset_options)
    actions: list[str | None] = []
    while len(actions) < n_steps:
        commands = info["admissible_commands"]
        action = "xyzzy" if len(actions) % 5 == 4 else commands[int(rng.integers(len(commands)))]
        actions.append(action)
        _, _, terminated, _, info = env.step(action)
        if terminated:
            actions.append(RESET)
            _, info = env.reset(options=reset_options)
    return actions


class EngineClock:
    """Wraps an engine object's ``step`` and adds up the time spent inside it while active
    (i.e. during our timed steps, not during resets, which may step the engine too)."""

    def __init__(self, engine: Any) -> None:
        self.seconds = 0.0
        self.active = False
        inner = engine.step

        def step(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner(*args)
            finally:
                if self.active:
                    self.seconds += time.perf_counter() - start

        engine.step = step


def lockstep_replay(
    raw: tuple[Callable, Callable], ours: tuple[Callable, Callable], actions: list[str | None], clock: EngineClock
) -> tuple[float, float]:
    """Replay ``actions`` on both, step by step, alternating which goes first; returns the
    seconds spent in raw steps and in our steps (resets are not timed)."""
    (raw_reset, raw_step), (our_reset, our_step) = raw, ours
    raw_reset()
    our_reset()
    raw_seconds = our_seconds = 0.0
    for index, action in enumerate(actions):
        if action is RESET:
            raw_reset()
            our_reset()
            continue
        for which in ((0, 1) if index % 2 == 0 else (1, 0)):
            start = time.perf_counter()
            if which == 0:
                raw_step(action)
                raw_seconds += time.perf_counter() - start
            else:
                clock.active = True
                our_step(action)
                clock.active = False
                our_seconds += time.perf_counter() - start
    return raw_seconds, our_seconds


def compare(
    name: str,
    raw: tuple[Callable, Callable],
    ours: tuple[Callable, Callable],
    actions: list[str | None],
    rounds: int,
    engine_of_ours: Callable[[], Any],
) -> dict[str, Any]:
    """Print (and return) raw and our steps/s, their ratio, and the engine's share of the time of our steps.

    Both envs replay the actions in lockstep, so machine load hits them alike; the share is
    measured on the very same calls as our steps: ``1 - share`` is our env's own overhead.
    """
    steps = sum(a is not RESET for a in actions)
    ours[0]()  # our env creates its engine on reset: wrap that engine's step
    clock = EngineClock(engine_of_ours())
    lockstep_replay(raw, ours, actions, clock)  # warm-up (JIT, caches), not counted
    clock.seconds = 0.0
    raw_rates, our_rates, our_total = [], [], 0.0
    for _ in range(rounds):
        raw_seconds, our_seconds = lockstep_replay(raw, ours, actions, clock)
        raw_rates.append(steps / raw_seconds)
        our_rates.append(steps / our_seconds)
        our_total += our_seconds
    raw_rate, our_rate = statistics.median(raw_rates), statistics.median(our_rates)
    share = clock.seconds / our_total
    ratio = our_rate / raw_rate
    print(f"{name:<28} {steps:>6} {raw_rate:>12.1f} {our_rate:>12.1f} {ratio:>9.3f} {share:>13.4f}", flush=True)
    return {"backend": name, "steps": steps, "rounds": rounds, "raw_steps_per_s": raw_rate, "ours_steps_per_s": our_rate,
            "ours_over_raw": ratio, "engine_share": share, "raw_steps_per_s_by_round": raw_rates,
            "ours_steps_per_s_by_round": our_rates}


def bench_textworld(challenge: str, n_steps: int, rounds: int) -> dict[str, Any]:
    import textworld

    from agentgym_budget.envs.textworld.env import TextWorldChallengeEnv, request_infos

    ours = TextWorldChallengeEnv(challenge)
    game = ours.unwrapped._game(0)
    actions = record_actions(ours, n_steps, reset_options={"task": 0})
    raw = textworld.start(str(game), request_infos=request_infos())
    try:
        return {"level": ours.challenge.default_level, **compare(
            f"TextWorld {challenge}",
            (raw.reset, raw.step),
            (lambda: ours.reset(options={"task": 0}), ours.step),
            actions,
            rounds,
            engine_of_ours=lambda: ours._engine,  # the same game (task 0) keeps the same engine
        )}
    finally:
        raw.close()
        ours.close()


def bench_scienceworld(task: str, variation: int, n_steps: int, rounds: int) -> dict[str, Any]:
    import scienceworld

    from agentgym_budget.envs.scienceworld.env import ScienceWorldEnv

    options = {"task": task, "variation": variation}
    ours = ScienceWorldEnv(expert=False)
    actions = record_actions(ours, n_steps, reset_options=options)
    raw = scienceworld.ScienceWorldEnv("", envStepLimit=sys.maxsize)

    def raw_reset() -> None:
        raw.load(task, variation, "")
        raw.reset()

    try:
        return compare(
            f"ScienceWorld {task}/{variation}",
            (raw_reset, raw.step),
            (lambda: ours.reset(options=options), ours.step),
            actions,
            rounds,
            engine_of_ours=lambda: ours._sim,
        )
    finally:
        raw.close()
        raw.close = lambda: None  # its __del__ would close again and hit the closed pipe
        ours.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per round (TextWorld)")
    parser.add_argument("--sw-steps", type=int, default=40, help="steps per round (ScienceWorld: ~0.1 s/step)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated, from: " + ", ".join(BACKENDS))
    parser.add_argument("--json-out", default=None, help="write every row (and provenance) to this JSON file")
    args = parser.parse_args()
    backends = args.backends.split(",")
    if set(backends) - set(BACKENDS):
        parser.error(f"unknown backends {sorted(set(backends) - set(BACKENDS))}; choose from {list(BACKENDS)}")
    started = provenance(sys.argv)
    rows = []
    print(f"{'backend':<28} {'steps':>6} {'raw steps/s':>12} {'ours steps/s':>12} {'ours/raw':>9} {'engine share':>13}")
    if "textworld" in backends and not is_installed("textworld"):
        print("TextWorld: skipped (pip install 'agentgym-budget[textworld]')")
    elif "textworld" in backends:
        for challenge in ("cooking", "coin_collector", "treasure_hunter"):
            rows.append(bench_textworld(challenge, args.steps, args.rounds))
    if "scienceworld" in backends and not is_installed("scienceworld"):
        print("ScienceWorld: skipped (pip install 'agentgym-budget[scienceworld]')")
    elif "scienceworld" in backends:
        rows.append(bench_scienceworld("boil", 0, args.sw_steps, max(1, args.rounds // 2)))
    if args.json_out:
        print(f"wrote {write_results(args.json_out, started, {'rows': rows})}")


if __name__ == "__main__":
    main()

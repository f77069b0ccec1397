"""Environment throughput, backends side by side in one run: resets/s and steps/s.

Each backend is one small function ``(workload) -> Figures``; add yours to ``BACKENDS``.
Steps replay a fixed command stream (recorded beforehand from a random admissible/invalid
mix), so the policy's cost is not measured; every step returns the admissible commands.
Figures are wall-clock on whatever machine runs this (other load included), plus steps per
second of the process's own CPU time (the single-core figure when the machine is busy).

ALFWorld rows:
* ``alfworld-fast``: :class:`~agentgym_budget.envs.alfworld.fast.FastAlfredEngine`; resets
  with the compiled-game cache cleared (``cold``: parse + compile) and warm; single-env
  steps; "batched": ``--batch`` engines stepped round-robin in one process (one core).
* ``alfworld-textworld``: the real engine (TextWorld + Fast Downward, extra ``alfworld``),
  on fewer steps (it runs ~8 steps/s); skipped when not installed.
* ``alfworld-env-experts``: the whole :class:`~agentgym_budget.envs.alfworld.env.ALFWorldEnv`
  as Pass@(K,T) evaluation makes it (``expert_plan_horizon=200``) on valid_unseen, played by a
  random policy (admissible commands, episodes of up to 100 turns): every off-plan turn rolls
  both experts out, which costs far more than the engine step.  Reported as CPU-ms per env step.

``--baseline CHECKOUT`` runs the same backends on another checkout's code (in a subprocess,
same workload) and prints its rows first: before/after in one run, under the same load.

``--json-out FILE`` writes every backend's figures with the command, commit and machine load
(``benchmarks/provenance.py``); docs/alfworld-fast.md's speed table is generated from such a file.

Run:
    python benchmarks/env_throughput.py                  # all backends
    python benchmarks/env_throughput.py --backends alfworld-fast --steps 20000
    git worktree add /tmp/main main && python benchmarks/env_throughput.py --backends alfworld-env-experts --baseline /tmp/main
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


@dataclass
class Workload:
    """What every backend runs: games and, per game, a command script."""

    games: list
    scripts: list[list[str]]
    steps: int  # commands to replay for the fast backends
    slow_steps: int  # commands to replay for the real engine
    slow_resets: int
    batch: int
    env_steps: int  # env steps of the random policy for alfworld-env-experts


@dataclass
class Figures:
    """One backend's measurements (``None`` = not measured)."""

    resets_per_s: float | None = None
    cold_resets_per_s: float | None = None
    steps_per_s: float | None = None
    #: steps per second of this process's CPU time: the one-core figure, whatever else runs.
    steps_per_cpu_s: float | None = None
    batched_steps_per_s: float | None = None
    notes: list[str] = field(default_factory=list)


def _replay(engine, workload: Workload, total: int) -> tuple[float, float]:
    """(steps per wall second, steps per CPU second) replaying the scripts (resets not timed)."""
    elapsed = cpu = 0.0
    done = 0
    while done < total:
        for game, script in zip(workload.games, workload.scripts):
            engine.reset(game)
            todo = script[: total - done]
            start, start_cpu = time.perf_counter(), time.process_time()
            for command in todo:
                engine.step(command)
            elapsed += time.perf_counter() - start
            cpu += time.process_time() - start_cpu
            done += len(todo)
            if done >= total:
                break
    return done / elapsed, done / max(cpu, 1e-9)


def alfworld_fast(workload: Workload) -> Figures:
    from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
    from agentgym_budget.envs.alfworld.fast.engine import clear_world_cache

    engine = FastAlfredEngine()
    figures = Figures()
    clear_world_cache()
    start = time.perf_counter()
    for game in workload.games:
        engine.reset(game)
    figures.cold_resets_per_s = len(workload.games) / (time.perf_counter() - start)
    rounds = max(1, 2000 // len(workload.games))
    start = time.perf_counter()
    for _ in range(rounds):
        for game in workload.games:
            engine.reset(game)
    figures.resets_per_s = rounds * len(workload.games) / (time.perf_counter() - start)
    figures.steps_per_s, figures.steps_per_cpu_s = _replay(engine, workload, workload.steps)

    engines = [FastAlfredEngine() for _ in range(workload.batch)]
    scripts = []
    for index, engine_i in enumerate(engines):
        game = workload.games[index % len(workload.games)]
        engine_i.reset(game)
        scripts.append(workload.scripts[index % len(workload.scripts)])
    length = min(len(s) for s in scripts)
    done, elapsed = 0, 0.0
    while done < workload.steps:
        for engine_i, index in zip(engines, range(len(engines))):
            engine_i.reset(workload.games[index % len(workload.games)])
        start = time.perf_counter()
        for t in range(length):
            for engine_i, script in zip(engines, scripts):
                engine_i.step(script[t])
            done += len(engines)
        elapsed += time.perf_counter() - start
    figures.batched_steps_per_s = done / elapsed
    figures.notes.append(f"batched = {workload.batch} engines round-robin, one process")
    return figures


def alfworld_textworld(workload: Workload) -> Figures:
    from agentgym_budget._optional import is_installed

    if not (is_installed("textworld") and is_installed("alfworld") and is_installed("fast_downward")):
        return Figures(notes=["skipped: pip install 'agentgym-budget[alfworld]'"])
    from agentgym_budget.envs.alfworld.textworld_engine import TextWorldAlfredEngine

    engine = TextWorldAlfredEngine()
    figures = Figures()
    games = workload.games[: workload.slow_resets]
    start = time.perf_counter()
    for game in games:
        engine.reset(game)  # a new game each time: load (Fast Downward translation) + reset
    figures.cold_resets_per_s = len(games) / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(2):
        engine.reset(games[-1])  # same game again: PddlEnv.reset still re-translates
    figures.resets_per_s = 2 / (time.perf_counter() - start)
    figures.steps_per_s, figures.steps_per_cpu_s = _replay(engine, workload, workload.slow_steps)
    engine.close()
    return figures


def alfworld_env_experts(workload: Workload) -> Figures:
    """Random admissible play of the env at horizon 200: the steps' CPU time is mostly the experts' rollouts."""
    from agentgym_budget.envs.alfworld.env import ALFWorldEnv

    env = ALFWorldEnv(split="valid_unseen", expert_plan_horizon=200)
    rng, done, episode = random.Random(0), 0, 0
    elapsed = cpu = 0.0
    while done < workload.env_steps:
        _, info = env.reset(seed=episode)
        episode += 1
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(min(100, workload.env_steps - done)):
            _, _, terminated, _, info = env.step(rng.choice(info["admissible_commands"]))
            done += 1
            if terminated:
                break
        elapsed += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
    figures = Figures(steps_per_s=done / elapsed, steps_per_cpu_s=done / max(cpu, 1e-9))
    figures.notes.append(f"{1000 * cpu / done:.2f} CPU-ms/step: random policy, horizon 200, {done} steps")
    return figures


#: Backend name -> function; other families add theirs here.
BACKENDS: dict[str, Callable[[Workload], Figures]] = {
    "alfworld-fast": alfworld_fast,
    "alfworld-textworld": alfworld_textworld,
    "alfworld-env-experts": alfworld_env_experts,
}
#: Ratios printed at the end: (name, numerator backend, denominator backend).
RATIOS = (("alfworld fast / textworld", "alfworld-fast", "alfworld-textworld"),)


def alfworld_workload(args: argparse.Namespace) -> Workload:
    from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
    from tools.alfworld.differential import next_command
    from tools.alfworld.fuzz import fuzz_game

    try:
        from agentgym_budget.envs.alfworld.game import load_games

        games = load_games("valid_seen")[: args.games]
    except (FileNotFoundError, OSError):
        games = []
    if not games:  # no bundled games yet: random edge-case games
        games = [fuzz_game(random.Random(i), index=i) for i in range(args.games)]
    rng = random.Random(args.seed)
    engine, scripts = FastAlfredEngine(), []
    for game in games:
        step, script = engine.reset(game), []
        names = sorted(n for n in engine.world.names.values() if not n.endswith(" "))
        for _ in range(args.script_length):
            command = next_command(rng, step.admissible_commands, names)
            script.append(command)
            step = engine.step(command)
        scripts.append(script)
    return Workload(games, scripts, args.steps, args.slow_steps, args.slow_resets, args.batch, args.env_steps)


def _baseline_results(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Figures]:
    """The backends' figures on ``args.baseline``'s code, keyed ``"<backend> (baseline)"``."""
    given = sys.argv[1:] if argv is None else argv
    at = next(i for i, a in enumerate(given) if a.startswith("--baseline"))
    forwarded = given[:at] + given[at + (1 if "=" in given[at] else 2):] + ["--code", args.baseline, "--json"]
    done = subprocess.run([sys.executable, __file__, *forwarded], capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"the baseline run on {args.baseline} failed: {last}")
    figures = json.loads(done.stdout.splitlines()[-1])
    return {f"{name} (baseline)": Figures(**values) for name, values in figures.items()}


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if value >= 10 else f"{value:.3f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="*", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--games", type=int, default=20)
    parser.add_argument("--script-length", type=int, default=100)
    parser.add_argument("--steps", type=int, default=20_000, help="steps replayed by fast backends")
    parser.add_argument("--slow-steps", type=int, default=150, help="steps replayed by the real engine")
    parser.add_argument("--slow-resets", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--env-steps", type=int, default=2400, help="env steps of alfworld-env-experts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline", metavar="CHECKOUT", help="also run the backends on this checkout's code, rows first")
    parser.add_argument("--code", metavar="CHECKOUT", help=argparse.SUPPRESS)  # --baseline's subprocess: whose code
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # --baseline's subprocess: figures out
    parser.add_argument("--json-out", default=None, help="write every backend's figures (and provenance) to this JSON file")
    args = parser.parse_args(argv)  # before textworld: fast_downward.pddl2sas overwrites sys.argv
    started = _provenance(argv)
    for checkout in (args.baseline, args.code):
        if checkout and not (Path(checkout) / "agentgym_budget").is_dir():
            parser.error(f"{checkout} is not a checkout of this project (no agentgym_budget/ in it)")
    if args.code:
        sys.path.insert(0, str(Path(args.code).resolve()))  # before anything imports agentgym_budget

    results = _baseline_results(args, argv) if args.baseline else {}
    workload = alfworld_workload(args)
    if not args.json:
        print(f"workload: {len(workload.games)} games, scripts of {args.script_length} commands; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    results.update({name: BACKENDS[name](workload) for name in args.backends})
    if args.json:
        print(json.dumps({name: dataclasses.asdict(f) for name, f in results.items()}))
        return
    header = (f"{'backend':<32}{'resets/s warm':>15}{'resets/s cold':>15}{'steps/s':>12}{'steps/cpu-s':>13}"
              f"{'batched steps/s':>17}")
    print(header)
    print("-" * len(header))
    for name, f in results.items():
        print(f"{name:<32}{_fmt(f.resets_per_s):>15}{_fmt(f.cold_resets_per_s):>15}{_fmt(f.steps_per_s):>12}"
              f"{_fmt(f.steps_per_cpu_s):>13}{_fmt(f.batched_steps_per_s):>17}  {'; '.join(f.notes)}")
    for label, top, bottom in RATIOS:
        if top in results and bottom in results and results[bottom].steps_per_s:
            a, b = results[top], results[bottom]
            print(f"{label}: steps x{a.steps_per_s / b.steps_per_s:,.0f} (wall) / x{a.steps_per_cpu_s / b.steps_per_cpu_s:,.0f} (cpu), "
                  f"resets x{a.resets_per_s / b.resets_per_s:,.0f} (warm) / x{a.cold_resets_per_s / b.cold_resets_per_s:,.0f} (cold)")
    if args.json_out:
        from benchmarks.provenance import write_results

        settings = {key: getattr(args, key) for key in ("games", "script_length", "steps", "slow_steps", "slow_resets",
                                                         "batch", "env_steps", "seed")}
        figures = {name: dataclasses.asdict(f) for name, f in results.items()}
        print(f"wrote {write_results(args.json_out, started, {'settings': settings, 'backends': figures})}")


def _provenance(argv: list[str] | None) -> dict:
    """``benchmarks/provenance.py``'s record of this run (the checkout's root put on the path for it)."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.append(root)
    from benchmarks.provenance import provenance

    return provenance([sys.argv[0], *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()

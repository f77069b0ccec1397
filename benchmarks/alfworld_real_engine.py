"""Steps/s of ALFWorld's real engine: upstream's stack raw vs through ``ALFWorldEnv(engine="textworld")``.

"Raw" is what upstream ``AlfredTWEnv`` runs per game: ``textworld.start`` on a ``game.tw-pddl``
file with ``AlfredDemangler`` + ``AlfredInfos``, asking for ``won`` and ``admissible_commands``
(no gym batching layer).  "Ours" is ``ALFWorldEnv`` on the same engine, which adds the
handcoded expert's action and the info dict every step.  Both play the same games with the
same commands (each game's walkthrough, padded with ``look``), alternating game by game so
that machine load hits both alike.  Target: ours/raw >= 0.9 for steps/s.  On a loaded
machine the side-by-side ratio is noisy; the engine's share of our step time (measured in
the same steps) is the load-robust figure for our overhead.

Usage (needs the ``alfworld`` extra)::

    python benchmarks/alfworld_real_engine.py --games 4 --steps 20
    python benchmarks/alfworld_real_engine.py --games 3 --steps 10 --pick spread --json-out FILE

``--pick spread`` takes games from the smallest PDDL problem to the largest (reset times grow with
it: Fast Downward translates the problem at every reset); ``--json-out`` writes every game's
reset and step seconds with the command, commit and machine load (``benchmarks/provenance.py``);
docs/alfworld.md's real-engine table is generated from that file.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from agentgym_budget.envs.alfworld.env import ALFWorldEnv
from agentgym_budget.envs.alfworld.game import AlfredGame


def commands_for(game: AlfredGame, steps: int) -> list[str]:
    walkthrough = list(game.walkthrough or [])[: steps - 1]
    return walkthrough[:-1] + ["look"] * (steps - len(walkthrough[:-1]))  # never the winning move


def raw_episode(game: AlfredGame, commands: list[str], folder: Path) -> tuple[float, float]:
    """(reset seconds, step seconds) on upstream's stack."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    path = folder / "game.tw-pddl"
    path.write_text(json.dumps(game.to_tw_pddl()))
    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    start = time.perf_counter()
    env = textworld.start(str(path), infos, wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])
    env.reset()
    reset_s = time.perf_counter() - start
    start = time.perf_counter()
    for command in commands:
        env.step(command)
    step_s = time.perf_counter() - start
    env.close()
    return reset_s, step_s


class TimedEngine:
    """Wraps the env's engine to add up the seconds spent inside ``engine.step``."""

    def __init__(self, engine) -> None:
        self.engine, self.step_s = engine, 0.0

    def __getattr__(self, name: str):
        return getattr(self.engine, name)

    def step(self, command: str):
        start = time.perf_counter()
        result = self.engine.step(command)
        self.step_s += time.perf_counter() - start
        return result


def our_episode(env: ALFWorldEnv, index: int, commands: list[str]) -> tuple[float, float]:
    """(reset seconds, step seconds) through ALFWorldEnv; a fresh game each time, as above."""
    env.engine.close()  # forget the loaded game: the next reset loads it again, like the raw side
    start = time.perf_counter()
    env.reset(options={"task": index})
    reset_s = time.perf_counter() - start
    start = time.perf_counter()
    for command in commands:
        env.step(command)
    step_s = time.perf_counter() - start
    return reset_s, step_s


def pick_games(env: ALFWorldEnv, count: int, how: str) -> list[int]:
    """``count`` game indices by PDDL problem size: the smallest ones, or spread from the smallest to the largest.

    Fast Downward's translation at reset grows with the problem, so ``spread`` shows the range of reset times.
    """
    by_size = sorted(range(len(env.games)), key=lambda i: len(env.games[i].pddl_problem))
    if how == "smallest" or count >= len(by_size):
        return by_size[:count]
    if count == 1:
        return [by_size[0]]
    return [by_size[round(k * (len(by_size) - 1) / (count - 1))] for k in range(count)]


def main() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
    from benchmarks.provenance import provenance, write_results

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="valid_seen")
    parser.add_argument("--games", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--pick", choices=("smallest", "spread"), default="smallest",
                        help="the smallest games (the default), or games spread over problem size (reset times)")
    parser.add_argument("--json-out", default=None, help="write every game's figures (and provenance) to this JSON file")
    args = parser.parse_args()
    started = provenance(sys.argv)
    env = ALFWorldEnv(split=args.split, engine="textworld")
    env.engine = timed = TimedEngine(env.engine)
    indices = pick_games(env, args.games, args.pick)
    totals = {"raw": [0.0, 0.0], "ours": [0.0, 0.0]}
    games = []
    with tempfile.TemporaryDirectory() as folder:
        for index in indices:
            commands = commands_for(env.games[index], args.steps)
            game = env.games[index]
            row = {"index": index, "id": game.id, "pddl_chars": len(game.pddl_problem), "steps": len(commands)}
            for side, (reset_s, step_s) in (
                ("raw", raw_episode(game, commands, Path(folder))),
                ("ours", our_episode(env, index, commands)),
            ):
                totals[side][0] += reset_s
                totals[side][1] += step_s
                row[side] = {"reset_s": round(reset_s, 4), "step_s": round(step_s, 4)}
            games.append(row)
    n_steps = len(indices) * args.steps
    print(f"ALFWorld real engine, {len(indices)} games x {args.steps} steps ({args.split})")
    print(f"{'':>6} {'reset s/game':>13} {'steps/s':>9}")
    for side, (reset_s, step_s) in totals.items():
        print(f"{side:>6} {reset_s / len(indices):>13.2f} {n_steps / step_s:>9.2f}")
    ratio = (n_steps / totals["ours"][1]) / (n_steps / totals["raw"][1])
    print(f"ours/raw steps/s ratio: {ratio:.2f} (target >= 0.9; noisy when the machine is loaded)")
    # Load-robust: within our own steps, the share of time spent in the engine (1.0 = no overhead).
    share = timed.step_s / totals["ours"][1]
    print(f"engine share of our step time: {share:.3f} (the ratio without load noise)")
    env.close()
    if args.json_out:
        results = {"split": args.split, "pick": args.pick, "steps_per_game": args.steps, "games": games,
                   "raw_steps_per_s": n_steps / totals["raw"][1], "ours_steps_per_s": n_steps / totals["ours"][1],
                   "ours_over_raw": ratio, "engine_share": share}
        print(f"wrote {write_results(args.json_out, started, results)}")

if __name__ == "__main__":
    main()

"""Differential check of the fast ALFWorld engine against the real one (TextWorld + Fast Downward).

Every episode resets both engines on the same game and plays the same commands — the
handcoded expert's, the expert's with random detours, or random admissible and inadmissible
strings (see :mod:`agentgym_budget.envs.alfworld.fast.differential`) — and compares, at every
step, the observation text, the admissible commands (order included), ``won`` (the reward is
derived from it) and the expert's next action.  Games: every bundled ``valid_seen`` and
``valid_unseen`` game, a sample of ``train``, and random edge-case games
(:mod:`agentgym_budget.envs.alfworld.fast.fuzz`).  It prints the number of compared steps and
every mismatch; the real engine runs ~8 steps/s, so use ``--time-limit`` and run it in the
background for big runs.

Run (needs the ``alfworld`` extra):
    python benchmarks/alfworld_equivalence.py --time-limit 600                 # ten minutes
    nohup python benchmarks/alfworld_equivalence.py --train 500 --fuzz 500 --episodes 3 > eq.log &
    python benchmarks/alfworld_equivalence.py --fuzz 4 --steps 40 --golden tests/data/alfworld_fast_golden.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval", choices=("all", "none"), default="all", help="bundled valid_seen + valid_unseen games")
    parser.add_argument("--train", type=int, default=100, help="number of bundled train games (random sample)")
    parser.add_argument("--fuzz", type=int, default=100, help="number of random edge-case games")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per game (different modes / seeds)")
    parser.add_argument("--steps", type=int, default=60, help="commands per episode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=None, help="stop starting new episodes after this many seconds")
    parser.add_argument("--progress", type=float, default=60.0, help="seconds between progress lines")
    parser.add_argument("--report", type=Path, default=None, help="write a JSON summary here")
    parser.add_argument("--golden", type=Path, default=None, help="write the reference transcripts here (.json.gz)")
    return parser.parse_args(argv)


def _games(args: argparse.Namespace) -> list:
    from agentgym_budget.envs.alfworld.fast.fuzz import fuzz_game
    from agentgym_budget.envs.alfworld.game import load_games

    rng = random.Random(args.seed)
    games = []
    if args.eval == "all":
        games += load_games("valid_seen") + load_games("valid_unseen")
    if args.train:
        train = load_games("train")
        games += rng.sample(train, min(args.train, len(train)))
    games += [fuzz_game(random.Random(f"fuzz-{args.seed}-{i}"), index=i) for i in range(args.fuzz)]
    return games


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)  # before textworld: fast_downward.pddl2sas overwrites sys.argv
    from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
    from agentgym_budget.envs.alfworld.fast.differential import MODES, compare_episode
    from agentgym_budget.envs.alfworld.textworld_engine import TextWorldAlfredEngine

    games = _games(args)
    reference, candidate = TextWorldAlfredEngine(), FastAlfredEngine()
    rng = random.Random(args.seed)
    start = time.perf_counter()
    steps = episodes = reference_errors = 0
    mismatches: list[str] = []
    per_split: dict[str, int] = {}
    golden: list[dict] = []
    print(f"{len(games)} games x {args.episodes} episodes x <= {args.steps} commands", flush=True)
    stopped = False
    last_progress = 0.0
    games_played: set[int] = set()
    for game_index, game in enumerate(games):
        for episode in range(args.episodes):
            if args.time_limit is not None and time.perf_counter() - start > args.time_limit:
                stopped = True
                break
            mode = MODES[(game_index + episode) % len(MODES)]
            try:
                report = compare_episode(
                    reference, candidate, game, random.Random(rng.randrange(2**63)), steps=args.steps, mode=mode,
                    record=args.golden is not None,
                )
            except Exception as error:  # the real engine fails on some games (e.g. KeyError 'val1')
                reference_errors += 1
                print(f"reference error on {game.id}: {error!r}", flush=True)
                reference = TextWorldAlfredEngine()
                continue
            episodes += 1
            games_played.add(game_index)
            steps += report.steps
            per_split[game.split] = per_split.get(game.split, 0) + report.steps
            for mismatch in report.mismatches:
                mismatches.append(str(mismatch))
                print(f"MISMATCH {mismatch}", flush=True)
            if args.golden is not None:
                golden.append({"game": game.to_record(), "mode": mode, "transcript": report.transcript})
        if stopped:
            break
        if time.perf_counter() - start - last_progress > args.progress:
            last_progress = elapsed = time.perf_counter() - start
            print(f"[{elapsed:7.0f}s] games {len(games_played)}/{len(games)}  episodes {episodes}  steps {steps}  "
                  f"mismatches {len(mismatches)}", flush=True)
    elapsed = time.perf_counter() - start
    summary = {
        "games": len(games_played),
        "episodes": episodes,
        "steps_compared": steps,
        "steps_by_split": per_split,
        "mismatches": len(mismatches),
        "reference_errors": reference_errors,
        "seconds": round(elapsed, 1),
        "stopped_by_time_limit": stopped,
    }
    print(json.dumps(summary, indent=2), flush=True)
    if args.report is not None:
        args.report.write_text(json.dumps({**summary, "mismatch_details": mismatches}, indent=2))
    if args.golden is not None:
        args.golden.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(args.golden, "wt", encoding="utf-8") as handle:
            json.dump(golden, handle)
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())

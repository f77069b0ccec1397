"""Differential check of the fast ALFWorld engine against the real one (TextWorld + Fast Downward).

Every episode resets both engines on the same game and plays the same commands — the
handcoded expert's, the expert's with random detours, or random admissible and inadmissible
strings (see :mod:`tools.alfworld.differential`) — and compares, at every
step, the observation text, the admissible commands (order included), ``won`` (the reward is
derived from it) and the expert's next action: ours in upstream mode (what ``ALFWorldEnv``
reports as ``expert_action`` by default) against upstream's own ``AlfredExpert(handcoded)``
``extra.expert_plan[0]`` on the real engine (:mod:`tools.alfworld.upstream_expert`;
``--no-upstream-expert``: ours on both streams, a little faster).  Games: every bundled ``valid_seen`` and
``valid_unseen`` game, a sample of ``train``, and random edge-case games
(:mod:`tools.alfworld.fuzz`).  It prints the number of compared steps and
every mismatch.  Where the experts part in a pick-two state with two or more target objects
already in goal-type receptacles, upstream's own choice may depend on Python's hash seed
(TextWorld's fact sets): upstream's expert is replayed there under other ``PYTHONHASHSEED``
values (:func:`tools.alfworld.differential.check_hash_order_tie`, ~10 s a replay), and only if one
picks our action does the episode stop as a hash-order tie; otherwise it is a mismatch.  The
real engine is the bottleneck: ~8 steps/s as users get it, ~35 steps/s
per core here with TextWorld's parsers memoized (:func:`~agentgym_budget.envs.alfworld.
textworld_engine.memoize_textworld_parsers`, same output; ``--no-memo`` turns it off).

Run (needs the ``alfworld`` extra):
    python benchmarks/alfworld_equivalence.py --time-limit 600                 # ten minutes
    # every eval game, 250 train games, 100 edge-case games: ~124k steps, ~30 min on 2 idle cores
    python benchmarks/alfworld_equivalence.py --train 250 --fuzz 100 --steps 100 --workers 2
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
    parser.add_argument("--workers", type=int, default=1, help="processes (each runs both engines on a share of the games)")
    parser.add_argument("--progress", type=float, default=60.0, help="seconds between progress lines")
    parser.add_argument("--report", type=Path, default=None, help="write a JSON summary here")
    parser.add_argument("--no-memo", action="store_true",
                        help="run the real engine without memoized TextWorld parsers (same output, ~2x slower)")
    parser.add_argument("--golden", type=Path, default=None, help="write the reference transcripts here (.json.gz)")
    parser.add_argument("--no-upstream-expert", action="store_true",
                        help="compare our expert on both engines instead of against upstream's AlfredExpert")
    parser.add_argument("--empty-rate", type=float, default=0.05,
                        help="share of random commands that are empty (AlfredExpert answers those with 'look')")
    return parser.parse_args(argv)


def _games(args: argparse.Namespace) -> list:
    from tools.alfworld.fuzz import fuzz_game
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


def _episodes(args: argparse.Namespace, games: list, shard: int):
    """``(game_index, game, episode, mode, episode_seed)`` of a shard, in order: a run's episodes are
    these whatever happens in them (``benchmarks/alfworld_tie_recheck.py`` rebuilds them so)."""
    from tools.alfworld.differential import MODES

    rng = random.Random(f"{args.seed}-{shard}")
    for game_index, game in enumerate(games):
        for episode in range(args.episodes):
            yield game_index, game, episode, MODES[(game_index + episode) % len(MODES)], rng.randrange(2**63)


def _shards(args: argparse.Namespace, games: list) -> list[list]:
    return [games[i :: args.workers] for i in range(args.workers)]


def _run_shard(args: argparse.Namespace, games: list, shard: int) -> dict:
    """Compare the engines on ``games`` (one process); returns counts, mismatches, transcripts."""
    from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
    from tools.alfworld.differential import compare_episode, with_empty_commands
    from tools.alfworld.upstream_expert import UpstreamExpertEngine
    from agentgym_budget.envs.alfworld.textworld_engine import TextWorldAlfredEngine, memoize_textworld_parsers

    if not args.no_memo:
        memoize_textworld_parsers()
    make_reference = TextWorldAlfredEngine if args.no_upstream_expert else UpstreamExpertEngine
    reference, candidate = make_reference(), FastAlfredEngine()
    choose = with_empty_commands(args.empty_rate)
    start = time.perf_counter()
    out: dict = {"steps": 0, "episodes": 0, "reference_errors": 0, "mismatches": [], "per_split": {},
                 "empty_commands": 0, "upstream_expert_errors": 0, "hash_order_ties": [], "tie_checks": [],
                 "games": 0, "stopped": False, "golden": []}
    last_progress = 0.0
    played: set[int] = set()
    for game_index, game, episode, mode, episode_seed in _episodes(args, games, shard):
        if args.time_limit is not None and time.perf_counter() - start > args.time_limit:
            out["stopped"] = True
            break
        try:
            report = compare_episode(
                reference, candidate, game, random.Random(episode_seed), steps=args.steps, mode=mode,
                record=args.golden is not None, choose=choose,
            )
        except Exception as error:  # the real engine fails on some games (e.g. KeyError 'val1')
            out["reference_errors"] += 1
            print(f"[shard {shard}] reference error on {game.id}: {error!r}", flush=True)
            reference = make_reference()
            continue
        played.add(game_index)
        out["episodes"] += 1
        out["steps"] += report.steps
        out["empty_commands"] += report.commands.count("")
        out["upstream_expert_errors"] += report.upstream_expert_error is not None
        out["per_split"][game.split] = out["per_split"].get(game.split, 0) + report.steps
        for mismatch in report.mismatches:
            out["mismatches"].append(str(mismatch))
            print(f"[shard {shard}] MISMATCH {mismatch}", flush=True)
        if report.tie_check is not None:  # a parting where upstream's pick may be hash-ordered, checked
            out["tie_checks"].append({"game": game.id, "episode": episode, "mode": mode,
                                      "confirmed": report.tie_check.confirmed, "check": str(report.tie_check)})
        if report.hash_order_tie is not None:
            out["hash_order_ties"].append(str(report.hash_order_tie))
            print(f"[shard {shard}] hash-order tie (not a mismatch: {report.tie_check}) {report.hash_order_tie}",
                  flush=True)
        if args.golden is not None:
            out["golden"].append({"game": game.to_record(), "mode": mode, "transcript": report.transcript,
                                  "expert_seed": report.expert_seed, "expert_actions": report.expert_actions})
        out["games"] = len(played)
        if time.perf_counter() - start - last_progress > args.progress:
            last_progress = elapsed = time.perf_counter() - start
            print(f"[shard {shard} {elapsed:7.0f}s] games {out['games']}/{len(games)}  episodes {out['episodes']}  "
                  f"steps {out['steps']}  mismatches {len(out['mismatches'])}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)  # before textworld: fast_downward.pddl2sas overwrites sys.argv
    games = _games(args)
    print(f"{len(games)} games x {args.episodes} episodes x <= {args.steps} commands, {args.workers} worker(s)",
          flush=True)
    start = time.perf_counter()
    shards = _shards(args, games)
    if args.workers == 1:
        results = [_run_shard(args, games, 0)]
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.workers) as pool:
            results = list(pool.map(_run_shard, [args] * args.workers, shards, range(args.workers)))
    per_split: dict[str, int] = {}
    for result in results:
        for split, count in result["per_split"].items():
            per_split[split] = per_split.get(split, 0) + count
    mismatches = [m for result in results for m in result["mismatches"]]
    summary = {
        "games": sum(r["games"] for r in results),
        "episodes": sum(r["episodes"] for r in results),
        "steps_compared": sum(r["steps"] for r in results),
        "steps_by_split": per_split,
        "expert_reference": "ours" if args.no_upstream_expert else "upstream AlfredExpert(handcoded)",
        "empty_commands": sum(r["empty_commands"] for r in results),
        "episodes_ended_by_upstream_expert_error": sum(r["upstream_expert_errors"] for r in results),
        "mismatches": len(mismatches),
        # expert actions that parted where upstream's own pick depends on Python's hash seed
        "episodes_ended_by_hash_order_tie": sum(len(r["hash_order_ties"]) for r in results),
        "reference_errors": sum(r["reference_errors"] for r in results),
        "seconds": round(time.perf_counter() - start, 1),
        "memoized_parsers": not args.no_memo,
        "stopped_by_time_limit": any(r["stopped"] for r in results),
    }
    print(json.dumps(summary, indent=2), flush=True)
    if args.report is not None:
        ties = [t for r in results for t in r["hash_order_ties"]]
        checks = [c for r in results for c in r["tie_checks"]]
        args.report.write_text(json.dumps({**summary, "mismatch_details": mismatches, "hash_order_tie_details": ties,
                                           "hash_order_tie_checks": checks}, indent=2))
    if args.golden is not None:
        args.golden.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(args.golden, "wt", encoding="utf-8") as handle:
            json.dump([g for r in results for g in r["golden"]], handle)
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())

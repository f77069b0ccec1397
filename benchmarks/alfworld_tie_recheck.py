"""Check the hash-order ties that earlier differential runs excused: is upstream's pick there really hash-ordered?

``benchmarks/alfworld_equivalence.py`` once excused, unchecked, every parting of the experts in a
pick-two state with two or more targets already placed, as a "hash-order tie" (upstream takes
"the" placed object from TextWorld's fact sets, whose order follows ``PYTHONHASHSEED``).  It now
checks each one as it happens (:func:`tools.alfworld.differential.check_hash_order_tie`); this
script applies the same check to the ties in the reports of the runs made before (the runs of
``docs/alfworld-fast.md``, ``docs/data/alfworld-equivalence-v2/``).

For each tie it rebuilds the episode without the real engine: the run's games, shards and episode
seeds (the benchmark's own ``_episodes``), then the episode on the fast engine with our expert on
both sides (up to the tie the engines were equal and the experts agreed, so the commands are the
run's).  The edge-case games depend on the generating process's ``PYTHONHASHSEED``
(``tools/alfworld/fuzz.py`` draws while iterating sets), which a run does not record: they are
rebuilt under hash seeds 0, 1, ... until one gives the report's episode — the tie at the same
step, after the same command, with the same action of ours, and every other tie of that game
too.  (That identifies the episode up to the step, not the whole game: a game differing in what
the expert has not reached yet can match.)  Then it replays upstream's expert on the real engine
under ``PYTHONHASHSEED`` 1, 2, ... (a fresh process each) until one has chosen our action and
another the action upstream chose in the run.  A tie is confirmed when both come back (upstream
itself picks either way there); otherwise it was a mismatch.

Run (needs the ``alfworld`` extra; ~10 s per replay on a loaded 2-core machine):
    python benchmarks/alfworld_tie_recheck.py --out docs/data/alfworld-equivalence-v2/tie-recheck.json
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from benchmarks.alfworld_equivalence import _arguments, _episodes, _games, _shards  # noqa: E402
from benchmarks.provenance import provenance  # noqa: E402

DATA = ROOT / "docs" / "data" / "alfworld-equivalence-v2"
#: report -> the benchmark arguments of its run (as docs/alfworld-fast.md gives them)
RUNS = {
    "run1.json": "--train 250 --fuzz 100 --steps 100 --workers 2 --time-limit 2400",
    "run2.json": "--eval none --train 250 --fuzz 100 --steps 100 --workers 2 --seed 1 --time-limit 1500",
    "run3.json": "--eval none --train 0 --fuzz 100 --steps 100 --workers 1 --seed 2",
    "run4-after-speedup.json": "--eval none --train 40 --fuzz 60 --steps 100 --workers 1 --seed 7 --time-limit 900",
}
_TIE = re.compile(r"^(?P<game>\S+) step (?P<step>\d+) after (?P<command>.*): expert_action differs\n"
                  r"  reference: (?P<upstream>.*)\n  candidate: (?P<ours>.*)$")


def parse_tie(detail: str) -> dict:
    """A tie as :class:`~tools.alfworld.differential.Mismatch` wrote it: game, step, command, both actions."""
    match = _TIE.match(detail)
    if match is None:
        raise ValueError(f"not a tie detail: {detail!r}")
    return {"game": match["game"], "step": int(match["step"]), "command": ast.literal_eval(match["command"]),
            "upstream": ast.literal_eval(match["upstream"]), "ours": ast.literal_eval(match["ours"])}


def rebuild(run_args: list[str], ties: list[dict]) -> list[dict]:
    """Each tie's episode (game, expert seed, commands up to the tie, observation there), checked against the tie."""
    from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
    from tools.alfworld.differential import compare_episode, with_empty_commands

    args = _arguments(run_args)
    wanted = {tie["game"] for tie in ties}
    found: list[dict] = []
    for shard, games in enumerate(_shards(args, _games(args))):
        for _, game, episode, mode, episode_seed in _episodes(args, games, shard):
            if game.id not in wanted:
                continue
            report = compare_episode(FastAlfredEngine(), FastAlfredEngine(), game, random.Random(episode_seed),
                                     steps=args.steps, mode=mode, choose=with_empty_commands(args.empty_rate),
                                     record=True, tie_hash_seeds=())
            for tie in ties:
                step = tie["step"]
                if (tie["game"] == game.id and step < len(report.expert_actions)
                        and report.commands[step - 1] == tie["command"] and report.expert_actions[step] == tie["ours"]):
                    found.append({**tie, "episode": episode, "mode": mode, "game_obj": game,
                                  "expert_seed": report.expert_seed, "commands": report.commands[:step],
                                  "observation": report.transcript[step][1]})
    return found


def _rebuild_under(hash_seed: int, name: str) -> list[dict]:
    """:func:`rebuild` of report ``name``'s ties in a process with ``PYTHONHASHSEED=hash_seed``."""
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--rebuild-only", "--reports", name], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": str(hash_seed)}, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"rebuilding the ties of {name} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ties(name: str) -> list[dict]:
    return [parse_tie(d) for d in json.loads((DATA / name).read_text())["hash_order_tie_details"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", nargs="*", default=list(RUNS), help="report files in docs/data/alfworld-equivalence-v2")
    parser.add_argument("--hash-seeds", type=int, default=12,
                        help="PYTHONHASHSEED 1..N are tried, until ours and the run's upstream action have both come back")
    parser.add_argument("--generator-hash-seeds", type=int, default=64,
                        help="PYTHONHASHSEED 0..N-1 are tried for rebuilding the games (the edge-case generator "
                             "depends on it), until every tie's episode is found")
    parser.add_argument("--rebuild-only", action="store_true", help=argparse.SUPPRESS)  # one report, JSON out
    parser.add_argument("--out", type=Path, default=None, help="write the results here (JSON)")
    command = list(sys.argv) if argv is None else ["benchmarks/alfworld_tie_recheck.py", *argv]
    args = parser.parse_args(argv)
    if args.rebuild_only:
        [name] = args.reports
        found = rebuild(shlex.split(RUNS[name]), _ties(name))
        print(json.dumps([{**e, "game_obj": e["game_obj"].to_record()} for e in found]))
        return 0
    from agentgym_budget.envs.alfworld.game import AlfredGame
    from tools.alfworld.differential import check_hash_order_tie

    start = time.perf_counter()
    results = []
    for name in args.reports:
        ties = _ties(name)
        episodes: dict[tuple[str, int], dict] = {}
        for generator_seed in range(args.generator_hash_seeds):
            if len(episodes) == len(ties):
                break
            rebuilt = _rebuild_under(generator_seed, name)
            for episode in rebuilt:
                # a game whose episodes hold several ties is the run's only where it gives them all
                if {(e["step"], e["command"]) for e in rebuilt if e["game"] == episode["game"]} == {
                        (t["step"], t["command"]) for t in ties if t["game"] == episode["game"]}:
                    episodes.setdefault((episode["game"], episode["step"]), {**episode, "generator_hash_seed": generator_seed})
        for tie in ties:
            row = {"report": name, "run": RUNS[name], **tie}
            episode = episodes.get((tie["game"], tie["step"]))
            if episode is None:
                row.update(rebuilt=False, confirmed=None)  # not found: cannot be checked
                print(f"{name}: {tie['game']} step {tie['step']}: episode NOT rebuilt", flush=True)
                results.append(row)
                continue
            check = check_hash_order_tie(AlfredGame.from_record(episode["game_obj"]), episode["expert_seed"],
                                         episode["commands"], tie["ours"], episode["observation"],
                                         range(1, args.hash_seeds + 1), theirs=tie["upstream"])
            row.update(rebuilt=True, generator_hash_seed=episode["generator_hash_seed"], episode=episode["episode"],
                       mode=episode["mode"], expert_seed=episode["expert_seed"],
                       upstream_by_hash_seed={str(k): v for k, v in check.choices.items()},
                       upstream_changes=len(set(check.choices.values())) > 1,
                       confirmed=check.confirmed)
            print(f"{name}: {tie['game']} step {tie['step']}: {'CONFIRMED' if check.confirmed else 'NOT confirmed'} "
                  f"({check})", flush=True)
            results.append(row)
    early = [r for r in results if r["report"] != "run4-after-speedup.json"]
    summary = {"ties": len(results), "rebuilt": sum(bool(r["rebuilt"]) for r in results),
               "confirmed": sum(bool(r["confirmed"]) for r in results),
               "ties_in_runs_1_to_3": len(early), "confirmed_in_runs_1_to_3": sum(bool(r["confirmed"]) for r in early),
               "seconds": round(time.perf_counter() - start, 1)}
    print(json.dumps(summary, indent=2), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps({"provenance": provenance(command), **summary, "ties": results}, indent=2) + "\n")
    return 0 if summary["confirmed"] == summary["ties"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The rows before RL of the SmolLM2 KeyDoorRooms study: held-out Pass@(K,T) and behaviour of a model.

One row = one ``agentgym-budget eval`` of a model on KeyDoorRooms ``test`` (held out: the SFT start is
made on ``train``) with the SmolLM2 RL recipe's policy (short prompt, ``history=actions``, two turns
shown, 10 new tokens, temperature 1), its probe states (``--probes``: single-step quality) in the same
run, then one results file ``<out>/<row>.json`` with :func:`provenance.write_results`::

    held-out Pass@(K,T) with the evaluator's bootstrap CI      (passkt.json)
    behaviour: decision quality, error recovery, resilience    (passkt.json "metrics", per-task terms left out)
    probes: agreement and success-to-go at the probe states    (probes.json "summary")
    sft: the SFT folder's sft.json summary (when --model is one), eval_cpu_seconds

Run (the committed rows; ``experiments/smollm2_rooms/README.md``)::

    python benchmarks/smollm2_rooms_rows.py --row base --model smollm2 --tasks 32
    python benchmarks/smollm2_rooms_rows.py --row sft --model runs/smollm2-rooms/sft
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.provenance import provenance, write_results  # noqa: E402

#: The SmolLM2 RL recipe's policy (docs/data/smollm2-rl/long/seed1/results.json settings), as ``hf`` options.
RECIPE_POLICY = {"temperature": "1.0", "max_new_tokens": "10", "prompt": "short", "history": "actions",
                 "max_turns_shown": "2", "max_prompt_tokens": "1024"}
#: Where the study's tasks come from: never the split the SFT start (and RL) trains on.
ENV_ID, SPLIT = "KeyDoorRooms-Budget-v0", "test"


def eval_argv(model: str, out: Path, tasks: int, attempts: int, ks: str, ts: str, probes: int, seed: int) -> list[str]:
    """The ``agentgym-budget eval`` arguments of one row."""
    policy_args = [arg for key, value in {"model": model, **RECIPE_POLICY}.items()
                   for arg in ("--policy-arg", f"{key}={value}")]
    return ["eval", "--env", ENV_ID, "--env-arg", f"split={SPLIT}", "--policy", "hf", *policy_args,
            "--tasks", str(tasks), "--attempts", str(attempts), "--k", ks, "--t", ts, "--seed", str(seed),
            "--concurrency", "32", "--probes", str(probes), "--no-plots", "--no-progress", "--overwrite",
            "--out", str(out)]


def row_facts(folder: Path, model: str) -> dict:
    """What the row file keeps of an eval folder: cells, behaviour metrics without per-task terms, probes."""
    passkt = json.loads((folder / "passkt.json").read_text())
    cells = {f"K={k},T={t}": {"pass": passkt["pass"][i][j], "ci95": [passkt["ci_low"][i][j], passkt["ci_high"][i][j]]}
             for i, k in enumerate(passkt["ks"]) for j, t in enumerate(passkt["ts"])}
    metrics = {key: value for key, value in passkt["metrics"].items() if key != "per_task"}
    facts = {"env_id": passkt["env_id"], "split": SPLIT, "held_out": True, "tasks": passkt["tasks"],
             "attempts": passkt["attempts"], "ks": passkt["ks"], "ts": passkt["ts"], "mode": passkt["mode"],
             "pass_kt": cells, "behaviour": metrics, "timing": passkt.get("timing")}
    probes = folder / "probes.json"
    if probes.is_file():
        outcome = json.loads(probes.read_text())
        facts["probes"] = {"set_id": outcome["set_id"], "count": len(outcome["source"]), "summary": outcome["summary"]}
    sft_summary = Path(model) / "sft.json"
    if sft_summary.is_file():
        summary = json.loads(sft_summary.read_text())
        facts["sft"] = {key: summary.get(key) for key in ("episodes", "turns", "reply_loss_before",
                                                          "reply_loss_after", "seconds", "cpu_seconds", "config")}
    return facts


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", required=True, help="the row's name (its file is <out>/<row>.json)")
    parser.add_argument("--model", required=True, help="smollm2 (the base model), or an SFT output folder")
    parser.add_argument("--out", default="docs/data/smollm2-rooms")
    parser.add_argument("--work", default="runs/smollm2-rooms/eval", help="the eval folders (<work>/<row>/)")
    parser.add_argument("--tasks", type=int, default=96, help="held-out tasks (reset seeds)")
    parser.add_argument("--attempts", type=int, default=4)
    parser.add_argument("--ks", default="1,2,4")
    parser.add_argument("--ts", default="4,5,6,8")
    parser.add_argument("--probes", type=int, default=96, help="probe states (two per task)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    from agentgym_budget.cli import main as cli_main

    torch.set_num_threads(1)  # one thread: a second one spins at OpenMP barriers on a shared 2-core machine
    started = provenance(sys.argv if argv is None else ["benchmarks/smollm2_rooms_rows.py", *argv])
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    folder = Path(args.work) / args.row
    command = eval_argv(args.model, folder, args.tasks, args.attempts, args.ks, args.ts, args.probes, args.seed)
    if cli_main(command) != 0:
        raise SystemExit(f"the evaluation of {args.row} failed")
    facts = {"row": args.row, "model": args.model, "eval_command": "agentgym-budget " + " ".join(command),
             **row_facts(folder, args.model),
             "eval_cpu_seconds": time.process_time() - cpu_start, "eval_wall_seconds": time.perf_counter() - wall_start}
    path = write_results(Path(args.out) / f"{args.row}.json", started, facts)
    print(json.dumps({key: facts[key] for key in ("row", "pass_kt", "eval_cpu_seconds")}, indent=1))
    print(f"wrote {path}")
    return facts


if __name__ == "__main__":
    main()

"""SmolLM2-135M-Instruct through the whole pipeline on CPU (issue 36, step 2: plumbing and first figures).

    zero-shot eval → SFT (format only: random admissible commands, KeyDoor train) → eval
    → BudgetMix GRPO on KeyDoor train (LoRA) → eval            (held-out Pass@(1,T), KeyDoor test)

and the CPU seconds of each part of an update (generation, old/reference log-probs, the loss's forward,
backward, optimizer: the trainer's ``cpu_*_seconds`` metrics), with an extrapolation of what one
60-CPU-minute seed can do.  Every model run is sized for a shared 2-core machine: short prompts
(``history=actions``, ``max_turns_shown`` 2), few tasks per update, few new tokens, LoRA.

Writes ``<out>/results.json`` (with :func:`provenance.provenance`: command, commit, load) and keeps the
SFT folder, the trainer's metrics and eval files under ``<work>``.

Run (the committed figures, ``docs/data/smollm2-rl/results.json``; about 10 CPU-minutes)::

    python benchmarks/smollm2_rl.py --out docs/data/smollm2-rl
    python benchmarks/smollm2_rl.py --sft-folder runs/sft-smollm2 ...   # reuse an SFT output folder
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.provenance import provenance  # noqa: E402

#: The per-update CPU parts the trainer logs (``cpu_<part>_seconds``), rollout first.
PARTS = ("rollout", "old_logprobs", "ref_logprobs", "forward", "backward", "optimizer")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/data/smollm2-rl", help="results.json goes here")
    parser.add_argument("--work", default="runs/smollm2-rl", help="SFT folder, trainer metrics and eval files")
    parser.add_argument("--sft-folder", default=None, help="reuse this SFT output folder (its sft.json is recorded)")
    parser.add_argument("--budget", default="mix:2,3,4")
    parser.add_argument("--max-turns-shown", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--sft-episodes", type=int, default=60)
    parser.add_argument("--sft-steps", type=int, default=40,
                        help="format SFT steps; 12 (or 8) x 8 left the model taking the key in 3 %% of turns (random "
                             "play: 1/3), below random play and with no RL signal; 40 reach it "
                             "(benchmarks/smollm2_turns.py, docs/data/smollm2-rl/turns-*.json)")
    parser.add_argument("--sft-batch-size", type=int, default=8)
    parser.add_argument("--sft-learning-rate", type=float, default=2e-3)
    parser.add_argument("--lora-r", type=int, default=8)
    parser.add_argument("--lora-layers", type=int, default=0, help="LoRA on the top N decoder layers only (0: all)")
    parser.add_argument("--prompt", default="react", help="the named system prompt (react, action, short)")
    parser.add_argument("--eval-every", type=int, default=None, help="held-out evaluation every N updates "
                        "(default: before and after only)")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument("--tasks-per-update", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--eval-tasks", type=int, default=16)
    parser.add_argument("--eval-t", type=int, default=2)
    parser.add_argument("--skip-zero-shot", action="store_true", help="no zero-shot evaluation of the base model")
    parser.add_argument("--summarize-run", action="store_true",
                        help="train nothing: summarize <work>/rl's metrics and eval files as far as the run got "
                             "(a run stopped before its end); give the run's own settings")
    parser.add_argument("--train-arg", action="append", default=[], metavar="FIELD=JSON",
                        help="any other TrainConfig field for the GRPO run, its value as JSON (repeatable), e.g. "
                             "advantage=\"gigpo\", kl_coef=0.02, entropy_coef=0.01, update_epochs=2")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: on a busy machine a second one spins)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    from agentgym_budget.train import TrainConfig, Trainer
    from agentgym_budget.train.config import SFTConfig
    from agentgym_budget.train.sft import sft

    torch.set_num_threads(args.threads)
    work = Path(args.work)
    facts = {"provenance": provenance(sys.argv if argv is None else ["benchmarks/smollm2_rl.py", *argv]),
             "settings": vars(args)}
    prompt = dict(env_id="KeyDoor-v0", budget=args.budget, max_turns_shown=args.max_turns_shown, history="actions",
                  prompt=args.prompt)

    def trainer_config(model: str, folder: Path, **overrides) -> TrainConfig:
        settings = dict(**prompt, env_kwargs={"split": "train"}, model=model, seed=args.seed,
                        total_updates=args.updates, tasks_per_update=args.tasks_per_update,
                        group_size=args.group_size, max_new_tokens=args.max_new_tokens,
                        micro_batch_size=args.micro_batch_size, lora_r=args.lora_r, lora_layers=args.lora_layers,
                        learning_rate=args.learning_rate, gradient_checkpointing=args.gradient_checkpointing,
                        eval_every=args.eval_every or args.updates, eval_tasks=args.eval_tasks, eval_attempts=1,
                        eval_ks=(1,), eval_ts=(args.eval_t,), eval_plots=False,
                        save_every=args.eval_every or 0,  # a checkpoint at each evaluation (the table script's input)
                        torch_threads=args.threads, output_dir=str(folder), progress_bar=False, tensorboard=False)
        return TrainConfig(**{**settings, **extra, **overrides})

    extra = dict(_field_value(item) for item in args.train_arg)
    cell = f"eval/pass@1,T={args.eval_t}"
    if not (args.skip_zero_shot or args.summarize_run):  # the base model with the same prompt, the same held-out tasks
        start = time.process_time()
        base = Trainer(trainer_config("smollm2", work / "zero-shot", lora_r=0, lora_layers=0))
        result = base.evaluate()
        facts["zero_shot"] = {"pass1": result.value(1, args.eval_t), "cpu_seconds": time.process_time() - start}
        del base

    if args.sft_folder is None:
        folder = work / "sft"
        sft(SFTConfig(**prompt, source="random", model="smollm2", episodes=args.sft_episodes, steps=args.sft_steps,
                      batch_size=args.sft_batch_size, learning_rate=args.sft_learning_rate, lora_r=args.lora_r,
                      loss_turns=32, seed=args.seed, torch_threads=args.threads, output_dir=str(folder)))
    else:
        folder = Path(args.sft_folder)
    summary = json.loads((folder / "sft.json").read_text())
    facts["sft"] = {key: summary.get(key) for key in ("episodes", "turns", "loss_turns", "reply_loss_before",
                                                      "reply_loss_after", "seconds", "cpu_seconds")}
    facts["sft"]["losses"] = summary["losses"]
    facts["sft"]["config"] = summary["config"]

    if args.summarize_run:  # the trainer's own per-update and evaluation records, as far as they go
        history = [json.loads(line) for line in (work / "rl" / "metrics.jsonl").read_text().splitlines()]
        rl_cpu = None
    else:
        start = time.process_time()
        trainer = Trainer(trainer_config(str(folder), work / "rl"))
        history = trainer.train()
        rl_cpu = time.process_time() - start
    evals = [json.loads(line) for line in (work / "rl" / "eval.jsonl").read_text().splitlines()]
    keep = ("success_rate", "invalid_action_rate", "zero_advantage_groups", "loss", "grad_norm", "update_episodes",
            "update_turns", "action_tokens", "optimizer_steps", "rollout_seconds", "update_seconds",
            *(f"cpu_{part}_seconds" for part in PARTS), "cpu_update_seconds")
    updates = [{key: row[key] for key in keep if key in row} for row in history]
    per_update = {f"cpu_{part}_seconds": statistics.mean(u[f"cpu_{part}_seconds"] for u in updates) for part in PARTS}
    cpu_per_update = sum(per_update.values())
    turns = statistics.mean(u["update_turns"] for u in updates)
    episodes = statistics.mean(u["update_episodes"] for u in updates)
    facts["rl"] = {
        "updates_done": len(updates),
        "finished": len(updates) == args.updates,
        "episodes": sum(u["update_episodes"] for u in updates),
        "cpu_seconds_of_updates": sum(u["cpu_rollout_seconds"] + u["cpu_update_seconds"] for u in updates),
        "updates": updates,
        "mean_cpu_seconds_per_update": per_update,
        "cpu_seconds_per_update": cpu_per_update,
        "cpu_seconds_per_turn": cpu_per_update / turns,
        "run_cpu_seconds": rl_cpu,  # loading, the evaluations and the updates (None: summarized from files)
        "sft_pass1": evals[0][cell],  # after the SFT warm start, before RL
        "rl_pass1": evals[-1][cell],
        "held_out_curve": [{"update": row["update"], "pass1": row[cell]} for row in evals],
        "eval_cpu_seconds": None if rl_cpu is None
        else rl_cpu - sum(u["cpu_rollout_seconds"] + u["cpu_update_seconds"] for u in updates),
    }
    budget = 3600.0
    facts["extrapolation_60_cpu_minutes"] = {
        "updates": budget / cpu_per_update,
        "episodes": budget / cpu_per_update * episodes,
        "turns": budget / cpu_per_update * turns,
        "tiny_model_episodes_to_learn": 9600,  # issue 36's figure for the tiny model
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(facts, indent=1) + "\n")
    print(json.dumps({k: v for k, v in facts.items() if k != "provenance"}, indent=1))
    return facts


def _field_value(item: str) -> tuple[str, object]:
    """``FIELD=JSON`` of ``--train-arg`` as ``(field, value)``; anything else is a one-line error."""
    field, sep, text = item.partition("=")
    try:
        return field.strip(), json.loads(text)
    except json.JSONDecodeError:
        if sep:
            return field.strip(), text  # a bare string: advantage=gigpo
        raise SystemExit(f"--train-arg {item!r}: expected FIELD=JSON") from None


if __name__ == "__main__":
    main()

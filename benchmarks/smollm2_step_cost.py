"""The CPU cost of a GRPO update of SmolLM2-135M-Instruct, arm beside arm (issue 36: cut the per-turn cost).

Each arm is a :class:`~agentgym_budget.train.Trainer` from the same SFT folder with the same seed and
settings but its ``--lora-layers`` (0: LoRA on all 30 layers), ``--max-turns-shown`` and ``--prompt`` (the
committed ``smollm2_rl.py`` figures: ``0:2:react``).  The arms' updates are interleaved (update 0 of every arm, then
update 1, ...), so a change of load on the shared machine hits them alike; an arm's first update plays the
same episodes as any other arm with the same prompt (the adapters start at B = 0: the same function).
Prints, per arm, the CPU seconds of each part of an update (the trainer's ``cpu_*_seconds``), per turn,
and the ratio to the first arm; writes them to ``<out>/step-cost.json`` with :func:`provenance.provenance`.

There is no old-policy pass in any arm: with one optimizer step per rollout the trainer takes the
old log-probs from the update's own forward, detached (``Trainer._needs_old_logps``), and KL 0 needs
no reference pass.

Run (the committed figures; about 8 CPU-minutes)::

    python benchmarks/smollm2_step_cost.py --sft-folder runs/sft-random --out docs/data/smollm2-rl
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


def parse_arms(text: str) -> list[tuple[int, int, str]]:
    """``"0:2:react,4:2:short"`` → ``[(0, 2, 'react'), (4, 2, 'short')]``: (lora_layers, max_turns_shown, prompt)
    per arm; the prompt defaults to ``react``.

    Example:
        >>> parse_arms("0:2, 4:1:short")
        [(0, 2, 'react'), (4, 1, 'short')]
    """
    arms = []
    for item in text.split(","):
        layers, shown, *prompt = item.strip().split(":")
        if not layers.isdigit() or not shown.isdigit() or len(prompt) > 1:
            raise ValueError(f"an arm is LORA_LAYERS:MAX_TURNS_SHOWN[:PROMPT] (e.g. 4:2:short), got {item.strip()!r}")
        arms.append((int(layers), int(shown), prompt[0] if prompt else "react"))
    return arms


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-folder", required=True, help="an SFT output folder (agentgym-budget sft)")
    parser.add_argument("--arms", default="0:2:react,4:2:react,4:2:short",
                        help="LORA_LAYERS:MAX_TURNS_SHOWN[:PROMPT],... (the first is the baseline)")
    parser.add_argument("--out", default=None, help="write step-cost.json here")
    parser.add_argument("--work", default="runs/smollm2-step-cost")
    parser.add_argument("--budget", default="mix:2,3,4")
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument("--tasks-per-update", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--lora-r", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    arms = parse_arms(args.arms)

    import torch

    from agentgym_budget.train import TrainConfig, Trainer

    torch.set_num_threads(args.threads)
    source = provenance(sys.argv if argv is None else ["benchmarks/smollm2_step_cost.py", *argv])  # the code that runs
    trainers = {}
    for layers, shown, prompt in arms:
        name = f"lora_layers={layers},max_turns_shown={shown},prompt={prompt}"
        trainers[name] = Trainer(TrainConfig(
            env_id="KeyDoor-v0", env_kwargs={"split": "train"}, budget=args.budget, history="actions",
            max_turns_shown=shown, prompt=prompt, model=args.sft_folder, seed=args.seed, total_updates=args.updates,
            tasks_per_update=args.tasks_per_update, group_size=args.group_size, max_new_tokens=args.max_new_tokens,
            micro_batch_size=args.micro_batch_size, lora_r=args.lora_r, lora_layers=layers,
            learning_rate=args.learning_rate, eval_every=0, save_every=0, torch_threads=args.threads,
            output_dir=str(Path(args.work) / name.replace(",", "-").replace("=", "")), progress_bar=False,
            tensorboard=False))
    history: dict[str, list[dict]] = {name: [] for name in trainers}
    for _ in range(args.updates):  # interleaved: every arm's update u before any arm's update u + 1
        for name, trainer in trainers.items():
            start = time.process_time()
            metrics = trainer.train_step()
            metrics["cpu_step_seconds"] = time.process_time() - start
            history[name].append(metrics)

    rows, baseline = {}, None
    for name, updates in history.items():
        parts = {part: statistics.mean(u[f"cpu_{part}_seconds"] for u in updates) for part in PARTS}
        turns = statistics.mean(u["update_turns"] for u in updates)
        per_update = sum(parts.values())
        row = {"cpu_seconds": parts, "cpu_seconds_per_update": per_update, "turns_per_update": turns,
               "cpu_seconds_per_turn": per_update / turns,
               "trainable_parameters": sum(p.numel() for p in trainers[name].model.parameters() if p.requires_grad),
               "updates": [{key: u[key] for key in ("update_turns", "action_tokens", "success_rate", "loss",
                                                    "grad_norm", *(f"cpu_{p}_seconds" for p in PARTS))
                            if key in u} for u in updates]}
        baseline = baseline or row
        row["ratio_per_turn_to_first"] = row["cpu_seconds_per_turn"] / baseline["cpu_seconds_per_turn"]
        row["ratio_backward_to_first"] = parts["backward"] / baseline["cpu_seconds"]["backward"]
        rows[name] = row
        print(f"{name:50s} " + " ".join(f"{p}={parts[p]:.2f}" for p in PARTS)
              + f" | turns={turns:.1f} cpu/turn={row['cpu_seconds_per_turn']:.3f}"
              f" ratio={row['ratio_per_turn_to_first']:.2f} backward ratio={row['ratio_backward_to_first']:.2f}",
              flush=True)
    facts = {"provenance": source, "settings": vars(args), "arms": rows}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "step-cost.json").write_text(json.dumps(facts, indent=1) + "\n")
    return facts


if __name__ == "__main__":
    main()

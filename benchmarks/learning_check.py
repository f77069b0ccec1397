"""Learning check: does the trainer make a tiny model better at a task it can learn?

On ``KeyDoor`` (take the key, open the door of the task's colour; 3 commands, 2-turn expert):

1. build the offline tiny model (2-layer Qwen2, BPE tokenizer from the env's text);
2. *format warm-up*: supervised steps that clone a **uniformly random** policy (replies
   ``"Thought: I should <c>.\\nAction: <c>"`` with ``c`` random among the admissible commands) — the
   model learns the reply format, nothing about which door is right;
3. measure the success rate of that untrained policy with the evaluator (Pass@(1,T) on
   evaluation task seeds — other seeds than training's, but KeyDoor's 24 set-ups all occur
   in training, so this checks learning, not generalisation);
4. train ``--updates`` updates of BudgetMix GRPO;
5. measure again, same evaluator, same seeds.  Prints before / after.

Run (about 20-30 minutes on 2 busy CPU cores):
    python benchmarks/learning_check.py --out runs/learning_check
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def success_rates(model, tokenizer, config, tasks: int, attempts: int, ts: tuple[int, ...]) -> dict[int, float]:
    from agentgym_budget.eval import evaluate
    from agentgym_budget.train.rollout import training_policy

    policy = training_policy(model, tokenizer, config)
    result = evaluate("KeyDoor-Budget-v0", policy, ks=(1,), ts=ts, tasks=tasks, attempts=attempts,
                      seed=config.eval_seed, env_kwargs={"show_budget": config.show_budget}, bootstrap=0)
    return {t: result.value(1, t) for t in ts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/learning_check")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--warmup-steps", type=int, default=150)
    parser.add_argument("--budget", default="mix:2,3,4,6")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--kl", type=float, default=0.1, help="k3 KL to the warmed-up model (keeps the format)")
    parser.add_argument("--tasks", type=int, default=4, help="tasks per update")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--eval-tasks", type=int, default=100)
    parser.add_argument("--eval-attempts", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from agentgym_budget.train import TrainConfig, Trainer
    from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
    from agentgym_budget.train.warmup import format_warmup

    torch.set_num_threads(1)
    out = Path(args.out)
    warm_path = out / "warm_model"
    start = time.perf_counter()
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=args.seed)
    losses = format_warmup(model, tokenizer, "KeyDoor-v0", steps=args.warmup_steps, seed=args.seed)
    model.save_pretrained(warm_path)
    tokenizer.save_pretrained(warm_path)
    print(f"format warm-up: {args.warmup_steps} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f} "
          f"({time.perf_counter() - start:.0f} s)", flush=True)

    config = TrainConfig(
        env_id="KeyDoor-v0", budget=args.budget, model=str(warm_path), output_dir=str(out / "run"), seed=args.seed,
        total_updates=args.updates, tasks_per_update=args.tasks, group_size=args.group_size, max_new_tokens=12,
        learning_rate=args.lr, kl_coef=args.kl,
        eval_every=50, eval_tasks=20, eval_attempts=2, eval_ks=(1, 2), eval_ts=(2, 4), save_every=50,
        torch_threads=1, progress_bar=False, tensorboard=False,
    )
    ts = (2, 3, 4, 6)
    before = success_rates(model, tokenizer, config, args.eval_tasks, args.eval_attempts, ts)
    print(f"untrained (format warm-up only) success rate by budget T: {before}", flush=True)

    trainer = Trainer(config)
    start = time.perf_counter()
    history = trainer.train()
    train_seconds = time.perf_counter() - start
    after = success_rates(trainer.model, trainer.tokenizer, config, args.eval_tasks, args.eval_attempts, ts)
    print(f"after {args.updates} updates ({train_seconds:.0f} s) success rate by budget T: {after}")
    report = {"before": before, "after": after, "train_seconds": train_seconds, "args": vars(args),
              "eval_episodes_per_T": args.eval_tasks * args.eval_attempts,
              "train_success_first10": [h["success_rate"] for h in history[:10]],
              "train_success_last10": [h["success_rate"] for h in history[-10:]]}
    (out / "learning_check.json").write_text(json.dumps(report, indent=1))
    for t in ts:
        print(f"T={t}: {100 * before[t]:.1f}% -> {100 * after[t]:.1f}%  ({100 * (after[t] - before[t]):+.1f} points)")


if __name__ == "__main__":
    main()

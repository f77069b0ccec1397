"""A small BudgetMix study on KeyDoor with the offline tiny model: fixed-T vs BudgetMix, outcome vs process reward.

Arms (identical flags but the ones named), each trained from the same format-warmed model per seed:

* ``fixed``   — ``--budget fixed:4`` (outcome reward only);
* ``mix``     — ``--budget mix:2,3,4,6`` (outcome reward only; mean budget 3.75);
* ``mix+pr``  — ``mix`` plus ``--process-reward expert_progress --process-reward-coef 0.5``.

After training, every arm (and the untrained warm-up model) is evaluated with the evaluator:
Pass@(1,T) for T in 2, 3, 4, 6 on the same evaluation tasks (seeds from ``--eval-seed``, so
the tasks pair up across arms).  Differences between arms are *paired over tasks*: per task,
the arm's success rate averaged over seeds, minus the other arm's; the 95% interval is a
bootstrap over tasks.  KeyDoor has only 24 set-ups, all seen in training under other seeds:
this measures learning under a budget, not generalisation.  The tiny model and short runs
make this a smoke-scale study: it shows what the tooling measures, not what BudgetMix does
for real LLMs.

Measured once (docs/trainer.md, "A small BudgetMix study"): every arm learned something in 60
updates; BudgetMix did not beat fixed:4 at any T, the process reward made no resolvable
difference, and the seed spread was large.  The prompt does not show the budget, so the policy
cannot condition on T.

Run (about 10 minutes on 2 lightly loaded CPU cores with the defaults; 17.5 min at load ~7)::

    python benchmarks/budgetmix_study.py --out runs/budgetmix_study
    python benchmarks/budgetmix_study.py --seeds 0,1,2 --updates 60 --eval-tasks 30   # the defaults
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

# run from a checkout without installing; and not from benchmarks/, whose kernels.py would shadow the
# `kernels` package that transformers imports
sys.path[0] = str(Path(__file__).resolve().parents[1])

ARMS: dict[str, dict] = {
    "fixed": {"budget": "fixed:4"},
    "mix": {"budget": "mix:2,3,4,6"},
    "mix+pr": {"budget": "mix:2,3,4,6", "process_reward": "expert_progress", "process_reward_coef": 0.5},
}
TS = (2, 3, 4, 6)
COMPARISONS = (("mix", "fixed"), ("mix+pr", "mix"))


def per_task_success(model, tokenizer, config, tasks: int, attempts: int, seed: int) -> np.ndarray:
    """``[len(TS), tasks]`` success rate of each evaluation task within each budget T."""
    from agentgym_budget.eval import evaluate
    from agentgym_budget.train.rollout import training_policy

    result = evaluate("KeyDoor-Budget-v0", training_policy(model, tokenizer, config), ks=(1,), ts=TS, tasks=tasks,
                      attempts=attempts, seed=seed, bootstrap=0)
    return np.asarray(result.successes, dtype=float) / attempts


def paired_difference(a: np.ndarray, b: np.ndarray, rng: np.random.Generator, resamples: int = 2000
                      ) -> tuple[float, float, float]:
    """Mean over tasks of ``a - b`` (both ``[tasks]``) and its 95% bootstrap interval over tasks."""
    diff = a - b
    means = diff[rng.integers(0, len(diff), size=(resamples, len(diff)))].mean(axis=1)
    return float(diff.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/budgetmix_study")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--eval-tasks", type=int, default=30)
    parser.add_argument("--eval-attempts", type=int, default=2)
    parser.add_argument("--eval-seed", type=int, default=1_000_003)
    args = parser.parse_args()

    import torch

    from agentgym_budget.train import TrainConfig, Trainer
    from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer

    torch.set_num_threads(1)
    out = Path(args.out)
    seeds = [int(s) for s in args.seeds.split(",")]
    success: dict[str, list[np.ndarray]] = {name: [] for name in ["untrained", *ARMS]}  # per seed [T, tasks]
    train_success: dict[str, list[float]] = {name: [] for name in ARMS}
    start = time.perf_counter()
    for seed in seeds:
        warm = out / f"warm_seed{seed}"
        model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=seed, warmup_steps=150)
        model.save_pretrained(warm)
        tokenizer.save_pretrained(warm)
        base = dict(env_id="KeyDoor-v0", model=str(warm), format_warmup_steps=0, seed=seed,
                    total_updates=args.updates, tasks_per_update=4, group_size=8, max_new_tokens=12,
                    learning_rate=5e-4, kl_coef=0.1, eval_every=0, save_every=0, torch_threads=1,
                    progress_bar=False, tensorboard=False)
        config = TrainConfig(**base, output_dir=str(out / "unused"))
        success["untrained"].append(per_task_success(model, tokenizer, config, args.eval_tasks, args.eval_attempts,
                                                     args.eval_seed))
        for name, arm in ARMS.items():
            config = TrainConfig(**base, **arm, output_dir=str(out / f"{name}_seed{seed}"))
            trainer = Trainer(config)
            history = trainer.train()
            train_success[name].append(float(np.mean([h["success_rate"] for h in history[-10:]])))
            success[name].append(per_task_success(trainer.model, trainer.tokenizer, config, args.eval_tasks,
                                                  args.eval_attempts, args.eval_seed))
            print(f"seed {seed} {name}: Pass@(1,T) {dict(zip(TS, success[name][-1].mean(axis=1).round(3)))} "
                  f"({time.perf_counter() - start:.0f} s so far)", flush=True)

    rng = np.random.default_rng(0)
    mean_by_arm = {name: np.mean(runs, axis=0) for name, runs in success.items()}  # [T, tasks], averaged over seeds
    report = {"args": vars(args), "seconds": time.perf_counter() - start, "ts": TS,
              "pass1": {name: dict(zip(map(str, TS), m.mean(axis=1).tolist())) for name, m in mean_by_arm.items()},
              "pass1_by_seed": {name: [r.mean(axis=1).tolist() for r in runs] for name, runs in success.items()},
              "train_success_last10": train_success, "paired": {}}
    print(f"\nPass@(1,T), mean of {len(seeds)} seeds, {args.eval_tasks} tasks x {args.eval_attempts} attempts")
    print("| arm | " + " | ".join(f"T={t}" for t in TS) + " |")
    print("|---|" + "---|" * len(TS))
    for name, m in mean_by_arm.items():
        print(f"| {name} | " + " | ".join(f"{100 * v:.1f}%" for v in m.mean(axis=1)) + " |")
    print("\nPaired differences over tasks (points, 95% bootstrap CI over tasks)")
    print("| comparison | " + " | ".join(f"T={t}" for t in TS) + " |")
    print("|---|" + "---|" * len(TS))
    for a, b in COMPARISONS:
        cells = [paired_difference(mean_by_arm[a][i], mean_by_arm[b][i], rng) for i in range(len(TS))]
        report["paired"][f"{a} - {b}"] = dict(zip(map(str, TS), cells))
        print(f"| {a} − {b} | " + " | ".join(f"{100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
                                             for d, lo, hi in cells) + " |")
    print(f"\ntotal {report['seconds']:.0f} s")
    (out / "budgetmix_study.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

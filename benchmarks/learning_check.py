"""Multi-seed learning check: in how many seeds does the reference trainer learn KeyDoor?

Each seed is one run of the documented smoke run (:func:`agentgym_budget.train.keydoor_smoke_config`:
the tiny offline model, format warm-up, BudgetMix GRPO on KeyDoor's ``train`` set-ups), in its
own process, then an evaluation on the 8 **held-out** ``test`` set-ups (goal/distractor pairs
never seen in training: the format warm-up and the tiny tokenizer's text come from ``train`` too;
an ``--set env_kwargs=...`` whose evaluation overlaps training is refused).  A seed *learned* when both hold:

* its mean training success over the last 20 updates is >= 0.8 (random play: 0.264 under the
  smoke run's mix:2,3,4,6, exact: ``KeyDoor``'s ``random_play_win_rate``), and
* its evaluation Pass@(1,T=2) on the held-out set-ups is >= 0.8 (random play: 1/9 = 0.111).

Prints every seed's numbers, ``learned k / n``, the CPU time per seed, and writes
``learning_check.json`` and ``learning_curve.png`` (mean training success per update over the
seeds, with a 95 % t-interval band) to ``--out``.

Run (10 seeds on 2 cores: about 15 minutes)::

    python benchmarks/learning_check.py --seeds 10 --out runs/learning_check
    python benchmarks/learning_check.py --seeds 4 --set kl_coef=0 --set total_updates=100   # a variant
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from agentgym_budget.eval.stats import wilson_interval  # noqa: E402
from agentgym_budget.envs.toy.key_door import random_play_win_rate  # noqa: E402
from agentgym_budget.train.config import keydoor_smoke_config  # noqa: E402
from provenance import provenance  # noqa: E402  (benchmarks/provenance.py)
from agentgym_budget.train.learning_check import (HELD_OUT_PASS_TO_LEARN, LAST_UPDATES,  # noqa: E402
                                                  TRAIN_SUCCESS_TO_LEARN, held_out_env_kwargs, parse_overrides,
                                                  run_seed)


def mean_band(curves: list[list[float]], smooth: int = 10) -> tuple[list[float], list[float], list[float]]:
    """Per update: the mean over seeds of each seed's ``smooth``-update moving average, and its 95 % t-interval
    (:func:`agentgym_budget.eval.stats.t_interval`'s, one update at a time)."""
    import numpy as np

    from agentgym_budget.eval.stats import t_quantile

    smooth = max(1, min(smooth, min(len(c) for c in curves)))
    kernel = np.ones(smooth) / smooth
    smoothed = np.array([np.convolve(c, kernel, mode="valid") for c in curves])  # [seeds, updates - smooth + 1]
    mean = smoothed.mean(axis=0)
    if len(curves) < 2:
        return mean.tolist(), mean.tolist(), mean.tolist()
    half = t_quantile(0.975, len(curves) - 1) * smoothed.std(axis=0, ddof=1) / np.sqrt(len(curves))
    return mean.tolist(), (mean - half).tolist(), (mean + half).tolist()


def plot(runs: list[dict[str, Any]], path: Path, title: str, budget: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    smooth = 10
    mean, low, high = mean_band([r["success"] for r in runs], smooth)
    updates = range(smooth, smooth + len(mean))
    figure, axes = plt.subplots(figsize=(7, 4))
    for run in runs:
        axes.plot(range(1, len(run["success"]) + 1), run["success"], color="grey", alpha=0.15, linewidth=0.8)
    axes.plot(updates, mean, color="C0", label=f"mean of {len(runs)} seeds ({smooth}-update moving average)")
    axes.fill_between(updates, low, high, color="C0", alpha=0.25, label="95 % CI over seeds")
    axes.axhline(TRAIN_SUCCESS_TO_LEARN, color="C2", linestyle="--", linewidth=1, label="'learned' threshold")
    try:  # the chance level of training success under the runs' budget (a curriculum has none)
        chance = float(random_play_win_rate(budget))
        axes.axhline(chance, color="C3", linestyle=":", linewidth=1, label=f"random play, {budget} ({chance:.3f})")
    except ValueError:
        pass
    axes.set(xlabel="update", ylabel="training success rate", ylim=(0, 1), title=title)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10, help="how many seeds (first-seed, first-seed + 1, ...)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="seeds run in parallel processes")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a TrainConfig field of the smoke run (repeatable)")
    parser.add_argument("--eval-tasks", type=int, default=40, help="held-out evaluation tasks per seed")
    parser.add_argument("--eval-attempts", type=int, default=2)
    parser.add_argument("--out", default="runs/learning_check")
    args = parser.parse_args()

    overrides = parse_overrides(args.set)
    try:  # refused here, in one line, rather than in every worker
        held_out_env_kwargs(keydoor_smoke_config(**overrides))
    except ValueError as error:
        raise SystemExit(f"learning_check: {error}") from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = provenance(sys.argv)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    start = time.perf_counter()
    runs = []
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = [pool.submit(run_seed, s, f"{out}/seed_{s}", args.eval_tasks, args.eval_attempts, **overrides) for s in seeds]
        for future in futures:
            run = future.result()
            runs.append(run)
            held = " ".join(f"T={t}:{v:.2f}" for t, v in run["held_out_pass1"].items())
            print(f"seed {run['seed']:>3}: {'learned' if run['learned'] else 'NOT learned'}  "
                  f"train success last {LAST_UPDATES} {run['last_success']:.2f}  held-out Pass@1 {held}  "
                  f"CPU {run['cpu_seconds'] / 60:.1f} min", flush=True)
            run["held_out_pass1"] = {str(t): v for t, v in run["held_out_pass1"].items()}
    learned = sum(r["learned"] for r in runs)
    cpu = sorted(r["cpu_seconds"] for r in runs)
    print(f"learned {learned} / {len(runs)} seeds  (last-{LAST_UPDATES}-update training success >= "
          f"{TRAIN_SUCCESS_TO_LEARN} and held-out Pass@(1,T=2) >= {HELD_OUT_PASS_TO_LEARN})")
    print(f"CPU per seed: median {cpu[len(cpu) // 2] / 60:.1f} min, max {cpu[-1] / 60:.1f} min; "
          f"wall {time.perf_counter() - start:.0f} s with {args.workers} workers")
    mean, low, high = mean_band([r["success"] for r in runs])
    print(f"mean training success (10-update average): first {mean[0]:.2f} [{low[0]:.2f}, {high[0]:.2f}], "
          f"last {mean[-1]:.2f} [{low[-1]:.2f}, {high[-1]:.2f}] (95 % CI over seeds)")
    low_rate, high_rate = wilson_interval(learned, len(runs))
    failed = [r["seed"] for r in runs if not r["learned"]]
    print(f"learn rate {learned / len(runs):.2f} (95 % Wilson interval {low_rate:.2f}-{high_rate:.2f}); "
          f"not learned: seeds {failed}")
    report = {"provenance": {**started, "load_average_end": [round(x, 2) for x in os.getloadavg()]},
              "overrides": overrides, "seeds": list(seeds), "learned": learned,
              "learn_rate": {"rate": learned / len(runs), "wilson_95": [low_rate, high_rate]},
              "not_learned": failed, "runs": runs, "mean_curve": {"mean": mean, "low": low, "high": high}}
    (out / "learning_check.json").write_text(json.dumps(report, indent=1))
    plot(runs, out / "learning_curve.png", f"KeyDoor smoke run: learned {learned}/{len(runs)} seeds",
         str(keydoor_smoke_config(**overrides).budget))
    print(f"wrote {out / 'learning_check.json'} and {out / 'learning_curve.png'}")


if __name__ == "__main__":
    main()

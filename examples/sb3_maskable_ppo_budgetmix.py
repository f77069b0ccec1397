"""MaskablePPO on the household env under a fixed turn budget vs BudgetMix, then Pass@(K,T).

A small, real reproduction of the budget-sensitivity finding: a policy trained under one
fixed budget is evaluated at several budgets T next to one trained under BudgetMix (a budget
drawn per episode), with the remaining budget as an input feature for both.

Pipeline (each piece is the library's own):
    env        gym.make(ENV) restricted to a few games, under TurnBudget(fixed | mix)
    adapter    agentgym_budget.integrations.sb3.DiscreteCommands  (Discrete + action_masks, Box)
    training   sb3_contrib.MaskablePPO over SB3 vector envs (DummyVecEnv / SubprocVecEnv)
    policy     agentgym_budget.integrations.sb3.MaskablePolicy    (act(obs, info) -> str)
    eval       agentgym_budget.eval.evaluate                      (Pass@(K,T), per-T rollouts)
    plots      agentgym_budget.eval.plots                         (heatmaps, fixed vs mix, diff)

Run (the full run reported in docs/integrations.md):
    python examples/sb3_maskable_ppo_budgetmix.py --total-timesteps 80000 --seed 0
A smoke run (what the CI test does):
    python examples/sb3_maskable_ppo_budgetmix.py --total-timesteps 1024 --eval-tasks 2 --attempts 2

Why only a few games: a bag-of-words MLP trained with PPO for minutes on 2 CPU cores cannot
learn ALFWorld's hundreds of rooms; on a handful of games of one task type it learns enough
to show how the training budget shapes behaviour.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

import agentgym_budget  # noqa: F401  (registers the env ids)
from agentgym_budget.eval import evaluate
from agentgym_budget.eval.plots import plot_diff_heatmap, plot_heatmap
from agentgym_budget.integrations.sb3 import DiscreteCommands, MaskablePolicy
from agentgym_budget.wrappers import TurnBudget


@dataclass
class Args:
    env_id: str = "ALFWorld-v0"
    env_kwargs: dict[str, Any] = field(default_factory=lambda: {"engine": "fast", "task_types": [1], "split": "train"})
    games: int = 4  # train and evaluate on the first N games of the split (0: all)
    fixed_budget: int = 10  # the fixed-T baseline
    mix_budget: str = "mix:5,10,20,50"  # BudgetMix
    total_timesteps: int = 80_000  # per training run
    n_envs: int = 8
    vec_env: str = "dummy"  # "dummy" (one process) or "subproc" (one process per env)
    max_actions: int = 48
    learning_rate: float = 1e-3
    ent_coef: float = 0.01
    ks: tuple[int, ...] = (1, 4)
    ts: tuple[int, ...] = (5, 10, 20, 50)
    eval_tasks: int = 40  # evaluation task draws (seeds) over the same games
    attempts: int = 4
    seed: int = 0
    out: str = "runs/sb3_budgetmix"


# -- the env -----------------------------------------------------------------------------------
def make_text_env(env_id: str, env_kwargs: dict[str, Any], games: int) -> gym.Env:
    """The bare text env (no step limit: the budget is TurnBudget's), cut to its first ``games`` games."""
    unlimited = dataclasses.replace(gym.spec(env_id), max_episode_steps=None)
    env = gym.make(unlimited, disable_env_checker=True, **env_kwargs)
    if games:
        if not hasattr(env.unwrapped, "games"):
            raise ValueError(f"--games needs an env with a list of games (ALFWorld); {env_id} has none: use --games 0")
        env.unwrapped.games = env.unwrapped.games[:games]
    return env


def register_eval_env(args: Args) -> str:
    """Register the restricted env under its own id, so the evaluator makes the same env."""
    env_id = f"SB3Example-{args.env_id.split('-')[0]}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=make_text_env,
                     kwargs={"env_id": args.env_id, "env_kwargs": args.env_kwargs, "games": args.games})
    return env_id


def make_training_env(args: Args, budget: str | int) -> Any:
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv
    from stable_baselines3.common.monitor import Monitor

    def make_one(rank: int):
        def thunk() -> gym.Env:
            env = DiscreteCommands(TurnBudget(make_text_env(args.env_id, args.env_kwargs, args.games), budget=budget),
                                   max_actions=args.max_actions)
            env.reset(seed=args.seed + rank)  # seeds the env's task draws and the budget draws
            return Monitor(env)
        return thunk

    makers = [make_one(rank) for rank in range(args.n_envs)]
    return SubprocVecEnv(makers) if args.vec_env == "subproc" else DummyVecEnv(makers)


# -- train and evaluate ------------------------------------------------------------------------
def train(args: Args, budget: str | int) -> tuple[Any, Any]:
    from sb3_contrib import MaskablePPO

    vec_env = make_training_env(args, budget)
    model = MaskablePPO("MlpPolicy", vec_env, n_steps=128, batch_size=256, n_epochs=4, gamma=0.99,
                        learning_rate=args.learning_rate, ent_coef=args.ent_coef, seed=args.seed,
                        policy_kwargs={"net_arch": [128, 128]}, verbose=0)
    model.learn(args.total_timesteps)
    features = vec_env.get_attr("features")[0]
    vec_env.close()
    return model, features


def run(args: Args) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)  # small MLP: threads only add contention on a small machine
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    eval_id = register_eval_env(args)
    results, timing = {}, {}
    for label, budget in (("fixed", args.fixed_budget), ("mix", args.mix_budget)):
        start = time.perf_counter()
        model, features = train(args, budget)
        timing[f"train_{label}_s"] = time.perf_counter() - start
        policy = MaskablePolicy(model, features, name=f"maskable-ppo-{label}:{budget}")
        start = time.perf_counter()
        ks = tuple(k for k in args.ks if k <= args.attempts)  # Pass@K needs K <= attempts
        result = evaluate(eval_id, policy, ks=ks, ts=args.ts, tasks=args.eval_tasks,
                          attempts=args.attempts, seed=args.seed + 1000, bootstrap=200)
        timing[f"eval_{label}_s"] = time.perf_counter() - start
        result.save(out / label)
        plot_heatmap(result, out / f"heatmap_{label}.png")
        results[label] = result
    plot_diff_heatmap(results["fixed"], results["mix"], out / "heatmap_mix_minus_fixed.png")
    summary = {
        "args": asdict(args), "timing": timing,
        "pass_at_1": {label: {t: r.value(1, t) for t in args.ts} for label, r in results.items()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def print_table(summary: dict[str, Any]) -> None:
    ts = summary["args"]["ts"]
    print("Pass@(1,T)      " + "".join(f"T={t:<8}" for t in ts))
    for label, row in summary["pass_at_1"].items():
        print(f"{label:<16}" + "".join(f"{row[t]:<10.3f}" for t in ts))
    print("timing (s): " + ", ".join(f"{k}={v:.0f}" for k, v in summary["timing"].items()))


def parse_args(argv: list[str] | None = None) -> Args:
    defaults = Args()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, value in asdict(defaults).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, dict):
            parser.add_argument(flag, type=json.loads, default=value, help="JSON object (default: %(default)s)")
        elif isinstance(value, tuple):
            parser.add_argument(flag, type=int, nargs="+", default=value, help="(default: %(default)s)")
        else:
            parser.add_argument(flag, type=type(value), default=value, help="(default: %(default)s)")
    parsed = vars(parser.parse_args(argv))
    parsed["ks"], parsed["ts"] = tuple(parsed["ks"]), tuple(parsed["ts"])
    return Args(**parsed)


if __name__ == "__main__":
    print_table(run(parse_args()))

"""Per-turn credit traces of the process reward: what each turn of real training episodes is credited, by outcome.

Issue 40, requirement 1: training with ``process_reward="expert_progress"`` (coefficient 0.5) under
``mix`` collapsed on KeyDoorRooms and lost points on KeyDoor.  This script shows, on the very
episodes the trainer learns from, what the learner is told per turn:

* **scripted** — the signal alone, on hand-played paths of each env (the expert's path to the goal
  door, the same path to the *wrong* door, the same path stopped one turn short by the budget, and
  dithering without progress): each turn's process reward and process return-to-go after the loss
  rule.  This checks "``expert_progress`` gives the losing door the same shaping as the winning
  one" on the signal's values, with no model involved;
* **sampled** — G groups of real episodes of the smoke run's model (the tiny model after its format
  warm-up, optionally after ``--train-updates`` updates of the same run), collected by the
  trainer's own rollout pool under the arm's settings (``mix`` budgets, ``ProcessReward``), then
  credited with the trainer's own functions (:func:`~agentgym_budget.train.grpo.group_advantages`,
  :func:`~agentgym_budget.train.grpo.turn_credits`): per turn the process reward, the
  outcome advantage of its episode, the process credit ``c * G_t`` and the total.  Summarised by
  outcome (win / loss / timeout), and by whether the group had a win (a group without one has zero
  outcome advantage, so only the process credit moves its turns).

Written to ``--out`` (default ``docs/data/process-reward-trace/<label>.json``) with the command and
commit (:func:`benchmarks.provenance.provenance`); the summary is printed.

Run::

    python benchmarks/process_reward_trace.py --label current           # both envs, 16 groups each
    python benchmarks/process_reward_trace.py --env-id KeyDoorRooms-v0 --train-updates 20 --label rooms-u20
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path[0] = str(Path(__file__).resolve().parents[1])  # the checkout, not benchmarks/ (see budgetmix_study.py)

from benchmarks.provenance import provenance, write_results  # noqa: E402

ENVS = {"KeyDoor-v0": "mix:2,3,4,6", "KeyDoorRooms-v0": "mix:4,5,6,8"}  # the study's mix budgets per family
#: Hand-played paths per env (reset seed, task): the expert's moves, then the final door.
SCRIPTED_SETUP = {"KeyDoor-v0": (0, "red-blue"), "KeyDoorRooms-v0": (12, "red-blue")}


def outcome(episode: Any) -> str:
    return "win" if episode.won else "loss" if episode.lost else "timeout"


def scripted_paths(env_id: str, coef: float, gamma: float) -> dict[str, Any]:
    """The signal's per-turn rewards and credited returns-to-go on hand-played paths of ``env_id``."""
    import gymnasium as gym

    from agentgym_budget.train.grpo import process_returns_to_go
    from agentgym_budget.wrappers import ProcessReward, TurnBudget

    seed, task = SCRIPTED_SETUP[env_id]
    probe = gym.make(env_id)
    _, info = probe.reset(seed=seed, options={"task": task})
    plan = list(info["expert_plan"])
    wrong = next(c for c in info["admissible_commands"] + [f"open {d} door" for d in ("red", "blue")]
                 if c.startswith("open") and c != plan[-1])
    paths = {
        "win (expert path)": plan,
        "loss (expert path, wrong door)": plan[:-1] + [wrong],
        "timeout one turn short": plan[:-1],
        "timeout, no progress (invalid x len)": ["dance"] * len(plan),
    }
    rows = {}
    for name, actions in paths.items():
        env = ProcessReward(TurnBudget(gym.make(env_id), budget=len(actions)), signal="expert_progress", coef=1.0,
                            potential_based=False)
        env.reset(seed=seed, options={"task": task})
        rewards, won, lost = [], False, False
        for action in actions:
            _, _, terminated, truncated, info = env.step(action)
            rewards.append(float(info["process_reward"]))
            won, lost = bool(info.get("won")), terminated and not info.get("won")
            if terminated or truncated:
                break
        credit = process_returns_to_go(rewards, lost, gamma)
        rows[name] = {"actions": actions, "won": won, "lost": lost, "process_rewards": rewards,
                      "returns_to_go": credit, "credit_first_turn": coef * credit[0],
                      "credit_last_turn": coef * credit[-1]}
    return {"env_id": env_id, "seed": seed, "task": task, "coef": coef, "paths": rows}


def sampled_episodes(env_id: str, groups: int, seed: int, coef: float, train_updates: int,
                     overrides: dict[str, Any]) -> tuple[Any, list[Any]]:
    """``(config, episodes)``: ``groups`` groups of the arm's training episodes from the smoke run's model."""
    from agentgym_budget.train.config import keydoor_smoke_config
    from agentgym_budget.train.trainer import Trainer

    config = keydoor_smoke_config(seed=seed, env_id=env_id, budget=ENVS[env_id], process_reward="expert_progress",
                                  process_reward_coef=coef, total_updates=max(train_updates, 1),
                                  output_dir=tempfile.mkdtemp(prefix="pr_trace_"), **overrides)
    trainer = Trainer(config)
    for _ in range(train_updates):
        trainer.train_step()
    rng = np.random.default_rng([seed, 10_000 + train_updates])
    task_seeds = rng.integers(0, 2**31 - 1, size=groups)
    seeds = np.repeat(task_seeds, config.group_size).tolist()
    episodes = trainer.rollout_pool.collect(trainer.model, seeds, int(rng.integers(2**31 - 1)), 1)
    trainer.rollout_pool.close()
    return config, episodes


def credit_rows(config: Any, episodes: list[Any]) -> list[dict[str, Any]]:
    """Per episode: its outcome, budget, and per turn the action, process reward, outcome advantage,
    process credit and total advantage — computed by the trainer's own functions."""
    import torch

    from agentgym_budget.train.grpo import group_advantages, turn_credits

    returns = torch.tensor([float(e.won) for e in episodes])
    advantages = group_advantages(returns, config.group_size, config.advantage, config.scale_by_std)
    process = turn_credits(episodes, config.group_size, config.process_gamma, config.process_reward_norm)
    rows = []
    for index, (episode, advantage) in enumerate(zip(episodes, advantages.tolist())):
        group = index // config.group_size
        credit = [config.process_reward_coef * g for g in process[index]]
        rows.append({
            "group": group, "task_seed": episode.seed, "budget": episode.budget, "outcome": outcome(episode),
            "group_has_win": any(e.won for e in episodes[group * config.group_size:(group + 1) * config.group_size]),
            "turns": [{"action": t.action, "process_reward": t.process_reward, "process_credit": c,
                       "outcome_advantage": advantage, "advantage": advantage + c}
                      for t, c in zip(episode.turns, credit)],
        })
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean per-turn figures by outcome, and by outcome within groups with / without a win."""
    def cell(selected: list[dict[str, Any]]) -> dict[str, Any]:
        turns = [t for r in selected for t in r["turns"]]
        if not selected:
            return {"episodes": 0}
        return {
            "episodes": len(selected),
            "turns_per_episode": float(np.mean([len(r["turns"]) for r in selected])),
            "process_reward_sum": float(np.mean([sum(t["process_reward"] for t in r["turns"]) for r in selected])),
            "outcome_advantage": float(np.mean([r["turns"][0]["outcome_advantage"] for r in selected if r["turns"]])),
            "process_credit_per_turn": float(np.mean([t["process_credit"] for t in turns])),
            "process_credit_summed_over_turns": float(np.mean([sum(t["process_credit"] for t in r["turns"])
                                                               for r in selected])),
            "process_credit_last_turn": float(np.mean([r["turns"][-1]["process_credit"] for r in selected if r["turns"]])),
            "advantage_per_turn": float(np.mean([t["advantage"] for t in turns])),
            "advantage_summed_over_turns": float(np.mean([sum(t["advantage"] for t in r["turns"]) for r in selected])),
            "turns_with_positive_advantage": float(np.mean([t["advantage"] > 0 for t in turns])),
            "turns_with_negative_advantage": float(np.mean([t["advantage"] < 0 for t in turns])),
        }

    result: dict[str, Any] = {}
    for name in ("win", "loss", "timeout"):
        mine = [r for r in rows if r["outcome"] == name]
        result[name] = {"all": cell(mine), "group_with_win": cell([r for r in mine if r["group_has_win"]]),
                        "group_without_win": cell([r for r in mine if not r["group_has_win"]])}
    result["groups_without_win"] = float(np.mean([not r["group_has_win"] for r in rows]))
    return result


def print_summary(env_id: str, scripted: dict[str, Any], sampled: dict[str, Any]) -> None:
    print(f"\n== {env_id}: the signal on hand-played paths (coef {scripted['coef']}) ==")
    for name, row in scripted["paths"].items():
        print(f"  {name:<38} rewards {row['process_rewards']}  G_t {[round(g, 3) for g in row['returns_to_go']]}")
    print(f"== {env_id}: {sampled['episodes']} sampled episodes, {sampled['groups']} groups "
          f"({100 * sampled['summary']['groups_without_win']:.0f} % of episodes in a group without a win) ==")
    keys = ("episodes", "turns_per_episode", "process_reward_sum", "outcome_advantage", "process_credit_per_turn",
            "process_credit_last_turn", "process_credit_summed_over_turns", "advantage_per_turn",
            "turns_with_positive_advantage")
    print("  " + " | ".join(["outcome (groups)"] + [k.replace("_", " ") for k in keys]))
    for name in ("win", "loss", "timeout"):
        for part in ("group_with_win", "group_without_win"):
            cell = sampled["summary"][name][part]
            if cell["episodes"]:
                print(f"  {name} ({part.replace('_', ' ')}) | " + " | ".join(
                    f"{cell[k]:.3g}" if isinstance(cell[k], float) else str(cell[k]) for k in keys))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", action="append", choices=sorted(ENVS), help="repeatable (default: both)")
    parser.add_argument("--groups", type=int, default=16, help="sampled groups per env (x group_size episodes)")
    parser.add_argument("--seed", type=int, default=0, help="the smoke run's seed (model init and warm-up)")
    parser.add_argument("--coef", type=float, default=0.5, help="process_reward_coef (the study's 0.5)")
    parser.add_argument("--train-updates", type=int, default=0, help="updates of the arm's own run before sampling")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a TrainConfig override")
    parser.add_argument("--label", default="current")
    parser.add_argument("--out", default=None, help="default docs/data/process-reward-trace/<label>.json")
    args = parser.parse_args(argv)

    from agentgym_budget.train.learning_check import parse_overrides

    started = provenance(sys.argv)
    overrides = parse_overrides(args.set)
    report: dict[str, Any] = {"coef": args.coef, "seed": args.seed,
                              "train_updates": args.train_updates, "overrides": overrides, "envs": {}}
    for env_id in args.env_id or list(ENVS):
        config, episodes = sampled_episodes(env_id, args.groups, args.seed, args.coef, args.train_updates, overrides)
        scripted = scripted_paths(env_id, args.coef, config.process_gamma)
        rows = credit_rows(config, episodes)
        sampled = {"budget": config.budget, "groups": args.groups, "group_size": config.group_size,
                   "episodes": len(rows), "summary": summary(rows), "episode_traces": rows}
        report["envs"][env_id] = {"scripted": scripted, "sampled": sampled}
        print_summary(env_id, scripted, sampled)
    out = Path(args.out or Path(__file__).resolve().parents[1] / "docs/data/process-reward-trace" / f"{args.label}.json")
    write_results(out, started, report)  # provenance first, with the load at the end too
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()

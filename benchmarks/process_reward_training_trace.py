"""Per-turn credit traces DURING training: what the learner is told per kind of turn, update after update.

Issue 40, what was left after the first fixes: on KeyDoorRooms, ``mix`` + ``expert_progress``
(coefficient 0.5, group-normalised) rose to 0.41 training success by update 20, then fell to
0.11 with 21 % invalid actions.  :mod:`benchmarks.process_reward_trace` credits episodes of a
frozen model; this script runs the arm's own training (the smoke run's config, the study's
``mix`` budgets) and, at every update, credits that update's episodes with the trainer's own
functions (:func:`~agentgym_budget.train.grpo.group_advantages`,
:func:`~agentgym_budget.train.grpo.turn_credits`) — the very numbers the loss used — and sorts
every turn by what it did, from a replay of the episode in a fresh env with the same seed:

* ``progress`` / ``regress`` — a valid move that shortened / lengthened the expert's plan;
* ``invalid`` — not an admissible command (``"Nothing happens."``); ``no_effect`` — admissible
  but nothing changed (a locked door);
* ``win_door`` / ``loss_door`` — the turn that won / lost;
* ``stall_at_doors`` — any turn other than opening a door, taken where the goal door could be
  opened (in the last room with the key): the alternative to betting on a door.

Per kind: its share of turns, the mean outcome advantage, the turn's own normalised process
reward ``c * z_t``, its process credit ``c * G_t`` (return-to-go of ``z``), the total, and the share
of turns the total pushes up.  Per update also the door decisions (how often a turn at the doors
opened one, how often the opened one was the goal), the scale of the process term against the
outcome term, the share of groups whose pooled per-turn mean reward is <= 0 (where a turn that
did nothing is credited >= 0), and the trainer's own metrics (success, invalid rate, entropy, KL).

``--arm mix`` records the process signal but weights it 0 (``process_reward_coef=0``): by
construction outcome-only ``mix`` training (the wrapper only adds ``info``, returns are the win, the
process term is multiplied by 0) — not checked run for run against a ``mix`` run, and not run here.
``--norm rewards`` traces the credit before issue 40's second fix.  Written to ``--out`` (default
``docs/data/process-reward-trace/<label>.json``) with command, commit and load.

Run::

    python benchmarks/process_reward_training_trace.py --arm mix+pr --updates 60 --label rooms-training-mix-pr
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path[0] = str(Path(__file__).resolve().parents[1])  # the checkout, not benchmarks/ (see budgetmix_study.py)

from benchmarks.provenance import provenance, write_results  # noqa: E402

MIX = {"KeyDoor-v0": "mix:2,3,4,6", "KeyDoorRooms-v0": "mix:4,5,6,8"}  # the study's mix budgets
KINDS = ("progress", "regress", "invalid", "no_effect", "win_door", "loss_door", "stall_at_doors")


def turn_kinds(config: Any, episode: Any) -> tuple[list[set[str]], int]:
    """Each turn's kinds (module docstring) from a replay of ``episode`` in a fresh env with its seed,
    and the number of turns whose replayed process reward differs from the recorded one (0 expected)."""
    from agentgym_budget.train.rollout import make_train_env

    env = make_train_env(config)
    _, info = env.reset(seed=episode.seed)
    kinds, mismatches = [], 0
    for turn in episode.turns:
        at_doors = len(info.get("expert_plan") or ()) == 1  # only "open <goal> door" left
        _, _, terminated, truncated, info = env.step(turn.action)
        mismatches += abs(float(info["process_reward"]) - turn.process_reward) > 1e-9
        effect = str(info.get("action_effect", ""))
        mine = {"win_door"} if info.get("won") else {"loss_door"} if info.get("lost") else set()
        if not mine:
            mine = {"invalid" if effect == "invalid" else "no_effect" if effect == "no_effect" else
                    "progress" if turn.process_reward > 0 else "regress" if turn.process_reward < 0 else effect}
        if at_doors and not turn.action.startswith("open "):
            mine.add("stall_at_doors")
        kinds.append(mine)
        if terminated or truncated:
            break
    env.close()
    return kinds, mismatches


def update_trace(config: Any, episodes: list[Any]) -> dict[str, Any]:
    """The credits of one update's episodes, by kind of turn (module docstring)."""
    import torch

    from agentgym_budget.train.grpo import group_advantages, turn_credits

    coef, gamma = config.process_reward_coef, config.process_gamma
    returns = torch.tensor([float(e.won) for e in episodes])
    advantages = group_advantages(returns, config.group_size, "grpo", config.scale_by_std,
                                  failed=[e.failed for e in episodes]).tolist()
    credits = turn_credits(episodes, config.group_size, gamma, config.process_reward_norm)
    by_kind: dict[str, list[tuple[float, float, float]]] = defaultdict(list)  # (A, c*z, c*G)
    turns, mismatches, outcome_terms, process_terms, totals = 0, 0, [], [], []
    door_turns = opened = opened_goal = 0
    for episode, advantage, to_go in zip(episodes, advantages, credits):
        kinds, bad = turn_kinds(config, episode)
        mismatches += bad
        for t, mine in enumerate(kinds):
            g = to_go[t]
            z = g - gamma * to_go[t + 1] if t + 1 < len(to_go) else g
            for kind in mine:
                by_kind[kind].append((advantage, coef * z, coef * g))
            turns += 1
            outcome_terms.append(advantage)
            process_terms.append(coef * g)
            totals.append(advantage + coef * g)
            if "stall_at_doors" in mine or mine & {"win_door", "loss_door"}:
                door_turns += 1
                opened += bool(mine & {"win_door", "loss_door"})
                opened_goal += "win_door" in mine
    pooled_nonpositive = 0
    groups = len(episodes) // config.group_size
    for g in range(groups):
        from agentgym_budget.train.grpo import loss_rule
        rewards = [r for e in episodes[g * config.group_size:(g + 1) * config.group_size]
                   for r in loss_rule([t.process_reward for t in e.turns], e.lost, gamma)]
        pooled_nonpositive += bool(rewards) and float(np.mean(rewards)) <= 0
    kinds_out = {}
    for kind in KINDS:
        rows = np.array(by_kind.get(kind, []), dtype=float).reshape(-1, 3)
        if len(rows) == 0:
            kinds_out[kind] = {"share": 0.0}
            continue
        total = rows[:, 0] + rows[:, 2]
        kinds_out[kind] = {"share": len(rows) / max(turns, 1), "outcome_advantage": float(rows[:, 0].mean()),
                           "own_process_reward": float(rows[:, 1].mean()), "process_credit": float(rows[:, 2].mean()),
                           "total": float(total.mean()), "pushed_up": float((total > 0).mean()),
                           "process_credit_positive": float((rows[:, 2] > 0).mean())}
    outcomes = {"win": sum(e.won for e in episodes), "loss": sum(e.lost for e in episodes),
                "timeout": sum(not e.terminated for e in episodes)}
    return {"turns": turns, "outcomes": outcomes, "kinds": kinds_out,
            "door_turns": door_turns, "door_open_rate": opened / max(door_turns, 1),
            "goal_door_share_of_opened": opened_goal / max(opened, 1),
            "mean_abs_outcome_advantage": float(np.mean(np.abs(outcome_terms))),
            "mean_abs_process_credit": float(np.mean(np.abs(process_terms))),
            # over every turn: where the update's level sits (a mean below 0 pushes most sampled turns down)
            "mean_outcome_advantage": float(np.mean(outcome_terms)), "mean_process_credit": float(np.mean(process_terms)),
            "mean_total_advantage": float(np.mean(totals)), "turns_pushed_up": float(np.mean(np.array(totals) > 0)),
            "groups_with_pooled_mean_reward_le_0": pooled_nonpositive / max(groups, 1),
            "replay_mismatches": mismatches}


def print_row(update: int, metrics: dict[str, float], trace: dict[str, Any]) -> None:
    k = trace["kinds"]
    cell = lambda kind: (f"{kind[:6]} {100 * k[kind]['share']:.0f}%:{k[kind]['process_credit']:+.2f}/"  # noqa: E731
                         f"{k[kind]['total']:+.2f}" if k[kind]["share"] else f"{kind[:6]} -")
    print(f"u{update:3d} succ {metrics['success_rate']:.2f} inv {metrics['invalid_action_rate']:.2f} "
          f"ent {metrics['entropy']:.2f} kl {metrics.get('kl', 0):.3f} | W/L/T {trace['outcomes']['win']}/"
          f"{trace['outcomes']['loss']}/{trace['outcomes']['timeout']} doors open {trace['door_open_rate']:.2f} "
          f"goal {trace['goal_door_share_of_opened']:.2f} | |A| {trace['mean_abs_outcome_advantage']:.2f} "
          f"|cG| {trace['mean_abs_process_credit']:.2f} mean cG {trace['mean_process_credit']:+.2f} | " + " ".join(cell(kind) for kind in KINDS), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="KeyDoorRooms-v0", choices=sorted(MIX))
    parser.add_argument("--arm", default="mix+pr", choices=("mix", "mix+pr"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--coef", type=float, default=0.5, help="process_reward_coef of mix+pr (the study's 0.5)")
    parser.add_argument("--norm", default=None, choices=("none", "rewards", "group"),
                        help="process_reward_norm (default: the trainer's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a TrainConfig override")
    parser.add_argument("--label", default=None, help="default rooms-training-<arm>-seed<s>")
    parser.add_argument("--out", default=None, help="default docs/data/process-reward-trace/<label>.json")
    args = parser.parse_args(argv)

    from agentgym_budget.train.config import keydoor_smoke_config
    from agentgym_budget.train.learning_check import parse_overrides
    from agentgym_budget.train.trainer import Trainer

    started = provenance(sys.argv)
    overrides = parse_overrides(args.set)
    config = keydoor_smoke_config(seed=args.seed, env_id=args.env_id, budget=MIX[args.env_id],
                                  process_reward="expert_progress",
                                  process_reward_coef=args.coef if args.arm == "mix+pr" else 0.0,
                                  **({"process_reward_norm": args.norm} if args.norm else {}),
                                  total_updates=args.updates, output_dir=tempfile.mkdtemp(prefix="pr_train_trace_"),
                                  **overrides)
    trainer = Trainer(config)
    collected: list[Any] = []
    collect = trainer.rollout_pool.collect

    def recording_collect(*a: Any, **kw: Any) -> Any:
        episodes = collect(*a, **kw)
        collected.append(episodes)
        return episodes

    trainer.rollout_pool.collect = recording_collect
    cpu = time.process_time()
    updates = []
    for _ in range(args.updates):
        collected.clear()
        metrics = trainer.train_step()
        trace = update_trace(config, [e for part in collected for e in part])
        keep = ("success_rate", "invalid_action_rate", "turns_mean", "entropy", "kl", "approx_kl_old",
                "clip_fraction", "grad_norm", "zero_advantage_groups", "process_return_mean")
        updates.append({"update": metrics["update"], "metrics": {k: metrics[k] for k in keep if k in metrics},
                        **trace})
        print_row(metrics["update"], metrics, trace)
    trainer.rollout_pool.close()
    label = args.label or f"rooms-training-{args.arm.replace('+', '-')}-seed{args.seed}"
    report = {"env_id": args.env_id, "arm": args.arm, "seed": args.seed,
              "budget": config.budget, "process_reward_coef": config.process_reward_coef,
              "process_reward_norm": config.process_reward_norm, "overrides": overrides,
              "cpu_seconds": time.process_time() - cpu, "updates": updates}
    out = Path(args.out or Path(__file__).resolve().parents[1] / "docs/data/process-reward-trace" / f"{label}.json")
    write_results(out, started, report)  # provenance first, with the load at the end too
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

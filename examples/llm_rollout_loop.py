"""An LLM-RL rollout loop with our envs as the tool: prompt -> generate -> env.step(text).

The loop any LLM trainer (TRL's GRPOTrainer with a custom ``rollout_func``, OpenRLHF, verl,
your own) runs around a text env, written out once:

    envs      make_text_vector_env(...)  AsyncVectorEnv, one process per env, NEXT_STEP autoreset
              under TurnBudget(show_budget=True) (the budget is in the text) and ProcessReward
    prompt    agentgym_budget.policies.prompting.build_messages(task, history, admissible=...)
    generate  YOUR MODEL: list of conversations -> list of completions  (see ``make_generate``)
    act       parse_action(completion, admissible) -> env.step(list of commands)
    output    one record per turn (prompt, completion, outcome and process reward) and per
              episode (return, won, turns, GRPO-style group-normalised advantage) as JSONL

It runs offline: ``--generator stand-in`` (default) is a stand-in "model" that answers with a
random listed command; ``--generator tiny-hf`` runs the tiny offline Hugging Face model
through the project's batched chat backend (the code path of a real local model; the model is
untrained, so the actions are nonsense).  Plug a real model in ``make_generate``.

Run:
    python examples/llm_rollout_loop.py --episodes 16 --num-envs 4
    python examples/llm_rollout_loop.py --env-id KeyDoor-Budget-v0 --env-kwargs '{}' --generator tiny-hf
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import agentgym_budget  # noqa: F401  (registers the env ids)
from agentgym_budget.integrations.vector import make_text_vector_env
from agentgym_budget.policies.chat import Message
from agentgym_budget.policies.prompting import build_messages, parse_action
from agentgym_budget.wrappers import ProcessReward

Generate = Callable[[list[list[Message]]], list[str]]


@dataclass
class Args:
    env_id: str = "ALFWorld-Budget-v0"
    env_kwargs: dict[str, Any] = field(default_factory=lambda: {"engine": "fast"})
    budget: str = "mix:10,20,30"  # BudgetMix: each episode draws its budget
    process_signal: str = "expert_progress"  # ProcessReward signal ("" for none)
    process_coef: float = 0.1
    num_envs: int = 4
    episodes: int = 16  # rounded up to a multiple of num_envs
    generator: str = "stand-in"  # "stand-in" | "tiny-hf"
    seed: int = 0
    out: str = "runs/llm_rollout_loop"


# -- the model -------------------------------------------------------------------------------
_COMMANDS = re.compile(r"^Available commands: (.*)$", re.MULTILINE)


def make_generate(name: str, seed: int, env_id: str) -> Generate:
    """``conversations -> completions``.  Replace this with your model.

    With a local ``transformers`` model: ``HFChatBackend(model, tokenizer).complete(...)`` (as
    ``tiny-hf`` does: one left-padded batch, KV cache).  With a served model:
    ``OpenAIChatBackend(model, base_url=...)`` from ``agentgym_budget.policies.served``.
    Inside TRL's ``GRPOTrainer(rollout_func=...)`` the trainer's own generation is used and
    token ids / logprobs are returned with the completions (see docs/integrations.md).
    """
    rng = np.random.default_rng(seed)
    if name == "stand-in":
        def generate(conversations: list[list[Message]]) -> list[str]:
            completions = []
            for messages in conversations:
                commands = _COMMANDS.findall(messages[-1]["content"])[-1].split(", ")
                completions.append(f"I will try something.\nAction: {commands[int(rng.integers(len(commands)))]}")
            return completions
        return generate
    if name == "tiny-hf":
        from agentgym_budget.policies.chat import Sampling
        from agentgym_budget.policies.hf import HFChatBackend
        from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer

        backend = HFChatBackend(*tiny_model_and_tokenizer(env_id.replace("-Budget", ""), seed=seed))

        def generate(conversations: list[list[Message]]) -> list[str]:
            seeds = rng.integers(2**31, size=len(conversations)).tolist()
            return [c.text for c in backend.complete(conversations, seeds, Sampling(temperature=1.0, max_new_tokens=12))]
        return generate
    raise ValueError(f"unknown generator {name!r}; use 'stand-in' or 'tiny-hf'")


# -- the loop ----------------------------------------------------------------------------------
def collect(args: Args, generate: Generate) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Roll out ``args.episodes`` episodes; return (turn records, episode records).

    Every env plays the same number of episodes (``episodes / num_envs``, rounded up): keeping
    "the first N episodes to finish" would over-sample short episodes.
    """
    wrappers = [lambda env: ProcessReward(env, args.process_signal, args.process_coef)] if args.process_signal else []
    envs = make_text_vector_env(args.env_id, args.num_envs, budget=args.budget, show_budget=True,
                                wrappers=wrappers, **args.env_kwargs)
    observations, infos = envs.reset(seed=args.seed)
    histories: list[list[tuple[str, str]]] = [[] for _ in observations]
    turns: list[list[dict[str, Any]]] = [[] for _ in range(args.num_envs)]
    finished = np.zeros(args.num_envs, dtype=bool)  # NEXT_STEP autoreset: the next step is a reset step
    episode_ids = list(range(args.num_envs))
    next_episode = args.num_envs
    quota = -(-args.episodes // args.num_envs)
    done_count = np.zeros(args.num_envs, dtype=int)
    turn_records: list[dict[str, Any]] = []
    episode_records: list[dict[str, Any]] = []
    try:
        while done_count.min() < quota:
            prompts = [build_messages(infos["task"][i], [*histories[i], (observations[i], None)],
                                      admissible=infos["admissible_commands"][i]) for i in range(args.num_envs)]
            completions = generate(prompts)  # <- the model
            actions = [parse_action(completions[i], infos["admissible_commands"][i]) for i in range(args.num_envs)]
            shown = observations
            observations, rewards, terminations, truncations, infos = envs.step(actions)
            for i in range(args.num_envs):
                if finished[i]:  # this step reset env i: its action was ignored, a new episode starts
                    histories[i], turns[i], finished[i] = [], [], False
                    episode_ids[i], next_episode = next_episode, next_episode + 1
                    continue
                histories[i].append((shown[i], completions[i]))
                turns[i].append({
                    "episode": episode_ids[i], "turn": int(infos["turn"][i]), "prompt": prompts[i],
                    "completion": completions[i], "action": actions[i], "reward": float(rewards[i]),
                    "outcome_reward": float(infos["outcome_reward"][i]) if "outcome_reward" in infos else float(rewards[i]),
                    "process_reward": float(infos["process_reward"][i]) if "process_reward" in infos else 0.0,
                })
                if terminations[i] or truncations[i]:
                    finished[i] = True
                    done_count[i] += 1
                    if done_count[i] <= quota:
                        turn_records += turns[i]
                        episode_records.append({
                            "episode": episode_ids[i], "task": str(infos["task"][i]), "won": bool(infos["won"][i]),
                            "budget": int(infos["budget"][i]), "turns": len(turns[i]),
                            "return": sum(t["reward"] for t in turns[i]),
                            "outcome": sum(t["outcome_reward"] for t in turns[i]),
                        })
    finally:
        envs.close()
    add_group_advantages(episode_records)
    return turn_records, episode_records


def add_group_advantages(episodes: list[dict[str, Any]]) -> None:
    """GRPO-style: an episode's advantage is its return normalised within its task's group."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for episode in episodes:
        groups[episode["task"]].append(episode)
    for group in groups.values():
        returns = np.array([e["return"] for e in group])
        for episode, value in zip(group, (returns - returns.mean()) / (returns.std() + 1e-6)):
            episode["advantage"] = float(value)


def main(args: Args) -> dict[str, Any]:
    turn_records, episode_records = collect(args, make_generate(args.generator, args.seed, args.env_id))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "turns.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turn_records))
    (out / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episode_records))
    summary = {
        "episodes": len(episode_records), "turns": len(turn_records),
        "success_rate": float(np.mean([e["won"] for e in episode_records])),
        "mean_turns": float(np.mean([e["turns"] for e in episode_records])),
        "mean_process_reward_per_turn": float(np.mean([t["process_reward"] for t in turn_records])),
    }
    print(json.dumps(summary, indent=2))
    return summary


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, value in vars(Args()).items():
        kind = json.loads if isinstance(value, dict) else type(value)
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=value, help="(default: %(default)s)")
    return Args(**vars(parser.parse_args(argv)))


if __name__ == "__main__":
    main(parse_args())

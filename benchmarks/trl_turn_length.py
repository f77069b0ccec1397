"""How long one ALFWorld turn is in a TRL completion: the number behind ``max_completion_length``.

TRL's ``max_completion_length`` counts the whole multi-turn completion: every tool call the
model writes and every tool result (the env's observation, the admissible commands, the budget
shown) rendered by the chat template.  This plays ``--episodes`` episodes of
``ALFWorld-Budget-v0`` through :class:`~agentgym_budget.integrations.trl_env.BudgetToolEnv`
with random admissible commands (a model early in training) and, optionally, the expert's
(a trained one), renders each turn with TRL's Qwen2.5 chat template exactly as TRL renders a
rollout, and reports characters per turn (mean, 95th percentile, max) and per episode.

No real model tokenizer is available offline here, so tokens are *estimated* from characters
(``--chars-per-token``, default 3.0: ALFWorld's lists of numbered objects and the JSON of a tool
call tokenize denser than prose, for which BPE tokenizers give ~4).  With a tokenizer at hand,
``--tokenizer NAME`` counts its tokens instead.

Run (about 20 CPU-seconds):
    python benchmarks/trl_turn_length.py --episodes 20 --budget 50
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.integrations.trl_env import BudgetToolEnv, chatml_tool_tokenizer
from agentgym_budget.policies.tiny_model import build_tokenizer, env_corpus


def turn_texts(env: BudgetToolEnv, render, command: str) -> str:
    """One turn as it lands in the completion: the assistant's tool call and the tool's result."""
    result = env.act(command)
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "act", "arguments": {"command": command}}}]}
    return render([call, {"role": "tool", "name": "act", "content": result}])


def measure(policy: str, episodes: int, budget: int, render, size, seed: int) -> dict[str, list[int]]:
    """Per turn and per episode: ``size`` of the rendered text (characters or tokens)."""
    rng = np.random.default_rng(seed)
    env = BudgetToolEnv("ALFWorld-Budget-v0", budget=budget, show_budget=True, engine="fast")
    turns, per_episode = [], []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total = 0
        while not env.session.done:
            info = env.session.info
            command = info["expert_action"] if policy == "expert" else str(rng.choice(env.session.admissible_commands))
            total += (n := size(turn_texts(env, render, command)))
            turns.append(n)
        per_episode.append(total)
    return {"turn": turns, "episode": per_episode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chars-per-token", type=float, default=3.0)
    parser.add_argument("--tokenizer", default=None, help="a Hugging Face tokenizer to count real tokens with")
    args = parser.parse_args()

    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        unit, size = "tokens", lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])
    else:  # the text TRL's Qwen2.5 template renders; the tiny tokenizer only hosts the template
        tokenizer = chatml_tool_tokenizer(build_tokenizer(env_corpus("ALFWorld-v0")))
        unit, size = "chars", len

    def render(messages: list[dict]) -> str:
        # a rendered conversation minus the same one without these messages: exactly their text
        head = [{"role": "user", "content": "x"}]
        full = tokenizer.apply_chat_template(head + messages, tokenize=False)
        return full[len(tokenizer.apply_chat_template(head, tokenize=False)):]

    for policy in ("random", "expert"):
        lengths = measure(policy, args.episodes, args.budget, render, size, args.seed)
        turn = np.array(lengths["turn"])
        episode = np.array(lengths["episode"])
        row = {"policy": policy, "budget": args.budget, "episodes": args.episodes, "turns": int(turn.size),
               "unit": unit, "per_turn_mean": round(float(turn.mean()), 1),
               "per_turn_p95": float(np.percentile(turn, 95)), "per_turn_max": int(turn.max()),
               "per_episode_mean": round(float(episode.mean()), 1), "per_episode_max": int(episode.max())}
        if unit == "chars":
            row["est_tokens_per_turn_mean"] = round(row["per_turn_mean"] / args.chars_per_token, 1)
            row["est_tokens_per_turn_p95"] = round(row["per_turn_p95"] / args.chars_per_token, 1)
            row["est_tokens_per_episode_max"] = round(row["per_episode_max"] / args.chars_per_token)
        print(json.dumps(row))


if __name__ == "__main__":
    main()

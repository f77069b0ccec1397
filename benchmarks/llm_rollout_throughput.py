"""LLM rollout throughput: batched local generation and a served model, side by side in one run.

Three measurements on ``ALFWorld-Budget-v0`` (bundled games, fast engine) with the tiny
offline model (2-layer Qwen2, a BPE tokenizer trained on ALFWorld's text; untrained, so its
replies run to the new-token limit — the worst case for generation time):

1. **Local HF model, batch 1 vs batch N** — the evaluator's in-flight runner
   (``SerialExecutor``) with ``concurrency=1`` and ``concurrency=N`` on the same policy;
   turns per second of each, and their ratio (target >= 10x at N = 32).
2. **Time outside the model at batch N** — wall time of the whole run minus the time spent
   inside the model's forward passes and the sampler (env steps, prompt building, chat
   template, tokenising, parsing, bookkeeping); target < 5 %.
3. **Served model, concurrency 1 vs 8** — the same tiny model converted to GGUF and served by
   llama.cpp's OpenAI-compatible server on 127.0.0.1 (``tools/llama_server.py``), driven
   through the ``openai`` policy; turns per second of each.  Skipped, saying so, when
   ``llama-cpp-python[server]`` is not installed (extra ``serve-test``).

Also printed: milliseconds per turn at batch 1 (target <= 150 ms with 48 new tokens).

Run:
    python benchmarks/llm_rollout_throughput.py                # about 3-6 minutes on 2 cores
    python benchmarks/llm_rollout_throughput.py --episodes-batched 32 --turns 8 --skip-served
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

ENV_ID = "ALFWorld-Budget-v0"


class TimedBackend:
    """Wraps an HFChatBackend and adds up the seconds spent generating (forward passes + sampler)."""

    def __init__(self, backend):
        self.backend, self.name = backend, backend.name
        self.model_seconds, self.calls = 0.0, 0
        decode = backend._decode

        def timed_decode(*args, **kwargs):
            start = time.perf_counter()
            try:
                return decode(*args, **kwargs)
            finally:
                self.model_seconds += time.perf_counter() - start
                self.calls += 1

        backend._decode = timed_decode

    def complete(self, conversations, seeds, sampling):
        return self.backend.complete(conversations, seeds, sampling)


def run(policy, episodes: int, turns: int, concurrency: int) -> tuple[float, float, int, list]:
    """Wall seconds, CPU seconds and turns for ``episodes`` episodes of at most ``turns`` turns at ``concurrency``.

    CPU seconds (this process) are the figure to trust on a shared machine: wall time there
    also counts the time other processes held the cores.
    """
    from agentgym_budget.eval.records import EpisodeJob
    from agentgym_budget.eval.runner import RolloutSpec, SerialExecutor

    spec = RolloutSpec(ENV_ID, policy, seed=0, max_budget=turns, concurrency=concurrency)
    jobs = [EpisodeJob(task, 0, turns) for task in range(episodes)]
    wall, cpu = time.perf_counter(), time.process_time()
    records = SerialExecutor().run(spec, jobs)
    return time.perf_counter() - wall, time.process_time() - cpu, sum(r.turns for r in records), records


def local(args: argparse.Namespace) -> None:
    import torch

    from agentgym_budget.policies.chat import Sampling
    from agentgym_budget.policies.hf import HFChatBackend
    from agentgym_budget.policies.llm import LLMPolicy
    from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer

    torch.set_num_threads(args.threads)
    model, tokenizer = tiny_model_and_tokenizer("ALFWorld-v0")
    sampling = Sampling(temperature=1.0, max_new_tokens=args.new_tokens)
    timed = TimedBackend(HFChatBackend(model, tokenizer, name="hf(tiny)"))
    policy = LLMPolicy(timed, sampling)
    run(policy, 2, 2, 2)  # warm-up: first-call costs (allocator, kernels) out of the figures

    timed.model_seconds = 0.0
    s1, c1, n1, r1 = run(policy, args.episodes_single, args.turns, 1)
    model1 = timed.model_seconds
    timed.model_seconds = 0.0
    sn, cn, nn, rn = run(policy, args.episodes_batched, args.turns, args.batch)
    modeln = timed.model_seconds
    tokens1 = sum(r.completion_tokens for r in r1) / n1
    same = rn[: len(r1)] == r1
    print(f"local HF tiny model, {ENV_ID}, T={args.turns}, {args.new_tokens} new tokens max, "
          f"torch threads {args.threads}")
    print(f"  batch 1 : {n1:5d} turns, wall {s1:7.2f} s = {n1 / s1:6.2f} turns/s, CPU {c1:7.2f} s = {n1 / c1:6.2f} "
          f"turns/CPU-s  ({1000 * c1 / n1:.0f} CPU-ms/turn, {tokens1:.1f} new tokens/turn, outside the model "
          f"{100 * (s1 - model1) / s1:.1f} %)")
    print(f"  batch {args.batch:<2d}: {nn:5d} turns, wall {sn:7.2f} s = {nn / sn:6.2f} turns/s, CPU {cn:7.2f} s = "
          f"{nn / cn:6.2f} turns/CPU-s  (outside the model {100 * (sn - modeln) / sn:.1f} % of wall time)")
    print(f"  ratio batch {args.batch} / batch 1: {(nn / sn) / (n1 / s1):.1f}x turns/s (wall), "
          f"{(nn / cn) / (n1 / c1):.1f}x turns/CPU-s; the {len(r1)} shared episodes identical: {same}")


def served(args: argparse.Namespace) -> None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("served: skipped — llama-cpp-python[server] is not installed (pip install -e '.[serve-test]')")
        return
    import tempfile

    from agentgym_budget.policies import make_policy
    from tools.llama_server import LlamaServer, export_tiny_gguf

    with tempfile.TemporaryDirectory() as folder:
        gguf = export_tiny_gguf(Path(folder) / "tiny.gguf", env_id="ALFWorld-v0")
        # llama-cpp-python's server generates one request at a time (there is no n_parallel):
        # concurrency overlaps only the HTTP work and the env steps around generation.
        with LlamaServer(gguf, n_ctx=4096, n_threads=args.threads, prompt_cache=True) as server:
            print(f"served: llama.cpp server at {server.base_url}, model {server.model}")
            figures = {}
            for concurrency in (1, args.served_concurrency):
                policy = make_policy("openai", model=server.model, base_url=server.base_url, temperature=1.0,
                                     max_new_tokens=args.new_tokens, max_concurrency=concurrency)
                run(policy, 2, 2, concurrency)  # warm-up
                seconds, _, turns, _ = run(policy, args.episodes_served, args.turns, concurrency)
                figures[concurrency] = turns / seconds
                print(f"  concurrency {concurrency}: {turns} turns in {seconds:.2f} s = {turns / seconds:.2f} turns/s")
            print(f"  ratio concurrency {args.served_concurrency} / 1: "
                  f"{figures[args.served_concurrency] / figures[1]:.2f}x turns/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=10, help="turn budget of every episode")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--batch", type=int, default=32, help="episodes in flight in the batched run")
    parser.add_argument("--episodes-single", type=int, default=4, help="episodes of the batch-1 run")
    parser.add_argument("--episodes-batched", type=int, default=32, help="episodes of the batched run")
    parser.add_argument("--episodes-served", type=int, default=16)
    parser.add_argument("--served-concurrency", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (and llama.cpp's)")
    parser.add_argument("--skip-served", action="store_true")
    args = parser.parse_args()
    import agentgym_budget  # noqa: F401  (registers the envs)

    local(args)
    if not args.skip_served:
        served(args)


if __name__ == "__main__":
    main()

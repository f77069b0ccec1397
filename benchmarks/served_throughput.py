"""Served-model figures: the tiny model behind a real llama.cpp server, over the OpenAI protocol.

Prints: GGUF size and conversion time (model build separately), server start time (until
``/v1/models`` answers), one request's latency (median over requests one at a time), and
completions/s for a batch of short conversations at ``max_concurrency`` 1 vs 8, side by side
(rounds alternate the two settings so machine load hits both alike; the median round counts).
Every request has a distinct seed and no cache, so each is really generated.

Then whole episodes: turns/s of the ``openai`` policy through the evaluator (``SerialExecutor``,
``ALFWorld-Budget-v0``, temperature 1) at concurrency 1 vs 8, with the server's prompt cache off
and on (``LlamaServer(prompt_cache=...)``, llama-cpp-python's ``--cache``).

Note: llama-cpp-python's server runs one generation at a time (a lock around its model) in one
KV-cache sequence, so concurrency overlaps only the HTTP/JSON work and env steps around
generation; vLLM/SGLang batch requests.  Without the prompt cache, interleaved episodes also
lose the prefix a turn shares with its episode's previous turn.

Run:  python benchmarks/served_throughput.py [--conversations 32] [--rounds 3] [--episodes 8] [--turns 10] [--json-out FILE]

``--json-out`` writes every figure with the command, commit and machine load (``benchmarks/provenance.py``);
docs/served.md's table is generated from that file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Run as a script: benchmarks/ (whose kernels.py would shadow the `kernels` package transformers
# imports) leaves sys.path, and the checkout's root (for tools/) comes first.
_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "benchmarks"]

from agentgym_budget.policies.chat import Sampling
from agentgym_budget.policies.served import OpenAIChatBackend
from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
from benchmarks.provenance import provenance, write_results
from tools.llama_server import LlamaServer, export_gguf


def conversations(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "system", "content": "You are an agent in a household. Answer with one action."},
             {"role": "user", "content": f"You are in the middle of a room. Looking around you, you see a "
                                         f"cabinet {i}, a drawer {i + 1}, a sinkbasin 1. Your task is to: put "
                                         f"a clean mug in coffeemachine. Turns left: {i % 10 + 1}."}]
            for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALFWorld-v0")
    parser.add_argument("--conversations", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--n-threads", type=int, default=1, help="llama.cpp threads")
    parser.add_argument("--episodes", type=int, default=8, help="episodes per run of the episode section")
    parser.add_argument("--turns", type=int, default=10, help="turn budget of those episodes")
    parser.add_argument("--json-out", default=None, help="write every figure (and provenance) to this JSON file")
    args = parser.parse_args()
    started = provenance(sys.argv)

    t0 = time.perf_counter()
    model, tokenizer = tiny_model_and_tokenizer(args.env)
    t1 = time.perf_counter()
    path = export_gguf(model, tokenizer, Path(tempfile.mkdtemp()) / "tiny.gguf", name=f"tiny-{args.env}")
    t2 = time.perf_counter()
    print(f"tiny model + tokenizer built      {t1 - t0:8.2f} s")
    print(f"GGUF f32 written                  {t2 - t1:8.3f} s  ({path.stat().st_size / 1024:.0f} KiB)")

    sampling = Sampling(temperature=1.0, max_new_tokens=args.max_new_tokens)
    convs = conversations(args.conversations)
    with LlamaServer(path, n_threads=args.n_threads) as server:
        print(f"server up (GET /v1/models answers) {server.startup_seconds:7.2f} s")
        startup_seconds = server.startup_seconds
        backends = {c: OpenAIChatBackend(server.model, base_url=server.base_url, max_concurrency=c, timeout=120)
                    for c in (1, 8)}
        backends[1].complete(convs[:2], [0, 1], sampling)  # warm-up: client, model check, first tokens
        backends[8].complete(convs[:2], [0, 1], sampling)

        latencies, tokens = [], []
        for i in range(10):
            start = time.perf_counter()
            [reply] = backends[1].complete([convs[i]], [1000 + i], sampling)
            latencies.append(time.perf_counter() - start)
            tokens.append((reply.prompt_tokens, reply.completion_tokens))
        print(f"one request: median latency       {statistics.median(latencies) * 1e3:7.1f} ms "
              f"(prompt ~{statistics.median(p for p, _ in tokens):.0f} tokens, "
              f"reply ~{statistics.median(c for _, c in tokens):.0f} tokens)")

        rates: dict[int, list[float]] = {1: [], 8: []}
        seed = 10_000
        for r in range(args.rounds):
            for c in ((1, 8) if r % 2 == 0 else (8, 1)):
                seeds = list(range(seed, seed + len(convs)))
                seed += len(convs)
                start = time.perf_counter()
                backends[c].complete(convs, seeds, sampling)
                rates[c].append(len(convs) / (time.perf_counter() - start))
        one, eight = statistics.median(rates[1]), statistics.median(rates[8])
        print(f"{len(convs)} conversations, completions/s: max_concurrency 1 {one:6.1f}   "
              f"max_concurrency 8 {eight:6.1f}   ratio {eight / one:.2f}x")
        for backend in backends.values():
            backend.close()

    episodes = {}
    for prompt_cache in (False, True):
        with LlamaServer(path, n_threads=args.n_threads, prompt_cache=prompt_cache) as server:
            figures = {c: episode_turns_per_second(server, c, args) for c in (1, 8)}
        episodes["prompt_cache_on" if prompt_cache else "prompt_cache_off"] = {str(c): v for c, v in figures.items()}
        print(f"episodes ({args.episodes} x <= {args.turns} turns), prompt cache {'on ' if prompt_cache else 'off'}: "
              f"turns/s concurrency 1 {figures[1]:5.1f}   concurrency 8 {figures[8]:5.1f}   "
              f"ratio {figures[8] / figures[1]:.2f}x")
    if args.json_out:
        results = {
            "env": args.env, "n_threads": args.n_threads, "max_new_tokens": args.max_new_tokens,
            "model_build_s": t1 - t0, "gguf_write_s": t2 - t1, "gguf_kib": path.stat().st_size / 1024,
            "server_startup_s": startup_seconds,
            "one_request": {"median_latency_s": statistics.median(latencies),
                            "median_prompt_tokens": statistics.median(p for p, _ in tokens),
                            "median_reply_tokens": statistics.median(c for _, c in tokens), "requests": len(latencies)},
            "conversations": len(convs), "rounds": args.rounds,
            "completions_per_s_by_round": {str(c): v for c, v in rates.items()},
            "episodes": args.episodes, "turns": args.turns, "episode_turns_per_s": episodes,
        }
        print(f"wrote {write_results(args.json_out, started, results)}")


def episode_turns_per_second(server: LlamaServer, concurrency: int, args: argparse.Namespace) -> float:
    """Turns/s of the openai policy on ``args.episodes`` episodes with ``concurrency`` in flight."""
    import agentgym_budget  # noqa: F401  (registers the envs)
    from agentgym_budget.episodes.records import EpisodeJob
    from agentgym_budget.episodes.runner import RolloutSpec, SerialExecutor
    from agentgym_budget.policies import make_policy

    policy = make_policy("openai", model=server.model, base_url=server.base_url, temperature=1.0,
                         max_new_tokens=args.max_new_tokens, max_concurrency=concurrency)

    def run(episodes: int, first_task: int) -> tuple[float, int]:
        spec = RolloutSpec("ALFWorld-Budget-v0", policy, seed=0, max_budget=args.turns, concurrency=concurrency)
        start = time.perf_counter()
        records = SerialExecutor().run(spec, [EpisodeJob(first_task + i, 0, args.turns) for i in range(episodes)])
        return time.perf_counter() - start, sum(r.turns for r in records)

    run(2, 1000)  # warm-up (other tasks)
    seconds, turns = run(args.episodes, 0)
    policy.backend.close()
    return turns / seconds


if __name__ == "__main__":
    main()

"""LLM rollout throughput: batched local generation and a served model, side by side in one run.

Three measurements on ``ALFWorld-Budget-v0`` (bundled games, fast engine) with the tiny
offline model (2-layer Qwen2, a BPE tokenizer trained on ALFWorld's text; untrained, so its
replies run to the new-token limit — the worst case for generation time):

1. **Local HF model, batch 1 vs batch N** — the evaluator's in-flight runner
   (``SerialExecutor``) with ``concurrency=1`` and ``concurrency=N`` on the same policy;
   turns per second of each, and their ratio (target >= 10x at N = 32).
2. **Time outside the model at batch N** — the run's time minus the time spent inside the
   model's forward passes and the sampler (env steps, prompt building, chat template,
   tokenising, parsing, bookkeeping), as a share of CPU time (the figure a shared machine does
   not distort) and of wall time; target < 5 %.
3. **Served model, concurrency 1 vs 8** — the same tiny model converted to GGUF and served by
   llama.cpp's OpenAI-compatible server on 127.0.0.1 (``tools/llama_server.py``), driven
   through the ``openai`` policy; turns per second of each.  Skipped, saying so, when
   ``llama-cpp-python[server]`` is not installed (extra ``serve-test``).

Also printed, per local run: CPU-ms per turn (target at batch 1: <= 60), CPU-ms per decode
step — one token for every row in flight — (target at batch 32: <= 3), prompt tokens run per
turn next to those reused from the episode's KV cache (target: the new observation and template
only), and the time outside the model.  ``--compile`` runs the local rows a second time with
the decode step through ``torch.compile`` (``HFChatBackend(compile=True)``), side by side.
The local rows run once per conversation format (``--history``, default ``replies,append``:
the evaluator's default prompt and the append-only one, ``LLMPolicy(history="append")``), and a
last table puts them side by side.

Run:
    python benchmarks/llm_rollout_throughput.py                # about 3-6 minutes on 2 cores
    python benchmarks/llm_rollout_throughput.py --episodes-batched 32 --turns 8 --skip-served
    python benchmarks/llm_rollout_throughput.py --compile --skip-served   # eager and compiled decode step

``--json-out FILE`` writes the local rows' figures (per format, eager/compiled, batch 1 and N) with the
command, commit and machine load (``benchmarks/provenance.py``); the targets table in
experiments/rollout_speed/README.md is generated from that file.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

ENV_ID = "ALFWorld-Budget-v0"


class ModelTimer:
    """Adds up the time an HFChatBackend spends in the model: whole calls (prompt passes, decode steps, the
    sampler: ``wall``/``cpu``) and the decode steps alone (``step_wall``/``step_cpu``, ``steps``, the rows they
    advanced, and with a ``FlopCounterMode`` given to :meth:`reset`, their FLOPs).

    It wraps the backend's own methods in place (the policy keeps talking to the backend itself,
    so per-episode KV reuse stays on).  ``benchmarks/smollm2_perf.py`` and ``decode_attention_ab.py`` use it too.
    """

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.reset()
        decode, step = backend._decode, backend._step

        def timed_decode(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return decode(*args, **kwargs)
            finally:
                self.wall += time.perf_counter() - wall
                self.cpu += time.process_time() - cpu

        def timed_step(*args: Any, **kwargs: Any) -> Any:
            flops_before = self.counter.get_total_flops() if self.counter is not None else 0
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return step(*args, **kwargs)
            finally:
                self.step_wall += time.perf_counter() - wall
                self.step_cpu += time.process_time() - cpu
                self.steps += 1
                self.step_rows += len(args[0].rows)
                if self.counter is not None:
                    self.step_flops += self.counter.get_total_flops() - flops_before

        backend._decode, backend._step = timed_decode, timed_step

    def reset(self, counter: Any = None) -> None:
        """Zero the sums; count the decode steps' FLOPs from now on with ``counter`` (a FlopCounterMode), if given."""
        self.wall = self.cpu = self.step_wall = self.step_cpu = 0.0
        self.steps = self.step_rows = self.step_flops = 0
        self.counter = counter
        self.prompt_tokens_run = self.backend.prompt_tokens_run
        self.reused_tokens = self.backend.reused_tokens

    def prompt_tokens(self) -> tuple[int, int]:
        """(prompt tokens run, prompt tokens reused from the cache) since :meth:`reset`."""
        return (self.backend.prompt_tokens_run - self.prompt_tokens_run,
                self.backend.reused_tokens - self.reused_tokens)


def run(policy, episodes: int, turns: int, concurrency: int) -> tuple[float, float, int, list]:
    """Wall seconds, CPU seconds and turns for ``episodes`` episodes of at most ``turns`` turns at ``concurrency``.

    CPU seconds (this process) are the figure to trust on a shared machine: wall time there
    also counts the time other processes held the cores.
    """
    from agentgym_budget.episodes.records import EpisodeJob
    from agentgym_budget.episodes.runner import RolloutSpec, SerialExecutor

    spec = RolloutSpec(ENV_ID, policy, seed=0, max_budget=turns, concurrency=concurrency)
    jobs = [EpisodeJob(task, 0, turns) for task in range(episodes)]
    wall, cpu = time.perf_counter(), time.process_time()
    records = SerialExecutor().run(spec, jobs)
    return time.perf_counter() - wall, time.process_time() - cpu, sum(r.turns for r in records), records


def local(args: argparse.Namespace, compile_step: bool, history: str) -> dict:
    import torch

    from agentgym_budget.policies.chat import Sampling
    from agentgym_budget.policies.hf import HFChatBackend
    from agentgym_budget.policies.llm import LLMPolicy
    from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer

    torch.set_num_threads(args.threads)
    model, tokenizer = tiny_model_and_tokenizer("ALFWorld-v0")
    sampling = Sampling(temperature=1.0, max_new_tokens=args.new_tokens)
    backend = HFChatBackend(model, tokenizer, name="hf(tiny)", compile=compile_step)
    timer = ModelTimer(backend)
    policy = LLMPolicy(backend, sampling, history=history)
    run(policy, 2, 2, 2)  # warm-up: first-call costs (allocator, kernels, compiling) out of the figures
    run(policy, args.batch, 2, args.batch)  # the batched shapes too (a compiled step specialises on them)
    run(policy, 1, 2, 1)  # and one row (a compiled step has a graph of its own for a single row)

    figures = {}
    for batch, episodes in ((1, args.episodes_single), (args.batch, args.episodes_batched)):
        timer.reset()
        wall, cpu, turns, records = run(policy, episodes, args.turns, batch)
        run_tokens, reused = timer.prompt_tokens()
        figures[batch] = dict(wall=wall, cpu=cpu, turns=turns, records=records, model_wall=timer.wall, model_cpu=timer.cpu,
                              step_ms=1000 * timer.step_cpu / max(timer.steps, 1), run_tokens=run_tokens / turns,
                              reused=reused / turns, new=sum(r.completion_tokens for r in records) / turns)
    one, many = figures[1], figures[args.batch]
    same = many["records"][: len(one["records"])] == one["records"]
    print(f"local HF tiny model, {ENV_ID}, T={args.turns}, {args.new_tokens} new tokens max, "
          f"torch threads {args.threads}, decode step {'compiled' if compile_step else 'eager'}, "
          f"LLMPolicy(history={history!r})")
    for batch, f in figures.items():
        print(f"  batch {batch:<2d}: {f['turns']:5d} turns, wall {f['wall']:7.2f} s = {f['turns'] / f['wall']:6.2f} "
              f"turns/s, CPU {f['cpu']:7.2f} s = {f['turns'] / f['cpu']:6.2f} turns/CPU-s "
              f"({1000 * f['cpu'] / f['turns']:.0f} CPU-ms/turn)")
        print(f"            {f['step_ms']:.2f} CPU-ms per decode step (one token for every row in flight), "
              f"{f['new']:.1f} new tokens/turn, prompt tokens per turn: {f['run_tokens']:.0f} run + "
              f"{f['reused']:.0f} reused from the cache, outside the model "
              f"{100 * (f['cpu'] - f['model_cpu']) / f['cpu']:.1f} % of CPU time "
              f"({1000 * (f['cpu'] - f['model_cpu']) / f['turns']:.2f} CPU-ms per turn; "
              f"{100 * (f['wall'] - f['model_wall']) / f['wall']:.1f} % of wall time)")
    print(f"  ratio batch {args.batch} / batch 1: {(many['turns'] / many['wall']) / (one['turns'] / one['wall']):.1f}x "
          f"turns/s (wall), {(many['turns'] / many['cpu']) / (one['turns'] / one['cpu']):.1f}x turns/CPU-s; "
          f"the {len(one['records'])} shared episodes identical: {same}")
    return figures


def side_by_side(args: argparse.Namespace, by_history: dict[str, dict]) -> None:
    """One line per conversation format: prompt tokens run per turn, turns per CPU-second at batch 1 and N, ratio."""
    print(f"side by side (the same run): prompt tokens run per turn, turns/CPU-s at batch 1 and {args.batch}, ratio")
    for history, figures in by_history.items():
        one, many = figures[1], figures[args.batch]
        print(f"  history={history:<8s} run {one['run_tokens']:4.0f} / {many['run_tokens']:4.0f} tokens per turn, "
              f"{one['turns'] / one['cpu']:6.2f} / {many['turns'] / many['cpu']:6.2f} turns/CPU-s, "
              f"ratio {(many['turns'] / many['cpu']) / (one['turns'] / one['cpu']):.1f}x")


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
    parser.add_argument("--history", default="replies,append",
                        help="LLMPolicy conversation formats to run, comma-separated (replies, actions, append)")
    parser.add_argument("--skip-served", action="store_true")
    parser.add_argument("--compile", action="store_true", help="also run the local rows with the compiled decode step")
    parser.add_argument("--json-out", default=None, help="write the local rows' figures (and provenance) to this JSON file")
    args = parser.parse_args()
    import agentgym_budget  # noqa: F401  (registers the envs)
    from benchmarks.provenance import provenance, write_results

    started = provenance(sys.argv)
    histories = args.history.split(",")
    runs = []
    for compile_step in (False, True) if args.compile else (False,):
        by_history = {history: local(args, compile_step, history) for history in histories}
        side_by_side(args, by_history)
        runs += [local_summary(args, history, compile_step, figures) for history, figures in by_history.items()]
    if not args.skip_served:
        served(args)
    if args.json_out:
        settings = {"env_id": ENV_ID, "turns": args.turns, "new_tokens": args.new_tokens, "batch": args.batch,
                    "episodes_single": args.episodes_single, "episodes_batched": args.episodes_batched,
                    "torch_threads": args.threads}
        print(f"wrote {write_results(args.json_out, started, {'settings': settings, 'runs': runs})}")


def local_summary(args: argparse.Namespace, history: str, compile_step: bool, figures: dict) -> dict:
    """One local configuration's figures for the results file: per batch size, the clocks and token counts."""
    one, many = figures[1], figures[args.batch]
    by_batch = {str(batch): {key: f[key] for key in ("wall", "cpu", "turns", "model_wall", "model_cpu", "step_ms",
                                                     "run_tokens", "reused", "new")}
                for batch, f in figures.items()}
    return {"history": history, "compiled": compile_step, "by_batch": by_batch,
            "shared_episodes": len(one["records"]),
            "shared_episodes_identical": many["records"][: len(one["records"])] == one["records"]}


if __name__ == "__main__":
    main()

"""SmolLM2-135M-Instruct on this CPU: the local backend and llama.cpp side by side, against the GEMM rate.

Issue 35's performance table, in one run (one process, the same machine state for every row):

1. **The machine's float32 GEMM rate** at the run's thread count: a square ``n x n`` matmul (the
   peak) and the model's own decode shape (``rows x hidden`` times ``hidden x intermediate``, the
   MLP's up projection) at 1, 8 and 32 rows, once with one weight hot in cache and once
   *streamed* (a different weight each call, ~256 MB in all, as a decode step reads its layers).
2. **The local backend** (``hf`` policy, ``model="smollm2"``: the GGUF de-quantised to float32 — and
   the same weights cast to bfloat16, ``model_kwargs={"dtype": torch.bfloat16}``, with the GEMM rates
   of that dtype beside them —, transformers, the project's batched decode with per-episode KV reuse)
   on KeyDoor's held-out
   split with the documented best prompt, greedy, at 1, 8 and 32 episodes in flight: turns/s,
   tokens/s, and its FLOP/s as a share of the GEMM rate — over the whole run and over the
   decode steps alone.  FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode`` on a
   replay of the same greedy run (the replay's records are checked identical; the timed run
   carries no counter).
3. **llama.cpp's C++ ``llama-server``** on the shipped Q4_1 GGUF with as many parallel slots as
   episodes in flight (continuous batching), driven by the project's ``openai`` policy with the
   same prompt and episodes: turns/s, tokens/s, and the time outside llama.cpp's own work —
   per request, the client's latency minus the ``timings`` the server reports for it
   (``prompt_ms + predicted_ms``), as a share of the latency.  The binary is built from the
   ``vendor/llama.cpp`` of the same llama-cpp-python sdist the ``serve-test`` extra installs
   (``--llama-server``; how to build it: ``experiments/rollout_speed/README.md``).
   Without it the served rows are skipped, saying so.  (llama-cpp-python's own Python server
   answers one request at a time, so it is not the comparison.)

Run:
    python benchmarks/smollm2_perf.py --llama-server /path/to/llama-server --out docs/data/smollm2-perf
    python benchmarks/smollm2_perf.py --in-flight 1,8 --skip-served        # the local rows only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.* and tools.*, from a checkout

from benchmarks.llm_rollout_throughput import ModelTimer  # noqa: E402
from benchmarks.provenance import provenance, write_results  # noqa: E402

ENV_ID = "KeyDoor-Budget-v0"
ENV_KWARGS = {"split": "test"}
#: The best prompt of the SmolLM2 evaluation table (``benchmarks/smollm2_eval.py``), greedy.
PROMPT_OPTIONS: dict[str, Any] = {"prompt": "action", "stop": ["\n", ","], "max_new_tokens": 16,
                                  "few_shot_env": "KeyDoor-v0", "few_shot_candidates": 10, "temperature": 0.0}


# -- the GEMM rate ----------------------------------------------------------------------------------
def matmul_rate(rows: int, inner: int, cols: int, seconds: float = 1.0, weights: int = 1,
                dtype: str = "float32") -> float:
    """GFLOP/s of ``[rows, inner]`` times an ``[inner, cols]`` weight in ``dtype``, the best of timed blocks.

    ``weights`` > 1: a different weight each call, cycling (as ``nn.Linear`` stores them, ``[cols, inner]``),
    so that each is read from memory as a model's decode step reads its layers' weights — not from cache.
    """
    import torch

    x = torch.randn(rows, inner, dtype=getattr(torch, dtype))
    matrices = [torch.randn(cols, inner, dtype=x.dtype) for _ in range(weights)]
    flops = 2.0 * rows * inner * cols
    per_block = max(weights, int(2e8 / flops))  # each timed block >= ~0.2 GFLOP and every weight once
    for matrix in matrices[:3]:
        torch.nn.functional.linear(x, matrix)  # warm-up: allocation, packing routines
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        for call in range(per_block):
            torch.nn.functional.linear(x, matrices[call % weights])
        best = max(best, per_block * flops / (time.perf_counter() - start))
    return best / 1e9


def gemm_rates(hidden: int, intermediate: int, row_counts: list[int], square: int, dtype: str) -> dict[str, float]:
    """The peak (a square GEMM) and the decode shape per row count, hot in cache and streamed from memory."""
    streamed = max(2, int(256e6 / (4 * hidden * intermediate)))  # >= ~128 MB of weights: more than any cache here
    rates = {f"square_{square}": matmul_rate(square, square, square, seconds=2.0, dtype=dtype)}
    for rows in row_counts:
        rates[f"decode_shape_rows_{rows}"] = matmul_rate(rows, hidden, intermediate, dtype=dtype)
        rates[f"decode_shape_rows_{rows}_streamed"] = matmul_rate(rows, hidden, intermediate, seconds=2.0,
                                                                  weights=streamed, dtype=dtype)
    return rates


# -- rollouts ---------------------------------------------------------------------------------------
def run_episodes(policy: Any, episodes: int, turns: int, in_flight: int) -> dict[str, Any]:
    """``episodes`` KeyDoor episodes of ``turns`` turns, ``in_flight`` at a time: wall, CPU, records."""
    from agentgym_budget.episodes.records import EpisodeJob
    from agentgym_budget.episodes.runner import RolloutSpec, SerialExecutor

    spec = RolloutSpec(ENV_ID, policy, seed=0, max_budget=turns, env_kwargs=dict(ENV_KWARGS), concurrency=in_flight)
    jobs = [EpisodeJob(task, 0, turns) for task in range(episodes)]
    wall, cpu = time.perf_counter(), time.process_time()
    records = SerialExecutor().run(spec, jobs)
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "records": records,
            "turns": sum(r.turns for r in records), "won": sum(r.won_turn is not None for r in records),
            "completion_tokens": sum(int(r.completion_tokens or 0) for r in records)}


def local_rows(levels: list[int], episodes: dict[int, int], turns: int, threads: int, dtype: str) -> tuple[dict, dict]:
    """The local backend (weights in ``dtype``) at each number of episodes in flight; also the model's shape."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from agentgym_budget.policies import make_policy

    torch.set_num_threads(threads)
    policy = make_policy("hf", model="smollm2", model_kwargs={"dtype": getattr(torch, dtype)}, **PROMPT_OPTIONS)
    backend = policy.backend
    config = backend.model.config
    shape = {"hidden": config.hidden_size, "intermediate": config.intermediate_size, "layers": config.num_hidden_layers,
             "vocab": config.vocab_size, "parameters": sum(p.numel() for p in backend.model.parameters())}
    clock = ModelTimer(backend)
    for level in sorted(set(levels)):  # warm-up at every batch shape: allocator, first-call costs
        run_episodes(policy, level, 2, level)
    rows = {}
    for level in levels:
        clock.reset()
        timed = run_episodes(policy, episodes[level], turns, level)
        prompt_run, reused = clock.prompt_tokens()
        step = {"wall": clock.step_wall, "cpu": clock.step_cpu, "steps": clock.steps, "rows": clock.step_rows,
                "model_wall": clock.wall}
        with FlopCounterMode(display=False) as counter:  # the replay: FLOPs, not time
            clock.reset(counter)
            replay = run_episodes(policy, episodes[level], turns, level)
            flops, step_flops = counter.get_total_flops(), clock.step_flops
        clock.reset()
        rows[level] = {
            "episodes": episodes[level], "turns": timed["turns"], "won": timed["won"],
            "wall_s": timed["wall"], "cpu_s": timed["cpu"], "model_wall_s": step["model_wall"],
            "prompt_tokens_run": prompt_run, "prompt_tokens_reused": reused,
            "completion_tokens": timed["completion_tokens"],
            "decode_steps": step["steps"], "decode_rows": step["rows"], "decode_wall_s": step["wall"],
            "decode_cpu_s": step["cpu"], "flops": flops, "decode_flops": step_flops,
            "replay_identical": replay["records"] == timed["records"],
        }
        rows[level]["actions"] = [record.actions for record in timed["records"]]
        print(f"local {dtype}, {level} in flight: " + summary(rows[level]), flush=True)
    return rows, shape


def summary(row: dict[str, Any]) -> str:
    text = (f"{row['turns']} turns in {row['wall_s']:.1f} s = {row['turns'] / row['wall_s']:.2f} turns/s, "
            f"{(row.get('prompt_tokens_run', 0) + row['completion_tokens']) / row['wall_s']:.0f} tokens run/s")
    if "flops" in row:
        text += (f", {row['flops'] / row['wall_s'] / 1e9:.1f} GFLOP/s over the run, decode steps "
                 f"{row['decode_flops'] / max(row['decode_wall_s'], 1e-9) / 1e9:.1f} GFLOP/s "
                 f"(replay identical: {row['replay_identical']})")
    if "server_ms" in row:
        text += f", outside llama.cpp {100 * row['outside_share']:.1f} % of request time"
    return text


# -- llama.cpp's C++ server ---------------------------------------------------------------------------
@contextlib.contextmanager
def llama_server(binary: Path, gguf: Path, slots: int, threads: int, ctx_per_slot: int) -> Iterator[str]:
    """``llama-server`` on ``gguf`` with ``slots`` parallel slots on 127.0.0.1; yields the ``/v1`` base URL."""
    from tools.llama_server import free_port

    port = free_port()
    command = [str(binary), "-m", str(gguf), "--alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
               "--parallel", str(slots), "--cont-batching", "-c", str(ctx_per_slot * slots),
               "--threads", str(threads), "--threads-batch", str(threads), "--no-webui"]
    log = open(os.devnull, "wb")  # noqa: SIM115 (closed below, with the process)
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {process.returncode}: {' '.join(command)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        else:
            raise RuntimeError("llama-server did not answer /health within 120 s")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


class RequestClock:
    """Per request: the client's latency and the server's own ``timings`` (``prompt_ms + predicted_ms``)."""

    def __init__(self, backend: Any) -> None:
        from agentgym_budget.policies import served

        self.module, self.parse = served, served.parse_chat_reply
        self.local = threading.local()
        self.lock = threading.Lock()
        self.reset()
        request = backend._request

        def parse(body: bytes) -> Any:
            timings = json.loads(body).get("timings") or {}
            self.local.timings = timings
            return self.parse(body)

        def timed_request(*args: Any, **kwargs: Any) -> Any:
            self.local.timings = {}
            start = time.perf_counter()
            result = request(*args, **kwargs)
            latency = time.perf_counter() - start
            timings = self.local.timings
            with self.lock:
                self.latency_s += latency
                self.requests += 1
                self.server_ms += float(timings.get("prompt_ms", 0.0)) + float(timings.get("predicted_ms", 0.0))
                self.prompt_n += int(timings.get("prompt_n", 0))
                self.predicted_n += int(timings.get("predicted_n", 0))
                self.with_timings += bool(timings)
            return result

        served.parse_chat_reply = parse
        backend._request = timed_request

    def reset(self) -> None:
        self.latency_s = self.server_ms = 0.0
        self.requests = self.prompt_n = self.predicted_n = self.with_timings = 0

    def restore(self) -> None:
        self.module.parse_chat_reply = self.parse


def served_rows(binary: Path, levels: list[int], episodes: dict[int, int], turns: int, threads: int,
                ctx_per_slot: int) -> dict[int, dict[str, Any]]:
    from agentgym_budget.policies import make_policy, smollm2

    rows = {}
    for level in levels:
        with llama_server(binary, smollm2.gguf_path(), level, threads, ctx_per_slot) as base_url:
            policy = make_policy("openai", model="smollm2", base_url=base_url, api_key="none", timeout=600,
                                 max_concurrency=level, **PROMPT_OPTIONS)
            clock = RequestClock(policy.backend)
            try:
                run_episodes(policy, level, 2, level)  # warm-up
                clock.reset()
                timed = run_episodes(policy, episodes[level], turns, level)
            finally:
                clock.restore()
        latency_ms = 1000 * clock.latency_s
        rows[level] = {
            "episodes": episodes[level], "turns": timed["turns"], "won": timed["won"], "wall_s": timed["wall"],
            "cpu_s": timed["cpu"], "requests": clock.requests, "requests_with_timings": clock.with_timings,
            "prompt_tokens_run": clock.prompt_n, "completion_tokens": timed["completion_tokens"],
            "server_predicted_tokens": clock.predicted_n, "latency_ms": latency_ms, "server_ms": clock.server_ms,
            "outside_share": (latency_ms - clock.server_ms) / latency_ms if latency_ms else None,
            "actions": [record.actions for record in timed["records"]],
        }
        print(f"llama-server, {level} slots: " + summary(rows[level]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in-flight", default="1,8,32", help="episodes in flight (and llama.cpp slots), comma-separated")
    parser.add_argument("--episodes", default="4,16,32", help="episodes run at each level, comma-separated")
    parser.add_argument("--turns", type=int, default=4, help="turn budget of every episode")
    parser.add_argument("--threads", type=int, default=2, help="torch threads and llama.cpp threads")
    parser.add_argument("--square", type=int, default=2048, help="size of the square GEMM (the peak rate)")
    parser.add_argument("--dtypes", default="float32,bfloat16",
                        help="weight dtypes of the local rows, comma-separated (float32: the trainer's numerics)")
    parser.add_argument("--llama-server", type=Path, default=None, help="the C++ llama-server binary")
    parser.add_argument("--ctx-per-slot", type=int, default=2048)
    parser.add_argument("--skip-served", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="write results.json into this folder")
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.in_flight.split(",")]
    counts = [int(x) for x in args.episodes.split(",")]
    if len(counts) != len(levels):
        parser.error(f"--episodes needs one count per --in-flight level ({len(levels)}), got {len(counts)}")
    if not args.skip_served and (args.llama_server is None or not args.llama_server.is_file()):
        parser.error("--llama-server must name the built llama-server binary (or pass --skip-served)")
    episodes = dict(zip(levels, counts))
    started = provenance(sys.argv if argv is None else ["benchmarks/smollm2_perf.py", *argv])
    import torch

    import agentgym_budget  # noqa: F401  (registers the envs)

    torch.set_num_threads(args.threads)
    local, gemm, shape = {}, {}, {}
    for dtype in args.dtypes.split(","):
        local[dtype], shape = local_rows(levels, episodes, args.turns, args.threads, dtype)
        gemm[dtype] = gemm_rates(shape["hidden"], shape["intermediate"], levels, args.square, dtype)
        print(f"GEMM GFLOP/s, {dtype}: " + ", ".join(f"{k} {v:.1f}" for k, v in gemm[dtype].items()), flush=True)
    served = {} if args.skip_served else served_rows(args.llama_server, levels, episodes, args.turns, args.threads,
                                                     args.ctx_per_slot)
    if "float32" in local:  # do cheaper weights (bfloat16, llama.cpp's Q4_1) play the same greedy episodes?
        for rows in [*local.values(), served]:
            for level, row in rows.items():
                row["same_actions_as_float32"] = sum(
                    mine == reference for mine, reference in zip(row["actions"], local["float32"][level]["actions"]))
    results = {"settings": {"env": ENV_ID, "env_kwargs": ENV_KWARGS, "prompt": PROMPT_OPTIONS, "turns": args.turns,
                            "threads": args.threads, "in_flight": levels, "episodes": episodes, "dtypes": list(local),
                            "torch": torch.__version__, "llama_server": str(args.llama_server)},
               "model": shape, "gemm_gflops": gemm, "local": local, "served": served}
    if args.out:
        print(f"wrote {write_results(args.out / 'results.json', started, results)}")
    return results


if __name__ == "__main__":
    main()

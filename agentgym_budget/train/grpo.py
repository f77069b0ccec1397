"""Credit assignment and loss assembly: group-relative advantages → per-token policy loss.

* :func:`group_advantages` — one scalar per episode from the returns of its group of G
  episodes on the same task: GRPO ``(R - mean) / (std + eps)`` or RLOO ``R - mean(others)``;
  an episode whose env failed gets zero advantage and is left out of its group's baseline.
* :func:`process_returns_to_go` — per turn, the (discounted) sum of the process rewards from
  that turn on, with the loss rule below; :func:`turn_credits` — the same for a batch of
  groups, by default (``process_reward_norm="group"``) over the process rewards normalised by
  the mean and std of all turns of the episode's group, as DeepSeekMath §4.1.3 does, then the
  returns-to-go themselves standardised over the group's turns (mean 0, spread 1).
* :func:`turn_samples` — every turn of every episode becomes one sample: its prompt tokens
  (masked out of the loss) followed by its sampled action tokens (in the loss), carrying
  its **per-turn advantage** ``A_i,t = Â_i + c * G_i,t``: the group-normalised *outcome*
  advantage of its episode plus ``c`` (``process_reward_coef``) times the process
  return-to-go of the turn (plus, with ``advantage="gigpo"``, ``omega`` times the turn's
  step-level advantage from :mod:`~agentgym_budget.train.gigpo`).

Per-turn credit follows the process-supervision form of GRPO (Shao et al., 2024,
*DeepSeekMath*, §4.1.3: a token's advantage is the sum of the step rewards that follow it),
here added to the outcome advantage rather than replacing it, so that process rewards
shift credit between the turns of an episode and between episodes with the same outcome,
but cannot outweigh a win.  The process rewards are the raw per-turn signal of
:class:`~agentgym_budget.wrappers.ProcessReward` (``potential_based=False``): turn ``t``'s
reward is ``Φ(s_t) - Φ(s_t-1)``, so ``G_i,t = Φ(s_T) - Φ(s_t-1)`` for ``gamma = 1`` — the
progress made from turn ``t`` to the end, with the true end state (not a zero end
potential, which would pay a loss as much as a win and give back every invalid-action
penalty on the last turn).  **Loss rule:** in an episode the env ended without a win, the
losing turn earns no progress (its reward is capped at 0) and the episode's process return
``G_i,1`` is capped at 0, so a loss never scores above a timeout with the same progress,
nor above a timeout without progress.  **Group normalisation** (experiments/process_reward/README.md): without it
(``norm="none"``) the process credit has no baseline — in a group without a win (zero outcome
advantage) every turn followed by progress, invalid ones included, is pushed up, and the longer
an episode dithers before progressing the more turns are credited; normalised, a turn's reward
counts relative to the group's mean per-turn progress, so dithering turns are charged and a
group whose turns all progressed alike gets no process credit.  The returns-to-go of those
normalised rewards are then standardised over the group's turns (the process-reward study, KeyDoorRooms): a
return-to-go counts every reward after its turn, so the negative rewards at the episodes' ends
were counted once per earlier turn and the credit averaged well below 0 — it pushed down nearly
every sampled turn; standardised, it only moves credit between the group's turns.

* :func:`action_logprobs` — log-probs and entropies of a micro-batch's action tokens, from
  the model's final hidden states through :func:`~agentgym_budget.train.kernels.token_logprobs`
  (only action positions go through the LM head).

Example:
    >>> import torch
    >>> group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]), group_size=3, estimator="rloo")
    tensor([ 1.0000, -0.5000, -0.5000,  0.0000,  0.0000,  0.0000])
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentgym_budget.train.config import PROCESS_NORMS
from agentgym_budget.train.kernels import token_logprobs, token_logprobs_reference
from agentgym_budget.train.rollout import Episode

__all__ = ["PROCESS_NORMS", "TurnSample", "action_logprobs", "collate", "group_advantages", "loss_rule",
           "process_returns_to_go", "turn_credits", "turn_samples"]


def group_advantages(
    returns: torch.Tensor, group_size: int, estimator: str = "grpo", scale_by_std: bool = True, eps: float = 1e-6,
    failed: Sequence[bool] | None = None,
) -> torch.Tensor:
    """Advantages ``[B*G]`` from returns ``[B*G]`` laid out group after group.

    ``grpo``: ``(R_i - mean_g) / (std_g + eps)`` (std unbiased; ``scale_by_std=False`` only
    centres).  ``rloo``: ``R_i - mean_{j != i} R_j = G/(G-1) * (R_i - mean_g)``.  A group
    whose episodes all got the same return gets zero advantage (no signal, no update).

    ``failed`` (``[B*G]``, optional) marks episodes whose env failed (the fault policy of
    :mod:`~agentgym_budget.train.rollout`): such an episode has no return, so it gets zero
    advantage and its group's baseline is computed over the surviving members only; a group
    with fewer than two survivors has no baseline and gets zero advantage throughout.  The
    ``B*G`` layout never shifts, and groups without a failure are computed as without ``failed``.

    Example:
        >>> returns = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
        >>> group_advantages(returns, group_size=3, estimator="rloo", failed=[False, False, True, False, True, True])
        tensor([ 1., -1.,  0.,  0.,  0.,  0.])
    """
    if returns.ndim != 1 or returns.numel() % group_size:
        raise ValueError(f"returns must be [groups * {group_size}], got shape {tuple(returns.shape)}")
    grouped = returns.float().view(-1, group_size)  # [B, G]
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if estimator == "rloo":
        advantages = centred * group_size / (group_size - 1)
    elif estimator != "grpo":
        raise ValueError(f"estimator must be 'grpo' or 'rloo', got {estimator!r}")
    elif scale_by_std:
        advantages = centred / (grouped.std(dim=1, keepdim=True) + eps)
    else:
        advantages = centred
    if failed is not None:
        if len(failed) != returns.numel():
            raise ValueError(f"failed must hold one flag per episode ({returns.numel()}), got {len(failed)}")
        survived = ~torch.tensor([bool(f) for f in failed]).view(-1, group_size)  # [B, G]
        for group in torch.nonzero(~survived.all(dim=1)).flatten().tolist():  # groups that lost an episode
            alive = survived[group]
            advantages[group] = 0.0
            if int(alive.sum()) >= 2:  # the survivors' own baseline
                advantages[group, alive] = group_advantages(grouped[group, alive], int(alive.sum()), estimator,
                                                            scale_by_std, eps)
    return advantages.view(-1)


def process_returns_to_go(rewards: Sequence[float], lost: bool, gamma: float = 1.0) -> list[float]:
    """``G_t = sum_{k >= t} gamma^(k-t) r_k`` per turn, after the loss rule of the module docstring.

    Example:
        >>> process_returns_to_go([1.0, 0.0, -1.0, 1.0], lost=False)
        [1.0, 0.0, 0.0, 1.0]
        >>> process_returns_to_go([1.0, 0.0, 2.0], lost=True)  # the losing turn's +2 and the +1 are forfeit
        [0.0, -1.0, -1.0]
    """
    return _returns_to_go(loss_rule(rewards, lost, gamma), gamma)


def loss_rule(rewards: Sequence[float], lost: bool, gamma: float = 1.0) -> list[float]:
    """The per-turn process rewards of an episode after the loss rule (module docstring): unchanged
    unless ``lost``; then the losing turn earns no progress and the discounted sum is capped at 0.

    Example:
        >>> loss_rule([1.0, 0.0, 2.0], lost=True)
        [1.0, 0.0, -1.0]
    """
    rewards = [float(r) for r in rewards]
    if lost and rewards:
        rewards[-1] = min(rewards[-1], 0.0)  # the losing turn earns no progress
        first = sum(gamma**k * r for k, r in enumerate(rewards))
        if first > 0:  # a loss keeps no net progress: G_1 is capped at 0
            rewards[-1] -= first / gamma ** (len(rewards) - 1)
    return rewards


def _returns_to_go(rewards: Sequence[float], gamma: float) -> list[float]:
    returns, to_go = [], 0.0
    for reward in reversed(rewards):
        to_go = reward + gamma * to_go
        returns.append(to_go)
    return returns[::-1]


def turn_credits(episodes: Sequence[Episode], group_size: int, gamma: float = 1.0, norm: str = "group",
                 eps: float = 1e-6) -> list[list[float]]:
    """Per episode, per turn: the process return-to-go the learner credits (before the coefficient ``c``).

    ``norm="none"``: :func:`process_returns_to_go` of the episode's own rewards.  ``norm="rewards"``
    (DeepSeekMath §4.1.3's process supervision): every turn's reward, after the loss rule, is
    normalised by the mean and std of the rewards of *all* turns of its group (the G episodes
    on the same task and budget), ``(r - mean) / (std + eps)``, and the return-to-go is taken over
    the normalised rewards — so progress is credited relative to what the group made and a turn
    that made no progress is charged the group's mean progress.  ``norm="group"`` (the default)
    then standardises those returns-to-go over all turns of the group, ``(G - mean) / (std + eps)``,
    so that the process credit of every group has mean 0 and spread 1 over its turns, like the
    outcome advantage over its episodes: it moves credit between turns but cannot push a whole
    group's turns down (or up), and ``c`` is a share of one spread.  Why (the process-reward study): a return-to-go
    over zero-mean rewards is not zero-mean — turn ``t`` counts every reward after it, so what
    comes at the episodes' ends (a loss's forfeit, turns stalled at the doors, a timeout's idle
    turns) is counted once per earlier turn; on KeyDoorRooms the ``rewards`` credit averaged
    -0.2 to -0.5 per turn (``c = 0.5``) in every update, which pushed down nearly every sampled
    turn — door commands included — until the policy stopped opening doors.  A group whose
    turns all made the same progress gets no process credit under either normalisation.
    Failed episodes (no turns) add nothing.

    Example:
        >>> from agentgym_budget.train.rollout import Episode, Turn
        >>> def episode(*rewards):
        ...     return Episode(0, "t", 4, [Turn([1], [2], "x", r) for r in rewards])
        >>> turn_credits([episode(1.0, 1.0), episode(1.0, 0.0)], group_size=2, norm="none")
        [[2.0, 1.0], [1.0, 0.0]]
        >>> [[round(g, 3) for g in e] for e in turn_credits([episode(1.0, 1.0), episode(1.0, 0.0)], 2, norm="rewards")]
        [[1.0, 0.5], [-1.0, -1.5]]
        >>> [[round(g, 3) for g in e] for e in turn_credits([episode(1.0, 1.0), episode(1.0, 0.0)], group_size=2)]
        [[1.05, 0.63], [-0.63, -1.05]]
    """
    if norm not in PROCESS_NORMS:
        raise ValueError(f"process reward norm must be one of {PROCESS_NORMS}, got {norm!r}")
    if len(episodes) % group_size:
        raise ValueError(f"episodes must be [groups * {group_size}], got {len(episodes)}")
    rewards = [loss_rule([turn.process_reward for turn in e.turns], e.lost, gamma) for e in episodes]
    if norm == "none":
        return [_returns_to_go(r, gamma) for r in rewards]
    credits = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        group = _standardised(group, eps)  # the rewards, over the group's turns
        group = [_returns_to_go(r, gamma) for r in group]
        credits += _standardised(group, eps) if norm == "group" else group  # then the returns-to-go
    return credits


def _standardised(values: list[list[float]], eps: float) -> list[list[float]]:
    """``(v - mean) / (std + eps)`` with the mean and (unbiased, as :func:`group_advantages`) std
    of all the values of the nested lists; unchanged when there are none."""
    pooled = torch.tensor([v for row in values for v in row], dtype=torch.float64)
    if pooled.numel() == 0:
        return values
    mean = float(pooled.mean())
    std = float(pooled.std()) if pooled.numel() > 1 else 0.0
    return [[(v - mean) / (std + eps) for v in row] for row in values]


@dataclass
class TurnSample:
    """One turn as a training sample."""

    input_ids: list[int]  # prompt + action
    prompt_length: int  # loss positions are input_ids[prompt_length:]
    advantage: float  # the turn's advantage: episode outcome advantage + coef * process return-to-go (+ omega * A^S)
    episode_tokens: int = 0  # action tokens of the whole episode (for loss_aggregation="episode-mean")
    trunk_states: Any = field(default=None, repr=False)  # the turn's Turn.trunk_states (trunk reuse), or None

    @property
    def action_tokens(self) -> int:
        return len(self.input_ids) - self.prompt_length


def turn_samples(
    episodes: Sequence[Episode], advantages: torch.Tensor, process_coef: float = 0.0, gamma: float = 1.0,
    step_advantages: Sequence[Sequence[float]] | None = None, step_coef: float = 0.0,
    process_credits: Sequence[Sequence[float]] | None = None,
) -> list[TurnSample]:
    """Every turn of every episode with its per-turn advantage ``A_i + process_coef * G_i,t + step_coef * A^S_i,t``.

    ``process_credits`` (``[episode][turn]``): the ``G_i,t`` of :func:`turn_credits` (the
    trainer's, group-normalised); without it, each episode's own :func:`process_returns_to_go`
    (``norm="none"``).  ``step_advantages`` (``[episode][turn]``, optional) are GiGPO's
    step-level advantages (:func:`~agentgym_budget.train.gigpo.step_advantages`), weighted by
    ``step_coef`` (omega).
    """
    samples = []
    for index, (episode, advantage) in enumerate(zip(episodes, advantages.tolist())):
        to_go = (process_credits[index] if process_credits is not None else
                 process_returns_to_go([turn.process_reward for turn in episode.turns], episode.lost, gamma))
        steps = step_advantages[index] if step_advantages is not None else [0.0] * len(episode.turns)
        episode_tokens = sum(len(turn.action_ids) for turn in episode.turns)
        samples += [
            TurnSample(turn.prompt_ids + turn.action_ids, len(turn.prompt_ids),
                       advantage + process_coef * g + step_coef * a, episode_tokens, turn.trunk_states)
            for turn, g, a in zip(episode.turns, to_go, steps)
            if turn.action_ids  # an empty reply has no token to credit
        ]
    return samples


def collate(samples: Sequence[TurnSample], pad_id: int, aggregation: str) -> dict[str, torch.Tensor]:
    """Right-padded tensors of a micro-batch.

    Returns ``input_ids``/``attention_mask`` ``[S, L]`` and, for the ``N`` action tokens in
    row-major order, ``rows``/``positions`` (where their logits come from: position ``p``
    predicts token ``p + 1``), ``targets``, ``advantages`` and ``weights`` ``[N]`` — the
    weight of each token in the loss sum (see :func:`token_weight`).  When every sample carries
    its trunk states, also ``trunk_states`` ``[S, L, H]`` (zero past each row's states: its last
    token, whose output no loss position reads, and the pads).
    """
    width = max(len(s.input_ids) for s in samples)
    input_ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(samples), width), dtype=torch.long)
    rows: list[int] = []
    positions: list[int] = []
    advantages: list[float] = []
    weights: list[float] = []
    for row, sample in enumerate(samples):
        n = len(sample.input_ids)
        input_ids[row, :n] = torch.tensor(sample.input_ids)
        attention_mask[row, :n] = 1
        actions = n - sample.prompt_length
        rows += [row] * actions
        positions += range(sample.prompt_length - 1, n - 1)
        advantages += [sample.advantage] * actions
        weights += [token_weight(sample, aggregation)] * actions
    rows_t, positions_t = torch.tensor(rows), torch.tensor(positions)
    trunk = _collated_trunk_states(samples, width)
    return {
        **({"trunk_states": trunk} if trunk is not None else {}),
        "input_ids": input_ids, "attention_mask": attention_mask, "rows": rows_t, "positions": positions_t,
        "targets": input_ids[rows_t, positions_t + 1], "advantages": torch.tensor(advantages),
        "weights": torch.tensor(weights),
    }


def _collated_trunk_states(samples: Sequence[TurnSample], width: int) -> torch.Tensor | None:
    """``[S, width, H]`` right-padded trunk states, or ``None`` unless every sample has them."""
    states = [s.trunk_states for s in samples]
    if any(state is None for state in states):
        return None
    for sample, state in zip(samples, states):
        if state.shape[0] != len(sample.input_ids) - 1:
            raise ValueError(f"a sample of {len(sample.input_ids)} tokens carries trunk states for {state.shape[0]} "
                             f"tokens (expected one per token but the last)")
    out = states[0].new_zeros((len(samples), width, states[0].shape[-1]))
    for row, state in enumerate(states):
        out[row, : state.shape[0]] = state
    return out


def token_weight(sample: TurnSample, aggregation: str) -> float:
    """Each action token's weight in the loss sum: 1 (``token-mean``), 1 / its turn's tokens
    (``turn-mean``) or 1 / its episode's tokens (``episode-mean``: every episode counts once,
    whatever its length, so long failed episodes do not dominate the update)."""
    if aggregation == "token-mean":
        return 1.0
    if aggregation == "turn-mean":
        return 1.0 / sample.action_tokens
    if aggregation == "episode-mean":
        return 1.0 / sample.episode_tokens
    raise ValueError(f"loss aggregation must be 'token-mean', 'turn-mean' or 'episode-mean', got {aggregation!r}")


def action_logprobs(
    model: Any, batch: dict[str, torch.Tensor], *, temperature: float, fused: bool = True, chunk_size: int = 512,
    compile: bool = False, autocast_dtype: torch.dtype | None = None, trunk_layer: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, entropy)`` ``[N]`` of the batch's action tokens under ``model``.

    Runs the decoder stack (under autocast to ``autocast_dtype`` when given), picks the
    hidden states of the positions that predict action tokens, and applies the LM head there
    only, in the head's own dtype (chunked when ``fused``).  With ``trunk_layer`` and the batch's
    ``trunk_states`` (what entered that layer in the rollout, :func:`collate`) only the layers from
    ``trunk_layer`` on run, on those states: the model's own forward (its position ids, rotary
    embeddings and causal + padding mask) over its top layers (:func:`top_layers_only`).
    """
    head = model.get_output_embeddings()
    if getattr(head, "bias", None) is not None or getattr(model.config, "final_logit_softcapping", None):
        raise ValueError("action_logprobs needs a plain linear LM head (no bias, no logit soft-capping)")
    device = head.weight.device
    decoder = model.get_decoder()
    with torch.autocast(device.type, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
        if trunk_layer is not None and "trunk_states" in batch:
            with top_layers_only(decoder, trunk_layer):
                hidden = decoder(inputs_embeds=batch["trunk_states"].to(device),
                                 attention_mask=batch["attention_mask"].to(device)).last_hidden_state  # [S, L, H]
        else:
            hidden = decoder(input_ids=batch["input_ids"].to(device),
                             attention_mask=batch["attention_mask"].to(device)).last_hidden_state  # [S, L, H]
    selected = hidden[batch["rows"].to(device), batch["positions"].to(device)].to(head.weight.dtype)  # [N, H]
    targets = batch["targets"].to(device)
    if fused:
        return token_logprobs(selected, head.weight, targets, chunk_size=chunk_size, temperature=temperature,
                              compile=compile)
    return token_logprobs_reference(selected, head.weight, targets, temperature=temperature)


#: Decoder classes whose forward feeds ``inputs_embeds`` to the first layer unchanged (no embedding scale),
#: so that handing it the states entering layer k and only layers k.. is the full forward's top part.
TRUNK_DECODERS = ("LlamaModel", "Qwen2Model", "Qwen3Model", "MistralModel")


@contextlib.contextmanager
def top_layers_only(decoder: Any, first: int) -> Iterator[None]:
    """``decoder`` (a transformers decoder stack) with its layers ``first ..`` only, while the block runs.

    Fed the hidden states that entered layer ``first`` as ``inputs_embeds``, its forward is the full
    forward's from there on: the same position ids (0 .. L-1 per right-padded row), rotary
    embeddings and causal + padding mask, then the final norm.  Refused (one line) for a decoder
    class not in :data:`TRUNK_DECODERS`.

    Example:
        >>> from agentgym_budget.train import tiny_model_and_tokenizer
        >>> decoder = tiny_model_and_tokenizer("KeyDoor-v0")[0].get_decoder()
        >>> with top_layers_only(decoder, 1):
        ...     len(decoder.layers)
        1
        >>> len(decoder.layers)
        2
    """
    name = type(decoder).__name__
    if name not in TRUNK_DECODERS:
        raise ValueError(f"trunk reuse supports the decoders {TRUNK_DECODERS}, not {name} (trunk_reuse=False)")
    kinds = getattr(decoder.config, "layer_types", None)
    if kinds is not None and len(set(kinds)) > 1:  # the forward picks each layer's mask by its place in the list
        raise ValueError(f"trunk reuse needs one attention type in every layer, not {sorted(set(kinds))} "
                         "(trunk_reuse=False)")
    layers = decoder.layers
    decoder.layers = layers[first:]  # a ModuleList of the same modules: their weights, hooks and layer_idx
    try:
        yield
    finally:
        decoder.layers = layers

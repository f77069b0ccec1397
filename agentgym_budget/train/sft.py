"""Supervised fine-tuning on demonstrations: the SFT warm start of any causal LM, and the tiny model's format warm-up.

One run of ``agentgym-budget sft`` (:func:`sft`, settings :class:`~agentgym_budget.train.config.SFTConfig`)::

    demos   = play_demonstrations(training-split env under TurnBudget(budget), source)  # per turn: messages, reply
    samples = [prompt ids + reply ids + end of turn for each demonstrated turn]         # the prompt is not scored
    for step in range(steps):
        batch = collate(batch_size samples drawn with replacement)                       # [S, L]
        loss  = -mean log p(reply tokens | prompt)                                       # action_logprobs, [N] tokens
    model.save_pretrained(output_dir); tokenizer.save_pretrained(output_dir)            # for train --model output_dir
    chat_dataset(demos).save_to_disk(output_dir / "dataset")                             # TRL's SFTTrainer takes it

Every prompt is the trainer's: rendered by its LLM policy's settings
(:func:`~agentgym_budget.train.rollout.policy_options`, through
:func:`~agentgym_budget.policies.demonstrations.play_demonstrations`) and tokenized as its backend
does (:func:`~agentgym_budget.policies.hf.encode_conversation`); the reply is what that policy's
history shows of a reply (``Action: <command>``), followed by the tokenizer's end-of-turn token.
The demonstrations come from the training split only (an evaluation split is refused).

:func:`format_warmup` is the same with source ``random``: the tiny model's warm-up before RL
(the reply format, nothing about the task).

Example:
    >>> from agentgym_budget.train.config import TrainConfig
    >>> from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
    >>> model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    >>> config = TrainConfig(env_id="KeyDoor-v0", env_kwargs={"split": "train"}, budget="fixed:3")
    >>> losses = format_warmup(model, tokenizer, config, steps=3, batch_size=4)
    >>> len(losses), losses[-1] > 0
    (3, True)
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch

from agentgym_budget._optional import require
from agentgym_budget.policies import hf
from agentgym_budget.policies.demonstrations import Demonstration, play_demonstrations, training_env_kwargs
from agentgym_budget.policies.hf import encode_conversation
from agentgym_budget.train.config import SFTConfig, TrainConfig
from agentgym_budget.train.grpo import TurnSample, action_logprobs, collate
from agentgym_budget.train.rollout import make_train_env, policy_options

__all__ = ["chat_dataset", "chat_rows", "demonstrations", "format_warmup", "load_for_training", "reply_loss",
           "sft", "sft_samples", "supervised_steps", "with_lora"]

#: The warm-up's episodes are played under this budget whatever the RL budget, so that runs differing only
#: in their budget (the arms of ``benchmarks/budgetmix_study.py``) start from the same warmed-up model.
WARMUP_BUDGET = "fixed:8"
#: Demonstrated episodes per warm-up step and batch row: the warm-up plays ``steps * batch_size // 3`` episodes.
_WARMUP_TURNS_PER_EPISODE = 3


def demonstrations(config: TrainConfig, source: str, episodes: int, seed: int) -> list[list[Demonstration]]:
    """``episodes`` episodes of ``source`` in the trainer's env (``config``: budget, env kwargs) on its training
    split, each turn's prompt rendered as the trainer's policy renders it."""
    train_env = dataclasses.replace(config, env_kwargs=training_env_kwargs(config.env_id, config.env_kwargs))
    return play_demonstrations(lambda: make_train_env(train_env), source, episodes, seed,
                               policy_options=policy_options(config))


def sft_samples(tokenizer: Any, played: Sequence[Sequence[Demonstration]],
                max_prompt_tokens: int | None = None) -> list[TurnSample]:
    """Every demonstrated turn as a supervised sample: prompt ids (not scored), reply ids + end of turn (scored).

    A turn whose prompt is longer than ``max_prompt_tokens`` is left out (the trainer's backend would shorten
    that prompt, so it is not the prompt the trainer shows).
    """
    samples = []
    for turn in (turn for episode in played for turn in episode):
        prompt_ids = encode_conversation(tokenizer, turn.messages)  # exactly what the trainer's backend feeds
        if max_prompt_tokens is not None and len(prompt_ids) > max_prompt_tokens:
            continue
        reply_ids = tokenizer(turn.reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        samples.append(TurnSample(prompt_ids + reply_ids, len(prompt_ids), 1.0))
    if not samples:
        raise ValueError(f"no demonstrated turn fits max_prompt_tokens={max_prompt_tokens}")
    return samples


def supervised_steps(model: Any, tokenizer: Any, samples: Sequence[TurnSample], steps: int, batch_size: int,
                     learning_rate: float, seed: int = 0) -> list[float]:
    """``steps`` AdamW steps on the mean reply-token NLL of ``batch_size`` samples drawn with replacement.

    Returns the loss of every step.
    """
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)
    model.train()
    losses = []
    for _ in range(steps):
        pick = torch.randint(len(samples), (batch_size,), generator=generator).tolist()
        loss = _nll(model, tokenizer, [samples[i] for i in pick])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def reply_loss(model: Any, tokenizer: Any, samples: Sequence[TurnSample], batch_size: int = 32) -> float:
    """The mean reply-token NLL of ``samples`` under ``model`` (every reply token counts once)."""
    total, tokens = 0.0, 0
    for start in range(0, len(samples), batch_size):
        chunk = samples[start:start + batch_size]
        n = sum(s.action_tokens for s in chunk)
        total += _nll(model, tokenizer, chunk).item() * n
        tokens += n
    return total / tokens


def _nll(model: Any, tokenizer: Any, samples: Sequence[TurnSample]) -> torch.Tensor:
    batch = collate(samples, tokenizer.pad_token_id, "token-mean")
    logp, _ = action_logprobs(model, batch, temperature=1.0)
    return -logp.mean()


def chat_rows(played: Sequence[Sequence[Demonstration]]) -> list[dict[str, Any]]:
    """One ``{"messages": [...]}`` row per demonstrated turn: the prompt's messages, then the reply as the assistant's.

    Example:
        >>> chat_rows([[Demonstration([{"role": "user", "content": "Observation: a"}], "Action: look")]])
        [{'messages': [{'role': 'user', 'content': 'Observation: a'}, {'role': 'assistant', 'content': 'Action: look'}]}]
    """
    return [{"messages": [*(dict(m) for m in turn.messages), {"role": "assistant", "content": turn.reply}]}
            for episode in played for turn in episode]


def chat_dataset(played: Sequence[Sequence[Demonstration]]) -> Any:
    """The demonstrations as a Hugging Face ``datasets.Dataset`` with a ``messages`` column (TRL's
    conversational format: ``SFTTrainer`` takes it as is).  Needs ``datasets`` (extra ``trl``)."""
    datasets = require("datasets", "trl", "the SFT chat dataset")
    return datasets.Dataset.from_list(chat_rows(played))


def format_warmup(model: Any, tokenizer: Any, config: TrainConfig, steps: int = 100, batch_size: int = 32,
                  learning_rate: float = 3e-3) -> list[float]:
    """Teach a tiny random model the reply format by cloning *uniformly random* admissible commands.

    SFT with source ``random`` in the trainer's env (``config``: prompt settings, ``show_budget``, env
    kwargs) under :data:`WARMUP_BUDGET` on the family's **training split** whatever split ``config``
    trains on (KeyDoor: ``train``, so the held-out door pairs are never seen), ``steps * batch_size // 3``
    episodes seeded from ``config.seed``.  Afterwards the model answers ``Action: <command>`` with admissible commands
    but at the random policy's success rate: RL does the rest.  Returns the losses.
    """
    kwargs = {key: value for key, value in config.env_kwargs.items() if key != "split"}
    warmup = dataclasses.replace(config, env_kwargs=training_env_kwargs(config.env_id, kwargs),
                                 budget=WARMUP_BUDGET, process_reward=None)
    played = demonstrations(warmup, "random", max(steps * batch_size // _WARMUP_TURNS_PER_EPISODE, 1),
                            seed=config.seed + 7919)
    samples = sft_samples(tokenizer, played)
    return supervised_steps(model, tokenizer, samples, steps, batch_size, learning_rate, seed=config.seed)


def training_device(device: str) -> str:
    """``device`` as the trainer reads it: ``"auto"`` is CUDA where there is one, else the CPU."""
    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device


def load_for_training(name: str, config: TrainConfig, device: torch.device | str,
                      format_warmup_steps: int = 0) -> tuple[Any, Any]:
    """The model and tokenizer ready to train: :func:`~agentgym_budget.policies.hf.load_model_and_tokenizer`
    (the one loader by name), then for ``"tiny"`` → the offline tiny model for ``config.env_id`` (seeded by ``config.seed``, after
    ``format_warmup_steps`` of :func:`format_warmup`); otherwise a local/cached HF model (a folder
    :func:`sft` saved, too).  A tokenizer without a pad token pads with its end-of-turn token."""
    model, tokenizer = hf.load_model_and_tokenizer(name, tiny_env=config.env_id, seed=config.seed)
    if name == "tiny" and format_warmup_steps:
        format_warmup(model, tokenizer, config, steps=format_warmup_steps)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device), tokenizer


def with_lora(model: Any, config: TrainConfig | SFTConfig, checkpoint: Path | None) -> Any:
    """``model`` with LoRA adapters (``peft``) on every linear layer but the head; from ``checkpoint`` when resuming.

    With ``config.lora_layers = N`` (a :class:`TrainConfig` field; 0: every layer) only the top N decoder
    layers get adapters (peft's ``layers_to_transform``), and their input is detached (a pre-hook on the
    first adapted layer): nothing below has a trainable parameter, so the backward, and the activations
    autograd keeps for it, end there whatever makes the embeddings' output require grad (gradient
    checkpointing's input hook, for one).  The frozen layers' forward is the same computation; the saving is
    the backward through them and their saved activations.

    The adapters' random initialisation is drawn from ``config.seed`` (in a forked RNG, the global one
    untouched): peft draws it from torch's global RNG, whose state depends on whatever ran before — for
    a loaded model nothing seeds it — so the same seed would otherwise give another run."""
    peft = require("peft", "llm", "LoRA (--lora-r)")
    top = getattr(config, "lora_layers", 0)
    if checkpoint is not None:
        model = peft.PeftModel.from_pretrained(model, str(checkpoint), is_trainable=True)
    else:
        targets: dict[str, Any] = {"target_modules": "all-linear"}
        if top:
            targets = {"target_modules": _layer_linear_names(model), "layers_pattern": "layers",
                       "layers_to_transform": _top_layers(model, top)}
        lora = peft.LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                               task_type="CAUSAL_LM", **targets)
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(config.seed)
            model = peft.get_peft_model(model, lora)
    if top:
        first = _top_layers(model, top)[0]
        model.get_decoder().layers[first].register_forward_pre_hook(_detach_hidden_states, with_kwargs=True)
    return model


def _top_layers(model: Any, count: int) -> list[int]:
    """The indices of the top ``count`` decoder layers; a count beyond the model's depth is refused in one line."""
    depth = len(model.get_decoder().layers)
    if not 1 <= count <= depth:
        raise ValueError(f"lora_layers={count} must be between 1 and the model's {depth} decoder layers")
    return list(range(depth - count, depth))


def _layer_linear_names(model: Any) -> list[str]:
    """The names of the linear modules inside the decoder layers (``q_proj``, ..., ``down_proj``): what
    ``all-linear`` picks there, spelt out because peft takes ``layers_to_transform`` with a list only."""
    layers = model.get_decoder().layers
    return sorted({name.rsplit(".", 1)[-1] for name, module in layers.named_modules()
                   if isinstance(module, torch.nn.Linear)})


def _detach_hidden_states(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Forward pre-hook of the first adapted layer: its input hidden states without a graph behind them."""
    if args:
        return (args[0].detach(), *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": kwargs["hidden_states"].detach()}


def sft(config: SFTConfig) -> dict[str, Any]:
    """Demonstrate, clone, save (see the module docstring); returns what ``sft.json`` in ``output_dir`` holds."""
    start, cpu_start = time.perf_counter(), time.process_time()
    require("datasets", "trl", "the SFT chat dataset")  # before the work, not after it
    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)
    trainer_config = config.training_config()
    played = demonstrations(trainer_config, config.source, config.episodes, config.seed)  # refuses an eval split
    device = training_device(config.device)
    model, tokenizer = load_for_training(config.model, trainer_config, device)
    if config.lora_r:
        model = with_lora(model, config, None)
    samples = sft_samples(tokenizer, played, config.max_prompt_tokens)
    measured = samples[:config.loss_turns]  # the reply loss before and after, on the first loss_turns turns
    before = reply_loss(model, tokenizer, measured)
    learning_rate = cast(float, config.learning_rate)  # resolved by SFTConfig.__post_init__
    losses = supervised_steps(model, tokenizer, samples, config.steps, config.batch_size, learning_rate, seed=config.seed)
    after = reply_loss(model, tokenizer, measured)
    if config.lora_r:
        model = model.merge_and_unload()  # a plain model: train --model FOLDER loads it as any other
    folder = Path(config.output_dir)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    chat_dataset(played).save_to_disk(str(folder / "dataset"))
    summary = {"config": dataclasses.asdict(config), "episodes": len(played), "turns": len(samples),
               "loss_turns": len(measured), "reply_loss_before": before, "reply_loss_after": after, "losses": losses,
               "seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu_start}
    (folder / "sft.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary

"""A CPU stand-in for verl's rollout server, backed by the tiny model; and the pieces the verl tests share.

verl's agent loops reach the model through ``server_manager.generate(request_id, prompt_ids=...,
sampling_params=...) -> TokenOutput`` (``verl.workers.rollout.llm_server.LLMServerClient``; on a GPU
a vLLM/SGLang server behind a Ray load balancer).  :class:`TinyModelServer` implements that call
with the tiny Qwen2 model on CPU, token by token: each token's log-prob is ``log_softmax(logits /
temperature)`` of a full forward pass over everything before it — what a fresh forward pass of the
same tokens must reproduce.  The tokens are the model's samples, or, with a ``script``, a reply the
test chose (teacher forcing, as constrained decoding would): the random tiny model never writes a
well-formed ``Action:`` line, and the tests need episodes that win, lose and run out of budget.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

#: A ChatML template (Qwen2.5's layout, no tools): the tiny tokenizer has ``<|im_start|>``/``<|im_end|>``.
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

Script = Callable[[str, np.random.Generator], str | None]


class TinyModelServer:
    """verl's ``LLMServerClient.generate`` on CPU (see the module docstring).

    ``script(conversation_text, rng)`` returns the reply to force (``None``: sample from the model);
    forced replies end with the end-of-turn token.  Sampled replies stop at the end-of-turn token, at
    ``sampling_params["max_tokens"]`` or at ``max_sampled_tokens``.
    """

    def __init__(self, model: Any, tokenizer: Any, script: Script | None = None, max_sampled_tokens: int = 12,
                 seed: int = 0) -> None:
        torch.set_num_threads(1)  # a tiny model: threads only contend on a shared CPU
        self.model, self.tokenizer, self.script = model, tokenizer, script
        self.max_sampled_tokens = max_sampled_tokens
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator().manual_seed(seed)
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.calls: list[dict[str, Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        max_tokens = int(sampling_params.get("max_tokens", self.max_sampled_tokens))
        temperature = float(sampling_params.get("temperature", 1.0)) or 1.0
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        forced = self.script(text, self.rng) if self.script else None
        if forced is not None:
            wanted = self.tokenizer.encode(forced, add_special_tokens=False) + [self.eos]
            limit = min(max_tokens, len(wanted))
        else:
            wanted, limit = None, min(max_tokens, self.max_sampled_tokens)
        ids, logprobs = list(prompt_ids), []
        with torch.no_grad():
            for position in range(limit):
                logits = self.model(torch.tensor([ids])).logits[0, -1].float() / temperature
                log_softmax = torch.log_softmax(logits, dim=-1)
                token = wanted[position] if wanted else int(torch.multinomial(log_softmax.exp(), 1, generator=self.generator))
                ids.append(token)
                logprobs.append(float(log_softmax[token]))
                if token == self.eos:
                    break
        reply = ids[len(prompt_ids):]
        self.calls.append({"request_id": request_id, "prompt": text, "reply": reply, "max_tokens": max_tokens})
        return TokenOutput(token_ids=reply, log_probs=logprobs, stop_reason="completed")


def listed_commands(conversation: str) -> list[str]:
    """The commands of the conversation's last user message."""
    return conversation.rsplit("Available commands: ", 1)[1].split("<|im_end|>", 1)[0].strip().split(", ")


def key_door_expert(conversation: str, rng: np.random.Generator) -> str:
    """KeyDoor's winning play: take the key, then open the door of the task's colour."""
    if "Action: take key" not in conversation:  # (KeyDoor keeps listing "take key")
        return "Thought: I need the key.\nAction: take key"
    colour = re.search(r"Your task is to: .*?\b(\w+) door", conversation).group(1)
    return f"Action: open {colour} door"


def random_command(conversation: str, rng: np.random.Generator) -> str:
    """A listed command at random."""
    return f"Action: {rng.choice(listed_commands(conversation))}"


class BrokenStep(gym.Wrapper):
    """An env whose backend is gone: every ``step`` raises (the fault policy's failed episode)."""

    def step(self, action: Any) -> Any:
        raise ConnectionError("backend lost")

"""The chat-completion backend protocol that LLM policies generate through.

A backend turns conversations (OpenAI-style ``{"role", "content"}`` messages) into replies,
many at once.  One LLM policy layer builds the messages and parses the replies; the backend
only generates: a local Hugging Face model (batched ``generate`` with a KV cache) or a served
model over the OpenAI chat-completions protocol (vLLM, SGLang, llama.cpp, hosted APIs).

Example:
    >>> class Echo:
    ...     name = "echo"
    ...     def complete(self, conversations, seeds, sampling):
    ...         return [Completion("Action: " + c[-1]["content"]) for c in conversations]
    >>> Echo().complete([[{"role": "user", "content": "look"}]], [0], Sampling())[0].text
    'Action: look'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["ChatBackend", "Completion", "Message", "Sampling"]

#: One chat message: ``{"role": "system" | "user" | "assistant", "content": str}``.
Message = dict[str, str]


@dataclass(frozen=True)
class Sampling:
    """How to sample a reply; applied exactly (no other sampler setting is added by a backend).

    ``temperature=0`` is greedy decoding.  ``stop``: the reply ends before the first of these
    strings (the string itself is not part of the reply).
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    stop: tuple[str, ...] = ()


@dataclass
class Completion:
    """One generated reply.

    ``prompt_ids``/``completion_ids`` and ``logprobs`` (one per completion token, under the
    sampling distribution actually used) are filled by local backends, for the trainer.
    """

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = field(default=None, repr=False)
    #: ``[tokens fed, hidden]``: the hidden states that entered one decoder layer for every token the model
    #: was fed (the prompt, then the reply but its last token), where the backend was asked to keep them
    #: (``HFChatBackend(keep_hidden_at=...)``: what the trainer's loss reuses of the frozen layers below it)
    hidden_states: Any = field(default=None, repr=False)


@runtime_checkable
class ChatBackend(Protocol):
    """Generates a reply per conversation; ``seeds[i]`` fixes the sampling of conversation ``i``."""

    name: str

    def complete(
        self, conversations: Sequence[Sequence[Message]], seeds: Sequence[int], sampling: Sampling
    ) -> list[Completion]: ...

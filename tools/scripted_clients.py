"""A verifiers client that answers without a model, optionally slow: a stand-in for a served model.

The adapter tests play KeyDoor with :func:`keydoor_expert`; ``benchmarks/verifiers_concurrency.py``
plays ALFWorld with :func:`random_admissible` (a model server's wait is ``latency``).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Callable
from typing import Any

import verifiers as vf


def keydoor_expert(prompt: vf.Messages) -> str:
    """The winning reply for a KeyDoor conversation: take the key, then open the task's door."""
    text = "\n".join(str(_content(m) or "") for m in prompt)
    if "You take the key" not in text:
        return "Thought: the key first.\nAction: take key"
    door = re.search(r"Your task is to: (open the \w+ door)", text)
    assert door is not None, text
    return f"Thought: now the door.\nAction: {door.group(1).replace('the ', '')}"


def random_admissible(seed: int = 0) -> Callable[[vf.Messages], str]:
    """A policy replying ``Action: <a random command of the last message's admissible list>`` ("look" if none)."""
    rng = random.Random(seed)

    def policy(prompt: vf.Messages) -> str:
        listed = re.search(r"Admissible commands: (.*)", str(_content(prompt[-1]) or ""))
        return f"Action: {rng.choice(listed.group(1).split(', ')) if listed else 'look'}"

    return policy


class ScriptedClient(vf.Client):
    """Replies with ``policy(prompt)``; ``latency`` seconds per reply (awaited: a model server's wait)."""

    def __init__(self, policy=keydoor_expert, latency: float = 0.0) -> None:
        super().__init__(client_or_config=None)
        self.policy, self.latency = policy, latency

    async def get_response(self, prompt: vf.Messages, model: str, sampling_args: vf.SamplingArgs,
                           tools: Any = None, **kwargs: Any) -> vf.Response:
        if self.latency:
            await asyncio.sleep(self.latency)
        message = vf.ResponseMessage(content=self.policy(prompt), finish_reason="stop", is_truncated=False)
        return vf.Response(id="scripted", created=int(time.time()), model=model, message=message)

    # the abstract conversions of vf.Client: unused, get_response is answered directly
    def setup_client(self, config: Any) -> None:
        return None

    async def to_native_tool(self, tool: Any) -> Any:
        return tool

    async def to_native_prompt(self, messages: vf.Messages) -> tuple[Any, dict]:
        return messages, {}

    async def get_native_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def raise_from_native_response(self, response: Any) -> None:
        return None

    async def from_native_response(self, response: Any) -> vf.Response:
        raise NotImplementedError

    async def close(self) -> None:
        return None


def _content(message: Any) -> Any:
    return message.get("content") if isinstance(message, dict) else getattr(message, "content", None)

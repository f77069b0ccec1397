"""A verifiers client that answers without a model: a KeyDoor expert, optionally slow (for the adapter tests)."""

from __future__ import annotations

import asyncio
import re
import time
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

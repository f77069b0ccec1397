"""An OpenAI-compatible chat server with no model behind it: a stand-in for ``vllm serve`` in tests.

It lists the model names it was given at ``GET /v1/models`` and answers every
``POST /v1/chat/completions`` at once with ``Thought: ...`` / ``Action: <command>``, the command
being the first one the last message lists (``Admissible commands: a, b`` or ``Available
commands: a, b``), else ``look``; ``usage`` counts characters.  It accepts what verifiers' client
sends (``"tool_calls": null``, ``max_completion_tokens``), which llama.cpp's server refuses, and
streams the reply as chunks when asked (``"stream": true``: verifiers v1 streams every model call).
``tests/test_docs_blocks.py`` runs the docs' served-model snippets against it: the snippet's code
path (client, requests, replies, the env's loop) is exercised as written, in seconds; what a real
model replies is not (``tools/llama_server.py`` serves a real one).

Example:
    >>> import json, urllib.request
    >>> with StandinServer(["Qwen/Qwen2.5-7B-Instruct"]) as server:
    ...     request = urllib.request.Request(server.base_url + "/chat/completions", method="POST",
    ...         data=json.dumps({"model": "Qwen/Qwen2.5-7B-Instruct", "messages": [
    ...             {"role": "user", "content": "Admissible commands: take key, look"}]}).encode())
    ...     reply = json.load(urllib.request.urlopen(request))
    >>> reply["choices"][0]["message"]["content"]
    'Thought: I act.\\nAction: take key'
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["StandinServer", "reply_text"]

_LISTED = re.compile(r"(?:Admissible|Available) commands: (.*)")


def reply_text(messages: Sequence[dict[str, Any]]) -> str:
    """The ReAct reply: the first command the last message lists, else ``look``."""
    content = messages[-1].get("content") if messages else ""
    if isinstance(content, list):  # content parts
        content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    listed = _LISTED.search(str(content or ""))
    command = listed.group(1).split(", ")[0].strip() if listed else "look"
    return f"Thought: I act.\nAction: {command or 'look'}"


class StandinServer:
    """The stand-in server on 127.0.0.1 (``port=0``: a free one), in a thread, as a context manager.

    ``reply``: what answers a conversation (its messages, as sent) — :func:`reply_text` unless given.
    """

    def __init__(self, models: Sequence[str], host: str = "127.0.0.1", port: int = 0,
                 reply: Callable[[Sequence[dict[str, Any]]], str] | None = None) -> None:
        if not models:
            raise ValueError("StandinServer needs at least one model name to list")
        self.models = list(models)
        self.reply = reply or reply_text
        self.requests = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.address}/v1"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/v1/models":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                self._send(200, {"object": "list", "data": [
                    {"id": name, "object": "model", "created": 0, "owned_by": "standin"} for name in server.models]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if body.get("model") not in server.models:
                    self._send(404, {"error": {"message": f"model {body.get('model')!r} not served", "type": "x"}})
                    return
                with server._lock:
                    server.requests += 1
                messages = body.get("messages") or []
                text = server.reply(messages)
                prompt = len(json.dumps(messages))
                usage = {"prompt_tokens": prompt, "completion_tokens": len(text), "total_tokens": prompt + len(text)}
                if body.get("stream"):
                    self._stream(f"standin-{server.requests}", body["model"], text, usage)
                    return
                self._send(200, {
                    "id": f"standin-{server.requests}", "object": "chat.completion", "created": 0,
                    "model": body["model"],
                    "choices": [{"index": i, "finish_reason": "stop", "logprobs": None,
                                 "message": {"role": "assistant", "content": text}}
                                for i in range(int(body.get("n") or 1))],
                    "usage": usage})

            def _stream(self, ident: str, model: str, text: str, usage: dict[str, int]) -> None:
                """The reply as chat-completion chunks (server-sent events), as ``stream: true`` asks."""
                head = {"id": ident, "object": "chat.completion.chunk", "created": 0, "model": model}
                chunks = [
                    {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                          "finish_reason": None}]},
                    {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    {**head, "choices": [], "usage": usage},
                ]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

        return Handler

    def __enter__(self) -> StandinServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

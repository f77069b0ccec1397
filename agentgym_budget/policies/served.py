"""Served models over the OpenAI chat-completions protocol: vLLM, SGLang, llama.cpp, hosted APIs.

:class:`OpenAIChatBackend` is a :class:`~agentgym_budget.policies.chat.ChatBackend` over the
official ``openai`` client (extra ``openai``).  :meth:`~OpenAIChatBackend.complete` sends the
conversations of a batch concurrently — a private thread pool of ``max_concurrency`` workers
holds at most that many requests in flight for the backend as a whole (``None``: the whole
batch at once, i.e. as many as the evaluator has episodes in flight) — so it works from any
thread, with or without a running event loop (an ``async`` caller awaits
:meth:`~OpenAIChatBackend.acomplete`, which runs the same thing off the loop).  Sampling is
passed through exactly: ``temperature``, ``top_p``, ``max_tokens=max_new_tokens``, ``stop``
(when non-empty) and ``seed=seeds[i]``.  Retries with exponential backoff (0.5 s doubling, at
most 8 s, with jitter; a server's ``Retry-After`` is honoured) on 408/409/429/5xx, connection
errors and timeouts are the ``openai`` client's own (``max_retries``).  Failures surface as a
one-line :class:`ServedModelError`: server unreachable, model not served (the message lists
the served ones, from ``/v1/models``), timeouts, rejected requests.

With ``cache=path`` replies are kept in a sqlite file keyed by :func:`cache_key` (model,
messages, sampling, seed): a repeated request costs nothing, so re-running an evaluation with
the same seeds reads every reply back (with the token counts it cost the first time).

Example (the lines marked ``+SKIP`` need a running server, e.g. ``vllm serve MODEL`` or
``python -m llama_cpp.server --model M``):
    >>> from agentgym_budget.policies.chat import Sampling
    >>> backend = OpenAIChatBackend("Qwen2.5-7B-Instruct", base_url="http://127.0.0.1:8000/v1")
    >>> backend.api_key  # a local server takes any key
    'sk-no-key-required'
    >>> replies = backend.complete([[{"role": "user", "content": "look"}]], [0], Sampling())  # doctest: +SKIP
    >>> replies[0].text, replies[0].completion_tokens  # doctest: +SKIP
    ('Action: look', 4)
    >>> len(cache_key("m", [{"role": "user", "content": "look"}], Sampling(), seed=0))
    64
    >>> OpenAIChatBackend("m", base_url="http://127.0.0.1:8000/v1", max_concurrency=0)
    Traceback (most recent call last):
    ...
    ValueError: max_concurrency must be >= 1 (or None: the whole batch), got 0
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import ipaddress
import json
import os
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentgym_budget._optional import require
from agentgym_budget.policies.chat import Completion, Message, Sampling

__all__ = ["OpenAIChatBackend", "ResponseCache", "ServedModelError", "ServedStats", "cache_key"]

#: The key sent to a local server when none is given (local servers accept any key).
LOCAL_API_KEY = "sk-no-key-required"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class ServedModelError(RuntimeError):
    """A served model could not answer: unreachable server, unknown model, timeout, rejected request."""


def _one_line(text: object, limit: int = 400) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _is_local(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    if host in ("localhost", "0.0.0.0") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cache_key(model: str, messages: Sequence[Message], sampling: Sampling, seed: int) -> str:
    """sha256 (hex) of the JSON of what fixes a reply: model, messages, sampling, seed."""
    payload = {
        "model": model, "messages": [dict(m) for m in messages], "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p), "max_new_tokens": int(sampling.max_new_tokens),
        "stop": list(sampling.stop), "seed": int(seed),
    }
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ResponseCache:
    """Replies by :func:`cache_key` in a sqlite file; thread-safe, shareable between processes.

    Example:
        >>> import tempfile, os
        >>> cache = ResponseCache(os.path.join(tempfile.mkdtemp(), "replies.sqlite"))
        >>> cache.put("k", Completion("Action: look", 12, 4))
        >>> cache.get("k"), cache.get("other"), len(cache)
        (Completion(text='Action: look', prompt_tokens=12, completion_tokens=4,
                    prompt_ids=None, completion_ids=None), None, 1)
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # One connection shared under a lock (sqlite serialises writers anyway); WAL lets
        # evaluation worker processes read while another writes.
        self._db = sqlite3.connect(self.path, timeout=60.0, check_same_thread=False, isolation_level=None)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, text TEXT NOT NULL,"
                " prompt_tokens INTEGER, completion_tokens INTEGER)")

    def get(self, key: str) -> Completion | None:
        with self._lock:
            row = self._db.execute(
                "SELECT text, prompt_tokens, completion_tokens FROM replies WHERE key = ?", (key,)).fetchone()
        return None if row is None else Completion(row[0], row[1], row[2])

    def put(self, key: str, completion: Completion) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?)",
                (key, completion.text, completion.prompt_tokens, completion.completion_tokens))

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass
class ServedStats:
    """What a backend has cost so far: chat requests answered by the server, and cache hits."""

    requests: int = 0
    cache_hits: int = 0


class OpenAIChatBackend:
    """A chat backend over an OpenAI-compatible server (see the module docstring).

    ``base_url``: the server's ``.../v1`` address (default: env ``OPENAI_BASE_URL``, else
    OpenAI's).  ``api_key``: else env ``OPENAI_API_KEY``, else a placeholder for a local
    server.  ``timeout``: seconds per request attempt.  ``max_retries``: extra attempts after a
    429/5xx/connection error/timeout.  ``cache``: a sqlite path (or :class:`ResponseCache`).
    ``check_model``: before the first request, ask ``/v1/models`` whether ``model`` is served
    (servers such as llama.cpp's would otherwise answer with whatever model they hold); that
    check retries at most once, so a server that is not running is reported in about a second.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        max_concurrency: int | None = 8,
        timeout: float = 60.0,
        max_retries: int = 5,
        cache: str | os.PathLike[str] | ResponseCache | None = None,
        check_model: bool = True,
    ):
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string (the served model's name), got {model!r}")
        if max_concurrency is not None and int(max_concurrency) < 1:
            raise ValueError(f"max_concurrency must be >= 1 (or None: the whole batch), got {max_concurrency}")
        if not float(timeout) > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if int(max_retries) < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if not _is_local(self.base_url):
                raise ServedModelError(
                    f"no API key for {self.base_url}: pass api_key=... (--policy-arg api_key=...) "
                    "or set OPENAI_API_KEY")
            key = LOCAL_API_KEY
        self.api_key = key
        self.max_concurrency = None if max_concurrency is None else int(max_concurrency)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.check_model = check_model
        self.name = f"openai:{model}"
        self.stats = ServedStats()
        self._cache_arg = cache
        self._init_runtime()

    # -- runtime state (rebuilt after pickling, e.g. in an evaluation worker process) --------
    def _init_runtime(self) -> None:
        cache = self._cache_arg
        self._cache = cache if isinstance(cache, ResponseCache) or cache is None else None
        self._lock = threading.Lock()
        self._client: Any = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._model_checked = not self.check_model

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in ("_cache", "_lock", "_client", "_executor")}
        if isinstance(self._cache_arg, ResponseCache):
            state["_cache_arg"] = self._cache_arg.path
        state.pop("_model_checked", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    @property
    def cache(self) -> ResponseCache | None:
        """The response cache, opened on first use (``None`` without ``cache=``)."""
        if self._cache is None and self._cache_arg is not None:
            with self._lock:
                if self._cache is None:
                    self._cache = ResponseCache(self._cache_arg)  # type: ignore[arg-type]
        return self._cache

    @property
    def client(self) -> Any:
        """The ``openai.OpenAI`` client (built on first use)."""
        if self._client is None:
            openai = require("openai", "openai", "the 'openai' policy (served models)")
            with self._lock:
                if self._client is None:
                    self._client = openai.OpenAI(
                        base_url=self.base_url, api_key=self.api_key, timeout=self.timeout,
                        max_retries=self.max_retries)
        return self._client

    def _pool(self, batch: int) -> tuple[concurrent.futures.ThreadPoolExecutor, bool]:
        """``(pool, temporary)``: the shared pool, or with ``max_concurrency=None`` one for this batch."""
        if self.max_concurrency is None:
            return concurrent.futures.ThreadPoolExecutor(batch, thread_name_prefix="openai-backend"), True
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    self.max_concurrency, thread_name_prefix="openai-backend")
            return self._executor, False

    def close(self) -> None:
        """Stop the worker threads and close the HTTP client and the cache."""
        with self._lock:
            executor, self._executor = self._executor, None
            client, self._client = self._client, None
            owned = self._cache_arg is not None and not isinstance(self._cache_arg, ResponseCache)
            cache = self._cache if owned else None  # a ResponseCache passed in is the caller's to close
            if owned:
                self._cache = None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        if client is not None:
            client.close()
        if cache is not None:
            cache.close()

    def __enter__(self) -> OpenAIChatBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"OpenAIChatBackend(model={self.model!r}, base_url={self.base_url!r}, "
                f"max_concurrency={self.max_concurrency})")

    # -- errors ------------------------------------------------------------------------------
    def _error(self, err: Exception, retries: int | None = None) -> ServedModelError:
        """The one-line :class:`ServedModelError` for an ``openai`` exception (after ``retries``)."""
        openai = require("openai", "openai")
        where = f"the OpenAI-compatible server at {self.base_url}"
        retries = self.max_retries if retries is None else retries
        tries = f"{retries + 1} attempt{'s' if retries else ''}"
        if isinstance(err, openai.APITimeoutError):
            return ServedModelError(_one_line(
                f"{where} did not answer within timeout={self.timeout:g}s ({tries}): it may be overloaded; "
                "raise the timeout or lower max_concurrency"))
        if isinstance(err, openai.APIConnectionError):
            cause = err.__cause__ or err
            return ServedModelError(_one_line(
                f"cannot reach {where} ({type(cause).__name__}: {cause}; {tries}); "
                "check that the server is running and that base_url is right"))
        if isinstance(err, openai.APIStatusError):
            status = err.status_code
            if status == 404:
                served = self._served_models()
                if served is not None and self.model not in served:
                    return self._unknown_model(served)
            if status == 401:
                return ServedModelError(_one_line(f"{where} rejected the API key (401): {err.message}"))
            if status == 429 or status >= 500:
                return ServedModelError(_one_line(f"{where} still answered {status} after {tries}: {err.message}"))
            return ServedModelError(_one_line(f"{where} rejected the request ({status}): {err.message}"))
        return ServedModelError(_one_line(f"request to {where} failed: {type(err).__name__}: {err}"))

    def _unknown_model(self, served: list[str]) -> ServedModelError:
        shown = ", ".join(repr(m) for m in served[:20])
        if len(served) > 20:
            shown += f" (and {len(served) - 20} more)"
        return ServedModelError(_one_line(
            f"model {self.model!r} is not served at {self.base_url}; it serves: {shown or 'no models'}", limit=2000))

    def _served_models(self) -> list[str] | None:
        """The ids ``/v1/models`` lists, or ``None`` where the server has no such listing.

        At most one retry: a server that is not up at the start of a run is most often not
        running at all, which is best said at once (requests later retry ``max_retries`` times).
        """
        openai = require("openai", "openai")
        retries = min(self.max_retries, 1)
        try:
            return [m.id for m in self.client.with_options(max_retries=retries).models.list()]
        except (openai.NotFoundError, openai.PermissionDeniedError, openai.UnprocessableEntityError,
                openai.BadRequestError):
            return None
        except openai.OpenAIError as err:
            raise self._error(err, retries) from err

    def check(self) -> None:
        """Raise :class:`ServedModelError` unless the server answers and serves ``model``."""
        served = self._served_models()
        if served is not None and self.model not in served:
            raise self._unknown_model(served)

    def _check_once(self) -> None:
        if self._model_checked:
            return
        self.check()
        self._model_checked = True

    # -- generation ----------------------------------------------------------------------------
    def _request(self, messages: Sequence[Message], seed: int, sampling: Sampling) -> Completion:
        openai = require("openai", "openai")
        kwargs: dict[str, Any] = {
            "model": self.model, "messages": [dict(m) for m in messages], "temperature": sampling.temperature,
            "top_p": sampling.top_p, "max_tokens": sampling.max_new_tokens, "seed": int(seed),
        }
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        try:
            response = self.client.chat.completions.create(**kwargs)
        except openai.OpenAIError as err:
            raise self._error(err) from err
        with self._lock:
            self.stats.requests += 1
        if not response.choices:
            raise ServedModelError(_one_line(f"the server at {self.base_url} answered with no choices: {response}"))
        usage = response.usage
        return Completion(
            response.choices[0].message.content or "",
            None if usage is None else usage.prompt_tokens,
            None if usage is None else usage.completion_tokens,
        )

    def complete(
        self, conversations: Sequence[Sequence[Message]], seeds: Sequence[int], sampling: Sampling
    ) -> list[Completion]:
        """One reply per conversation, in input order; at most ``max_concurrency`` requests in flight.

        On the first failure the requests not yet sent are cancelled and the
        :class:`ServedModelError` is raised; replies already received stay in the cache.
        """
        if len(conversations) != len(seeds):
            raise ValueError(f"one seed per conversation: got {len(conversations)} conversations, {len(seeds)} seeds")
        cache = self.cache
        keys = ([cache_key(self.model, c, sampling, s) for c, s in zip(conversations, seeds)]
                if cache is not None else [])
        results: list[Completion | None] = (
            [cache.get(k) for k in keys] if cache is not None else [None] * len(conversations))
        missing = [i for i, r in enumerate(results) if r is None]
        with self._lock:
            self.stats.cache_hits += len(conversations) - len(missing)
        if not missing:
            return results  # type: ignore[return-value]
        self._check_once()
        pool, temporary = self._pool(len(missing))
        try:
            futures = {pool.submit(self._request, conversations[i], seeds[i], sampling): i for i in missing}
            done, pending = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
            for future in pending:
                future.cancel()
            concurrent.futures.wait(pending)  # those already sent finish (and are cached) before we raise
        finally:
            if temporary:
                pool.shutdown(wait=False)
        error: BaseException | None = None
        for future, i in futures.items():
            if future.cancelled():
                continue
            if future.exception() is not None:
                error = error or future.exception()
                continue
            results[i] = future.result()
            if cache is not None:
                cache.put(keys[i], results[i])  # type: ignore[arg-type]
        if error is not None:
            raise error
        return results  # type: ignore[return-value]

    async def acomplete(
        self, conversations: Sequence[Sequence[Message]], seeds: Sequence[int], sampling: Sampling
    ) -> list[Completion]:
        """:meth:`complete` for a caller inside an event loop (runs it in a thread, off the loop)."""
        return await asyncio.to_thread(self.complete, conversations, seeds, sampling)

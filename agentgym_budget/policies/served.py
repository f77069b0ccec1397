"""Served models over the OpenAI chat-completions protocol: vLLM, SGLang, llama.cpp, hosted APIs.

:class:`OpenAIChatBackend` is a :class:`~agentgym_budget.policies.chat.ChatBackend` over the
official ``openai`` client (extra ``openai``).  :meth:`~OpenAIChatBackend.complete` sends the
conversations of a batch concurrently — a private thread pool of ``max_concurrency`` workers
holds at most that many requests in flight for the backend as a whole (``None``: the whole
batch at once, i.e. as many as the evaluator has episodes in flight) — so it works from any
thread, with or without a running event loop (an ``async`` caller awaits
:meth:`~OpenAIChatBackend.acomplete`, which runs the same thing off the loop).  Sampling is
passed through exactly: ``temperature``, ``top_p``, ``max_tokens=max_new_tokens``, ``stop``
(when non-empty) and ``seed=seeds[i]``.

What a server sends is checked before it is used or stored (:func:`parse_chat_reply`): a
reply is a JSON object whose first choice has a ``message`` with ``content`` a string (or the
protocol's list of text parts, joined); anything else (an HTML page, no ``message``, ``null``
or non-text content, an ``error`` object in a 200) is an invalid reply.  Token counts must be
non-negative integers; any other value is recorded as unknown (``None``) with an
:class:`UnknownTokenCountWarning`.

Each request *attempt* is bounded as a whole by ``timeout`` (connect to last byte: see
:mod:`~agentgym_budget.policies.served_http`; a server trickling its reply cannot stretch it).
Failed attempts are retried ``max_retries`` times with exponential backoff (0.5 s doubling, at
most 8 s, with jitter; a server's ``Retry-After`` is honoured) on 408/409/429/5xx, connection
errors, timeouts and invalid replies.  A ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM during an
evaluation) in :meth:`~OpenAIChatBackend.complete` cancels the requests in flight within
:data:`~agentgym_budget.policies.served_http.POLL_SECONDS` and starts no retry.  A redirect to
another server is refused.  Failures surface as a one-line :class:`ServedModelError`: server
unreachable, model not served (the message lists the served ones, from ``/v1/models``),
timeouts, rejected requests, invalid replies; credentials in ``base_url`` are shown as ``***``.

With ``cache=path`` replies are kept in a sqlite file keyed by :func:`cache_key` (the server's
origin, model, messages, sampling, seed): a repeated request costs nothing, so re-running an
evaluation with the same seeds reads every reply back (with the token counts it cost the first
time).  One key has one reply: the first stored wins, and every run asking for that key uses
it, so runs sharing a cache, and a replay from it, see the same replies.  ``cache_scope="model"``
leaves the server out of the key: replies are shared by every server of that model name (to
replay a run without its server, or across replicas).

The example's lines marked ``+SKIP`` need a running server, e.g. ``vllm serve MODEL`` or
``python -m llama_cpp.server --model M``.

Example:
    >>> from agentgym_budget.policies.chat import Sampling
    >>> backend = OpenAIChatBackend("Qwen2.5-7B-Instruct", base_url="http://127.0.0.1:8000/v1")
    >>> backend.api_key  # a local server takes any key
    'sk-no-key-required'
    >>> replies = backend.complete([[{"role": "user", "content": "look"}]], [0], Sampling())  # doctest: +SKIP
    >>> replies[0].text, replies[0].completion_tokens  # doctest: +SKIP
    ('Action: look', 4)
    >>> len(cache_key("m", [{"role": "user", "content": "look"}], Sampling(), seed=0, server="http://h:80"))
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
import random
import sqlite3
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from agentgym_budget._optional import require
from agentgym_budget.policies.chat import Completion, Message, Sampling
from agentgym_budget.policies.served_http import RedirectRefused, attempt, http_client, origin
from agentgym_budget.text import error_line, printable_line, redact_url

__all__ = ["CACHE_SCOPES", "InvalidReply", "OpenAIChatBackend", "ResponseCache", "ServedModelError", "ServedStats",
           "UnknownTokenCountWarning", "cache_key", "parse_chat_reply"]

T = TypeVar("T")

#: The key sent to a local server when none is given (local servers accept any key).
LOCAL_API_KEY = "sk-no-key-required"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: ``cache_scope`` values: replies keyed by server origin and model, or by model name alone.
CACHE_SCOPES = ("server", "model")
#: Retry backoff as the ``openai`` client's: 0.5 s doubling to 8 s, less up to 25 % jitter.
_FIRST_DELAY, _MAX_DELAY, _MAX_RETRY_AFTER = 0.5, 8.0, 60.0
#: Larger token counts than this are no real count (a reply of a trillion tokens).
_MAX_TOKENS = 10**12


class ServedModelError(RuntimeError):
    """A served model could not answer: unreachable server, unknown model, timeout, rejected request,
    invalid reply.  Its message is one printable line, written to be shown alone."""

    reads_alone = True  # text.error_line quotes the message without the class name


class InvalidReply(ValueError):
    """A 200 reply that is no chat completion (HTML, no ``message``, non-text content, an error object)."""


class UnknownTokenCountWarning(UserWarning):
    """A server reported a token count that is no non-negative integer; it is recorded as unknown."""


#: The most characters of a served-model error's message (it quotes the server's text).
_MESSAGE_LIMIT = 400


def _token_count(usage: dict[str, Any], name: str) -> int | None:
    """``usage[name]`` if it is a plausible count, else ``None`` (with a warning when present but wrong)."""
    value = usage.get(name)
    if value is None:
        return None
    if type(value) is int and 0 <= value <= _MAX_TOKENS:  # not bool, not 12.0, not NaN
        return value
    warnings.warn(f"the server reported {name}={printable_line(repr(value), 60)}, no token count: recorded as unknown",
                  UnknownTokenCountWarning, stacklevel=2)
    return None


def _content_text(content: Any) -> str:
    """A message's ``content``: a string, or the protocol's list of text parts (joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise InvalidReply(f"message content is {printable_line(json.dumps(content), 80)}, not text")


def parse_chat_reply(body: bytes) -> Completion:
    """The :class:`Completion` in a chat-completions response body; :class:`InvalidReply` if it has none.

    Example:
        >>> parse_chat_reply(b'{"choices": [{"message": {"content": [{"type": "text", "text": "Action: "},'
        ...                  b' {"type": "text", "text": "look"}]}}], "usage": {"prompt_tokens": 9}}')
        Completion(text='Action: look', prompt_tokens=9, completion_tokens=None, prompt_ids=None,
                   completion_ids=None)
        >>> parse_chat_reply(b'<html>502 Bad Gateway</html>')
        Traceback (most recent call last):
        ...
        agentgym_budget.policies.served.InvalidReply: not JSON: <html>502 Bad Gateway</html>
    """
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidReply(f"not JSON: {printable_line(body[:80].decode('utf-8', 'replace'), 80)}") from None
    if not isinstance(payload, dict):
        raise InvalidReply(f"not a JSON object: {printable_line(json.dumps(payload), 80)}")
    if payload.get("error"):
        raise InvalidReply(f"an error object: {printable_line(json.dumps(payload['error']), 200)}")
    choices = payload.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise InvalidReply("no choices[0].message")
    usage = payload.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return Completion(_content_text(message.get("content")), _token_count(usage, "prompt_tokens"),
                      _token_count(usage, "completion_tokens"))


def _is_local(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    if host in ("localhost", "0.0.0.0") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cache_key(model: str, messages: Sequence[Message], sampling: Sampling, seed: int,
              server: str | None = None) -> str:
    """sha256 (hex) of the JSON of what fixes a reply: server (its origin; ``None``: any server of
    this model name), model, messages, sampling, seed."""
    payload = {
        "model": model, "messages": [dict(m) for m in messages], "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p), "max_new_tokens": int(sampling.max_new_tokens),
        "stop": list(sampling.stop), "seed": int(seed),
    }
    if server is not None:  # absent, not null: keys of a model-scoped cache stay those of earlier versions
        payload["server"] = server
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ResponseCache:
    """Replies by :func:`cache_key` in a sqlite file; thread-safe, shareable between processes.

    One key, one reply: :meth:`put` keeps the reply stored first and returns it, so runs racing
    on one cache all use the same reply for a key.  A file that is not a sqlite database is a
    one-line :class:`ServedModelError` naming it.

    Why racing runs cannot part (``tests/test_reply_cache_race.py`` races processes on one
    folder and replays from the cache alone):

    * a reply is written by one ``INSERT OR IGNORE`` in autocommit mode: a statement is atomic
      and durable in sqlite's WAL, so a second writer of a key stores nothing, and the reply
      :meth:`put` returns — the one the run uses — is read back after that insert, i.e. the
      first writer's; rows are never updated or deleted, and a reader never sees half a row.
    * a new cache file is built under a temporary name (WAL mode on, table made) and put in
      place with ``os.link``, which fails if the name exists: the first process wins and
      every other opens the finished file.  Before, every opener switched the new file to WAL
      itself, and sqlite answers a switch while another connection holds the write lock with
      "database is locked" at once (its busy timeout does not apply): 8 of 100 rounds of two
      processes opening a new cache together failed a run that way on a 2-core machine (none
      in 100 at load 17: the window is short), a reply-less run beside the others.

    Example:
        >>> import tempfile, os
        >>> cache = ResponseCache(os.path.join(tempfile.mkdtemp(), "replies.sqlite"))
        >>> cache.put("k", Completion("Action: look", 12, 4))
        Completion(text='Action: look', prompt_tokens=12, completion_tokens=4, prompt_ids=None,
                   completion_ids=None)
        >>> cache.put("k", Completion("Action: go north", 12, 5)).text  # the first reply stays
        'Action: look'
        >>> cache.get("k") == cache.get("k"), cache.get("other"), len(cache)
        (True, None, 1)
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with self._sqlite():
            if not self.path.exists():
                self._create()
            # One connection shared under a lock (sqlite serialises writers anyway); WAL lets
            # evaluation worker processes read while another writes.
            self._db = sqlite3.connect(self.path, timeout=60.0, check_same_thread=False, isolation_level=None)
            self._set_up(self._db)

    _TABLE = ("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, text TEXT NOT NULL,"
              " prompt_tokens INTEGER, completion_tokens INTEGER)")

    @classmethod
    def _set_up(cls, db: sqlite3.Connection) -> None:
        """WAL mode and the table; on a file that has them (every file :meth:`_create` made), only reads."""
        if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            db.execute("PRAGMA journal_mode=WAL")  # not waited for by sqlite: only for a file made elsewhere
        db.execute(cls._TABLE)

    def _create(self) -> None:
        """Make the cache file whole under a temporary name, then link it into place unless another
        process did first (then theirs is used): nobody opens a half-made file or switches it to WAL."""
        handle, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".new", dir=self.path.parent)
        os.close(handle)
        temporary = Path(name)
        try:
            db = sqlite3.connect(temporary, isolation_level=None)
            try:
                self._set_up(db)
            finally:
                db.close()  # the last connection: sqlite folds the WAL into the file and removes it
            try:
                os.link(temporary, self.path)
            except FileExistsError:
                pass  # another process made it first
            except OSError:  # no hard links on this file system: open the path itself, as before
                pass
        finally:
            for leftover in (temporary, Path(f"{temporary}-wal"), Path(f"{temporary}-shm")):
                leftover.unlink(missing_ok=True)

    @contextmanager
    def _sqlite(self) -> Iterator[None]:
        """Hold the lock; a corrupt or foreign file becomes a one-line error naming it."""
        with self._lock:
            try:
                yield
            except sqlite3.DatabaseError as e:  # "file is not a database", "database disk image is malformed"
                raise ServedModelError(printable_line(
                    f"the reply cache {self.path} cannot be used ({e}): delete it or pass another cache=",
                    _MESSAGE_LIMIT)) from None

    def get(self, key: str) -> Completion | None:
        with self._sqlite():
            row = self._db.execute(
                "SELECT text, prompt_tokens, completion_tokens FROM replies WHERE key = ?", (key,)).fetchone()
        return None if row is None else Completion(row[0], row[1], row[2])

    def put(self, key: str, completion: Completion) -> Completion:
        """Store ``completion`` unless ``key`` has a reply already; return the stored reply."""
        with self._sqlite():
            self._db.execute(
                "INSERT OR IGNORE INTO replies VALUES (?, ?, ?, ?)",
                (key, completion.text, completion.prompt_tokens, completion.completion_tokens))
        stored = self.get(key)
        assert stored is not None, f"the reply cache {self.path} lost key {key} just stored"
        return stored

    def __len__(self) -> int:
        with self._sqlite():
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
    server.  ``timeout``: seconds per request attempt, connect to last byte.  ``max_retries``:
    extra attempts after a 408/409/429/5xx, connection error, timeout or invalid reply.
    ``cache``: a sqlite path (or :class:`ResponseCache`).  ``cache_scope``: ``"server"`` (the
    default: a reply is reused only from the same server origin) or ``"model"`` (from any
    server of this model name).
    ``check_model``: before the first request, ask ``/v1/models`` whether ``model`` is served
    (servers such as llama.cpp's would otherwise answer with whatever model they hold); that
    check retries at most once, so a server that is not running is reported in about a second.
    """

    #: never recorded (results, run identity)
    secret_settings = ("api_key",)
    #: how replies are fetched, not what they are: a resume may change them
    settings_without_effect = ("max_concurrency", "timeout", "max_retries", "cache", "cache_scope", "base_url")

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
        cache_scope: str = "server",
    ):
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string (the served model's name), got {model!r}")
        if max_concurrency is not None and int(max_concurrency) < 1:
            raise ValueError(f"max_concurrency must be >= 1 (or None: the whole batch), got {max_concurrency}")
        if not float(timeout) > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if int(max_retries) < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if cache_scope not in CACHE_SCOPES:
            raise ValueError(f"cache_scope must be one of {', '.join(CACHE_SCOPES)}, got {cache_scope!r}")
        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        #: ``base_url`` as shown in messages and records: credentials in it are ``***``
        self.shown_url = redact_url(self.base_url)
        self.cache_scope = cache_scope
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if not _is_local(self.base_url):
                raise ServedModelError(printable_line(
                    f"no API key for {self.shown_url}: pass api_key=... (--policy-arg api_key=...) "
                    "or set OPENAI_API_KEY", _MESSAGE_LIMIT))
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
                    # Retries are ours (_call): interruptible, and also for invalid 200 replies.
                    self._client = openai.OpenAI(
                        base_url=self.base_url, api_key=self.api_key, timeout=self.timeout, max_retries=0,
                        http_client=http_client(self.timeout))
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
        return (f"OpenAIChatBackend(model={self.model!r}, base_url={self.shown_url!r}, "
                f"max_concurrency={self.max_concurrency})")

    # -- errors ------------------------------------------------------------------------------
    def _error(self, err: Exception, retries: int) -> ServedModelError:
        """The one-line :class:`ServedModelError` for a failed request (after ``retries`` retries)."""
        openai = require("openai", "openai")
        where = f"the OpenAI-compatible server at {self.shown_url}"
        tries = f"{retries + 1} attempt{'s' if retries else ''}"
        if isinstance(err, InvalidReply):
            return ServedModelError(printable_line(f"{where} sent an invalid reply ({tries}): {err}", _MESSAGE_LIMIT))
        refused = err if isinstance(err, RedirectRefused) else err.__cause__  # raw, or wrapped by openai 1.x
        if isinstance(refused, RedirectRefused):
            return ServedModelError(printable_line(f"{where} {refused}", _MESSAGE_LIMIT))
        if isinstance(err, openai.APITimeoutError):
            return ServedModelError(printable_line(
                f"{where} did not answer within timeout={self.timeout:g}s ({tries}): it may be overloaded; "
                "raise the timeout or lower max_concurrency", _MESSAGE_LIMIT))
        if isinstance(err, openai.APIConnectionError):
            cause = err.__cause__ or err
            return ServedModelError(printable_line(
                f"cannot reach {where} ({type(cause).__name__}: {cause}; {tries}); "
                "check that the server is running and that base_url is right", _MESSAGE_LIMIT))
        if isinstance(err, openai.APIStatusError):
            status = err.status_code
            if status == 404:
                served = self._served_models()
                if served is not None and self.model not in served:
                    return self._unknown_model(served)
            if status == 401:
                return ServedModelError(printable_line(f"{where} rejected the API key (401): {err.message}",
                                                       _MESSAGE_LIMIT))
            if status == 429 or status >= 500:
                return ServedModelError(printable_line(f"{where} still answered {status} after {tries}: {err.message}",
                                                       _MESSAGE_LIMIT))
            return ServedModelError(printable_line(f"{where} rejected the request ({status}): {err.message}",
                                                   _MESSAGE_LIMIT))
        return ServedModelError(printable_line(f"request to {where} failed: {error_line(err)}", _MESSAGE_LIMIT))

    def _unknown_model(self, served: list[str]) -> ServedModelError:
        shown = ", ".join(repr(m) for m in served[:20])
        if len(served) > 20:
            shown += f" (and {len(served) - 20} more)"
        return ServedModelError(printable_line(
            f"model {self.model!r} is not served at {self.shown_url}; it serves: {shown or 'no models'}", limit=2000))

    # -- one request, its attempts ---------------------------------------------------------------
    @staticmethod
    def _retriable(err: Exception) -> bool:
        openai = require("openai", "openai")
        if isinstance(err, InvalidReply):
            return True
        if isinstance(err, openai.APIStatusError):
            return err.status_code in (408, 409, 429) or err.status_code >= 500
        return isinstance(err, openai.APIConnectionError) and not isinstance(err.__cause__, RedirectRefused)

    @staticmethod
    def _retry_delay(err: Exception, retry: int) -> float:
        """Seconds before retry ``retry`` (0-based): the server's ``Retry-After`` if sane, else backoff."""
        response = getattr(err, "response", None)
        headers = getattr(response, "headers", None) or {}
        for name, unit in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
            value = headers.get(name)
            if value is None:
                continue
            try:
                delay = float(value) * unit
            except (TypeError, ValueError):
                continue
            if 0 <= delay <= _MAX_RETRY_AFTER:
                return delay
        return min(_FIRST_DELAY * 2**retry, _MAX_DELAY) * (1 - 0.25 * random.random())

    def _call(self, call: Callable[[], T], retries: int, cancel: threading.Event) -> T:
        """``call()`` with every attempt under the deadline, retried on transient faults until
        ``retries`` are spent or ``cancel`` is set; failures become one :class:`ServedModelError`."""
        openai = require("openai", "openai")
        for retry in range(retries + 1):
            if cancel.is_set():
                raise ServedModelError("the request was cancelled (the run is stopping)")
            try:
                with attempt(self.timeout, cancel):
                    return call()
            except (openai.OpenAIError, InvalidReply, RedirectRefused) as err:
                if retry == retries or cancel.is_set() or not self._retriable(err):
                    if cancel.is_set():
                        raise ServedModelError("the request was cancelled (the run is stopping)") from None
                    raise self._error(err, retry) from err
                cancel.wait(self._retry_delay(err, retry))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _served_models(self) -> list[str] | None:
        """The ids ``/v1/models`` lists, or ``None`` where the server has no such listing.

        At most one retry: a server that is not up at the start of a run is most often not
        running at all, which is best said at once (requests later retry ``max_retries`` times).
        """
        openai = require("openai", "openai")

        def listing() -> bytes | None:
            try:
                return self.client.models.with_raw_response.list().http_response.content
            except (openai.NotFoundError, openai.PermissionDeniedError, openai.UnprocessableEntityError,
                    openai.BadRequestError):
                return None

        body = self._call(listing, min(self.max_retries, 1), threading.Event())
        if body is None:
            return None
        try:
            models = json.loads(body)["data"]
            return [m["id"] for m in models if isinstance(m["id"], str)]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise ServedModelError(printable_line(
                f"the OpenAI-compatible server at {self.shown_url} answered /models with no model list: "
                f"{body[:80].decode('utf-8', 'replace')}", _MESSAGE_LIMIT)) from None

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
    def _request(self, messages: Sequence[Message], seed: int, sampling: Sampling,
                 cancel: threading.Event) -> Completion:
        kwargs: dict[str, Any] = {
            "model": self.model, "messages": [dict(m) for m in messages], "temperature": sampling.temperature,
            "top_p": sampling.top_p, "max_tokens": sampling.max_new_tokens, "seed": int(seed),
        }
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        # The raw body, parsed and checked by us: the openai client's models accept any shape.
        completion = self._call(
            lambda: parse_chat_reply(self.client.chat.completions.with_raw_response.create(**kwargs).http_response.content),
            self.max_retries, cancel)
        with self._lock:
            self.stats.requests += 1
        return completion

    def _cache_key(self, conversation: Sequence[Message], seed: int, sampling: Sampling) -> str:
        server = origin(self.base_url) if self.cache_scope == "server" else None
        return cache_key(self.model, conversation, sampling, seed, server=server)

    def complete(
        self, conversations: Sequence[Sequence[Message]], seeds: Sequence[int], sampling: Sampling
    ) -> list[Completion]:
        """One reply per conversation, in input order; at most ``max_concurrency`` requests in flight.

        On the first failure the requests not yet sent are cancelled and the
        :class:`ServedModelError` is raised; replies already received stay in the cache.  On a
        ``KeyboardInterrupt`` the requests in flight are cancelled too, and none is retried.
        With a cache, a reply is the one stored first for its key (another run may have stored it).
        """
        if len(conversations) != len(seeds):
            raise ValueError(f"one seed per conversation: got {len(conversations)} conversations, {len(seeds)} seeds")
        cache = self.cache
        keys = [self._cache_key(c, s, sampling) for c, s in zip(conversations, seeds)] if cache is not None else []
        results: list[Completion | None] = (
            [cache.get(k) for k in keys] if cache is not None else [None] * len(conversations))
        missing = [i for i, r in enumerate(results) if r is None]
        with self._lock:
            self.stats.cache_hits += len(conversations) - len(missing)
        if not missing:
            return results  # type: ignore[return-value]
        self._check_once()
        pool, temporary = self._pool(len(missing))
        cancel = threading.Event()
        try:
            futures = {pool.submit(self._request, conversations[i], seeds[i], sampling, cancel): i for i in missing}
            done, pending = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
            for future in pending:
                future.cancel()
            concurrent.futures.wait(pending)  # those already sent finish (and are cached) before we raise
        except BaseException:  # Ctrl-C/SIGTERM: stop the requests in flight and every retry, now
            cancel.set()
            raise
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
            results[i] = future.result() if cache is None else cache.put(keys[i], future.result())
        if error is not None:
            raise error
        return results  # type: ignore[return-value]

    async def acomplete(
        self, conversations: Sequence[Sequence[Message]], seeds: Sequence[int], sampling: Sampling
    ) -> list[Completion]:
        """:meth:`complete` for a caller inside an event loop (runs it in a thread, off the loop)."""
        return await asyncio.to_thread(self.complete, conversations, seeds, sampling)

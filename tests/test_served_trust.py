"""Trust boundaries of served models (issue 26): a hostile OpenAI-compatible server on 127.0.0.1.

Every test is bounded in wall-clock time (:func:`bounded`, or a subprocess timeout): a hang fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agentgym_budget.policies.chat import Completion, Sampling
from agentgym_budget.policies.served import (
    OpenAIChatBackend,
    ResponseCache,
    ServedModelError,
    UnknownTokenCountWarning,
    parse_chat_reply,
)

pytest.importorskip("openai", reason="the 'openai' extra is not installed (pip install -e '.[openai]')")

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]
CONVERSATION = [{"role": "system", "content": "Find the key."}, {"role": "user", "content": "Observation: a room."}]
ESC = "\x1b[2J\x1b]0;pwned\x07"  # clear the screen, retitle the terminal


def bounded(seconds: float, fn: Callable[[], T]) -> T:
    """``fn()``, failing the test if it takes more than ``seconds`` (the thread is left behind)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  (re-raised in the test's thread)
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"did not finish within {seconds} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


# -- the hostile server ---------------------------------------------------------------------------
def chat_reply(text: Any = "Action: look", usage: str = '{"prompt_tokens": 10, "completion_tokens": 3}') -> bytes:
    """A chat completion body; ``usage`` is raw JSON text (so that it can hold NaN or Infinity)."""
    head = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text}}]})
    return (head[:-1] + f', "usage": {usage}}}').encode()


#: How long the trickle mode takes to send a whole reply (a byte every 0.5 s), and the slack over a
#: timeout that the timing bounds below allow a loaded machine.
TRICKLE_S = 0.5 * len(chat_reply())
TRICKLE_SLACK_S = 9.0

#: mode -> (status, content type, body) of a chat reply
REPLIES: dict[str, tuple[int, str, bytes]] = {
    "ok": (200, "application/json", chat_reply()),
    "html": (200, "text/html", b"<html><body>502 Bad Gateway</body></html>"),
    "no_message": (200, "application/json", b'{"choices": [{"index": 0, "finish_reason": "stop"}]}'),
    "list_content": (200, "application/json",
                     chat_reply([{"type": "text", "text": "Action: "}, {"type": "text", "text": "look"}])),
    "int_content": (200, "application/json", chat_reply(5)),
    "null_content": (200, "application/json", chat_reply(None)),
    "tokens_str": (200, "application/json", chat_reply(usage='{"prompt_tokens": "12", "completion_tokens": 3}')),
    "tokens_negative": (200, "application/json",
                        chat_reply(usage='{"prompt_tokens": -1e6, "completion_tokens": 1e300}')),
    "tokens_nan": (200, "application/json", chat_reply(usage='{"prompt_tokens": NaN, "completion_tokens": Infinity}')),
    "error_200": (200, "application/json", b'{"error": {"message": "model overloaded", "code": 503}}'),
    "401": (401, "application/json", json.dumps({"error": {"message": f"bad key{ESC} [/] [red]x"}}).encode()),
}


class Hostile:
    """A scripted server: ``mode`` decides every chat reply; ``numbered`` numbers the ok replies."""

    def __init__(self) -> None:
        self.mode, self.models_mode, self.numbered = "ok", "ok", False
        self.models = ["m"]
        self.trickle_after: int | None = None  # requests after this many trickle
        self.delay = 0.0  # seconds before each chat reply
        self.redirect_to = ""
        self.chats = 0
        self.lock = threading.Lock()
        self.url = ""

    def next_number(self) -> int:
        with self.lock:
            self.chats += 1
            return self.chats


def _handler(state: Hostile) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def send(self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:  # the client gave up
                pass

        def do_GET(self) -> None:
            if state.models_mode == "html":
                self.send(200, "text/html", b"<html>welcome to nginx</html>")
            else:
                self.send(200, "application/json", json.dumps(
                    {"object": "list", "data": [{"id": m, "object": "model"} for m in state.models]}).encode())

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            number = state.next_number()
            time.sleep(state.delay)
            mode = state.mode
            if mode == "trickle" or (state.trickle_after is not None and number > state.trickle_after):
                return self.trickle(chat_reply())
            if mode == "redirect":
                return self.send(307, "text/plain", b"", {"Location": state.redirect_to})
            if mode == "ok" and state.numbered:
                return self.send(200, "application/json", chat_reply(f"Action: reply {number}"))
            self.send(*REPLIES[mode])

        def trickle(self, body: bytes) -> None:
            """Headers at once, then the body a byte every 0.5 s."""
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for i in range(len(body)):
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:
                pass

    return Handler


def _serve(state: Hostile) -> Iterator[Hostile]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True  # a trickling handler must not hold up the test's end
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def hostile() -> Iterator[Hostile]:
    yield from _serve(Hostile())


@pytest.fixture
def other() -> Iterator[Hostile]:
    yield from _serve(Hostile())


def backend(url: str, **kwargs: Any) -> OpenAIChatBackend:
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout", 5.0)
    return OpenAIChatBackend("m", base_url=url, **kwargs)


def ask(b: OpenAIChatBackend, seed: int = 0) -> Completion:
    return b.complete([CONVERSATION], [seed], Sampling())[0]


# -- A. replies are validated ----------------------------------------------------------------------
@pytest.mark.parametrize("mode, reason", [
    ("html", r"not JSON: <html><body>502 Bad Gateway"), ("no_message", r"no choices\[0\].message"),
    ("int_content", r"message content is 5, not text"), ("null_content", r"message content is null, not text"),
    ("error_200", r"an error object: .*model overloaded")])
def test_an_invalid_reply_is_retried_then_one_line_and_never_cached(
        hostile: Hostile, tmp_path: Path, mode: str, reason: str) -> None:
    hostile.mode = mode
    b = backend(hostile.url, max_retries=2, cache=tmp_path / "c.sqlite")
    with pytest.raises(ServedModelError, match=rf"sent an invalid reply \(3 attempts\): {reason}") as err:
        bounded(10, lambda: ask(b))
    assert "\n" not in str(err.value) and hostile.chats == 3
    hostile.mode = "ok"  # the server is fixed: the request is asked again, not replayed from the cache
    assert bounded(10, lambda: ask(b)).text == "Action: look" and hostile.chats == 4


def test_a_list_of_text_parts_is_read() -> None:
    assert parse_chat_reply(REPLIES["list_content"][2]).text == "Action: look"


@pytest.mark.parametrize("mode", ["tokens_str", "tokens_negative", "tokens_nan"])
def test_impossible_token_counts_are_unknown_with_a_warning(hostile: Hostile, mode: str) -> None:
    hostile.mode = mode
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reply = bounded(10, lambda: ask(backend(hostile.url)))
    assert reply.text == "Action: look" and reply.completion_tokens in (None, 3)
    assert reply.prompt_tokens is None
    assert any(issubclass(w.category, UnknownTokenCountWarning) for w in caught)


def test_a_junk_model_listing_is_one_line(hostile: Hostile) -> None:
    hostile.models_mode = "html"
    with pytest.raises(ServedModelError, match=r"answered /models with no model list: <html>welcome") as err:
        bounded(10, lambda: ask(backend(hostile.url)))
    assert "\n" not in str(err.value)


# -- B. the cache ------------------------------------------------------------------------------------
def test_the_first_stored_reply_wins_for_every_run(hostile: Hostile, tmp_path: Path) -> None:
    hostile.numbered = True  # every request gets another reply
    path = tmp_path / "c.sqlite"
    first, second = backend(hostile.url, cache=path), backend(hostile.url, cache=path)
    # both runs miss the cache and ask the server (a race), yet both use the reply stored first
    replies = bounded(10, lambda: [first._request(CONVERSATION, 0, Sampling(), threading.Event()),
                                   second._request(CONVERSATION, 0, Sampling(), threading.Event())])
    assert replies[0].text != replies[1].text  # the server did answer differently
    key = first._cache_key(CONVERSATION, 0, Sampling())
    stored = [first.cache.put(key, replies[0]), second.cache.put(key, replies[1])]
    assert stored[0] == stored[1] == replies[0]
    assert ask(first) == ask(second) == replies[0]  # and so does a replay


def test_two_runs_racing_on_one_cache_and_a_replay_show_the_same_replies(hostile: Hostile, tmp_path: Path) -> None:
    hostile.numbered, hostile.delay = True, 0.2  # slow replies: both runs miss the cache, and race
    path = tmp_path / "c.sqlite"
    convs = [[*CONVERSATION, {"role": "user", "content": f"turn {i}"}] for i in range(8)]
    runs: list[list[str]] = [[], []]
    errors: list[BaseException | None] = [None, None]

    def run(i: int) -> None:
        try:
            b = backend(hostile.url, cache=path, max_concurrency=4)
            runs[i] = [c.text for c in b.complete(convs, list(range(8)), Sampling())]
        except BaseException as e:  # noqa: BLE001 - a run that failed is named, not seen as other replies
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads), "a run did not finish within 20 s"
    assert errors == [None, None], f"a racing run failed: {errors}"
    assert hostile.chats > 8  # the runs did race: some keys were asked twice
    replay = [c.text for c in backend(hostile.url, cache=path).complete(convs, list(range(8)), Sampling())]
    assert runs[0] == runs[1] == replay and len(set(replay)) == 8


def test_the_cache_key_holds_the_server_unless_shared(hostile: Hostile, other: Hostile, tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    assert bounded(10, lambda: ask(backend(hostile.url, cache=path))).text == "Action: look"
    other.mode = "401"  # another server, which accepts nothing: its run is not answered from the cache
    with pytest.raises(ServedModelError, match=r"rejected the API key \(401\)"):
        bounded(10, lambda: ask(backend(other.url, cache=path)))
    # credentials are not part of the origin: the same server with a key in the URL hits the cache
    keyed = hostile.url.replace("http://", "http://user:sk-secret@")
    assert backend(keyed, cache=path)._cache_key(CONVERSATION, 0, Sampling()) == backend(
        hostile.url, cache=path)._cache_key(CONVERSATION, 0, Sampling())
    shared = backend(other.url, cache=path, cache_scope="model")
    assert shared._cache_key(CONVERSATION, 0, Sampling()) != backend(other.url)._cache_key(
        CONVERSATION, 0, Sampling())


def test_a_corrupt_cache_file_is_one_line_naming_it(hostile: Hostile, tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    path.write_bytes(b"this is not a sqlite file, " * 100)
    with pytest.raises(ServedModelError, match=rf"the reply cache {path} cannot be used") as err:
        ask(backend(hostile.url, cache=path))
    assert "\n" not in str(err.value)


def test_response_cache_put_keeps_the_first(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite")
    assert cache.put("k", Completion("a", 1, 1)) == Completion("a", 1, 1)
    assert cache.put("k", Completion("b", 2, 2)) == Completion("a", 1, 1) == cache.get("k")


# -- C. deadlines and interrupts ---------------------------------------------------------------------
def test_a_trickling_server_cannot_stretch_the_timeout(hostile: Hostile) -> None:
    hostile.mode = "trickle"
    start = time.monotonic()
    with pytest.raises(ServedModelError, match=r"did not answer within timeout=3s \(1 attempt\)"):
        bounded(15, lambda: ask(backend(hostile.url, timeout=3, max_retries=0)))
    elapsed = time.monotonic() - start
    print(f"trickle: gave up after {elapsed:.2f} s (timeout=3)")
    # Not before the timeout; and nowhere near the ~0.5 s x len(body) (about 100 s) that the
    # trickle lasts, which is what a per-read timeout would wait. The upper bound leaves 9 s over the
    # timeout for a loaded machine (measured on 2 cores: 3.06 s quiet, 3.33 s at load ~5), not a tight
    # deadline that load could break.
    assert 2.9 < elapsed < 3 + TRICKLE_SLACK_S, elapsed
    assert TRICKLE_S > 5 * (3 + TRICKLE_SLACK_S)  # the bound does tell the two apart


def test_an_interrupt_cancels_requests_in_flight_and_retries(hostile: Hostile) -> None:
    hostile.mode = "trickle"
    b = backend(hostile.url, timeout=30, max_retries=5, max_concurrency=2)
    b.check()

    def interrupt_soon() -> None:  # what Ctrl-C does: a KeyboardInterrupt in the waiting thread
        while hostile.chats < 2:
            time.sleep(0.05)
        sent.append(time.monotonic())
        signal.pthread_kill(main, signal.SIGINT)

    sent: list[float] = []
    main = threading.main_thread().ident
    assert threading.current_thread() is threading.main_thread()
    threading.Thread(target=interrupt_soon, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        b.complete([CONVERSATION, CONVERSATION], [0, 1], Sampling())
    b.close()  # joins the request threads: they stopped
    elapsed = time.monotonic() - sent[0]
    print(f"interrupt: requests stopped {elapsed:.2f} s after the interrupt")
    assert hostile.chats == 2  # no retry was sent (counted by the server: no clock involved)
    # Cancelled, not waited for: a client that let the requests run would take their timeout=30 s
    # (the trickle itself lasts ~100 s). Measured on 2 cores: 0.16 s quiet, 0.17 s at load ~5; 10 s is
    # the margin for a busier machine.
    assert elapsed < 10.0, elapsed


def _cli(url: str, out: Path, *extra: str, tasks: int = 1, t: str = "2") -> list[str]:
    return ["eval", "--env", "KeyDoor-Budget-v0", "--policy", "openai", "--policy-arg", f"base_url={url}",
            "--policy-arg", "model=m", "--tasks", str(tasks), "--k", "1", "--t", t, "--concurrency", "1",
            "--out", str(out), "--no-plots", "--no-progress", *extra]


def test_sigterm_stops_a_served_run_at_once_keeping_finished_episodes(hostile: Hostile, tmp_path: Path) -> None:
    hostile.numbered, hostile.trickle_after = True, 2
    out = tmp_path / "out"
    args = _cli(hostile.url, out, "--policy-arg", "timeout=30", "--policy-arg", "max_retries=5", tasks=3, t="1")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "agentgym_budget.cli", *args], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while hostile.chats < 3 and time.monotonic() < deadline:  # two one-turn episodes answered, the third hangs
            time.sleep(0.05)
        time.sleep(0.3)
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30 + 2)
        elapsed = time.monotonic() - sent
    finally:
        process.kill()
    print(f"SIGTERM: exited {elapsed:.2f} s after the signal (timeout=30)")
    # Well before the 30 s request timeout it must not wait for; the margin is for a loaded machine.
    assert process.returncode == 130 and elapsed < 10.0, err
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 2 and "2 of 3 episodes are saved" in err


# -- D. redirects, credentials, terminal output -------------------------------------------------------
def test_a_redirect_to_another_origin_is_refused(hostile: Hostile, other: Hostile) -> None:
    hostile.mode, hostile.redirect_to = "redirect", other.url + "/chat/completions"
    with pytest.raises(ServedModelError, match=r"redirected \(307\) from http://127.0.0.1:\d+ to "
                                               r"http://127.0.0.1:\d+, another server: refused") as err:
        bounded(10, lambda: ask(backend(hostile.url, max_retries=3)))
    assert "\n" not in str(err.value) and other.chats == 0 and hostile.chats == 1


def test_credentials_in_base_url_are_never_shown(hostile: Hostile) -> None:
    hostile.mode = "401"
    keyed = hostile.url.replace("http://", "http://user:sk-secret@")
    b = backend(keyed)
    with pytest.raises(ServedModelError) as err:
        bounded(10, lambda: ask(b))
    assert "sk-secret" not in str(err.value) and "sk-secret" not in repr(b) and "***@127.0.0.1" in str(err.value)
    # terminal escapes from the server are gone
    assert "\x1b" not in str(err.value) and "\x07" not in str(err.value)


def _main(args: list[str]) -> int:
    from agentgym_budget.cli import main

    return main(args)


# The replies a correct client must accept (usable text; bad token counts become unknown, not an error).
VALID_MODES = ("ok", "list_content", "tokens_str", "tokens_negative", "tokens_nan")


@pytest.mark.parametrize("mode", sorted(REPLIES) + ["trickle", "redirect"])
def test_cli_eval_against_each_hostile_mode_ends_in_time(
        hostile: Hostile, other: Hostile, tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str) -> None:
    hostile.mode, hostile.redirect_to = mode, other.url + "/chat/completions"
    out = tmp_path / "o[/]ut"
    keyed = hostile.url.replace("http://", "http://user:sk-secret@")
    args = _cli(keyed, out, "--policy-arg", "timeout=2", "--policy-arg", "max_retries=1")
    start = time.monotonic()
    status = bounded(15, lambda: _main(args))
    elapsed = time.monotonic() - start
    captured = capsys.readouterr()
    with capsys.disabled():
        print(f"{mode}: exit {status} after {elapsed:.2f} s")
    assert "sk-secret" not in captured.out + captured.err and "\x1b" not in captured.out + captured.err
    if mode in VALID_MODES:  # a correct client must accept these replies: exit 0 with records
        assert status == 0, f"mode {mode!r}: exit {status}, stderr: {captured.err.strip()}"
        result = json.loads((out / "passkt.json").read_text(), parse_constant=lambda c: pytest.fail(c))
        assert "sk-secret" not in (out / "passkt.json").read_text()
        assert result["config"]["policy_kwargs"]["base_url"].startswith("http://***@127.0.0.1")
        episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
        assert episodes, f"mode {mode!r}: exit 0 but no episode records"
        if mode != "ok" and mode != "list_content":
            assert all(e["prompt_tokens"] is None for e in episodes)
    else:
        err = captured.err.strip()
        assert status == 1 and err.startswith("agentgym-budget eval: error: ") and "\n" not in err, err
        assert hostile.chats <= 2, hostile.chats  # at most 1 + max_retries attempts, counted by the server
        # Two attempts of at most timeout=2 s plus start-up (trickle, the slowest mode: 4.56 s measured
        # at load ~8 on 2 cores). The bound leaves room for a busier machine; what it must catch is a
        # trickle stretching the timeout (~100 s), which even the 15 s `bounded` above would.
        assert elapsed < 2 * 2 + TRICKLE_SLACK_S, elapsed
        assert not (out / "episodes.jsonl").exists() or not (out / "episodes.jsonl").read_text()


def test_a_server_error_in_a_worker_process_is_the_same_one_line(
        hostile: Hostile, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostile.mode = "401"
    args = _cli(hostile.url, tmp_path / "w", "--workers", "2", tasks=2)
    assert bounded(60, lambda: _main(args)) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentgym-budget eval: error: the OpenAI-compatible server at") and "\n" not in err, err
    assert "rejected the API key (401)" in err


def test_a_model_name_with_markup_is_printed_as_is(hostile: Hostile, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    hostile.models = ["[bold]m[/]"]
    args = _cli(hostile.url, tmp_path / "m")
    args[args.index("model=m")] = "model=[bold]m[/]"
    assert bounded(30, lambda: _main(args)) == 0
    assert "openai:[bold]m[/]" in capsys.readouterr().out

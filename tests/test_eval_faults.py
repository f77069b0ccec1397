"""The one fault policy in evaluation (episodes/runner.py): an env that raises costs at most its episode.

Replayed once from the start in a fresh env (a one-off fault leaves the result as if it never
happened); if the replay's env raises too, the episode is recorded as failed, counts as not won,
and the run goes on.  ``env_errors="raise"`` aborts instead.  The trainer's side of the same rule is
``tests/test_env_faults.py``; the adapters' is ``tests/test_adapter_faults.py``.
"""

from __future__ import annotations

import dataclasses

import pytest

import agentgym_budget  # noqa: F401
from agentgym_budget.episodes.records import EpisodeRecord
from agentgym_budget.episodes.runner import RolloutSpec
from agentgym_budget.eval import evaluate
from agentgym_budget.seeds import task_seed
from scripted_envs import FaultyEnv

ENV, SEED, TASKS = "KeyDoor-Budget-v0", 3, 4
SETTINGS = {"ks": (1, 2), "ts": (2, 4), "tasks": TASKS, "attempts": 2, "seed": SEED, "bootstrap": 0,
            "workers": 1, "progress": False}


@pytest.fixture
def faults(monkeypatch):
    """Every env the evaluator makes under ``FaultyEnv`` (the replays' fresh envs too)."""
    original = RolloutSpec.make_env
    monkeypatch.setattr(RolloutSpec, "make_env", lambda self: FaultyEnv(original(self)))
    return FaultyEnv.isolated(monkeypatch)


def run(policy: str, **settings):
    """``(result, its episode records in job order)``."""
    records: list[EpisodeRecord] = []
    result = evaluate(ENV, policy, on_record=records.append, **{**SETTINGS, **settings})
    records.sort(key=lambda r: (r.task, r.attempt, r.budget))
    return result, records


def test_a_one_off_fault_leaves_the_result_as_if_it_never_happened(faults):
    clean, clean_records = run("noisy-expert")
    faults.seeds, faults.turn, faults.budget = {task_seed(SEED, 2)}, 2, 1  # task 2's first env raises at step 2
    faulty, faulty_records = run("noisy-expert")
    assert faults.budget == 0  # the fault happened
    hit = [r for r in faulty_records if r.env_failures]
    assert len(hit) == 1 and hit[0].task == 2 and not hit[0].failed
    assert [dataclasses.replace(r, env_failures=0) for r in faulty_records] == clean_records  # seconds aside
    assert [faulty.value(k, t) for k in (1, 2) for t in (2, 4)] == [clean.value(k, t) for k in (1, 2) for t in (2, 4)]
    assert faulty.timing["env_failures"] == 1 and faulty.timing["failed_episodes"] == 0


def test_a_lasting_fault_fails_its_episodes_and_spares_the_others(faults):
    clean, clean_records = run("expert")
    faults.seeds, faults.turn = {task_seed(SEED, 1)}, 0  # every reset of task 1 raises
    result, records = run("expert")
    failed = [r for r in records if r.failed]
    assert {r.task for r in failed} == {1} and len(failed) == len([r for r in clean_records if r.task == 1])
    for record in failed:
        assert (record.won, record.turns, record.env_failures) == (False, 0, 2)
        assert record.error.startswith("reset: ConnectionError: backend lost")
    assert [r for r in records if r.task != 1] == [r for r in clean_records if r.task != 1]
    assert result.timing["failed_episodes"] == len(failed) and result.timing["env_failures"] == 2 * len(failed)
    assert result.value(1, 4) == pytest.approx(clean.value(1, 4) - 1 / TASKS)  # the expert wins every other task


def test_a_fault_mid_episode_keeps_the_turns_played_before_it(faults):
    faults.seeds, faults.turn = {task_seed(SEED, 0)}, 2  # task 0 always raises at its 2nd step
    _, records = run("expert", ts=(4,))
    failed = [r for r in records if r.task == 0]
    assert failed and all(r.failed and r.turns == 1 and len(r.actions) == 1 for r in failed)
    assert all(r.error.startswith("step 2: ConnectionError") for r in failed)


def test_env_errors_raise_aborts_the_run_at_the_first_raise(faults):
    faults.seeds, faults.turn = {task_seed(SEED, 1)}, 1
    with pytest.raises(ConnectionError, match="backend lost"):
        evaluate(ENV, "expert", **SETTINGS, env_errors="raise")
    with pytest.raises(ValueError, match="env_errors must be one of"):
        evaluate(ENV, "expert", **SETTINGS, env_errors="ignore")


def test_the_env_that_raised_is_closed_and_never_played_again(faults):
    faults.seeds, faults.turn, faults.budget = {task_seed(SEED, 0)}, 1, 1
    _, records = run("expert")  # a closed FaultyEnv raises if played: then an episode would fail
    assert faults.closed >= 1 and not any(r.failed for r in records)


def test_failed_records_round_trip_and_fault_free_ones_are_written_as_before():
    plain = EpisodeRecord(0, 0, 4, None, 0, -1, [], [], [], [], [])
    assert not {"env_failures", "failed", "error"} & set(plain.to_dict())
    failed = EpisodeRecord(0, 0, 4, None, 0, -1, [], [], [], [], [], env_failures=2, failed=True,
                           error="reset: OSError: gone")
    assert EpisodeRecord.from_dict(failed.to_dict()) == failed
    assert EpisodeRecord.from_dict(plain.to_dict()) == plain

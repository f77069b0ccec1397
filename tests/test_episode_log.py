"""episodes.jsonl: streamed per finished episode; resume runs only what is missing and gives the
uninterrupted result; foreign, corrupt or mismatched logs are clear errors; Ctrl-C / SIGTERM
leave a valid partial log and say how to resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from agentgym_budget.eval import evaluate
from agentgym_budget.eval.episode_log import (
    EPISODES_FILE,
    RUN_FILE,
    EvaluationInterrupted,
    ResumeError,
    read_episodes,
)
from interrupts import stop_after

ENV_ID = "KeyDoor-Budget-v0"
ARGS = dict(ks=(1, 2), ts=(2, 4), tasks=12, attempts=3, seed=3, policy_kwargs={"p": 0.4}, bootstrap=50)
REPO = Path(__file__).resolve().parents[1]


def assert_same_result(a, b) -> None:
    np.testing.assert_array_equal(a.successes, b.successes)
    np.testing.assert_array_equal(a.grid.mean, b.grid.mean)
    np.testing.assert_array_equal(a.grid.ci_low, b.grid.ci_low)
    assert a.metrics == b.metrics
    assert a.plan_lengths == b.plan_lengths


@pytest.fixture(scope="module")
def fresh():
    return evaluate(ENV_ID, "noisy-expert", **ARGS)


def interrupted_run(out: Path, after: int = 10, overwrite: bool = False) -> None:
    with pytest.raises(EvaluationInterrupted, match=r"10 of 36 episodes are saved .* --resume"):
        evaluate(ENV_ID, "noisy-expert", out=out, on_record=stop_after(after), overwrite=overwrite, **ARGS)


def test_interrupted_then_resumed_equals_uninterrupted(tmp_path, fresh):
    interrupted_run(tmp_path)
    assert len(read_episodes(tmp_path)) == 10
    seen = []
    resumed = evaluate(ENV_ID, "noisy-expert", out=tmp_path, resume=True, on_record=seen.append, **ARGS)
    assert_same_result(resumed, fresh)
    assert resumed.timing["resumed_episodes"] == 10
    assert len(seen) == 36  # the kept episodes count as done too (progress bars)
    assert len(read_episodes(tmp_path)) == 36  # appended, nothing twice


def test_resume_with_more_tasks_extends_the_run(tmp_path):
    small = {**ARGS, "tasks": 5}
    evaluate(ENV_ID, "noisy-expert", out=tmp_path, **small)
    extended = evaluate(ENV_ID, "noisy-expert", out=tmp_path, resume=True, **ARGS)
    assert extended.timing["resumed_episodes"] == 15
    assert_same_result(extended, evaluate(ENV_ID, "noisy-expert", **ARGS))


def test_resume_without_a_log_starts_fresh(tmp_path, fresh):
    assert_same_result(evaluate(ENV_ID, "noisy-expert", out=tmp_path / "new", resume=True, **ARGS), fresh)


def test_resume_needs_out():
    with pytest.raises(ValueError, match="needs out="):
        evaluate(ENV_ID, "noisy-expert", resume=True, **ARGS)


def test_torn_last_line_is_dropped_and_rerun(tmp_path, fresh):
    interrupted_run(tmp_path)
    path = tmp_path / EPISODES_FILE
    path.write_text(path.read_text() + '{"task": 3, "attem')  # killed mid-write
    with pytest.warns(RuntimeWarning, match="incomplete last line"):
        resumed = evaluate(ENV_ID, "noisy-expert", out=tmp_path, resume=True, **ARGS)
    assert_same_result(resumed, fresh)
    assert len(read_episodes(tmp_path)) == 36


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": 4}, "seed: saved 3, now 4"),
        ({"policy_kwargs": {"p": 0.9}}, "policy: saved"),
        ({"ts": (2, 5)}, "budgets"),
        ({"env_kwargs": {"show_budget": True}}, "env_kwargs"),
    ],
)
def test_resume_of_a_different_run_is_refused(tmp_path, change, message):
    interrupted_run(tmp_path)
    with pytest.raises(ResumeError, match=message):
        evaluate(ENV_ID, "noisy-expert", out=tmp_path, resume=True, **{**ARGS, **change})


def test_foreign_and_corrupt_logs_are_clear_errors(tmp_path):
    (tmp_path / EPISODES_FILE).write_text('{"a": 1}\n')
    with pytest.raises(ResumeError, match=f"no {RUN_FILE}"):
        evaluate(ENV_ID, "noisy-expert", out=tmp_path, resume=True, **ARGS)
    (tmp_path / RUN_FILE).write_text(json.dumps({"format": "something/else"}))
    with pytest.raises(ResumeError, match="not an agentgym-budget episode log"):
        evaluate(ENV_ID, "noisy-expert", out=tmp_path, resume=True, **ARGS)

    interrupted_run(tmp_path, overwrite=True)
    path = tmp_path / EPISODES_FILE
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3] + ["not json\n"] + lines[3:]))
    with pytest.raises(ResumeError, match="line 4 is not an episode record"):
        evaluate(ENV_ID, "noisy-expert", out=tmp_path, resume=True, **ARGS)
    path.write_text("".join(lines + lines[:1]))
    with pytest.raises(ResumeError, match="line 11: a second record"):
        evaluate(ENV_ID, "noisy-expert", out=tmp_path, resume=True, **ARGS)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_leaves_a_valid_log_and_resume_finishes_it(tmp_path):
    """End to end through the CLI: SIGTERM mid-run, exit 130 with the resume hint, then --resume."""
    common = ["--env", ENV_ID, "--k", "1,4", "--t", "2,4", "--attempts", "4", "--seed", "1", "--no-plots",
              "--no-progress", "--bootstrap", "20", "--out", str(tmp_path)]
    cli = [sys.executable, "-m", "agentgym_budget.cli", "eval", "--tasks", "4000", *common]
    proc = subprocess.Popen(cli, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = tmp_path / EPISODES_FILE
    deadline = time.monotonic() + 60
    while not (log.exists() and log.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "--resume" in stderr and "SIGTERM" in stderr
    partial = read_episodes(tmp_path)  # every line valid
    assert 0 < len(partial) < 16000

    # Resume a smaller grid so that the test stays fast: the kept episodes of tasks < 50 count.
    done = subprocess.run([sys.executable, "-m", "agentgym_budget.cli", "eval", "--tasks", "50", "--resume",
                           *common], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    resumed = json.loads((tmp_path / "passkt.json").read_text())
    fresh = evaluate(ENV_ID, "noisy-expert", ks=(1, 4), ts=(2, 4), tasks=50, attempts=4, seed=1, bootstrap=20)
    assert resumed["successes"] == fresh.successes.tolist()
    assert resumed["timing"]["resumed_episodes"] == min(len(partial), 200)  # a serial run saves tasks in order


# -- the run's full identity, the lock on the folder, no silent truncation ----------------------
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"policy_kwargs": {"p": 0.40000001}}, r"policy_kwargs\.p: saved 0\.4, now 0\.40000001"),
        ({"env_kwargs": {"max_steps": 9}}, r"env_kwargs\.max_steps: saved \(unset\), now 9"),
        ({"ts": (1, 4)}, "ts: saved"),
        ({"mode": "per_t"}, "mode: saved 'shortcut', now 'per_t'"),
    ],
)
def test_resume_names_the_differing_setting(tmp_path, change, message):
    interrupted_run(tmp_path)
    with pytest.raises(ResumeError, match=message):
        evaluate(ENV_ID, "noisy-expert", out=tmp_path, resume=True, **{**ARGS, **change})


def test_resume_with_a_different_policy_or_env_is_refused(tmp_path):
    interrupted_run(tmp_path)
    with pytest.raises(ResumeError, match="policy: saved 'noisy-expert"):
        evaluate(ENV_ID, "random", out=tmp_path, resume=True, **{**ARGS, "policy_kwargs": None})
    with pytest.raises(ResumeError, match="env_id: saved 'KeyDoor-Budget-v0', now 'KeyDoor-v0'"):
        evaluate("KeyDoor-v0", "noisy-expert", out=tmp_path, resume=True, **ARGS)


def test_default_policy_kwargs_are_part_of_the_identity_and_the_result(tmp_path):
    args = {**ARGS, "policy_kwargs": None}
    with pytest.raises(EvaluationInterrupted):
        evaluate(ENV_ID, "noisy-expert", out=tmp_path, on_record=stop_after(5), **args)
    run = json.loads((tmp_path / RUN_FILE).read_text())
    assert run["policy_kwargs"] == {"p": "0.7"}  # the default, recorded
    explicit = evaluate(ENV_ID, "noisy-expert", out=tmp_path, resume=True, **{**args, "policy_kwargs": {"p": 0.7}})
    assert explicit.timing["resumed_episodes"] == 5  # p=0.7 given is the same run as the default
    assert explicit.config["policy_kwargs"] == {"p": 0.7}  # the real settings, serial run included


def test_an_existing_log_is_not_truncated_without_overwrite(tmp_path):
    evaluate(ENV_ID, "noisy-expert", out=tmp_path, **ARGS)
    before = (tmp_path / EPISODES_FILE).read_text()
    with pytest.raises(ResumeError, match="already holds an evaluation .36 episodes.*--overwrite"):
        evaluate(ENV_ID, "noisy-expert", out=tmp_path, **{**ARGS, "seed": 4})
    assert (tmp_path / EPISODES_FILE).read_text() == before
    replaced = evaluate(ENV_ID, "noisy-expert", out=tmp_path, overwrite=True, **{**ARGS, "seed": 4})
    assert len(read_episodes(tmp_path)) == 36 and replaced.seed == 4
    with pytest.raises(ValueError, match="exclude each other"):
        evaluate(ENV_ID, "noisy-expert", out=tmp_path, resume=True, overwrite=True, **ARGS)
    with pytest.raises(TypeError):  # a run that fails before its first episode: nothing to protect
        evaluate(ENV_ID, "noisy-expert", out=tmp_path / "failed", env_kwargs={"bogus": 1}, **ARGS)
    evaluate(ENV_ID, "noisy-expert", out=tmp_path / "failed", **ARGS)


_HOLD_LOCK = """
import sys, time
from agentgym_budget.eval.episode_log import lock_output
with lock_output(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_a_second_run_into_a_locked_folder_refuses_and_writes_nothing(tmp_path):
    from agentgym_budget.eval.episode_log import OutputLockedError

    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(OutputLockedError, match="in use by another running evaluation"):
            evaluate(ENV_ID, "noisy-expert", out=tmp_path, **ARGS)
        assert not (tmp_path / EPISODES_FILE).exists() and not (tmp_path / RUN_FILE).exists()
    finally:
        holder.kill()
        holder.wait()
    evaluate(ENV_ID, "noisy-expert", out=tmp_path, **ARGS)  # the holder's death released the lock


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and flock")
def test_two_cli_runs_into_one_folder_the_second_refuses(tmp_path):
    common = [sys.executable, "-m", "agentgym_budget.cli", "eval", "--env", ENV_ID, "--k", "1", "--t", "4",
              "--no-plots", "--no-progress", "--bootstrap", "10", "--out", str(tmp_path)]
    first = subprocess.Popen([*common, "--tasks", "400000", "--seed", "0"], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        log = tmp_path / EPISODES_FILE
        deadline = time.monotonic() + 60
        while not (log.exists() and log.stat().st_size > 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run([*common, "--tasks", "5", "--seed", "1", "--overwrite"], cwd=REPO,
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and "in use by another running evaluation" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert json.loads((tmp_path / RUN_FILE).read_text())["seed"] == 0
    read_episodes(tmp_path)  # every line whole: nobody else wrote into it

"""Rollouts and ``evaluate``: determinism, shortcut vs per-T rollouts, workers, streaming."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from toy_env import CorridorEnv

import agentgym_budget  # noqa: F401  (registers the package envs)
from agentgym_budget.envs.registration import make_budget_env
from agentgym_budget.eval import evaluate
from agentgym_budget.eval.evaluate import build_jobs, resolve_mode
from agentgym_budget.episodes.process_pool import EpisodeProcessPool, die_with_parent
from agentgym_budget.episodes.records import EpisodeJob, EpisodeRecord
from agentgym_budget.episodes.runner import EpisodeRunner, RolloutSpec, SerialExecutor
from agentgym_budget.seeds import attempt_seed, task_seed
from agentgym_budget.wrappers import TurnBudget

ENV_ID = "EvalCorridor-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=CorridorEnv, max_episode_steps=6, kwargs={"min_length": 3, "max_length": 12})

GRID = {"ks": (1, 2, 4), "ts": (3, 6, 10, 20), "tasks": 12, "attempts": 4, "seed": 7}


class LastMinutePolicy:
    """Reads the budget: waits ("look") while it can afford to, then walks east."""

    name = "last-minute"
    reads_budget = True

    def reset(self, seed: int | None = None) -> None:
        pass

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return "go east" if info["turns_left"] <= len(info["expert_plan"]) else "look"


def test_seeds_depend_only_on_base_seed_task_and_attempt() -> None:
    assert task_seed(0, 3) == task_seed(0, 3) != task_seed(0, 4) != task_seed(1, 3)
    assert attempt_seed(0, 3, 1) != attempt_seed(0, 3, 2)
    assert attempt_seed(0, 3, 1) != task_seed(0, 3)


def test_budgeted_env_lifts_the_time_limit_and_forces_budgets() -> None:
    env = RolloutSpec(ENV_ID, "noisy-expert", seed=0, max_budget=30).make_env()
    assert isinstance(env, TurnBudget)  # its TimeLimit(6) underneath is lifted: it cannot cut episodes short
    env.reset(seed=0, options={"budget": 25})
    for _ in range(24):
        *_, truncated, info = env.step("look")
        assert not truncated
    assert env.step("look")[3] is True
    assert isinstance(make_budget_env(ENV_ID, 30), TurnBudget)  # what RolloutSpec.make_env builds
    with pytest.raises(ValueError, match="budget"):
        RolloutSpec(ENV_ID, "noisy-expert", seed=0, max_budget=30, env_kwargs={"budget": 5}).make_env()


def test_the_env_s_turn_budget_alone_ends_a_job_at_its_budget() -> None:
    class Look:  # never wins nor loses: only the budget ends its episodes
        name, reads_budget = "look", False

        def reset(self, seed: int | None = None) -> None:
            pass

        def act(self, obs: str, info: dict[str, Any]) -> str:
            return "look"

    spec = RolloutSpec(ENV_ID, Look(), seed=0, max_budget=30)  # the env's own TimeLimit (6) is lifted
    runner = EpisodeRunner(spec, [spec.make_env()])
    try:
        assert [r.turns for r in runner.run([EpisodeJob(0, 0, 7), EpisodeJob(1, 0, 25)])] == [7, 25]
    finally:
        runner.close()
    with pytest.raises(ValueError, match="TurnBudget.*spec.make_env"):  # no budget of its own to fall back on
        EpisodeRunner(spec, [gym.make(ENV_ID)])


def test_episode_records_are_reproducible() -> None:
    spec = RolloutSpec(ENV_ID, "noisy-expert", seed=3, max_budget=20, policy_kwargs={"p": 0.5})
    jobs = [EpisodeJob(task, attempt, 20) for task in range(3) for attempt in range(3)]
    first, second = SerialExecutor().run(spec, jobs), SerialExecutor().run(spec, list(reversed(jobs)))
    assert first == list(reversed(second))
    assert len({tuple(r.actions) for r in first}) > 1  # attempts differ


def test_record_fields_follow_the_episode() -> None:
    class Scripted:
        name, reads_budget = "scripted", False

        def reset(self, seed: int | None = None) -> None:
            self.turn = 0

        def act(self, obs: str, info: dict[str, Any]) -> str:
            self.turn += 1
            return ["go east", "dance", "go west", "go east"][self.turn - 1] if self.turn <= 4 else "go east"

    spec = RolloutSpec(ENV_ID, Scripted(), seed=0, max_budget=50)
    (record,) = SerialExecutor().run(spec, [EpisodeJob(0, 0, 50)])
    n = record.plan_length
    assert record.actions[:4] == ["go east", "dance", "go west", "go east"]
    assert record.admissible[:4] == [1, 0, 1, 1]
    assert record.no_effect[:4] == [0, 0, 0, 0]  # "dance" is invalid, not a valid action without effect
    assert record.effect[:4] == ["progress", "invalid", "regress", "progress"]
    assert record.expert_match[:4] == [1, 0, 0, 1]
    assert record.plan_left[:4] == [n - 1, n - 1, n, n - 1]
    assert record.won_turn == record.turns == n + 3  # a wasted turn, a step back and its undoing


def test_shortcut_and_per_t_agree_for_a_budget_agnostic_policy() -> None:
    kwargs = {**GRID, "policy_kwargs": {"p": 0.6}}
    shortcut = evaluate(ENV_ID, "noisy-expert", mode="shortcut", **kwargs)
    per_t = evaluate(ENV_ID, "noisy-expert", mode="per_t", **kwargs)
    assert (shortcut.mode, per_t.mode) == ("shortcut", "per_t")
    np.testing.assert_array_equal(shortcut.successes, per_t.successes)
    np.testing.assert_array_equal(shortcut.mean, per_t.mean)
    assert 0 < shortcut.successes.sum() < shortcut.successes.size * GRID["attempts"]  # not degenerate


def test_per_t_is_needed_when_the_policy_reads_the_budget() -> None:
    auto = evaluate(ENV_ID, LastMinutePolicy(), **GRID)
    assert auto.mode == "per_t"
    forced = evaluate(ENV_ID, LastMinutePolicy(), **GRID, mode="per_t")
    np.testing.assert_array_equal(auto.successes, forced.successes)
    # With its budget at T it wins whenever T >= the corridor length; one rollout at max T
    # would only win at the last turn (0 successes at smaller T) - the shortcut is refused.
    assert auto.successes[GRID["ts"].index(10)].sum() > 0
    with pytest.raises(ValueError, match="budget-agnostic"):
        evaluate(ENV_ID, LastMinutePolicy(), **GRID, mode="shortcut")


def test_auto_mode_runs_per_t_when_the_env_shows_the_budget() -> None:
    result = evaluate(ENV_ID, "noisy-expert", **GRID, env_kwargs={"show_budget": True})
    assert result.show_budget and result.mode == "per_t"
    assert resolve_mode("auto", show_budget=False, reads_budget=False) == "shortcut"
    with pytest.raises(ValueError, match="mode"):
        resolve_mode("fast", False, False)


def test_pass_rises_with_k_and_t() -> None:
    result = evaluate(ENV_ID, "noisy-expert", **GRID, policy_kwargs={"p": 0.6})
    assert np.all(np.diff(result.mean, axis=0) >= -1e-12)
    assert np.all(np.diff(result.mean, axis=1) >= -1e-12)
    assert result.value(4, 20) > result.value(1, 3)


def test_two_workers_give_identical_results() -> None:
    serial = evaluate(ENV_ID, "noisy-expert", **GRID, workers=1)
    pooled = evaluate(ENV_ID, "noisy-expert", **GRID, workers=2)
    np.testing.assert_array_equal(serial.successes, pooled.successes)
    np.testing.assert_array_equal(serial.grid.ci_low, pooled.grid.ci_low)
    assert serial.metrics == pooled.metrics


def test_process_pool_returns_records_in_job_order() -> None:
    spec = RolloutSpec(ENV_ID, "random", seed=1, max_budget=10)
    jobs = build_jobs(tasks=5, attempts=2, ts=(5, 10), mode="per_t")
    seen = []
    records = EpisodeProcessPool(2).run(spec, jobs, seen.append)
    assert [(r.task, r.attempt, r.budget) for r in records] == [(j.task, j.attempt, j.budget) for j in jobs]
    assert sorted(seen, key=lambda r: (r.task, r.attempt, r.budget)) == records
    assert records == SerialExecutor().run(spec, jobs)


def test_records_stream_to_jsonl(tmp_path) -> None:
    count = []
    result = evaluate(ENV_ID, "random", ks=(1,), ts=(5,), tasks=3, attempts=2, out=tmp_path, on_record=count.append)
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == len(count) == result.timing["episodes"] == 6
    assert {"task", "attempt", "budget", "won_turn", "actions"} <= json.loads(lines[0]).keys()


@pytest.mark.parametrize(
    "kwargs, message",
    [({"ks": (8,), "attempts": 4}, "attempts"), ({"tasks": 0}, "tasks"), ({"ts": (0,)}, ">= 1"), ({"seed": -1}, "seed")],
)
def test_bad_arguments_are_rejected(kwargs: dict[str, Any], message: str) -> None:
    args = {"ks": (1,), "ts": (5,), "tasks": 2, "attempts": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        evaluate(ENV_ID, "random", **args)


def test_records_written_before_the_effect_fields_still_load() -> None:
    old = {"task": 0, "attempt": 1, "budget": 4, "won_turn": None, "turns": 2, "plan_length": 2,
           "actions": ["a", "b"], "expert_match": [1, 0], "admissible": [1, 0], "no_effect": [0, 1],
           "plan_left": [1, 1], "seconds": 0.1}
    record = EpisodeRecord.from_dict(old)
    assert (record.effect, record.lost_turn, record.game) == ([], None, "")
    from agentgym_budget.eval.metrics import error_kinds

    assert error_kinds(record) == [(2, "invalid")]  # the old flags still classify the turn


# -- stopping a process pool: every finished episode kept, within 2 s; no orphans ----------------
_POOL_RUN = """
import sys, agentgym_budget
from agentgym_budget.cli import main
sys.exit(main(["eval", "--env", "KeyDoor-Budget-v0", "--policy", "noisy-expert", "--k", "1,2", "--t", "4,8",
               "--attempts", "2", "--tasks", "200000", "--workers", "2", "--bootstrap", "10", "--no-progress",
               "--no-plots", "--out", sys.argv[1]]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_two_workers_promptly_keeping_every_finished_episode(tmp_path, signum):
    from agentgym_budget.eval.episode_log import read_episodes

    proc = subprocess.Popen([sys.executable, "-c", _POOL_RUN, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    log = tmp_path / "episodes.jsonl"
    deadline = time.monotonic() + 90
    while not (log.exists() and log.stat().st_size > 20_000) and time.monotonic() < deadline:
        time.sleep(0.05)
    sent = time.monotonic()
    proc.send_signal(signum)
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the run did not stop")
    stopped_after = time.monotonic() - sent
    print(f"{signal.Signals(signum).name}: the run stopped {stopped_after:.2f} s after the signal")
    assert proc.returncode == 130, stderr
    # The pool gives its workers 1.5 s (EpisodeProcessPool.STOP_SECONDS), then terminates them; the run
    # stops in well under 2 s (measured 0.64-0.90 s, at load ~10 on 2 cores). What must not
    # happen is a run that goes on over its 200000 tasks (many minutes) or waits on its workers: the
    # bound leaves the interpreter's exit room on a busier machine, and is far from either.
    assert stopped_after < 15.0, stopped_after
    saved = int(re.search(r"(\d+) of \d+ episodes are saved", stderr).group(1))
    records = read_episodes(tmp_path)  # every line whole
    assert saved == len(records) == len(log.read_text().splitlines()) > 0
    assert len({(r.task, r.attempt, r.budget) for r in records}) == len(records)


_ORPHAN_RUN = """
import os, sys, time, agentgym_budget
from agentgym_budget.episodes.process_pool import EpisodeProcessPool
from agentgym_budget.episodes.records import EpisodeJob
from agentgym_budget.episodes.runner import RolloutSpec

class Slow:  # a policy that takes its time, so that the workers are busy when the parent dies
    name = "slow"
    reads_budget = False
    def reset(self, seed=None): pass
    def act(self, obs, info):
        time.sleep(0.05)
        return "look"

def announce(record, said=[]):
    if not said:
        said.append(1)
        print(" ".join(str(p.pid) for p in __import__("multiprocessing").active_children()), flush=True)

spec = RolloutSpec("KeyDoor-Budget-v0", Slow(), seed=0, max_budget=50)
EpisodeProcessPool(2, chunks_per_worker=1).run(spec, [EpisodeJob(t, 0, 50) for t in range(200)], announce)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_workers_die_with_a_sigkilled_parent(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _ORPHAN_RUN], stdout=subprocess.PIPE, text=True)
    workers = [int(pid) for pid in proc.stdout.readline().split()]
    assert len(workers) == 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5
    alive = workers
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in workers if _is_running(pid)]
        time.sleep(0.05)
    for pid in alive:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"workers {alive} outlived their parent"


def _is_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead, only not yet reaped
    except FileNotFoundError:
        return False


def test_die_with_parent_restores_default_sigterm(tmp_path):
    import multiprocessing

    def child(parent):
        signal.signal(signal.SIGTERM, lambda *a: None)  # what a forked worker inherits from the evaluator
        die_with_parent(parent)
        time.sleep(30)

    worker = multiprocessing.get_context("fork").Process(target=child, args=(os.getpid(),))
    worker.start()
    time.sleep(0.5)
    worker.terminate()
    worker.join(timeout=5)
    assert worker.exitcode == -signal.SIGTERM

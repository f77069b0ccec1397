"""The adapters' fault policy (integrations/session.py): an env that raises mid-episode is replayed
once in a fresh env, else its episode ends as failed in the library's own terms; the other
episodes, and the library's loop, go on.  The fault injector is the trainer's (scripted_envs.FaultyEnv)."""

from __future__ import annotations

import asyncio
import threading

import gymnasium as gym
import pytest

import agentgym_budget  # noqa: F401
from agentgym_budget.integrations.session import BudgetSession, EpisodeOver
from scripted_envs import FaultyEnv

ENV_ID = "KeyDoor-Budget-v0"
WIN = ("take key", "open red door")  # KeyDoor's task "red-blue" in two turns
TASK = {"task": "red-blue"}


@pytest.fixture
def faults(monkeypatch) -> type[FaultyEnv]:
    return FaultyEnv.isolated(monkeypatch)


def play(session: BudgetSession, seed: int = 9, commands=WIN) -> list[str]:
    observations = [session.reset(seed=seed, options=TASK)]
    for command in commands:
        if session.done:
            break
        observations.append(session.step(command))
    return observations


# -- the session: one policy for every adapter ----------------------------------------------------------------------
def test_a_one_off_fault_is_replayed_in_a_fresh_env_as_if_it_never_happened(faults) -> None:
    clean_session = BudgetSession(ENV_ID, budget=3, wrappers=[FaultyEnv])
    clean = play(clean_session), clean_session.summary()
    faults.seeds, faults.turn, faults.budget, faults.made = {9}, 2, 1, 0  # the 2nd step raises, once
    session = BudgetSession(ENV_ID, budget=3, wrappers=[FaultyEnv])
    with pytest.warns(RuntimeWarning, match=r"KeyDoor-Budget-v0 \(seed 9\) raised at step 2: ConnectionError: "
                                            r"backend lost at turn 2"):
        observations = play(session)
    assert (observations, session.summary()) == (clean[0], {**clean[1], "env_failures": 1})
    assert (session.won, session.outcome, session.total_reward) == (True, "terminated", 1.0)
    assert (faults.made, faults.closed) == (2, 1)  # the raising env was closed, a fresh one took the episode over


def test_a_lasting_fault_fails_the_episode_and_the_next_reset_plays_on(faults) -> None:
    faults.seeds, faults.turn = {9}, 2  # every episode of seed 9 raises at its 2nd step
    session = BudgetSession(ENV_ID, budget=3, wrappers=[FaultyEnv])
    with pytest.warns(RuntimeWarning, match="raised at step 2"):
        play(session)
    assert (session.done, session.outcome, session.failed, session.won) == (True, "failed", True, False)
    assert (session.env_failures, session.reward) == (2, 0.0)
    assert session.error == "ConnectionError: backend lost at turn 2 (at step 2)"
    assert (faults.made, faults.closed) == (2, 2)  # both raising envs closed
    with pytest.raises(EpisodeOver, match="failed"):
        session.step("look")
    play(session, seed=7)  # another seed: a fresh env, a normal episode
    assert (session.won, session.env_failures, session.error, faults.made) == (True, 0, None, 3)


def test_a_fault_at_reset_is_replayed_at_the_curriculum_progress_it_had(faults) -> None:
    session = BudgetSession(ENV_ID, budget="curriculum:4->2@2", wrappers=[FaultyEnv])
    assert [(session.reset(seed=s), session.budget)[1] for s in (1, 2)] == [4, 3]
    faults.seeds, faults.turn, faults.budget = {9}, 0, 1
    with pytest.warns(RuntimeWarning, match=r"raised at reset"):
        session.reset(seed=9)
    # a fresh env would start the curriculum again (4); the replay draws at progress 2, as the first env would
    assert (session.budget, session.env_failures, session.failed) == (2, 1, False)
    session.reset(seed=3)
    assert session.turn_budget.progress == 4  # the fresh env counts on from there


def test_a_replay_that_does_not_reproduce_the_episode_fails_it(faults) -> None:
    class Unrepeatable(gym.Wrapper):  # each env copy tells a different story: not deterministic given the seed
        def reset(self, **kwargs):
            obs, info = self.env.reset(**kwargs)
            return f"{obs} (copy {FaultyEnv.made})", info

    faults.seeds, faults.turn, faults.budget = {9}, 1, 1
    session = BudgetSession(ENV_ID, budget=3, wrappers=[FaultyEnv, Unrepeatable])
    with pytest.warns(RuntimeWarning, match="raised at step 1"):
        play(session)
    assert (session.failed, session.env_failures) == (True, 1)
    assert session.error.startswith("ReplayDiverged: a fresh env did not reproduce the episode (seed 9)")


def test_a_reset_the_env_refuses_is_the_callers_error_not_a_fault(faults) -> None:
    session = BudgetSession(ENV_ID, budget=3, wrappers=[FaultyEnv])
    with pytest.raises(ValueError, match="unknown KeyDoor task 'nope'"):
        session.reset(seed=0, options={"task": "nope"})
    assert (session.env_failures, faults.made) == (0, 1)


# -- per library, through its own entry point ----------------------------------------------------------------------
def test_trl_a_failed_rollout_is_unscorable_and_the_group_plays_on(faults) -> None:
    pytest.importorskip("trl", reason="needs the trl extra")
    from agentgym_budget.integrations.trl_env import environment_factory, episode_reward

    faults.seeds, faults.turn, faults.budget = {9}, 1, 2  # the group's first rollout: the env and its replay raise
    group = [environment_factory(ENV_ID, budget=3, wrappers=[FaultyEnv])() for _ in range(4)]
    with pytest.warns(RuntimeWarning, match="raised at step 1"):
        for env in group:  # TRL: reset(**row), then one act per tool call
            env.reset(seed=9, options=TASK)
            answers = [env.act(command) for command in WIN]
    failed = group[0].act("take key")
    assert failed.startswith("The episode is over: the game's environment failed (ConnectionError: backend lost")
    assert "reset" not in failed  # names no tool the model lacks
    assert answers[-1].endswith("The episode is over: the task was completed.")
    columns, metrics = {}, {}
    rewards = episode_reward(group, log_extra=columns.__setitem__, log_metric=metrics.__setitem__)
    # None: TRL's "unscorable" reward, outside the group's baseline, zero advantage; the others score as usual
    assert rewards == [None, 1.0, 1.0, 1.0]
    assert columns["outcome"] == ["failed", "terminated", "terminated", "terminated"]
    assert columns["env_failures"] == [2, 0, 0, 0]
    assert (metrics["episode/env_failures"], metrics["episode/failed"]) == (2.0, 0.25)


def test_verifiers_a_failed_rollout_is_an_infra_error_and_the_others_play_on(faults) -> None:
    vf = pytest.importorskip("verifiers", reason="needs the verifiers extra")
    from tools.scripted_clients import ScriptedClient

    from agentgym_budget.integrations.verifiers_env import BudgetMultiTurnEnv

    faults.seeds, faults.turn = {1}, 2  # row 1's episode raises at its 2nd step, also when replayed
    env = BudgetMultiTurnEnv(ENV_ID, budget=3, num_examples=4, wrappers=[FaultyEnv])
    with pytest.warns(RuntimeWarning, match=r"\(seed 1\) raised at step 2"):
        results = asyncio.run(env.evaluate(ScriptedClient(), "keydoor-expert", rollouts_per_example=1,
                                           max_concurrent=4))
    outputs = sorted(results["outputs"], key=lambda out: out["info"]["seed"])
    assert [out["stop_condition"] for out in outputs] == ["env_terminated", "has_error", "env_terminated",
                                                          "env_terminated"]
    failed = outputs[1]
    assert "KeyDoor-Budget-v0 (seed 1) failed: ConnectionError: backend lost at turn 2" in str(failed["error"])
    assert (failed["reward"], failed["metrics"]["failed"], failed["metrics"]["env_failures"]) == (0.0, 1.0, 2.0)
    assert [(out["reward"], out["error"]) for out in outputs[::2] + outputs[3:]] == [(1.0, None)] * 3
    assert faults.closed == faults.made  # every env closed, the raising ones and those verifiers cleaned up
    assert isinstance(vf.InfraError("x"), vf.Error)


def test_skyrl_a_failed_trajectory_ends_with_its_error_and_the_step_goes_on(faults) -> None:
    pytest.importorskip("skyrl_gym", reason="needs the skyrl extra")
    from skyrl_gym.metrics import aggregate_for_environment

    from agentgym_budget.integrations.skyrl import SkyRLBudgetEnv, register_skyrl_envs

    register_skyrl_envs([ENV_ID])  # for SkyRL's metric aggregation
    faults.seeds, faults.turn, faults.budget = {9}, 2, 2  # the first trajectory's 2nd step, and its replay
    metrics = []
    with pytest.warns(RuntimeWarning, match="raised at step 2"):
        for _ in range(3):  # SkyRL's generator loop: make, init, step until done, get_metrics, close
            env = SkyRLBudgetEnv({"budget": 3}, {"seed": 9, "options": TASK}, env_id=ENV_ID, wrappers=[FaultyEnv])
            env.init([])
            outputs = [env.step(f"Action: {command}") for command in WIN]
            metrics.append(env.get_metrics())
            env.close()
            if len(metrics) == 1:
                last = outputs[-1]
                assert (last["done"], last["reward"], last["observations"]) == (True, 0.0, [])
                assert last["metadata"]["env_failure"] == "ConnectionError: backend lost at turn 2 (at step 2)"
    assert [(m["failed"], m["env_failures"], m["won"]) for m in metrics] == [(1.0, 2.0, 0.0)] + [(0.0, 0.0, 1.0)] * 2
    assert aggregate_for_environment(ENV_ID, metrics)["failed"] == pytest.approx(1 / 3)


def test_skyrl_a_failed_init_ends_the_trajectory_at_its_first_step(faults) -> None:
    pytest.importorskip("skyrl_gym", reason="needs the skyrl extra")
    from agentgym_budget.integrations.skyrl import SkyRLBudgetEnv

    faults.seeds, faults.turn = {9}, 0
    env = SkyRLBudgetEnv({"budget": 3}, {"seed": 9}, env_id=ENV_ID, wrappers=[FaultyEnv])
    with pytest.warns(RuntimeWarning, match="raised at reset"):
        prompt, metadata = env.init([])
    assert "environment failed" in prompt[-1]["content"] and metadata["env_failure"].endswith("(at reset)")
    out = env.step("Action: take key")
    assert (out["done"], out["reward"], env.get_metrics()["turns"]) == (True, 0.0, 0.0)


def test_openenv_a_one_off_fault_costs_nothing_a_lasting_one_its_episode_not_the_session(faults) -> None:
    pytest.importorskip("agentgym_budget.integrations.openenv_env", reason="needs openenv 0.10 (the openenv extra)", exc_type=ImportError)
    from agentgym_budget.integrations.openenv_env import BudgetEnvClient, TextAction, serve

    faults.seeds, faults.turn, faults.budget = {9}, 2, 1
    with serve(ENV_ID, budget=3, wrappers=[FaultyEnv]) as url, BudgetEnvClient(base_url=url).sync() as client:
        with pytest.warns(RuntimeWarning, match="raised at step 2"):
            client.reset(seed=9, **TASK)
            client.step(TextAction(command=WIN[0]))
            result = client.step(TextAction(command=WIN[1]))
        assert (result.observation.won, result.done, result.reward, result.observation.env_failures) == (
            True, True, 1.0, 1)
        faults.budget = None  # from now on seed 9 always raises at its 2nd step
        with pytest.warns(RuntimeWarning, match="raised at step 2"):
            client.reset(seed=9, **TASK)
            client.step(TextAction(command=WIN[0]))
            with pytest.raises(RuntimeError, match=r"the env failed: ConnectionError: backend lost at turn 2 "
                                                   r"\(at step 2\), and again in a fresh env; this episode is lost"):
                client.step(TextAction(command=WIN[1]))
        client.reset(seed=7, **TASK)  # the same session plays on, in a fresh env
        client.step(TextAction(command=WIN[0]))
        result = client.step(TextAction(command=WIN[1]))
        assert (result.observation.won, result.observation.env_failures) == (True, 0)


# -- a hanging env: step_timeout_s ---------------------------------------------------------------------------------
class Hangs(gym.Wrapper):
    """The first ``times`` steps of seed 9 (over every copy) wait until ``release`` is set; ``closed`` when closed."""

    release = threading.Event()
    closed = threading.Event()
    times = 1

    def step(self, action):
        if Hangs.times and self._seed == 9:
            Hangs.times -= 1
            Hangs.release.wait()
        return self.env.step(action)

    def reset(self, *, seed=None, options=None):
        self._seed = seed
        return self.env.reset(seed=seed, options=options)

    def close(self):
        Hangs.closed.set()
        super().close()


def test_a_hung_step_is_a_fault_and_its_abandoned_env_is_closed_when_the_call_returns(monkeypatch) -> None:
    monkeypatch.setattr(Hangs, "release", threading.Event())
    monkeypatch.setattr(Hangs, "closed", threading.Event())
    monkeypatch.setattr(Hangs, "times", 1)
    # The hung step waits on an event, so it times out whatever the deadline; every other call must
    # not. A KeyDoor reset or step takes ~0.04 ms (measured), a thread start well under 1 ms, so 2 s
    # is thousands of times over it: a busy machine cannot turn a normal call into a fault.
    session = BudgetSession(ENV_ID, budget=3, wrappers=[Hangs], step_timeout_s=2.0)
    with pytest.warns(RuntimeWarning, match=r"raised at step 1: EnvTimeout: the env call did not return within "
                                            r"step_timeout_s=2(\.0)? s"):
        play(session)
    assert (session.won, session.env_failures, session.outcome) == (True, 1, "terminated")  # replayed in a fresh env
    assert not Hangs.closed.is_set()  # the hung env is still in its call: not closed under it
    Hangs.release.set()
    assert Hangs.closed.wait(timeout=30)  # the abandoned thread closes it once its call returns


def test_step_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"^step_timeout_s must be a positive number of seconds or None, got 0$"):
        BudgetSession(ENV_ID, budget=3, step_timeout_s=0)

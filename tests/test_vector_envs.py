"""Gymnasium vector envs over our text envs: async == sync, spawn works, autoreset semantics."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import agentgym_budget  # noqa: F401
from agentgym_budget.integrations.vector import make_text_vector_env
from agentgym_budget.wrappers import ProcessReward


def rollout(envs: gym.vector.VectorEnv, steps: int, seed: int = 0) -> list[tuple]:
    """Random admissible commands (from a fixed generator); every returned value, step by step."""
    rng = np.random.default_rng(seed)
    observations, infos = envs.reset(seed=seed)
    trace = [(observations, infos["budget"].tolist())]
    for _ in range(steps):
        actions = [str(rng.choice(commands)) for commands in infos["admissible_commands"]]
        observations, rewards, terminations, truncations, infos = envs.step(actions)
        trace.append((observations, rewards.tolist(), terminations.tolist(), truncations.tolist(),
                      infos["turn"].tolist(), infos["budget"].tolist()))
    return trace


def test_async_vector_env_matches_sync_step_by_step() -> None:
    kwargs = {"num_envs": 3, "budget": "mix:2,3,4"}
    sync = make_text_vector_env("KeyDoor-Budget-v0", mode="sync", **kwargs)
    async_ = make_text_vector_env("KeyDoor-Budget-v0", mode="async", **kwargs)
    try:
        expected, seen = rollout(sync, 12), rollout(async_, 12)
    finally:
        sync.close()
        async_.close()
    assert seen == expected
    assert all(obs.startswith("You") or obs.startswith("Nothing") or obs.startswith("The")
               for step in seen for obs in step[0])  # real text, not a shared-memory buffer


def test_spawned_workers_rebuild_the_env_from_its_id() -> None:
    envs = make_text_vector_env("KeyDoor-Budget-v0", num_envs=2, context="spawn", budget=3)
    try:
        observations, infos = envs.reset(seed=5)
        single = gym.make("KeyDoor-Budget-v0", budget=3)
        assert observations[1] == single.reset(seed=6)[0]  # sub-env i is seeded seed + i
    finally:
        envs.close()


def test_next_step_autoreset_returns_the_final_step_then_a_reset_step() -> None:
    envs = make_text_vector_env("KeyDoor-Budget-v0", num_envs=1, mode="async", budget=2)
    try:
        envs.reset(seed=0)
        envs.step(["look"])
        observations, rewards, terminations, truncations, infos = envs.step(["look"])
        assert truncations.tolist() == [True] and infos["turn"].tolist() == [2]
        observations, rewards, terminations, truncations, infos = envs.step(["take key"])  # ignored: reset step
        assert infos["turn"].tolist() == [0] and rewards.tolist() == [0.0]
        assert observations[0].startswith("You are in a hall")
    finally:
        envs.close()


def test_same_step_autoreset_puts_the_final_observation_in_infos() -> None:
    envs = make_text_vector_env("KeyDoor-Budget-v0", num_envs=2, mode="async", autoreset_mode="SameStep", budget=1)
    try:
        envs.reset(seed=0)
        observations, _, _, truncations, infos = envs.step(["take key", "look"])
        assert truncations.tolist() == [True, True]
        assert infos["final_obs"].tolist() == ["You take the key.", "Nothing happens."]
        assert all(obs.startswith("You are in a hall") for obs in observations)
    finally:
        envs.close()


def test_budget_draws_per_sub_env_follow_their_seeds() -> None:
    envs = make_text_vector_env("KeyDoor-Budget-v0", num_envs=4, mode="sync", budget="uniform:1-50")
    _, infos = envs.reset(seed=10)
    singles = [gym.make("KeyDoor-Budget-v0", budget="uniform:1-50").reset(seed=10 + i)[1]["budget"] for i in range(4)]
    assert infos["budget"].tolist() == singles
    assert len(set(singles)) > 1


def test_wrappers_compose_in_vector_envs() -> None:
    envs = gym.make_vec("KeyDoor-Budget-v0", num_envs=2, vectorization_mode="async",
                        vector_kwargs={"shared_memory": False}, wrappers=[ProcessReward], budget=4)
    try:
        _, infos = envs.reset(seed=0)
        _, rewards, _, _, infos = envs.step(["take key", "take key"])
        assert rewards.tolist() == [1.0, 1.0] and infos["process_reward"].tolist() == [1.0, 1.0]
    finally:
        envs.close()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="num_envs"):
        make_text_vector_env("KeyDoor-v0", num_envs=0)
    with pytest.raises(ValueError, match="mode"):
        make_text_vector_env("KeyDoor-v0", num_envs=1, mode="threads")

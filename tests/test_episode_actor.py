"""EpisodeActor, the one Ray actor type, run in-process: its records are the serial executor's, and its
env copies are kept across chunks and specs of the same env, made again when the env changes."""

from __future__ import annotations

import agentgym_budget  # noqa: F401  (registers the env ids)
from agentgym_budget.distributed.actor import EpisodeActor
from agentgym_budget.episodes.records import EpisodeJob
from agentgym_budget.episodes.runner import RolloutSpec, SerialExecutor

JOBS = [EpisodeJob(task, attempt, 5) for task in range(4) for attempt in range(2)]


def test_chunks_give_the_serial_records_and_keep_the_envs_of_the_same_env() -> None:
    noisy = RolloutSpec("KeyDoor-Budget-v0", "noisy-expert", seed=3, max_budget=5, concurrency=2)
    random = RolloutSpec("KeyDoor-Budget-v0", "random", seed=3, max_budget=5, concurrency=2)
    actor = EpisodeActor()
    try:
        first = actor.run_chunk("noisy", [noisy], JOBS[:3]) + actor.run_chunk("noisy", [noisy], JOBS[3:])
        assert first == SerialExecutor().run(noisy, JOBS)
        envs = list(actor.envs)
        assert actor.run_chunk("random", [random], JOBS) == SerialExecutor().run(random, JOBS)  # a new policy
        assert actor.envs == envs  # ... on the same env copies
        longer = RolloutSpec("KeyDoor-Budget-v0", "random", seed=3, max_budget=9, concurrency=2)
        actor.run_chunk("longer", [longer], JOBS)
        assert not set(map(id, actor.envs)) & set(map(id, envs))  # another env: made again
        assert all(env.schedule.max_budget == 9 for env in actor.envs)
    finally:
        actor.close()

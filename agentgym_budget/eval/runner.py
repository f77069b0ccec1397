"""Playing episodes: :class:`EpisodeRunner` keeps up to ``spec.concurrency`` episodes in flight.

The loop itself is :func:`~agentgym_budget.policies.episodes.play_episodes` (re-exported here), which
the trainer's :func:`~agentgym_budget.train.rollout.collect_episodes` shares (recording tokens instead of
per-turn facts).  Every executor hands its jobs to an :class:`EpisodeRunner`, which keeps up to
``spec.concurrency`` episodes in flight on as many env copies: each round it asks the policy
for the actions of all running episodes in one
:meth:`~agentgym_budget.policies.base.BatchPolicy.act_batch` call (one batched ``generate``
for a local model, concurrent requests for a served one), steps their envs, and starts the
next jobs in the places of those that ended.  A plain policy runs as a
:class:`~agentgym_budget.policies.base.SequentialBatchPolicy`; since each episode's seeds are
its own (:mod:`~agentgym_budget.seeds`), the records do not depend on the concurrency.

The budget is forced per episode with ``reset(options={"budget": T})`` on the env's
:class:`~agentgym_budget.wrappers.TurnBudget`, which alone ends an episode for lack of turns
(its ``truncated``); the runner keeps no turn count of its own, so it only plays envs under a
``TurnBudget`` (:meth:`RolloutSpec.make_env` builds them; :class:`EpisodeRunner` refuses others).

Executors: :class:`SerialExecutor` (in-process) and
:class:`~agentgym_budget.eval.process_pool.ProcessPoolExecutor` (a pool of processes, one
runner per process, jobs sent task by task).  Another backend implements the
:class:`Executor` protocol: ``run(spec, jobs, on_record) -> records``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import gymnasium as gym

from agentgym_budget.envs.registration import make_budget_env
from agentgym_budget.eval.records import (
    TURN_FACTS,
    EpisodeJob,
    EpisodeRecord,
    game_of,
    plan_length_of,
    transcript_turn,
    turn_facts,
)
from agentgym_budget.policies.base import BatchPolicy, Policy, PolicyReply, as_batch_policy, make_policy
from agentgym_budget.policies.episodes import EpisodeInFlight, episode_over, play_episodes
from agentgym_budget.seeds import attempt_seed, task_seed
from agentgym_budget.wrappers.budget import TurnBudget

__all__ = ["EpisodeInFlight", "EpisodeRunner", "Executor", "RecordCallback", "RolloutSpec", "SerialExecutor",
           "play_episodes"]

RecordCallback = Callable[[EpisodeRecord], None]


@dataclass(frozen=True)
class RolloutSpec:
    """Everything a worker needs to build its env and policy (picklable).

    ``policy`` is a registered name (built with ``policy_kwargs``) or a policy object (it must
    then be picklable to run in a process pool).  ``env_kwargs`` go to ``gym.make``; budget
    options among them (``show_budget``, ...) go to the :class:`TurnBudget`.
    ``concurrency``: episodes in flight per worker (see :class:`EpisodeRunner`);
    ``transcripts``: keep each turn's observation and reply in the records.
    """

    env_id: str
    policy: str | Policy | BatchPolicy
    seed: int
    max_budget: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    concurrency: int = 1
    transcripts: bool = False

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")

    def make_env(self) -> gym.Env:
        """The env under a :class:`TurnBudget` of ``max_budget`` (budgets are then forced per episode)."""
        if "budget" in self.env_kwargs:
            raise ValueError("do not pass budget= in env_kwargs: the evaluator sets the budget of every episode")
        return make_budget_env(self.env_id, self.max_budget, **self.env_kwargs)

    def make_policy(self) -> BatchPolicy:
        """The policy, as a :class:`~agentgym_budget.policies.base.BatchPolicy`."""
        if isinstance(self.policy, str):
            return as_batch_policy(make_policy(self.policy, **self.policy_kwargs))
        if self.policy_kwargs:
            raise ValueError("policy_kwargs apply to a policy given by name, not to a policy object")
        return as_batch_policy(self.policy)


class _EpisodeInFlight:
    """One episode being played: its env, the policy's state for it, and what the record needs."""

    def __init__(self, index: int, job: EpisodeJob, env: gym.Env, policy: BatchPolicy, seed: int,
                 transcripts: bool) -> None:
        self.index, self.job, self.env = index, job, env
        self.start = time.perf_counter()
        self.state = policy.start(attempt_seed(seed, job.task, job.attempt))
        self.obs, self.info = env.reset(seed=task_seed(seed, job.task), options={"budget": job.budget})
        self.plan_length, self.game = plan_length_of(self.info), game_of(self.info)
        self.actions: list[str] = []
        self.per_turn: dict[str, list[Any]] = {name: [] for name in TURN_FACTS}
        self.lost_turn: int | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.won_turn: int | None = None
        self.done = False
        self.transcript: list[dict[str, Any]] | None = [] if transcripts else None

    def step(self, reply: PolicyReply) -> None:
        """Play the policy's reply and note what happened."""
        action, before, info_before = reply.action, self.obs, self.info
        self.actions.append(action)
        self.prompt_tokens = _add(self.prompt_tokens, reply.prompt_tokens)
        self.completion_tokens = _add(self.completion_tokens, reply.completion_tokens)
        self.obs, reward, terminated, truncated, self.info = self.env.step(action)
        facts = turn_facts(action, info_before, self.info)
        for name in TURN_FACTS:
            self.per_turn[name].append(facts[name])
        if self.info.get("won"):
            self.won_turn = len(self.actions)
        if facts["lost"]:
            self.lost_turn = len(self.actions)
        # No turn count here: the env's TurnBudget (reset with this job's budget) truncates the step that spends it.
        self.done = episode_over(terminated, truncated, self.won_turn is not None, stop_at_win=True)
        if self.transcript is not None:
            self.transcript.append(transcript_turn(len(self.actions), before, reply, info_before, float(reward),
                                                   terminated, truncated, self.info))

    def record(self) -> EpisodeRecord:
        job = self.job
        return EpisodeRecord(
            task=job.task, attempt=job.attempt, budget=job.budget, won_turn=self.won_turn, turns=len(self.actions),
            plan_length=self.plan_length, actions=self.actions, **self.per_turn, prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens, seconds=time.perf_counter() - self.start,
            transcript=self.transcript, final_observation=None if self.transcript is None else self.obs,
            lost_turn=self.lost_turn, game=self.game,
        )


def _add(total: int | None, value: int | None) -> int | None:
    return total if value is None else (total or 0) + value


class EpisodeRunner:
    """A worker's envs and policy: plays jobs with up to ``spec.concurrency`` episodes in flight.

    Each round every running episode gets its action from one ``act_batch`` call; an episode
    that ends frees its env for the next job.  Env copies are made as needed (at most
    ``concurrency``) and kept for later :meth:`run` calls; ``envs`` may hand over copies made
    before by ``spec.make_env()`` (same env id and kwargs): each must be a
    :class:`~agentgym_budget.wrappers.TurnBudget`, the one thing that ends an episode at its budget.

    Example:
        >>> import agentgym_budget
        >>> spec = RolloutSpec("KeyDoor-Budget-v0", "expert", seed=0, max_budget=4, concurrency=3)
        >>> runner = EpisodeRunner(spec)
        >>> records = runner.run([EpisodeJob(task, 0, 4) for task in range(5)])
        >>> [r.won for r in records], len(runner.envs)
        ([True, True, True, True, True], 3)
        >>> runner.close()
        >>> import gymnasium as gym
        >>> EpisodeRunner(spec, [gym.make("KeyDoor-v0")])
        Traceback (most recent call last):
        ...
        ValueError: EpisodeRunner plays envs under a TurnBudget (it ends each episode at its budget), got TimeLimit: hand over envs made by spec.make_env()
    """

    def __init__(self, spec: RolloutSpec, envs: list[gym.Env] | None = None) -> None:
        bare = [type(env).__name__ for env in envs or () if not isinstance(env, TurnBudget)]
        if bare:
            raise ValueError(f"EpisodeRunner plays envs under a TurnBudget (it ends each episode at its budget), "
                             f"got {', '.join(bare)}: hand over envs made by spec.make_env()")
        self.spec = spec
        self.policy = spec.make_policy()
        self.envs: list[gym.Env] = list(envs or [])

    def run(self, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None,
            stop: Callable[[], bool] | None = None) -> list[EpisodeRecord]:
        """The records of ``jobs`` in their order; ``on_record`` is called as each episode ends.

        ``stop``: asked before every round; once it answers true the episodes still running are
        abandoned and the records of the unfinished jobs are ``None`` (a pool worker's shutdown).
        """
        free = list(self.envs)
        records: list[EpisodeRecord | None] = [None] * len(jobs)

        def start(index: int, job: EpisodeJob) -> _EpisodeInFlight:  # an env is taken when the episode starts
            return _EpisodeInFlight(index, job, free.pop() if free else self._new_env(), self.policy, self.spec.seed,
                                    self.spec.transcripts)

        def end(episode: _EpisodeInFlight) -> None:
            record = records[episode.index] = episode.record()
            free.append(episode.env)
            if on_record is not None:
                on_record(record)

        play_episodes(self.policy, [partial(start, index, job) for index, job in enumerate(jobs)],
                      self.spec.concurrency, end, stop)
        return records  # type: ignore[return-value]  (every slot is filled)

    def _new_env(self) -> gym.Env:
        env = self.spec.make_env()
        self.envs.append(env)
        return env

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []


class Executor(Protocol):
    """Runs jobs; returns their records in the order of ``jobs``, calling ``on_record`` as each finishes."""

    def run(
        self, spec: RolloutSpec, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None
    ) -> list[EpisodeRecord]: ...


class SerialExecutor:
    """Runs every job in this process, ``spec.concurrency`` episodes at a time (one :class:`EpisodeRunner`)."""

    def run(
        self, spec: RolloutSpec, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None
    ) -> list[EpisodeRecord]:
        runner = EpisodeRunner(spec)
        try:
            return runner.run(jobs, on_record)
        finally:
            runner.close()


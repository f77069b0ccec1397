"""Playing episodes: :class:`EpisodeRunner` keeps up to ``spec.concurrency`` episodes in flight.

The loop itself is :func:`play_episodes`, which the trainer's
:func:`~agentgym_budget.train.rollout.collect_episodes` shares (recording tokens instead of
per-turn facts).  Every executor hands its jobs to an :class:`EpisodeRunner`, which keeps up to
``spec.concurrency`` episodes in flight on as many env copies: each round it asks the policy
for the actions of all running episodes in one
:meth:`~agentgym_budget.episodes.policy.BatchPolicy.act_batch` call (one batched ``generate``
for a local model, concurrent requests for a served one), steps their envs, and starts the
next jobs in the places of those that ended.  A plain policy runs as a
:class:`~agentgym_budget.episodes.policy.SequentialBatchPolicy`; since each episode's seeds are
its own (:mod:`~agentgym_budget.seeds`), the records do not depend on the concurrency.

The budget is forced per episode with ``reset(options={"budget": T})`` on the env's
:class:`~agentgym_budget.wrappers.TurnBudget`, which alone ends an episode for lack of turns
(its ``truncated``); the runner keeps no turn count of its own, so it only plays envs under a
``TurnBudget`` (:meth:`RolloutSpec.make_env` builds them; :class:`EpisodeRunner` refuses others).

**The fault policy** — the one of evaluation, training and the adapters: an env that raises in
``reset`` or ``step`` costs at most its episode.  The episode is played again from the start in a
fresh env (same seeds, so the same episode a fault-free env would have given; the env that
raised is closed and never reused); if that env raises too, the episode ends *failed*: it is
recorded (``EpisodeRecord.failed``, ``env_failures``, ``error``) and counts as not won, and the
run goes on.  ``RolloutSpec(env_errors="raise")`` (``eval --env-errors raise``) aborts the run at
the first raise instead.  Only the env's own calls are guarded: a policy that raises is a bug,
raised at once.  (The trainer's :func:`~agentgym_budget.train.rollout.collect_episodes` replays the
same way and drops a failed episode's group; an adapter's
:class:`~agentgym_budget.integrations.session.BudgetSession`, which cannot ask the model again,
replays the episode's commands.)

Executors: :class:`SerialExecutor` (in-process) and
:class:`~agentgym_budget.episodes.process_pool.EpisodeProcessPool` (a pool of processes, one
runner per process, jobs sent task by task).  Another backend implements the
:class:`Executor` protocol: ``run(spec, jobs, on_record) -> records``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar, overload

import gymnasium as gym

from agentgym_budget.envs.base import close_quietly
from agentgym_budget.envs.registration import make_budget_env
from agentgym_budget.episodes.outcome import episode_over
from agentgym_budget.episodes.policy import BatchPolicy, Policy, PolicyReply, as_batch_policy, make_policy
from agentgym_budget.episodes.records import (
    TURN_FACTS,
    EpisodeJob,
    EpisodeRecord,
    game_of,
    plan_length_of,
    transcript_turn,
    turn_facts,
)
from agentgym_budget.seeds import attempt_seed, task_seed
from agentgym_budget.text import printable_line
from agentgym_budget.wrappers.budget import TurnBudget

__all__ = ["EpisodeInFlight", "EpisodeRunner", "Executor", "RecordCallback", "RolloutSpec", "SerialExecutor",
           "play_episodes"]

RecordCallback = Callable[[EpisodeRecord], None]


#: What an env that raises costs: its episode (replayed once, else recorded failed) or the whole run.
ENV_ERRORS = ("replay", "raise")


@dataclass(frozen=True)
class RolloutSpec:
    """Everything a worker needs to build its env and policy (picklable).

    ``policy`` is a registered name (built with ``policy_kwargs``) or a policy object (it must
    then be picklable to run in a process pool).  ``env_kwargs`` go to ``gym.make``; budget
    options among them (``show_budget``, ...) go to the :class:`TurnBudget`.
    ``concurrency``: episodes in flight per worker (see :class:`EpisodeRunner`);
    ``transcripts``: keep each turn's observation and reply in the records;
    ``env_errors``: what an env that raises costs (:data:`ENV_ERRORS`): ``"replay"`` (the fault
    policy: the episode, replayed once, else recorded as failed) or ``"raise"`` (the run).
    """

    env_id: str
    policy: str | Policy | BatchPolicy
    seed: int
    max_budget: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    concurrency: int = 1
    transcripts: bool = False
    env_errors: str = "replay"

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.env_errors not in ENV_ERRORS:
            raise ValueError(f"env_errors must be one of {ENV_ERRORS}, got {self.env_errors!r}")

    def make_env(self) -> gym.Env:
        """The env under a :class:`TurnBudget` of ``max_budget`` (budgets are then forced per episode)."""
        if "budget" in self.env_kwargs:
            raise ValueError("do not pass budget= in env_kwargs: the evaluator sets the budget of every episode")
        return make_budget_env(self.env_id, self.max_budget, **self.env_kwargs)

    def make_policy(self) -> BatchPolicy:
        """The policy, as a :class:`~agentgym_budget.episodes.policy.BatchPolicy`."""
        if isinstance(self.policy, str):
            return as_batch_policy(make_policy(self.policy, **self.policy_kwargs))
        if self.policy_kwargs:
            raise ValueError("policy_kwargs apply to a policy given by name, not to a policy object")
        return as_batch_policy(self.policy)


class _EpisodeInFlight:
    """One episode being played: its env, the policy's state for it, and what the record needs."""

    def __init__(self, index: int, job: EpisodeJob, env: gym.Env, policy: BatchPolicy, seed: int,
                 transcripts: bool, guarded: bool = True, env_failures: int = 0) -> None:
        self.index, self.job, self.env = index, job, env
        self.start = time.perf_counter()
        self.guarded, self.env_failures, self.error = guarded, env_failures, ""
        self.raised = False  # the env raised during this attempt (its state is unknown: it is not reused)
        self.state = policy.start(attempt_seed(seed, job.task, job.attempt))
        self.obs: Any = ""
        self.info: dict[str, Any] = {}
        try:
            self.obs, self.info = env.reset(seed=task_seed(seed, job.task), options={"budget": job.budget})
        except Exception as error:  # noqa: BLE001 - any env fault is the env's: the fault policy
            self._env_raised(error, "reset")
        self.plan_length, self.game = plan_length_of(self.info), game_of(self.info)
        self.actions: list[str] = []
        self.per_turn: dict[str, list[Any]] = {name: [] for name in TURN_FACTS}
        self.lost_turn: int | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.won_turn: int | None = None
        self.done = self.raised
        self.transcript: list[dict[str, Any]] | None = [] if transcripts else None

    def _env_raised(self, error: Exception, where: str) -> None:
        """The env raised at ``where``: end this attempt (or, unguarded, the run)."""
        if not self.guarded:
            raise error
        self.raised, self.done = True, True
        self.env_failures += 1
        self.error = f"{where}: {type(error).__name__}: {printable_line(error, limit=200)}"

    def step(self, reply: PolicyReply) -> None:
        """Play the policy's reply and note what happened (an env that raises ends the attempt, the turn unplayed)."""
        action, before, info_before = reply.action, self.obs, self.info
        self.actions.append(action)
        self.prompt_tokens = _add(self.prompt_tokens, reply.prompt_tokens)
        self.completion_tokens = _add(self.completion_tokens, reply.completion_tokens)
        try:
            self.obs, reward, terminated, truncated, self.info = self.env.step(action)
        except Exception as error:  # noqa: BLE001 - any env fault is the env's: the fault policy
            self.actions.pop()  # not a played turn
            self._env_raised(error, f"step {len(self.actions) + 1}")
            return
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
            lost_turn=self.lost_turn, game=self.game, env_failures=self.env_failures,
            failed=self.raised, error=self.error if self.raised else "",
        )


def _add(total: int | None, value: int | None) -> int | None:
    return total if value is None else (total or 0) + value


class EpisodeInFlight(Protocol):
    """An episode being played, as :func:`play_episodes` sees it; what it records is its own."""

    state: Any  # the policy's state for this episode (from BatchPolicy.start)
    obs: Any
    info: dict[str, Any]
    done: bool

    def step(self, reply: PolicyReply) -> None:
        """Play the policy's reply in the env; set ``done`` once the episode is over."""


Episode = TypeVar("Episode", bound=EpisodeInFlight)


def play_episodes(policy: BatchPolicy, starts: Iterable[Callable[[], Episode]], concurrency: int,
                  on_end: Callable[[Episode], None], stop: Callable[[], bool] | None = None) -> None:
    """The episode loop of evaluation and training: up to ``concurrency`` episodes in flight, one
    ``act_batch`` call per round for all of them.

    ``starts`` are called in order, each when a place is free, and give the started episode
    (which resets its env); one that is already ``done`` (its env failed at reset) ends at once.
    Each ended episode is released by the policy, then passed to ``on_end``.  ``stop`` is asked
    before every round; once it answers true the episodes still running are abandoned.

    Example:
        >>> from agentgym_budget.episodes.policy import SequentialBatchPolicy
        >>> class Look:  # a plain policy
        ...     name, reads_budget = "look", False
        ...     def reset(self, seed=None): pass
        ...     def act(self, obs, info): return "look"
        >>> class Countdown:  # an episode of 3 turns that records its actions
        ...     def __init__(self, policy):
        ...         self.state, self.obs, self.info, self.done, self.actions = policy.start(0), "", {}, False, []
        ...     def step(self, reply):
        ...         self.actions.append(reply.action)
        ...         self.done = len(self.actions) == 3
        >>> policy = SequentialBatchPolicy(Look())
        >>> ended = []
        >>> play_episodes(policy, [lambda: Countdown(policy)] * 2, concurrency=2, on_end=ended.append)
        >>> [e.actions for e in ended]
        [['look', 'look', 'look'], ['look', 'look', 'look']]
    """
    pending = deque(starts)
    running: list[Episode] = []
    while (pending or running) and not (stop is not None and stop()):
        while pending and len(running) < concurrency:
            episode = pending.popleft()()
            if episode.done:
                _end(policy, episode, on_end)
            else:
                running.append(episode)
        if not running:
            continue
        replies = policy.act_batch([e.state for e in running], [e.obs for e in running], [e.info for e in running])
        for episode, reply in zip(running, replies):
            episode.step(reply)
            if episode.done:
                _end(policy, episode, on_end)
        running = [episode for episode in running if not episode.done]


def _end(policy: BatchPolicy, episode: Episode, on_end: Callable[[Episode], None]) -> None:
    if hasattr(policy, "release"):
        policy.release(episode.state)
    on_end(episode)


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

    @overload  # without stop=, every job's record is there
    def run(self, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None,
            stop: None = None) -> list[EpisodeRecord]: ...
    @overload
    def run(self, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None, *,
            stop: Callable[[], bool]) -> list[EpisodeRecord | None]: ...
    def run(self, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None,
            stop: Callable[[], bool] | None = None) -> list[EpisodeRecord] | list[EpisodeRecord | None]:
        """The records of ``jobs`` in their order; ``on_record`` is called as each episode ends.

        ``stop``: asked before every round; once it answers true the episodes still running are
        abandoned and the records of the unfinished jobs are ``None`` (a pool worker's shutdown).
        """
        free = list(self.envs)
        records: list[EpisodeRecord | None] = [None] * len(jobs)
        replay: list[tuple[int, int]] = []  # (job index, env failures so far): episodes whose env raised once
        guarded = self.spec.env_errors == "replay"

        def start(index: int, job: EpisodeJob, env_failures: int = 0) -> _EpisodeInFlight:
            # an env is taken when the episode starts; a replay takes a fresh one
            env = free.pop() if free and not env_failures else self._new_env()
            return _EpisodeInFlight(index, job, env, self.policy, self.spec.seed, self.spec.transcripts, guarded,
                                    env_failures)

        def end(episode: _EpisodeInFlight) -> None:
            if episode.raised:
                self._discard(episode.env)
                if episode.env_failures < 2:  # the fault policy: played once more from the start
                    replay.append((episode.index, episode.env_failures))
                    return
            else:
                free.append(episode.env)
            record = records[episode.index] = episode.record()
            if on_record is not None:
                on_record(record)

        play_episodes(self.policy, [partial(start, index, job) for index, job in enumerate(jobs)],
                      self.spec.concurrency, end, stop)
        if replay:
            again = [partial(start, index, jobs[index], failures) for index, failures in replay]
            replay.clear()
            play_episodes(self.policy, again, self.spec.concurrency, end, stop)
        return records

    def _new_env(self) -> gym.Env:
        env = self.spec.make_env()
        self.envs.append(env)
        return env

    def _discard(self, env: gym.Env) -> None:
        """Close an env that raised and stop using it (its state is unknown)."""
        if env in self.envs:
            self.envs.remove(env)
        close_quietly(env)

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


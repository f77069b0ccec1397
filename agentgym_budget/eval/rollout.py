"""Running episodes: the episode record, the job list, and pluggable executors.

An evaluation is a list of :class:`EpisodeJob` — (task, attempt, budget) — that an
:class:`Executor` turns into :class:`EpisodeRecord` s.  Every seed of an episode derives only
from (base seed, task, attempt) through :func:`task_seed` and :func:`attempt_seed`, never from
where or when the episode runs, so every executor returns the same records for the same jobs:

* a *task* is an env reset seed: all attempts of task ``i`` reset the env with
  ``task_seed(seed, i)`` (the same game), and differ only through the policy's seed
  ``attempt_seed(seed, i, attempt)``;
* the budget is forced per episode with ``reset(options={"budget": T})`` on the env's
  :class:`~agentgym_budget.wrappers.TurnBudget`.

Every executor hands its jobs to an :class:`EpisodeRunner`, which keeps up to
``spec.concurrency`` episodes in flight on as many env copies: each round it asks the policy
for the actions of all running episodes in one
:meth:`~agentgym_budget.policies.base.BatchPolicy.act_batch` call (one batched ``generate``
for a local model, concurrent requests for a served one), steps their envs, and starts the
next jobs in the places of those that ended.  A plain policy runs as a
:class:`~agentgym_budget.policies.base.SequentialBatchPolicy`; since each episode's seeds are
its own, the records do not depend on the concurrency.

Executors: :class:`SerialExecutor` (in-process) and :class:`ProcessPoolExecutor` (a pool of
processes, one runner per process, jobs sent task by task).  Another backend implements the
:class:`Executor` protocol: ``run(spec, jobs, on_record) -> records``.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from agentgym_budget.envs.registration import make_budget_env
from agentgym_budget.eval.schema import NOT_IN_FILE, Bit, Index, Known, NonNegative, RecordError, Ternary, Turn, checked
from agentgym_budget.policies.base import BatchPolicy, Policy, PolicyReply, as_batch_policy, make_policy

__all__ = [
    "EpisodeJob",
    "EpisodeRecord",
    "EpisodeRunner",
    "Executor",
    "ProcessPoolExecutor",
    "RolloutSpec",
    "SerialExecutor",
    "attempt_seed",
    "die_with_parent",
    "expert_match_of",
    "game_of",
    "make_executor",
    "plan_length_of",
    "records_for_budget",
    "task_seed",
    "turn_facts",
]

UNKNOWN = -1  # marks a per-turn fact the env does not provide (no expert, no plan)


def task_seed(seed: int, task: int) -> int:
    """The env reset seed of ``task`` (the same for all its attempts)."""
    return int(np.random.SeedSequence([seed, task]).generate_state(1)[0])


def attempt_seed(seed: int, task: int, attempt: int) -> int:
    """The policy seed of one attempt at ``task``."""
    return int(np.random.SeedSequence([seed, task, attempt, 0x9A55]).generate_state(1)[0])


@dataclass(frozen=True, order=True)
class EpisodeJob:
    """One episode to run: attempt ``attempt`` at task ``task`` with a budget of ``budget`` turns."""

    task: int
    attempt: int
    budget: int


@dataclass
class EpisodeRecord:
    """What the metrics need from one episode, compactly; per-turn lists have one entry per turn.

    Per turn ``t`` (1-based; index ``t - 1``), about the action taken in the state left by
    turn ``t - 1``:

    * ``expert_match``: 1 if the action is the expert's action in that state (or one of its
      actions, ``info["expert_actions"]``), 0 if not, -1 if the env gives no expert action;
    * ``admissible``: 1 if the action was in ``info["admissible_commands"]``, 0 if not, -1 if
      the list was empty;
    * ``no_effect``: 1 if the env's ``info["action_effect"]`` was ``"no_effect"``;
    * ``plan_left``: the expert's remaining plan length after the turn
      (``info["expert_plan_length"]``, else ``len(info["expert_plan"])``), -1 if unknown;
    * ``effect``: the env's ``info["action_effect"]`` (``""`` if the env does not report it).

    ``plan_length`` is the remaining plan length at reset (-1 if unknown); ``won_turn`` the
    turn at which the task was won (``None``: not won within ``budget``), ``lost_turn`` the
    turn at which it was lost; ``game`` names the game the reset seed drew (``info["game"]``,
    else ``info["task_id"]``), to tell seeds that draw the same game.  ``prompt_tokens`` and
    ``completion_tokens`` add up what an LLM policy's backend reported over the episode
    (``None``: not reported).  ``seconds`` (wall time; with episodes in flight together it
    includes waiting for the others) is informational and excluded from equality.  Records
    written before ``effect``, ``lost_turn``, ``game`` and the token counts existed load with
    their defaults.

    ``transcript`` (``None`` unless transcripts were asked for) is what the agent saw and said,
    one :func:`transcript_turn` dict per turn, and ``final_observation`` what the env showed
    after the last turn.  Both are excluded from equality and from :meth:`to_dict`
    (``episodes.jsonl``): transcripts are stored apart, in ``transcripts.jsonl.gz`` (see
    :mod:`~agentgym_budget.eval.transcripts`).

    The trainer's :class:`~agentgym_budget.train.rollout.Episode` records the same kind of run
    for the learner (prompt and action tokens per turn, the return) rather than for the metrics.
    """

    task: Index
    attempt: Index
    budget: Turn
    won_turn: Turn | None
    turns: Index
    plan_length: Known
    actions: list[str]
    expert_match: list[Ternary]
    admissible: list[Ternary]
    no_effect: list[Bit]
    plan_left: list[Known]
    prompt_tokens: Index | None = None
    completion_tokens: Index | None = None
    seconds: NonNegative = field(default=0.0, compare=False)
    effect: list[str] = field(default_factory=list)
    lost_turn: Turn | None = None
    game: str = ""
    transcript: list[dict[str, Any]] | None = field(default=None, compare=False, repr=False, metadata=NOT_IN_FILE)
    final_observation: str | None = field(default=None, compare=False, repr=False, metadata=NOT_IN_FILE)

    @property
    def won(self) -> bool:
        return self.won_turn is not None

    def won_within(self, turns: int) -> bool:
        """Whether the task was won within the first ``turns`` turns."""
        return self.won_turn is not None and self.won_turn <= turns

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able record, without the transcript."""
        data = dataclasses.asdict(dataclasses.replace(self, transcript=None, final_observation=None))
        del data["transcript"], data["final_observation"]
        return data

    @classmethod
    def from_dict(cls, data: Any) -> EpisodeRecord:
        """The record of a parsed ``episodes.jsonl`` line, checked: a key, type or range its type
        hints do not allow (:func:`~agentgym_budget.eval.schema.checked`), or per-turn facts that
        contradict ``turns``, is a :class:`~agentgym_budget.eval.schema.RecordError` naming the field.

        Example:
            >>> EpisodeRecord.from_dict({**EpisodeRecord(0, 0, 4, 2, 2, 2, ["a", "b"], [1, 1], [1, 1], [0, 0],
            ...                          [1, 0]).to_dict(), "won_turn": 3})
            Traceback (most recent call last):
            ...
            agentgym_budget.eval.schema.RecordError: won_turn: turn 3 of an episode of 2 turns
        """
        record = cls(**checked(cls, data))
        problem = record._contradiction()
        if problem:
            raise RecordError(problem)
        return record

    def _contradiction(self) -> str | None:
        """What in the record contradicts the rest (``None``: nothing) — the checks no single field's type can make."""
        if self.turns > self.budget:
            return f"turns: {self.turns} turns in a budget of {self.budget}"
        for name in ("actions", *TURN_FACTS):
            entries = len(getattr(self, name))
            if entries != self.turns and not (name == "effect" and entries == 0):  # effect: [] in old records
                return f"{name}: {entries} entries for {self.turns} turns"
        for name in ("won_turn", "lost_turn"):
            turn = getattr(self, name)
            if turn is not None and turn > self.turns:
                return f"{name}: turn {turn} of an episode of {self.turns} turns"
        return None


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


def plan_length_of(info: dict[str, Any]) -> int:
    """The expert's remaining plan length in ``info`` (-1 if unknown).

    ``info["expert_plan_length"]`` when the env reports it (``None``: unknown); else, for envs
    that predate it, ``len(info["expert_plan"])``.
    """
    if "expert_plan_length" in info:
        length = info["expert_plan_length"]
        return UNKNOWN if length is None else int(length)
    plan = info.get("expert_plan")
    return len(plan) if isinstance(plan, (list, tuple)) else UNKNOWN


def game_of(info: dict[str, Any]) -> str:
    """The game a reset drew, from its info: ``info["game"]``, else ``info["task_id"]`` (``""``: unknown)."""
    game = info.get("game", info.get("task_id"))
    return "" if game is None else str(game)


#: The per-turn lists of an :class:`EpisodeRecord` that :func:`turn_facts` fills.
TURN_FACTS = ("expert_match", "admissible", "no_effect", "plan_left", "effect")


def turn_facts(action: str, info_before: dict[str, Any], info_after: dict[str, Any]) -> dict[str, Any]:
    """What one turn contributes to an :class:`EpisodeRecord`: ``action`` was taken in the
    state ``info_before`` describes and led to ``info_after`` (the env's facts, no text read).

    Example:
        >>> before = {"admissible_commands": ["take key", "open red door"], "expert_action": "take key"}
        >>> after = {"action_effect": "no_effect", "expert_plan_length": 2}
        >>> turn_facts("open red door", before, after)
        {'expert_match': 0, 'admissible': 1, 'no_effect': 1, 'plan_left': 2, 'effect': 'no_effect', 'lost': False}
    """
    commands = info_before.get("admissible_commands") or ()
    effect = str(info_after.get("action_effect", ""))
    return {
        "expert_match": expert_match_of(action, info_before),
        "admissible": int(action in commands) if commands else UNKNOWN,
        "no_effect": int(effect == "no_effect"),
        "plan_left": plan_length_of(info_after),
        "effect": effect,
        "lost": bool(info_after.get("lost")) and not info_before.get("lost"),
    }


def expert_match_of(action: str, info: dict[str, Any]) -> int:
    """1 if ``action`` is the expert's in the state ``info`` describes, 0 if not, -1 if the env has no expert."""
    choices = info.get("expert_actions")
    if isinstance(choices, (list, tuple)) and choices:
        return int(action in choices)
    expert = info.get("expert_action")
    if isinstance(expert, str) and expert:
        return int(action == expert)
    return UNKNOWN


def transcript_turn(turn: int, observation: str, reply: PolicyReply, info: dict[str, Any], next_obs: str,
                    reward: float, terminated: bool, truncated: bool, next_info: dict[str, Any]) -> dict[str, Any]:
    """One turn of a transcript: the agent saw ``observation`` (with ``info``), answered ``reply``,
    and the env's ``step`` returned ``next_obs, reward, terminated, truncated, next_info``.

    Example:
        >>> row = transcript_turn(1, "A door.", PolicyReply("open door", "Thought: open it.\\nAction: open door"),
        ...     {"admissible_commands": ["open door", "look"], "expert_action": "open door"}, "It opens.", 1.0,
        ...     True, False, {"won": True})
        >>> row["action"], row["admissible"], row["expert_action"], row["won"], row["action_effect"]
        ('open door', True, 'open door', True, None)
        >>> row["written_action"] is None  # the reply wrote the command that was played
        True
    """
    commands = info.get("admissible_commands") or ()
    experts = info.get("expert_actions")
    expert = experts[0] if isinstance(experts, (list, tuple)) and experts else info.get("expert_action") or None
    return {
        "turn": turn, "observation": observation, "reply": reply.text, "action": reply.action,
        "written_action": reply.written_action,  # the reply's own spelling, when the played one differs
        "won": bool(next_info.get("won", False)), "reward": float(reward), "terminated": bool(terminated),
        "truncated": bool(truncated), "action_effect": next_info.get("action_effect"),
        "expert_action": expert if isinstance(expert, str) else None,
        "admissible": reply.action in commands if commands else None,
        "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
    }


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
        self.done = self.won_turn is not None or terminated or truncated or len(self.actions) >= self.job.budget
        if self.transcript is not None:
            self.transcript.append(transcript_turn(len(self.actions), before, reply, info_before, self.obs,
                                                   float(reward), terminated, truncated, self.info))

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
    before (same env id and kwargs).

    Example:
        >>> import agentgym_budget
        >>> spec = RolloutSpec("KeyDoor-Budget-v0", "expert", seed=0, max_budget=4, concurrency=3)
        >>> runner = EpisodeRunner(spec)
        >>> records = runner.run([EpisodeJob(task, 0, 4) for task in range(5)])
        >>> [r.won for r in records], len(runner.envs)
        ([True, True, True, True, True], 3)
        >>> runner.close()
    """

    def __init__(self, spec: RolloutSpec, envs: list[gym.Env] | None = None) -> None:
        self.spec = spec
        self.policy = spec.make_policy()
        self.envs: list[gym.Env] = list(envs or [])

    def run(self, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None,
            stop: Callable[[], bool] | None = None) -> list[EpisodeRecord]:
        """The records of ``jobs`` in their order; ``on_record`` is called as each episode ends.

        ``stop``: asked before every round; once it answers true the episodes still running are
        abandoned and the records of the unfinished jobs are ``None`` (a pool worker's shutdown).
        """
        pending = deque(enumerate(jobs))
        free = list(self.envs)
        running: list[_EpisodeInFlight] = []
        records: list[EpisodeRecord | None] = [None] * len(jobs)
        while (pending or running) and not (stop is not None and stop()):
            while pending and len(running) < self.spec.concurrency:
                index, job = pending.popleft()
                running.append(_EpisodeInFlight(index, job, free.pop() if free else self._new_env(), self.policy,
                                                self.spec.seed, self.spec.transcripts))
            replies = self.policy.act_batch([e.state for e in running], [e.obs for e in running],
                                            [e.info for e in running])
            for episode, reply in zip(running, replies):
                episode.step(reply)
                if episode.done:
                    record = records[episode.index] = episode.record()
                    free.append(episode.env)
                    if hasattr(self.policy, "release"):
                        self.policy.release(episode.state)
                    if on_record is not None:
                        on_record(record)
            running = [episode for episode in running if not episode.done]
        return records  # type: ignore[return-value]  (every slot is filled)

    def _new_env(self) -> gym.Env:
        env = self.spec.make_env()
        self.envs.append(env)
        return env

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []


def records_for_budget(records: Iterable[EpisodeRecord], budget: int) -> list[EpisodeRecord]:
    """Per (task, attempt): the record with the smallest budget ``>= budget``.

    Whether it was won within ``budget`` turns is then the outcome of that attempt at that
    budget: in the shortcut mode this is the largest-budget rollout, in the per-budget mode
    the rollout at ``budget`` itself.
    """
    chosen: dict[tuple[int, int], EpisodeRecord] = {}
    for record in records:
        key = (record.task, record.attempt)
        if record.budget >= budget and (key not in chosen or record.budget < chosen[key].budget):
            chosen[key] = record
    return list(chosen.values())


RecordCallback = Callable[[EpisodeRecord], None]


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


# One runner (envs + policy) per worker process, built by the pool initializer.
_worker_state: dict[str, Any] = {}


def _init_worker(spec: RolloutSpec) -> None:
    _worker_state["runner"] = EpisodeRunner(spec)


class ProcessPoolExecutor:
    """Runs jobs in ``workers`` processes; each process runs them with one :class:`EpisodeRunner`.

    Jobs are sent in chunks of whole tasks (all attempts and budgets of a few consecutive
    tasks), about ``chunks_per_worker`` chunks per process: few enough that messaging costs
    little next to the episodes, enough that processes finish together.  ``start_method`` is
    a ``multiprocessing`` start method (``None``: ``"fork"`` where available — fast, and
    processes inherit envs registered at run time — else the platform default).  With
    ``"fork"`` one env is built in this process before the pool starts, so that module-level
    caches it fills (e.g. loaded game files) are inherited rather than rebuilt per worker.

    Records come back as episodes finish (a few per message, at least every
    ``FLUSH_SECONDS``), so ``on_record`` sees them while chunks are still running.

    Stopping: SIGINT (Ctrl-C) or SIGTERM during :meth:`run` (main thread), or a
    ``KeyboardInterrupt`` raised by ``on_record``, tells every worker to stop after its current
    episode; the episodes finished by then are still passed to ``on_record`` (so an episode log
    keeps every one of them), workers still busy after ``STOP_SECONDS`` are terminated, and
    ``KeyboardInterrupt("signal SIGINT")`` is raised (the wait restarts while records still arrive:
    records already sent are always saved).  A second signal stops at once.  Workers
    ignore SIGINT (the terminal sends it to the whole process group; this process coordinates)
    and die with this process even when it is killed with SIGKILL (:func:`die_with_parent`).
    """

    #: Longest a worker holds finished records before sending them.
    FLUSH_SECONDS = 0.2
    #: Longest :meth:`run` waits for busy workers after a stop before terminating them.
    STOP_SECONDS = 1.5

    def __init__(self, workers: int, start_method: str | None = None, chunks_per_worker: int = 4) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if chunks_per_worker < 1:
            raise ValueError(f"chunks_per_worker must be >= 1, got {chunks_per_worker}")
        self.workers = workers
        self.chunks_per_worker = chunks_per_worker
        if start_method is None:
            start_method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
        self.start_method = start_method

    def run(
        self, spec: RolloutSpec, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None
    ) -> list[EpisodeRecord]:
        if len(set(jobs)) != len(jobs):
            raise ValueError("jobs must not repeat: a record is kept per (task, attempt, budget)")
        chunks = _chunks_of_tasks(jobs, self.workers * self.chunks_per_worker)
        if not chunks:
            return []
        context = multiprocessing.get_context(self.start_method)
        if context.get_start_method() == "fork":
            # Build one env here first: forked workers inherit what it loaded and cached at
            # module level (game files, parsed grammars) instead of each loading it again.
            spec.make_env().close()
        pool = _Pool(context, spec, chunks, min(self.workers, len(chunks)), self.FLUSH_SECONDS)
        done: dict[EpisodeJob, EpisodeRecord] = {}
        with _StopSignals() as signals:
            try:
                pool.start()
                stopped = self._collect(pool, signals, done, len(jobs), on_record)
            finally:
                pool.close()
        if stopped is not None:
            raise KeyboardInterrupt(stopped)
        return [done[job] for job in jobs]

    def _collect(self, pool: _Pool, signals: _StopSignals, done: dict[EpisodeJob, EpisodeRecord], expected: int,
                 on_record: RecordCallback | None) -> str | None:
        """Receive records until all are in (``None``) or a stop (its reason, after saving what finished)."""
        stopped: str | None = None
        deadline = float("inf")
        while len(done) < expected and not pool.all_done():
            if stopped is None and signals.received is not None:
                stopped, deadline = f"signal {signals.received}", time.monotonic() + self.STOP_SECONDS
                pool.stop()
            if stopped is not None and (time.monotonic() > deadline or signals.count > 1):
                break  # busy workers are terminated by pool.close(); their current episodes are lost
            received = pool.receive(timeout=0.05)
            if stopped is not None and received:  # still arriving: the wait is for busy workers only
                deadline = time.monotonic() + self.STOP_SECONDS
            for job, record in received:
                done[job] = record
                if on_record is None:
                    continue
                try:
                    with signals.deferred():  # a signal never splits "saved" from "counted"
                        on_record(record)
                except KeyboardInterrupt as e:  # the caller asks to stop: keep what finishes meanwhile
                    if stopped is None:
                        stopped, deadline = str(e) or "KeyboardInterrupt", time.monotonic() + self.STOP_SECONDS
                        pool.stop()
        return stopped


_RECORDS, _ERROR, _DONE = "records", "error", "done"


def die_with_parent(parent_pid: int) -> None:
    """Make this (worker) process end when ``parent_pid`` does, even if it is killed with SIGKILL.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` — the kernel kills this process when the thread
    that started it exits — then a check that the parent did not already die before that call.
    Elsewhere: a daemon thread that polls the parent pid twice a second.  Also puts SIGTERM back
    to its default action (a forked worker inherits the parent's Python handler, which would
    make ``kill`` raise ``KeyboardInterrupt`` somewhere in an episode instead of ending it) and
    ignores SIGINT (Ctrl-C reaches every process of the terminal's group; the parent decides).

    Example:
        >>> import multiprocessing, os
        >>> worker = multiprocessing.get_context("fork").Process(target=die_with_parent, args=(os.getpid(),))
        >>> worker.start(); worker.join(); worker.exitcode
        0
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        if libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0) == 0:
            if os.getppid() != parent_pid:  # the parent died before the call: nobody would signal us
                os._exit(1)
            return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def _pool_worker(spec: RolloutSpec, parent_pid: int, chunks: Any, results: Any, stop: Any,
                 flush_seconds: float) -> None:
    """A pool process: build the env and policy, run chunks until the sentinel or ``stop``, stream the records."""
    die_with_parent(parent_pid)
    buffer: list[tuple[EpisodeJob, EpisodeRecord]] = []
    lock = threading.Lock()

    def flush() -> None:
        nonlocal buffer
        with lock:
            if buffer:
                results.put((_RECORDS, buffer))
                buffer = []

    def flush_on_stop() -> None:  # the records finished before a stop leave even if an episode is still running
        while not stop.value:
            time.sleep(0.02)  # polled: an Event's set() blocks on waiters that died (multiprocessing)
        flush()

    threading.Thread(target=flush_on_stop, name="flush-on-stop", daemon=True).start()
    last_flush = time.monotonic()
    try:
        _init_worker(spec)

        def finished(record: EpisodeRecord) -> None:
            nonlocal last_flush
            with lock:
                buffer.append((EpisodeJob(record.task, record.attempt, record.budget), record))
            if time.monotonic() - last_flush >= flush_seconds:
                flush()
                last_flush = time.monotonic()

        while not stop.value:
            chunk = chunks.get()
            if chunk is None:
                break
            _worker_state["runner"].run(chunk, finished, stop=lambda: bool(stop.value))
    except BaseException as e:  # a bug in the env or the policy: the parent raises it
        flush()
        results.put((_ERROR, _transportable(e)))
    finally:
        flush()
        results.put((_DONE, None))
        runner = _worker_state.get("runner")
        if runner is not None:
            try:
                runner.close()
            except Exception:  # closing is best effort once the records are out
                pass


def _transportable(error: BaseException) -> BaseException:
    """``error`` if it pickles (the parent re-raises it), else a RuntimeError with its traceback."""
    import pickle

    try:
        pickle.dumps(error)
        return error
    except Exception:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return RuntimeError(f"a worker failed:\n{text}")


class _Pool:
    """The worker processes of one :meth:`ProcessPoolExecutor.run`, their queues and the stop event."""

    def __init__(self, context: Any, spec: RolloutSpec, chunks: list[list[EpisodeJob]], workers: int,
                 flush_seconds: float) -> None:
        # Bounded: workers faster than this process's on_record wait for it (backpressure), so that
        # what has finished but is not saved yet stays small and a stop saves it quickly.
        self._chunks, self._results = context.Queue(), context.Queue(maxsize=4 * workers)
        self._stop = context.RawValue("b", 0)
        for chunk in chunks:
            self._chunks.put(chunk)
        for _ in range(workers):
            self._chunks.put(None)
        args = (spec, os.getpid(), self._chunks, self._results, self._stop, flush_seconds)
        self._processes = [context.Process(target=_pool_worker, args=args, daemon=True, name=f"agentgym-worker-{i}")
                           for i in range(workers)]
        self._done = 0

    def start(self) -> None:
        for process in self._processes:
            process.start()

    def stop(self) -> None:
        self._stop.value = 1

    def all_done(self) -> bool:
        return self._done == len(self._processes)

    def receive(self, timeout: float) -> list[tuple[EpisodeJob, EpisodeRecord]]:
        """The records that arrive within ``timeout`` (a worker's error is raised here)."""
        received: list[tuple[EpisodeJob, EpisodeRecord]] = []
        end = time.monotonic() + timeout
        while True:
            try:
                kind, payload = self._results.get(timeout=max(end - time.monotonic(), 0.0) if not received else 0.0)
            except queue.Empty:
                break
            if kind == _RECORDS:
                received.extend(payload)
            elif kind == _DONE:
                self._done += 1
            else:
                self.stop()
                raise payload
        if not received and not self.all_done():
            dead = [p for p in self._processes if p.exitcode not in (None, 0)]
            if dead:
                self.stop()
                raise RuntimeError(f"worker process {dead[0].name} died (exit code {dead[0].exitcode}) before "
                                   f"finishing its episodes")
        return received

    def close(self) -> None:
        """Stop the workers: the ones still running after a short grace are terminated, then killed."""
        self._stop.value = 1
        started = [process for process in self._processes if process.pid is not None]
        grace = time.monotonic() + 0.2
        for process in started:
            process.join(timeout=max(grace - time.monotonic(), 0.0))
        for process in started:
            if process.is_alive():
                process.terminate()
        for process in started:
            process.join(timeout=1.0)
            if process.is_alive():
                process.kill()
                process.join()
        for q in (self._chunks, self._results):
            q.cancel_join_thread()  # never block on items nobody will read
            q.close()


class _StopSignals:
    """During :meth:`ProcessPoolExecutor.run` (main thread): SIGINT/SIGTERM only *request* a stop.

    A second signal raises ``KeyboardInterrupt`` at once.  :meth:`deferred` holds signals back
    while a record is saved, so a stop never falls between writing a record and counting it.
    """

    def __init__(self) -> None:
        self.received: str | None = None
        self.count = 0
        self._active = threading.current_thread() is threading.main_thread()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        if self._active:
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.received is None:
            self.received = signal.Signals(signum).name
        if self.count > 2:
            raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    def deferred(self) -> Any:
        import contextlib

        if not self._active or not hasattr(signal, "pthread_sigmask"):
            return contextlib.nullcontext()
        return _blocked_signals()


def _blocked_signals() -> Any:
    import contextlib

    @contextlib.contextmanager
    def block() -> Iterator[None]:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    return block()


def _chunks_of_tasks(jobs: Iterable[EpisodeJob], n_chunks: int) -> list[list[EpisodeJob]]:
    """Split ``jobs`` into at most ``n_chunks`` lists of whole, consecutive tasks."""
    by_task: dict[int, list[EpisodeJob]] = {}
    for job in jobs:
        by_task.setdefault(job.task, []).append(job)
    tasks = list(by_task.values())
    bounds = np.linspace(0, len(tasks), min(n_chunks, len(tasks)) + 1).round().astype(int)
    return [[job for task in tasks[a:b] for job in task] for a, b in zip(bounds, bounds[1:]) if b > a]


def make_executor(workers: int = 1) -> Executor:
    """:class:`SerialExecutor` for one worker, else a :class:`ProcessPoolExecutor`."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return SerialExecutor() if workers == 1 else ProcessPoolExecutor(workers)

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

import concurrent.futures
import dataclasses
import multiprocessing
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from agentgym_budget.envs.registration import make_budget_env
from agentgym_budget.policies.base import BatchPolicy, Policy, PolicyReply, as_batch_policy, make_policy
from agentgym_budget.text import INVALID_ACTION_FEEDBACK

__all__ = [
    "EpisodeJob",
    "EpisodeRecord",
    "EpisodeRunner",
    "Executor",
    "ProcessPoolExecutor",
    "RolloutSpec",
    "SerialExecutor",
    "attempt_seed",
    "make_executor",
    "records_for_budget",
    "task_seed",
    "transcript_turn",
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
    * ``no_effect``: 1 if the env answered ``"Nothing happens."``;
    * ``plan_left``: ``len(info["expert_plan"])`` after the turn, -1 if unknown.

    ``plan_length`` is ``len(info["expert_plan"])`` at reset (-1 if unknown); ``won_turn`` the
    turn at which the task was won (``None``: not won within ``budget``).  ``prompt_tokens``
    and ``completion_tokens`` add up what an LLM policy's backend reported over the episode
    (``None``: not reported).  ``seconds`` (wall time; with episodes in flight together it
    includes waiting for the others) is informational and excluded from equality.

    ``transcript`` (``None`` unless transcripts were asked for) is what the agent saw and said,
    one :func:`transcript_turn` dict per turn, and ``final_observation`` what the env showed
    after the last turn.  Both are excluded from equality and from :meth:`to_dict`
    (``episodes.jsonl``): transcripts are stored apart, in ``transcripts.jsonl.gz`` (see
    :mod:`~agentgym_budget.eval.transcripts`).

    The trainer's :class:`~agentgym_budget.train.rollout.Episode` records the same kind of run
    for the learner (prompt and action tokens per turn, the return) rather than for the metrics.
    """

    task: int
    attempt: int
    budget: int
    won_turn: int | None
    turns: int
    plan_length: int
    actions: list[str]
    expert_match: list[int]
    admissible: list[int]
    no_effect: list[int]
    plan_left: list[int]
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = field(default=0.0, compare=False)
    transcript: list[dict[str, Any]] | None = field(default=None, compare=False, repr=False)
    final_observation: str | None = field(default=None, compare=False, repr=False)

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
    def from_dict(cls, data: dict[str, Any]) -> EpisodeRecord:
        return cls(**data)


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


def _plan_len(info: dict[str, Any]) -> int:
    plan = info.get("expert_plan")
    return len(plan) if isinstance(plan, (list, tuple)) else UNKNOWN


def _expert_match(action: str, info: dict[str, Any]) -> int:
    choices = info.get("expert_actions")
    if isinstance(choices, (list, tuple)) and choices:
        return int(action in choices)
    expert = info.get("expert_action")
    if isinstance(expert, str) and expert:
        return int(action == expert)
    return UNKNOWN


def _is_no_effect(obs: str) -> bool:
    # With show_budget the budget line is appended/prepended: look at every paragraph.
    return obs.strip() == INVALID_ACTION_FEEDBACK or INVALID_ACTION_FEEDBACK in (p.strip() for p in obs.split("\n\n"))


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
    """
    commands = info.get("admissible_commands") or ()
    experts = info.get("expert_actions")
    expert = experts[0] if isinstance(experts, (list, tuple)) and experts else info.get("expert_action") or None
    return {
        "turn": turn, "observation": observation, "reply": reply.text, "action": reply.action,
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
        self.plan_length = _plan_len(self.info)
        self.actions: list[str] = []
        self.expert_match: list[int] = []
        self.admissible: list[int] = []
        self.no_effect: list[int] = []
        self.plan_left: list[int] = []
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.won_turn: int | None = None
        self.done = False
        self.transcript: list[dict[str, Any]] | None = [] if transcripts else None

    def step(self, reply: PolicyReply) -> None:
        """Play the policy's reply and note what happened."""
        action, before, info_before = reply.action, self.obs, self.info
        commands = info_before.get("admissible_commands") or ()
        self.actions.append(action)
        self.expert_match.append(_expert_match(action, info_before))
        self.admissible.append(int(action in commands) if commands else UNKNOWN)
        self.prompt_tokens = _add(self.prompt_tokens, reply.prompt_tokens)
        self.completion_tokens = _add(self.completion_tokens, reply.completion_tokens)
        self.obs, reward, terminated, truncated, self.info = self.env.step(action)
        self.no_effect.append(int(_is_no_effect(self.obs)))
        self.plan_left.append(_plan_len(self.info))
        if self.info.get("won"):
            self.won_turn = len(self.actions)
        self.done = self.won_turn is not None or terminated or truncated or len(self.actions) >= self.job.budget
        if self.transcript is not None:
            self.transcript.append(transcript_turn(len(self.actions), before, reply, info_before, self.obs,
                                                   float(reward), terminated, truncated, self.info))

    def record(self) -> EpisodeRecord:
        job = self.job
        return EpisodeRecord(
            task=job.task, attempt=job.attempt, budget=job.budget, won_turn=self.won_turn, turns=len(self.actions),
            plan_length=self.plan_length, actions=self.actions, expert_match=self.expert_match,
            admissible=self.admissible, no_effect=self.no_effect, plan_left=self.plan_left,
            prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
            seconds=time.perf_counter() - self.start, transcript=self.transcript,
            final_observation=None if self.transcript is None else self.obs,
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

    def run(self, jobs: Sequence[EpisodeJob], on_record: RecordCallback | None = None) -> list[EpisodeRecord]:
        """The records of ``jobs`` in their order; ``on_record`` is called as each episode ends."""
        pending = deque(enumerate(jobs))
        free = list(self.envs)
        running: list[_EpisodeInFlight] = []
        records: list[EpisodeRecord | None] = [None] * len(jobs)
        while pending or running:
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


def _run_chunk(jobs: list[EpisodeJob]) -> list[EpisodeRecord]:
    return _worker_state["runner"].run(jobs)


class ProcessPoolExecutor:
    """Runs jobs in ``workers`` processes; each process runs them with one :class:`EpisodeRunner`.

    Jobs are sent in chunks of whole tasks (all attempts and budgets of a few consecutive
    tasks), about ``chunks_per_worker`` chunks per process: few enough that messaging costs
    little next to the episodes, enough that processes finish together.  ``start_method`` is
    a ``multiprocessing`` start method (``None``: ``"fork"`` where available — fast, and
    processes inherit envs registered at run time — else the platform default).  With
    ``"fork"`` one env is built in this process before the pool starts, so that module-level
    caches it fills (e.g. loaded game files) are inherited rather than rebuilt per worker.
    """

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
        chunks = _chunks_of_tasks(jobs, self.workers * self.chunks_per_worker)
        context = multiprocessing.get_context(self.start_method)
        if context.get_start_method() == "fork":
            # Build one env here first: forked workers inherit what it loaded and cached at
            # module level (game files, parsed grammars) instead of each loading it again.
            spec.make_env().close()
        done: dict[EpisodeJob, EpisodeRecord] = {}
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=min(self.workers, max(len(chunks), 1)), mp_context=context,
            initializer=_init_worker, initargs=(spec,),
        ) as pool:
            futures = {pool.submit(_run_chunk, chunk): chunk for chunk in chunks}
            for future in concurrent.futures.as_completed(futures):
                for job, record in zip(futures[future], future.result()):
                    done[job] = record
                    if on_record is not None:
                        on_record(record)
        return [done[job] for job in jobs]


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

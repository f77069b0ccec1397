"""``evaluate``: Pass@(K,T) and agent-behaviour metrics for any registered env and any policy.

Two rollout modes, always recorded in the result:

* ``"shortcut"`` — one rollout per (task, attempt) at the largest budget ``max(ts)``; an
  attempt succeeds at budget ``T`` when it was won within its first ``T`` turns.  Exact for
  policies whose actions do not depend on the budget (an episode under budget ``T`` is then
  the first ``T`` turns of the longest one: same env seed, same policy seed).
* ``"per_t"`` — one rollout per (task, attempt, T).  Needed when the agent sees the budget
  (``show_budget=True`` on the env) or the policy reads it (``policy.reads_budget``).
* ``"auto"`` (default) — ``"per_t"`` in those two cases, else ``"shortcut"``.

:func:`evaluate` is two steps, each usable alone (the CLI does, to size its progress bar):
:func:`plan_evaluation` (check the arguments, build the policy, choose the mode, list the
episodes) and :func:`run_evaluation` (run the missing episodes, count successes, assemble the
:class:`PassKTResult`).  Where episodes run is the ``executor``'s business: this module never
imports a scale-out backend (pass ``executor=RayExecutor()`` from ``agentgym_budget.distributed``).

Example:
    >>> import agentgym_budget
    >>> from agentgym_budget.eval import evaluate
    >>> result = evaluate("KeyDoor-Budget-v0", "noisy-expert", ks=(1, 4), ts=(1, 2, 4), tasks=10, attempts=4)
    >>> result.mode, result.value(1, 1), result.value(4, 4) > result.value(1, 2) > 0
    ('shortcut', 0.0, True)
"""

from __future__ import annotations

import inspect
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from agentgym_budget.envs.registration import eval_kwargs_of
from agentgym_budget.eval.episode_log import EpisodeLog, EvaluationInterrupted, run_identity, sigterm_as_interrupt
from agentgym_budget.eval.metrics import DEFAULT_EARLY_TURNS, DEFAULT_PLAN_EDGES, behaviour_metrics
from agentgym_budget.eval.passkt import passkt_grid
from agentgym_budget.eval.results import PassKTResult
from agentgym_budget.eval.rollout import (
    EpisodeJob,
    EpisodeRecord,
    Executor,
    RolloutSpec,
    SerialExecutor,
    make_executor,
    records_for_budget,
    task_seed,
)
from agentgym_budget.eval.transcripts import wants_transcripts
from agentgym_budget.policies.base import POLICIES, Policy, make_policy
from agentgym_budget.text import redact_url
from agentgym_budget.wrappers.budget_spec import MAX_BUDGET

__all__ = ["MAX_BOOTSTRAP_VALUES", "MAX_EPISODES", "EvaluationPlan", "Mode", "RepeatedGamesWarning", "build_jobs",
           "check_scoring", "evaluate", "plan_evaluation", "policy_settings", "resolve_mode", "run_evaluation",
           "shows_budget", "token_usage", "versions"]

Mode = Literal["auto", "shortcut", "per_t"]
_MODES = ("auto", "shortcut", "per_t")

#: The most episodes one evaluation may plan (tasks x attempts x budgets run): the job list and
#: the records live in memory, so a typo such as ``tasks=100000000`` is refused up front.
MAX_EPISODES: int = 1_000_000
#: The most bootstrap values (resamples x tasks x grid cells) one result may draw: ~2 GB of float64.
MAX_BOOTSTRAP_VALUES: int = 250_000_000


def shows_budget(env_id: str, env_kwargs: dict[str, Any]) -> bool:
    """Whether the env made from ``env_id`` with ``env_kwargs`` shows the budget to the agent."""
    if "show_budget" in env_kwargs:
        return bool(env_kwargs["show_budget"])
    return bool(gym.spec(env_id).kwargs.get("show_budget", False))


def resolve_mode(mode: str, show_budget: bool, reads_budget: bool) -> str:
    """The rollout mode to use (see the module docstring); rejects an unsound ``"shortcut"``."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    budget_dependent = show_budget or reads_budget
    if mode == "auto":
        return "per_t" if budget_dependent else "shortcut"
    if mode == "shortcut" and budget_dependent:
        why = "the env shows the budget to the agent" if show_budget else "the policy reads the budget"
        raise ValueError(f"mode='shortcut' is only exact for budget-agnostic policies, but {why}; use 'per_t' or 'auto'")
    return mode


def build_jobs(tasks: int, attempts: int, ts: Sequence[int], mode: str) -> list[EpisodeJob]:
    """The episodes to run: one per (task, attempt) at ``max(ts)``, or one per (task, attempt, T)."""
    budgets = [max(ts)] if mode == "shortcut" else sorted(ts)
    return [EpisodeJob(task, attempt, budget) for task in range(tasks) for attempt in range(attempts) for budget in budgets]


def _check_args(ks: Sequence[int], ts: Sequence[int], tasks: int, attempts: int, seed: int) -> None:
    for name, value in (("tasks", tasks), ("attempts", attempts), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks}")
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    if not ks or not ts:
        raise ValueError("ks and ts must be non-empty")
    if any(k < 1 for k in ks) or any(t < 1 for t in ts):
        raise ValueError(f"every K and T must be >= 1, got ks={list(ks)}, ts={list(ts)}")
    if max(ks) > attempts:
        raise ValueError(f"K={max(ks)} needs at least {max(ks)} attempts per task, got attempts={attempts}")
    if len(set(ks)) != len(ks) or len(set(ts)) != len(ts):
        raise ValueError(f"ks and ts must not repeat values, got ks={list(ks)}, ts={list(ts)}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if max(ts) > MAX_BUDGET:
        raise ValueError(f"every T must be <= {MAX_BUDGET} (the largest turn budget), got T={max(ts)}")
    if tasks * attempts * len(ts) > MAX_EPISODES:
        raise ValueError(f"tasks={tasks} x attempts={attempts} x {len(ts)} budgets may plan up to "
                         f"{tasks * attempts * len(ts):,} episodes, more than the limit of {MAX_EPISODES:,} per "
                         f"evaluation; split the run (seeds or task ranges) or use fewer tasks/attempts")


def check_scoring(plan: EvaluationPlan, bootstrap: int, ci_level: float) -> None:
    """Refuse scoring arguments that would fail (or exhaust memory) only after every episode ran.

    Example:
        >>> import agentgym_budget
        >>> plan = plan_evaluation("KeyDoor-Budget-v0", ks=(1,), ts=(4,), tasks=1000, attempts=1)
        >>> check_scoring(plan, bootstrap=10**6, ci_level=0.95)
        Traceback (most recent call last):
        ...
        ValueError: bootstrap=1000000 x 1000 tasks x 1 cells is 1,000,000,000 resampled values, more than the limit of 250,000,000 (~2 GB); use at most bootstrap=250000
    """
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, (int, np.integer)) or bootstrap < 0:
        raise ValueError(f"bootstrap must be an int >= 0 (0: no resampling), got {bootstrap!r}")
    values = bootstrap * plan.tasks * len(plan.ks) * len(plan.ts)
    if values > MAX_BOOTSTRAP_VALUES:
        raise ValueError(f"bootstrap={bootstrap} x {plan.tasks} tasks x {len(plan.ks) * len(plan.ts)} cells is "
                         f"{values:,} resampled values, more than the limit of {MAX_BOOTSTRAP_VALUES:,} (~2 GB); "
                         f"use at most bootstrap={MAX_BOOTSTRAP_VALUES // (plan.tasks * len(plan.ks) * len(plan.ts))}")
    if not 0.0 < float(ci_level) < 1.0:
        raise ValueError(f"ci_level must be in (0, 1), got {ci_level!r}")


def success_counts(records: Sequence[EpisodeRecord], ts: Sequence[int], tasks: int) -> np.ndarray:
    """``(len(ts), tasks)``: attempts at each task won within each budget."""
    counts = np.zeros((len(ts), tasks), dtype=np.int64)
    for i, t in enumerate(ts):
        for record in records_for_budget(records, t):
            counts[i, record.task] += record.won_within(t)
    return counts


@dataclass(frozen=True)
class EvaluationPlan:
    """What an evaluation will run: the checked arguments, the policy, the mode and the episodes."""

    env_id: str
    policy: str | Policy  # as given: a registered name (workers rebuild it) or a policy object
    policy_obj: Policy  # built here: its name and reads_budget decide the mode and the record
    policy_kwargs: dict[str, Any]
    env_kwargs: dict[str, Any]  # the family's eval_kwargs, then the caller's
    ks: tuple[int, ...]
    ts: tuple[int, ...]
    tasks: int
    attempts: int
    seed: int
    requested_mode: str
    mode: str
    show_budget: bool
    jobs: tuple[EpisodeJob, ...]

    @property
    def policy_name(self) -> str:
        return getattr(self.policy_obj, "name", type(self.policy_obj).__name__)

    @property
    def policy_settings(self) -> dict[str, Any]:
        """All the policy's settings: the given kwargs over the factory's defaults (a policy
        object: its public plain-valued attributes), recorded in the result — less those the
        policy names ``secret_settings`` (an API key is never written anywhere), and with the
        credentials of any URL among them (``http://user:KEY@host``) shown as ``***``."""
        secret = set(getattr(self.policy_obj, "secret_settings", ()))
        return {k: redact_url(v) if isinstance(v, str) else v
                for k, v in policy_settings(self.policy, self.policy_kwargs, self.policy_obj).items()
                if k not in secret}

    @property
    def identity_settings(self) -> dict[str, Any]:
        """The settings that decide the episodes (the run identity a resume must match): all of
        :attr:`policy_settings` but those the policy names ``settings_without_effect`` (how
        replies are fetched — concurrency, timeouts, a cache — not what they are)."""
        free = set(getattr(self.policy_obj, "settings_without_effect", ()))
        return {k: v for k, v in self.policy_settings.items() if k not in free}


def policy_settings(policy: str | Policy, policy_kwargs: dict[str, Any], policy_obj: Policy | None = None
                    ) -> dict[str, Any]:
    """``policy_kwargs`` with the defaults of the registered policy ``policy`` (its factory, and
    the class of ``policy_obj``, the policy built from it) filled in.

    Example:
        >>> import agentgym_budget
        >>> policy_settings("noisy-expert", {})
        {'p': 0.7}
    """
    if isinstance(policy, str):
        # The built policy's class, then the factory: a factory may be a thin (*args, **kwargs) wrapper.
        defaults: dict[str, Any] = {}
        for source in (type(policy_obj) if policy_obj is not None else None, POLICIES.get(policy)):
            try:
                parameters = inspect.signature(source).parameters.values() if source is not None else ()
            except (TypeError, ValueError):
                continue
            # plain values only: a default object (e.g. LLMPolicy's Sampling()) is what the factory replaces
            defaults.update({p.name: p.default for p in parameters
                             if isinstance(p.default, (str, int, float, bool, type(None), tuple))})
        return {**defaults, **policy_kwargs}
    attributes = vars(policy_obj if policy_obj is not None else policy) if hasattr(policy, "__dict__") else {}
    return {k: v for k, v in sorted(attributes.items())
            if not k.startswith("_") and isinstance(v, (str, int, float, bool, type(None)))}


def plan_evaluation(
    env_id: str,
    policy: str | Policy = "noisy-expert",
    ks: Sequence[int] = (1, 2, 4, 8),
    ts: Sequence[int] = (5, 10, 20, 30, 50),
    tasks: int = 50,
    attempts: int = 8,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    policy_kwargs: dict[str, Any] | None = None,
    mode: Mode = "auto",
) -> EvaluationPlan:
    """Check the arguments of :func:`evaluate`, build the policy, resolve the mode, list the episodes.

    Example:
        >>> import agentgym_budget
        >>> plan = plan_evaluation("KeyDoor-Budget-v0", "noisy-expert", ks=(1, 2), ts=(2, 4), tasks=3, attempts=2)
        >>> plan.mode, len(plan.jobs), plan.jobs[0]
        ('shortcut', 6, EpisodeJob(task=0, attempt=0, budget=4))
    """
    ks, ts = tuple(int(k) for k in ks), tuple(int(t) for t in ts)
    _check_args(ks, ts, tasks, attempts, seed)
    env_kwargs = {**eval_kwargs_of(env_id), **(env_kwargs or {})}  # e.g. full expert plans for the metrics
    policy_kwargs = dict(policy_kwargs or {})
    if not isinstance(policy, str) and policy_kwargs:
        raise ValueError("policy_kwargs apply to a policy given by name, not to a policy object")
    policy_obj = _build_policy(policy, policy_kwargs) if isinstance(policy, str) else policy
    show_budget = shows_budget(env_id, env_kwargs)
    resolved = resolve_mode(mode, show_budget, bool(getattr(policy_obj, "reads_budget", True)))
    return EvaluationPlan(
        env_id=env_id, policy=policy, policy_obj=policy_obj, policy_kwargs=policy_kwargs, env_kwargs=env_kwargs,
        ks=ks, ts=ts, tasks=tasks, attempts=attempts, seed=seed, requested_mode=mode, mode=resolved,
        show_budget=show_budget, jobs=tuple(build_jobs(tasks, attempts, ts, resolved)),
    )


def _build_policy(name: str, kwargs: dict[str, Any]) -> Policy:
    try:
        return make_policy(name, **kwargs)
    except TypeError as e:  # an unknown or missing argument: the caller's mistake, said as a ValueError
        accepted = sorted(policy_settings(name, {}))
        raise ValueError(f"policy {name!r} does not take {kwargs}: {e}"
                         + (f" (its options: {', '.join(accepted)})" if accepted else "")) from None


def evaluate(
    env_id: str,
    policy: str | Policy = "noisy-expert",
    ks: Sequence[int] = (1, 2, 4, 8),
    ts: Sequence[int] = (5, 10, 20, 30, 50),
    tasks: int = 50,
    attempts: int = 8,
    seed: int = 0,
    workers: int = 1,
    env_kwargs: dict[str, Any] | None = None,
    policy_kwargs: dict[str, Any] | None = None,
    mode: Mode = "auto",
    *,
    concurrency: int = 1,
    executor: Executor | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    on_record: Callable[[EpisodeRecord], None] | None = None,
    bootstrap: int = 1000,
    ci_level: float = 0.95,
    early_turns: int = DEFAULT_EARLY_TURNS,
    plan_edges: Sequence[int] = DEFAULT_PLAN_EDGES,
    transcripts: bool | None = None,
) -> PassKTResult:
    """Run ``attempts`` attempts at each of ``tasks`` tasks and estimate Pass@(K,T) for ``ks`` x ``ts``.

    Args:
        env_id: a registered env id (``X-Budget-v0`` or any text env id; it is wrapped in a
            :class:`~agentgym_budget.wrappers.TurnBudget` if it is not already).
        policy: a registered policy name (built with ``policy_kwargs``) or a :class:`Policy`.
        ks, ts: the attempts K and budgets T of the grid (every K <= ``attempts``).
        tasks: tasks (env reset seeds derived from ``seed``); attempts: N per task.
        seed: base seed; every episode's seeds derive from (seed, task, attempt).
        workers: processes (1: in this process), when no ``executor`` is given; recorded in
            the result, which does not depend on it.
        env_kwargs: ``gym.make`` kwargs (``show_budget=True`` shows the budget to the agent),
            on top of the env family's ``eval_kwargs`` (ALFWorld: ``expert_plan_horizon=100``,
            full expert plans for the behaviour metrics); all are recorded in the result.
        mode: ``"auto"``, ``"shortcut"`` or ``"per_t"`` (see the module docstring).
        concurrency: episodes in flight per worker; the policy is asked for all their actions
            at once (one batched ``generate`` for a local model, that many requests for a
            served one).  Recorded in the result, which does not depend on it.
        executor: runs the episodes (default: :func:`~agentgym_budget.eval.rollout.make_executor`
            with ``workers``); any object with ``run(spec, jobs, on_record)``, e.g. a
            :class:`~agentgym_budget.distributed.RayExecutor` (extra ``ray``; the caller closes it).
        out: folder to stream ``episodes.jsonl`` into as episodes finish (``None``: no file);
            see :mod:`~agentgym_budget.eval.episode_log`.
        resume: keep the episodes already in ``out`` (from a run with the same settings) and
            run only the missing ones; the result equals an uninterrupted run's.
        overwrite: replace an evaluation already in ``out`` (without it, and without
            ``resume``, an ``out`` holding one is refused rather than truncated).
        on_record: called with each :class:`EpisodeRecord` as it finishes (e.g. a progress bar).
        bootstrap, ci_level: bootstrap resamples over tasks and the CI level per cell.
        early_turns, plan_edges: parameters of the behaviour metrics (see ``eval.metrics``).
        transcripts: keep what the agent saw and said each turn (``EpisodeRecord.transcript``,
            and ``transcripts.jsonl.gz`` in ``out``); ``None``: only for LLM policies (``llm = True``).
    """
    plan = plan_evaluation(env_id, policy, ks, ts, tasks, attempts, seed, env_kwargs, policy_kwargs, mode)
    return run_evaluation(plan, executor=executor, workers=workers, concurrency=concurrency, out=out, resume=resume,
                          overwrite=overwrite, on_record=on_record, bootstrap=bootstrap, ci_level=ci_level,
                          early_turns=early_turns, plan_edges=plan_edges, transcripts=transcripts)


def run_evaluation(
    plan: EvaluationPlan,
    *,
    executor: Executor | None = None,
    workers: int = 1,
    concurrency: int = 1,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    on_record: Callable[[EpisodeRecord], None] | None = None,
    bootstrap: int = 1000,
    ci_level: float = 0.95,
    early_turns: int = DEFAULT_EARLY_TURNS,
    plan_edges: Sequence[int] = DEFAULT_PLAN_EDGES,
    transcripts: bool | None = None,
) -> PassKTResult:
    """Run a :func:`plan_evaluation`'s episodes (those not already in ``out`` on ``resume``) and score them.

    The arguments are :func:`evaluate`'s.
    """
    if resume and out is None:
        raise ValueError("resume=True needs out= (the folder holding episodes.jsonl)")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    check_scoring(plan, bootstrap, ci_level)
    executor = executor if executor is not None else make_executor(workers)
    transcripts = wants_transcripts(plan.policy_obj, transcripts)
    log, saved = _open_log(plan, out, resume, overwrite, transcripts)
    start = time.perf_counter()
    new = _run_missing(plan, _rollout_spec(plan, executor, concurrency, transcripts), executor, log, saved, on_record)
    rollout_seconds = time.perf_counter() - start
    records = [saved[job] if job in saved else new[job] for job in plan.jobs]

    start = time.perf_counter()
    metrics = behaviour_metrics(records, plan.ts, early_turns, plan_edges, n_tasks=plan.tasks, bootstrap=bootstrap,
                                ci_level=ci_level, seed=plan.seed)
    metrics_seconds = time.perf_counter() - start
    successes = success_counts(records, plan.ts, plan.tasks)
    grid = passkt_grid(successes, plan.attempts, plan.ks, plan.ts, bootstrap=bootstrap, ci_level=ci_level,
                       seed=plan.seed)
    config = {"env_kwargs": _jsonable(plan.env_kwargs), "policy_kwargs": _jsonable(plan.policy_settings),
              "workers": workers, "concurrency": concurrency, "executor": type(executor).__name__,
              "bootstrap": bootstrap, "requested_mode": plan.requested_mode, "transcripts": transcripts,
              "versions": versions()}
    timing = {"rollout_seconds": rollout_seconds, "metrics_seconds": metrics_seconds, "episodes": len(records),
              "steps": sum(r.turns for r in records), "resumed_episodes": len(saved),
              "episodes_per_second": len(new) / rollout_seconds if rollout_seconds else 0.0}
    return _assemble_result(plan, records, successes, grid, metrics, config, timing, token_usage(records))


def token_usage(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Prompt and completion tokens over all episodes (``None`` where the policy reported none)."""
    usage: dict[str, Any] = {}
    for key in ("prompt_tokens", "completion_tokens"):
        counts = [getattr(r, key) for r in records if getattr(r, key) is not None]
        usage[key] = sum(counts) if counts else None
    usage["episodes_with_usage"] = sum(r.completion_tokens is not None for r in records)
    return usage


def versions() -> dict[str, str]:
    """The versions of agentgym-budget, gymnasium and Python that ran an evaluation (kept in its result)."""
    import platform

    import agentgym_budget

    return {"agentgym-budget": agentgym_budget.__version__, "gymnasium": gym.__version__,
            "python": platform.python_version()}


def _rollout_spec(plan: EvaluationPlan, executor: Executor, concurrency: int = 1,
                  transcripts: bool = False) -> RolloutSpec:
    # A serial run reuses the policy built by the plan; other executors rebuild a named policy per worker.
    reuse = isinstance(executor, SerialExecutor) or not isinstance(plan.policy, str)
    return RolloutSpec(
        env_id=plan.env_id, policy=plan.policy_obj if reuse else plan.policy, seed=plan.seed,
        max_budget=max(plan.ts), env_kwargs=plan.env_kwargs, policy_kwargs={} if reuse else plan.policy_kwargs,
        concurrency=concurrency, transcripts=transcripts,
    )


def _open_log(plan: EvaluationPlan, out: str | Path | None, resume: bool, overwrite: bool = False,
              transcripts: bool = False
              ) -> tuple[EpisodeLog | None, dict[EpisodeJob, EpisodeRecord]]:
    """The episode log in ``out`` (``None``: no file) and the planned episodes it already holds."""
    if out is None:
        return None, {}
    run = run_identity(plan.env_id, plan.env_kwargs, plan.policy_name, plan.seed, plan.mode,
                       [job.budget for job in plan.jobs], policy_kwargs=plan.identity_settings, ts=plan.ts)
    log, previous = EpisodeLog.open(out, run, resume, overwrite, transcripts)
    wanted = set(plan.jobs)
    return log, {job: r for r in previous if (job := EpisodeJob(r.task, r.attempt, r.budget)) in wanted}


def _run_missing(plan: EvaluationPlan, spec: RolloutSpec, executor: Executor, log: EpisodeLog | None,
                 saved: dict[EpisodeJob, EpisodeRecord], on_record: Callable[[EpisodeRecord], None] | None
                 ) -> dict[EpisodeJob, EpisodeRecord]:
    """Run the planned episodes not in ``saved``, logging each as it finishes; Ctrl-C/SIGTERM leave a resumable log."""
    missing = [job for job in plan.jobs if job not in saved]

    def record_done(record: EpisodeRecord) -> None:
        if log is not None:
            log.write(record)
        if on_record is not None:
            on_record(record)

    if on_record is not None:  # the episodes kept from the log count as done (e.g. for a progress bar)
        for record in saved.values():
            on_record(record)
    try:
        with sigterm_as_interrupt():
            return dict(zip(missing, executor.run(spec, missing, record_done)))
    except KeyboardInterrupt as e:
        if log is None:
            raise
        raise EvaluationInterrupted(
            f"interrupted ({str(e) or 'Ctrl-C'}): {len(saved) + log.written} of {len(plan.jobs)} episodes are saved in "
            f"{log.path}; run the same command with --resume (Python: resume=True) to run only the missing ones"
        ) from None
    finally:
        if log is not None:
            log.close()


def _assemble_result(plan: EvaluationPlan, records: Sequence[EpisodeRecord], successes: np.ndarray, grid: Any,
                     metrics: dict[str, Any], config: dict[str, Any], timing: dict[str, Any],
                     usage: dict[str, Any]) -> PassKTResult:
    plan_lengths = [-1] * plan.tasks
    if metrics["plan_lengths_known"]:
        for record in records:
            plan_lengths[record.task] = record.plan_length
    games = task_games(records, plan.tasks)
    repeated = repeated_games(games)
    if repeated:
        warnings.warn(repeated_games_message(repeated, len(games)), RepeatedGamesWarning, stacklevel=3)
    return PassKTResult(
        env_id=plan.env_id, policy=plan.policy_name, mode=plan.mode, show_budget=plan.show_budget, ks=plan.ks,
        ts=plan.ts, attempts=plan.attempts, seed=plan.seed, successes=successes,
        task_seeds=[task_seed(plan.seed, task) for task in range(plan.tasks)], plan_lengths=plan_lengths, grid=grid,
        metrics=metrics, config=config, timing=timing, usage=usage, task_games=games,
    )


class RepeatedGamesWarning(UserWarning):
    """Several task seeds of an evaluation drew the same game."""


def task_games(records: Sequence[EpisodeRecord], tasks: int) -> list[str]:
    """The game each task's reset drew (``""`` where the env does not say)."""
    games = [""] * tasks
    for record in records:
        games[record.task] = games[record.task] or record.game
    return games


def repeated_games(games: Sequence[str]) -> dict[str, list[int]]:
    """Games drawn by more than one task: ``{game: [tasks]}`` (unknown games ignored)."""
    tasks: dict[str, list[int]] = {}
    for task, game in enumerate(games):
        if game:
            tasks.setdefault(game, []).append(task)
    return {game: ts for game, ts in tasks.items() if len(ts) > 1}


def repeated_games_message(repeated: dict[str, list[int]], n_tasks: int) -> str:
    distinct = n_tasks - sum(len(ts) - 1 for ts in repeated.values())
    examples = "; ".join(f"{game!r}: tasks {ts}" for game, ts in list(repeated.items())[:3])
    return (f"{n_tasks} task seeds drew {distinct} distinct games ({examples}{'; ...' if len(repeated) > 3 else ''}); "
            "statistics weight each game by the seeds that drew it (see docs/evaluation.md, 'Tasks and games')")


def _jsonable(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else repr(v) for k, v in kwargs.items()}

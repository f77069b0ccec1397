"""``evaluate``: Pass@(K,T) and agent-behaviour metrics for any registered env and any policy.

Two rollout modes, always recorded in the result:

* ``"shortcut"`` — one rollout per (task, attempt) at the largest budget ``max(ts)``; an
  attempt succeeds at budget ``T`` when it was won within its first ``T`` turns.  Exact for
  policies whose actions do not depend on the budget (an episode under budget ``T`` is then
  the first ``T`` turns of the longest one: same env seed, same policy seed).  An
  optimisation, not a second budget rule: it reads ``TurnBudget``'s truncation back from the
  longer run (:meth:`~agentgym_budget.episodes.records.EpisodeRecord.won_within` says why that is
  exact), and gives the same results as ``"per_t"`` for such policies.
* ``"per_t"`` — one rollout per (task, attempt, T).  Needed when the agent sees the budget
  (``show_budget=True`` on the env) or the policy reads it (``policy.reads_budget``).
* ``"auto"`` (default) — ``"per_t"`` in those two cases, else ``"shortcut"``.

:func:`evaluate` takes an :class:`~agentgym_budget.eval.config.EvalConfig` (every setting,
checked when it is made), or keyword arguments that build one.  It is two steps, each usable
alone (the CLI does, to size its progress bar): :func:`plan_evaluation` (build the policy,
choose the mode, list the episodes) and :func:`run_evaluation` (run the missing episodes, count
successes, assemble the :class:`PassKTResult`).  Where episodes run is the ``executor``'s business: this module never
imports a scale-out backend (pass ``executor=RayExecutor()`` from ``agentgym_budget.distributed``).

Example:
    >>> import agentgym_budget
    >>> from agentgym_budget.eval import evaluate
    >>> result = evaluate("KeyDoor-Budget-v0", "noisy-expert", ks=(1, 4), ts=(1, 2, 4), tasks=10, attempts=4)
    >>> result.mode, result.value(1, 1), result.value(4, 4) > result.value(1, 2) > 0
    ('shortcut', 0.0, True)
    >>> from agentgym_budget.eval.config import EvalConfig
    >>> config = EvalConfig("KeyDoor-Budget-v0", ks=(1, 4), ts=(1, 2, 4), tasks=10, attempts=4, bootstrap=0)
    >>> evaluate(config).successes.tolist() == result.successes.tolist()
    True
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_budget.envs.registration import env_settings, eval_kwargs_of, plain_defaults
from agentgym_budget.eval.episode_log import EpisodeLog, EvaluationInterrupted, run_identity
from agentgym_budget.eval.config import MODES, EvalConfig
from agentgym_budget.eval.metrics import behaviour_metrics
from agentgym_budget.eval.passkt import passkt_grid
from agentgym_budget.eval.probes import build_probes, run_probes, write_probes
from agentgym_budget.episodes.process_pool import make_executor
from agentgym_budget.episodes.records import EpisodeJob, EpisodeRecord, records_for_budget
from agentgym_budget.eval.cost import attempt_costs
from agentgym_budget.eval.results import PassKTResult
from agentgym_budget.episodes.runner import Executor, RolloutSpec, SerialExecutor
from agentgym_budget.episodes.signals import sigterm_as_interrupt
from agentgym_budget.eval.transcripts import wants_transcripts
from agentgym_budget.episodes.policy import POLICIES, Policy, make_policy, policy_factory
from agentgym_budget.seeds import task_seed
from agentgym_budget.text import redact_url

__all__ = ["EvaluationPlan", "RepeatedGamesWarning", "build_jobs", "build_policy", "evaluate", "plan_evaluation",
           "policy_settings", "resolve_mode", "run_evaluation", "shows_budget", "token_usage", "versions"]


def shows_budget(env_id: str, env_kwargs: dict[str, Any]) -> bool:
    """Whether the env made from ``env_id`` with ``env_kwargs`` shows the budget to the agent."""
    if "show_budget" in env_kwargs:
        return bool(env_kwargs["show_budget"])
    return bool(gym.spec(env_id).kwargs.get("show_budget", False))


def resolve_mode(mode: str, show_budget: bool, reads_budget: bool) -> str:
    """The rollout mode to use (see the module docstring); rejects an unsound ``"shortcut"``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
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


def success_counts(records: Sequence[EpisodeRecord], ts: Sequence[int], tasks: int) -> np.ndarray:
    """``(len(ts), tasks)``: attempts at each task won within each budget."""
    counts = np.zeros((len(ts), tasks), dtype=np.int64)
    for i, t in enumerate(ts):
        for record in records_for_budget(records, t):
            counts[i, record.task] += record.won_within(t)
    return counts


@dataclass(frozen=True)
class EvaluationPlan:
    """What an evaluation will run: its settings (``config``: env, policy, K, T, tasks, attempts, seed), the
    policy built from them, the mode and the episodes."""

    config: EvalConfig
    policy_obj: Policy  # built here: its name and reads_budget decide the mode and the record
    env_kwargs: dict[str, Any]  # the family's eval_kwargs, then the config's
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
                for k, v in policy_settings(self.config.policy, self.config.policy_kwargs, self.policy_obj).items()
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
        factory = policy_factory(policy) if policy in POLICIES else None
        for source in (type(policy_obj) if policy_obj is not None else None, factory):
            defaults.update(plain_defaults(source))  # plain values: LLMPolicy's Sampling() is the factory's to replace
        return {**defaults, **policy_kwargs}
    attributes = vars(policy_obj if policy_obj is not None else policy) if hasattr(policy, "__dict__") else {}
    return {k: v for k, v in sorted(attributes.items())
            if not k.startswith("_") and isinstance(v, (str, int, float, bool, type(None)))}


def plan_evaluation(config: EvalConfig | str | None = None, policy: str | Policy | None = None, **settings: Any
                    ) -> EvaluationPlan:
    """Build the policy of an :class:`EvalConfig` (or of :meth:`EvalConfig.of`'s arguments), resolve
    the mode, list the episodes.

    Example:
        >>> import agentgym_budget
        >>> plan = plan_evaluation("KeyDoor-Budget-v0", "noisy-expert", ks=(1, 2), ts=(2, 4), tasks=3, attempts=2)
        >>> plan.mode, len(plan.jobs), plan.jobs[0]
        ('shortcut', 6, EpisodeJob(task=0, attempt=0, budget=4))
    """
    config = EvalConfig.of(config, policy, **settings)
    env_kwargs = {**eval_kwargs_of(config.env_id), **config.env_kwargs}  # e.g. full expert plans for the metrics
    policy_obj = build_policy(config.policy, config.policy_kwargs) if isinstance(config.policy, str) else config.policy
    show_budget = shows_budget(config.env_id, env_kwargs)
    mode = resolve_mode(config.mode, show_budget, bool(getattr(policy_obj, "reads_budget", True)))
    assert config.attempts is not None  # EvalConfig.__post_init__ resolves None to max(ks)
    return EvaluationPlan(config=config, policy_obj=policy_obj, env_kwargs=env_kwargs, mode=mode,
                          show_budget=show_budget, jobs=tuple(build_jobs(config.tasks, config.attempts, config.ts, mode)))


def build_policy(name: str, kwargs: dict[str, Any]) -> Policy:
    """The registered policy ``name`` built with ``kwargs``; an option it does not take is a one-line
    ``ValueError`` naming the options it does take.

    Example:
        >>> import agentgym_budget
        >>> build_policy("noisy-expert", {"q": 1})
        Traceback (most recent call last):
        ...
        ValueError: policy 'noisy-expert' does not take {'q': 1}: NoisyExpertPolicy.__init__() got an unexpected keyword argument 'q' (its options: p)
    """
    try:
        return make_policy(name, **kwargs)
    except TypeError as e:  # an unknown or missing argument: the caller's mistake, said as a ValueError
        accepted = sorted(policy_settings(name, {}))
        raise ValueError(f"policy {name!r} does not take {kwargs}: {e}"
                         + (f" (its options: {', '.join(accepted)})" if accepted else "")) from None


def evaluate(config: EvalConfig | str | None = None, policy: str | Policy | None = None, *,
             executor: Executor | None = None, on_record: Callable[[EpisodeRecord], None] | None = None,
             **settings: Any) -> PassKTResult:
    """Run ``attempts`` attempts at each of ``tasks`` tasks and estimate Pass@(K,T) for ``ks`` x ``ts``.

    Args:
        config: an :class:`~agentgym_budget.eval.config.EvalConfig` (every setting, documented
            there), or the env id of a new one built from ``policy`` and ``settings``
            (``evaluate("KeyDoor-Budget-v0", "random", ks=(1, 2), tasks=10)``); with a config,
            ``settings`` replace its fields.
        executor: runs the episodes (default: :func:`~agentgym_budget.episodes.process_pool.make_executor`
            with ``config.workers``); any object with ``run(spec, jobs, on_record)``, e.g. a
            :class:`~agentgym_budget.distributed.RayExecutor` (extra ``ray``; the caller closes
            it), which ``backend="ray"`` requires.
        on_record: called with each :class:`EpisodeRecord` as it finishes (e.g. a progress bar).
    """
    return run_evaluation(plan_evaluation(config, policy, **settings), executor=executor, on_record=on_record)


def run_evaluation(plan: EvaluationPlan, *, executor: Executor | None = None,
                   on_record: Callable[[EpisodeRecord], None] | None = None) -> PassKTResult:
    """Run a :func:`plan_evaluation`'s episodes (those not already in ``out`` on ``resume``) and score them.

    The arguments are :func:`evaluate`'s.  With ``probes``, the probe states' outcomes are in
    ``result.metrics["probes"]`` (and in ``out/probes.json``).
    """
    config = plan.config
    if executor is None and config.backend != "local":
        raise ValueError(f"backend={config.backend!r} runs on its executor: pass executor=RayExecutor(...) from "
                         "agentgym_budget.distributed (the command line does)")
    executor = executor if executor is not None else make_executor(config.workers)
    transcripts = wants_transcripts(plan.policy_obj, config.transcripts)
    log, saved = _open_log(plan, config.out, config.resume, config.overwrite, transcripts)
    start = time.perf_counter()
    spec = _rollout_spec(plan, executor, config.concurrency, transcripts, config.env_errors)
    new = _run_missing(plan, spec, executor, log, saved, on_record)
    rollout_seconds = time.perf_counter() - start
    records = [saved[job] if job in saved else new[job] for job in plan.jobs]

    start = time.perf_counter()
    metrics = behaviour_metrics(records, plan.config.ts, config.early_turns, config.plan_edges, n_tasks=plan.config.tasks,
                                bootstrap=config.bootstrap, ci_level=config.ci_level, seed=plan.config.seed)
    metrics_seconds = time.perf_counter() - start
    successes = success_counts(records, plan.config.ts, plan.config.tasks)
    assert plan.config.attempts is not None  # EvalConfig.__post_init__ resolves None to max(ks)
    grid = passkt_grid(successes, plan.config.attempts, plan.config.ks, plan.config.ts, bootstrap=config.bootstrap,
                       ci_level=config.ci_level, seed=plan.config.seed)
    recorded = {"env_kwargs": _jsonable(plan.env_kwargs),
                "env_settings": _jsonable(env_settings(plan.config.env_id, plan.env_kwargs)),  # defaults too
                "policy_kwargs": _jsonable(plan.policy_settings),
                "workers": config.workers, "concurrency": config.concurrency, "executor": type(executor).__name__,
                "bootstrap": config.bootstrap, "requested_mode": config.mode, "transcripts": transcripts,
                "versions": versions()}
    timing = {"rollout_seconds": rollout_seconds, "metrics_seconds": metrics_seconds, "episodes": len(records),
              "steps": sum(r.turns for r in records), "resumed_episodes": len(saved),
              "episodes_per_second": len(new) / rollout_seconds if rollout_seconds else 0.0,
              **fault_counts(records)}
    result = _assemble_result(plan, records, successes, grid, metrics, recorded, timing, token_usage(records))
    if config.probes:
        _measure_probes(plan, result)
    return result


def fault_counts(records: list[EpisodeRecord]) -> dict[str, int]:
    """``failed_episodes`` (the env raised in the replay too) and ``env_failures`` (every raise), when any.

    Example:
        >>> from agentgym_budget.episodes.records import EpisodeRecord
        >>> ok = EpisodeRecord(0, 0, 4, None, 0, -1, [], [], [], [], [])
        >>> fault_counts([ok]), fault_counts([ok, EpisodeRecord(1, 0, 4, None, 0, -1, [], [], [], [], [],
        ...                                                      env_failures=2, failed=True, error="reset: OSError")])
        ({}, {'failed_episodes': 1, 'env_failures': 2})
    """
    failures = sum(r.env_failures for r in records)
    if not failures:
        return {}  # a run without faults writes what it always did
    return {"failed_episodes": sum(r.failed for r in records), "env_failures": failures}


def _measure_probes(plan: EvaluationPlan, result: PassKTResult) -> None:
    """``config.probes`` probe states: outcomes into ``result.metrics["probes"]`` (and ``out/probes.json``)."""
    config = plan.config
    probes = build_probes(plan.config.env_id, config.probes, plan.config.seed, plan.env_kwargs)
    # the plan's policy (each probe resets it), not a second one built from the name
    outcome = run_probes(plan.config.env_id, plan.policy_obj, probes, plan.env_kwargs, seed=plan.config.seed,
                         horizon=config.probe_horizon, bootstrap=config.bootstrap, ci_level=config.ci_level)
    result.metrics["probes"] = {key: value for key, value in outcome.items() if key != "probes"}
    if config.out is not None:
        write_probes(Path(config.out), plan.config.env_id, plan.policy_name, outcome)


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
                  transcripts: bool = False, env_errors: str = "replay") -> RolloutSpec:
    # A serial run reuses the policy built by the plan; other executors rebuild a named policy per worker.
    reuse = isinstance(executor, SerialExecutor) or not isinstance(plan.config.policy, str)
    return RolloutSpec(
        env_id=plan.config.env_id, policy=plan.policy_obj if reuse else plan.config.policy, seed=plan.config.seed,
        max_budget=max(plan.config.ts), env_kwargs=plan.env_kwargs, policy_kwargs={} if reuse else plan.config.policy_kwargs,
        concurrency=concurrency, transcripts=transcripts, env_errors=env_errors,
    )


def _open_log(plan: EvaluationPlan, out: str | Path | None, resume: bool, overwrite: bool = False,
              transcripts: bool = False
              ) -> tuple[EpisodeLog | None, dict[EpisodeJob, EpisodeRecord]]:
    """The episode log in ``out`` (``None``: no file) and the planned episodes it already holds."""
    if out is None:
        return None, {}
    run = run_identity(plan.config.env_id, plan.env_kwargs, plan.policy_name, plan.config.seed, plan.mode,
                       [job.budget for job in plan.jobs], policy_kwargs=plan.identity_settings, ts=plan.config.ts)
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
    assert plan.config.attempts is not None  # EvalConfig.__post_init__ resolves None to max(ks)
    plan_lengths = [-1] * plan.config.tasks
    if metrics["plan_lengths_known"]:
        for record in records:
            plan_lengths[record.task] = record.plan_length
    games = task_games(records, plan.config.tasks)
    repeated = repeated_games(games)
    if repeated:
        warnings.warn(repeated_games_message(repeated, len(games)), RepeatedGamesWarning, stacklevel=3)
    return PassKTResult(
        env_id=plan.config.env_id, policy=plan.policy_name, mode=plan.mode, show_budget=plan.show_budget, ks=plan.config.ks,
        ts=plan.config.ts, attempts=plan.config.attempts, seed=plan.config.seed, successes=successes,
        task_seeds=[task_seed(plan.config.seed, task) for task in range(plan.config.tasks)], plan_lengths=plan_lengths, grid=grid,
        metrics=metrics, config=config, timing=timing, usage=usage, task_games=games,
        costs=attempt_costs(records, plan.config.ts, plan.config.tasks, plan.config.attempts),
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

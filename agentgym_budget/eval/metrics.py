"""Agent-behaviour metrics computed from the evaluation's own episode records (no extra runs).

Every metric is defined once, in ``docs/evaluation.md`` ("Agent-behaviour metrics"); this
module implements those definitions.  In short: ``a_t`` is the action of turn ``t``, ``d_t``
the expert's remaining plan length after it (``d_0`` the task's *plan length*; -1 unknown),
``effect_t`` the env's ``info["action_effect"]``.  A turn is an **error** of one kind
(:data:`ERROR_KINDS`, first that applies): ``invalid``, ``no_effect``, ``loss`` (it lost the
game), ``detour`` (``d_t > d_{t-1}``, or ``effect_t == "regress"`` without plan lengths) or
``stall`` (``d_t == d_{t-1}``: a valid action that did not shorten the plan); a turn whose
action is the expert's is never an error.  A turn is **on plan** when its action is the
expert's, it shortens the plan, or it wins; recovering from an error at ``t`` takes ``t' - t``
turns to the next on-plan turn ``t'``.

Every scalar metric is also a ratio of per-task sums (:func:`task_terms`), which gives its
bootstrap CI over tasks here and the paired comparison of two results in
:mod:`agentgym_budget.eval.compare`.

Example:
    >>> from agentgym_budget.episodes.records import EpisodeRecord
    >>> r = EpisodeRecord(task=0, attempt=0, budget=5, won_turn=3, turns=3, plan_length=2,
    ...                   actions=["a", "x", "b"], expert_match=[1, 0, 1], admissible=[1, 0, 1],
    ...                   no_effect=[0, 0, 0], plan_left=[1, 1, 0], effect=["progress", "invalid", "progress"])
    >>> decision_quality([r], early_turns=1)
    {'overall': 0.6666666666666666, 'early': 1.0, 'late': 0.5, 'turns': 3, 'early_turns': 1, 'late_turns': 2}
    >>> error_kinds(r), error_recovery([r])["mean_turns_to_recover"]
    ([(2, 'invalid')], 1.0)
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentgym_budget.episodes.records import UNKNOWN, EpisodeRecord, records_for_budget
from agentgym_budget.eval.stats import ratio, ratio_bootstrap
from agentgym_budget.text import is_invalid

__all__ = [
    "DEFAULT_EARLY_TURNS",
    "DEFAULT_PLAN_EDGES",
    "behaviour_metrics",
    "decision_quality",
    "ERROR_KINDS",
    "error_kinds",
    "error_recovery",
    "error_turns",
    "metric_cis",
    "task_terms",
    "only_one_step_plans",
    "resilience",
]

#: Turns ``1..DEFAULT_EARLY_TURNS`` are "early" for decision quality.
DEFAULT_EARLY_TURNS = 5
#: Upper edges of the plan-length buckets (``1-5, 6-10, 11-15, 16-20, 21-30, >30``).
DEFAULT_PLAN_EDGES: tuple[int, ...] = (5, 10, 15, 20, 30)


def _rate(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def decision_quality(records: Sequence[EpisodeRecord], early_turns: int = DEFAULT_EARLY_TURNS) -> dict[str, Any]:
    """Expert-agreement rate overall, on early and on late turns (see the module docstring)."""
    hits = {"early": 0, "late": 0}
    known = {"early": 0, "late": 0}
    for record in records:  # list.count keeps this pass cheap next to the rollouts
        for part, matches in (("early", record.expert_match[:early_turns]), ("late", record.expert_match[early_turns:])):
            hits[part] += matches.count(1)
            known[part] += len(matches) - matches.count(UNKNOWN)
    return {
        "overall": _rate(hits["early"] + hits["late"], known["early"] + known["late"]),
        "early": _rate(hits["early"], known["early"]),
        "late": _rate(hits["late"], known["late"]),
        "turns": known["early"] + known["late"],
        "early_turns": known["early"],
        "late_turns": known["late"],
    }


#: Error kinds, in the order they are tested (a turn has at most one).
ERROR_KINDS: tuple[str, ...] = ("invalid", "no_effect", "loss", "detour", "stall")


def _turn_kinds(record: EpisodeRecord) -> tuple[list[tuple[int, str]], list[int]]:
    """The error turns of ``record`` with their kind, and its on-plan turns (see the module docstring)."""
    before = [record.plan_length, *record.plan_left[:-1]]
    effects = record.effect or [""] * record.turns  # records from before info["action_effect"]
    errors: list[tuple[int, str]] = []
    on_plan: list[int] = []
    for t, (match, valid, no_effect, prev, plan, effect) in enumerate(
        zip(record.expert_match, record.admissible, record.no_effect, before, record.plan_left, effects), start=1
    ):
        known = prev >= 0 and plan >= 0  # UNKNOWN is -1
        if match == 1 or record.won_turn == t or (known and plan < prev):
            on_plan.append(t)
            continue
        if is_invalid(valid, effect):
            errors.append((t, "invalid"))
        elif effect == "no_effect" or (not effect and no_effect == 1):
            errors.append((t, "no_effect"))
        elif record.lost_turn == t:
            errors.append((t, "loss"))
        elif (known and plan > prev) or (not known and effect == "regress"):
            errors.append((t, "detour"))
        elif known:  # plan == prev: a valid action that did not bring the goal closer
            errors.append((t, "stall"))
    return errors, on_plan


def error_kinds(record: EpisodeRecord) -> list[tuple[int, str]]:
    """``(turn, kind)`` of every error turn of ``record`` (1-based turns, kinds in :data:`ERROR_KINDS`)."""
    return _turn_kinds(record)[0]


def on_plan_turns(record: EpisodeRecord) -> list[int]:
    """The (1-based) turns of ``record`` that are on a shortest plan (what ends a recovery)."""
    return _turn_kinds(record)[1]


def error_turns(record: EpisodeRecord) -> list[int]:
    """The (1-based) turns of ``record`` that are errors."""
    return [t for t, _ in error_kinds(record)]


def _recovery_times(errors: Sequence[tuple[int, str]], on_plan: Sequence[int]) -> list[int]:
    """For each error turn ``t`` with a later on-plan turn ``t'``: ``t' - t``."""
    times = []
    for t, _ in errors:
        index = bisect.bisect_right(on_plan, t)  # first on-plan turn after t
        if index < len(on_plan):
            times.append(on_plan[index] - t)
    return times


def error_recovery(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Errors by kind, success after errors and turns to get back on plan (see the module docstring)."""
    with_error = without_error = won_with_error = won_without_error = 0
    recover_times: list[int] = []
    by_kind = dict.fromkeys(ERROR_KINDS, 0)
    n_errors = 0
    for record in records:
        errors, on_plan = _turn_kinds(record)
        if not errors:
            without_error += 1
            won_without_error += record.won
            continue
        with_error += 1
        won_with_error += record.won
        n_errors += len(errors)
        for _, kind in errors:
            by_kind[kind] += 1
        recover_times += _recovery_times(errors, on_plan)
    return {
        "episodes_with_error": with_error,
        "success_after_error": _rate(won_with_error, with_error),
        "success_without_error": _rate(won_without_error, without_error),
        "errors": n_errors,
        "errors_per_episode": _rate(n_errors, len(records)),
        "errors_by_kind": by_kind,
        "recovered_fraction": _rate(len(recover_times), n_errors),
        "mean_turns_to_recover": float(np.mean(recover_times)) if recover_times else None,
    }


def _bucket_label(plan_length: int, edges: Sequence[int]) -> str:
    if plan_length == UNKNOWN:
        return "unknown"
    low = 0
    for edge in edges:
        if plan_length <= edge:
            return f"{low + 1}-{edge}" if low + 1 != edge else str(edge)
        low = edge
    return f">{edges[-1]}"


def resilience(
    records: Sequence[EpisodeRecord], ts: Sequence[int], plan_edges: Sequence[int] = DEFAULT_PLAN_EDGES
) -> dict[str, Any]:
    """Success by plan-length bucket and budget, and where in the budget successes happen."""
    if list(plan_edges) != sorted(set(plan_edges)) or not plan_edges:
        raise ValueError(f"plan_edges must be increasing and non-empty, got {plan_edges}")
    order = [_bucket_label(e, plan_edges) for e in [*plan_edges, plan_edges[-1] + 1]] + ["unknown"]
    index_of = {label: i for i, label in enumerate(order)}
    label_index = {length: index_of[_bucket_label(length, plan_edges)] for length in {r.plan_length for r in records}}
    budgets = sorted({r.budget for r in records})
    episodes = np.zeros((len(order), len(ts)), dtype=np.int64)
    wins = np.zeros((len(order), len(ts)), dtype=np.int64)
    # The records used at T only change when T passes one of the budgets run: select them once per budget.
    selected: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for j, t in enumerate(ts):
        budget = next((b for b in budgets if b >= t), None)
        if budget is None:
            continue
        if budget not in selected:
            chosen = records_for_budget(records, t)
            selected[budget] = (
                np.array([label_index[r.plan_length] for r in chosen], dtype=np.int64),
                np.array([np.inf if r.won_turn is None else r.won_turn for r in chosen], dtype=float),
            )
        labels, won_turns = selected[budget]
        episodes[:, j] = np.bincount(labels, minlength=len(order))
        wins[:, j] = np.bincount(labels, weights=won_turns <= t, minlength=len(order)).astype(np.int64)
    by_plan_length = {
        label: {
            "episodes": int(episodes[i].max()),
            "success": {str(t): _rate(int(wins[i, j]), int(episodes[i, j])) for j, t in enumerate(ts)},
        }
        for i, label in enumerate(order)
        if episodes[i].any()
    }
    longest = max((r.budget for r in records), default=0)
    won = [(r.won_turn, r.plan_length) for r in records if r.budget == longest and r.won_turn is not None]
    counts = np.bincount([_quarter(turn, longest) for turn, _ in won], minlength=4)
    overheads = [turn / plan_length for turn, plan_length in won if plan_length > 0]
    return {
        "by_plan_length": by_plan_length,
        "success_turn_fraction": {
            "bins": list(_QUARTERS),
            "counts": [int(c) for c in counts],
            "fractions": [float(c) / len(won) if won else None for c in counts],
            "budget": longest,
        },
        "mean_turns_per_plan_step": float(np.mean(overheads)) if overheads else None,
    }


def _quarter(won_turn: int, budget: int) -> int:
    """0..3: the quarter ``(q/4, (q+1)/4]`` of the budget that ``won_turn`` falls in (turn 5 of 20 is in the first)."""
    return min(max((4 * won_turn + budget - 1) // budget - 1, 0), 3)


def only_one_step_plans(records: Sequence[EpisodeRecord]) -> bool:
    """Whether no record ever saw an expert plan longer than one action.

    Some envs report only the expert's next action as its plan (upstream ALFWorld's
    ``expert_plan``, our ALFWorld with ``expert_plan_horizon=1``): a length of 1 then says
    nothing about the remaining plan.  A real full plan is longer than one action at the
    start of at least one task, so "never longer than 1" identifies one-step plans.
    """
    return all(r.plan_length <= 1 and max(r.plan_left, default=UNKNOWN) <= 1 for r in records)


def without_plans(record: EpisodeRecord) -> EpisodeRecord:
    """``record`` with its plan lengths marked unknown."""
    return dataclasses.replace(record, plan_length=UNKNOWN, plan_left=[UNKNOWN] * record.turns)


_QUARTERS = ("0-25%", "25-50%", "50-75%", "75-100%")


def task_terms(
    records: Sequence[EpisodeRecord],
    ts: Sequence[int],
    n_tasks: int | None = None,
    early_turns: int = DEFAULT_EARLY_TURNS,
    plan_edges: Sequence[int] = DEFAULT_PLAN_EDGES,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every scalar behaviour metric as per-task ``(numerators, denominators)``, shape ``(n_tasks,)`` each.

    The metric is ``sum(num) / sum(den)`` (the value :func:`behaviour_metrics` reports); the
    per-task split is what the bootstrap over tasks resamples.  Names: ``decision_quality.{overall,
    early,late}``, ``errors_per_episode`` and ``errors_per_episode.<kind>``,
    ``success_after_error``, ``success_without_error``, ``recovered_fraction``,
    ``mean_turns_to_recover``, ``mean_turns_per_plan_step``, ``success_turn_fraction.<quarter>``,
    ``success_by_plan_length.<bucket>.T<t>``.
    """
    n = n_tasks if n_tasks is not None else max((r.task for r in records), default=-1) + 1
    terms: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def add(name: str, task: int, num: float, den: float) -> None:
        if name not in terms:
            terms[name] = (np.zeros(n), np.zeros(n))
        terms[name][0][task] += num
        terms[name][1][task] += den

    longest = max((r.budget for r in records), default=0)
    for r in (r for r in records if r.budget == longest):
        for part, matches in (("early", r.expert_match[:early_turns]), ("late", r.expert_match[early_turns:])):
            known, hits = len(matches) - matches.count(UNKNOWN), matches.count(1)
            add(f"decision_quality.{part}", r.task, hits, known)
            add("decision_quality.overall", r.task, hits, known)
        errors, on_plan = _turn_kinds(r)
        add("errors_per_episode", r.task, len(errors), 1)
        for kind in ERROR_KINDS:
            add(f"errors_per_episode.{kind}", r.task, sum(k == kind for _, k in errors), 1)
        add("success_after_error" if errors else "success_without_error", r.task, r.won, 1)
        add("success_without_error" if errors else "success_after_error", r.task, 0, 0)
        times = _recovery_times(errors, on_plan)
        add("recovered_fraction", r.task, len(times), len(errors))
        add("mean_turns_to_recover", r.task, sum(times), len(times))
        won_turn = r.won_turn
        if won_turn is not None and r.plan_length > 0:
            add("mean_turns_per_plan_step", r.task, won_turn / r.plan_length, 1)
        else:
            add("mean_turns_per_plan_step", r.task, 0, 0)
        quarter = None if won_turn is None else _quarter(won_turn, r.budget)
        for q, label in enumerate(_QUARTERS):
            add(f"success_turn_fraction.{label}", r.task, int(quarter == q), int(won_turn is not None))
    order = [_bucket_label(e, plan_edges) for e in [*plan_edges, plan_edges[-1] + 1]] + ["unknown"]
    chosen = {t: records_for_budget(records, t) for t in ts}
    present = {_bucket_label(r.plan_length, plan_edges) for t in ts for r in chosen[t]}
    for label in (label for label in order if label in present):  # bucket by bucket, budgets in order
        for t in ts:
            for r in chosen[t]:
                if _bucket_label(r.plan_length, plan_edges) == label:
                    add(f"success_by_plan_length.{label}.T{t}", r.task, r.won_within(t), 1)
    return terms


def metric_cis(terms: dict[str, tuple[np.ndarray, np.ndarray]], *, resamples: int = 1000, level: float = 0.95,
               seed: int = 0) -> dict[str, dict[str, float | None]]:
    """Each metric's value and percentile bootstrap CI over tasks: ``{name: {value, ci_low, ci_high}}``."""
    out = {}
    for name, (num, den) in terms.items():
        low, high = ratio_bootstrap(num, den, resamples=resamples, level=level, seed=seed)
        out[name] = {"value": ratio(num, den), "ci_low": low, "ci_high": high}
    return out


def behaviour_metrics(
    records: Sequence[EpisodeRecord],
    ts: Sequence[int],
    early_turns: int = DEFAULT_EARLY_TURNS,
    plan_edges: Sequence[int] = DEFAULT_PLAN_EDGES,
    *,
    n_tasks: int | None = None,
    bootstrap: int = 1000,
    ci_level: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """All agent-behaviour metrics: ``decision_quality``, ``error_recovery``, ``resilience``.

    When the env only ever reports one-step plans (see :func:`only_one_step_plans`), plan
    lengths are treated as unknown (no detours or stalls, plan-length bucket ``"unknown"``)
    and ``plan_lengths_known`` is ``False``.  ``per_task`` holds every scalar metric's
    per-task terms (:func:`task_terms`) and ``ci`` its bootstrap CI over tasks.
    """
    plans_known = not only_one_step_plans(records)
    if not plans_known:
        records = [without_plans(r) for r in records]
    longest = max((r.budget for r in records), default=0)
    at_longest = [r for r in records if r.budget == longest]
    terms = task_terms(records, ts, n_tasks, early_turns, plan_edges)
    return {
        "early_turns": early_turns,
        "budget": longest,
        "plan_lengths_known": plans_known,
        "decision_quality": decision_quality(at_longest, early_turns),
        "error_recovery": error_recovery(at_longest),
        "resilience": resilience(records, ts, plan_edges),
        "per_task": {name: {"num": num.tolist(), "den": den.tolist()} for name, (num, den) in terms.items()},
        "ci": metric_cis(terms, resamples=bootstrap, level=ci_level, seed=seed),
    }

"""Agent-behaviour metrics computed from the evaluation's own episode records (no extra runs).

Notation for one episode: turns ``t = 1..n``; ``a_t`` the action of turn ``t``, chosen in the
state ``s_{t-1}`` (``s_0`` = the reset state); ``d_t`` the expert's remaining plan length
after turn ``t`` (``d_0`` = the task's *plan length*, ``len(info["expert_plan"])`` at reset).
Envs that only report the expert's next action as its plan (a plan never longer than one
action, see :func:`only_one_step_plans`) give no plan lengths: detours are then not
detected and every task is in the ``"unknown"`` plan-length bucket.

**Decision quality** — the fraction of turns, over all turns where the env knows the expert's
action in ``s_{t-1}``, at which ``a_t`` is that action (or one of ``info["expert_actions"]``).
Reported overall, for *early* turns (``t <= early_turns``) and for *late* turns
(``t > early_turns``), with the number of turns behind each figure.

**Error** — turn ``t`` is an error if any of:
(a) *invalid*: ``a_t`` is not in ``s_{t-1}``'s admissible commands;
(b) *no effect*: the env answered ``"Nothing happens."``;
(c) *detour*: ``d_t > d_{t-1}`` (both known) — the action moved the goal further away.

**Error recovery** —
``success_after_error``: among episodes with at least one error, the fraction won (within
their budget); ``success_without_error`` is the same for error-free episodes.
``mean_turns_to_recover``: for an error at turn ``t``, the agent is back on plan at the first
later turn ``t' > t`` whose action matches the expert's; the recovery time is ``t' - t``
(1 = the very next action is the expert's).  The mean is over recovered errors;
``recovered_fraction`` is the share of errors followed by such a turn within the episode.

**Long-horizon resilience** —
``by_plan_length``: tasks are bucketed by plan length ``d_0`` (bucket edges ``plan_edges``;
``"unknown"`` without an expert plan) and, for each budget ``T``, the success rate is the
fraction of the bucket's episodes won within ``T`` turns.
``success_turn_fraction``: over won episodes, the histogram of ``won_turn / budget`` in
quarters (0-25 %, 25-50 %, 50-75 %, 75-100 % of the budget spent when the task was won), and
``mean_turns_per_plan_step``, the mean of ``won_turn / d_0`` (1.0 = as short as the expert).

Which records: decision quality, errors and the success-turn histogram use the episodes run
at the largest budget; the success rate at budget ``T`` uses, for each task and attempt, the
record with the smallest budget ``>= T`` (in the shortcut mode that is the largest-budget
rollout, in the per-budget mode the rollout at ``T`` itself).

Example:
    >>> from agentgym_budget.eval.rollout import EpisodeRecord
    >>> r = EpisodeRecord(task=0, attempt=0, budget=5, won_turn=3, turns=3, plan_length=2,
    ...                   actions=["a", "x", "b"], expert_match=[1, 0, 1], admissible=[1, 0, 1],
    ...                   no_effect=[0, 1, 0], plan_left=[1, 1, 0])
    >>> decision_quality([r], early_turns=1)
    {'overall': 0.6666666666666666, 'early': 1.0, 'late': 0.5, 'turns': 3, 'early_turns': 1, 'late_turns': 2}
    >>> error_recovery([r])["mean_turns_to_recover"]
    1.0
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentgym_budget.eval.rollout import UNKNOWN, EpisodeRecord, records_for_budget

__all__ = [
    "DEFAULT_EARLY_TURNS",
    "DEFAULT_PLAN_EDGES",
    "behaviour_metrics",
    "decision_quality",
    "error_recovery",
    "error_turns",
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


def error_turns(record: EpisodeRecord) -> list[int]:
    """The (1-based) turns of ``record`` that are errors: invalid, no-effect or detour."""
    before = [record.plan_length, *record.plan_left[:-1]]
    return [
        t
        for t, (valid, no_effect, prev, plan) in enumerate(
            zip(record.admissible, record.no_effect, before, record.plan_left), start=1
        )
        # plan > prev >= 0: a detour between two known plan lengths (UNKNOWN is -1)
        if valid == 0 or no_effect == 1 or plan > prev >= 0
    ]


def error_recovery(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Success after errors and turns to get back on plan (see the module docstring)."""
    with_error = without_error = won_with_error = won_without_error = 0
    recover_times: list[int] = []
    n_errors = 0
    for record in records:
        errors = error_turns(record)
        if not errors:
            without_error += 1
            won_without_error += record.won
            continue
        with_error += 1
        won_with_error += record.won
        n_errors += len(errors)
        matching = [t for t, m in enumerate(record.expert_match, start=1) if m == 1]
        for t in errors:
            index = bisect.bisect_right(matching, t)  # first expert-matching turn after t
            if index < len(matching):
                recover_times.append(matching[index] - t)
    return {
        "episodes_with_error": with_error,
        "success_after_error": _rate(won_with_error, with_error),
        "success_without_error": _rate(won_without_error, without_error),
        "errors": n_errors,
        "errors_per_episode": _rate(n_errors, len(records)),
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
    won = [r for r in records if r.budget == longest and r.won]
    fractions = np.array([r.won_turn / r.budget for r in won], dtype=float)
    counts = np.histogram(fractions, bins=[0.0, 0.25, 0.5, 0.75, 1.0])[0] if len(won) else np.zeros(4, int)
    overheads = [r.won_turn / r.plan_length for r in won if r.plan_length > 0]
    return {
        "by_plan_length": by_plan_length,
        "success_turn_fraction": {
            "bins": ["0-25%", "25-50%", "50-75%", "75-100%"],
            "counts": [int(c) for c in counts],
            "fractions": [float(c) / len(won) if won else None for c in counts],
            "budget": longest,
        },
        "mean_turns_per_plan_step": float(np.mean(overheads)) if overheads else None,
    }


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


def behaviour_metrics(
    records: Sequence[EpisodeRecord],
    ts: Sequence[int],
    early_turns: int = DEFAULT_EARLY_TURNS,
    plan_edges: Sequence[int] = DEFAULT_PLAN_EDGES,
) -> dict[str, Any]:
    """All agent-behaviour metrics: ``decision_quality``, ``error_recovery``, ``resilience``.

    When the env only ever reports one-step plans (see :func:`only_one_step_plans`), plan
    lengths are treated as unknown (no detours, plan-length bucket ``"unknown"``) and
    ``plan_lengths_known`` is ``False``.
    """
    plans_known = not only_one_step_plans(records)
    if not plans_known:
        records = [without_plans(r) for r in records]
    longest = max((r.budget for r in records), default=0)
    at_longest = [r for r in records if r.budget == longest]
    return {
        "early_turns": early_turns,
        "budget": longest,
        "plan_lengths_known": plans_known,
        "decision_quality": decision_quality(at_longest, early_turns),
        "error_recovery": error_recovery(at_longest),
        "resilience": resilience(records, ts, plan_edges),
    }

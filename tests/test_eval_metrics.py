"""Agent-behaviour metrics on hand-built trajectories with known answers."""

from __future__ import annotations

import pytest

from agentgym_budget.eval.metrics import (
    behaviour_metrics,
    decision_quality,
    error_kinds,
    error_recovery,
    error_turns,
    only_one_step_plans,
    resilience,
    task_terms,
)
from agentgym_budget.episodes.records import EpisodeRecord


def episode(
    match: list[int],
    *,
    won_turn: int | None = None,
    admissible: list[int] | None = None,
    no_effect: list[int] | None = None,
    plan_left: list[int] | None = None,
    plan_length: int = -1,
    budget: int = 10,
    task: int = 0,
    attempt: int = 0,
    effect: list[str] | None = None,
    lost_turn: int | None = None,
) -> EpisodeRecord:
    n = len(match)
    return EpisodeRecord(
        task=task, attempt=attempt, budget=budget, won_turn=won_turn, turns=n, plan_length=plan_length,
        actions=[f"a{t}" for t in range(n)], expert_match=match, admissible=admissible or [1] * n,
        no_effect=no_effect or [0] * n, plan_left=plan_left or [-1] * n, effect=effect or [],
        lost_turn=lost_turn,
    )


def test_decision_quality_splits_early_and_late_turns_and_skips_unknown_experts() -> None:
    records = [episode([1, 0, 1, 1]), episode([0, -1, 1])]
    dq = decision_quality(records, early_turns=2)
    # known turns: ep1 t1..t4 = 1,0,1,1 ; ep2 t1=0, t3=1 (t2 unknown)
    assert dq["turns"] == 6 and dq["overall"] == pytest.approx(4 / 6)
    assert dq["early_turns"] == 3 and dq["early"] == pytest.approx(1 / 3)  # t<=2: 1,0,0
    assert dq["late_turns"] == 3 and dq["late"] == pytest.approx(1.0)  # t>2: 1,1,1


def test_decision_quality_without_expert_is_none() -> None:
    dq = decision_quality([episode([-1, -1])])
    assert dq["overall"] is None and dq["turns"] == 0


def test_error_kinds_invalid_no_effect_and_detour() -> None:
    record = episode(
        [1, 0, 0, 0, 1, 1],
        admissible=[1, 0, 1, 1, 1, 1],  # turn 2 invalid
        no_effect=[0, 1, 1, 0, 0, 0],  # turns 2 and 3 "Nothing happens."
        plan_left=[4, 4, 4, 5, 4, 3],  # turn 4 is a detour (4 -> 5); turn 1 made progress (5 -> 4)
        plan_length=5,
    )
    assert error_turns(record) == [2, 3, 4]


def test_unknown_plan_lengths_never_count_as_detours() -> None:
    assert error_turns(episode([1, 1], plan_left=[-1, 7], plan_length=-1)) == []
    assert error_turns(episode([1, 1], plan_left=[-1, 3], plan_length=2)) == []


def test_error_recovery_rates_and_turns_to_recover() -> None:
    # Episode A: errors at 2 and 3, next expert-matching turn is 5 -> recover in 3 and 2 turns; won.
    a = episode([1, 0, 0, 0, 1], admissible=[1, 0, 0, 1, 1], won_turn=5)
    # Episode B: error at turn 2, never matches the expert afterwards; lost.
    b = episode([1, 0, 0], no_effect=[0, 1, 0])
    # Episode C: no errors, won.  Episode D: no errors, not won.
    c = episode([1, 1], won_turn=2)
    d = episode([1, 0, 1])
    er = error_recovery([a, b, c, d])
    assert er["episodes_with_error"] == 2
    assert er["success_after_error"] == pytest.approx(0.5)
    assert er["success_without_error"] == pytest.approx(0.5)
    assert er["errors"] == 3 and er["errors_per_episode"] == pytest.approx(3 / 4)
    assert er["recovered_fraction"] == pytest.approx(2 / 3)
    assert er["mean_turns_to_recover"] == pytest.approx(2.5)


def test_error_recovery_without_errors() -> None:
    er = error_recovery([episode([1, 1], won_turn=2)])
    assert er["success_after_error"] is None and er["mean_turns_to_recover"] is None
    assert er["success_without_error"] == 1.0


def test_resilience_by_plan_length_and_budget() -> None:
    records = [
        episode([1] * 3, won_turn=3, plan_length=3, budget=20, task=0, attempt=0),
        episode([1] * 12, won_turn=12, plan_length=3, budget=20, task=0, attempt=1),
        episode([1] * 20, won_turn=None, plan_length=12, budget=20, task=1, attempt=0),
        episode([1] * 16, won_turn=16, plan_length=12, budget=20, task=1, attempt=1),
    ]
    res = resilience(records, ts=(5, 20), plan_edges=(5, 10, 15))
    assert list(res["by_plan_length"]) == ["1-5", "11-15"]
    assert res["by_plan_length"]["1-5"] == {"episodes": 2, "success": {"5": 0.5, "20": 1.0}}
    assert res["by_plan_length"]["11-15"] == {"episodes": 2, "success": {"5": 0.0, "20": 0.5}}
    # won at 3/20, 12/20, 16/20 of the budget -> quarters 0-25 %, 50-75 %, 75-100 %
    assert res["success_turn_fraction"]["counts"] == [1, 0, 1, 1]
    assert res["mean_turns_per_plan_step"] == pytest.approx((3 / 3 + 12 / 3 + 16 / 12) / 3)


def test_resilience_uses_per_budget_rollouts_when_present() -> None:
    # per_t mode: the T=5 rollout was won, the T=10 rollout of the same attempt was not.
    records = [
        episode([1] * 5, won_turn=5, plan_length=4, budget=5),
        episode([1] * 10, won_turn=None, plan_length=4, budget=10),
    ]
    res = resilience(records, ts=(5, 10))
    assert res["by_plan_length"]["1-5"]["success"] == {"5": 1.0, "10": 0.0}


def test_resilience_rejects_bad_edges() -> None:
    with pytest.raises(ValueError, match="increasing"):
        resilience([], ts=(5,), plan_edges=(10, 5))


def test_behaviour_metrics_use_the_largest_budget_rollouts() -> None:
    short = episode([0, 0], budget=2, admissible=[0, 0])
    long = episode([1, 1, 1], budget=3, won_turn=3)
    metrics = behaviour_metrics([short, long], ts=(2, 3))
    assert metrics["budget"] == 3
    assert metrics["decision_quality"]["overall"] == 1.0
    assert metrics["error_recovery"]["errors"] == 0


def test_one_step_plans_count_as_unknown_plan_lengths() -> None:
    # An env reporting only the next expert action as its "plan": lengths 1 say nothing.
    records = [
        episode([1, 0, 1], won_turn=3, plan_length=1, plan_left=[1, 1, 0], budget=10),
        episode([0, 0], plan_length=1, plan_left=[1, 1], budget=10, attempt=1),
    ]
    assert only_one_step_plans(records)
    metrics = behaviour_metrics(records, ts=(10,))
    assert metrics["plan_lengths_known"] is False
    assert list(metrics["resilience"]["by_plan_length"]) == ["unknown"]
    assert metrics["resilience"]["mean_turns_per_plan_step"] is None
    full = [episode([1, 1], won_turn=2, plan_length=2, plan_left=[1, 0])]
    assert not only_one_step_plans(full) and behaviour_metrics(full, ts=(5,))["plan_lengths_known"]


def test_error_kinds_from_the_env_fact_stall_loss_and_expert_turns() -> None:
    # d: 4 -> 3 (progress) -> 3 (stall) -> 3 (no_effect) -> 3 (invalid) -> 5 (detour) -> lost
    record = episode(
        [1, 0, 0, 0, 0, 0],
        plan_length=4, plan_left=[3, 3, 3, 3, 5, -1],
        effect=["progress", "neutral", "no_effect", "invalid", "regress", "regress"],
        lost_turn=6,
    )
    assert error_kinds(record) == [(2, "stall"), (3, "no_effect"), (4, "invalid"), (5, "detour"), (6, "loss")]
    # The expert's own action is never an error, even when it changes nothing (ALFWorld's first "look").
    looked = episode([1, 1], plan_length=3, plan_left=[2, 1], effect=["no_effect", "progress"])
    assert error_kinds(looked) == []
    # Without plan lengths a valid action is an error only when the env says it regressed (score down).
    unknown = episode([0, 0, 0], effect=["neutral", "regress", "progress"])
    assert error_kinds(unknown) == [(2, "detour")]


def test_recovery_is_the_next_on_plan_turn_expert_or_plan_shortening() -> None:
    # errors at 2 (stall) and 3 (no_effect); turn 4 shortens the plan without being the expert's action.
    record = episode([1, 0, 0, 0, 0], plan_length=5, plan_left=[4, 4, 4, 3, 3],
                     effect=["progress", "neutral", "no_effect", "progress", "neutral"], budget=5)
    assert error_turns(record) == [2, 3, 5]
    er = error_recovery([record])
    assert er["errors"] == 3 and er["errors_by_kind"] == {"invalid": 0, "no_effect": 1, "loss": 0, "detour": 0,
                                                           "stall": 2}
    assert er["recovered_fraction"] == pytest.approx(2 / 3)  # turn 5's stall is never recovered
    assert er["mean_turns_to_recover"] == pytest.approx((2 + 1) / 2)


def test_quarter_bins_put_wins_on_the_edges_in_their_own_quarter() -> None:
    records = [episode([1] * t, won_turn=t, budget=20, attempt=t) for t in (5, 10, 15, 20)]
    assert resilience(records, ts=(20,))["success_turn_fraction"]["counts"] == [1, 1, 1, 1]
    records = [episode([1] * t, won_turn=t, budget=20, attempt=t) for t in (1, 6, 11, 16)]
    assert resilience(records, ts=(20,))["success_turn_fraction"]["counts"] == [1, 1, 1, 1]


def test_task_terms_give_the_reported_values_per_task() -> None:
    a0 = episode([1, 0, 1], won_turn=3, plan_length=3, plan_left=[2, 2, 0], budget=4, task=0,
                 effect=["progress", "neutral", "progress"])
    a1 = episode([0, 0, 0, 0], plan_length=3, plan_left=[3, 3, 3, 3], budget=4, task=0, attempt=1,
                 effect=["no_effect"] * 4)
    b0 = episode([1, 1], won_turn=2, plan_length=2, plan_left=[1, 0], budget=4, task=1,
                 effect=["progress", "progress"])
    terms = task_terms([a0, a1, b0], ts=(2, 4), n_tasks=2)
    num, den = terms["decision_quality.overall"]
    assert num.tolist() == [2, 2] and den.tolist() == [7, 2]
    num, den = terms["errors_per_episode"]
    assert num.tolist() == [5, 0] and den.tolist() == [2, 1]  # a0: stall at 2; a1: 4 no-effect turns
    num, den = terms["success_after_error"]
    assert num.tolist() == [1, 0] and den.tolist() == [2, 0]
    num, den = terms["success_by_plan_length.1-5.T2"]
    assert num.tolist() == [0, 1] and den.tolist() == [2, 1]
    metrics = behaviour_metrics([a0, a1, b0], ts=(2, 4), n_tasks=2, bootstrap=200)
    for name, value in (("decision_quality.overall", metrics["decision_quality"]["overall"]),
                        ("errors_per_episode", metrics["error_recovery"]["errors_per_episode"]),
                        ("mean_turns_to_recover", metrics["error_recovery"]["mean_turns_to_recover"]),
                        ("success_turn_fraction.50-75%", metrics["resilience"]["success_turn_fraction"]["fractions"][2])):
        assert metrics["ci"][name]["value"] == pytest.approx(value), name
    assert metrics["ci"]["decision_quality.overall"]["ci_low"] <= 4 / 9 <= metrics["ci"]["decision_quality.overall"]["ci_high"]


def test_key_door_noisy_expert_makes_errors() -> None:
    import agentgym_budget  # noqa: F401
    from agentgym_budget.eval import evaluate

    result = evaluate("KeyDoor-Budget-v0", "noisy-expert", ks=(1,), ts=(4,), tasks=20, attempts=4, bootstrap=0,
                      policy_kwargs={"p": 0.5})
    er = result.metrics["error_recovery"]
    assert er["errors"] > 0 and er["errors_by_kind"]["no_effect"] > 0 and er["errors_by_kind"]["loss"] > 0
    assert er["success_after_error"] < er["success_without_error"] == 1.0

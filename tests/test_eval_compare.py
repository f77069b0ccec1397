"""Paired comparison, aggregation over runs, their statistics, and probe states."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.cli import main
from agentgym_budget.eval import evaluate
from agentgym_budget.eval.compare import IncomparableResults, aggregate_results, check_comparable, compare_results
from agentgym_budget.eval.evaluate import RepeatedGamesWarning
from agentgym_budget.eval.probes import ProbeReplayError, build_probes, run_probes
from agentgym_budget.eval.results import PassKTResult
from agentgym_budget.eval.stats import paired_bootstrap, ratio_bootstrap, t_interval, t_quantile

KEYDOOR = "KeyDoor-Budget-v0"


def keydoor(p: float, tasks: int = 12, seed: int = 0, **kwargs) -> PassKTResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RepeatedGamesWarning)
        return evaluate(KEYDOOR, "noisy-expert", ks=(1, 2), ts=(2, 4), tasks=tasks, attempts=4, seed=seed,
                        policy_kwargs={"p": p}, bootstrap=200, **kwargs)


# -- statistics ------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=30), st.integers(0, 2**16))
def test_paired_ci_of_a_result_against_itself_is_exactly_zero(pairs, seed) -> None:
    num = np.array([min(n, d) for n, d in pairs], dtype=float)
    den = np.array([d for _, d in pairs], dtype=float)
    d = paired_bootstrap(num, den, num, den, resamples=200, seed=seed)
    if d.a is None:  # every denominator is 0: the metric is undefined
        assert d.diff is None
        return
    assert d.diff == 0.0
    if d.ci_low is not None:
        assert d.ci_low == 0.0 and d.ci_high == 0.0 and not d.significant


def test_paired_bootstrap_by_hand() -> None:
    a = np.array([0.0, 0.0, 1.0, 1.0])
    b = np.array([1.0, 1.0, 1.0, 1.0])
    ones = np.ones(4)
    d = paired_bootstrap(a, ones, b, ones, resamples=2000, seed=1)
    assert (d.a, d.b, d.diff) == (0.5, 1.0, 0.5)
    # the per-task differences are 1, 1, 0, 0: a resampled mean lies in [0, 1]
    assert 0.0 <= d.ci_low < 0.5 < d.ci_high <= 1.0 and d.significant is (d.ci_low > 0)
    # a constant shift on every task has a zero-width CI at the shift
    shifted = paired_bootstrap(a, ones, a + 0.25, ones, resamples=500)
    assert shifted.as_tuple() == (0.25, 0.25, 0.25) and shifted.significant


def test_one_task_has_no_ci() -> None:
    assert ratio_bootstrap(np.array([1.0, 0.0]), np.array([2.0, 0.0])) == (None, None)
    d = paired_bootstrap(np.array([1.0, 0.0]), np.array([2.0, 0.0]), np.array([2.0, 0.0]), np.array([2.0, 0.0]))
    assert d.diff == 0.5 and d.ci_low is None and not d.significant


def test_t_quantile_matches_scipy_and_the_interval() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 4, 9, 30):
        for p in (0.9, 0.975, 0.995):
            assert t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-6)
    low, high = t_interval([0.5, 0.7, 0.6])
    assert (low, high) == pytest.approx((0.6 - 4.302653 * 0.1 / np.sqrt(3), 0.6 + 4.302653 * 0.1 / np.sqrt(3)), rel=1e-6)
    assert t_interval([0.5]) == (None, None)


# -- compare --------------------------------------------------------------------------------
def test_compare_refuses_results_that_cannot_be_paired() -> None:
    a = keydoor(0.5)
    check_comparable(a, a)
    cases = {
        "env": dataclasses.replace(a, env_id="KeyDoor-v0"),
        "task seeds": keydoor(0.5, seed=1),
        "attempts": dataclasses.replace(a, attempts=8),
        "budgets": dataclasses.replace(a, ts=(2, 8)),
        "games": dataclasses.replace(a, task_games=["other"] * a.n_tasks),
    }
    for what, other in cases.items():
        with pytest.raises(IncomparableResults, match=what):
            compare_results(a, other)
    with pytest.raises(IncomparableResults, match="task seeds"):
        compare_results(a, keydoor(0.5, tasks=10))


def test_compare_gives_paired_cis_for_passkt_and_every_behaviour_metric() -> None:
    a, b = keydoor(0.3), keydoor(1.0)
    comparison = compare_results(a, b, resamples=300)
    assert set(comparison.passkt) == {(1, 2), (1, 4), (2, 2), (2, 4)}
    d = comparison.passkt[(1, 4)]
    assert d.diff == pytest.approx(b.value(1, 4) - a.value(1, 4)) and d.diff > 0 and d.significant
    assert set(comparison.metrics) == set(a.metrics["per_task"])
    errors = comparison.metrics["errors_per_episode"]
    assert errors.a == pytest.approx(a.metrics["error_recovery"]["errors_per_episode"])
    assert errors.b == 0.0 and errors.diff < 0 and errors.ci_high < 0  # the expert makes no errors
    same = compare_results(a, a)
    assert all(x.diff in (0.0, None) for x in [*same.passkt.values(), *same.metrics.values()])


def test_compare_cli_prints_cis_and_marks_cells(tmp_path, capsys) -> None:
    for name, p in (("a", 0.3), ("b", 1.0)):
        keydoor(p).save(tmp_path / name)
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "d.png"),
                 "--bootstrap", "200"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "paired bootstrap CI" in out and "errors_per_episode" in out and "decision_quality.overall" in out
    saved = json.loads((tmp_path / "d.json").read_text())
    assert {row["k"] for row in saved["passkt"]} == {1, 2} and "success_after_error" in saved["metrics"]
    assert (tmp_path / "d.png").stat().st_size > 0
    keydoor(0.3, tasks=5).save(tmp_path / "c")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "c"), "--out", str(tmp_path / "e.png")]) == 2
    assert "cannot compare" in capsys.readouterr().err


# -- aggregate ------------------------------------------------------------------------------
def test_aggregate_over_runs(tmp_path, capsys) -> None:
    runs = [keydoor(0.6, seed=s) for s in range(3)]
    agg = aggregate_results(runs)
    cell = agg.passkt[(1, 4)]
    values = [r.value(1, 4) for r in runs]
    assert cell["mean"] == pytest.approx(np.mean(values)) and cell["std"] == pytest.approx(np.std(values, ddof=1))
    assert cell["ci_low"] < cell["mean"] < cell["ci_high"] and cell["min"] == min(values)
    assert agg.metrics["errors_per_episode"]["values"] == [
        pytest.approx(r.metrics["error_recovery"]["errors_per_episode"]) for r in runs]
    with pytest.raises(IncomparableResults, match="ts"):
        aggregate_results([runs[0], dataclasses.replace(runs[1], ts=(2, 8))])
    paths = []
    for i, r in enumerate(runs):
        r.save(tmp_path / f"seed{i}")
        paths.append(str(tmp_path / f"seed{i}" / "passkt.json"))
    assert main(["aggregate", *paths, "--out", str(tmp_path / "agg")]) == 0
    assert "over 3 runs" in capsys.readouterr().out
    assert json.loads((tmp_path / "agg" / "aggregate.json").read_text())["runs"] == 3
    assert (tmp_path / "agg" / "aggregate.csv").read_text().startswith("metric,mean,std")


# -- probes ---------------------------------------------------------------------------------
def test_probes_are_fixed_and_scored_on_the_same_states() -> None:
    probes = build_probes(KEYDOOR, n=10, seed=3)
    assert probes == build_probes(KEYDOOR, n=10, seed=3)
    assert {p.source for p in probes} == {"expert", "noisy"}
    expert = run_probes(KEYDOOR, "expert", probes)
    random = run_probes(KEYDOOR, "random", probes)
    assert expert["set_id"] == random["set_id"]
    assert expert["agreement"] == [1] * 10 and expert["success_to_go"] == [1] * 10
    # KeyDoor: from the start "take key" is the expert's; a random action agrees 1 time in 3.
    assert random["summary"]["agreement"]["value"] < 1.0
    assert all(s == 0 for s, e in zip(random["success_to_go"], random["effect"]) if e == "regress")  # lost: no way back
    tampered = [dataclasses.replace(probes[0], digest="0" * 12)]
    with pytest.raises(ProbeReplayError, match="different state"):
        run_probes(KEYDOOR, "expert", tampered)


def test_eval_with_probes_and_compare_pairs_them(tmp_path, capsys) -> None:
    common = ["eval", "--env", KEYDOOR, "--k", "1,2", "--t", "2,4", "--tasks", "8", "--attempts", "2",
              "--bootstrap", "100", "--no-plots", "--no-progress", "--probes", "6"]
    assert main([*common, "--policy", "random", "--out", str(tmp_path / "r")]) == 0
    assert main([*common, "--policy", "expert", "--out", str(tmp_path / "e")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "probe states (6)" in out
    assert json.loads((tmp_path / "e" / "probes.json").read_text())["agreement"] == [1] * 6
    saved = PassKTResult.load(tmp_path / "r").metrics["probes"]
    assert saved["set_id"] == PassKTResult.load(tmp_path / "e").metrics["probes"]["set_id"]
    assert main(["compare", str(tmp_path / "r"), str(tmp_path / "e"), "--out", str(tmp_path / "d.png")]) == 0
    assert "probes.agreement" in capsys.readouterr().out
    assert main(["probe", "--env", KEYDOOR, "--policy", "random", "--probes", "4", "--out", str(tmp_path / "p")]) == 0
    assert "success_to_go" in capsys.readouterr().out


def test_eval_with_probes_builds_the_policy_once() -> None:
    from agentgym_budget.episodes.policy import POLICIES, register_policy
    from agentgym_budget.policies.baselines import ExpertPolicy

    built = []

    @register_policy("counted-expert")
    def counted_expert() -> ExpertPolicy:
        built.append(1)
        return ExpertPolicy()

    try:
        result = evaluate(KEYDOOR, "counted-expert", ks=(1,), ts=(2,), tasks=2, attempts=1, workers=1, probes=4,
                          bootstrap=10, plots=False, progress=False)
    finally:
        del POLICIES["counted-expert"]
    assert len(built) == 1
    assert result.metrics["probes"]["agreement"] == [1] * 4


def test_seeds_that_draw_the_same_game_are_recorded_and_warned_about(tmp_path) -> None:
    with pytest.warns(RepeatedGamesWarning, match=r"20 task seeds drew 15 distinct games"):
        result = evaluate(KEYDOOR, "expert", ks=(1,), ts=(2,), tasks=20, attempts=1, bootstrap=0)
    assert len(result.task_games) == 20 and len(set(result.task_games)) == 15
    assert all(":" in game for game in result.task_games)  # goal-distractor:door order, KeyDoor's set-up
    result.save(tmp_path)
    assert PassKTResult.load(tmp_path).task_games == result.task_games


def test_frontiers_are_compared_at_matched_cost_paired_over_tasks(tmp_path, capsys) -> None:
    a, b = keydoor(0.3), keydoor(1.0)
    comparison = compare_results(a, b, resamples=300)
    rows = comparison.frontier
    assert {row.strategy for row in rows} == {"parallel", "sequential"}
    for row in rows:
        for result, cell in ((a, row.a), (b, row.b)):  # each side: its own best cell at that cost
            assert cell == result.frontier().best(row.strategy, "turns", row.level)
            assert cell.cost <= row.level
        per_task = [r.grid.per_task[r.ks.index(c.k), r.ts.index(c.t)] for r, c in ((a, row.a), (b, row.b))]
        expected = paired_bootstrap(per_task[0], np.ones(12), per_task[1], np.ones(12), resamples=300)
        assert row.difference == expected and row.difference.diff == pytest.approx(row.b.success - row.a.success)
    assert all(row.difference.diff == 0.0 for row in compare_results(a, a).frontier)
    # the command prints it and writes it; a result from before attempt costs gets a note, not an error
    a.save(tmp_path / "a"), b.save(tmp_path / "b")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "d.png")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Best (K,T) for a budget of expected turns per task" in out
    assert len(json.loads((tmp_path / "d.json").read_text())["frontier"]) == len(rows)
    old = compare_results(dataclasses.replace(a, costs=None), b)
    assert old.frontier == [] and any("predates attempt costs" in note for note in old.notes)

"""``eval --stopping-rules`` and ``compare --stopping-rules``: the report's scoring, saved and printed; b - a per rule."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from agentgym_budget.cli import main
from agentgym_budget.eval.compare import compare_results
from agentgym_budget.eval.episode_log import read_episodes
from agentgym_budget.eval.results import PassKTResult
from agentgym_budget.eval.stopping import (STOPPING_FILE, parse_rules, rule_points, rule_rows, rule_settings,
                                           task_values)

# Noisy experts err (no-effect turns, detours), so the rules cut some attempts; 16 tasks x 4 attempts: seconds.
GRID = ["--env", "KeyDoor-Budget-v0", "--k", "1,2", "--t", "2,4,6", "--tasks", "16", "--attempts", "4",
        "--bootstrap", "200", "--no-plots", "--no-progress"]
RULES = "never,no-effect:1,no-progress:2"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two evaluations of the same tasks (noisy experts p=0.5 and p=0.8), the first with --stopping-rules."""
    folder = tmp_path_factory.mktemp("runs")
    a, b = folder / "a", folder / "b"
    assert main(["eval", *GRID, "--policy", "noisy-expert", "--policy-arg", "p=0.5", "--out", str(a),
                 "--stopping-rules", RULES]) == 0
    assert main(["eval", *GRID, "--policy", "noisy-expert", "--policy-arg", "p=0.8", "--out", str(b)]) == 0
    return a, b


def test_eval_saves_the_reports_rule_points_and_prints_their_frontier(runs, capsys, tmp_path) -> None:
    a, b = runs
    result = PassKTResult.load(a)
    points = rule_points(read_episodes(a), parse_rules(RULES), result.ks, result.ts, bootstrap=200)
    with (a / STOPPING_FILE).open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["rule"], int(r["t"]), float(r["total_budget"])) for r in rows] == [(p.rule, p.t, p.budget) for p in points]
    assert [float(r["pass"]) for r in rows] == pytest.approx([p.success for p in points], abs=1e-6)
    assert [float(r["turns"]) for r in rows] == pytest.approx([p.turns for p in points], rel=1e-5)
    assert any(float(r["cut_rate"]) > 0 for r in rows)  # the rules do cut here: the table is not "never" thrice
    assert not (b / STOPPING_FILE).exists()  # only asked for, not written by every eval

    # printed: one row per point of each rule's own frontier, as the report's table has
    assert main(["eval", *GRID, "--policy", "noisy-expert", "--policy-arg", "p=0.5", "--out", str(tmp_path / "c"),
                 "--stopping-rules", "no-effect:1"]) == 0
    out = capsys.readouterr().out
    c = PassKTResult.load(tmp_path / "c")
    frontier = c.frontier()
    assert frontier is not None
    shown = rule_rows(rule_points(read_episodes(tmp_path / "c"), parse_rules("no-effect:1"), c.ks, c.ts), frontier)
    assert "Stopping rules" in out and out.count("no-effect:1") == len(shown) > 0
    assert all(f"{p.budget:g} ({p.t})" in out and f"{p.success:.3f}" in out for p, _ in shown)
    assert str(tmp_path / "c" / STOPPING_FILE) in out.replace("\n", "")


def test_a_bad_rule_is_one_line_before_anything_runs(tmp_path, capsys) -> None:
    assert main(["eval", *GRID, "--out", str(tmp_path / "x"), "--stopping-rules", "no-effect:0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-effect:0" in err and "m must be a whole number >= 1" in err
    assert not (tmp_path / "x").exists()


def test_compare_gives_each_rules_paired_difference_b_minus_a(runs, tmp_path, capsys) -> None:
    a, b = runs
    out = tmp_path / "diff.png"
    assert main(["compare", str(a / "passkt.json"), str(b), "--out", str(out), "--stopping-rules", RULES]) == 0
    printed = capsys.readouterr().out
    rows = json.loads(out.with_suffix(".json").read_text())["stopping_rules"]
    records_a, records_b = read_episodes(a), read_episodes(b)
    result = PassKTResult.load(a)
    settings = rule_settings(records_a, parse_rules(RULES), result.ks, result.ts)
    assert [(r["rule"], r["t"], r["total_budget"]) for r in rows] == [(s[0].name, s[2], s[3]) for s in settings]
    for row, (rule, n, t, budget) in zip(rows, settings):
        values_a, values_b = task_values(records_a, rule, n, t, budget), task_values(records_b, rule, n, t, budget)
        for i, name in enumerate(("success", "turns")):
            assert row[name]["a"] == pytest.approx(values_a[:, i].mean())
            assert row[name]["diff"] == pytest.approx(values_b[:, i].mean() - values_a[:, i].mean())
            assert row[name]["ci_low"] <= row[name]["diff"] <= row[name]["ci_high"]
    assert any(r["success"]["significant"] and r["success"]["diff"] > 0 for r in rows)  # p=0.8 wins more
    assert "Stopping rules" in printed and all(name in printed for name in ("never", "no-effect:1", "no-progress:2"))


def test_a_run_against_itself_differs_by_nothing_under_every_rule(runs) -> None:
    a, _ = runs
    result, records = PassKTResult.load(a), read_episodes(a)
    comparison = compare_results(result, result, resamples=100, rules=parse_rules(RULES), records=(records, records))
    assert comparison.rules and all(r.success.as_tuple() == r.turns.as_tuple() == (0.0, 0.0, 0.0)
                                    for r in comparison.rules)
    assert np.isfinite([r.success.a for r in comparison.rules]).all()
    with pytest.raises(ValueError, match="needs both runs' episode records"):
        compare_results(result, result, rules=parse_rules("never"))


def test_compare_without_episode_records_says_which_file_is_missing(runs, tmp_path, capsys) -> None:
    a, _ = runs
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "passkt.json").write_bytes((a / "passkt.json").read_bytes())
    assert main(["compare", str(a), str(lone), "--out", str(tmp_path / "d.png"), "--stopping-rules", "never"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(lone / "episodes.jsonl") in err and "is missing" in err
    assert not (tmp_path / "d.png").exists()

"""Every generated docs table agrees with the committed results files it is made from (tools/docs_tables.py)."""

from __future__ import annotations

import json

import pytest

from tools import docs_tables


def test_every_generated_docs_table_matches_its_results_files():
    stale = docs_tables.stale_tables()
    assert not stale, "tables that disagree with their files (run: python -m tools.docs_tables):\n" + "\n".join(stale)


def test_a_table_edited_by_hand_or_a_changed_file_is_caught(tmp_path):
    calls = {"value": "1"}
    generators = {"demo": lambda: f"| n |\n|---|\n| {calls['value']} |"}
    (tmp_path / "page.md").write_text("<!-- generated: demo -->\n| n |\n|---|\n| 1 |\n<!-- end generated -->\n")
    assert docs_tables.stale_tables(tmp_path, generators) == []
    calls["value"] = "2"  # the results file changed, the docs did not
    assert len(docs_tables.stale_tables(tmp_path, generators)) == 1
    with pytest.raises(KeyError, match="no generator named 'other'"):
        docs_tables.fill("<!-- generated: other -->\nx\n<!-- end generated -->", generators)


def test_the_learning_check_table_is_made_from_every_file_and_refuses_a_seed_twice(tmp_path):
    run = {"seed": 0, "learned": True, "last_success": 0.95, "held_out_pass1": {"2": 0.9}, "cpu_seconds": 150}
    (tmp_path / "a.json").write_text(json.dumps({"runs": [run], "provenance": {"command": "python x"}}))
    (tmp_path / "b.json").write_text(json.dumps({"runs": [{**run, "seed": 1, "learned": False}]}))
    runs, sources = docs_tables.learning_check_runs(tmp_path)
    assert [r["seed"] for r in runs] == [0, 1] and sources[0]["command"] == "python x"
    (tmp_path / "c.json").write_text(json.dumps({"runs": [run]}))
    with pytest.raises(ValueError, match="a seed appears in two learning-check files"):
        docs_tables.learning_check_runs(tmp_path)


def test_the_process_reward_study_table_shows_every_seed_and_the_paired_rows(tmp_path):
    cell = {"mean": 0.5, "ci_low": 0.25, "ci_high": 0.75}
    report = {
        "ts": [2, 4], "seeds": [0, 1], "updates": 60, "eval_tasks": 40, "eval_attempts": 2, "cpu_seconds": 120,
        "per_seed": {arm: {str(s): {"held_out_pass1": {"2": 0.1 * (s + 1), "4": 0.5}, "train_success_last20": 0.9}
                           for s in (1, 0)} for arm in ("mix", "mix+pr")},
        "pass1": {arm: {"2": cell, "4": cell} for arm in ("mix", "mix+pr")},
        "paired": {"mix+pr − mix": {"2": {"diff": -0.125, "ci_low": -0.3, "ci_high": -0.05, "significant": True},
                                   "4": {"diff": 0.0, "ci_low": None, "ci_high": None, "significant": False}}},
        "provenance": {"command": "python benchmarks/budgetmix_study.py", "commit": "abcdef1234567", "dirty": False},
    }
    path = tmp_path / "keydoor.json"
    path.write_text(json.dumps(report))
    lines = docs_tables.process_reward_study_table(path).splitlines()
    assert lines[2:4] == ["| mix | 0 | 10.0 | 50.0 | 0.90 |", "| mix | 1 | 20.0 | 50.0 | 0.90 |"]  # seeds in order
    assert "| mix+pr − mix | -12.5 [-30.0, -5.0]* | +0.0 [n/a, n/a] |" in lines
    assert lines[-1].startswith("From `docs/data/process-reward-study/keydoor.json`: `python benchmarks/budgetmix")
    assert "(no results file" in docs_tables.process_reward_study_table(tmp_path / "missing.json")

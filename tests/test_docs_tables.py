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

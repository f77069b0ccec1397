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


def test_the_smollm2_table_reads_its_rows_in_order_with_their_intervals(tmp_path, monkeypatch):
    cell = {"pass1": 0.25, "successes": 8, "tasks": 32, "wilson95": [0.13, 0.42]}
    sft = {"episodes": 40, "turns": 100, "reply_loss_before": 1.3, "reply_loss_after": 0.2, "cpu_seconds": 90,
           "config": {"source": "random", "steps": 8, "batch_size": 8}}
    rl = {"config": {"budget": "mix:2,3,4"}, "updates": 20, "episodes": 160, "cpu_seconds": 600}
    files = {"sft-format+rl-mix-seed0": {"sft": sft, "rl": rl}, "zero-shot": {}, "sft-format": {"sft": sft}}
    for name, extra in files.items():
        row = {"row": name, "held_out_pass1": {"2": cell}, "provenance": {"command": f"python {name}"}, **extra}
        (tmp_path / f"{name}.json").write_text(json.dumps(row))
    assert [r["row"] for r in docs_tables.smollm2_table_rows(tmp_path)] == [
        "zero-shot", "sft-format", "sft-format+rl-mix-seed0"]
    real = docs_tables.smollm2_table_rows
    monkeypatch.setattr(docs_tables, "smollm2_table_rows", lambda folder=None: real(tmp_path))
    table = docs_tables.smollm2_table()
    assert "| zero-shot | none (the base model) | 0.25 [0.13, 0.42] (8/32) | 32 |" in table
    assert "SFT random: 40 episodes, 8 steps × 8, reply loss 1.30 → 0.20, 1.5 CPU-min; then GRPO mix:2,3,4: " \
           "20 updates, 160 episodes, 10.0 CPU-min" in table
    assert "`python sft-format+rl-mix-seed0`" in table


def test_the_smollm2_step_cost_table_shows_each_arm_and_its_ratios(tmp_path):
    parts = {"rollout": 8.0, "old_logprobs": 0.0, "ref_logprobs": 0.0, "forward": 9.0, "backward": 10.0,
             "optimizer": 0.03}
    arm = {"cpu_seconds": parts, "turns_per_update": 24.0, "cpu_seconds_per_turn": 1.13, "trainable_parameters": 4_884_480,
           "ratio_per_turn_to_first": 1.0, "ratio_backward_to_first": 1.0}
    facts = {"provenance": {"command": "python s"}, "settings": {"updates": 2},
             "arms": {"lora_layers=0,max_turns_shown=2,prompt=react": arm,
                      "lora_layers=4,max_turns_shown=2,prompt=short": {**arm, "ratio_per_turn_to_first": 0.5}}}
    (tmp_path / "step-cost.json").write_text(json.dumps(facts))
    table = docs_tables.smollm2_step_cost_table(tmp_path / "step-cost.json")
    assert "| all : 2 : react | 4,884,480 | 24.0 | 8.00 | 9.00 | 10.00 | 0.03 | 0.00 | 1.130 | 1.00 | 1.00 |" in table
    assert "| 4 : 2 : short |" in table and "| 0.50 |" in table and "`python s`" in table


def test_the_smollm2_rl_runs_table_shows_how_far_each_run_got(tmp_path):
    cpu = {f"cpu_{part}_seconds": value for part, value in
           (("rollout", 12.7), ("old_logprobs", 0.0), ("ref_logprobs", 0.0), ("forward", 7.7), ("backward", 1.6),
            ("optimizer", 0.005))}
    updates = [{"update_episodes": 16, "cpu_rollout_seconds": 13.2, "cpu_update_seconds": 9.0}] * 10
    rl = {"updates": updates, "mean_cpu_seconds_per_update": cpu,
          "cpu_seconds_per_turn": 0.463, "held_out_curve": [{"update": 0, "pass1": 0.0625}, {"update": 5, "pass1": 0.125}]}
    (tmp_path / "rl-seed3").mkdir()
    (tmp_path / "rl-seed3" / "results.json").write_text(json.dumps(
        {"rl": rl, "settings": {"updates": 20, "eval_t": 2, "eval_tasks": 32}, "provenance": {"command": "python r"}}))
    table = docs_tables.smollm2_rl_runs_table(tmp_path)
    assert ("| rl-seed3 | 10 (20) | 160 | 3.7 | T=2, 32 tasks: 0: 0.06, 5: 0.12 | 12.7 / 7.7 / 1.6 / 0.0 | 0.46 |"
            in table)
    assert "`python r`" in table

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
    assert lines[-1].startswith("From `keydoor.json`: `python benchmarks/budgetmix")  # a file outside the checkout
    assert "(no results file" in docs_tables.process_reward_study_table(tmp_path / "missing.json")


def test_the_real_model_fixed_vs_mix_table_reads_the_rows_before_rl_then_the_arms(tmp_path, monkeypatch):
    monkeypatch.setattr(docs_tables, "DATA", tmp_path)
    source = {"command": "python benchmarks/smollm2_table.py", "commit": "abc", "cpus": 2}
    for folder, name, value in (("smollm2-table", "zero-shot", 0.0), ("smollm2-arms", "sft-format-40", 0.25)):
        (tmp_path / folder).mkdir(exist_ok=True)
        cells = {"2": {"pass1": value, "successes": int(4 * value), "tasks": 4, "wilson95": [0.0, 0.5]}}
        (tmp_path / folder / f"{name}.json").write_text(json.dumps({"row": name, "provenance": source,
                                                                     "held_out_pass1": cells}))
    cell = {"mean": 0.5, "ci_low": 0.25, "ci_high": 0.75}
    study = {"ts": [2, 3], "seeds": [0], "updates": 50, "eval_tasks": 4, "eval_attempts": 1, "cpu_seconds": 60,
             "per_seed": {arm: {"0": {"held_out_pass1": {"2": 0.5, "3": 0.75}, "train_success_last20": 0.9,
                                      "run_command": f"python rl.py --budget {arm}"}} for arm in ("mix:2,3", "fixed:3")},
             "pass1": {arm: {"2": cell, "3": cell} for arm in ("mix:2,3", "fixed:3")},
             "paired": {"mix:2,3 − fixed:3": {t: {"diff": 0.0, "ci_low": 0.0, "ci_high": 0.0, "significant": False}
                                             for t in ("2", "3")}},
             "provenance": {"command": "python benchmarks/smollm2_budget_arms.py", "commit": "abc"}}
    (tmp_path / "smollm2-arms" / "study.json").write_text(json.dumps(study))
    lines = docs_tables.smollm2_fixed_vs_mix_table().splitlines()
    assert lines[2] == "| zero-shot | none (the base model) | 0.0 [0.0, 50.0] | – | 4 |"  # no T=3 cell measured
    assert lines[3].startswith("| sft-format-40 | none (the base model) | 25.0 [0.0, 50.0] | – |")
    assert "| fixed:3 | 0 | 50.0 | 75.0 | 0.90 |" in lines and "| mix:2,3 − fixed:3 | +0.0 [+0.0, +0.0] | +0.0 [+0.0, +0.0] |" in lines
    assert lines[-1] == "- fixed:3 seed 0: `python rl.py --budget fixed:3`"


def test_the_process_reward_training_trace_table_averages_each_phase_of_updates(tmp_path):
    def update(n: int, success: float, opened: float, credit: float) -> dict:
        return {"update": n, "metrics": {"success_rate": success, "invalid_action_rate": 0.1, "entropy": 0.2, "kl": 0.3},
                "door_open_rate": opened, "goal_door_share_of_opened": 0.5, "mean_process_credit": credit,
                "mean_abs_outcome_advantage": 0.4, "turns_pushed_up": 0.25, "kinds": {}}
    report = {"arm": "mix+pr", "seed": 0, "cpu_seconds": 60, "provenance": {"command": "python t.py", "commit": "abc"},
              "updates": [update(1, 0.2, 0.9, -0.4), update(2, 0.4, 0.7, -0.2), update(21, 0.1, 0.1, 0.0)]}
    (tmp_path / "a.json").write_text(json.dumps(report))
    lines = docs_tables.process_reward_training_trace_table((("a.json", "`x`"), ("b.json", "`y`")), tmp_path)
    lines = lines.splitlines()
    assert lines[2] == "| mix+pr, credit `x`, seed 0 | 1-20 | 0.30 | 10 % | 80 % | 50 % | -0.30 | 0.40 | 25 % | 0.20 | 0.30 |"
    assert lines[3].startswith("| mix+pr, credit `x`, seed 0 | 21-40 | 0.10 |") and len(lines) == 7  # no 41-60 row
    assert lines[4].startswith("| b.json | (no results file yet) |")
    assert lines[-1].startswith("- `a.json`: `python t.py` at commit `abc`")


def _use_data(monkeypatch, tmp_path, name: str, report: dict) -> None:
    """Point the generators at ``tmp_path`` holding ``report`` as ``docs/data/<name>``."""
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(json.dumps(report))
    monkeypatch.setattr(docs_tables, "DATA", tmp_path)


def test_the_webshop_tables_turn_clock_seconds_into_rates_and_ratios(monkeypatch, tmp_path):
    clock = {"wall_s": 0.5, "cpu_s": 0.25}
    policy = {"steps": 1000, "success": 0.5, "mean_reward": 0.75, "wall_s": 2.0, "cpu_s": 1.0}
    report = {"provenance": {"command": "python x", "load_average": [3.0, 2, 1]}, "products": 3000, "episodes": 10,
              "step_limit": 15, "build": {"catalog_generation": clock, "bm25_index": clock}, "queries": 100,
              "raw_search": clock, "env_search_step": {"wall_s": 0.75, "cpu_s": 0.5}, "get_reward_calls": 50,
              "get_reward": clock, "policies": {"expert": policy, "rule": policy, "random": policy}}
    _use_data(monkeypatch, tmp_path, "webshop/throughput.json", report)
    throughput = docs_tables.webshop_throughput_table()
    assert "| raw bm25s search | 200 queries/s: 5.00 ms (2.50 ms CPU) |" in throughput
    assert "| `get_reward` | 100 calls/s |" in throughput
    assert "**1.50× wall, 2.00× CPU**" in throughput and "| env steps/s, rule policy | 500 |" in throughput
    assert "| random over admissible commands | 0.500 | 0.750 |" in docs_tables.webshop_difficulty_table()


def test_the_textworld_table_gives_the_per_round_ratio_range_and_leaves_out_other_backends(monkeypatch, tmp_path):
    row = {"backend": "TextWorld coin_collector", "level": 5, "steps": 149, "rounds": 3, "raw_steps_per_s": 100.0,
           "ours_steps_per_s": 90.0, "ours_over_raw": 0.9, "engine_share": 0.97,
           "raw_steps_per_s_by_round": [100.0, 100.0, 80.0], "ours_steps_per_s_by_round": [90.0, 80.0, 96.0]}
    science = {**row, "backend": "ScienceWorld boil/0"}
    _use_data(monkeypatch, tmp_path, "textworld/backend-throughput.json",
              {"provenance": {}, "rows": [row, science]})
    table = docs_tables.textworld_throughput_table()
    assert "| coin collector L5 | 149 × 3 | 100.0 | 90.0 | 0.90 | 0.80–1.20 | 0.970 |" in table
    assert "ScienceWorld" not in table


def test_the_ray_table_compares_median_and_best_rounds_at_equal_worker_count(monkeypatch, tmp_path):
    seconds = {"local, workers 1": [2.0, 1.0, 4.0], "local, workers 2": [1.0, 1.0, 1.0], "ray, 1 actor": [2.0, 2.0, 2.0],
               "ray, 2 actors": [1.25, 1.0, 2.0], "ray, 2 actors, 1 episode/chunk": [2.0, 2.0, 2.0]}
    report = {"provenance": {}, "episodes": 100, "rounds": 3, "seconds_by_round": seconds, "ray_init_s": 3.0,
              "actor_startup_s": {"ray, 1 actor": 0.5}, "identical_records": True,
              "oversubscribed": {"actors": 6, "logical_cpus": 8, "identical_records": False}}
    _use_data(monkeypatch, tmp_path, "ray/scaling.json", report)
    table = docs_tables.ray_scaling_table()
    assert "| local, `--workers 1` | 50 | 100 | – |" in table and "| Ray, 1 actor | 50 | 50 | 0.5 s |" in table
    assert "1 actor +0.0% (median) / +100.0% (best); 2 actors +25.0% (median) / +0.0% (best)" in table
    assert "returned the records of the in-process run: **no**" in table


def test_the_action_rewrites_table_adds_the_seeds_up_and_gives_each_count_as_a_share_of_turns(monkeypatch, tmp_path):
    counts = {"turns": 200, "exact: not admissible": 50, "old != exact": 20,
              "old != exact, crossed a colour/number": 10, "fuzzy != exact": 0}
    report = {"provenance": {}, "env": "KeyDoor-v0", "budget": "mix:2,3", "episodes": 8, "warmup_steps": 1,
              "max_new_tokens": 12, "seeds": [{"seed": 0, "counts": counts, "warmup_s": 100.4, "play_s": 8},
                                              {"seed": 1, "counts": {**counts, "turns": 300, "fuzzy != exact": 3},
                                               "warmup_s": 90, "play_s": 9}]}
    _use_data(monkeypatch, tmp_path, "action-rewrites/keydoor.json", report)
    table = docs_tables.action_rewrites_table()
    assert "| 0 | 200 | 50 (25.0 %) | 20 (10.0 %) | 10 (5.0 %) | 0 (0.0 %) |" in table
    assert "| all | 500 | 100 (20.0 %) | 40 (8.0 %) | 20 (4.0 %) | 3 (0.6 %) |" in table
    assert "warm-up / play: seed 0 100 / 8, seed 1 90 / 9." in table
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


def test_the_update_cost_table_shows_each_arm_its_parts_and_the_limit(tmp_path):
    def arm(per_turn: float, run: int) -> dict:
        return {"update_turns": 38.7, "cpu_seconds_per_turn": per_turn, "prompt_tokens_run": run,
                "unique_prompt_tokens": 465, "limit_cpu_seconds_per_turn": 0.065, "share_of_limit": 0.065 / per_turn,
                "per_turn": {"prefill": 0.192, "decode": 0.059, "forward": 0.307, "backward": 0.063}}
    facts = {"provenance": {"command": "python u"}, "settings": {"updates": 3},
             "envs": {"KeyDoor-v0": {"arms": {"today": arm(0.63, 2384), "shared_prefix": arm(0.315, 700)},
                                     "ratio_per_turn": {"today": 1.0, "shared_prefix": 2.0}}}}
    (tmp_path / "results.json").write_text(json.dumps(facts))
    table = docs_tables.update_cost_table(tmp_path / "results.json")
    assert "| KeyDoor-v0 | today | 38.7 | 0.630 | 0.192 | 0.059 | 0.307 | 0.063 | 2,384 / 465 | 1.00x | 0.065 | 10% |" \
        in table
    assert "| KeyDoor-v0 | shared_prefix | 38.7 | 0.315 |" in table and "| 700 / 465 | 2.00x |" in table
    assert "`python u`" in table and "3 interleaved updates" in table


def test_the_smollm2_rl_runs_table_shows_how_far_each_run_got(tmp_path):
    cpu = {f"cpu_{part}_seconds": value for part, value in
           (("rollout", 12.7), ("old_logprobs", 0.0), ("ref_logprobs", 0.0), ("forward", 7.7), ("backward", 1.6),
            ("optimizer", 0.005))}
    updates = [{"update_episodes": 16, "cpu_rollout_seconds": 13.2, "cpu_update_seconds": 9.0,
                "success_rate": 0.25 if i < 5 else 0.5} for i in range(10)]
    rl = {"updates": updates, "mean_cpu_seconds_per_update": cpu,
          "cpu_seconds_per_turn": 0.463, "held_out_curve": [{"update": 0, "pass1": 0.0625}, {"update": 5, "pass1": 0.125}]}
    (tmp_path / "rl-seed3").mkdir()
    (tmp_path / "rl-seed3" / "results.json").write_text(json.dumps(
        {"rl": rl, "settings": {"updates": 20, "eval_t": 2, "eval_tasks": 32}, "provenance": {"command": "python r"}}))
    table = docs_tables.smollm2_rl_runs_table(tmp_path)
    assert ("| rl-seed3 | 10 (20) | 160 | 3.7 | 0.25 → 0.50 | T=2, 32 tasks: 0: 0.06, 5: 0.12 | 12.7 / 7.7 / 1.6 / 0.0 "
            "| 0.46 |" in table)
    assert "`python r`" in table


def _rl_seed(folder, seed, curve):
    cpu = {f"cpu_{part}_seconds": 1.0 for part in
           ("rollout", "old_logprobs", "ref_logprobs", "forward", "backward", "optimizer")}
    updates = [{"update_episodes": 16, "cpu_rollout_seconds": 30.0, "cpu_update_seconds": 30.0}] * 4
    rl = {"updates": updates, "mean_cpu_seconds_per_update": cpu, "cpu_seconds_per_turn": 0.5,
          "rl_pass1": curve[-1], "held_out_curve": [{"update": 2 * i, "pass1": v} for i, v in enumerate(curve)]}
    sft = {"turns": 166, "reply_loss_after": 0.2, "config": {"source": "random", "steps": 40, "batch_size": 8}}
    (folder / f"rl-seed{seed}").mkdir()
    (folder / f"rl-seed{seed}" / "results.json").write_text(json.dumps(
        {"rl": rl, "sft": sft, "settings": {"seed": seed, "updates": 4, "eval_t": 2, "eval_tasks": 32,
                                            "budget": "mix:2,3,4", "train_arg": ["advantage=gigpo"]},
         "provenance": {"command": f"python r{seed}"}}))


def test_the_smollm2_rl_seeds_table_counts_the_seeds_that_learned_and_averages_their_curves(tmp_path):
    _rl_seed(tmp_path, 0, [0.0, 0.5, 0.875])
    _rl_seed(tmp_path, 1, [0.0, 0.25, 0.5])
    _rl_seed(tmp_path, 2, [0.25, 0.75, 0.8125])
    table = docs_tables.smollm2_rl_seeds_table(tmp_path)
    assert "**2 of 3**" in table and "last values 0.88, 0.50, 0.81" in table
    assert "| 4 | 0.73 [0.23, 1.00] | 0.88, 0.50, 0.81 |" in table
    assert "| 0 | 0.08 [0.00, 0.44] | 0.00, 0.00, 0.25 |" in table
    assert "6.0 in all, 0.50 per turn" in table
    row = docs_tables.smollm2_rl_table_row(tmp_path)
    assert row["seeds"] == 3 and row["successes"] == 70 and row["updates"] == [4] and row["cpu_minutes"] == 4.0
    assert row["advantage"] == "GiGPO" and row["sft"] == "SFT random: 166 turns, 40 steps × 8, reply loss 0.20"
    assert docs_tables.smollm2_rl_table_row(tmp_path / "none") is None


def test_the_smollm2_turns_table_shows_each_states_commands_with_their_shares(tmp_path):
    facts = {"settings": {"model": "runs/sft-random"}, "provenance": {"command": "python t"},
             "sft": {"source": "random", "turns": 166, "steps": 12, "batch_size": 8, "reply_loss_after": 0.26},
             "by_state": {"no key": {"take key": 3, "task's door": 33, "other door": 57, "no command": 7}},
             "won": 0, "episodes": 32, "no_command_replies": [["Action action", 2]]}
    (tmp_path / "turns-sft-random.json").write_text(json.dumps(facts))
    table = docs_tables.smollm2_turns_table(tmp_path)
    assert ("| `runs/sft-random` | random: 166 turns, 12 steps × 8, reply loss 0.26 | no key | 3 (0.03) | 33 (0.33) | "
            "57 (0.57) | 7 (0.07) | 0 / 32 |") in table
    assert "`Action action` × 2" in table and "`python t`" in table


def test_the_smollm2_fewshot_gap_tables_show_each_setting_sampler_and_run_against_its_expected_rate(tmp_path):
    gap = docs_tables._benchmark("smollm2_fewshot_gap")
    assert "(no gap.json yet" in gap.tables(tmp_path / "gap.json")
    mean = {"turn1_take_key": 0.9, "turn2_task_door": 0.1, "turn2_take_key": 0.6, "turn2_other_door": 0.2,
            "win_t2": 0.09}
    report = {"episodes": 20, "provenance": {"command": "python benchmarks/smollm2_fewshot_gap.py", "commit": "abc"},
              "settings": {"eval": {"mean": {"hf": mean, "llama": {**mean, "win_t2": 0.05}}}},
              "observed": {"verifiers-best": {"won": 5, "episodes": 8, "setting": "eval",
                                              "expected_win_t2": {"hf": 0.09, "llama": 0.05},
                                              "binomial_under_expected_llama": gap.binomial_tail(5, 8, 0.05)}},
              "fisher_two_sided_p": {"a vs b": gap.fisher(5, 8, 1, 20)}}
    (tmp_path / "gap.json").write_text(json.dumps(report))
    lines = gap.tables(tmp_path / "gap.json").splitlines()
    assert lines[2] == "| eval | hf (temperature only) | 0.900 | 0.100 | 0.600 | 0.200 | 0.090 |"
    assert lines[3].endswith("| 0.050 |")  # the llama.cpp sampler's own rate
    assert "| verifiers-best | eval | 5 / 8 | 0.4 / 8 | 1.54e-05 | 1 |" in lines  # 5 of 8 at p = 0.05
    assert "a vs b: p = 0.003" in lines[-2]


def test_the_smollm2_agreement_table_counts_each_group_and_names_an_old_file():
    evaluation = docs_tables._benchmark("smollm2_eval")
    assert "older version" in evaluation.agreement_table({"zero": {"prompts": 20}})[0]
    pairs = [{"hf": "Action: take key", "served": "Action: take key", "served_repeat_penalty_1": "Action: take key",
              "hf_action": "take key", "served_action": "take key"},
             {"hf": "open the door.", "served": "open the door", "served_repeat_penalty_1": "open the door.",
              "hf_action": "open the door", "served_action": "open the door"}]
    group = evaluation._agreement_counts("zero", "kd", "first", pairs)
    assert (group["same_text"], group["one_text_starts_the_other"], group["same_action"],
            group["same_text_repeat_penalty_1"]) == (1, 1, 2, 2)
    rows = evaluation.agreement_table({"groups": [group]})
    assert rows[-1] == "| KeyDoor-Budget-v0 | zero | first | 2 | 1 | 1 | 2 | 2 |"


def test_the_scienceworld_table_gives_the_per_round_ratio_range(monkeypatch, tmp_path):
    row = {"backend": "ScienceWorld boil/0", "steps": 38, "rounds": 2, "raw_steps_per_s": 10.0, "ours_steps_per_s": 12.0,
           "ours_over_raw": 1.2, "engine_share": 0.99841, "raw_steps_per_s_by_round": [10.0, 20.0],
           "ours_steps_per_s_by_round": [11.0, 30.0]}
    _use_data(monkeypatch, tmp_path, "scienceworld/backend-throughput.json",
              {"provenance": {"command": "python x"}, "rows": [row]})
    assert "| ScienceWorld boil/0 | 38 × 2 | 10.0 | 12.0 | 1.20 | 1.10–1.50 | 0.9984 |" in \
        docs_tables.scienceworld_throughput_table()


def test_the_bm25_engines_table_states_the_ratios_from_the_file(monkeypatch, tmp_path):
    report = {"provenance": {"command": "python x"}, "products": 3000, "queries": 300, "rounds": 3,
              "versions": {"bm25s": "1", "rank-bm25": "2"}, "top1_agreement": 0.5,
              "median": {"bm25s": {"build_cpu_s": 0.2, "query_cpu_ms": 0.5},
                         "rank_bm25": {"build_cpu_s": 0.1, "query_cpu_ms": 6.0}}}
    _use_data(monkeypatch, tmp_path, "webshop/bm25-engines.json", report)
    table = docs_tables.webshop_bm25_engines_table()
    assert "**bm25s answers a query 12.0× faster**" in table and "in 0.50× bm25s's time" in table
    assert "| rank-bm25 2 (`BM25Okapi`) | 0.100 | 6.00 |" in table and "top hit for 50% of the queries" in table


def test_the_alfworld_real_engine_table_gives_per_game_rates_and_the_overall_ratio(monkeypatch, tmp_path):
    game = {"index": 3, "id": "look_at/trial_1", "pddl_chars": 12345, "steps": 10,
            "raw": {"reset_s": 2.04, "step_s": 5.0}, "ours": {"reset_s": 2.5, "step_s": 4.0}}
    report = {"provenance": {"command": "python x"}, "split": "valid_seen", "pick": "spread", "steps_per_game": 10,
              "games": [game], "raw_steps_per_s": 2.0, "ours_steps_per_s": 2.5, "ours_over_raw": 1.25,
              "engine_share": 0.998}
    _use_data(monkeypatch, tmp_path, "alfworld-real-engine/results.json", report)
    table = docs_tables.alfworld_real_engine_table()
    assert "| `look_at/trial_1` | 12,345 | 2.0 / 2.5 | 2.00 / 2.50 |" in table
    assert "**ours/raw 1.25**" in table and "our env adds 0.2% per step" in table


def _rollout_run(history: str, compiled: bool, cpu_one: float, cpu_many: float, step_ms: float) -> dict:
    def batch(cpu: float, turns: int) -> dict:
        return {"wall": cpu, "cpu": cpu, "turns": turns, "model_wall": 0.9 * cpu, "model_cpu": 0.96 * cpu,
                "step_ms": step_ms, "run_tokens": 100.0, "reused": 400.0, "new": 48.0}
    return {"history": history, "compiled": compiled, "by_batch": {"1": batch(cpu_one, 40), "32": batch(cpu_many, 320)},
            "shared_episodes": 4, "shared_episodes_identical": True}


def test_the_llm_rollout_table_computes_each_verdict_from_the_file(tmp_path):
    report = {"provenance": {"command": "python x"},
              "settings": {"env_id": "E", "turns": 10, "new_tokens": 48, "batch": 32, "episodes_single": 4,
                           "episodes_batched": 32, "torch_threads": 1},
              "runs": [_rollout_run("replies", False, 2.0, 3.2, 2.5), _rollout_run("append", False, 2.8, 1.6, 3.5)]}
    path = tmp_path / "throughput.json"
    path.write_text(json.dumps(report))
    table = docs_tables.llm_rollout_targets_table(path)
    # batch 1: 50 and 70 CPU-ms per turn; 32: 10 and 5; ratios 5x and 14x; decode 2.5 and 3.5 ms
    assert "| batch 1, CPU-ms per turn | 50 | 70 | ≤ 60: **met** by `replies`, eager |" in table
    assert "| ratio 32 / 1, turns per CPU-second | 5.0× | 14.0× | ≥ 10×: **met** by `append`, eager |" in table
    assert "| 4.0 % (0.40) | 4.0 % (0.20) | < 5 %: **met** |" in table


def test_the_served_table_gives_medians_and_ratios(monkeypatch, tmp_path):
    report = {"provenance": {"command": "python x"}, "env": "ALFWorld-v0", "n_threads": 1, "max_new_tokens": 48,
              "model_build_s": 9.0, "gguf_write_s": 0.05, "gguf_kib": 432.0, "server_startup_s": 1.2,
              "one_request": {"median_latency_s": 0.02, "median_prompt_tokens": 180, "median_reply_tokens": 48,
                              "requests": 10},
              "conversations": 32, "rounds": 3, "completions_per_s_by_round": {"1": [40, 50, 60], "8": [50, 75, 90]},
              "episodes": 8, "turns": 10,
              "episode_turns_per_s": {"prompt_cache_off": {"1": 10.0, "8": 5.0}, "prompt_cache_on": {"1": 10.0, "8": 20.0}}}
    _use_data(monkeypatch, tmp_path, "served/throughput.json", report)
    table = docs_tables.served_throughput_table()
    assert "max_concurrency 1 vs 8 (median of 3 rounds) | 50.0 vs 75.0 (**1.50×**) |" in table
    assert "prompt cache off | 10.0 vs 5.0 (**0.50×**) |" in table and "| 20 ms |" in table


def test_the_process_credit_sums_table_averages_each_budget_and_outcome_before_and_after(tmp_path):
    def trace(budget, outcome, credits):
        return {"budget": budget, "outcome": outcome, "turns": [{"process_credit": c} for c in credits]}

    episodes = {"before": [trace(2, "win", [0.5, 0.0]), trace(2, "timeout", [0.25, 0.25]),
                           trace(2, "timeout", [0.5, -0.5]), trace(4, "timeout", [1.0, 1.0, -2.5])],
                "after": [trace(2, "win", [1.0, 0.5]), trace(2, "timeout", [0.0, -0.5]),
                          trace(2, "timeout", [0.0, 0.0]), trace(4, "timeout", [-1.0, -1.0])]}
    for name, traces in episodes.items():
        (tmp_path / f"{name}-fix.json").write_text(json.dumps(
            {"envs": {"KeyDoor-v0": {"sampled": {"episode_traces": traces}}}}))
    table = docs_tables.process_reward_credit_sums_table(tmp_path)
    assert ("| KeyDoor T=2 / 4 | +0.50 (1 episode) / – | +0.25 / −0.50 (1 episode) | +1.50 (1 episode) / – | "
            "−0.25 / −2.00 (1 episode) |") in table
    assert "no docs/data" in docs_tables.process_reward_credit_sums_table(tmp_path / "none")


def test_the_stopping_rules_table_keeps_the_largest_t_at_budgets_t_and_2t(tmp_path):
    point = {"rule": "no-effect:2", "k": 8, "t": 8, "total_budget": 8.0, "turns": 5.5, "success": 0.5,
             "ci": [0.4, 0.6], "cut_rate": 0.25, "fixed": {"label": "1.00·1×8", "success": 0.45, "ci": [0.3, 0.6]},
             "gain": {"mean": 0.05, "ci": [0.01, 0.09]}}
    run = {"env_id": "E", "policy": "P", "ts": [4, 8], "provenance": {"command": "python x"}, "rule_frontier": [
        point, {**point, "total_budget": 16.0}, {**point, "total_budget": 24.0}, {**point, "t": 4}]}
    (tmp_path / "a.json").write_text(json.dumps(run))
    rows = docs_tables.stopping_rules_table(tmp_path).splitlines()
    assert [row.split(" | ")[2] for row in rows[2:4]] == ["8 (8)", "16 (8)"] and rows[4] == ""
    assert "0.500 [0.40, 0.60] | 25% | 0.450 [0.30, 0.60] (1.00·1×8) | +0.050 [+0.010, +0.090]" in rows[2]
    assert "`python x`" in rows[5]


def test_the_sweep_study_tables_show_rows_before_rl_arms_over_seeds_and_paired_differences(tmp_path):
    cell = {"mean": 0.5, "ci_low": 0.25, "ci_high": 0.75, "values": [0.25, 0.75]}
    diff = {"diff": 0.2, "ci_low": 0.1, "ci_high": 0.3, "significant": True, "seeds": 2}
    report = {
        "provenance": {"command": "python -m agentgym_budget.cli sweep s.toml", "commit": "abc", "dirty": False,
                       "load_average": [1.0, 1.0, 1.0], "cpus": 2, "utc": "now"},
        "eval_tasks": 8, "eval_attempts": 4, "cpu_seconds": 120.0, "arms": {"mix": {"budget": "mix:4,8"}},
        "baselines": {"sft": {"pass_kt": {"K=1,T=4": {"value": 0.4, "ci_low": 0.3, "ci_high": 0.5}},
                              "behaviour": {"probes.agreement": 0.6, "errors_per_episode": 1.25}}},
        "per_seed": {"mix": {"0": {}, "1": {}}}, "pass_kt": {"mix": {"K=1,T=4": cell}},
        "paired_kt": {"mix − fixed8": {"K=1,T=4": diff}},
        "behaviour": {"mix": {"probes.agreement": cell}},
        "behaviour_vs_sft": {"mix": {"probes.agreement": {**diff, "diff": -0.1, "ci_low": -0.2, "ci_high": 0.0,
                                                          "significant": False}}}}
    path = tmp_path / "study.json"
    path.write_text(json.dumps(report))
    table = docs_tables.sweep_study_table(path, ((1, 4), (4, 8)))
    assert "| SFT start | – | 40.0 [30.0, 50.0] | – |" in table
    assert "| RL `mix:4,8` | 2 | 50.0 [25.0, 75.0] | – |" in table
    assert "| mix − fixed8 (points) | 2 | +20.0 [+10.0, +30.0]* | – |" in table
    assert "8 held-out tasks x 4 attempts; 2.0 CPU-minutes over the runs (SFT start, rows and arms)" in table
    behaviour = docs_tables.sweep_behaviour_table(path)
    assert "| SFT start | – | 60.0 | n/a | n/a | n/a | n/a | 1.25 |" in behaviour
    assert "| RL `mix:4,8` − SFT start | 2 | -10.0 [-20.0, +0.0] | n/a" in behaviour
    assert docs_tables.sweep_study_table(tmp_path / "none.json", ((1, 4),)).startswith("(no results file")

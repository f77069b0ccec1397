"""benchmarks/budgetmix_study.py: a tiny run of the study end to end, and its pieces."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym_budget.eval.stats import paired_over_seeds

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "budgetmix_study.py"


def load_study():
    spec = importlib.util.spec_from_file_location("budgetmix_study", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    path = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path  # the script points sys.path[0] at the checkout
    return module


def test_arms_are_the_smoke_recipe_one_flag_apart():
    study = load_study()
    arms = study.arm_overrides([2, 6], [2, 3, 4, 6], 200 * 64, 0.5)
    assert arms == {
        "fixed:2": {"budget": "fixed:2"},
        "fixed:6": {"budget": "fixed:6"},
        "mix": {"budget": "mix:2,3,4,6"},
        "curriculum": {"budget": "curriculum:6->2@12800"},
        "mix+pr": {"budget": "mix:2,3,4,6", "process_reward": "expert_progress", "process_reward_coef": 0.5},
        "mix+gigpo": {"budget": "mix:2,3,4,6", "advantage": "gigpo"},
        "adaptive": {"budget": "adaptive:2,3,4,6"},
    }
    other = study.arm_overrides([4, 8], [4, 5, 6, 8], 100, 0.1)
    assert list(other)[:2] == ["fixed:4", "fixed:8"] and other["curriculum"] == {"budget": "curriculum:8->4@100"}


def test_paired_over_seeds_pairs_by_seed_and_an_arm_against_itself_is_zero():
    a = {0: 0.9, 1: 0.2, 2: 0.6, 3: 0.4}
    same = paired_over_seeds(a, a)
    assert (same["diff"], same["ci_low"], same["ci_high"], same["significant"]) == (0.0, 0.0, 0.0, False)
    # b is a minus 0.1 on each seed: seed spread is large, the paired CI is not
    shifted = paired_over_seeds(a, {s: v - 0.1 for s, v in a.items()})
    assert shifted["diff"] == pytest.approx(0.1) and shifted["ci_low"] == pytest.approx(0.1)
    assert shifted["significant"] and shifted["seeds"] == 4


@pytest.mark.slow  # two arms x one seed x 2 updates of a shrunken smoke run, then its re-run: ~40 s
def test_a_tiny_study_writes_evaluator_results_and_the_comparison_table(tmp_path):
    out = tmp_path / "study"
    command = [sys.executable, str(SCRIPT), "--out", str(out), "--arms", "fixed:2,mix", "--seeds", "0",
               "--updates", "2", "--set", "format_warmup_steps=5", "--set", "tasks_per_update=2",
               "--set", "group_size=2", "--eval-tasks", "3", "--eval-attempts", "1", "--workers", "2"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "total CPU" in done.stdout

    from agentgym_budget.eval import PassKTResult, compare_results

    results = {arm: PassKTResult.load(out / arm / "seed_0" / "held_out_eval" / "passkt.json")
               for arm in ("fixed2", "mix")}
    for result in results.values():
        assert result.ts == (2, 3, 4, 6) and result.ks == (1,) and result.n_tasks == 3
        assert result.config["env_kwargs"]["split"] == "test"  # held-out set-ups
    compare_results(results["fixed2"], results["mix"])  # same tasks: the CLI's paired comparison accepts them

    report = json.loads((out / "budgetmix_study.json").read_text())
    assert list(report["paired"]) == ["mix − fixed:2"]
    assert list(report["paired"]["mix − fixed:2"]) == ["2", "3", "4", "6"]
    assert list(report["pass1"]) == ["fixed:2", "mix"]
    assert report["arms"]["mix"]["budget"] == "mix:2,3,4,6" and report["arms"]["fixed:2"]["budget"] == "fixed:2"
    assert report["cpu_seconds"] > 0

    lines = (out / "budgetmix_study.md").read_text().splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| arm") and
            not line.startswith("| comparison")]
    assert [row.split(" | ")[0] for row in rows] == ["| fixed:2", "| mix", "| mix − fixed:2"]
    assert all(row.count("|") == 6 for row in rows)  # name + 4 budgets
    assert [line for line in lines if line.startswith("| arm")] == ["| arm | T=2 | T=3 | T=4 | T=6 |"]

    # the same command again (an interrupted study re-run) reuses the finished runs instead of training them
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("(finished earlier: reused)") == 2, again.stdout


def test_an_evaluation_that_overlaps_training_is_refused_in_one_line(tmp_path):
    study = load_study()
    with pytest.raises(SystemExit, match=r"^budgetmix_study: arm fixed:2: the evaluation tasks .* overlap the "
                                         r"training ones") as refused:
        study.main(["--out", str(tmp_path), "--arms", "fixed:2", "--set", "env_kwargs={}"])
    assert "\n" not in str(refused.value.code) and not any((tmp_path).iterdir())

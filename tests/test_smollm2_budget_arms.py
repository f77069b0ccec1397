"""``benchmarks/smollm2_budget_arms.py``: arms checked against their runs, rows reused, seeds paired (no model)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import smollm2_budget_arms  # noqa: E402


def _run(tmp_path: Path, name: str, seed: int, budget: str, pass1: dict[str, float]) -> None:
    """A finished run's checkpoint (its recorded config) and the row file an earlier evaluation wrote."""
    import torch

    folder = tmp_path / f"{name}-seed{seed}" / "rl" / "checkpoints" / "update_000002"
    folder.mkdir(parents=True)
    torch.save({"config": {"budget": budget, "model": "runs/sft", "advantage": "gigpo"}}, folder / "trainer_state.pt")
    settings = {"model": "runs/sft", "adapter": str(folder), "ts": "2,4", "tasks": 4, "prompt": "short", "seed": 0}
    row = {"settings": settings, "provenance": {"command": f"python eval {name} {seed}"}, "eval_cpu_seconds": 5.0,
           "held_out_pass1": {t: {"pass1": v} for t, v in pass1.items()},
           "rl": {"config": {"advantage": "gigpo"}, "cpu_seconds": 60.0, "success_rate": [0.5, 1.0]}}
    out = tmp_path / "runs-results" / name / f"seed{seed}"
    out.mkdir(parents=True)
    (out / "results.json").write_text(json.dumps({"settings": {"work": str(tmp_path / f"{name}-seed{seed}")},
                                                  "provenance": {"command": f"python rl {name} {seed}"}}))
    rows = tmp_path / "rows"
    rows.mkdir(exist_ok=True)
    (rows / f"{name}-seed{seed}.json").write_text(json.dumps(row))


def test_the_study_pairs_each_seed_of_the_first_arm_with_the_same_seed_of_the_others(tmp_path: Path) -> None:
    for seed, (mix, fixed) in enumerate([(0.75, 0.25), (1.0, 0.5), (0.5, 0.5)]):
        _run(tmp_path, "mix234", seed, "mix:2,3,4", {"2": mix, "4": 1.0})
        _run(tmp_path, "fixed4", seed, "fixed:4", {"2": fixed, "4": 1.0})
    results = tmp_path / "study.json"
    report = smollm2_budget_arms.main([
        "--arm", f"mix:2,3,4={tmp_path}/mix234-seed{{seed}}", "--arm", f"fixed:4={tmp_path}/fixed4-seed{{seed}}",
        "--seeds", "0,1,2", "--update", "2", "--ts", "2,4", "--tasks", "4", "--out", str(tmp_path / "rows"),
        "--runs-results", str(tmp_path / "runs-results"), "--results", str(results)])
    paired = report["paired"]["mix:2,3,4 − fixed:4"]
    assert paired["2"]["diff"] == pytest.approx(1 / 3) and paired["4"]["diff"] == 0.0
    assert report["pass1"]["fixed:4"]["2"]["values"] == [0.25, 0.5, 0.5]
    assert report["per_seed"]["mix:2,3,4"]["1"]["eval_command"] == "python eval mix234 1"  # the row was reused
    assert report["per_seed"]["fixed:4"]["2"]["run_command"] == "python rl fixed4 2"  # the run's own results file
    assert report["per_seed"]["mix:2,3,4"]["1"]["train_success_last20"] == pytest.approx(1.5 / 20)
    assert json.loads(results.read_text())["provenance"]["command"].startswith("python benchmarks/smollm2_budget")


def test_an_arm_whose_run_trained_with_another_budget_is_refused(tmp_path: Path) -> None:
    _run(tmp_path, "fixed4", 0, "fixed:2", {"2": 0.5})
    with pytest.raises(SystemExit, match="trained with budget 'fixed:2', not the arm's 'fixed:4'"):
        smollm2_budget_arms.checkpoint(tmp_path / "fixed4-seed0", 2, "fixed:4")
    with pytest.raises(SystemExit, match="no checkpoint"):
        smollm2_budget_arms.checkpoint(tmp_path / "fixed4-seed0", 3, "fixed:4")
    with pytest.raises(SystemExit, match="expected BUDGET=RUN_FOLDER"):
        smollm2_budget_arms.parse_arm("fixed:4=runs/fixed4-seed0")

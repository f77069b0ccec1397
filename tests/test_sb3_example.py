"""examples/sb3_maskable_ppo_budgetmix.py end to end on the household env, for a few thousand steps."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("sb3_contrib")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sb3_maskable_ppo_budgetmix.py"


def load_example():
    spec = importlib.util.spec_from_file_location("sb3_maskable_ppo_budgetmix", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # 2 x 2048 PPO steps on ALFWorld + evaluation: ~40 s on an idle 2-core machine
def test_example_trains_fixed_and_mix_and_writes_passkt_heatmaps(tmp_path: Path) -> None:
    example = load_example()
    args = example.parse_args(["--total-timesteps", "2048", "--n-envs", "4", "--games", "2", "--eval-tasks", "3",
                               "--attempts", "2", "--ts", "5", "20", "--out", str(tmp_path)])
    summary = example.run(args)
    assert set(summary["pass_at_1"]) == {"fixed", "mix"}
    assert all(0.0 <= value <= 1.0 for row in summary["pass_at_1"].values() for value in row.values())
    for name in ("heatmap_fixed.png", "heatmap_mix.png", "heatmap_mix_minus_fixed.png", "summary.json",
                 "fixed/passkt.json", "mix/passkt.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    result = json.loads((tmp_path / "mix" / "passkt.json").read_text())
    assert result["mode"] == "per_t"  # the policy reads the budget: one rollout per T
    assert json.loads((tmp_path / "summary.json").read_text())["args"]["mix_budget"] == "mix:5,10,20,50"


def test_example_smoke_run(tmp_path: Path) -> None:
    """The fast variant: one PPO rollout per training run, one evaluation episode per budget."""
    example = load_example()
    args = example.parse_args(["--total-timesteps", "128", "--n-envs", "1", "--games", "1", "--eval-tasks", "1",
                               "--attempts", "1", "--ts", "3", "--out", str(tmp_path)])
    summary = example.run(args)
    assert set(summary["pass_at_1"]) == {"fixed", "mix"}
    assert (tmp_path / "heatmap_mix_minus_fixed.png").exists()

"""Pass@(K,T) on the embedded ALFWorld default (the Quickstart main job)."""

from __future__ import annotations

import json

import gymnasium as gym
import matplotlib.image
import numpy as np
import pytest

import agentgym_budget  # noqa: F401
from agentgym_budget.cli import main
from agentgym_budget.eval import evaluate

ENV_ID = "ALFWorld-Budget-v0"


def _alfworld_usable() -> bool:
    try:
        gym.make(ENV_ID).close()
    except Exception:  # noqa: BLE001 - any failure means: skip, and say why below
        return False
    return True


pytestmark = pytest.mark.skipif(not _alfworld_usable(), reason="gym.make('ALFWorld-Budget-v0') does not work here")


def test_small_grid_on_alfworld_rises_with_k_and_t() -> None:
    result = evaluate(ENV_ID, "noisy-expert", ks=(1, 4), ts=(5, 50), tasks=6, attempts=4, seed=0, bootstrap=100)
    assert result.mode == "shortcut"
    assert result.value(1, 5) <= result.value(1, 50) and result.value(1, 50) <= result.value(4, 50)
    assert result.value(4, 50) > 0
    assert result.metrics["decision_quality"]["turns"] > 0


def test_expert_solves_alfworld_within_fifty_turns() -> None:
    result = evaluate(ENV_ID, "expert", ks=(1,), ts=(50,), tasks=4, attempts=1, bootstrap=0)
    assert result.value(1, 50) >= 0.75


@pytest.mark.slow
def test_quickstart_main_job(tmp_path) -> None:
    """`agentgym-budget eval` with its defaults: 50 tasks x 8 attempts, K 1..8, T 5..50."""
    assert main(["eval", "--out", str(tmp_path), "--no-progress"]) == 0
    data = json.loads((tmp_path / "passkt.json").read_text())
    assert (data["env_id"], data["tasks"], data["attempts"], data["ts"]) == (ENV_ID, 50, 8, [5, 10, 20, 30, 50])
    grid = np.array(data["pass"])
    assert np.all(np.diff(grid, axis=0) >= -1e-12) and np.all(np.diff(grid, axis=1) >= -1e-12)
    assert grid[-1, -1] > grid[0, 0] + 0.2
    image = matplotlib.image.imread(tmp_path / "passkt_heatmap.png")
    assert image.shape[0] > 200 and image.std() > 0.05

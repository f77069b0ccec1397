"""Pass@(K,T) on the embedded ALFWorld default (the Quickstart main job)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

import agentgym_budget  # noqa: F401
from agentgym_budget.cli import main
from agentgym_budget.eval import evaluate

ENV_ID = "ALFWorld-Budget-v0"
# The pure-Python engine (step-identical to the real one, no extra needed, fast enough for tests).
FAST = {"engine": "fast"}
ROOT = Path(__file__).resolve().parents[1]


# No skip here: the fast engine and the bundled games are part of the package, so any failure of
# this file is our bug (the ALFWorld extra is needed only by engine="textworld", not used here).
def test_the_fast_engine_needs_no_alfworld_extra() -> None:
    """A fresh process with ``alfworld`` and ``textworld`` made unimportable still plays a game."""
    script = (
        "import sys; sys.modules['alfworld'] = sys.modules['textworld'] = None\n"
        "import gymnasium as gym, agentgym_budget\n"
        f"env = gym.make({ENV_ID!r}, engine='fast')\n"
        "observation, info = env.reset(seed=0)\n"
        "assert observation and env.step('look')[0]\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, (done.stderr.strip().splitlines() or ["(no stderr)"])[-1]


def test_small_grid_on_alfworld_rises_with_k_and_t() -> None:
    result = evaluate(ENV_ID, "noisy-expert", ks=(1, 4), ts=(5, 50), tasks=6, attempts=4, seed=0, bootstrap=100,
                      env_kwargs=FAST)
    assert result.mode == "shortcut"
    assert result.value(1, 5) <= result.value(1, 50) and result.value(1, 50) <= result.value(4, 50)
    assert result.value(4, 50) > 0
    assert result.metrics["decision_quality"]["turns"] > 0


def test_fixed_expert_solves_alfworld_within_upstreams_200_steps_and_upstreams_default_loses_pick_two_or_sliced() -> None:
    grid = dict(ks=(1,), ts=(200,), tasks=12, attempts=1, bootstrap=0)
    fixed = evaluate(ENV_ID, "expert", env_kwargs={**FAST, "expert_type": "fixed"}, **grid)
    default = evaluate(ENV_ID, "expert", env_kwargs=FAST, **grid)
    assert fixed.value(1, 200) == 1.0
    lost = [game for game, won in zip(default.task_games, default.successes[-1]) if not won]
    # upstream's move bookkeeping: a placed object (or the knife) stays in its inventory
    assert lost and all(game.startswith("pick_two_obj_and_place") or "Sliced-" in game for game in lost), lost


@pytest.mark.slow
def test_quickstart_main_job(tmp_path) -> None:
    """`agentgym-budget eval` with its defaults (50 tasks x 8 attempts, K 1..8, T 5..50), fast engine."""
    assert main(["eval", "--out", str(tmp_path), "--no-progress", "--env-arg", "engine=fast"]) == 0
    data = json.loads((tmp_path / "passkt.json").read_text())
    assert (data["env_id"], data["tasks"], data["attempts"], data["ts"]) == (ENV_ID, 50, 8, [5, 10, 20, 30, 50])
    grid = np.array(data["pass"])
    assert np.all(np.diff(grid, axis=0) >= -1e-12) and np.all(np.diff(grid, axis=1) >= -1e-12)
    assert grid[-1, -1] > grid[0, 0] + 0.2
    image = matplotlib.image.imread(tmp_path / "passkt_heatmap.png")
    assert image.shape[0] > 200 and image.std() > 0.05
    # The behaviour metrics see full expert plans: detours count as errors, tasks fall in plan-length buckets.
    metrics = data["metrics"]
    assert data["config"]["env_kwargs"]["expert_plan_horizon"] == 200 and metrics["plan_lengths_known"]
    assert metrics["error_recovery"]["errors_per_episode"] > 0.5
    assert "unknown" not in metrics["resilience"]["by_plan_length"]


def test_evaluator_asks_alfworld_for_full_plans_unless_told_otherwise() -> None:
    grid = {"ks": (1,), "ts": (50,), "tasks": 3, "attempts": 2, "bootstrap": 0}
    full = evaluate(ENV_ID, "noisy-expert", env_kwargs=FAST, **grid)
    one_step = evaluate(ENV_ID, "noisy-expert", env_kwargs={**FAST, "expert_plan_horizon": 1}, **grid)
    assert full.config["env_kwargs"] == {"expert_plan_horizon": 200, **FAST}
    assert full.metrics["plan_lengths_known"] and not one_step.metrics["plan_lengths_known"]
    assert full.value(1, 50) == one_step.value(1, 50)  # plans are read by the metrics, not by the policy

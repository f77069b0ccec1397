"""benchmarks/alfworld_real_engine.py picks its games by PDDL problem size: the smallest, or spread over the range."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "alfworld_real_engine.py"


def _pick_games():
    spec = importlib.util.spec_from_file_location("alfworld_real_engine", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.pick_games


def test_games_are_picked_smallest_first_or_spread_from_smallest_to_largest():
    pick_games = _pick_games()
    sizes = [50, 10, 40, 20, 30]  # game i has a problem of sizes[i] characters
    env = SimpleNamespace(games=[SimpleNamespace(pddl_problem="x" * n) for n in sizes])
    assert pick_games(env, 2, "smallest") == [1, 3]
    assert pick_games(env, 3, "spread") == [1, 4, 0]  # smallest, median, largest
    assert pick_games(env, 1, "spread") == [1]
    assert pick_games(env, 9, "spread") == [1, 3, 4, 2, 0]

"""Result files (JSON/CSV), the rich table, and the PNG plots."""

from __future__ import annotations

import csv

import gymnasium as gym
import numpy as np
import pytest
from toy_env import CorridorEnv

from agentgym_budget.eval import PassKTResult, difference, evaluate

ENV_ID = "EvalCorridor-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=CorridorEnv, max_episode_steps=6, kwargs={"min_length": 3, "max_length": 12})


@pytest.fixture(scope="module")
def result() -> PassKTResult:
    return evaluate(ENV_ID, "noisy-expert", ks=(1, 2, 4), ts=(4, 8, 16), tasks=6, attempts=4, seed=2,
                    policy_kwargs={"p": 0.5}, bootstrap=200)


def test_json_round_trip(result: PassKTResult, tmp_path) -> None:
    paths = result.save(tmp_path)
    assert [p.name for p in paths] == ["passkt.json", "passkt.csv", "task_counts.csv", "frontier.csv"]
    loaded = PassKTResult.load(tmp_path)
    for kind in ("won", "turns", "tokens"):
        np.testing.assert_array_equal(getattr(loaded.costs, kind), getattr(result.costs, kind))
    np.testing.assert_allclose(loaded.costs.seconds, result.costs.seconds, atol=5e-5)  # kept to 0.1 ms
    assert (loaded.ks, loaded.ts, loaded.mode, loaded.policy) == (result.ks, result.ts, "shortcut", result.policy)
    np.testing.assert_array_equal(loaded.successes, result.successes)
    np.testing.assert_allclose(loaded.mean, result.mean)
    np.testing.assert_allclose(loaded.grid.ci_high, result.grid.ci_high)
    np.testing.assert_allclose(loaded.grid.per_task, result.grid.per_task)
    assert loaded.metrics == result.metrics


def test_load_rejects_other_json(tmp_path) -> None:
    (tmp_path / "x.json").write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="not a Pass@"):
        PassKTResult.load(tmp_path / "x.json")


def test_csv_files_hold_the_grid_and_every_task_count(result: PassKTResult, tmp_path) -> None:
    grid_path, counts_path = result.save_csv(tmp_path)
    rows = list(csv.DictReader(grid_path.open()))
    assert len(rows) == len(result.ks) * len(result.ts)
    row = next(r for r in rows if (r["k"], r["t"]) == ("2", "8"))
    assert float(row["pass"]) == pytest.approx(result.value(2, 8), abs=1e-6)
    counts = list(csv.DictReader(counts_path.open()))
    assert len(counts) == result.n_tasks * len(result.ts)
    for r in counts:
        assert int(r["successes"]) == result.successes[result.ts.index(int(r["t"])), int(r["task"])]
        assert int(r["attempts"]) == 4


def test_table_renders_every_cell(result: PassKTResult) -> None:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(result.table())
    console.print(result.metrics_table())
    text = console.export_text()
    assert f"{result.value(4, 16):.3f}" in text and "mode=shortcut" in text
    assert "expert agreement" in text


def test_difference_uses_shared_cells(result: PassKTResult) -> None:
    other = evaluate(ENV_ID, "expert", ks=(1, 4), ts=(8, 16, 32), tasks=6, attempts=4, seed=2, bootstrap=0)
    ks, ts, diff = difference(result, other)
    assert (ks, ts) == ((1, 4), (8, 16))
    assert diff[0, 1] == pytest.approx(other.value(1, 16) - result.value(1, 16))


def test_plots_are_written_and_readable(result: PassKTResult, tmp_path) -> None:
    import matplotlib.image

    from agentgym_budget.eval.plots import plot_diff_heatmap, save_plots

    paths = save_plots(result, tmp_path)
    paths.append(plot_diff_heatmap(result, result, tmp_path / "diff.png"))
    for path in paths:
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 300
        assert image.std() > 0.05  # not a blank canvas

"""The cost of a (K,T) cell and its frontier: the estimators against brute-force enumeration."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym_budget.eval.cost import (attempt_costs, cell_costs, parallel_cost, run_probabilities,
                                       sequential_cost)
from agentgym_budget.eval.frontier import frontier_of, pareto_mask
from agentgym_budget.eval.passkt import pass_at_k, passkt_grid
from agentgym_budget.episodes.records import EpisodeRecord


def brute_force(costs: list[float], won: list[bool], k: int) -> tuple[float, float, float]:
    """(parallel cost, sequential cost, success) averaged over every order of the attempts, playing its first k."""
    parallel = sequential = success = 0.0
    orders = list(itertools.permutations(range(len(costs))))
    for order in orders:
        first = order[:k]
        parallel += sum(costs[i] for i in first)
        success += any(won[i] for i in first)
        for i in first:  # the retry loop: run until the first win
            sequential += costs[i]
            if won[i]:
                break
    return parallel / len(orders), sequential / len(orders), success / len(orders)


attempt_sets = st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.integers(1, 30), min_size=n, max_size=n), st.lists(st.booleans(), min_size=n, max_size=n),
    st.integers(1, n)))


@settings(max_examples=150, deadline=None)
@given(attempt_sets)
def test_parallel_and_sequential_costs_match_enumeration_of_orders(case) -> None:
    costs, won, k = case
    parallel, sequential, success = brute_force(costs, won, k)
    assert parallel_cost(np.array(costs), k) == pytest.approx(parallel)
    assert sequential_cost(np.array(costs), np.array(won), k) == pytest.approx(sequential)
    # both strategies succeed exactly when Pass@k says
    assert pass_at_k(len(won), sum(won), k) == pytest.approx(success)


@pytest.mark.parametrize("n", range(1, 7))
def test_run_probabilities_are_the_chance_of_being_run(n: int) -> None:
    for failures in range(n + 1):
        for k in range(1, n + 1):
            q_fail, q_win = run_probabilities(n, failures, k)
            won = [i >= failures for i in range(n)]
            runs = np.zeros(n)
            orders = list(itertools.permutations(range(n)))
            for order in orders:
                for i in order[:k]:
                    runs[i] += 1
                    if won[i]:
                        break
            runs /= len(orders)
            assert np.allclose(runs[:failures], q_fail) and np.allclose(runs[failures:], q_win)
            # the expected number of attempts run: sum over j < k of P(the first j all fail)
            assert runs.sum() == pytest.approx(sum(comb(failures, j) / comb(n, j) for j in range(k)))


def test_sequential_never_costs_more_than_parallel_and_equals_it_without_wins() -> None:
    rng = np.random.default_rng(0)
    costs, won = rng.integers(1, 20, size=(50, 8)).astype(float), rng.random((50, 8)) < 0.3
    for k in range(1, 9):
        assert np.all(sequential_cost(costs, won, k) <= parallel_cost(costs, k) + 1e-9)
    assert np.allclose(sequential_cost(costs, np.zeros_like(won), 3), parallel_cost(costs, 3))


def record(task: int, attempt: int, budget: int, won_turn: int | None, turns: int, tokens: int | None = None,
           seconds: float = 1.0) -> EpisodeRecord:
    flags = [0] * turns
    return EpisodeRecord(task, attempt, budget, won_turn, turns, -1, ["a"] * turns, flags, flags, flags, flags,
                         prompt_tokens=tokens, completion_tokens=None if tokens is None else 1, seconds=seconds)


def test_turns_used_stop_at_a_win_or_the_budget_and_unknown_costs_stay_unknown() -> None:
    # shortcut records at T=10: won at 3; ran out; lost at 4 (ended by itself)
    records = [record(0, 0, 10, 3, 3, tokens=30), record(0, 1, 10, None, 10, tokens=100),
               record(0, 2, 10, None, 4, tokens=40)]
    costs = attempt_costs(records, ts=(2, 5, 10), tasks=1, attempts=3)
    assert costs.turns[:, 0].tolist() == [[2, 2, 2], [3, 5, 4], [3, 10, 4]]
    assert costs.won[:, 0].tolist() == [[False] * 3, [True, False, False], [True, False, False]]
    # tokens and seconds only where the record is the episode under T: the 10-turn episode's first 5 turns are not
    assert np.isnan(costs.tokens[1, 0, 1]) and costs.tokens[1, 0, 0] == 31 and costs.tokens[2, 0, 1] == 101
    assert np.isnan(costs.tokens[0, 0]).all() and np.isnan(costs.seconds[0, 0]).all()
    assert costs.known("tokens") and costs.known("turns")
    no_tokens = attempt_costs([record(0, 0, 10, 3, 3)], ts=(10,), tasks=1, attempts=1)
    assert not no_tokens.known("tokens") and no_tokens.known("seconds")


def grid_and_costs(seed: int, tasks: int = 6, attempts: int = 4, ts=(2, 4, 8)):
    rng = np.random.default_rng(seed)
    records = []
    for task in range(tasks):
        for attempt in range(attempts):
            win = int(rng.integers(1, 12))
            won = win <= max(ts)
            records.append(record(task, attempt, max(ts), win if won else None, win if won else max(ts)))
    costs = attempt_costs(records, ts, tasks, attempts)
    successes = costs.won.sum(axis=-1)
    return passkt_grid(successes, attempts, (1, 2, 4), ts, bootstrap=50), costs


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000))
def test_the_frontier_is_monotone_achievable_and_gives_the_best_cell_at_every_level(seed: int) -> None:
    grid, costs = grid_and_costs(seed)
    frontier = frontier_of(grid, costs)
    for strategy in ("parallel", "sequential"):
        cells = frontier.of(strategy, "turns")
        assert len(cells) == 9  # every (K,T) cell is a point
        line = frontier.frontier(strategy, "turns")
        assert line and all(c in cells for c in line)  # only achievable cells
        assert all(a.cost < b.cost and a.success < b.success for a, b in zip(line, line[1:]))
        per_task = cell_costs(costs, (1, 2, 4), "turns", strategy).mean(axis=-1)
        for c in cells:  # the cell's numbers are the grid's and the estimator's
            i, j = (1, 2, 4).index(c.k), grid.ts.index(c.t)
            assert c.success == grid.mean[i, j] and c.cost == pytest.approx(per_task[i, j])
            assert c.ci_low <= c.success <= c.ci_high
        for level in [0.5, *(c.cost for c in cells), 1e9]:
            affordable = [c.success for c in cells if c.cost <= level]
            best = frontier.best(strategy, "turns", level)
            assert (best is None) == (not affordable)
            if best is not None:
                assert best.success == max(affordable) and best.cost <= level


def test_pareto_mask_drops_dominated_and_unknown_points() -> None:
    cost = np.array([1.0, 1.0, 2.0, np.nan, 3.0])
    success = np.array([0.2, 0.3, 0.3, 0.9, 0.5])
    assert pareto_mask(cost, success).tolist() == [False, True, False, False, True]


def test_per_t_runs_know_every_cells_seconds_and_the_shortcut_only_where_episodes_ended() -> None:
    import agentgym_budget  # noqa: F401  (registers the envs)
    from agentgym_budget.eval import evaluate

    args = dict(ks=(1, 2), ts=(1, 2, 4), tasks=4, attempts=2, bootstrap=0)
    per_t = evaluate("KeyDoor-Budget-v0", "noisy-expert", env_kwargs={"show_budget": True}, **args)
    assert per_t.mode == "per_t" and np.isfinite(per_t.costs.seconds).all() and not per_t.costs.known("tokens")
    shortcut = evaluate("KeyDoor-Budget-v0", "noisy-expert", **args)
    ended = shortcut.costs.turns < np.array(args["ts"])[:, None, None]
    assert np.isfinite(shortcut.costs.seconds[ended]).all() and np.isfinite(shortcut.costs.seconds[-1]).all()
    frontier = shortcut.frontier()
    assert {c.t for c in frontier.of("sequential", "seconds")} <= set(args["ts"]) and frontier.kinds()[0] == "turns"


def test_a_transcript_counts_the_tokens_of_a_longer_episodes_first_turns() -> None:
    long = record(0, 0, 10, None, 10, tokens=100)
    long.transcript = [{"prompt_tokens": 8, "completion_tokens": 2}] * 10
    costs = attempt_costs([long], ts=(3, 10), tasks=1, attempts=1)
    assert costs.tokens[:, 0, 0].tolist() == [30.0, 101.0]  # T=10: the record's own totals
    assert np.isnan(costs.seconds[0, 0, 0])  # seconds have no per-turn counts
    long.transcript = [{"prompt_tokens": None, "completion_tokens": 2}] * 10
    assert np.isnan(attempt_costs([long], ts=(3,), tasks=1, attempts=1).tokens).all()

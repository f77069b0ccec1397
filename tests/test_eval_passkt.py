"""The unbiased Pass@K estimator and the Pass@(K,T) grid."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym_budget.eval.passkt import pass_at_k, pass_at_k_array, passkt_grid


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of the k-subsets of n attempts (the first c successful) with a success."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_estimator_matches_enumeration_of_subsets(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            expected = brute_force_pass_at_k(n, c, k)
            assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
            assert pass_at_k_array(n, np.array([c]), k)[0] == pytest.approx(expected, abs=1e-12)


def test_known_values() -> None:
    assert pass_at_k(8, 2, 4) == pytest.approx(1 - comb(6, 4) / comb(8, 4))
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 = c / n
    assert pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(8, 1, 8) == 1.0


@given(n=st.integers(1, 400), data=st.data())
def test_stable_for_large_n_and_vectorised_form_agrees(n: int, data: st.DataObject) -> None:
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    value = pass_at_k(n, c, k)
    assert 0.0 <= value <= 1.0 and np.isfinite(value)
    assert pass_at_k_array(n, np.array([c]), k)[0] == pytest.approx(value, abs=1e-9)
    if n <= 60:  # exact integer arithmetic as the reference
        assert value == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=1e-9)


def test_monotone_in_k_and_c() -> None:
    values = np.array([[pass_at_k(16, c, k) for k in range(1, 17)] for c in range(17)])
    assert np.all(np.diff(values, axis=0) >= -1e-12)
    assert np.all(np.diff(values, axis=1) >= -1e-12)


@pytest.mark.parametrize("n, c, k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_rejects_impossible_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_grid_is_mean_over_tasks_with_stderr_and_ci() -> None:
    successes = np.array([[0, 1, 2, 8], [3, 4, 8, 8]])  # (T, tasks) out of 8 attempts
    grid = passkt_grid(successes, 8, ks=(1, 4), ts=(10, 20), bootstrap=500, seed=1)
    assert grid.mean.shape == grid.stderr.shape == grid.ci_low.shape == (2, 2)
    expected = np.array([[np.mean([pass_at_k(8, c, k) for c in row]) for row in successes] for k in (1, 4)])
    np.testing.assert_allclose(grid.mean, expected)
    k1_t10 = [pass_at_k(8, c, 1) for c in successes[0]]
    assert grid.stderr[0, 0] == pytest.approx(np.std(k1_t10, ddof=1) / 2)
    assert np.all(grid.ci_low <= grid.mean + 1e-12) and np.all(grid.mean <= grid.ci_high + 1e-12)


def test_grid_bootstrap_is_seeded_and_optional() -> None:
    successes = np.random.default_rng(0).integers(0, 9, size=(3, 20))
    a = passkt_grid(successes, 8, (1, 2), (5, 10, 20), seed=3)
    b = passkt_grid(successes, 8, (1, 2), (5, 10, 20), seed=3)
    np.testing.assert_array_equal(a.ci_low, b.ci_low)
    none = passkt_grid(successes, 8, (1, 2), (5, 10, 20), bootstrap=0)
    np.testing.assert_array_equal(none.ci_low, none.mean)


def test_grid_rejects_k_above_attempts_and_bad_shapes() -> None:
    with pytest.raises(ValueError, match="between 1 and the attempts"):
        passkt_grid(np.zeros((1, 3), int), 4, ks=(8,), ts=(5,))
    with pytest.raises(ValueError, match="shape"):
        passkt_grid(np.zeros((2, 3), int), 4, ks=(1,), ts=(5,))

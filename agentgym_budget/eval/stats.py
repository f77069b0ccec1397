"""Uncertainty over tasks and runs: ratio bootstrap, paired bootstrap, Student-t intervals.

Every behaviour metric and every Pass@(K,T) cell is a *ratio over tasks*: per task ``i`` a
numerator ``num[i]`` and a denominator ``den[i]`` (Pass@(K,T): the task's pass@K and 1;
decision quality: the task's expert-matching turns and its turns with a known expert), and
the metric is ``sum(num) / sum(den)``.  Tasks are the independent units, so a bootstrap
resamples tasks (with replacement) and recomputes the ratio:

* :func:`ratio_bootstrap` — the percentile CI of one result's metric;
* :func:`paired_bootstrap` — the CI of ``B - A`` for two results on the *same* tasks: each
  resample draws one set of task indices and applies it to both (a paired, cluster
  bootstrap), so task difficulty cancels out.  A vs A is exactly ``0`` with a ``[0, 0]`` CI;
* :func:`t_interval` — the CI of a mean over a few runs (training seeds), Student-t;
* :func:`wilson_interval` — the CI of a rate over runs (seeds that learned out of seeds run).

A metric defined on fewer than two tasks has no CI (``None``): one task shows no spread.

Example:
    >>> import numpy as np
    >>> num, den = np.array([1.0, 0.0, 2.0]), np.array([1.0, 1.0, 2.0])
    >>> paired_bootstrap(num, den, num, den).as_tuple()
    (0.0, 0.0, 0.0)
    >>> round(t_quantile(0.975, 4), 3)
    2.776
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = ["PairedDifference", "paired_bootstrap", "paired_over_seeds", "ratio", "ratio_bootstrap", "t_interval", "t_quantile",
           "wilson_interval"]


def ratio(num: np.ndarray, den: np.ndarray) -> float | None:
    """``sum(num) / sum(den)`` (``None`` when the denominator is 0)."""
    total = float(np.sum(den))
    return float(np.sum(num)) / total if total else None


def _resampled_ratios(num: np.ndarray, den: np.ndarray, index: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(num, dtype=float)[index].sum(axis=1) / np.asarray(den, dtype=float)[index].sum(axis=1)


def _index(n: int, resamples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def _percentiles(values: np.ndarray, level: float) -> tuple[float | None, float | None]:
    values = values[np.isfinite(values)]
    if not len(values):
        return None, None
    alpha = (1.0 - level) / 2
    low, high = np.quantile(values, [alpha, 1.0 - alpha])
    return float(low), float(high)


def ratio_bootstrap(num: np.ndarray, den: np.ndarray, *, resamples: int = 1000, level: float = 0.95,
                    seed: int = 0) -> tuple[float | None, float | None]:
    """Percentile bootstrap CI over tasks of ``sum(num) / sum(den)`` (resamples without a defined ratio dropped)."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if len(num) != len(den):
        raise ValueError(f"num and den must have one entry per task, got {len(num)} and {len(den)}")
    if ratio(num, den) is None or np.count_nonzero(den) < 2:  # one task: no spread to estimate
        return None, None
    if resamples <= 0:
        value = ratio(num, den)
        return value, value
    return _percentiles(_resampled_ratios(num, den, _index(len(num), resamples, seed)), level)


@dataclass(frozen=True)
class PairedDifference:
    """``b - a`` of one metric on the same tasks, with its paired bootstrap CI."""

    a: float | None
    b: float | None
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    level: float

    @property
    def significant(self) -> bool:
        """Whether the CI excludes 0."""
        return self.ci_low is not None and self.ci_high is not None and (self.ci_low > 0 or self.ci_high < 0)

    def as_tuple(self) -> tuple[float | None, float | None, float | None]:
        return self.diff, self.ci_low, self.ci_high


def paired_bootstrap(num_a: np.ndarray, den_a: np.ndarray, num_b: np.ndarray, den_b: np.ndarray, *,
                     resamples: int = 1000, level: float = 0.95, seed: int = 0) -> PairedDifference:
    """Paired percentile bootstrap over tasks of ``ratio(b) - ratio(a)`` (task ``i`` is the same in both).

    Both ratios are computed from the same resampled task indices by the same operations, so
    identical inputs give exactly ``0`` in every resample.  Resamples where either ratio is
    undefined (a zero denominator) are dropped.
    """
    arrays = [np.asarray(x, dtype=float) for x in (num_a, den_a, num_b, den_b)]
    if len({len(x) for x in arrays}) != 1:
        raise ValueError(f"paired arrays need one entry per task each, got lengths {[len(x) for x in arrays]}")
    a, b = ratio(arrays[0], arrays[1]), ratio(arrays[2], arrays[3])
    if a is None or b is None:
        return PairedDifference(a, b, None, None, None, level)
    diff = b - a
    if np.count_nonzero((arrays[1] != 0) | (arrays[3] != 0)) < 2:  # one task: no spread to estimate
        return PairedDifference(a, b, diff, None, None, level)
    if resamples <= 0:
        return PairedDifference(a, b, diff, diff, diff, level)
    index = _index(len(arrays[0]), resamples, seed)
    low, high = _percentiles(_resampled_ratios(arrays[2], arrays[3], index) - _resampled_ratios(arrays[0], arrays[1], index),
                             level)
    return PairedDifference(a, b, diff, low, high, level)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (numerical, ~1e-9)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:  # 0.5 + integral of the density over [0, x], Simpson's rule
        grid = np.linspace(0.0, x, 4001)
        density = np.exp(log_c - (df + 1) / 2 * np.log1p(grid**2 / df))
        h = x / 4000
        return 0.5 + h / 3 * (density[0] + density[-1] + 4 * density[1:-1:2].sum() + 2 * density[2:-1:2].sum())

    low, high = 0.0, max(1.0, NormalDist().inv_cdf(p) * 4)
    while cdf(high) < p:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < p else (low, middle)
    return (low + high) / 2


def t_interval(values: np.ndarray, level: float = 0.95) -> tuple[float | None, float | None]:
    """Student-t CI of the mean of ``values`` (one per run); ``(None, None)`` for fewer than 2 runs."""
    values = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if len(values) < 2:
        return None, None
    half = t_quantile(0.5 + level / 2, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
    return float(values.mean() - half), float(values.mean() + half)


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score CI of a rate ``successes / n`` (sound at 0 or n of n, where the normal one is not).

    Example:
        >>> [round(x, 3) for x in wilson_interval(16, 20)]
        [0.584, 0.919]
        >>> wilson_interval(0, 0)
        (0.0, 1.0)
    """
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + level / 2)
    rate = successes / n
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_over_seeds(a: dict[int, float], b: dict[int, float], resamples: int = 2000) -> dict[str, Any]:
    """``a − b`` over the seeds both have: the mean of the per-seed differences and its paired percentile
    bootstrap CI with seeds as the resampled units (:func:`paired_bootstrap`).

    A study's arms pair up by seed (seed ``s`` of every arm starts from the same model), so this is
    the comparison of two arms.  With few seeds the bootstrap has few distinct resamples: read a CI
    that excludes 0 as a hint, not a verdict.

    Example:
        >>> row = paired_over_seeds({0: 0.9, 1: 0.8, 2: 0.7}, {0: 0.5, 1: 0.6, 2: 0.5})
        >>> round(row["diff"], 3), row["seeds"], row["ci_low"] > 0
        (0.267, 3, True)
    """
    seeds = sorted(set(a) & set(b))
    ones = np.ones(len(seeds))
    d = paired_bootstrap(np.array([b[s] for s in seeds]), ones, np.array([a[s] for s in seeds]), ones,
                         resamples=resamples)
    return {"diff": d.diff, "ci_low": d.ci_low, "ci_high": d.ci_high, "significant": d.significant, "seeds": len(seeds)}

"""The unbiased Pass@K estimator and the Pass@(K,T) grid with standard errors and bootstrap CIs.

For one task with ``n`` independent attempts of which ``c`` succeed, the probability that at
least one of ``k`` attempts drawn without replacement succeeds is (Chen et al. 2021)::

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

The product form never builds a large binomial coefficient.  Pass@(K,T) is its mean over
tasks where an attempt counts as a success when the task is won within ``T`` turns.

Example:
    >>> round(pass_at_k(n=8, c=2, k=4), 4)
    0.7857
    >>> pass_at_k(n=8, c=0, k=8), pass_at_k(n=8, c=5, k=4)
    (0.0, 1.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PassKTGrid", "pass_at_k", "pass_at_k_array", "passkt_grid"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased probability that at least one of ``k`` of ``n`` attempts (``c`` successful) succeeds."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n (k attempts out of n), got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k_array(n: int, c: np.ndarray, k: int) -> np.ndarray:
    """:func:`pass_at_k` for an array of success counts ``c`` (same ``n`` for all)."""
    c = np.asarray(c, dtype=np.int64)
    if np.any((c < 0) | (c > n)):
        raise ValueError(f"success counts must lie in [0, n={n}]")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n (k attempts out of n), got n={n}, k={k}")
    # log of prod_{i=n-c+1}^{n} (1 - k/i) = sum over those i of log(1 - k/i); cumulative sums
    # from the top give every c at once.  Terms with i <= k are -inf (the product is 0).
    i = np.arange(1, n + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        logs = np.log(np.clip(1.0 - k / i, 0.0, None))
    tail = np.concatenate([[0.0], np.cumsum(logs[::-1])])  # tail[c] = sum of the c largest i
    return 1.0 - np.exp(tail[c])


@dataclass(frozen=True)
class PassKTGrid:
    """Pass@(K,T) estimates: arrays of shape ``(len(ks), len(ts))``.

    ``per_task`` has shape ``(len(ks), len(ts), n_tasks)``: each task's estimate.  ``stderr``
    is the standard error of the mean over tasks; ``ci_low``/``ci_high`` the percentile
    bootstrap interval over tasks at level ``ci_level``.
    """

    ks: tuple[int, ...]
    ts: tuple[int, ...]
    mean: np.ndarray
    stderr: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    per_task: np.ndarray
    ci_level: float


def passkt_grid(
    successes: np.ndarray,
    attempts: int,
    ks: Sequence[int],
    ts: Sequence[int],
    *,
    bootstrap: int = 1000,
    ci_level: float = 0.95,
    seed: int = 0,
) -> PassKTGrid:
    """Pass@(K,T) for every ``k`` in ``ks`` and ``t`` in ``ts``.

    Args:
        successes: ``(len(ts), n_tasks)`` success counts ``c`` (out of ``attempts``) of each
            task within each budget.
        attempts: ``n``, the attempts per task (every ``k`` must be ``<= n``).
        bootstrap: resamples of the tasks for the CI (``0``: the CI is the mean, no resampling).
        ci_level: the two-sided CI level.
        seed: seed of the bootstrap resampling.
    """
    successes = np.asarray(successes, dtype=np.int64)
    if successes.ndim != 2 or successes.shape[0] != len(ts):
        raise ValueError(f"successes must have shape (len(ts)={len(ts)}, n_tasks), got {successes.shape}")
    n_tasks = successes.shape[1]
    if n_tasks == 0:
        raise ValueError("no tasks: Pass@(K,T) needs at least one task")
    bad_k = [k for k in ks if not 1 <= k <= attempts]
    if bad_k:
        raise ValueError(f"every K must be between 1 and the attempts per task ({attempts}); got {bad_k}")
    per_task = np.stack([np.stack([pass_at_k_array(attempts, row, k) for row in successes]) for k in ks])
    mean = per_task.mean(axis=-1)
    stderr = per_task.std(axis=-1, ddof=1) / np.sqrt(n_tasks) if n_tasks > 1 else np.zeros_like(mean)
    if bootstrap > 0 and n_tasks > 1:
        rng = np.random.default_rng(seed)
        resampled = rng.integers(0, n_tasks, size=(bootstrap, n_tasks))
        boot_means = per_task[..., resampled].mean(axis=-1)  # (k, t, bootstrap)
        alpha = (1.0 - ci_level) / 2
        ci_low, ci_high = np.quantile(boot_means, [alpha, 1.0 - alpha], axis=-1)
    else:
        ci_low, ci_high = mean.copy(), mean.copy()
    return PassKTGrid(tuple(ks), tuple(ts), mean, stderr, ci_low, ci_high, per_task, ci_level)

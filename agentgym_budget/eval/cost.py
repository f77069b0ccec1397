"""What a Pass@(K,T) cell costs: turns, tokens and seconds of K attempts of at most T turns.

One attempt at a task under a budget ``T`` stops at a win, a loss or turn ``T``; it costs the
turns it played (``min(turns, T)``), the tokens its policy reported (prompt + completion) and
its wall seconds.  K attempts are run in one of two ways:

* **parallel** — all K run, whatever happens: cost = the sum of the K attempts' costs;
* **sequential** — one after another, stopping at the first success (at most K): cost = the
  sum over the attempts actually run.

Both succeed exactly when one of the K succeeds, so their success is Pass@(K,T) either way
(:mod:`~agentgym_budget.eval.passkt`); only the cost differs.

**Estimators.**  As ``pass@k`` is the expectation over a uniformly random K-subset of a task's
``n`` recorded attempts, the cost is the expectation of the same experiment: draw a uniformly
random order of the ``n`` attempts and play its first K (the first K of a random order are a
random K-subset).  With ``c_i`` attempt ``i``'s cost under T, ``f`` failures among the ``n``:

* parallel: ``E[cost] = K / n · Σ_i c_i``;
* sequential: attempt ``i`` is run iff it stands at a position ``p <= K`` with only failures
  before it, so ``E[cost] = q_fail · Σ_{i failed} c_i + q_win · Σ_{i won} c_i`` with::

      q_fail = 1/n · Σ_{p=1}^{K} C(f-1, p-1) / C(n-1, p-1)
      q_win  = 1/n · Σ_{p=1}^{K} C(f,   p-1) / C(n-1, p-1)

  (the ``p-1`` attempts before ``i`` are a uniform subset of the other ``n-1``, of which
  ``f-1``, resp. ``f``, failed).  Both are exact expectations over the recorded attempts, hence
  unbiased for the cost of K fresh attempts as ``pass@k`` is for their success; the tests
  check them against enumerating every order.

A cell's cost is the mean of these over tasks.  Tokens and seconds are known for an attempt
under ``T`` only where its record covers exactly that episode: it was run at budget ``T`` or
ended by itself within ``T`` turns (in the shortcut mode a longer episode's first ``T`` turns
have no separate counts) — except tokens when the record carries its transcript (kept in memory
with ``transcripts`` on, the default for LLM policies), whose turns count them one by one.
Elsewhere, and for policies that report no tokens (every non-LLM one), they are unknown
(``nan``), and so is every cost they enter.

Example:
    >>> costs = np.array([3.0, 5.0, 10.0, 10.0])   # four attempts: two won (3 and 5 turns), two ran out at T=10
    >>> won = np.array([True, True, False, False])
    >>> float(parallel_cost(costs, 2)), round(float(sequential_cost(costs, won, 2)), 4)
    (14.0, 10.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentgym_budget.episodes.records import EpisodeRecord, records_for_budget

__all__ = ["COST_KINDS", "STRATEGIES", "AttemptCosts", "attempt_costs", "cell_costs", "parallel_cost",
           "run_probabilities", "sequential_cost"]

#: How attempts are spent: all K at once, or one at a time until the first success.
STRATEGIES = ("parallel", "sequential")
#: What a cell's cost is counted in.
COST_KINDS = ("turns", "tokens", "seconds")


def _subset_ratio(a: int, b: int, j: int) -> float:
    """``C(a, j) / C(b, j)``: the chance that ``j`` of ``b`` items drawn without replacement all lie in a given ``a``."""
    ratio = 1.0
    for m in range(j):
        if a - m <= 0:
            return 0.0
        ratio *= (a - m) / (b - m)
    return ratio


def run_probabilities(n: int, failures: int, k: int) -> tuple[float, float]:
    """``(q_fail, q_win)``: the chance that a given failed, resp. won, attempt is run in a sequential
    retry loop of at most ``k`` over a uniformly random order of the ``n`` attempts.

    Example:
        >>> [round(q, 4) for q in run_probabilities(n=4, failures=2, k=4)]  # a failure runs unless a win precedes it
        [0.3333, 0.5]
        >>> run_probabilities(n=4, failures=4, k=2)  # no win: every attempt runs with chance k/n
        (0.5, 0.0)
    """
    if not 0 <= failures <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= failures <= n and 1 <= k <= n, got n={n}, failures={failures}, k={k}")
    q_fail = sum(_subset_ratio(failures - 1, n - 1, p - 1) for p in range(1, k + 1)) / n if failures else 0.0
    q_win = sum(_subset_ratio(failures, n - 1, p - 1) for p in range(1, k + 1)) / n if failures < n else 0.0
    return q_fail, q_win


def parallel_cost(costs: np.ndarray, k: int) -> np.ndarray:
    """Expected cost of ``k`` attempts all run, over a random ``k``-subset: ``k`` times the mean (last axis)."""
    costs = np.asarray(costs, dtype=float)
    return k * costs.mean(axis=-1)


def sequential_cost(costs: np.ndarray, won: np.ndarray, k: int) -> np.ndarray:
    """Expected cost of at most ``k`` attempts run until the first win, over a random order (last axis: attempts)."""
    costs, won = np.asarray(costs, dtype=float), np.asarray(won, dtype=bool)
    n = costs.shape[-1]
    out = np.empty(costs.shape[:-1])
    for index in np.ndindex(out.shape):
        c, w = costs[index], won[index]
        q_fail, q_win = run_probabilities(n, int(n - w.sum()), k)
        out[index] = q_fail * c[~w].sum() + q_win * c[w].sum()
    return out


@dataclass(frozen=True)
class AttemptCosts:
    """Per budget, task and attempt (arrays of shape ``(len(ts), tasks, attempts)``): whether the
    attempt was won within the budget and its turns, tokens and seconds under it (``nan``: unknown)."""

    ts: tuple[int, ...]
    won: np.ndarray
    turns: np.ndarray
    tokens: np.ndarray
    seconds: np.ndarray

    def of(self, kind: str) -> np.ndarray:
        """The cost array of ``kind`` (one of :data:`COST_KINDS`)."""
        if kind not in COST_KINDS:
            raise ValueError(f"unknown cost {kind!r}: one of {', '.join(COST_KINDS)}")
        return np.asarray(getattr(self, kind), dtype=float)

    def known(self, kind: str) -> bool:
        """Whether any attempt has a known cost of ``kind`` (tokens: only LLM policies report them)."""
        return bool(np.isfinite(self.of(kind)).any())


def attempt_costs(records: Sequence[EpisodeRecord], ts: Sequence[int], tasks: int, attempts: int) -> AttemptCosts:
    """The :class:`AttemptCosts` of an evaluation's records (the record of each attempt at each T:
    :func:`~agentgym_budget.episodes.records.records_for_budget`, as the success counts use)."""
    shape = (len(ts), tasks, attempts)
    won, turns = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=np.int64)
    tokens, seconds = np.full(shape, np.nan), np.full(shape, np.nan)
    for i, t in enumerate(ts):
        for record in records_for_budget(records, t):
            at = (i, record.task, record.attempt)
            won[at], turns[at] = record.won_within(t), min(record.turns, t)
            whole = record.budget == t or record.turns <= t  # the record is the episode under t, not a longer one
            if whole:
                seconds[at] = record.seconds
            tokens[at] = _tokens_within(record, t, whole)
    return AttemptCosts(tuple(ts), won, turns, tokens, seconds)


def _tokens_within(record: EpisodeRecord, t: int, whole: bool) -> float:
    """Prompt + completion tokens of the record's first ``t`` turns (``nan``: not known)."""
    if whole and record.prompt_tokens is not None and record.completion_tokens is not None:
        return float(record.prompt_tokens + record.completion_tokens)
    if record.transcript is None:
        return np.nan
    turns = record.transcript[:t]
    counts = [(turn.get("prompt_tokens"), turn.get("completion_tokens")) for turn in turns]
    known = [p + c for p, c in counts if p is not None and c is not None]
    if len(turns) < min(record.turns, t) or len(known) < len(turns):
        return np.nan
    return float(sum(known))


def cell_costs(costs: AttemptCosts, ks: Sequence[int], kind: str, strategy: str) -> np.ndarray:
    """Per-task expected cost of every cell: shape ``(len(ks), len(ts), tasks)`` (``nan`` where unknown)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
    values = costs.of(kind)
    if strategy == "parallel":
        return np.stack([parallel_cost(values, k) for k in ks])
    return np.stack([sequential_cost(values, costs.won, k) for k in ks])

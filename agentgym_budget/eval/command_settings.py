"""The settings of the ``report``, ``compare``, ``aggregate`` and ``probe`` commands, each a dataclass whose fields make its flags.

As :class:`~agentgym_budget.eval.config.EvalConfig` does for ``eval`` (and ``TrainConfig`` for
``train``): the docstring under a field is its ``--help`` text, and the command line is generated
from the class (:func:`~agentgym_budget.flags.add_arguments`), so a setting is declared once.

Example:
    >>> import argparse
    >>> from agentgym_budget.flags import add_arguments, from_arguments
    >>> parser = add_arguments(argparse.ArgumentParser(), CompareSettings, show_default=False)
    >>> from_arguments(CompareSettings, parser.parse_args(["a/", "b/", "--bootstrap", "200"]))
    CompareSettings(a='a/', b='b/', out='passkt_diff.png', labels=None, bootstrap=200, seed=0, stopping_rules=None)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentgym_budget.eval.config import MAX_BOOTSTRAP
from agentgym_budget.flags import flag, parse_int

__all__ = ["AggregateSettings", "CompareSettings", "ProbeSettings", "ReportSettings"]


@dataclass(frozen=True)
class ReportSettings:
    """``agentgym-budget report``: one self-contained HTML page of an eval's results (or of two, compared)."""

    results: str = field(default="", metadata=flag("results"))
    """an eval's --out folder"""
    results_b: str | None = field(default=None, metadata=flag("results_b", nargs="?", type=str))
    """a second one to compare with the first (b - a)"""
    out: str | None = field(default=None, metadata=flag(type=str))
    """HTML file to write (default RESULTS/report.html)"""
    labels: str | None = field(default=None, metadata=flag(type=str))
    """names of the two runs, comma-separated (default: the policies)"""
    stopping_rules: str | None = field(default=None, metadata=flag(type=str))
    """stopping rules to place on the frontier, comma-separated (e.g. no-progress:3,no-effect:2)"""


@dataclass(frozen=True)
class CompareSettings:
    """``agentgym-budget compare``: paired differences b - a with bootstrap CIs over tasks, and their heatmap."""

    a: str = field(default="", metadata=flag("a"))
    """passkt.json (or its folder) of the baseline"""
    b: str = field(default="", metadata=flag("b"))
    """passkt.json (or its folder) to compare with it"""
    out: str = field(default="passkt_diff.png", metadata=flag(type=str))
    """PNG to write (default passkt_diff.png; a folder: passkt_diff.png in it); the differences go to the same
    name with .json"""
    labels: str | None = field(default=None, metadata=flag(type=str))
    """names of a and b, comma-separated (default: the policies)"""
    bootstrap: int = field(default=1000, metadata=flag(type=parse_int(0, MAX_BOOTSTRAP)))
    """paired bootstrap resamples (default 1000)"""
    seed: int = field(default=0, metadata=flag(type=parse_int(0, 2**63 - 1)))
    """seed of the bootstrap (default 0)"""
    stopping_rules: str | None = field(default=None, metadata=flag(type=str))
    """stopping rules to compare, comma-separated (e.g. never,no-effect:2): each rule's b - a, from the episodes.jsonl
    beside each passkt.json"""


@dataclass(frozen=True)
class AggregateSettings:
    """``agentgym-budget aggregate``: several runs of one recipe (e.g. training seeds): mean, spread, CI per cell."""

    results: tuple[str, ...] = field(default=(), metadata=flag("results", nargs="+", type=str, convert=tuple))
    """passkt.json files (or their folders), one per run"""
    out: str = field(default="aggregate", metadata=flag(type=str))
    """folder for aggregate.json and aggregate.csv"""
    level: float = field(default=0.95, metadata=flag(type=float))
    """CI level (default 0.95)"""


@dataclass(frozen=True)
class ProbeSettings:
    """``agentgym-budget probe``'s own settings (the env, policy and seed are ``eval``'s: ``EvalConfig``'s flags)."""

    probes: int = field(default=50, metadata=flag(type=parse_int(1, 1_000_000)))
    """probe states (default 50; two per task)"""
    horizon: int = field(default=50, metadata=flag(type=parse_int(1, 1_000_000)))
    """expert turns allowed after the probe action"""
    out: str = field(default="results", metadata=flag(type=str))
    """folder for probes.json (default results/)"""
    concurrency: int = field(default=1, metadata=flag(type=parse_int(1, 4096)))
    """probes in flight at once (an LLM policy answers them in one batch); the outcomes do not depend on it"""

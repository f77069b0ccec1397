"""Every setting of an evaluation, in one dataclass: checked once, and the ``eval`` command's flags.

:func:`~agentgym_budget.eval.evaluate.evaluate` takes an :class:`EvalConfig` (or keyword
arguments, which build one); ``agentgym-budget eval`` generates its flags from it
(:mod:`agentgym_budget.flags`), so a value is checked in one place — here — whether it comes
from Python or the command line.  The docstring under a field is its ``--help`` text.

Example:
    >>> config = EvalConfig("KeyDoor-Budget-v0", ks=(1, 2), ts=(2, 4), tasks=3)
    >>> config.attempts, config.ks, config.out
    (2, (1, 2), None)
    >>> EvalConfig(ks=(1, 4), attempts=2)
    Traceback (most recent call last):
    ...
    ValueError: K=4 needs at least 4 attempts per task, got attempts=2
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentgym_budget.episodes.runner import ENV_ERRORS
from agentgym_budget.eval.metrics import DEFAULT_EARLY_TURNS, DEFAULT_PLAN_EDGES
from agentgym_budget.flags import flag, int_list, key_value, no_flag, parse_int
from agentgym_budget.episodes.policy import Policy
from agentgym_budget.wrappers.budget_spec import MAX_BUDGET

__all__ = ["DEFAULT_ENV", "MAX_BOOTSTRAP", "MAX_BOOTSTRAP_VALUES", "MAX_CONCURRENCY", "MAX_EPISODES", "MAX_WORKERS",
           "BACKENDS", "MODES", "EvalConfig"]

DEFAULT_ENV = "ALFWorld-Budget-v0"
MODES = ("auto", "shortcut", "per_t")
#: Where the episodes run: local processes or Ray actors.
BACKENDS = ("local", "ray")
#: The most episodes one evaluation may plan (tasks x attempts x budgets run): the job list and
#: the records live in memory, so a typo such as ``tasks=100000000`` is refused up front.
MAX_EPISODES: int = 1_000_000
#: The most bootstrap values (resamples x tasks x grid cells) one result may draw: ~2 GB of float64.
MAX_BOOTSTRAP_VALUES: int = 250_000_000
#: Upper limits of the size settings (beyond them a run cannot fit in memory or on one machine).
MAX_WORKERS = 256
MAX_CONCURRENCY = 4096
MAX_BOOTSTRAP = 1_000_000

#: The values each integer setting accepts (its flag's parse message names them too).
_RANGES: dict[str, tuple[int, int]] = {
    "tasks": (1, MAX_EPISODES),
    "attempts": (1, MAX_EPISODES),
    "seed": (0, 2**63 - 1),
    "workers": (1, MAX_WORKERS),
    "concurrency": (1, MAX_CONCURRENCY),
    "bootstrap": (0, MAX_BOOTSTRAP),
}


def _int_flag(name: str, *names: str, **kwargs: Any) -> dict[str, Any]:
    return flag(*names, type=parse_int(*_RANGES[name]), **kwargs)


def _pairs_flag(name: str) -> dict[str, Any]:
    """A repeatable ``--NAME KEY=VALUE`` flag whose pairs become the field's dict."""
    return flag(name, action="append", type=key_value, default=[], metavar="KEY=VALUE", convert=dict)


@dataclass
class EvalConfig:
    env_id: str = field(default=DEFAULT_ENV, metadata=flag("--env", "--env-id"))
    """registered env id (default ALFWorld-Budget-v0)"""
    policy: str | Policy = "noisy-expert"
    """policy name: random, expert, noisy-expert, hf (local model), openai (served model)"""
    policy_kwargs: dict[str, Any] = field(default_factory=dict, metadata=_pairs_flag("--policy-arg"))
    """policy option, repeatable (e.g. p=0.5, model=path/to/model)"""
    env_kwargs: dict[str, Any] = field(default_factory=dict, metadata=_pairs_flag("--env-arg"))
    """gym.make option, repeatable (e.g. show_budget=true)"""
    ks: tuple[int, ...] = field(default=(1, 2, 4, 8), metadata=flag("--k", type=int_list))
    """attempts K (default 1,2,4,8)"""
    ts: tuple[int, ...] = field(default=(5, 10, 20, 30, 50), metadata=flag("--t", type=int_list))
    """turn budgets T (default 5,10,20,30,50)"""
    tasks: int = field(default=50, metadata=_int_flag("tasks"))
    """tasks (env reset seeds), default 50"""
    attempts: int | None = field(default=None, metadata=_int_flag("attempts"))
    """attempts N per task (default max(K))"""
    seed: int = field(default=0, metadata=_int_flag("seed"))
    """base seed (default 0)"""
    workers: int = field(default=1, metadata=_int_flag("workers"))
    """worker processes, or Ray actors with --backend ray (there 1 = one per cluster CPU); results do not depend
    on it"""
    concurrency: int = field(default=1, metadata=_int_flag("concurrency", "--concurrency", "--batch-size",
                                                            metavar="N"))
    """episodes in flight per worker: an LLM policy gets all their turns in one batched call (local model) or N
    concurrent requests (served model); results do not depend on it"""
    backend: str = field(default="local", metadata=flag(choices=list(BACKENDS)))
    """local processes, or Ray actors (needs the 'ray' extra)"""
    ray_address: str | None = field(default=None, metadata=flag(type=str))
    """Ray cluster to join with --backend ray (auto, HOST:PORT); default: a local Ray instance"""
    resume: bool = field(default=False, metadata=flag(action="store_true"))
    """keep the episodes already in --out/episodes.jsonl (same settings) and run only the missing"""
    overwrite: bool = field(default=False, metadata=flag(action="store_true"))
    """replace an evaluation already in --out (without it or --resume, such an --out is refused)"""
    env_errors: str = field(default="replay", metadata=flag(choices=list(ENV_ERRORS)))
    """an env that raises: replay its episode once in a fresh env, else record it failed (counted as not won)
    and go on; or raise: abort the run"""
    mode: str = field(default="auto", metadata=flag(choices=list(MODES)))
    """auto: one rollout at max T unless the budget is shown/read (then one per T)"""
    out: str | None = field(default=None, metadata=flag(type=str, default="results"))
    """output folder (default results/)"""
    bootstrap: int = field(default=1000, metadata=_int_flag("bootstrap"))
    """bootstrap resamples per cell (default 1000; 0: no CI resampling)"""
    plots: bool = field(default=True, metadata=flag("--no-plots", action="store_false"))
    """do not write the PNG plots"""
    progress: bool = field(default=True, metadata=flag("--no-progress", action="store_false"))
    """no progress bar"""
    transcripts: bool | None = field(default=None, metadata=flag(action=argparse.BooleanOptionalAction))
    """keep every turn's observation, raw reply and action in --out/transcripts.jsonl.gz (default: on for LLM
    policies, off for random/expert/noisy-expert)"""
    probes: int = field(default=0, metadata=flag(type=int))
    """also measure single-step quality on N fixed probe states (see 'probe'); default 0: none"""
    probe_horizon: int = field(default=50, metadata=flag(type=int))
    """expert turns allowed after a probe action"""
    stopping_rules: str | None = field(default=None, metadata=flag(type=str))
    """after the run, score these stopping rules from its episodes, comma-separated (e.g. no-progress:3,no-effect:2):
    a table against the fixed cells, and --out/stopping.csv"""
    ci_level: float = field(default=0.95, metadata=no_flag())
    """the confidence level of every CI"""
    early_turns: int = field(default=DEFAULT_EARLY_TURNS, metadata=no_flag())
    """parameter of the behaviour metrics (see ``eval.metrics``)"""
    plan_edges: tuple[int, ...] = field(default=DEFAULT_PLAN_EDGES, metadata=no_flag())
    """parameter of the behaviour metrics (see ``eval.metrics``)"""

    def __post_init__(self) -> None:
        self._check_sizes()
        self.ks, self.ts = tuple(int(k) for k in self.ks), tuple(int(t) for t in self.ts)
        self._check_grid()
        if self.attempts is None:
            self.attempts = max(self.ks)  # the fewest attempts every K needs
        self._check_int("attempts")
        if max(self.ks) > self.attempts:
            raise ValueError(f"K={max(self.ks)} needs at least {max(self.ks)} attempts per task, "
                             f"got attempts={self.attempts}")
        if self.tasks * self.attempts * len(self.ts) > MAX_EPISODES:
            raise ValueError(f"tasks={self.tasks} x attempts={self.attempts} x {len(self.ts)} budgets may plan up to "
                             f"{self.tasks * self.attempts * len(self.ts):,} episodes, more than the limit of "
                             f"{MAX_EPISODES:,} per evaluation; split the run (seeds or task ranges) or use fewer "
                             "tasks/attempts")
        self._check_scoring()
        self._check_choices()
        self.env_kwargs, self.policy_kwargs = dict(self.env_kwargs or {}), dict(self.policy_kwargs or {})
        if not isinstance(self.policy, str) and self.policy_kwargs:
            raise ValueError("policy_kwargs apply to a policy given by name, not to a policy object")

    def _check_int(self, name: str) -> None:
        value, (low, high) = getattr(self, name), _RANGES[name]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        if not low <= value <= high:
            raise ValueError(f"{name} must be an integer in {low}..{high:,}, got {value}")

    def _check_sizes(self) -> None:
        for name in ("tasks", "seed", "workers", "concurrency", "bootstrap"):
            self._check_int(name)
        for name in ("probes", "probe_horizon"):
            if getattr(self, name) < (name == "probe_horizon"):
                raise ValueError(f"{name} must be >= {int(name == 'probe_horizon')}, got {getattr(self, name)}")

    def _check_grid(self) -> None:
        if not self.ks or not self.ts:
            raise ValueError("ks and ts must be non-empty")
        for name, values in (("K", self.ks), ("T", self.ts)):
            bad = [v for v in values if v < 1]
            if bad:
                raise ValueError(f"every {name} must be >= 1, got {bad[0]} in {list(values)}")
        if len(set(self.ks)) != len(self.ks) or len(set(self.ts)) != len(self.ts):
            raise ValueError(f"ks and ts must not repeat values, got ks={list(self.ks)}, ts={list(self.ts)}")
        if max(self.ts) > MAX_BUDGET:
            raise ValueError(f"every T must be <= {MAX_BUDGET} (the largest turn budget), got T={max(self.ts)}")

    def _check_scoring(self) -> None:
        """Refuse scoring settings that would fail (or exhaust memory) only after every episode ran."""
        cells = self.tasks * len(self.ks) * len(self.ts)
        if self.bootstrap * cells > MAX_BOOTSTRAP_VALUES:
            raise ValueError(f"bootstrap={self.bootstrap} x {self.tasks} tasks x {len(self.ks) * len(self.ts)} cells "
                             f"is {self.bootstrap * cells:,} resampled values, more than the limit of "
                             f"{MAX_BOOTSTRAP_VALUES:,} (~2 GB); use at most bootstrap={MAX_BOOTSTRAP_VALUES // cells}")
        if not 0.0 < float(self.ci_level) < 1.0:
            raise ValueError(f"ci_level must be in (0, 1), got {self.ci_level!r}")

    def _check_choices(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be 'local' or 'ray', got {self.backend!r}")
        if self.env_errors not in ENV_ERRORS:
            raise ValueError(f"env_errors must be one of {ENV_ERRORS}, got {self.env_errors!r}")
        if self.resume and self.overwrite:
            raise ValueError("--resume and --overwrite exclude each other: keep the saved episodes or replace them")
        if self.resume and self.out is None:
            raise ValueError("resume=True needs out= (the folder holding episodes.jsonl)")
        if self.stopping_rules is not None:
            from agentgym_budget.eval.stopping import parse_rules  # numpy only; a bad spec fails before the run

            parse_rules(self.stopping_rules)

    @classmethod
    def of(cls, config: EvalConfig | str | None = None, policy: str | Policy | None = None, **settings: Any
           ) -> EvalConfig:
        """``config`` with ``settings`` replaced, or a new one from an env id, a policy and ``settings``.

        Example:
            >>> EvalConfig.of("KeyDoor-Budget-v0", "random", tasks=3).policy
            'random'
            >>> EvalConfig.of(EvalConfig(), tsks=3)
            Traceback (most recent call last):
            ...
            ValueError: unknown evaluation setting(s) ['tsks']; EvalConfig has: env_id, policy, policy_kwargs, env_kwargs, ks, ts, tasks, attempts, seed, workers, concurrency, backend, ray_address, resume, overwrite, env_errors, mode, out, bootstrap, plots, progress, transcripts, probes, probe_horizon, stopping_rules, ci_level, early_turns, plan_edges
        """
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(settings) - set(names))
        if unknown:
            raise ValueError(f"unknown evaluation setting(s) {unknown}; EvalConfig has: {', '.join(names)}")
        if policy is not None:
            settings["policy"] = policy
        if isinstance(config, EvalConfig):
            return dataclasses.replace(config, **settings)
        if config is not None:
            settings["env_id"] = config
        return cls(**settings)

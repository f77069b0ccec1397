"""Probe states: single-step decision quality of any policy on one fixed, seeded set of states.

A policy's own episodes show how it decides where *it* wandered; two policies are then judged
on different states.  A **probe set** fixes the states: for task ``i`` (reset seed
``task_seed(seed, i)``, the evaluation's tasks) one state along the expert's trajectory and
one along a reference noisy policy's (``noisy-expert`` with ``p=reference_p``), each at a
turn drawn with a seeded generator, stored as a replayable action prefix (:class:`Probe`).
Any policy is then asked for one action at every probe (:func:`run_probes`):

* **agreement** — the action is the expert's in that state (``info["expert_action"]`` or one
  of ``info["expert_actions"]``);
* **success-to-go** — after the policy's action, the expert plays on; 1 if the task is won
  within ``horizon`` more turns (the policy's action may itself win).

A probe stores a digest of the state's ``info`` (admissible commands, expert action, task):
a replay that reaches a different state is an error, never a silent mismatch.  The policy is
reset at the probe state with a seed of its own and sees that observation and info only (not
the prefix's history).  The set's id (:func:`probe_set_id`) lets ``compare`` pair two results'
probe outcomes only when the probe sets are identical.

Both the trajectories that give the states and the probes themselves are played by the one
episode loop (:func:`~agentgym_budget.episodes.runner.play_episodes`): a probe is an episode that
starts at its state and takes one policy turn, so an LLM policy answers many probes in one batch
(``run_probes(..., concurrency=N)``: N probes in flight, each on its own env copy).

Example:
    >>> import agentgym_budget
    >>> probes = build_probes("KeyDoor-Budget-v0", n=4, seed=0)
    >>> [p.source for p in probes]
    ['expert', 'noisy', 'expert', 'noisy']
    >>> run_probes("KeyDoor-Budget-v0", "expert", probes)["summary"]["agreement"]["value"]
    1.0
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_budget.envs.registration import eval_kwargs_of, make_budget_env
from agentgym_budget.episodes.outcome import episode_over
from agentgym_budget.episodes.policy import BatchPolicy, Policy, PolicyReply, as_batch_policy, make_policy
from agentgym_budget.episodes.records import UNKNOWN, expert_match_of
from agentgym_budget.episodes.runner import play_episodes
from agentgym_budget.eval.results import number_text
from agentgym_budget.eval.stats import ratio, ratio_bootstrap
from agentgym_budget.policies.baselines import NoisyExpertPolicy
from agentgym_budget.seeds import attempt_seed, task_seed

__all__ = ["Probe", "ProbeReplayError", "build_probes", "probe_set_id", "probe_table", "run_probes", "write_probes"]

_PROBE_STREAM = 0x9B0BE  # keeps the probe seeds apart from the evaluation's attempt seeds


class ProbeReplayError(RuntimeError):
    """Replaying a probe's prefix did not reach the stored state (the env is not deterministic)."""


@dataclass(frozen=True)
class Probe:
    """One probe state: reset with ``reset_seed``, then play ``prefix``."""

    task: int
    reset_seed: int
    prefix: tuple[str, ...]
    source: str  # "expert" or "noisy": whose trajectory the state lies on
    digest: str

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "prefix": list(self.prefix)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Probe:
        return cls(**{**data, "prefix": tuple(data["prefix"])})


def _digest(info: dict[str, Any]) -> str:
    state = [sorted(info.get("admissible_commands") or []), info.get("expert_action"), info.get("task")]
    return hashlib.sha1(json.dumps(state, default=str).encode()).hexdigest()[:12]


def probe_set_id(probes: Sequence[Probe]) -> str:
    """A short id of the probe set (its states and prefixes)."""
    payload = json.dumps([p.to_dict() for p in probes], sort_keys=True)
    return hashlib.sha1(payload.encode()).hexdigest()[:12]


def _make_env(env_id: str, env_kwargs: dict[str, Any] | None, budget: int) -> gym.Env:
    return make_budget_env(env_id, budget, **{**eval_kwargs_of(env_id), **(env_kwargs or {})})


class _Trajectory:
    """One episode of a reference policy, noting ``(prefix, digest)`` at every state whose expert action is known."""

    def __init__(self, env: gym.Env, reset_seed: int, policy: BatchPolicy, policy_seed: int, max_turns: int) -> None:
        self.env, self.max_turns = env, max_turns
        self.state = policy.start(policy_seed)
        self.obs, self.info = env.reset(seed=reset_seed)
        self.prefix: list[str] = []
        self.states: list[tuple[tuple[str, ...], str]] = []
        self.done = False
        self._note()

    def _note(self) -> None:
        expert = self.info.get("expert_action")
        if len(self.prefix) >= self.max_turns or not isinstance(expert, str) or not expert:
            self.done = True
        else:
            self.states.append((tuple(self.prefix), _digest(self.info)))

    def step(self, reply: PolicyReply) -> None:
        self.prefix.append(reply.action)
        self.obs, _, terminated, truncated, self.info = self.env.step(reply.action)
        if episode_over(terminated, truncated):
            self.done = True
        else:
            self._note()


def _trajectory(env: gym.Env, reset_seed: int, policy: BatchPolicy, policy_seed: int,
                max_turns: int) -> list[tuple[tuple[str, ...], str]]:
    """``(prefix, digest)`` of every state of one episode where the expert's action is known."""
    ended: list[_Trajectory] = []
    play_episodes(policy, [lambda: _Trajectory(env, reset_seed, policy, policy_seed, max_turns)], 1, ended.append)
    return ended[0].states


def build_probes(env_id: str, n: int, seed: int = 0, env_kwargs: dict[str, Any] | None = None, *,
                 max_turns: int = 30, reference_p: float = 0.5) -> list[Probe]:
    """``n`` probes: probe ``2i`` on the expert's trajectory of task ``i``, ``2i + 1`` on the reference policy's."""
    if n < 1:
        raise ValueError(f"the number of probes must be >= 1, got {n}")
    env = _make_env(env_id, env_kwargs, max_turns + 1)
    expert, noisy = as_batch_policy(make_policy("expert")), as_batch_policy(NoisyExpertPolicy(p=reference_p))
    probes: list[Probe] = []
    try:
        task = 0
        while len(probes) < n:
            reset_seed, policy_seed = task_seed(seed, task), attempt_seed(seed, task, _PROBE_STREAM)
            rng = np.random.default_rng([seed, task, _PROBE_STREAM])
            for source, policy in (("expert", expert), ("noisy", noisy)):
                states = _trajectory(env, reset_seed, policy, policy_seed, max_turns)
                if states and len(probes) < n:
                    prefix, digest = states[int(rng.integers(len(states)))]
                    probes.append(Probe(task, reset_seed, prefix, source, digest))
            task += 1
            if task > 10 * n + 100:
                raise ValueError(f"{env_id} gave too few states with a known expert action to draw {n} probes")
    finally:
        env.close()
    return probes


def _success_to_go(env: gym.Env, info: dict[str, Any], done: bool, horizon: int) -> int:
    for _ in range(horizon):
        if info.get("won") or done:
            break
        expert = info.get("expert_action")
        if not isinstance(expert, str) or not expert:
            break
        _, _, terminated, truncated, info = env.step(expert)
        done = episode_over(terminated, truncated)
    return int(bool(info.get("won")))


class _ProbeInFlight:
    """One probe as an episode: it starts at the probe's state and ends after the policy's one action."""

    def __init__(self, index: int, probe: Probe, env: gym.Env, policy: BatchPolicy, seed: int, env_id: str,
                 horizon: int) -> None:
        self.index, self.env, self.horizon = index, env, horizon
        self.state = policy.start(attempt_seed(seed, probe.task, _PROBE_STREAM + 1 + index))
        self.obs, self.info = env.reset(seed=probe.reset_seed)
        for action in probe.prefix:
            self.obs, _, _, _, self.info = env.step(action)
        if _digest(self.info) != probe.digest:
            raise ProbeReplayError(f"probe {index} (task {probe.task}, {len(probe.prefix)} actions) replays to a "
                                   f"different state on {env_id}: the env is not deterministic for this replay")
        self.done = False
        self.agreement: int | None = None
        self.effect, self.success = "", 0

    def step(self, reply: PolicyReply) -> None:
        match = expert_match_of(reply.action, self.info)
        self.agreement = None if match == UNKNOWN else match
        _, _, terminated, truncated, after = self.env.step(reply.action)
        self.effect = str(after.get("action_effect", ""))
        self.success = _success_to_go(self.env, after, episode_over(terminated, truncated), self.horizon)
        self.done = True


def run_probes(env_id: str, policy: str | Policy, probes: Sequence[Probe], env_kwargs: dict[str, Any] | None = None,
               policy_kwargs: dict[str, Any] | None = None, *, seed: int = 0, horizon: int = 50,
               bootstrap: int = 1000, ci_level: float = 0.95, concurrency: int = 1) -> dict[str, Any]:
    """Ask ``policy`` for one action at every probe; per-probe outcomes and their summary with CIs.

    ``concurrency`` probes are in flight at once (each on an env copy of its own), their actions
    asked in one ``act_batch`` call; the outcomes do not depend on it (each probe's seed is its own).

    Returns ``{"set_id", "probes", "horizon", "agreement", "success_to_go", "effect", "source",
    "summary"}``: per-probe lists (``agreement[j]`` is ``None`` where the expert is unknown) and,
    in ``summary``, each rate over all probes and by source with its bootstrap CI over probes.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    policy_obj = as_batch_policy(make_policy(policy, **(policy_kwargs or {})) if isinstance(policy, str) else policy)
    longest = max((len(p.prefix) for p in probes), default=0)
    envs: list[gym.Env] = []
    free: list[gym.Env] = []
    ended: list[_ProbeInFlight] = []

    def start(index: int, probe: Probe) -> _ProbeInFlight:
        if not free:
            envs.append(_make_env(env_id, env_kwargs, longest + 1 + horizon))
            free.append(envs[-1])
        return _ProbeInFlight(index, probe, free.pop(), policy_obj, seed, env_id, horizon)

    def end(episode: _ProbeInFlight) -> None:
        ended.append(episode)
        free.append(episode.env)

    try:
        play_episodes(policy_obj, [partial(start, i, p) for i, p in enumerate(probes)], concurrency, end)
    finally:
        for env in envs:
            env.close()
    ended.sort(key=lambda episode: episode.index)
    agreement = [episode.agreement for episode in ended]
    success = [episode.success for episode in ended]
    effects = [episode.effect for episode in ended]
    sources = [p.source for p in probes]
    summary: dict[str, Any] = {}
    for name, values in (("agreement", agreement), ("success_to_go", success)):
        for source in ("all", "expert", "noisy"):
            chosen = [v for v, s in zip(values, sources) if source == "all" or s == source]
            num = np.array([v or 0 for v in chosen], dtype=float)
            den = np.array([v is not None for v in chosen], dtype=float)
            low, high = ratio_bootstrap(num, den, resamples=bootstrap, level=ci_level, seed=seed)
            key = name if source == "all" else f"{name}.{source}"
            summary[key] = {"value": ratio(num, den), "ci_low": low, "ci_high": high, "probes": int(den.sum())}
    return {"set_id": probe_set_id(probes), "probes": [p.to_dict() for p in probes], "horizon": horizon,
            "agreement": agreement, "success_to_go": success, "effect": effects, "source": sources,
            "summary": summary}


def write_probes(out: Path, env_id: str, policy: str, outcome: dict[str, Any]) -> Path:
    """Write :func:`run_probes`' ``outcome`` to ``out/probes.json`` (``out`` created if missing)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "probes.json"
    path.write_text(json.dumps({"env_id": env_id, "policy": str(policy), **outcome}, indent=1) + "\n")
    return path


def probe_table(env_id: str, policy: str, outcome: dict[str, Any]) -> Any:
    """A ``rich.table.Table`` of :func:`run_probes`' summary: each rate, its 95% CI and its probes."""
    from rich.table import Table

    table = Table(title=f"Probe states — {env_id}, {policy}\nset {outcome['set_id']}, {len(outcome['source'])} probes")
    for column in ("metric", "value", "95% CI", "probes"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for name, row in outcome["summary"].items():
        ci = "n/a" if row["ci_low"] is None else f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
        table.add_row(name, number_text(row["value"]), ci, str(row["probes"]))
    return table

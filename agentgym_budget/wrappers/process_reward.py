"""The :class:`ProcessReward` wrapper: a dense per-turn signal on top of the sparse success reward.

Text environments reward only success (``1.0`` on the winning turn).  ``ProcessReward`` adds
a dense *process* signal, and reports the two parts separately so a trainer can mix them:

* ``info["outcome_reward"]``: the wrapped env's own reward;
* ``info["process_reward"]``: what this wrapper added (``coef`` times the shaping term);
* the returned reward is their sum.

Every signal is a **potential** ``Φ`` over the episode so far (the history is the Markov
state of a text env).  The built-in signals:

=================== ====================================================================
``expert_progress`` ``Φ = -len(info["expert_plan"])`` (``0`` once ``info["won"]``): the
                    shaping term is the decrease of the expert's remaining plan length
                    (needs a backend with an expert).
``subgoal``         ``Φ = number of distinct subgoals reached``: from ``info["subgoals"]``
                    when the backend reports it, else from a subgoal detector registered for
                    the backend (:func:`register_subgoal_detector`; ``"ALFWorld"`` ships).
``invalid_penalty`` ``Φ = -number of invalid actions``: a turn whose
                    ``info["action_effect"]`` is ``"invalid"`` or ``"no_effect"`` (the
                    env's own fact; for an env without it, an action not among the
                    previous turn's ``admissible_commands``).
callable ``f``      ``f(prev_obs, action, obs, info) -> float`` per turn (e.g. a learned
                    process reward model); ``Φ`` is the running sum of ``f``.
=================== ====================================================================

Two forms:

* ``potential_based=True`` (default) — Ng, Harada & Russell (1999):
  ``F = gamma * Φ(s') - Φ(s)``, with ``Φ := 0`` once the episode has ended
  (``end_potential="terminated"``: at ``terminated`` only, for trainers that bootstrap
  through truncation; ``"done"``: also at ``truncated``, for trainers that treat the budget as
  part of the state and do not bootstrap).  The shaping terms of an episode then sum to
  ``gamma^T Φ(s_T) - Φ(s_0)`` — a constant ``-Φ(s_0)`` when the episode ended — so the optimal
  policy is unchanged.  Use the ``gamma`` of your trainer (``1.0`` for undiscounted GRPO-style
  LLM RL).  With the zero end potential, a signal that only ever grows (``subgoal``) pays
  its bonus during the episode and takes it back on the last turn: shaping changes *when*
  credit arrives, not how much.
* ``potential_based=False`` — the raw signal ``Φ(s') - Φ(s)`` each turn (plan-length
  decrease, +1 per new subgoal, -1 per invalid action, ``f``): denser, but it can change the
  optimal policy (e.g. the agent may prefer collecting subgoals to finishing).

**When each signal is safe, and what it measured here** (experiments/process_reward/README.md,
"What collapsed training"):

* ``expert_progress`` — safe when the backend's expert plan is a shortest path to the *goal*
  and ``info["won"]`` marks the win (then the winning turn is paid, ``Φ = 0``; before this fix the
  toy envs' final plan ``["open red door"]`` made the winning door earn 0, the same as the wrong
  one).  It cannot see a wrong irreversible move coming: opening the wrong door leaves the plan
  as it was (0), and only the trainer's loss rule charges it.  Measured with the trainer's old
  raw credit (no group normalisation), coefficient 0.5 under ``mix``: KeyDoor 5 seeds, held-out
  Pass@(1,T=2) 64.8 vs 77.2 without it; KeyDoorRooms 3 seeds, 0.8 vs 15.4 (collapse).  With the
  winning turn paid and the rewards group-normalised (the credit now called ``"rewards"``):
  KeyDoor 5 seeds, 74.2 vs 67.5 at T=2, no difference resolved; KeyDoorRooms (one seed, traced
  during training) still declined — training success 0.29 → 0.12, doors no longer opened —
  because the returns-to-go of normalised rewards averaged -0.2 to -0.5 per turn and pushed
  nearly every sampled turn down.  With the trainer's default credit (returns-to-go standardised
  per group), paired over 5 seeds × 60 updates: KeyDoor 73.5 vs 67.5 at T=2 (+6.0 points,
  95 % CI [-10.7, +30.0]); KeyDoorRooms 8.5 vs 6.5 at T=4 and 40.0 vs 27.7 at T=8 (+12.3,
  [-4.5, +31.7]), no seed declining — no harm, no help resolved.  GiGPO (``advantage="gigpo"``),
  which needs no signal, was ahead of it on KeyDoor (+10.7, [+3.7, +17.8]) and level on
  KeyDoorRooms.  Safe where the loss rule's charge is wanted: a wrong irreversible move forfeits the episode's progress, so in a group without a
  win it ranks opening a door below stalling at it (a true limit, kept).
* ``subgoal`` — safe when every solution passes through the subgoals (a count that only grows;
  the raw form pays each distinct subgoal once).  Not measured in training here.
* ``invalid_penalty`` — a penalty only (``Φ`` never rises): safe where an invalid action is a
  wasted turn and nothing else; it says nothing about progress.  Not measured in training here.
* a callable (e.g. a learned PRM) — as safe as the model; ``Φ`` is its running sum, so a scorer
  that pays every turn something pays long episodes more (group normalisation in the trainer
  charges that back).  Not measured here.

Whatever the signal, a trainer must give the process credit a baseline: added raw to the
outcome advantage it moves every turn of a group without a win (whose outcome advantage is 0)
and credits each turn with all the progress after it, dithering turns included — the
mechanism of the KeyDoorRooms collapse — and the baseline must hold for the credit itself, not
only for the rewards: returns-to-go of zero-mean rewards are not zero-mean (the KeyDoorRooms
decline).  The trainer normalises the rewards within the group, then standardises the
returns-to-go over the group's turns (``process_reward_norm="group"``,
:func:`agentgym_budget.train.grpo.turn_credits`).

Order with :class:`~agentgym_budget.wrappers.TurnBudget`: both orders give the same rewards
for ``end_potential="terminated"``.  We recommend ``ProcessReward(TurnBudget(env))`` — the
process reward outermost — because only then does ``ProcessReward`` see the budget's
``truncated`` (needed for ``end_potential="done"``) and ``info["turns_left"]`` (for a
callable signal that uses it).  Stacking several ``ProcessReward`` wrappers adds their
process rewards; ``info["outcome_reward"]`` stays the env's own reward.

Example:
    >>> import gymnasium as gym
    >>> import agentgym_budget
    >>> from agentgym_budget.wrappers import ProcessReward, TurnBudget
    >>> env = ProcessReward(TurnBudget(gym.make("KeyDoor-v0"), budget=4), signal="expert_progress")
    >>> obs, info = env.reset(seed=0, options={"task": "red-blue"})
    >>> info["potential"]
    -2.0
    >>> obs, reward, terminated, truncated, info = env.step("take key")
    >>> reward, info["outcome_reward"], info["process_reward"]
    (1.0, 0.0, 1.0)
    >>> obs, reward, terminated, truncated, info = env.step("open red door")
    >>> reward, info["outcome_reward"], info["process_reward"], terminated
    (2.0, 1.0, 1.0, True)

Change log:
    * v0.1.0 - Initially added.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, Protocol, SupportsFloat, runtime_checkable

import gymnasium as gym
import numpy as np

from agentgym_budget.text import NO_STATE_CHANGE, admissibility, family_name, is_invalid

__all__ = [
    "SIGNALS",
    "SUBGOAL_DETECTORS",
    "ExpertProgress",
    "InvalidActionPenalty",
    "ProcessReward",
    "ProcessSignal",
    "StepRewardSum",
    "SubgoalsReached",
    "make_signal",
    "register_subgoal_detector",
]

EndPotential = Literal["terminated", "done"]
StepRewardFn = Callable[[Any, Any, Any, dict[str, Any]], float]
SubgoalDetector = Callable[[str, str, dict[str, Any]], Iterable[str]]


@runtime_checkable
class ProcessSignal(Protocol):
    """A potential over the episode so far: ``reset`` gives ``Φ(s_0)``, ``step`` gives ``Φ(s_t+1)``."""

    def reset(self, obs: Any, info: dict[str, Any]) -> float: ...

    def step(self, prev_obs: Any, action: Any, obs: Any, info: dict[str, Any]) -> float: ...


class ExpertProgress:
    """``Φ = -len(info["expert_plan"])``: progress is the expert's remaining plan getting shorter; ``Φ = 0`` on a win.

    A won game has no plan left, whatever ``expert_plan`` still lists: the toy envs keep the plan
    of their final state (``["open red door"]`` after opening it), so without this the winning
    turn earned no progress — the same 0 as opening the wrong door (the study's KeyDoorRooms trace).
    """

    def reset(self, obs: Any, info: dict[str, Any]) -> float:
        return self._potential(info)

    def step(self, prev_obs: Any, action: Any, obs: Any, info: dict[str, Any]) -> float:
        return self._potential(info)

    @staticmethod
    def _potential(info: dict[str, Any]) -> float:
        if info.get("won"):
            return 0.0
        plan = info.get("expert_plan")
        if plan is None:
            raise KeyError(
                "signal 'expert_progress' needs info['expert_plan'] (the expert's remaining plan); "
                "this env does not report it — use signal='subgoal', 'invalid_penalty' or a callable"
            )
        return -float(len(plan))


class InvalidActionPenalty:
    """``Φ = -count`` of actions that changed nothing: ``info["action_effect"]`` invalid or no_effect."""

    def __init__(self) -> None:
        self._admissible: list[str] | None = None
        self._count = 0

    def reset(self, obs: Any, info: dict[str, Any]) -> float:
        self._admissible = info.get("admissible_commands")
        self._count = 0
        return 0.0

    def step(self, prev_obs: Any, action: Any, obs: Any, info: dict[str, Any]) -> float:
        if self.is_invalid(action, info):
            self._count += 1
        self._admissible = info.get("admissible_commands")
        return -float(self._count)

    def is_invalid(self, action: Any, info: dict[str, Any]) -> bool:
        """The env says the turn changed nothing (``action_effect`` in ``NO_STATE_CHANGE``: invalid
        or no effect), else the action was invalid by :func:`~agentgym_budget.text.is_invalid`
        (the evaluator's definition: not admissible, for an env that reports no effect)."""
        effect = str(info.get("action_effect", ""))
        return effect in NO_STATE_CHANGE or is_invalid(admissibility(action, self._admissible), effect)


class StepRewardSum:
    """``Φ = running sum of f(prev_obs, action, obs, info)``: any per-turn score as a potential."""

    def __init__(self, fn: StepRewardFn) -> None:
        if not callable(fn):
            raise TypeError(f"a process signal function must be callable, got {fn!r}")
        self.fn = fn
        self._total = 0.0

    def reset(self, obs: Any, info: dict[str, Any]) -> float:
        self._total = 0.0
        return 0.0

    def step(self, prev_obs: Any, action: Any, obs: Any, info: dict[str, Any]) -> float:
        value = float(self.fn(prev_obs, action, obs, info))
        if not np.isfinite(value):
            raise ValueError(f"the process signal function returned {value!r}; it must return a finite float")
        self._total += value
        return self._total


# -- subgoals -------------------------------------------------------------------------------
#: Subgoal detectors by backend family name (``"ALFWorld"``, ...): ``(obs, action, info) -> labels``;
#: the env families register theirs (``agentgym_budget.envs.registration``).
SUBGOAL_DETECTORS: dict[str, SubgoalDetector] = {}


def register_subgoal_detector(family: str, detector: SubgoalDetector) -> SubgoalDetector:
    """Declare how to read reached subgoals off a backend's turns (used when it has no ``info["subgoals"]``)."""
    if not callable(detector):
        raise TypeError(f"a subgoal detector must be callable, got {detector!r}")
    SUBGOAL_DETECTORS[family] = detector
    return detector


class SubgoalsReached:
    """``Φ = number of distinct subgoals reached in the episode``.

    The subgoals come from ``info["subgoals"]`` (labels, reached this turn or so far — both
    work, as distinct labels are counted) when the backend reports it, else from ``detector``.
    """

    def __init__(self, detector: SubgoalDetector | None = None) -> None:
        self.detector = detector
        self._reached: set[str] = set()

    def reset(self, obs: Any, info: dict[str, Any]) -> float:
        if "subgoals" not in info and self.detector is None:
            raise KeyError(
                "signal 'subgoal' needs info['subgoals'] from the backend or a subgoal detector; "
                f"register one with register_subgoal_detector(family, fn) (registered: {sorted(SUBGOAL_DETECTORS)}) "
                "or pass ProcessReward(..., detector=fn)"
            )
        self._reached = set(info.get("subgoals", ()))
        return float(len(self._reached))

    def step(self, prev_obs: Any, action: Any, obs: Any, info: dict[str, Any]) -> float:
        if "subgoals" in info:
            self._reached.update(info["subgoals"])
        elif self.detector is not None:
            self._reached.update(self.detector(str(obs), str(action), info))
        return float(len(self._reached))


#: The built-in signals by name.
SIGNALS: dict[str, Callable[..., ProcessSignal]] = {
    "expert_progress": ExpertProgress,
    "subgoal": SubgoalsReached,
    "invalid_penalty": InvalidActionPenalty,
}


def _detector_of(env: gym.Env) -> SubgoalDetector | None:
    spec = env.unwrapped.spec
    return SUBGOAL_DETECTORS.get(family_name(spec.id)) if spec is not None else None


def make_signal(signal: str | StepRewardFn | ProcessSignal, env: gym.Env,
                detector: SubgoalDetector | None = None) -> ProcessSignal:
    """A :class:`ProcessSignal` from a name, a ``f(prev_obs, action, obs, info)`` or a signal object."""
    if isinstance(signal, str):
        if signal not in SIGNALS:
            raise ValueError(f"unknown process signal {signal!r}; use one of {sorted(SIGNALS)}, a callable "
                             "f(prev_obs, action, obs, info) -> float, or a ProcessSignal object")
        if signal == "subgoal":
            return SubgoalsReached(detector or _detector_of(env))
        return SIGNALS[signal]()
    if detector is not None:
        raise ValueError("detector= only applies to signal='subgoal'")
    if isinstance(signal, ProcessSignal):
        return signal
    if callable(signal):
        return StepRewardSum(signal)
    raise TypeError(f"signal must be a name, a callable or a ProcessSignal, got {type(signal).__name__}")


class ProcessReward(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Add ``coef`` times a dense process signal to the reward (see the module docstring).

    Args:
        env: the env to wrap (any Gymnasium env whose ``info`` feeds the signal).
        signal: ``"expert_progress"``, ``"subgoal"``, ``"invalid_penalty"``, a callable
            ``f(prev_obs, action, obs, info) -> float`` or a :class:`ProcessSignal`.
        coef: weight of the process reward (``info["process_reward"]`` includes it).
        potential_based: shaping ``gamma * Φ(s') - Φ(s)`` (policy-invariant) instead of the
            raw ``Φ(s') - Φ(s)``.
        gamma: the discount of the trainer, for the potential form.
        end_potential: when ``Φ`` is taken as 0 in the potential form: ``"terminated"`` or
            ``"done"`` (terminated or truncated).
        detector: for ``signal="subgoal"``: the subgoal detector to use instead of the one
            registered for the env's family.

    ``info`` gains ``outcome_reward``, ``process_reward`` and ``potential`` (``Φ`` of the
    new state, before the end-of-episode zeroing).
    """

    def __init__(
        self,
        env: gym.Env,
        signal: str | StepRewardFn | ProcessSignal = "expert_progress",
        coef: float = 1.0,
        *,
        potential_based: bool = True,
        gamma: float = 1.0,
        end_potential: EndPotential = "terminated",
        detector: SubgoalDetector | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, signal=signal, coef=coef, potential_based=potential_based, gamma=gamma,
            end_potential=end_potential, detector=detector,
        )
        gym.Wrapper.__init__(self, env)
        if not np.isfinite(coef):
            raise ValueError(f"coef must be a finite float, got {coef!r}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
        if end_potential not in ("terminated", "done"):
            raise ValueError(f"end_potential must be 'terminated' or 'done', got {end_potential!r}")
        self.signal: ProcessSignal = make_signal(signal, env, detector)
        self.coef = float(coef)
        self.potential_based = bool(potential_based)
        self.gamma = float(gamma)
        self.end_potential = end_potential
        self._potential = 0.0
        self._obs: Any = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._potential = float(self.signal.reset(obs, info))
        self._obs = obs
        info["potential"] = self._potential
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        potential = float(self.signal.step(self._obs, action, obs, info))
        process = self.coef * self._shaping(potential, terminated, truncated)
        self._potential, self._obs = potential, obs
        # An inner ProcessReward already split the reward: keep its outcome, add to its process part.
        info["outcome_reward"] = info.get("outcome_reward", float(reward))
        info["process_reward"] = info.get("process_reward", 0.0) + process
        info["potential"] = potential
        return obs, float(reward) + process, terminated, truncated, info

    def _shaping(self, potential: float, terminated: bool, truncated: bool) -> float:
        if not self.potential_based:
            return potential - self._potential
        ended = terminated or (truncated and self.end_potential == "done")
        return self.gamma * (0.0 if ended else potential) - self._potential

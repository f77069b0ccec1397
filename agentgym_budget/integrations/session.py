"""One budgeted text episode, held for LLM-RL libraries whose env API is not Gymnasium's.

TRL, verifiers, SkyRL-gym and OpenEnv each drive an environment in their own shape (tool
calls, chat messages, HTTP sessions), but underneath every one of our adapters plays the same
thing: a :func:`~agentgym_budget.envs.registration.make_budget_env` env (any registered id,
any budget spec: fixed, mix, curriculum), optionally under extra wrappers such as
:class:`~agentgym_budget.wrappers.ProcessReward`.  :class:`BudgetSession` holds that env and
the state of its current episode — the last observation and ``info``, whether it
*terminated* (won or lost) or was *truncated* (budget spent), the return so far — so each
adapter is only the translation to its library.

How an episode ended is decided here, once, for every adapter: ``terminated`` if the env ended
it, ``truncated`` only if the budget ran out first.  A step that both ends the episode and
spends the budget (a win on the last turn) comes from ``TurnBudget`` with both flags set, as
Gymnasium's ``TimeLimit`` does; the libraries report a single outcome, and that episode was
won, not cut short, so the session reports it as terminated.

**Fault policy** (one for every adapter).  An env that raises in ``reset`` or ``step`` costs at
most its episode, never the caller's loop.  The raising env is discarded (closed, best effort)
and the episode is played again once in a freshly made env: the same reset seed, options,
budget and curriculum progress, then the commands played so far, each checked to give the same
observation as before (our envs are deterministic given the seed), then the command that met the
fault.  A one-off fault so leaves the episode as it would have been.  If the fresh env raises too
(or the replay does not reproduce the episode), the episode ends as *failed*: ``done``,
``outcome == "failed"``, ``error`` names the fault in one line, and the next ``reset`` plays on
in another fresh env.  ``env_failures`` counts the raises of the current episode (0, 1 or 2) and
each is warned about (``RuntimeWarning``).  How a failed episode is reported is each library's
(TRL: an unscorable ``None`` reward; verifiers: ``state["error"]``; SkyRL: ``done`` with
``metadata["env_failure"]``; OpenEnv: an error answer).  A reset the env refuses for its
arguments (``ValueError``, ``TypeError``, ``KeyError``: an unknown task, a bad budget) is the
caller's error, not a fault: it is raised as is.

**A hanging env** (``step_timeout_s``, off by default): each ``reset``/``step`` of the env then
runs in a daemon thread, and one that has not returned within the deadline is a fault like a
raise (:class:`EnvTimeout`): the episode is replayed in a fresh env under the same deadline.
Python cannot stop a thread, so the abandoned call runs on in its thread, holding the abandoned
env; that thread closes the env when (if ever) the call returns, and being a daemon it never
keeps the process from exiting.  A hung engine therefore costs a thread and its env's memory
until it returns; a deadline a few times the slowest normal step keeps that rare.

The budget itself stays :class:`~agentgym_budget.wrappers.TurnBudget`'s: drawn at ``reset``
from its seeded RNG, forced with ``reset(budget=T)``, shown in the observation with
``show_budget=True``, reported in ``info`` (``budget``, ``turn``, ``turns_left``).

Example:
    >>> import agentgym_budget
    >>> from agentgym_budget.integrations.session import BudgetSession
    >>> session = BudgetSession("KeyDoor-Budget-v0", budget="mix:2,3")
    >>> obs = session.reset(seed=0, budget=2)
    >>> session.budget, session.turns_left, session.done
    (2, 2, False)
    >>> _ = session.step("look"); _ = session.step("look")
    >>> session.done, session.terminated, session.truncated, session.outcome
    (True, False, True, 'truncated')
    >>> session.summary()["budget"], session.summary()["turns"]
    (2, 2)

    A win on the budget's last turn is a win (``TurnBudget`` says terminated *and* truncated):

    >>> _ = session.reset(seed=0, budget=2, options={"task": "red-blue"})
    >>> _ = session.step("take key"); _ = session.step("open red door")
    >>> session.won, session.terminated, session.truncated, session.outcome
    (True, True, False, 'terminated')

    An env whose backend fails for good costs its episode (a wrapper that raises at every step):

    >>> import gymnasium as gym, warnings
    >>> class Broken(gym.Wrapper):
    ...     def step(self, action):
    ...         raise ConnectionError("backend lost")
    >>> session = BudgetSession("KeyDoor-Budget-v0", budget=3, wrappers=[Broken])
    >>> _ = session.reset(seed=0)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     _ = session.step("take key")
    >>> session.done, session.outcome, session.env_failures, session.error
    (True, 'failed', 2, 'ConnectionError: backend lost (at step 1)')
"""

from __future__ import annotations

import functools
import inspect
import json
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from agentgym_budget.envs.base import close_quietly
from agentgym_budget.envs.registration import make_budget_env
from agentgym_budget.episodes.outcome import episode_over
from agentgym_budget.policies.chat import Message
from agentgym_budget.policies.prompting import SYSTEM_PROMPT, Example, chat_messages, turn_message
from agentgym_budget.text import error_line
from agentgym_budget.wrappers.budget import find_turn_budget
from agentgym_budget.wrappers.budget_spec import BudgetSpec

__all__ = [
    "ARGUMENT_ERRORS", "BudgetSession", "EnvTimeout", "EpisodeOver", "ProgressCounters", "ReplayDiverged",
    "SharedProgress", "Wrapper", "call_with_deadline", "end_text", "format_turn", "json_safe", "opening_messages",
    "process_reward_wrapper",
]

#: Something that wraps an env (e.g. ``lambda env: ProcessReward(env, "subgoal", 0.1)``).
Wrapper = Callable[[gym.Env], gym.Env]

#: ``info`` keys every adapter passes on (when present): the env contract's and the budget's.
PUBLIC_INFO_KEYS: tuple[str, ...] = (
    "task", "admissible_commands", "won", "lost", "turn", "budget", "turns_left",
    "outcome_reward", "process_reward",
)


#: What a reset raises when the env refuses its arguments: the caller's error, not an env fault.
ARGUMENT_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, KeyError)


class EpisodeOver(RuntimeError):
    """A step after the episode ended (terminated, truncated or failed); call ``reset`` first."""


class EnvTimeout(TimeoutError):
    """An env call ran past the session's ``step_timeout_s`` (a fault: see the module docstring)."""


class ReplayDiverged(RuntimeError):
    """The fresh env did not reproduce the episode's observations: it cannot take the episode over."""


class SharedProgress:
    """Curriculum progress shared by the envs of an adapter that makes a fresh env per episode.

    ``TurnBudget`` counts the resets (or steps) of its own env; a library that builds a new env
    for every rollout (verifiers) would restart the curriculum at every episode.  Sessions given
    the same ``SharedProgress`` draw their budgets at the progress of all of them together.
    Thread-safe: concurrent rollouts each claim their own episode number.

    >>> import agentgym_budget
    >>> progress = SharedProgress()
    >>> budgets = []
    >>> for seed in range(3):
    ...     session = BudgetSession("KeyDoor-Budget-v0", "curriculum:6->2@2", shared_progress=progress)
    ...     _ = session.reset(seed=seed)
    ...     budgets.append(session.budget)
    >>> budgets, progress.value
    ([6, 4, 2], 3.0)
    """

    def __init__(self, start: float = 0.0) -> None:
        self.value = float(start)
        self._lock = threading.Lock()

    def claim(self, amount: float) -> float:
        """The progress so far, then add ``amount`` (an episode or a step) to it."""
        with self._lock:
            before = self.value
            self.value += amount
            return before


class ProgressCounters:
    """:class:`SharedProgress` counters by key, for an adapter whose library makes a fresh env per episode.

    SkyRL and verl build a new env (and a new agent loop) for every trajectory and pass no progress,
    so a curriculum would stay at its start.  The adapter keeps one counter per env config in its
    process (:meth:`key` of the env id and config), and every session of that config counts on it.
    Thread-safe.

    >>> counters = ProgressCounters()
    >>> key = ProgressCounters.key("KeyDoor-Budget-v0", {"budget": "curriculum:6->2@2"})
    >>> counters.get(key) is counters.get(key), counters.get(key).value
    (True, 0.0)
    """

    def __init__(self) -> None:
        self._counters: dict[str, SharedProgress] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(env_id: str, config: Mapping[str, Any]) -> str:
        """The counter's key: envs made from equal configs share a curriculum (independent of key order)."""
        return json.dumps({**config, "env_id": env_id}, sort_keys=True, default=str)

    def get(self, key: str) -> SharedProgress:
        """The counter of ``key`` (made at 0 on first use)."""
        with self._lock:
            return self._counters.setdefault(key, SharedProgress())

    def clear(self) -> None:
        """Start every counter again at 0 (a new training run in the same process)."""
        with self._lock:
            self._counters.clear()


def process_reward_wrapper(setting: str | Mapping[str, Any], where: str = "config") -> Wrapper:
    """A :class:`~agentgym_budget.wrappers.ProcessReward` wrapper from a config value: a signal name, or a
    mapping of its keyword arguments (``{"signal": "subgoal", "coef": 0.1}``); a wrong argument is a one-line
    ``ValueError`` starting with ``where`` (for adapters whose library passes the env a config, not wrappers).

    >>> import agentgym_budget
    >>> wrap = process_reward_wrapper({"signal": "invalid_penalty", "coef": 0.5})
    >>> type(wrap(make_budget_env("KeyDoor-Budget-v0", 3))).__name__
    'ProcessReward'
    >>> process_reward_wrapper({"signal": "subgoal", "coeff": 1}, "env_config")
    Traceback (most recent call last):
    ...
    ValueError: env_config process_reward: got an unexpected keyword argument 'coeff'
    """
    from agentgym_budget.wrappers import ProcessReward

    kwargs = {"signal": setting} if isinstance(setting, str) else dict(setting)
    try:
        inspect.signature(ProcessReward).bind(None, **kwargs)
    except TypeError as error:
        raise ValueError(f"{where} process_reward: {error}") from None
    return lambda env: ProcessReward(env, **kwargs)


class BudgetSession:
    """A budgeted text env and the state of its current episode.

    Args:
        env_id: any registered text env id (``"ALFWorld-Budget-v0"``, ``"KeyDoor-v0"``, ...).
        budget: a budget spec (``4``, ``"mix"``, ``"mix:10,20"``, ``"curriculum:50->10@2000"``,
            a ``BudgetSchedule``); ``None``: the id's default (``X-Budget-v0`` ids only).
        wrappers: applied in order on top of the budgeted env (e.g. ``ProcessReward``).
        shared_progress: count curriculum progress across sessions (:class:`SharedProgress`)
            instead of per env; a ``progress`` given to :meth:`reset` still wins.
        step_timeout_s: a deadline for each env ``reset``/``step`` (seconds; ``None``: none); a call past it
            is a fault (:class:`EnvTimeout`, see the module docstring's hanging env).
        env_kwargs: passed to :func:`make_budget_env` (``show_budget=True``, env options, ...).
    """

    def __init__(self, env_id: str, budget: BudgetSpec | None = None, *, wrappers: Iterable[Wrapper] = (),
                 shared_progress: SharedProgress | None = None, step_timeout_s: float | None = None,
                 **env_kwargs: Any) -> None:
        if step_timeout_s is not None and not step_timeout_s > 0:
            raise ValueError(f"step_timeout_s must be a positive number of seconds or None, got {step_timeout_s!r}")
        self.step_timeout_s = step_timeout_s
        self.env_id = env_id
        self._make_env = functools.partial(_budgeted_env, env_id, budget, tuple(wrappers), env_kwargs)
        self._install(self._make_env())
        self.shared_progress = shared_progress
        self.observation: str = ""
        self.info: dict[str, Any] = {}
        self.reward: float = 0.0  # the last step's reward
        self.total_reward: float = 0.0
        self.terminated = self.truncated = self.failed = False
        self.started = False
        self.env_failures = 0  # the env's raises during this episode (see the fault policy)
        self.error: str | None = None  # why the episode failed, one line
        # what replays the episode in a fresh env: reset seed, options, progress; commands; observations seen
        self._seed: int | None = None
        self._options: dict[str, Any] = {}
        self._start_progress = 0.0
        self._actions: list[Any] = []
        self._observations: list[Any] = []
        self._discarded = False  # the env raised and was closed: the next use makes a fresh one

    # -- state -----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """The episode has ended: the env terminated it, the budget truncated it or the env failed."""
        return episode_over(self.terminated, self.truncated) or self.failed

    @property
    def outcome(self) -> str:
        """``"running"``, ``"terminated"`` (won or lost, also on the budget's last turn),
        ``"truncated"`` (the budget ran out first) or ``"failed"`` (the env raised, see the fault policy)."""
        if self.failed:
            return "failed"
        return "terminated" if self.terminated else "truncated" if self.truncated else "running"

    @property
    def seed(self) -> int | None:
        """The current episode's reset seed."""
        return self._seed

    @property
    def budget(self) -> int:
        return int(self.info.get("budget", self.turn_budget.budget))

    @property
    def turns_left(self) -> int:
        return int(self.info.get("turns_left", self.turn_budget.turns_left))

    @property
    def turn(self) -> int:
        return int(self.info.get("turn", 0))

    @property
    def won(self) -> bool:
        return bool(self.info.get("won", False))

    @property
    def admissible_commands(self) -> list[str]:
        return list(self.info.get("admissible_commands", []))

    # -- the episode ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None, budget: int | None = None,
              options: Mapping[str, Any] | None = None, progress: float | None = None) -> str:
        """Start an episode; the first observation.

        ``budget=T`` forces its budget, else it is drawn.  ``progress`` sets the curriculum
        progress first (``TurnBudget.set_progress``): adapters whose library makes a fresh env
        per episode pass the trainer's global progress this way (else a :class:`SharedProgress`
        given to the session counts it).
        """
        if progress is None and self.shared_progress is not None:
            progress = self.shared_progress.claim(1.0 if self.turn_budget.core.counts_episodes else 0.0)
        if progress is not None:
            self.turn_budget.set_progress(float(progress))  # carried over to a fresh env, see _ensure_env
        self._seed, self._options = seed, dict(options or {})
        if budget is not None:
            self._options["budget"] = int(budget)
        self._start_progress = self.turn_budget.progress
        self._actions, self._observations = [], []
        self.observation, self.info = "", {}
        self.reward = self.total_reward = 0.0
        self.terminated = self.truncated = self.failed = False
        self.env_failures, self.error, self.started = 0, None, True
        try:
            self._ensure_env()
            result = self._call(self.env.reset, seed=seed, options=self._options or None)
        except ARGUMENT_ERRORS:
            raise
        except Exception as error:  # noqa: BLE001 - any other raise is the env's fault, see the fault policy
            result = self._recover(error, "reset")
        if result is not None:
            self.observation, self.info = result
            self._observations.append(self.observation)
            # a replay must play under the budget this reset drew, even without a seed
            self._options["budget"] = self.budget
        return self.observation

    def step(self, action: str) -> str:
        """Play one command; the observation.  Raises :class:`EpisodeOver` once the episode has ended."""
        if not self.started:
            raise EpisodeOver("the episode has not started: call reset first")
        if self.done:
            raise EpisodeOver(f"the episode is over ({self.outcome}); call reset for a new one")
        self._actions.append(action)
        try:
            result = self._call(self.env.step, action)
        except Exception as error:  # noqa: BLE001 - the env's fault, see the fault policy
            result = self._recover(error, f"step {len(self._actions)}")
        if result is None:  # failed
            self.reward = 0.0
            return self.observation
        self._observations.append(result[0])
        self._take_step(result)
        return self.observation

    def _take_step(self, result: tuple[Any, Any, bool, bool, dict[str, Any]]) -> None:
        self.observation, reward, terminated, truncated, self.info = result
        self.reward = float(reward)
        self.total_reward += self.reward
        # A step can both end the episode and spend the budget (Gymnasium's TimeLimit convention:
        # both flags).  The libraries report one outcome: the env's end wins (see the module docstring).
        self.terminated = bool(terminated)
        self.truncated = bool(truncated) and not self.terminated
        if self.shared_progress is not None and self.turn_budget.core.counts_steps:
            self.shared_progress.claim(1.0)

    # -- the fault policy (module docstring) ---------------------------------------------------------
    def _recover(self, error: Exception, where: str) -> Any:
        """The env raised at ``where``: replay the episode once in a fresh env; its result, or ``None`` if failed."""
        self._count_fault(error, where)
        self._discard_env()
        try:
            self._ensure_env()
            return self._replay()
        except ReplayDiverged as diverged:
            failure: Exception = diverged
        except Exception as again:  # noqa: BLE001 - the fresh env's fault too
            self._count_fault(again, f"{where} (replayed in a fresh env)")
            failure = again
        self._discard_env()
        self.failed, self.error = True, f"{error_line(failure, 300)} (at {where})"
        return None

    def _replay(self) -> Any:
        """Reset the (fresh) env as this episode was, play its commands; the last call's result."""
        self.turn_budget.set_progress(self._start_progress)
        result = self._call(self.env.reset, seed=self._seed, options=self._options or None)
        for action, seen in zip(self._actions, self._observations):
            if result[0] != seen:
                raise ReplayDiverged(f"a fresh env did not reproduce the episode (seed {self._seed}): "
                                     f"the game is not deterministic given its seed")
            result = self._call(self.env.step, action)
        return result

    def _count_fault(self, error: Exception, where: str) -> None:
        self.env_failures += 1
        warnings.warn(f"{self.env_id} (seed {self.seed}) raised at {where}: {error_line(error, 300)}",
                      RuntimeWarning, stacklevel=4)

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``method(*args, **kwargs)`` of the env, within ``step_timeout_s`` when one is set."""
        if self.step_timeout_s is None:
            return method(*args, **kwargs)
        env = self.env
        try:
            return call_with_deadline(functools.partial(method, *args, **kwargs), self.step_timeout_s,
                                      on_abandoned=functools.partial(close_quietly, env))
        except EnvTimeout:
            self._abandoned = True  # its thread closes it once the call returns: not ours to close now
            raise

    def _discard_env(self) -> None:
        """Close the env that raised (best effort: a broken env's close must not hide its fault)."""
        if not self._abandoned:
            close_quietly(self.env)
        self._discarded = True

    def _ensure_env(self) -> None:
        """A fresh env in place of a discarded one, at the curriculum progress the old one had."""
        if self._discarded:
            progress = self.turn_budget.progress
            self._install(self._make_env())
            self.turn_budget.set_progress(progress)

    def _install(self, env: gym.Env) -> None:
        found = find_turn_budget(env)
        if found is None:  # a wrapper that hides the chain: the budget could not be reported
            raise ValueError(f"the wrappers of {self.env_id!r} hide its TurnBudget (keep gym.Wrapper chains)")
        self.env, self.turn_budget, self._discarded, self._abandoned = env, found, False, False

    def public_info(self) -> dict[str, Any]:
        """The JSON-safe part of ``info`` every adapter passes on (:data:`PUBLIC_INFO_KEYS`)."""
        return {k: json_safe(self.info[k]) for k in PUBLIC_INFO_KEYS if k in self.info}

    def summary(self) -> dict[str, Any]:
        """The episode so far, JSON-safe: budget, turns, outcome, return, won (for logs and metrics)."""
        return {
            "env_id": self.env_id, "budget": self.budget, "turns": self.turn, "turns_left": self.turns_left,
            "terminated": self.terminated, "truncated": self.truncated, "outcome": self.outcome,
            "won": self.won, "return": self.total_reward, "failed": self.failed,
            "env_failures": self.env_failures, "error": self.error,
        }

    def close(self) -> None:
        if not self._discarded:  # a discarded env is closed already (or by the thread of its hung call)
            self.env.close()


def _budgeted_env(env_id: str, budget: BudgetSpec | None, wrappers: tuple[Wrapper, ...],
                  env_kwargs: Mapping[str, Any]) -> gym.Env:
    env: gym.Env = make_budget_env(env_id, budget, **env_kwargs)
    for wrap in wrappers:
        env = wrap(env)
    return env


def call_with_deadline(call: Callable[[], Any], timeout_s: float, on_abandoned: Callable[[], None]) -> Any:
    """``call()`` in a daemon thread; its result, or :class:`EnvTimeout` after ``timeout_s`` seconds.

    A call past its deadline runs on (a thread cannot be stopped); when it returns, its thread calls
    ``on_abandoned()`` (e.g. to close the env it was using).

    >>> call_with_deadline(lambda: 2 + 2, 5.0, on_abandoned=lambda: None)
    4
    """
    outcome: dict[str, Any] = {}
    finished, lock = threading.Event(), threading.Lock()
    abandoned = False

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = error
        with lock:
            finished.set()
            late = abandoned
        if late:
            on_abandoned()

    threading.Thread(target=run, name="env-call", daemon=True).start()
    if not finished.wait(timeout_s):
        with lock:
            if not finished.is_set():
                abandoned = True
                raise EnvTimeout(f"the env call did not return within step_timeout_s={timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def format_turn(session: BudgetSession, list_commands: bool = True) -> str:
    """The user message an LLM reads for the current state, as every other path writes it.

    :func:`~agentgym_budget.policies.prompting.turn_message` — the one renderer the evaluator and
    the trainer use: ``Observation: ...``, the remaining budget (when the env was made with
    ``show_budget=True``: ``TurnBudget``'s own text), ``Available commands: ...``
    (``list_commands=True``).  Once the episode is over, how it ended follows instead of the
    commands (an adapter's library may go on asking: the policy path never shows an end).

    >>> import agentgym_budget
    >>> session = BudgetSession("KeyDoor-Budget-v0", budget=3, show_budget=True)
    >>> _ = session.reset(seed=0, options={"task": "red-blue"})
    >>> print(format_turn(session))  # doctest: +ELLIPSIS
    Observation: You are in a hall...
    [Turns left: 3 of 3]
    Available commands: take key, open red door, open blue door
    """
    text = turn_message(session.observation, session.info, list_commands=list_commands and not session.done)
    if session.done:
        text += "\n\n" + end_text(session)
    return text


def opening_messages(session: BudgetSession, system_prompt: str = SYSTEM_PROMPT, examples: Sequence[Example] = (),
                     list_commands: bool = True) -> list[Message]:
    """The conversation's opening as the evaluator writes it: the system message with the task, then
    (few-shot) the worked ``examples``, then the first turn's user message (:func:`format_turn`).

    :func:`~agentgym_budget.policies.prompting.chat_messages` lays it out, as for
    ``LLMPolicy``: with examples, the first user message opens with this episode's task line.
    ``examples``: :func:`~agentgym_budget.policies.few_shot.few_shot_examples` of the adapter's
    ``few_shot_env`` (``()``: zero-shot, the system message and the first turn only).

    >>> import agentgym_budget
    >>> session = BudgetSession("KeyDoor-Budget-v0", budget=3)
    >>> _ = session.reset(seed=0, options={"task": "red-blue"})
    >>> [m["role"] for m in opening_messages(session)]
    ['system', 'user']
    >>> shots = [("open the red door", [("Observation: a hall", "Action: take key")])]
    >>> [m["role"] for m in opening_messages(session, examples=shots)]
    ['system', 'user', 'assistant', 'user']
    """
    return chat_messages(str(session.info.get("task", "")), [(format_turn(session, list_commands), None)],
                         system_prompt=system_prompt, examples=examples)


def end_text(session: BudgetSession) -> str:
    """How the episode ended, in one sentence for the model (``""`` while it runs).

    >>> import agentgym_budget
    >>> session = BudgetSession("KeyDoor-Budget-v0", budget=1)
    >>> _ = session.reset(seed=0); _ = session.step("look")
    >>> end_text(session)
    'The episode is over: the turn budget is spent.'
    """
    if session.failed:
        return f"The episode is over: the game's environment failed ({session.error}); this episode does not count."
    if session.terminated:
        return f"The episode is over: the task was {'completed' if session.won else 'failed'}."
    if session.truncated:
        return "The episode is over: the turn budget is spent."
    return ""


def json_safe(value: Any) -> Any:
    """``value`` if JSON can carry it, else a JSON-safe copy (numpy scalars/arrays, tuples, objects)."""
    try:
        json.dumps(value)
        return value
    except TypeError:
        pass
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    return str(value)

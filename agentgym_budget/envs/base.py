"""The text-environment contract every agentgym_budget environment follows.

A :class:`TextEnv` is a plain :class:`gymnasium.Env` whose observations and actions are
strings (``gymnasium.spaces.Text``).  Backends implement two small hooks,
:meth:`TextEnv._reset_game` and :meth:`TextEnv._step_game`; this base class owns the parts
that must be identical across backends:

* observation and action spaces: ``Text`` over :data:`CHARSET` (printable ASCII, including
  ``\\n`` and ``\\t``) with at most :data:`MAX_OBSERVATION_LENGTH` /
  :data:`MAX_ACTION_LENGTH` characters; backend text is normalised into that charset;
* ``info`` always carries ``admissible_commands`` (``list[str]``), ``won`` (``bool``),
  ``lost`` (``bool``), ``task`` (``str``, the goal) and ``turn`` (``int``, steps since
  ``reset``); backends that know an expert add ``expert_action`` / ``expert_plan`` and
  ``expert_plan_length`` (the length of the expert's *whole* remaining plan from the engine,
  ``None`` when the backend does not know it, e.g. a plan cut at a horizon);
* every ``step`` info carries ``action_effect``, one of
  :data:`~agentgym_budget.text.ACTION_EFFECTS` (``invalid``, ``no_effect``, ``progress``,
  ``neutral``, ``regress``), which the backend sets from its engine state through
  :func:`action_effect` (one rule for all backends); an env that does not set it gets the
  base default (invalid = not among the previous ``admissible_commands``, won/lost/plan
  length otherwise).  The evaluator and ``ProcessReward`` read this fact, never feedback text;
* an action that is not a string raises :class:`TypeError`; any string is a legal turn
  (an unknown command is answered in-game, e.g. ``"Nothing happens."``);
* ``terminated`` is ``True`` only when the task is won or irrecoverably lost; the base env
  never truncates (step limits come from ``TimeLimit`` / :class:`~agentgym_budget.wrappers.TurnBudget`).

Example:
    >>> import gymnasium as gym
    >>> import agentgym_budget
    >>> env = gym.make("ALFWorld-v0")
    >>> obs, info = env.reset(seed=0)
    >>> sorted(k for k in ("admissible_commands", "won", "lost", "task", "turn") if k in info)
    ['admissible_commands', 'lost', 'task', 'turn', 'won']
    >>> obs, reward, terminated, truncated, info = env.step("dance wildly")
    >>> obs, reward, terminated, info["turn"], info["action_effect"]
    ('Nothing happens.', 0.0, False, 1, 'invalid')
"""

from __future__ import annotations

import contextlib
import string
import unicodedata
from abc import ABC, abstractmethod
from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium import spaces

from agentgym_budget.text import ACTION_EFFECTS, INVALID_ACTION_FEEDBACK

__all__ = [
    "ACTION_EFFECTS",
    "CHARSET",
    "INVALID_ACTION_FEEDBACK",
    "MAX_ACTION_LENGTH",
    "MAX_OBSERVATION_LENGTH",
    "REQUIRED_INFO_KEYS",
    "TextEnv",
    "action_effect",
    "close_quietly",
    "text_space",
    "to_charset",
]

#: Characters allowed in observations and actions: printable ASCII plus whitespace.
CHARSET: str = string.printable
#: Longest observation a TextEnv returns; longer backend text is cut (with a marker).
MAX_OBSERVATION_LENGTH: int = 16_384
#: Longest action string the action space samples; longer actions are still accepted.
MAX_ACTION_LENGTH: int = 512
#: Keys present in every ``info`` dict of every TextEnv.
REQUIRED_INFO_KEYS: frozenset[str] = frozenset({"admissible_commands", "won", "lost", "task", "turn"})

_CHARSET_SET = frozenset(CHARSET)
_CUT_MARKER = "\n[...]"


def text_space(max_length: int, min_length: int = 0) -> spaces.Text:
    """A ``gymnasium.spaces.Text`` over :data:`CHARSET`."""
    return spaces.Text(max_length=max_length, min_length=min_length, charset=CHARSET)


def to_charset(text: str, max_length: int = MAX_OBSERVATION_LENGTH) -> str:
    """Map ``text`` into :data:`CHARSET` and cut it to ``max_length`` characters.

    Accents are stripped (``é`` -> ``e``), other characters outside the charset become
    ``?``.  A cut text ends with ``"\\n[...]"`` so the agent can tell it was cut.
    """
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text)
        text = "".join(c for c in text if not unicodedata.combining(c))
    if not _CHARSET_SET.issuperset(text):
        text = "".join(c if c in _CHARSET_SET else "?" for c in text)
    if len(text) > max_length:
        text = text[: max_length - len(_CUT_MARKER)] + _CUT_MARKER
    return text


def action_effect(
    *,
    valid: bool,
    changed: bool = True,
    won: bool = False,
    lost: bool = False,
    plan_before: int | None = None,
    plan_after: int | None = None,
    score_delta: float = 0.0,
) -> str:
    """The ``info["action_effect"]`` of one step from what the engine knows (the rule every backend uses).

    In this order: the engine could not apply the command (``valid=False``) -> ``"invalid"``;
    the step lost the game -> ``"regress"``; it won -> ``"progress"``; the state did not
    change -> ``"no_effect"``; the expert's remaining plan got shorter / longer (both lengths
    known) -> ``"progress"`` / ``"regress"``; the score went up / down -> ``"progress"`` /
    ``"regress"``; else ``"neutral"``.

    Example:
        >>> action_effect(valid=True, plan_before=3, plan_after=2)
        'progress'
        >>> action_effect(valid=True, changed=False), action_effect(valid=False), action_effect(valid=True, lost=True)
        ('no_effect', 'invalid', 'regress')
    """
    if not valid:
        return "invalid"
    if lost:
        return "regress"
    if won:
        return "progress"
    if not changed:
        return "no_effect"
    if plan_before is not None and plan_after is not None and plan_after != plan_before:
        return "progress" if plan_after < plan_before else "regress"
    if score_delta:
        return "progress" if score_delta > 0 else "regress"
    return "neutral"


def _plan_length(info: dict[str, Any]) -> int | None:
    """``expert_plan_length``, else (a backend that predates it) the length of ``expert_plan``."""
    if "expert_plan_length" in info:
        return info["expert_plan_length"]
    plan = info.get("expert_plan")
    return len(plan) if isinstance(plan, (list, tuple)) else None


def close_quietly(env: gym.Env) -> None:
    """Close ``env``, ignoring any error: an env that raised may fail to close too, and that must not
    hide its fault or cost the caller's work (the trainer's update, an adapter's episode).

    Example:
        >>> class Broken:
        ...     def close(self):
        ...         raise OSError("engine gone")
        >>> close_quietly(Broken())  # no error
    """
    with contextlib.suppress(Exception):
        env.close()


class TextEnv(gym.Env[str, str], ABC):
    """Base class of every text environment in agentgym_budget (see the module docstring).

    Subclasses implement :meth:`_reset_game` and :meth:`_step_game` and may override
    :attr:`observation_space` / :attr:`action_space` lengths through the class attributes
    ``max_observation_length`` and ``max_action_length``.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "human"], "render_fps": 4}
    max_observation_length: int = MAX_OBSERVATION_LENGTH
    max_action_length: int = MAX_ACTION_LENGTH

    def __init__(self, render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r} is not supported; use one of {self.metadata['render_modes']} or None"
            )
        self.render_mode = render_mode
        self.observation_space = text_space(self.max_observation_length)
        self.action_space = text_space(self.max_action_length)
        self._turn = 0
        self._last_observation = ""
        self._last_info: dict[str, Any] = {}

    # -- hooks for backends -------------------------------------------------------------
    @abstractmethod
    def _reset_game(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Start a new episode (``self.np_random`` is already seeded); return (obs, info)."""

    @abstractmethod
    def _step_game(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Apply one (string) action; return (obs, reward, terminated, info)."""

    # -- the gymnasium API --------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._turn = 0
        observation, info = self._reset_game(dict(options or {}))
        return self._finish(observation, info)

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(
                f"{type(self).__name__} actions must be str (a text command such as 'look'), "
                f"got {type(action).__name__}: {action!r}"
            )
        self._turn += 1
        before = self._last_info
        observation, reward, terminated, info = self._step_game(action)
        if "action_effect" not in info:  # a backend without engine knowledge of it: the generic rule
            admissible = before.get("admissible_commands")
            info["action_effect"] = action_effect(
                valid=not admissible or action.strip() in admissible, won=bool(info.get("won")) and not before.get("won"),
                lost=bool(info.get("lost")) and not before.get("lost"),
                plan_before=_plan_length(before), plan_after=_plan_length(info))
        elif info["action_effect"] not in ACTION_EFFECTS:
            raise RuntimeError(f"{type(self).__name__} set info['action_effect']={info['action_effect']!r}; "
                               f"expected one of {ACTION_EFFECTS}")
        observation, info = self._finish(observation, info)
        return observation, float(reward), bool(terminated), False, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_observation
        if self.render_mode == "human":
            print(self._last_observation)
        return None

    # -- helpers ------------------------------------------------------------------------
    def _finish(self, observation: str, info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Normalise the observation into the space and complete the info dict."""
        observation = to_charset(observation, self.max_observation_length)
        info.setdefault("lost", False)
        info["turn"] = self._turn
        missing = REQUIRED_INFO_KEYS - info.keys()
        if missing:  # a backend bug, not a user error: fail loudly
            raise RuntimeError(f"{type(self).__name__} returned an info dict without {sorted(missing)}")
        self._last_observation = observation
        self._last_info = info
        return observation, info

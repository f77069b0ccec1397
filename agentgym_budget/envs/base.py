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
  ``reset``); backends that know an expert add ``expert_action`` / ``expert_plan``;
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
    >>> obs, reward, terminated, info["turn"]
    ('Nothing happens.', 0.0, False, 1)
"""

from __future__ import annotations

import string
import unicodedata
from abc import ABC, abstractmethod
from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium import spaces

from agentgym_budget.text import INVALID_ACTION_FEEDBACK

__all__ = [
    "CHARSET",
    "INVALID_ACTION_FEEDBACK",
    "MAX_ACTION_LENGTH",
    "MAX_OBSERVATION_LENGTH",
    "REQUIRED_INFO_KEYS",
    "TextEnv",
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
        observation, reward, terminated, info = self._step_game(action)
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
        return observation, info

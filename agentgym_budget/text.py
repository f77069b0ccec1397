"""Text and names that every layer of the package shares (the bottom layer, with ``_optional``).

* :data:`INVALID_ACTION_FEEDBACK` — what every env answers to an action it cannot apply;
* :data:`ACTION_EFFECTS` — the values of ``info["action_effect"]``, the per-step fact every
  text env reports about the action it just applied (see :mod:`agentgym_budget.envs.base`);
* :func:`is_invalid` — whether a turn's action was invalid: the one definition that the
  evaluator's metrics, the trainer's count and ``ProcessReward``'s penalty all use, from the
  turn's :func:`admissibility` and effect;
* :func:`family_name` — which env family an env id belongs to (``"ALFWorld-Budget-v0"`` →
  ``"ALFWorld"``), for ids of ours and of anyone else;
* :func:`printable_line` — outside text (a server's error, a path) made safe for a terminal:
  escape sequences and control characters removed, one line;
* :func:`error_line` — an exception as one such line, the one format of every error message
  that quotes another (the CLI's, the served backend's, the adapters');
* :func:`redact_url` — a URL with the credentials in it replaced by ``***``.

Example:
    >>> from agentgym_budget.text import INVALID_ACTION_FEEDBACK, family_name
    >>> INVALID_ACTION_FEEDBACK
    'Nothing happens.'
    >>> is_invalid(admissibility("TAKE KEY", ["take key"]), effect="progress")  # the env accepted it
    False
    >>> family_name("TextWorld-Cooking-Budget-v0"), family_name("my_pkg/Maze-v3")
    ('TextWorld-Cooking', 'Maze')
    >>> printable_line("bad\\x1b[2J\\x1b]0;pwned\\x07 gateway\\n\\tretry")
    'bad gateway retry'
    >>> redact_url("http://user:sk-123@127.0.0.1:8000/v1")
    'http://***@127.0.0.1:8000/v1'
    >>> error_line(ConnectionError("backend\\nlost")), error_line(ValueError("budget must be >= 1"))
    ('ConnectionError: backend lost', 'budget must be >= 1')
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from gymnasium.envs.registration import parse_env_id

__all__ = ["ACTION_EFFECTS", "BUDGET_ID_SUFFIX", "INVALID_ACTION_FEEDBACK", "NO_STATE_CHANGE", "UNKNOWN", "admissibility",
           "error_line", "family_name", "is_invalid", "printable_line", "redact_url"]

#: What the environments answer to an action they do not understand or cannot apply.
INVALID_ACTION_FEEDBACK: str = "Nothing happens."
#: ``info["action_effect"]`` values, from the backend's engine state (never from its text):
#: ``"invalid"`` the engine could not apply the command; ``"no_effect"`` it applied but the
#: state did not change; ``"progress"`` the task got closer (won, score up, expert plan
#: shorter); ``"regress"`` it got further (lost, score down, expert plan longer);
#: ``"neutral"`` the state changed with neither.
ACTION_EFFECTS: tuple[str, ...] = ("invalid", "no_effect", "progress", "neutral", "regress")
#: The effects that leave the state as it was.
NO_STATE_CHANGE: frozenset[str] = frozenset({"invalid", "no_effect"})
#: A per-turn fact the env does not provide (no admissible list, no expert, no plan): the turn
#: records' marker (``episodes.records.UNKNOWN``), and :func:`admissibility` without a list.
UNKNOWN: int = -1
#: ``X-Budget-v0`` is family ``X`` under a TurnBudget.
BUDGET_ID_SUFFIX: str = "-Budget"


def admissibility(action: object, commands: list[str] | tuple[str, ...] | None) -> int:
    """1 if ``action`` is among the admissible ``commands`` (exactly as written), 0 if not,
    :data:`UNKNOWN` (-1) if the env gave no list.

    Example:
        >>> admissibility("look", ["look", "go north"]), admissibility(" look", ["look"]), admissibility("look", None)
        (1, 0, -1)
    """
    return int(action in commands) if commands else UNKNOWN


def is_invalid(admissible: int, effect: str = "") -> bool:
    """Whether a turn's action was invalid, from the turn's facts.

    ``effect`` is the env's ``info["action_effect"]`` after the turn (``""``: not reported);
    ``admissible`` is the turn's :func:`admissibility`.  The env's verdict wins when it gives
    one: an action the env applies though it was not listed (another spelling, a command the
    list leaves out) is valid, and one it rejects though listed is invalid.  The list decides
    only for an env that reports no effect; the feedback text (``"Nothing happens."``) never does.

    Example:
        >>> is_invalid(admissible=0), is_invalid(admissible=0, effect="progress"), is_invalid(1, effect="invalid")
        (True, False, True)
        >>> is_invalid(admissible=-1)  # no list, no verdict: not counted
        False
    """
    if effect:
        return effect == "invalid"
    return admissible == 0


def family_name(env_id: str) -> str:
    """The family an env id names: its name without namespace, version and ``-Budget``."""
    _, name, _ = parse_env_id(env_id)
    return name.removesuffix(BUDGET_ID_SUFFIX)


# ANSI escape sequences (CSI ``ESC [ ... final``, OSC ``ESC ] ... BEL|ST``, two-byte ``ESC x``),
# then every other C0/C1 control character but the whitespace that ``split`` collapses.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?|\x9b[0-?]*[ -/]*[@-~]")
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")


def printable_line(text: object, limit: int | None = None) -> str:
    """``str(text)`` safe to print to a terminal: escape sequences and control characters
    removed (a server or a file name could otherwise move the cursor, retitle or clear the
    terminal), whitespace runs collapsed into one line, cut to ``limit`` characters."""
    line = " ".join(_CONTROLS.sub("", _ESCAPES.sub("", str(text))).split())
    return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"


def error_line(error: BaseException, limit: int | None = None) -> str:
    """``error`` as one :func:`printable_line` of at most ``limit`` characters: ``Type: message``.

    The message alone where it was written for the reader: a ``ValueError`` (how the package
    refuses bad input, in a sentence) or an error whose class says ``reads_alone = True`` (a
    served model that cannot answer, a backend not installed); ``Type`` alone when the message
    is empty.

    Example:
        >>> error_line(KeyError("task")), error_line(RuntimeError()), error_line(OSError("x" * 50), limit=20)
        ("KeyError: 'task'", 'RuntimeError', 'OSError: xxxxxxxxxx…')
    """
    message = printable_line(error)
    if isinstance(error, ValueError) or getattr(error, "reads_alone", False):
        line = message or type(error).__name__
    else:
        line = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return printable_line(line, limit)


def redact_url(url: str) -> str:
    """``url`` with its user info (``user:password@``, where an API key may hide) replaced by ``***``.

    Any other string comes back unchanged, so that it can be applied to every recorded setting.
    """
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))

"""Keep one agent turn = one in-game command on TextWorld's Inform 7 games.

The Inform 7 parser would otherwise let a single action string do things no turn budget can
account for (each was observed on TextWorld 1.7 games):

* several commands in one turn: ``"take milk from fridge. prepare meal. eat meal"`` (also
  with ``then`` or a newline) wins a tw-cooking game in one step;
* a NUL character in the command hangs the interpreter for good;
* a backslash starts one of the interpreter's (dumb-frotz's) own escapes or meta-commands
  (``\\g``, ``\\q``, ``\\help``; also inside a command, e.g. LaTeX's ``\\boxed{...}``): some
  loop forever printing to stderr, deaf to SIGINT; Inform 7 commands never need one;
* out-of-world verbs: ``restart`` / ``quit`` leave the game waiting for "yes or no" for the
  rest of the episode, ``superbrief`` shortens every later room description, ``script``
  starts a transcript, ``save`` / ``restore`` / ``undo`` touch interpreter state.

:func:`refusal` names why an action is refused (it then never reaches the engine and costs a
turn like any other invalid command); :func:`to_engine` normalises an accepted one.

Example:
    >>> refusal("take milk from fridge. eat meal")
    'Only one command per turn is accepted.'
    >>> refusal("quit") is None, refusal("take milk from fridge.") is None
    (False, True)
    >>> to_engine("  Take milk   from fridge. ")
    'Take milk from fridge'
"""

from __future__ import annotations

import re

__all__ = ["MAX_COMMAND_LENGTH", "META_VERBS", "refusal", "to_engine"]

#: Inform 7 out-of-world verbs (and abbreviations) that TextWorld games never need.
META_VERBS: frozenset[str] = frozenset(
    {
        "restart", "quit", "q", "save", "restore", "undo", "script", "transcript", "unscript",
        "noscript", "verbose", "brief", "superbrief", "short", "long", "normal", "notify",
        "version", "pronouns", "nouns", "oops", "o", "again", "g",
    }
)  # fmt: skip

#: Longest command passed to the engine, in UTF-8 bytes (Jericho's input buffer holds 197).
MAX_COMMAND_LENGTH: int = 190

_SEPARATOR = re.compile(r"[.;\n\r]|\bthen\b", re.IGNORECASE)
_ONE_COMMAND_ONLY = "Only one command per turn is accepted."


def to_engine(action: str) -> str:
    """The command sent to the engine: control characters and backslashes removed (a NUL or a
    backslash escape hangs the interpreter), single spaces, no surrounding blanks or final periods, at most
    :data:`MAX_COMMAND_LENGTH` UTF-8 bytes (Jericho cuts longer input anyway, with a warning)."""
    printable = "".join(c if c.isprintable() and c != "\\" else " " for c in action)
    command = " ".join(printable.split()).rstrip(". ").strip()
    # Cut by UTF-8 bytes, not characters: Jericho's buffer would split a multi-byte character and
    # then fail to decode its own echo (UnicodeDecodeError on 50 emoji).
    return command.encode("utf-8")[:MAX_COMMAND_LENGTH].decode("utf-8", errors="ignore").strip()


def refusal(action: str) -> str | None:
    """Why ``action`` must not reach the engine, or ``None`` when it may."""
    if _SEPARATOR.search(action.strip().rstrip(". ")):
        return _ONE_COMMAND_ONLY
    words = to_engine(action).lower().split()
    if words and words[0] in META_VERBS:
        return f'The command "{words[0]}" is not available in this game.'
    return None

"""Transcripts of an evaluation: ``transcripts.jsonl.gz``, one gzip member per finished episode.

With transcripts on (``evaluate(..., transcripts=True)``, ``agentgym-budget eval
--transcripts``; on by default for LLM policies), the evaluator appends to ``transcripts.jsonl.gz``
in its output folder one JSON line per episode, as it finishes::

    {"task": 0, "attempt": 1, "budget": 50, "won_turn": 12, "turns": [...], "final_observation": "..."}

where ``turns`` are :func:`~agentgym_budget.episodes.records.transcript_turn` dicts (observation,
raw reply, action, ``written_action`` — the command as the reply wrote it when the action played
spells it otherwise —, won, reward, termination flags, action effect, expert action, admissible,
token counts; files written before ``written_action`` existed lack that key and load the same).
Each line is compressed as its own gzip member and flushed, so a killed run loses at most the
episode being written: the file stays readable (``gzip -dc`` and :func:`read_transcripts`, which
skips a torn last member), and ``--resume`` appends the missing episodes after the kept ones.  A
damaged member elsewhere (a flipped byte) costs that episode only: :func:`members` finds the
intact members after it, :func:`read_transcripts` warns naming the member and its byte offset,
and ``--resume`` keeps the intact members and runs again every saved episode whose transcript is
missing (see :meth:`~agentgym_budget.eval.episode_log.EpisodeLog.open`).  Lines are checked when
read (:class:`TranscriptLine`): a file that does not hold transcripts is refused.  A fresh run
(no ``--resume``) deletes an old file, so that the transcripts always belong to the
``episodes.jsonl`` next to them.  An episode written twice (a run killed between its transcript
and its ``episodes.jsonl`` line, then resumed) is read once, its last copy.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> writer = TranscriptWriter(folder, resume=False)
    >>> writer.write({"task": 0, "attempt": 0, "budget": 4, "won_turn": None, "turns": [],
    ...               "final_observation": "A room."})
    >>> writer.close()
    >>> read_transcripts(folder)[(0, 0, 4)]["final_observation"]
    'A room.'
"""

from __future__ import annotations

import gzip
import json
import os
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym_budget.episodes.records import EpisodeRecord
from agentgym_budget.episodes.schema import Index, RecordError, Turn, checked, parse_json

__all__ = ["TRANSCRIPTS_FILE", "Member", "TranscriptLine", "TranscriptTurn", "TranscriptWriter", "damage_report",
           "members", "read_transcripts", "transcript_line", "wants_transcripts"]

TRANSCRIPTS_FILE = "transcripts.jsonl.gz"
GZIP_MAGIC = b"\x1f\x8b\x08"  # the first bytes of every gzip member (magic number, deflate)

Key = tuple[int, int, int]


def wants_transcripts(policy: Any, transcripts: bool | None) -> bool:
    """``transcripts`` when given, else whether ``policy`` is an LLM policy (attribute ``llm = True``).

    Example:
        >>> class Chat:
        ...     llm = True
        >>> wants_transcripts(Chat(), None), wants_transcripts(object(), None), wants_transcripts(Chat(), False)
        (True, False, False)
    """
    return bool(getattr(policy, "llm", False)) if transcripts is None else bool(transcripts)


def transcript_line(record: EpisodeRecord) -> dict[str, Any]:
    """The ``transcripts.jsonl.gz`` line of ``record`` (which must carry a transcript)."""
    if record.transcript is None:
        raise ValueError(f"episode (task {record.task}, attempt {record.attempt}, budget {record.budget}) "
                         "has no transcript: run it with transcripts=True")
    return {"task": record.task, "attempt": record.attempt, "budget": record.budget, "won_turn": record.won_turn,
            "turns": record.transcript, "final_observation": record.final_observation}


class TranscriptWriter:
    """Appends one gzip member per episode to ``folder/transcripts.jsonl.gz``, flushed at once."""

    def __init__(self, folder: str | Path, resume: bool) -> None:
        self.path = Path(folder) / TRANSCRIPTS_FILE
        if resume:
            _repair(self.path)
        self._stream = self.path.open("ab" if resume else "wb")
        self.written = 0

    def write(self, line: dict[str, Any]) -> None:
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        self._stream.write(gzip.compress(data, compresslevel=6, mtime=0))
        self._stream.flush()
        self.written += 1

    def close(self) -> None:
        self._stream.close()


@dataclass
class TranscriptTurn:
    """One turn of a transcript line as stored (what :func:`~agentgym_budget.episodes.records.transcript_turn` makes)."""

    turn: Turn
    observation: str
    reply: str | None
    action: str
    won: bool
    reward: float
    terminated: bool
    truncated: bool
    action_effect: str | None
    expert_action: str | None
    admissible: bool | None
    prompt_tokens: Index | None
    completion_tokens: Index | None
    written_action: str | None = None  # absent from files written before it existed


@dataclass
class TranscriptLine:
    """One line of ``transcripts.jsonl.gz`` (:func:`transcript_line`); read back as a checked dict."""

    task: Index
    attempt: Index
    budget: Turn
    won_turn: Turn | None
    turns: list[TranscriptTurn]
    final_observation: str | None

    @staticmethod
    def checked(data: Any) -> dict[str, Any]:
        """``data`` if it is a transcript line, else a :class:`~agentgym_budget.episodes.schema.RecordError`.

        Example:
            >>> TranscriptLine.checked({"task": 0, "attempt": 0, "budget": 4, "won_turn": None, "turns": [],
            ...                         "final_observation": None, "script": "<img src=x onerror=alert(1)>"})
            Traceback (most recent call last):
            ...
            agentgym_budget.episodes.schema.RecordError: unknown key 'script' (expected task, attempt, budget, won_turn, turns, final_observation)
        """
        return checked(TranscriptLine, data)


@dataclass(frozen=True)
class Member:
    """One gzip member of the file: where it lies, and its text (``None``: damaged, see ``damage``).

    ``number`` counts members from 1.  A damaged stretch (a flipped byte, a torn write) is one
    member reaching up to the next intact one; ``damage`` is ``"corrupt"`` (it does not decompress or
    its checksum fails) or ``"torn"`` (the file ends inside it: a run killed while writing).
    """

    number: int
    start: int
    end: int
    text: bytes | None
    damage: str = ""


def members(data: bytes) -> list[Member]:
    """Every gzip member of ``data``, intact or damaged, in file order.

    After a damaged member the scan resumes at the next gzip header that starts an intact member,
    so that one flipped byte costs one episode's transcript, not those after it.

    Example:
        >>> import gzip
        >>> data = b"".join(gzip.compress(f"{i}\\n".encode(), mtime=0) for i in range(3))
        >>> middle = len(data) // 2
        >>> flipped = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]
        >>> [(m.number, m.text, m.damage) for m in members(flipped)]
        [(1, b'0\\n', ''), (2, None, 'corrupt'), (3, b'2\\n', '')]
    """
    found: list[Member] = []
    position = 0
    while position < len(data):
        text, end, damage = _inflate(data, position)
        if damage:
            end = _next_intact(data, position + 1)
            damage = "torn" if damage == "torn" and end == len(data) else "corrupt"
        found.append(Member(len(found) + 1, position, end, None if damage else text, damage))
        position = end
    return found


def _inflate(data: bytes, start: int, chunk: int = 16384) -> tuple[bytes, int, str]:
    """``(text, end, damage)`` of the member at ``start``; ``damage``: ``""``, ``"corrupt"`` or ``"torn"``.

    Fed in chunks so that finding a member's end costs its size (plus one chunk), not the file's.
    """
    view = memoryview(data)
    inflater = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer (with its CRC-32)
    parts, position = [], start
    try:
        while not inflater.eof and position < len(data):
            parts.append(inflater.decompress(view[position:position + chunk]))
            position += chunk
    except zlib.error:
        return b"", position, "corrupt"
    if not inflater.eof:
        return b"", len(data), "torn"
    return b"".join(parts), min(position, len(data)) - len(inflater.unused_data), ""


def _next_intact(data: bytes, start: int) -> int:
    """Where the first intact member at or after ``start`` begins (``len(data)``: none)."""
    position = data.find(GZIP_MAGIC, start)
    while position != -1:
        if not _inflate(data, position)[2]:
            return position
        position = data.find(GZIP_MAGIC, position + 1)
    return len(data)


def damage_report(path: Path, found: list[Member]) -> str:
    """One line naming each damaged member of ``path`` (number, byte offset, size) and what was kept ("": none)."""
    damaged = [m for m in found if m.damage]
    if not damaged:
        return ""
    where = "; ".join(f"gzip member {m.number} at byte {m.start} ({m.end - m.start} bytes) is "
                      + ("torn: the run was killed while writing it" if m.damage == "torn" else "corrupt")
                      for m in damaged)
    kept = len(found) - len(damaged)
    return f"{path}: {where}; the {kept} intact members are kept"


def _repair(path: Path) -> None:
    """Drop the damaged members of ``path``, keeping every intact one, so that appended members follow
    complete ones (``gzip -dc`` reads the whole file again).

    A torn last member alone is cut off; other damage rewrites the file (to a temporary file,
    then renamed over it: a stop meanwhile leaves the old file whole).
    """
    if not path.exists():
        return
    data = path.read_bytes()
    found = members(data)
    damaged = [m for m in found if m.damage]
    if not damaged:
        return
    if damaged == found[-1:] and damaged[0].damage == "torn":
        with path.open("r+b") as f:
            f.truncate(damaged[0].start)
        return
    partial = path.with_name(path.name + ".repair")
    partial.write_bytes(b"".join(data[m.start:m.end] for m in found if not m.damage))
    os.replace(partial, path)


def read_transcripts(folder: str | Path) -> dict[Key, dict[str, Any]]:
    """``{(task, attempt, budget): transcript line}`` of ``folder/transcripts.jsonl.gz`` (``{}``: no file).

    A damaged member (torn by a kill, or corrupt) is skipped with a warning naming it, the intact
    members after it are read.  A line that is not a transcript (:class:`TranscriptLine`) is a
    :class:`~agentgym_budget.episodes.schema.RecordError` naming the file, the line and the member.
    """
    path = Path(folder) / TRANSCRIPTS_FILE
    if not path.exists():
        return {}
    found = members(path.read_bytes())
    report = damage_report(path, found)
    if report:
        warnings.warn(report, RuntimeWarning, stacklevel=2)
    lines: dict[Key, dict[str, Any]] = {}
    number = 0
    for member in found:
        for text in (member.text or b"").splitlines():
            number += 1
            line = _parse(path, number, member, text)
            lines[(line["task"], line["attempt"], line["budget"])] = line
    return lines


def _parse(path: Path, number: int, member: Member, text: bytes) -> dict[str, Any]:
    # ValueError: not UTF-8, not JSON, or not a transcript line (schema.RecordError).
    try:
        return TranscriptLine.checked(parse_json(text))
    except ValueError as e:
        raise RecordError(f"{path}, line {number} (gzip member {member.number} at byte {member.start}) is not a "
                          f"transcript ({e})") from None

"""Transcripts of an evaluation: ``transcripts.jsonl.gz``, one gzip member per finished episode.

With transcripts on (``evaluate(..., transcripts=True)``, ``agentgym-budget eval
--transcripts``; on by default for LLM policies), the evaluator appends to ``transcripts.jsonl.gz``
in its output folder one JSON line per episode, as it finishes::

    {"task": 0, "attempt": 1, "budget": 50, "won_turn": 12, "turns": [...], "final_observation": "..."}

where ``turns`` are :func:`~agentgym_budget.eval.rollout.transcript_turn` dicts (observation,
raw reply, action, ``written_action`` — the command as the reply wrote it when the action played
spells it otherwise —, won, reward, termination flags, action effect, expert action, admissible,
token counts; files written before ``written_action`` existed lack that key and load the same).
Each line is compressed as its own gzip member and flushed, so a killed run loses at most the
episode being written: the file stays readable (``gzip -dc`` and :func:`read_transcripts`, which
drops a torn last member), and ``--resume`` appends the missing episodes after the kept ones.
A fresh run (no ``--resume``) deletes an old file, so that the transcripts always belong to the
``episodes.jsonl`` next to them.  An episode written twice (a run killed between its transcript
and its ``episodes.jsonl`` line, then resumed) is read once, its last copy.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> writer = TranscriptWriter(folder, resume=False)
    >>> writer.write({"task": 0, "attempt": 0, "budget": 4, "turns": [], "final_observation": "A room."})
    >>> writer.close()
    >>> read_transcripts(folder)[(0, 0, 4)]["final_observation"]
    'A room.'
"""

from __future__ import annotations

import gzip
import json
import warnings
import zlib
from pathlib import Path
from typing import Any

from agentgym_budget.eval.rollout import EpisodeRecord

__all__ = ["TRANSCRIPTS_FILE", "TranscriptWriter", "read_transcripts", "transcript_line", "wants_transcripts"]

TRANSCRIPTS_FILE = "transcripts.jsonl.gz"

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


def _members(data: bytes, chunk: int = 16384) -> tuple[list[bytes], int]:
    """The decompressed complete gzip members of ``data`` and the byte offset where they end.

    Fed in chunks so that finding a member's end costs its size (plus one chunk), not the file's.
    """
    view = memoryview(data)
    out: list[bytes] = []
    end = 0
    while end < len(data):
        inflater = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer
        parts, position = [], end
        try:
            while not inflater.eof and position < len(data):
                parts.append(inflater.decompress(view[position:position + chunk]))
                position += chunk
        except zlib.error:
            break  # not gzip from here on
        if not inflater.eof:
            break  # torn: the writer was killed mid-member
        out.append(b"".join(parts))
        end = min(position, len(data)) - len(inflater.unused_data)
    return out, end


def _repair(path: Path) -> None:
    """Cut a torn last member off ``path`` so that appended members follow complete ones."""
    if not path.exists():
        return
    data = path.read_bytes()
    _, end = _members(data)
    if end < len(data):
        with path.open("r+b") as f:
            f.truncate(end)


def read_transcripts(folder: str | Path) -> dict[Key, dict[str, Any]]:
    """``{(task, attempt, budget): transcript line}`` of ``folder/transcripts.jsonl.gz`` (``{}``: no file).

    A torn last member (a run killed while writing it) is skipped with a warning.
    """
    path = Path(folder) / TRANSCRIPTS_FILE
    if not path.exists():
        return {}
    data = path.read_bytes()
    members, end = _members(data)
    if end < len(data):
        warnings.warn(f"{path}: ignoring {len(data) - end} bytes after the last complete episode "
                      "(the run was killed while writing it)", RuntimeWarning, stacklevel=2)
    lines: dict[Key, dict[str, Any]] = {}
    for member in members:
        for text in member.decode().splitlines():
            line = json.loads(text)
            lines[(line["task"], line["attempt"], line["budget"])] = line
    return lines

"""The episode log of an evaluation: ``episodes.jsonl`` streamed as episodes finish, and resume.

An evaluation with an output folder writes two files there:

* ``episodes.run.json`` — what identifies the run's episodes (env id and kwargs, policy,
  base seed, rollout mode, budgets run), written before the first episode;
* ``episodes.jsonl`` — one :class:`~agentgym_budget.eval.rollout.EpisodeRecord` per line,
  appended and flushed as each (task, attempt, budget) finishes, in finishing order;
* with transcripts on, ``transcripts.jsonl.gz`` — what the agent saw and said, per episode
  (see :mod:`~agentgym_budget.eval.transcripts`), each written just before its record.

Resuming (``evaluate(..., resume=True)``, ``agentgym-budget eval ... --resume``) reads both,
refuses a log written by a different run (a clear error naming the differing settings, never
a silent merge), keeps the records of the jobs it still needs, and runs only the missing
ones.  Since every episode's seeds derive from (seed, task, attempt), the resumed result is the
one an uninterrupted run gives.  ``tasks`` and ``attempts`` are not part of the identity: a
log can be resumed with more of them to extend a run.

A run stopped by Ctrl-C or SIGTERM (see :func:`sigterm_as_interrupt`) leaves only complete
lines; a line torn by a hard kill (``kill -9``, power loss) at the end of the file is dropped on
resume, its episode run again.

Example:
    >>> import tempfile
    >>> from agentgym_budget.eval.rollout import EpisodeRecord
    >>> folder = tempfile.mkdtemp()
    >>> run = run_identity("KeyDoor-Budget-v0", {}, "expert", 0, "shortcut", [4])
    >>> log, done = EpisodeLog.open(folder, run, resume=False)
    >>> log.write(EpisodeRecord(0, 0, 4, 2, 2, 2, ["a", "b"], [1, 1], [1, 1], [0, 0], [1, 0]))
    >>> log.close()
    >>> _, done = EpisodeLog.open(folder, run, resume=True)
    >>> [(r.task, r.attempt, r.budget) for r in done]
    [(0, 0, 4)]
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from agentgym_budget.eval.rollout import EpisodeRecord
from agentgym_budget.eval.transcripts import TRANSCRIPTS_FILE, TranscriptWriter, transcript_line

__all__ = [
    "EPISODES_FILE",
    "EpisodeLog",
    "EvaluationInterrupted",
    "ResumeError",
    "RUN_FILE",
    "read_episodes",
    "run_identity",
    "sigterm_as_interrupt",
]

EPISODES_FILE = "episodes.jsonl"
RUN_FILE = "episodes.run.json"
LOG_FORMAT = "agentgym-budget/episodes/1"


class ResumeError(ValueError):
    """The episode log cannot be resumed: foreign, corrupt, or written by a different run."""


class EvaluationInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped an evaluation; the message says what was saved and how to resume."""


def run_identity(env_id: str, env_kwargs: dict[str, Any], policy: str, seed: int, mode: str,
                 budgets: Sequence[int]) -> dict[str, Any]:
    """What must match for a log's records to belong to a run (JSON-able; kwargs as their ``repr``)."""
    return {
        "format": LOG_FORMAT,
        "env_id": env_id,
        "env_kwargs": {key: repr(value) for key, value in sorted(env_kwargs.items())},
        "policy": policy,
        "seed": int(seed),
        "mode": mode,
        "budgets": sorted(int(b) for b in set(budgets)),
    }


class EpisodeLog:
    """Appends records to ``episodes.jsonl`` in ``folder``, one flushed line per finished episode."""

    def __init__(self, folder: Path, stream: IO[str], transcripts: TranscriptWriter | None = None) -> None:
        self.folder = folder
        self.path = folder / EPISODES_FILE
        self._stream = stream
        self._transcripts = transcripts
        self.written = 0

    @classmethod
    def open(cls, folder: str | Path, run: dict[str, Any], resume: bool, transcripts: bool = False
             ) -> tuple[EpisodeLog, list[EpisodeRecord]]:
        """Start a log in ``folder`` (replacing any old one), or resume it: ``(log, records already saved)``.

        ``transcripts``: also append the records' transcripts to ``transcripts.jsonl.gz``.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path, run_path = folder / EPISODES_FILE, folder / RUN_FILE
        if resume and (path.exists() or run_path.exists()):
            _check_run(run_path, run)
            records = read_episodes(folder, repair=True)
            writer = TranscriptWriter(folder, resume=True) if transcripts else None
            return cls(folder, path.open("a"), writer), records
        run_path.write_text(json.dumps(run, indent=1) + "\n")
        (folder / TRANSCRIPTS_FILE).unlink(missing_ok=True)  # an old run's: they would not match these episodes
        writer = TranscriptWriter(folder, resume=False) if transcripts else None
        return cls(folder, path.open("w"), writer), []

    def write(self, record: EpisodeRecord) -> None:
        # The transcript first: a stop between the two writes runs the episode again on resume
        # (its transcript is then read once, the later copy) rather than keeping it without one.
        if self._transcripts is not None and record.transcript is not None:
            self._transcripts.write(transcript_line(record))
        # One write of a whole line, then flush: a stop between two episodes leaves complete lines.
        self._stream.write(json.dumps(record.to_dict(), separators=(",", ":")) + "\n")
        self._stream.flush()
        self.written += 1

    def close(self) -> None:
        self._stream.close()
        if self._transcripts is not None:
            self._transcripts.close()


def _check_run(run_path: Path, run: dict[str, Any]) -> None:
    if not run_path.exists():
        raise ResumeError(f"cannot resume: {run_path.parent / EPISODES_FILE} has no {RUN_FILE} next to it, so "
                          f"nothing says which run wrote it; use another --out folder or delete the file")
    try:
        saved = json.loads(run_path.read_text())
    except json.JSONDecodeError as e:
        raise ResumeError(f"cannot resume: {run_path} is not valid JSON ({e})") from None
    if not isinstance(saved, dict) or saved.get("format") != LOG_FORMAT:
        found = saved.get("format") if isinstance(saved, dict) else type(saved).__name__
        raise ResumeError(f"cannot resume: {run_path} is not an agentgym-budget episode log "
                          f"(format {found!r}, expected {LOG_FORMAT!r})")
    differing = [f"{key}: saved {saved.get(key)!r}, now {run[key]!r}" for key in run if saved.get(key) != run[key]]
    if differing:
        raise ResumeError(f"cannot resume: the episodes in {run_path.parent} come from a different run ("
                          + "; ".join(differing) + "); use another --out folder or the same settings")


def read_episodes(folder: str | Path, repair: bool = False) -> list[EpisodeRecord]:
    """The records of ``folder/episodes.jsonl``, in file order.

    A corrupt line is a :class:`ResumeError` naming it — except a torn last line (no final
    newline: the writer was killed mid-line), which is ignored, and cut off the file when
    ``repair`` (so that appended records start on a fresh line).  Two records of the same
    (task, attempt, budget) are an error: a log never holds an episode twice.
    """
    path = Path(folder) / EPISODES_FILE
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")
    torn = lines.pop()  # "" when the file ends with a newline
    records: list[EpisodeRecord] = []
    seen: set[tuple[int, int, int]] = set()
    for number, line in enumerate(lines, start=1):
        record = _parse(path, number, line)
        key = (record.task, record.attempt, record.budget)
        if key in seen:
            raise ResumeError(f"{path}, line {number}: a second record of task {key[0]}, attempt {key[1]}, "
                              f"budget {key[2]}; the file mixes runs")
        seen.add(key)
        records.append(record)
    if torn:
        with contextlib.suppress(ResumeError):  # complete but for its newline (an edited file): keep it
            record = _parse(path, len(lines) + 1, torn)
            if (record.task, record.attempt, record.budget) not in seen:
                records.append(record)
                if repair:
                    with path.open("a") as f:
                        f.write("\n")
                return records
        warnings.warn(f"{path}: ignoring an incomplete last line (the run was killed while writing it); "
                      f"its episode is run again", RuntimeWarning, stacklevel=2)
        if repair:
            with path.open("r+") as f:
                f.truncate(len(text.encode()) - len(torn.encode()))
    return records


def _parse(path: Path, number: int, line: str) -> EpisodeRecord:
    try:
        data = json.loads(line)
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
        return EpisodeRecord.from_dict(data)
    except (json.JSONDecodeError, TypeError) as e:
        raise ResumeError(f"{path}, line {number} is not an episode record ({e}): {line[:80]!r}") from None


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt`` like Ctrl-C (main thread only).

    So that ``kill`` / a cluster scheduler stopping the job runs the same cleanup as Ctrl-C.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

"""The episode log of an evaluation: ``episodes.jsonl`` streamed as episodes finish, and resume.

An evaluation with an output folder writes two files there:

* ``episodes.run.json`` — what identifies the run's episodes (env id and kwargs, policy name
  and all its kwargs, base seed, rollout mode, the budget grid), written before the first episode;
* ``episodes.jsonl`` — one :class:`~agentgym_budget.episodes.records.EpisodeRecord` per line,
  appended and flushed as each (task, attempt, budget) finishes, in finishing order;
* with transcripts on, ``transcripts.jsonl.gz`` — what the agent saw and said, per episode
  (see :mod:`~agentgym_budget.eval.transcripts`), each written just before its record; on
  resume, a saved episode whose transcript is missing (a damaged gzip member) is run again.

Resuming (``evaluate(..., resume=True)``, ``agentgym-budget eval ... --resume``) reads both,
refuses a log written by a different run (a clear error naming each differing setting, down
to one policy or env kwarg, never a silent merge), keeps the records of the jobs it still
needs, and runs only the missing ones.  Since every episode's seeds derive from (seed, task,
attempt), the resumed result is the one an uninterrupted run gives.  ``tasks``, ``attempts``
and the K grid are not part of the identity (they only choose which episodes are counted): a
log can be resumed with more of them to extend a run.

Without ``resume`` an existing log is never truncated silently: :meth:`EpisodeLog.open`
refuses unless ``overwrite=True`` (``--overwrite``).  The folder is locked while a log is open
(:func:`lock_output`: an exclusive ``fcntl.flock`` on ``.agentgym-budget.lock``), so a second
run into the same folder fails at once with :class:`OutputLockedError` instead of interleaving
its lines with the first's.

A run stopped by Ctrl-C or SIGTERM (see :mod:`~agentgym_budget.episodes.signals`) leaves only complete
lines; a line torn by a hard kill (``kill -9``, power loss) at the end of the file is dropped on
resume, its episode run again.

Example:
    >>> import tempfile
    >>> from agentgym_budget.episodes.records import EpisodeRecord
    >>> folder = tempfile.mkdtemp()
    >>> run = run_identity("KeyDoor-Budget-v0", {}, "expert", 0, "shortcut", [4])
    >>> log, done = EpisodeLog.open(folder, run, resume=False)
    >>> log.write(EpisodeRecord(0, 0, 4, 2, 2, 2, ["a", "b"], [1, 1], [1, 1], [0, 0], [1, 0]))
    >>> log.close()
    >>> log, done = EpisodeLog.open(folder, run, resume=True)
    >>> [(r.task, r.attempt, r.budget) for r in done]
    [(0, 0, 4)]
    >>> log.close()
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

try:
    import fcntl
except ImportError:  # Windows: no flock; the folder is then not locked
    fcntl = None  # type: ignore[assignment]

from agentgym_budget.episodes.records import EpisodeRecord
from agentgym_budget.episodes.schema import parse_json
from agentgym_budget.episodes.signals import signals_held
from agentgym_budget.eval.transcripts import TRANSCRIPTS_FILE, TranscriptWriter, read_transcripts, transcript_line

__all__ = [
    "EPISODES_FILE",
    "EpisodeLog",
    "EvaluationInterrupted",
    "LOCK_FILE",
    "OutputLockedError",
    "ResumeError",
    "RUN_FILE",
    "lock_output",
    "read_episodes",
    "run_identity",
]

EPISODES_FILE = "episodes.jsonl"
RUN_FILE = "episodes.run.json"
LOCK_FILE = ".agentgym-budget.lock"
LOG_FORMAT = "agentgym-budget/episodes/1"


class ResumeError(ValueError):
    """The episode log cannot be resumed: foreign, corrupt, or written by a different run."""


class OutputLockedError(ValueError):
    """Another run (another process) is writing into the same output folder."""


class EvaluationInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped an evaluation; the message says what was saved and how to resume."""


def run_identity(env_id: str, env_kwargs: dict[str, Any], policy: str, seed: int, mode: str,
                 budgets: Sequence[int], *, policy_kwargs: dict[str, Any] | None = None,
                 ts: Sequence[int] | None = None) -> dict[str, Any]:
    """What must match for a log's records to belong to a run (JSON-able; kwargs as their ``repr``).

    ``policy_kwargs`` are all the policy's settings (the evaluator passes them with the
    defaults filled in, so ``p=0.70000001`` and ``p=0.7`` differ and ``{}`` equals the
    defaults); ``ts`` the T grid (default: ``budgets``).
    """
    return {
        "format": LOG_FORMAT,
        "env_id": env_id,
        "env_kwargs": _reprs(env_kwargs),
        "policy": policy,
        "policy_kwargs": _reprs(policy_kwargs or {}),
        "seed": int(seed),
        "mode": mode,
        "ts": sorted(int(t) for t in set(budgets if ts is None else ts)),
        "budgets": sorted(int(b) for b in set(budgets)),
    }


def _reprs(kwargs: dict[str, Any]) -> dict[str, str]:
    # repr, not the value: 0.70000001 and 0.7 stay apart, and any object has one.
    return {str(key): repr(value) for key, value in sorted(kwargs.items(), key=lambda item: str(item[0]))}


_held_locks: dict[Path, tuple[int, int]] = {}  # folder -> (fd, depth) of the locks this process holds
_held_locks_guard = threading.Lock()


@contextlib.contextmanager
def lock_output(folder: str | Path) -> Iterator[Path]:
    """Hold an exclusive lock on the output ``folder`` (created if missing) for the block.

    Another process holding it: :class:`OutputLockedError` at once (never a wait).  Re-entrant
    within a process (the CLI holds it around the evaluation and the files written after it).
    The lock is an ``fcntl.flock`` on ``folder/.agentgym-budget.lock``, released by the kernel
    when the holder exits however it exits; the file itself stays (deleting it would race).

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with lock_output(folder), lock_output(folder):
        ...     pass
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    with _held_locks_guard:
        if key in _held_locks:
            fd, depth = _held_locks[key]
            _held_locks[key] = (fd, depth + 1)
        else:
            fd = os.open(key / LOCK_FILE, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OutputLockedError(
                    f"{folder} is in use by another running evaluation (it holds {key / LOCK_FILE}); wait for it "
                    f"to finish or use another --out folder") from None
            _held_locks[key] = (fd, 1)
    try:
        yield folder
    finally:
        with _held_locks_guard:
            fd, depth = _held_locks[key]
            if depth > 1:
                _held_locks[key] = (fd, depth - 1)
            else:
                del _held_locks[key]
                os.close(fd)  # releases the flock


class EpisodeLog:
    """Appends records to ``episodes.jsonl`` in ``folder``, one flushed line per finished episode."""

    def __init__(self, folder: Path, stream: IO[str], lock: contextlib.ExitStack | None = None,
                 transcripts: TranscriptWriter | None = None) -> None:
        self.folder = folder
        self.path = folder / EPISODES_FILE
        self._stream = stream
        self._lock = lock
        self._transcripts = transcripts
        self.written = 0

    @classmethod
    def open(cls, folder: str | Path, run: dict[str, Any], resume: bool, overwrite: bool = False,
             transcripts: bool = False) -> tuple[EpisodeLog, list[EpisodeRecord]]:
        """Start a log in ``folder``, or resume it: ``(log, records already saved)``.

        The folder stays locked (:func:`lock_output`) until :meth:`close`.  Without ``resume``
        an existing log is replaced only with ``overwrite=True``: else a :class:`ResumeError`.
        ``transcripts``: also append the records' transcripts to ``transcripts.jsonl.gz``.
        """
        if resume and overwrite:
            raise ValueError("resume and overwrite exclude each other: keep the saved episodes or replace them")
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(f"the output folder {folder} is a file; give a folder (it is created if missing)")
        lock = contextlib.ExitStack()
        lock.enter_context(lock_output(folder))
        try:
            return cls._open_locked(folder, run, resume, overwrite, lock, transcripts)
        except BaseException:
            lock.close()
            raise

    @classmethod
    def _open_locked(cls, folder: Path, run: dict[str, Any], resume: bool, overwrite: bool,
                     lock: contextlib.ExitStack, transcripts: bool) -> tuple[EpisodeLog, list[EpisodeRecord]]:
        path, run_path = folder / EPISODES_FILE, folder / RUN_FILE
        for file in (path, run_path):
            if file.exists() and not file.is_file():
                raise IsADirectoryError(f"{file} is a folder, not a file; remove it or use another --out folder")
        if resume and (path.exists() or run_path.exists()):
            _check_run(run_path, run)
            records = read_episodes(folder, repair=True)
            if transcripts:  # first the records, then the transcripts: a stop in between loses nothing
                records = _without_lost_transcripts(folder, records)
            writer = TranscriptWriter(folder, resume=True) if transcripts else None
            return cls(folder, path.open("a"), lock, writer), records
        if not resume and not overwrite and path.exists() and path.stat().st_size > 0:
            # (a run file next to an empty log, e.g. of a run that failed at once, holds nothing to lose)
            saved = path.read_text().count("\n")
            raise ResumeError(f"{folder} already holds an evaluation ({saved} episodes in {EPISODES_FILE}); "
                              f"--resume continues it (Python: resume=True), --overwrite replaces it "
                              f"(overwrite=True), or use another --out folder")
        run_path.write_text(json.dumps(run, indent=1) + "\n")
        (folder / TRANSCRIPTS_FILE).unlink(missing_ok=True)  # an old run's: they would not match these episodes
        writer = TranscriptWriter(folder, resume=False) if transcripts else None
        return cls(folder, path.open("w"), lock, writer), []

    def write(self, record: EpisodeRecord) -> None:
        # The transcript first: a stop between the two writes runs the episode again on resume
        # (its transcript is then read once, the later copy) rather than keeping it without one.
        if self._transcripts is not None and record.transcript is not None:
            self._transcripts.write(transcript_line(record))
        # One write of a whole line, then flush: a stop between two episodes leaves complete lines.
        # SIGINT/SIGTERM are held back meanwhile, so that a line written is a line counted.
        line = _line(record)
        with signals_held():
            self._stream.write(line)
            self._stream.flush()
            self.written += 1

    def close(self) -> None:
        self._stream.close()
        if self._transcripts is not None:
            self._transcripts.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def _line(record: EpisodeRecord) -> str:
    return json.dumps(record.to_dict(), separators=(",", ":")) + "\n"


def _without_lost_transcripts(folder: Path, records: list[EpisodeRecord]) -> list[EpisodeRecord]:
    """``records`` less those whose transcript ``transcripts.jsonl.gz`` lacks, which also leave
    ``episodes.jsonl``, so that the resumed run plays them again and stores their transcripts.

    A transcript goes missing when its gzip member is damaged (``read_transcripts`` warns naming
    it; the intact members after it stay) or when earlier episodes ran without transcripts.  An
    episode is never kept without its transcript silently: it runs again (its seeds make it the
    same episode), and a warning says how many and why.
    """
    stored = read_transcripts(folder)
    kept = [r for r in records if (r.task, r.attempt, r.budget) in stored]
    lost = [r for r in records if (r.task, r.attempt, r.budget) not in stored]
    if not lost:
        return records
    names = ", ".join(f"({r.task}, {r.attempt}, {r.budget})" for r in lost[:5]) + (", ..." if len(lost) > 5 else "")
    warnings.warn(f"{folder / TRANSCRIPTS_FILE} lacks the transcripts of {len(lost)} of the {len(records)} saved "
                  f"episodes (task, attempt, budget: {names}); they are run again so that every episode has its "
                  f"transcript", RuntimeWarning, stacklevel=2)
    # Rewritten beside the log, then renamed over it: a stop meanwhile leaves the old log whole.
    partial = folder / (EPISODES_FILE + ".rewrite")
    partial.write_text("".join(_line(r) for r in kept))
    os.replace(partial, folder / EPISODES_FILE)
    return kept


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
    differing = []
    for key in run:
        was, now = saved.get(key), run[key]
        if was == now:
            continue
        if isinstance(was, dict) and isinstance(now, dict):  # name the kwarg, e.g. policy_kwargs.temperature
            differing += [f"{key}.{name}: saved {was.get(name, '(unset)')}, now {now.get(name, '(unset)')}"
                          for name in sorted({*was, *now}) if was.get(name) != now.get(name)]
        else:
            differing.append(f"{key}: saved {was!r}, now {now!r}")
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
    # ValueError: JSON that does not parse, or a record its class refuses (schema.RecordError).
    try:
        return EpisodeRecord.from_dict(parse_json(line))
    except ValueError as e:
        raise ResumeError(f"{path}, line {number} is not an episode record ({e}): {line[:80]!r}") from None

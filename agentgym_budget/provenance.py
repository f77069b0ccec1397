"""Where a measured figure came from: the command, the commit, the machine and its load.

Every benchmark that writes a results file under ``docs/data/`` puts :func:`provenance` in it, so
a documented figure can be traced to the exact code and command that measured it.

Example:
    >>> facts = provenance(["benchmarks/learning_check.py", "--seeds", "2"])
    >>> sorted(facts)
    ['command', 'commit', 'cpus', 'dirty', 'load_average', 'python', 'utc']
    >>> facts["command"]
    'python benchmarks/learning_check.py --seeds 2'
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # the checkout holding the package


def provenance(argv: Sequence[str]) -> dict[str, object]:
    """The command (``python`` + ``argv``), the git commit and whether the tree had changes, CPUs, load, time."""
    return {
        "command": "python " + shlex.join(argv),
        "commit": git_commit(),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_results(path: str | Path, started: dict[str, object], results: dict[str, object]) -> Path:
    """Write ``results`` as JSON to ``path`` under ``"provenance"``: ``started`` plus the load average at the end.

    ``started`` is :func:`provenance` taken when the measurement began (the load at both ends tells
    how busy the machine was); the folders are made as needed.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"provenance": {**started, "load_average_end": [round(x, 2) for x in os.getloadavg()]}, **results}
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return out


def git_commit() -> str:
    """The checkout's commit (``git rev-parse HEAD``)."""
    return _git("rev-parse", "HEAD")


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"

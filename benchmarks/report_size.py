"""Transcripts and the HTML report on the Quickstart run: sizes, costs, and how fast the page opens.

Runs the Quickstart main job (ALFWorld-Budget-v0 x noisy-expert, 50 tasks x 8 attempts, T up to
50) twice, without and with transcripts, side by side, and prints:

* the CPU seconds of both, best of ``--rounds`` alternated runs (what keeping transcripts costs);
* the size of ``transcripts.jsonl.gz``: bytes per turn compressed, and per turn as plain JSON;
* the seconds ``agentgym-budget report`` takes and the size of the page;
* in headless Chromium (when installed): the milliseconds from navigation start until the
  page's script has drawn the list and opened an episode (``data-rendered-ms``), and the wall
  time of a ``--dump-dom`` of the report next to that of an empty page (browser start-up).

    python benchmarks/report_size.py
    python benchmarks/report_size.py --tasks 10 --attempts 2
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.eval import evaluate
from agentgym_budget.eval.report import write_report
from agentgym_budget.eval.transcripts import TRANSCRIPTS_FILE

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--dump-dom"]


def _dump_dom(browser: str, url: str, profile: Path) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", url], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALFWorld-Budget-v0")
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--attempts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each, alternated (best is kept)")
    args = parser.parse_args()
    grid = dict(ks=(1, 2, 4, 8), ts=(5, 10, 20, 30, 50), tasks=args.tasks, attempts=args.attempts, seed=0)
    work = Path(tempfile.mkdtemp(prefix="report-size-"))
    evaluate(args.env, "noisy-expert", **{**grid, "ks": (1,), "tasks": 1, "attempts": 1})  # the env's one-time start-up

    seconds: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(args.rounds):  # alternated, best of each: a shared machine's load hits both alike
        for name, keep in (("without", False), ("with", True)):
            start = time.process_time()  # CPU seconds: less swayed by other jobs than wall time
            result = evaluate(args.env, "noisy-expert", out=work / name, transcripts=keep, overwrite=True, **grid)
            seconds[name].append(time.process_time() - start)
            result.save(work / name)
    turns = result.timing["steps"]
    without, with_ = min(seconds["without"]), min(seconds["with"])
    print(f"{result.timing['episodes']} episodes, {turns} turns; evaluate() best of {args.rounds}: {without:.2f} CPU s "
          f"without transcripts, {with_:.2f} CPU s with ({100 * (with_ / without - 1):+.0f} %)")
    compressed = (work / "with" / TRANSCRIPTS_FILE).stat().st_size
    plain = len(gzip.decompress((work / "with" / TRANSCRIPTS_FILE).read_bytes()))
    print(f"{TRANSCRIPTS_FILE}: {compressed / 1e3:.0f} kB = {compressed / turns:.0f} bytes/turn "
          f"({plain / turns:.0f} bytes/turn as plain JSON lines, x{plain / compressed:.1f})")

    start = time.perf_counter()
    page = write_report(work / "with")
    print(f"report: {time.perf_counter() - start:.2f} s to build, {page.stat().st_size / 1e6:.1f} MB")

    browser = next((p for name in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(name))), None)
    if browser is None:
        print("no Chromium installed: page opening not measured")
        return
    empty = work / "empty.html"
    empty.write_text("<!DOCTYPE html><title>empty</title>")
    base, _ = _dump_dom(browser, empty.as_uri(), work / "profile-empty")
    wall, dom = _dump_dom(browser, f"{page.as_uri()}#episode=0-0-0-50", work / "profile-report")
    rendered = float(dom.split('data-rendered-ms="', 1)[1].split('"', 1)[0])
    print(f"Chromium: script done {rendered:.0f} ms after navigation start (list drawn, episode opened); "
          f"--dump-dom {wall:.2f} s vs {base:.2f} s for an empty page")


if __name__ == "__main__":
    main()

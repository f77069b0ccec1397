"""Docs tables made from committed results files: one command regenerates them, a test holds them to the files.

A table in ``docs/*.md`` that reports measured figures sits between two markers::

    <!-- generated: learning-check -->
    | seed | ... |
    <!-- end generated -->

and is written by the generator of that name from the results files under ``docs/data/`` (each
file records the command, commit and machine load that produced it: ``benchmarks/provenance.py``).

    python -m tools.docs_tables           # rewrite every generated table from its files
    python -m tools.docs_tables --check   # exit 1, naming each table that disagrees with its files

``tests/test_docs_tables.py`` runs the check, so a table edited by hand, or a results file
replaced without regenerating the docs, fails the tests.

Example:
    >>> text = "intro\\n<!-- generated: demo -->\\nold\\n<!-- end generated -->\\nafter\\n"
    >>> print(fill(text, {"demo": lambda: "| a |\\n|---|"}), end="")
    intro
    <!-- generated: demo -->
    | a |
    |---|
    <!-- end generated -->
    after
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentgym_budget.eval.stats import wilson_interval

REPO = Path(__file__).resolve().parents[1]
DOCS, DATA = REPO / "docs", REPO / "docs" / "data"
_BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.DOTALL)

Generator = Callable[[], str]


def fill(text: str, generators: dict[str, Generator]) -> str:
    """``text`` with every generated block rewritten by its generator (an unknown name is a ``KeyError``)."""
    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in generators:
            raise KeyError(f"no generator named {name!r} (known: {', '.join(sorted(generators))})")
        return f"{match.group(1)}{generators[name]().rstrip()}\n{match.group(4)}"

    return _BLOCK.sub(replace, text)


def stale_tables(docs: Path = DOCS, generators: dict[str, Generator] | None = None) -> list[str]:
    """``"FILE: NAME"`` for each generated table whose text is not what its files give now."""
    generators = GENERATORS if generators is None else generators
    stale = []
    for path in sorted(docs.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            name = match.group("name")
            if fill(match.group(0), generators) != match.group(0):
                stale.append(f"{path.name}: {name}")
    return stale


def regenerate(docs: Path = DOCS) -> list[Path]:
    """Rewrite every generated table in ``docs``; the files that changed."""
    changed = []
    for path in sorted(docs.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        new = fill(text, GENERATORS)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


# -- the generators ---------------------------------------------------------------------------------
def learning_check_runs(folder: Path | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every seed's run and every file's provenance, from ``docs/data/learning-check/*.json``, by seed."""
    folder = folder or DATA / "learning-check"
    runs, sources = [], []
    for path in sorted(folder.glob("*.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        runs += report["runs"]
        sources.append({"file": path.name, **report.get("provenance", {})})
    seeds = [run["seed"] for run in runs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"a seed appears in two learning-check files: {sorted(seeds)}")
    return sorted(runs, key=lambda run: run["seed"]), sources


def learning_check_table() -> str:
    """Per seed: learned, training success over the last 20 updates, held-out Pass@(1,T), CPU; then the rate."""
    runs, sources = learning_check_runs()
    if not runs:
        return "(no results file under docs/data/learning-check/ yet)"
    ts = sorted({int(t) for run in runs for t in run["held_out_pass1"]})
    rows = ["| seed | learned | training success, last 20 updates | "
            + " | ".join(f"held-out Pass@(1,T={t})" for t in ts) + " | CPU minutes |",
            "|---|---|---|" + "---|" * len(ts) + "---|"]
    for run in runs:
        held = " | ".join(f"{run['held_out_pass1'][str(t)]:.2f}" for t in ts)
        rows.append(f"| {run['seed']} | {'yes' if run['learned'] else '**no**'} | {run['last_success']:.2f} | {held} "
                    f"| {run['cpu_seconds'] / 60:.1f} |")
    learned = sum(run["learned"] for run in runs)
    low, high = wilson_interval(learned, len(runs))
    failed = [run["seed"] for run in runs if not run["learned"]]
    lines = rows + ["", f"**Learned {learned} of {len(runs)} seeds** (rate {learned / len(runs):.2f}, 95 % Wilson "
                        f"interval {low:.2f}–{high:.2f}); not learned: seeds {', '.join(map(str, failed)) or 'none'}."]
    for source in sources:
        lines.append(f"From `docs/data/learning-check/{source['file']}`: `{source.get('command', '?')}` at commit "
                     f"`{str(source.get('commit', '?'))[:10]}`{' (uncommitted changes)' if source.get('dirty') else ''}"
                     f", load average {_load(source)} on {source.get('cpus', '?')} CPUs, {source.get('utc', '?')}.")
    return "\n".join(lines)


def process_reward_study_table(path: Path | None = None) -> str:
    """Per seed and arm: held-out Pass@(1,T) and training success; then the means and the paired differences
    over seeds, from ``docs/data/process-reward-study/keydoor.json`` (benchmarks/budgetmix_study.py --results)."""
    path = path or DATA / "process-reward-study" / "keydoor.json"
    if not path.exists():
        return f"(no results file {path.name} under {path.parent} yet)"
    report = json.loads(path.read_text(encoding="utf-8"))
    ts, arms = report["ts"], list(report["per_seed"])
    cells = " | ".join(f"T={t}" for t in ts)
    rows = [f"| arm | seed | {cells} | training success, last 20 updates |", "|---|---|" + "---|" * len(ts) + "---|"]
    for arm in arms:
        for seed, run in sorted(report["per_seed"][arm].items(), key=lambda item: int(item[0])):
            held = " | ".join(f"{100 * run['held_out_pass1'][str(t)]:.1f}" for t in ts)
            rows.append(f"| {arm} | {seed} | {held} | {run['train_success_last20']:.2f} |")
    for arm in arms:
        mean = " | ".join(f"**{100 * c['mean']:.1f}** [{_points(c['ci_low'])}, {_points(c['ci_high'])}]"
                          for c in map(report["pass1"][arm].get, map(str, ts)))
        rows.append(f"| {arm} | mean [95 % t-CI] | {mean} | |")
    rows += ["", f"| paired difference, points [95 % paired bootstrap CI over seeds; * excludes 0] | {cells} |",
             "|---|" + "---|" * len(ts)]
    for name, by_t in report["paired"].items():
        rows.append(f"| {name} | " + " | ".join(
            f"{100 * c['diff']:+.1f} [{_points(c['ci_low'], True)}, {_points(c['ci_high'], True)}]"
            f"{'*' if c['significant'] else ''}" for c in map(by_t.get, map(str, ts))) + " |")
    source = report["provenance"]
    rows += ["", f"From `docs/data/process-reward-study/keydoor.json`: `{source.get('command', '?')}` at commit "
                 f"`{str(source.get('commit', '?'))[:10]}`{' (uncommitted changes)' if source.get('dirty') else ''}, "
                 f"{len(report['seeds'])} seeds x {report['updates']} updates, {report['eval_tasks']} held-out tasks x "
                 f"{report['eval_attempts']} attempts, load average {_load(source)} on {source.get('cpus', '?')} CPUs, "
                 f"{source.get('utc', '?')}; {report['cpu_seconds'] / 60:.1f} CPU-minutes over the runs."]
    return "\n".join(rows)


def _points(value: float | None, signed: bool = False) -> str:
    return "n/a" if value is None else f"{100 * value:{'+' if signed else ''}.1f}"


def _load(source: dict[str, Any]) -> str:
    start, end = source.get("load_average"), source.get("load_average_end")
    first = f"{start[0]:.1f}" if start else "?"
    return f"{first} → {end[0]:.1f}" if end else first


#: Every generator by the name its docs block carries.
GENERATORS: dict[str, Generator] = {
    "learning-check": learning_check_table,
    "process-reward-study": process_reward_study_table,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report tables that disagree with their files")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_tables()
        for entry in stale:
            print(f"stale: docs/{entry} (run: python -m tools.docs_tables)")
        return 1 if stale else 0
    for path in regenerate():
        print(f"rewrote docs/{path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

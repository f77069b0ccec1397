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


def _load(source: dict[str, Any]) -> str:
    start, end = source.get("load_average"), source.get("load_average_end")
    first = f"{start[0]:.1f}" if start else "?"
    return f"{first} → {end[0]:.1f}" if end else first


def _source_line(path: Path, source: dict[str, Any]) -> str:
    """``From `FILE`: `command` at commit `...`, load average ... on N CPUs, time.``"""
    return (f"From `{path.relative_to(REPO).as_posix()}`: `{source.get('command', '?')}` at commit "
            f"`{str(source.get('commit', '?'))[:10]}`{' (uncommitted changes)' if source.get('dirty') else ''}, "
            f"load average {_load(source)} on {source.get('cpus', '?')} CPUs, {source.get('utc', '?')}.")


def chars_per_token_table(path: Path | None = None) -> str:
    """Per env family: characters per SmolLM2 token of the evaluator's prompts and of TRL turns."""
    path = path or DATA / "chars-per-token" / "smollm2.json"
    if not path.is_file():
        return f"(no results file {path.relative_to(REPO).as_posix()} yet)"
    report = json.loads(path.read_text(encoding="utf-8"))
    rows = ["| env | prompt: chars per token | prompt tokens, mean (p95) | TRL turn: chars per token "
            "| TRL turn tokens, mean (p95) |", "|---|---|---|---|---|"]
    for family in report["families"]:
        if "skipped" in family:
            rows.append(f"| {family['env_id']} | not run here: {family['skipped']} | | | |")
            continue
        prompt, turn = family["prompt"], family["trl_turn"]
        rows.append(f"| {family['env_id']} | {prompt['chars_per_token']:.2f} | {prompt['tokens_per_text_mean']:.0f} "
                    f"({prompt['tokens_per_text_p95']:.0f}) | {turn['chars_per_token']:.2f} | "
                    f"{turn['tokens_per_text_mean']:.0f} ({turn['tokens_per_text_p95']:.0f}) |")
    overall = report["overall_chars_per_token"]
    rows += ["", f"Across families (min / median / max): prompts {overall['prompt']['min']:.2f} / "
                 f"{overall['prompt']['median']:.2f} / {overall['prompt']['max']:.2f}, TRL turns "
                 f"{overall['trl_turn']['min']:.2f} / {overall['trl_turn']['median']:.2f} / "
                 f"{overall['trl_turn']['max']:.2f} characters per token ({report['episodes']} random episodes "
                 f"per family at budget {report['budget']}).", _source_line(path, report.get("provenance", {}))]
    return "\n".join(rows)


def trl_turn_length_table(path: Path | None = None) -> str:
    """ALFWorld turns in a TRL completion, in SmolLM2 tokens: per turn and per episode, random and expert play."""
    path = path or DATA / "trl-turn-length" / "smollm2.json"
    if not path.is_file():
        return f"(no results file {path.relative_to(REPO).as_posix()} yet)"
    report = json.loads(path.read_text(encoding="utf-8"))
    rows = ["| commands | episodes × budget | turns | per turn: mean / p95 / max | per episode: mean / max |",
            "|---|---|---|---|---|"]
    for row in report["rows"]:
        unit = row["unit"]
        rows.append(f"| {row['policy']} | {row['episodes']} × {row['budget']} | {row['turns']} | "
                    f"{row['per_turn_mean']:.0f} / {row['per_turn_p95']:.0f} / {row['per_turn_max']} {unit} | "
                    f"{row['per_episode_mean']:.0f} / {row['per_episode_max']} {unit} |")
    return "\n".join(rows + ["", _source_line(path, report.get("provenance", {}))])


def smollm2_adapters_table(folder: Path | None = None) -> str:
    """SmolLM2 through each adapter: episodes, turns, valid replies, wins, tokens, seconds."""
    folder = folder or DATA / "smollm2-adapters"
    paths = sorted(folder.glob("*.json"))
    if not paths:
        return f"(no results files under {folder.relative_to(REPO).as_posix()}/ yet)"
    rows = ["| library | prompt | temperature | episodes | turns | valid replies | won | tokens (prompt + completion) "
            "| wall s |", "|---|---|---|---|---|---|---|---|---|"]
    sources = []
    for path in paths:
        run = json.loads(path.read_text(encoding="utf-8"))
        valid = run.get("valid_reply_share")
        tokens = (f"{run['prompt_tokens']:,} + {run['completion_tokens']:,}"
                  if run.get("prompt_tokens") is not None else "not reported")
        prompt = run.get("prompt") or "TRL tool calls"
        rows.append(f"| {run['library']} | {prompt} | {run['temperature']:g} | {run['episodes']} | {run['turns']} | "
                    f"{'—' if valid is None else f'{valid:.2f}'} | {run['won']} | {tokens} | {run['seconds']:.0f} |")
        sources.append(_source_line(path, run.get("provenance", {})))
    return "\n".join(rows + [""] + sources)


#: Every generator by the name its docs block carries.
GENERATORS: dict[str, Generator] = {
    "learning-check": learning_check_table,
    "chars-per-token": chars_per_token_table,
    "trl-turn-length": trl_turn_length_table,
    "smollm2-adapters": smollm2_adapters_table,
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

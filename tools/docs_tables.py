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


#: The real-model table's rows in reading order (a row file's name without ``.json``; an RL row is
#: ``<start>+rl-<arm>-seed<N>`` and sorts after the start it trained from).
SMOLLM2_ROW_ORDER = ("zero-shot", "sft-format", "sft-expert")


def smollm2_table_rows(folder: Path | None = None) -> list[dict[str, Any]]:
    """Every row file of ``docs/data/smollm2-table/`` in reading order (:data:`SMOLLM2_ROW_ORDER`, then RL rows)."""
    folder = folder or DATA / "smollm2-table"
    rows = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))]

    def order(row: dict[str, Any]) -> tuple[int, str]:
        name = row["row"]
        return (SMOLLM2_ROW_ORDER.index(name), "") if name in SMOLLM2_ROW_ORDER else (len(SMOLLM2_ROW_ORDER), name)
    return sorted(rows, key=order)


def smollm2_table() -> str:
    """Per row: what trained it, held-out Pass@(1,T) with its 95 % Wilson interval per T, tasks; then each command."""
    rows = smollm2_table_rows()
    if not rows:
        return "(no results file under docs/data/smollm2-table/ yet)"
    ts = sorted({int(t) for row in rows for t in row["held_out_pass1"]})
    lines = ["| row | training | " + " | ".join(f"held-out Pass@(1,T={t}) [95 % CI]" for t in ts) + " | tasks |",
             "|---|---|" + "---|" * len(ts) + "---|"]
    for row in rows:
        cells = []
        for t in ts:
            cell = row["held_out_pass1"].get(str(t))
            cells.append("–" if cell is None else f"{cell['pass1']:.2f} [{cell['wilson95'][0]:.2f}, "
                                                  f"{cell['wilson95'][1]:.2f}] ({cell['successes']}/{cell['tasks']})")
        tasks = max(cell["tasks"] for cell in row["held_out_pass1"].values())
        lines.append(f"| {row['row']} | {_smollm2_training(row)} | " + " | ".join(cells) + f" | {tasks} |")
    lines.append("")
    for row in rows:
        source = row["provenance"]
        lines.append(f"- {row['row']}: `{source.get('command', '?')}` at commit `{str(source.get('commit', '?'))[:10]}`"
                     f"{' (uncommitted changes)' if source.get('dirty') else ''}, load average {_load(source)} on "
                     f"{source.get('cpus', '?')} CPUs, {source.get('utc', '?')} "
                     f"(`docs/data/smollm2-table/{row['row']}.json`).")
    return "\n".join(lines)


def _smollm2_training(row: dict[str, Any]) -> str:
    """What the row's model went through: SFT (source, episodes, steps, reply loss, CPU) and GRPO (updates, ...)."""
    parts = []
    if "sft" in row:
        sft, config = row["sft"], row["sft"]["config"]
        parts.append(f"SFT {config['source']}: {sft['episodes']} episodes, {config['steps']} steps × "
                     f"{config['batch_size']}, reply loss {sft['reply_loss_before']:.2f} → {sft['reply_loss_after']:.2f},"
                     f" {sft['cpu_seconds'] / 60:.1f} CPU-min")
    if "rl" in row:
        rl = row["rl"]
        parts.append(f"GRPO {rl['config']['budget']}: {rl['updates']} updates, {rl['episodes']} episodes, "
                     f"{rl['cpu_seconds'] / 60:.1f} CPU-min")
    return "; then ".join(parts) or "none (the base model)"


def smollm2_step_cost_table(path: Path | None = None) -> str:
    """Per arm of ``benchmarks/smollm2_step_cost.py``: CPU seconds of each part of an update, per turn, the ratios."""
    path = path or DATA / "smollm2-rl" / "step-cost.json"
    if not path.is_file():
        return "(no docs/data/smollm2-rl/step-cost.json yet)"
    facts = json.loads(path.read_text(encoding="utf-8"))
    parts = ("rollout", "forward", "backward", "optimizer", "old_logprobs")
    lines = ["| arm (LoRA layers : turns shown : prompt) | trainable parameters | turns per update | "
             + " | ".join(f"CPU-s {part}" for part in parts) + " | CPU-s per turn | per turn vs first | backward vs first |",
             "|---|---|---|" + "---|" * len(parts) + "---|---|---|"]
    for name, arm in facts["arms"].items():
        settings = dict(item.split("=") for item in name.split(","))
        layers = "all" if settings["lora_layers"] == "0" else settings["lora_layers"]
        label = f"{layers} : {settings['max_turns_shown']} : {settings['prompt']}"
        lines.append(f"| {label} | {arm['trainable_parameters']:,} | {arm['turns_per_update']:.1f} | "
                     + " | ".join(f"{arm['cpu_seconds'][part]:.2f}" for part in parts)
                     + f" | {arm['cpu_seconds_per_turn']:.3f} | {arm['ratio_per_turn_to_first']:.2f} | "
                     f"{arm['ratio_backward_to_first']:.2f} |")
    source = facts["provenance"]
    lines += ["", f"From `docs/data/smollm2-rl/step-cost.json`: `{source.get('command', '?')}` at commit "
                  f"`{str(source.get('commit', '?'))[:10]}`{' (uncommitted changes)' if source.get('dirty') else ''}, "
                  f"load average {_load(source)} on {source.get('cpus', '?')} CPUs, {source.get('utc', '?')}; "
                  f"{facts['settings']['updates']} interleaved updates per arm, mean per update."]
    return "\n".join(lines)


def smollm2_rl_runs_table(folder: Path | None = None) -> str:
    """Per GRPO run of ``benchmarks/smollm2_rl.py`` (``docs/data/smollm2-rl/rl-seed*/results.json``): how far it
    got, its held-out curve and the mean CPU seconds of each part of an update."""
    folder = folder or DATA / "smollm2-rl"
    paths = sorted(folder.glob("rl-seed*/results.json"))
    if not paths:
        return "(no docs/data/smollm2-rl/rl-seed*/results.json yet)"
    lines = ["| run | updates (planned) | episodes | CPU-min of updates | held-out Pass@(1,T) by update | "
             "CPU-s per update: rollout / forward / backward / optimizer | CPU-s per turn |",
             "|---|---|---|---|---|---|---|"]
    sources = []
    for path in paths:
        facts = json.loads(path.read_text(encoding="utf-8"))
        rl, settings, cpu = facts["rl"], facts["settings"], facts["rl"]["mean_cpu_seconds_per_update"]
        updates = rl["updates"]  # one row per update done (a summarized run may stop short of settings["updates"])
        episodes = sum(u["update_episodes"] for u in updates)
        cpu_minutes = sum(u["cpu_rollout_seconds"] + u["cpu_update_seconds"] for u in updates) / 60
        curve = ", ".join(f"{point['update']}: {point['pass1']:.2f}" for point in rl["held_out_curve"])
        parts = " / ".join(f"{cpu[f'cpu_{part}_seconds']:.1f}" for part in ("rollout", "forward", "backward", "optimizer"))
        lines.append(f"| {path.parent.name} | {len(updates)} ({settings['updates']}) | {episodes} | "
                     f"{cpu_minutes:.1f} | T={settings['eval_t']}, {settings['eval_tasks']} tasks: "
                     f"{curve} | {parts} | {rl['cpu_seconds_per_turn']:.2f} |")
        source = facts["provenance"]
        sources.append(f"- {path.parent.name}: `{source.get('command', '?')}` at commit "
                       f"`{str(source.get('commit', '?'))[:10]}`, load average {_load(source)}, {source.get('utc', '?')}.")
    return "\n".join([*lines, "", *sources])


#: Every generator by the name its docs block carries.
GENERATORS: dict[str, Generator] = {
    "learning-check": learning_check_table,
    "smollm2-table": smollm2_table,
    "smollm2-step-cost": smollm2_step_cost_table,
    "smollm2-rl-runs": smollm2_rl_runs_table,
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

"""Docs tables made from committed results files: one command regenerates them, a test holds them to the files.

A table in ``docs/*.md`` or in a study's ``experiments/<study>/README.md`` that reports measured figures
sits between two markers::

    <!-- generated: learning-check -->
    | seed | ... |
    <!-- end generated -->

and is written by the generator of that name from the results files under ``docs/data/`` (each
file records the command, commit and machine load that produced it: ``benchmarks/provenance.py``),
or, for facts of committed data (the bundled ALFWorld games), from that data itself.

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


def pages(docs: Path = DOCS) -> list[Path]:
    """The pages that may hold generated tables: ``docs/*.md`` and the studies' ``experiments/*/README.md``."""
    return [*sorted(docs.glob("*.md")), *sorted((docs.parent / "experiments").glob("*/README.md"))]


def stale_tables(docs: Path = DOCS, generators: dict[str, Generator] | None = None) -> list[str]:
    """``"FILE: NAME"`` (the file relative to the repository) for each generated table whose text is not
    what its files give now."""
    generators = GENERATORS if generators is None else generators
    stale = []
    for path in pages(docs):
        text = path.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            name = match.group("name")
            if fill(match.group(0), generators) != match.group(0):
                stale.append(f"{path.relative_to(docs.parent)}: {name}")
    return stale


def regenerate(docs: Path = DOCS) -> list[Path]:
    """Rewrite every generated table in :func:`pages`; the files that changed."""
    changed = []
    for path in pages(docs):
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
    lines += [_source(f"learning-check/{source['file']}", source) for source in sources]
    return "\n".join(lines)


def process_reward_study_table(path: Path | None = None) -> str:
    """Per seed and arm: held-out Pass@(1,T) and training success; then the means and the paired differences
    over seeds, from ``docs/data/process-reward-study/keydoor.json`` or another file of that folder
    (benchmarks/budgetmix_study.py --results)."""
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
    shown = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name
    rows += ["", f"From `{shown}`: `{source.get('command', '?')}` at commit "
                 f"`{str(source.get('commit', '?'))[:10]}`{' (uncommitted changes)' if source.get('dirty') else ''}, "
                 f"{len(report['seeds'])} seeds x {report['updates']} updates, {report['eval_tasks']} held-out tasks x "
                 f"{report['eval_attempts']} attempts, load average {_load(source)} on {source.get('cpus', '?')} CPUs, "
                 f"{source.get('utc', '?')}; {report['cpu_seconds'] / 60:.1f} CPU-minutes over the runs."]
    return "\n".join(rows)


def _points(value: float | None, signed: bool = False) -> str:
    return "n/a" if value is None else f"{100 * value:{'+' if signed else ''}.1f}"


def verifiers_concurrency_table(folder: Path | None = None) -> str:
    """Per results file and model latency: wall time, stall share and longest stall, one at a time and concurrent."""
    folder = folder or DATA / "verifiers-concurrency"
    lines = ["| engine | model latency per reply | rollouts in flight | wall | event loop in stalls > 0.1 s "
             "| longest stall | load average (start → end) |", "|---|---|---|---|---|---|---|"]
    sources = []
    for path in sorted(folder.glob("*.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        source = report["provenance"]
        sources.append(f"From `docs/data/verifiers-concurrency/{path.name}`: `{source['command']}` at commit "
                       f"`{source['commit'][:10]}`{' (uncommitted changes)' if source.get('dirty') else ''}, "
                       f"{source.get('cpus', '?')} CPUs, {source.get('utc', '?')}.")
        for row in report["rows"]:
            lines.append(f"| {row['engine']} | {row['latency_s']:g} s | {row['max_concurrent']} of {row['rollouts']} "
                         f"| {row['wall_s']:.1f} s | {row['stall_share']:.0%} ({row['stalls_over_0.1s']} stalls) "
                         f"| {row['max_loop_stall_s']:.2f} s | {_load(source)} |")
    if not sources:
        return "(no results file under docs/data/verifiers-concurrency/ yet)"
    return "\n".join([*lines, "", *sources])


def _load(source: dict[str, Any]) -> str:
    start, end = source.get("load_average"), source.get("load_average_end")
    first = f"{start[0]:.1f}" if start else "?"
    return f"{first} → {end[0]:.1f}" if end else first


def smollm2_eval_table() -> str:
    """The SmolLM2 evaluation tables: ``benchmarks/smollm2_eval.py --tables`` over ``docs/data/smollm2-eval/``."""
    return _benchmark("smollm2_eval").tables(DATA / "smollm2-eval")


def _benchmark(name: str) -> Any:
    """A script of ``benchmarks/`` as a module (the script that wrote the files also reads them back)."""
    import importlib

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module(f"benchmarks.{name}")


def smollm2_fewshot_gap_table() -> str:
    """Why the few-shot KeyDoor wins differ between the eval table and the adapters: ``benchmarks/smollm2_fewshot_gap.py``."""
    return _benchmark("smollm2_fewshot_gap").tables(DATA / "smollm2-eval" / "fewshot-gap.json")


#: The kernel variants as the docs name them.
_KERNEL_PATHS = {"full-logits": "full", "naive": "naive", "fused": "fused"}


def logprob_kernels_smollm2_table() -> str:
    """Per shape and path: time, peak, one logits copy, and both as ratios to the full path (results.json).

    The fused row with the most scored tokens is in bold (the case the docs discuss).
    """
    report = json.loads((DATA / "logprob-kernels-smollm2" / "results.json").read_text(encoding="utf-8"))
    rows = ["| S × L | scored | path | time (s) | peak (GB) | logits copy (GB, computed) | time / full | peak / full |",
            "|---|---|---|---|---|---|---|---|"]
    full = {(r["sequences"], r["length"]): r for r in report["rows"] if r["variant"] == "full-logits"}
    # The row the text is about: the fused path at the most scored tokens, where chunking matters.
    best_peak = max((r for r in report["rows"] if r["variant"] == "fused"), key=lambda r: r["scored_tokens"])
    for row in report["rows"]:
        reference = full[(row["sequences"], row["length"])]
        time_ratio, peak_ratio = row["time_s"] / reference["time_s"], row["peak_bytes"] / reference["peak_bytes"]
        peak, peak_text = row["peak_bytes"] / 1e9, f"{peak_ratio:.2f}×"
        peak_cell = f"**{peak:.2f}**" if row is best_peak else f"{peak:.2f}"
        if row is best_peak:
            peak_text = f"**{peak_text}**"
        rows.append(f"| {row['sequences']} × {row['length']} | {row['scored_tokens']:,} | {_KERNEL_PATHS[row['variant']]} "
                    f"| {_seconds(row['time_s'])} | {peak_cell} | {row['logits_bytes_computed'] / 1e9:.3f} "
                    f"| {time_ratio:.2f}× | {peak_text} |")
    return "\n".join(rows + ["", _source("logprob-kernels-smollm2/results.json", report.get("provenance", {}))])


def _seconds(value: float) -> str:
    """Three significant figures at most (``15.5``, ``0.86``)."""
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


#: The allotted turns (K × T) the frontier example asks about: 60 turns per task, and 50 for 1 × 50.
_FRONTIER_CAPS = (50, 60)


def frontier_alfworld_table() -> str:
    """The cells of ``docs/data/frontier-alfworld/frontier.csv`` allotted 50 or 60 turns; the best under 60 in bold."""
    import csv

    with (DATA / "frontier-alfworld" / "frontier.csv").open(encoding="utf-8", newline="") as handle:
        cells = [row for row in csv.DictReader(handle) if row["cost_kind"] == "turns"]
    by_cell: dict[tuple[int, int], dict[str, dict[str, str]]] = {}
    for row in cells:
        if int(row["allotted_turns"]) in _FRONTIER_CAPS:
            by_cell.setdefault((int(row["k"]), int(row["t"])), {})[row["strategy"]] = row
    best = max(by_cell, key=lambda cell: float(by_cell[cell]["parallel"]["pass"]))
    rows = ["| K × T | allotted turns | Pass@(K,T) [CI] | turns, parallel | turns, sequential |",
            "|---|---|---|---|---|"]
    for (k, t), strategies in sorted(by_cell.items()):
        cell = strategies["parallel"]
        name, value = f"{k} × {t}", f"{float(cell['pass']):.3f}"
        if (k, t) == best:
            name, value = f"**{name}**", f"**{value}**"
        rows.append(f"| {name} | {cell['allotted_turns']} | {value} [{float(cell['ci_low']):.2f}, "
                    f"{float(cell['ci_high']):.2f}] | {float(cell['cost']):.1f} | "
                    f"{float(strategies['sequential']['cost']):.1f} |")
    return "\n".join(rows)


def stopping_rules_table(folder: Path | None = None) -> str:
    """Per run in ``docs/data/stopping-rules/``: each rule at the total budgets ``T`` and ``2T`` (``T`` the largest)
    against the fixed baseline at the same expected turns, with the paired gain."""
    folder = folder or DATA / "stopping-rules"
    rows = ["| run | rule | total turns (T) | expected turns | success [CI] | attempts cut | fixed at those turns "
            "[CI] | gain [paired CI] |", "|---|---|---|---|---|---|---|---|"]
    sources = []
    for path in sorted(folder.glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        top = max(run["ts"])
        for p in run["rule_frontier"]:
            if p["t"] != top or p["total_budget"] not in (top, 2 * top) or "fixed" not in p:
                continue
            fixed, gain = p["fixed"], p["gain"]
            rows.append(f"| {run['env_id']}, {run['policy']} | `{p['rule']}` | {p['total_budget']:g} ({p['t']}) | "
                        f"{p['turns']:.1f} | {p['success']:.3f} [{p['ci'][0]:.2f}, {p['ci'][1]:.2f}] | "
                        f"{p['cut_rate']:.0%} | {fixed['success']:.3f} [{fixed['ci'][0]:.2f}, {fixed['ci'][1]:.2f}] "
                        f"({fixed['label']}) | {gain['mean']:+.3f} [{gain['ci'][0]:+.3f}, {gain['ci'][1]:+.3f}] |")
        sources.append(_source_line(path, run["provenance"]))
    return "\n".join(rows + [""] + sources)


def _source(file: str, provenance: dict[str, Any]) -> str:
    """One line naming ``docs/data/<file>`` and how it was made (:func:`_source_line`)."""
    return _source_line(DATA / file, provenance)


def alfworld_equivalence_table() -> str:
    """Per run of ``benchmarks/alfworld_equivalence.py --report`` in ``docs/data/alfworld-equivalence-v2/``: the counts."""
    rows = ["| run (report file) | games | episodes | steps compared, by split | mismatches | hash-order ties "
            "| ended by an upstream expert error | stopped by the time limit | seconds |",
            "|---|---|---|---|---|---|---|---|---|"]
    total = {"games": 0, "episodes": 0, "steps_compared": 0, "mismatches": 0, "episodes_ended_by_hash_order_tie": 0,
             "episodes_ended_by_upstream_expert_error": 0, "seconds": 0.0}
    for path in sorted((DATA / "alfworld-equivalence-v2").glob("run*.json")):  # not tie-recheck.json
        report = json.loads(path.read_text(encoding="utf-8"))
        for key in total:
            total[key] += report[key]
        splits = ", ".join(f"{split} {steps:,}" for split, steps in report["steps_by_split"].items())
        rows.append(f"| `{path.name}` | {report['games']} | {report['episodes']} | {report['steps_compared']:,} "
                    f"({splits}) | {report['mismatches']} | {report['episodes_ended_by_hash_order_tie']} | "
                    f"{report['episodes_ended_by_upstream_expert_error']} | "
                    f"{'yes' if report['stopped_by_time_limit'] else 'no'} | {report['seconds']:,.0f} |")
    rows.append(f"| **total** | {total['games']} | {total['episodes']:,} | **{total['steps_compared']:,}** | "
                f"**{total['mismatches']}** | {total['episodes_ended_by_hash_order_tie']} | "
                f"{total['episodes_ended_by_upstream_expert_error']} | | {total['seconds']:,.0f} |")
    return "\n".join(rows)


def _results(name: str) -> dict[str, Any]:
    """``docs/data/<name>`` (a JSON results file) as a dict."""
    return json.loads((DATA / name).read_text(encoding="utf-8"))


#: The policies of ``benchmarks/webshop_throughput.py`` as docs/webshop.md names them, in row order.
_WEBSHOP_POLICIES = {
    "expert": "expert",
    "rule": "upstream's rule baseline (search the instruction, click the first result, buy)",
    "random": "random over admissible commands",
}


def webshop_difficulty_table() -> str:
    """Success and mean reward of the expert, the rule baseline and random play (webshop/throughput.json)."""
    report = _results("webshop/throughput.json")
    rows = [f"Over {report['episodes']} episodes with a {report['step_limit']}-step limit, on the "
            f"{report['products']:,}-product catalog:", "",
            "| policy | success (reward 1) | mean reward |", "|---|---|---|"]
    for key, label in _WEBSHOP_POLICIES.items():
        policy = report["policies"][key]
        rows.append(f"| {label} | {policy['success']:.3f} | {policy['mean_reward']:.3f} |")
    return "\n".join(rows + ["", _source("webshop/throughput.json", report["provenance"])])


def webshop_throughput_table() -> str:
    """Build cost, raw engine next to the env, env steps/s per policy (webshop/throughput.json); wall (CPU)."""
    report = _results("webshop/throughput.json")
    search, env_search = report["raw_search"], report["env_search_step"]
    queries, rewards = report["queries"], report["get_reward"]

    def per_call(clock: dict[str, float], unit: str) -> str:
        return (f"{queries / clock['wall_s']:,.0f} {unit}/s: {1e3 * clock['wall_s'] / queries:.2f} ms "
                f"({1e3 * clock['cpu_s'] / queries:.2f} ms CPU)")

    build = report["build"]
    rows = ["| what | figure |", "|---|---|",
            f"| catalog generation, {report['products']:,} products | {build['catalog_generation']['wall_s']:.2f} s "
            f"({build['catalog_generation']['cpu_s']:.2f} s CPU) |",
            f"| BM25 index build | {build['bm25_index']['wall_s']:.2f} s ({build['bm25_index']['cpu_s']:.2f} s CPU) |",
            f"| raw bm25s search | {per_call(search, 'queries')} |",
            f"| `get_reward` | {report['get_reward_calls'] / rewards['wall_s']:,.0f} calls/s |",
            f"| env `search[...]` step | {per_call(env_search, 'steps')} |",
            f"| **env search step / raw search** | **{env_search['wall_s'] / search['wall_s']:.2f}× wall, "
            f"{env_search['cpu_s'] / search['cpu_s']:.2f}× CPU** |"]
    for key in ("expert", "rule", "random"):
        policy = report["policies"][key]
        rows.append(f"| env steps/s, {key} policy | {policy['steps'] / policy['wall_s']:,.0f} |")
    return "\n".join(rows + ["", _source("webshop/throughput.json", report["provenance"])])


def textworld_throughput_table() -> str:
    """Raw engine vs our env per TextWorld game (textworld/backend-throughput.json): medians, per-round ratio range."""
    report = _results("textworld/backend-throughput.json")
    rows = ["| backend | steps × rounds | raw steps/s | ours steps/s | ours/raw | ours/raw, range over rounds "
            "| engine share of our step time |", "|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        if not row["backend"].startswith("TextWorld "):
            continue
        ratios = [ours / raw for raw, ours in zip(row["raw_steps_per_s_by_round"], row["ours_steps_per_s_by_round"])]
        name = row["backend"].removeprefix("TextWorld ").replace("_", " ")
        rows.append(f"| {name} L{row['level']} | {row['steps']} × {row['rounds']} | {row['raw_steps_per_s']:.1f} | {row['ours_steps_per_s']:.1f} "
                    f"| {row['ours_over_raw']:.2f} | {min(ratios):.2f}–{max(ratios):.2f} | {row['engine_share']:.3f} |")
    return "\n".join(rows + ["", "Medians over the rounds (after one warm-up round). "
                                  + _source("textworld/backend-throughput.json", report["provenance"])])


#: ``benchmarks/ray_scaling.py``'s configurations as docs/ray.md names them, in row order.
_RAY_CONFIGS = {
    "local, workers 1": "local, `--workers 1`",
    "local, workers 2": "local, `--workers 2`",
    "ray, 1 actor": "Ray, 1 actor",
    "ray, 2 actors": "Ray, 2 actors",
    "ray, 2 actors, 1 episode/chunk": "Ray, 2 actors, 1 episode per chunk",
}


def ray_rates(report: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """Episodes/s per configuration: over the median round, and over the best (fastest) round."""
    import statistics

    episodes, seconds = report["episodes"], report["seconds_by_round"]
    return ({name: episodes / statistics.median(times) for name, times in seconds.items()},
            {name: episodes / min(times) for name, times in seconds.items()})


def ray_scaling_table() -> str:
    """Local vs Ray episodes/s (median and best round), start-up, overheads and speed-ups (ray/scaling.json)."""
    report = _results("ray/scaling.json")
    median, best = ray_rates(report)
    rows = [f"| configuration | episodes/s (median of {report['rounds']}) | best round | actor start-up |",
            "|---|---:|---:|---:|"]
    for name, label in _RAY_CONFIGS.items():
        startup = report["actor_startup_s"].get(name)
        rows.append(f"| {label} | {median[name]:.0f} | {best[name]:.0f} | "
                    f"{'–' if startup is None else f'{startup:.1f} s'} |")

    def overhead(local: str, ray: str) -> str:
        return f"{median[local] / median[ray] - 1:+.1%} (median) / {best[local] / best[ray] - 1:+.1%} (best)"

    oversubscribed = report["oversubscribed"]
    rows += ["",
             f"* Ray vs local at equal worker count (local episodes/s ÷ Ray's − 1): 1 actor "
             f"{overhead('local, workers 1', 'ray, 1 actor')}; 2 actors {overhead('local, workers 2', 'ray, 2 actors')}.",
             f"* Per-episode dispatch at 2 workers: {overhead('local, workers 2', 'ray, 2 actors, 1 episode/chunk')} "
             f"against the 2-process pool.",
             f"* Speed-up 2 vs 1 worker (best rounds): local {best['local, workers 2'] / best['local, workers 1']:.2f}×, "
             f"Ray {best['ray, 2 actors'] / best['ray, 1 actor']:.2f}×.",
             f"* `ray.init` of the local instance: {report['ray_init_s']:.1f} s (once per process). Every configuration "
             f"returned identical records: {'yes' if report['identical_records'] else '**no**'}; "
             f"{oversubscribed['actors']} actors on an instance claiming {oversubscribed['logical_cpus']} CPUs "
             f"returned the records of the in-process run: {'yes' if oversubscribed['identical_records'] else '**no**'}.",
             "", _source("ray/scaling.json", report["provenance"])]
    return "\n".join(rows)


def alfworld_bundle_table() -> str:
    """The bundled ALFWorld splits' figures, computed from the games themselves (``tools/alfworld/bundle_stats.py``).

    No results file: these are facts of the committed data, so the table is the data's, whatever
    commit regenerates it.
    """
    from agentgym_budget.envs.alfworld.game import load_games
    from tools.alfworld import bundle_stats

    games = {split: load_games(split) for split in bundle_stats.SPLITS}
    return "\n".join([bundle_stats.split_table(games), "",
                      "Rooms, all three splits together, per game (median / max):", "",
                      bundle_stats.room_table([game for split in games.values() for game in split]), "",
                      "From the bundled games: `python -m tools.alfworld.bundle_stats`."])


def action_rewrites_table(file: str = "keydoor.json", crossed: str = "another colour") -> str:
    """Per warm-up seed and over all: turns, not admissible, rewritten by the old and by the fuzzy rule (counts, %).

    ``file`` is a ``benchmarks/action_rewrites.py --json-out`` file under ``docs/data/action-rewrites/``;
    ``crossed`` names what a rewrite that crossed to another object changed (KeyDoor: a colour).
    """
    report = _results(f"action-rewrites/{file}")
    rows = ["| seed | turns | not admissible (played as written) | old rule played another command "
            f"| … naming {crossed} | fuzzy rule played another command |", "|---|---|---|---|---|---|"]
    keys = ("exact: not admissible", "old != exact", "old != exact, crossed a colour/number", "fuzzy != exact")
    total = {key: 0 for key in ("turns", *keys)}
    for seed in report["seeds"]:
        rows.append(_rewrite_row(str(seed["seed"]), seed["counts"], keys))
        for key in total:
            total[key] += seed["counts"][key]
    if len(report["seeds"]) > 1:
        rows.append(_rewrite_row("all", total, keys))
    setting = (f"{report['env']} (`{report['budget']}`), {report['episodes']} episodes per seed, "
               f"{report['warmup_steps']} warm-up steps, {report['max_new_tokens']} new tokens; wall seconds of "
               "warm-up / play: " + ", ".join(f"seed {seed['seed']} {seed['warmup_s']:.0f} / {seed['play_s']:.0f}"
                                               for seed in report["seeds"]) + ". ")
    return "\n".join(rows + ["", setting + _source(f"action-rewrites/{file}", report["provenance"])])


def _rewrite_row(name: str, counts: dict[str, int], keys: tuple[str, ...]) -> str:
    turns = counts["turns"]
    cells = " | ".join(f"{counts[key]:,} ({100 * counts[key] / turns:.1f} %)" for key in keys)
    return f"| {name} | {turns:,} | {cells} |"


def alfworld_difficulty_table() -> str:
    """Pass@(1,T) and Pass@(K,T) of the scripted policies on one split, per row its games and seconds."""
    report = _results("alfworld-difficulty/valid_unseen.json")
    ks, ts = (1, report["attempts"]), report["ts"]
    cells = [f"({k},{t})" for k in ks for t in ts]
    rows = [f"| policy: Pass@(K,T) | {' | '.join(cells)} | distinct games | seconds, wall (CPU) |",
            "|---|" + "---|" * (len(cells) + 2)]
    for row in report["rows"]:
        values = " | ".join(f"{row['pass'][f'{k},{t}']:.3f}" for k in ks for t in ts)
        rows.append(f"| {row['label']} | {values} | {row['distinct_games']} | {row['wall_s']:.0f} ({row['cpu_s']:.0f}) |")
    plan = report["plan_length"]
    summary = (f"{report['split']}: {report['games']} games, the fixed expert's plan length min / median / max "
               f"{plan['min']} / {plan['median']:g} / {plan['max']}; tasks = env reset seeds {report['seed']}–"
               f"{report['seed'] + report['tasks'] - 1}, {report['attempts']} attempts. ")
    return "\n".join(rows + ["", summary + _source("alfworld-difficulty/valid_unseen.json", report["provenance"])])
def _source_line(path: Path, source: dict[str, Any]) -> str:
    """``From `FILE`: `command` at commit `...`, load average ... on N CPUs, time.`` (FILE relative to the checkout;
    a file outside it, as in the tests, by its name)."""
    return (f"From `{_shown(path)}`: `{source.get('command', '?')}` at commit "
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
#: The real-model table's rows in reading order (a row file's name without ``.json``; an RL row is
#: ``<start>+rl-<arm>-seed<N>`` and sorts after the start it trained from).
SMOLLM2_ROW_ORDER = ("zero-shot", "sft-format", "sft-format-40-steps", "sft-expert")


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
        lines.append(_smollm2_row_line(row, ts, lambda c: f"{c['pass1']:.2f} [{c['wilson95'][0]:.2f}, "
                                                          f"{c['wilson95'][1]:.2f}] ({c['successes']}/{c['tasks']})"))
    seed_sets = {name: smollm2_rl_table_row(pattern=pattern) for name, pattern in SMOLLM2_RL_SEED_SETS.items()}
    for name, rl in seed_sets.items():  # each configuration's seeds (their last held-out evaluation)
        if rl is None:
            continue
        cells = ["–"] * len(ts)
        low, high = rl["t95"]
        interval = "" if low is None else f" [{max(low, 0.0):.2f}, {min(high, 1.0):.2f}] t-CI over seeds"
        if rl["t"] in ts:
            cells[ts.index(rl["t"])] = (f"{rl['mean']:.2f}{interval} "
                                        f"({rl['successes']}/{rl['tasks'] * rl['seeds']} pooled)")
        lines.append(f"| sft-format+rl-mix, {name} ({rl['seeds']} seeds) | {rl['sft']}; then {rl['advantage']} "
                     f"{rl['budget']}: {'/'.join(str(u) for u in rl['updates'])} updates, {rl['episodes']:.0f} "
                     f"episodes, {rl['cpu_minutes']:.1f} CPU-min per seed | " + " | ".join(cells)
                     + f" | {rl['tasks']} per seed |")
    lines.append("")
    for row in rows:
        source = row["provenance"]
        lines.append(f"- {row['row']}: `{source.get('command', '?')}` at commit `{str(source.get('commit', '?'))[:10]}`"
                     f"{' (uncommitted changes)' if source.get('dirty') else ''}, load average {_load(source)} on "
                     f"{source.get('cpus', '?')} CPUs, {source.get('utc', '?')} "
                     f"(`docs/data/smollm2-table/{row['row']}.json`).")
    for name, rl in seed_sets.items():
        if rl is not None:
            lines.append(f"- sft-format+rl-mix, {name}: the last held-out evaluation of each seed in "
                         f"`docs/data/smollm2-rl/{SMOLLM2_RL_SEED_SETS[name]}` (commands in the runs' tables below).")
    return "\n".join(lines)


def _smollm2_row_line(row: dict[str, Any], ts: list[int], cell_text: Callable[[dict[str, Any]], str]) -> str:
    """``| row | training | cell per T (– where the row has no T) | tasks |`` of a smollm2_table.py row file."""
    cells = [cell_text(cell) if (cell := row["held_out_pass1"].get(str(t))) else "–" for t in ts]
    tasks = max(cell["tasks"] for cell in row["held_out_pass1"].values())
    return f"| {row['row']} | {_smollm2_training(row)} | " + " | ".join(cells) + f" | {tasks} |"


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
    lines += ["", _source_line(path, source) + f" {facts['settings']['updates']} interleaved updates per arm, "
                  "mean per update."]
    return "\n".join(lines)


def update_cost_table(path: Path | None = None) -> str:
    """Per env and arm of ``benchmarks/update_cost.py``: CPU seconds per turn, its parts, the prompt tokens the
    rollout ran, and the machine's limit for the tokens an update must compute at least once."""
    path = path or DATA / "update-cost" / "results.json"
    if not path.is_file():
        return "(no docs/data/update-cost/results.json yet)"
    facts = json.loads(path.read_text(encoding="utf-8"))
    parts = ("prefill", "decode", "forward", "backward")
    lines = ["| env | arm | turns per update | CPU-s per turn | prefill | decode | loss forward | backward "
             "| prompt tokens run / distinct | vs today | limit per turn | share of limit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for env_id, summary in facts["envs"].items():
        for name, arm in summary["arms"].items():
            ratio = summary["ratio_per_turn"]
            lines.append(f"| {env_id} | {name} | {arm['update_turns']:.1f} | {arm['cpu_seconds_per_turn']:.3f} | "
                         + " | ".join(f"{arm['per_turn'][part]:.3f}" for part in parts)
                         + f" | {arm['prompt_tokens_run']:,.0f} / {arm['unique_prompt_tokens']:,.0f} | "
                         f"{ratio[name] if isinstance(ratio, dict) else float('nan'):.2f}x | "
                         f"{arm['limit_cpu_seconds_per_turn']:.3f} | {arm['share_of_limit']:.0%} |")
    lines += ["", _source_line(path, facts["provenance"]) + f" {facts['settings']['updates']} interleaved updates "
                  "per arm, mean per update; the parts are CPU-s per turn."]
    return "\n".join(lines)


def smollm2_rl_runs_table(folder: Path | None = None, pattern: str = "rl-seed*/results.json") -> str:
    """Per GRPO run of ``benchmarks/smollm2_rl.py`` (``docs/data/smollm2-rl/rl-seed*/results.json``; the probes:
    ``pattern="probes/*/results.json"``): how far it got, its training success, its held-out curve and the mean
    CPU seconds of each part of an update."""
    folder = folder or DATA / "smollm2-rl"
    paths = sorted(folder.glob(pattern))
    if not paths:
        return f"(no docs/data/smollm2-rl/{pattern} yet)"
    lines = ["| run | updates (planned) | episodes | CPU-min of updates | training success: first 5 → last 5 updates "
             "| held-out Pass@(1,T) by update | CPU-s per update: rollout / forward / backward / optimizer | "
             "CPU-s per turn |",
             "|---|---|---|---|---|---|---|---|"]
    sources = []
    for path in paths:
        facts = json.loads(path.read_text(encoding="utf-8"))
        rl, settings, cpu = facts["rl"], facts["settings"], facts["rl"]["mean_cpu_seconds_per_update"]
        updates = rl["updates"]  # one row per update done (a summarized run may stop short of settings["updates"])
        episodes = sum(u["update_episodes"] for u in updates)
        cpu_minutes = sum(u["cpu_rollout_seconds"] + u["cpu_update_seconds"] for u in updates) / 60
        curve = ", ".join(f"{point['update']}: {point['pass1']:.2f}" for point in rl["held_out_curve"])
        parts = " / ".join(f"{cpu[f'cpu_{part}_seconds']:.1f}" for part in ("rollout", "forward", "backward", "optimizer"))
        name = path.parent.relative_to(folder).as_posix()
        lines.append(f"| {name} | {len(updates)} ({settings['updates']}) | {episodes} | "
                     f"{cpu_minutes:.1f} | {_training_success(updates)} | T={settings['eval_t']}, "
                     f"{settings['eval_tasks']} tasks: {curve} | {parts} | {rl['cpu_seconds_per_turn']:.2f} |")
        source = facts["provenance"]
        sources.append(f"- {name}: `{source.get('command', '?')}` at commit "
                       f"`{str(source.get('commit', '?'))[:10]}`, load average {_load(source)}, {source.get('utc', '?')}.")
    return "\n".join([*lines, "", *sources])

def smollm2_perf_table(path: Path | None = None) -> str:
    """SmolLM2 on this CPU (``benchmarks/smollm2_perf.py``): the local backend per weight dtype and llama.cpp per
    level in flight, FLOP/s against the same dtype's GEMM rates measured in the same run, llama.cpp's time outside
    its own timings, and how many greedy episodes each plays as the float32 local backend does."""
    path = path or DATA / "smollm2-perf" / "results.json"
    if not path.is_file():
        return "(no docs/data/smollm2-perf/results.json yet)"
    facts = json.loads(path.read_text(encoding="utf-8"))
    gemm, settings = facts["gemm_gflops"], facts["settings"]
    lines = ["| backend | in flight | episodes / turns | wall s | turns/s | tokens run/s (prompt run + generated) | "
             "GFLOP/s over the run (share of the dtype's GEMM peak) | decode steps: GFLOP/s (share of peak; of the "
             "decode shape's rate, weights streamed) | time outside llama.cpp's timings | our process, CPU-ms per turn "
             "| greedy episodes as float32 plays them |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    backends = [(f"local (`hf`, {dtype})", rows, gemm[dtype]) for dtype, rows in facts["local"].items()]
    backends.append(("llama.cpp `llama-server` (Q4_1)", facts["served"], None))
    for label, rows, rates in backends:
        for level, row in rows.items():
            tokens = (row["prompt_tokens_run"] + row["completion_tokens"]) / row["wall_s"]
            run = decode = outside = "–"
            if rates is not None:
                peak = max(value for key, value in rates.items() if key.startswith("square_"))
                rate = row["flops"] / row["wall_s"] / 1e9
                step = row["decode_flops"] / row["decode_wall_s"] / 1e9 if row["decode_wall_s"] else 0.0
                shape = rates.get(f"decode_shape_rows_{level}_streamed")
                run = f"{rate:.1f} ({100 * rate / peak:.0f} %)"
                decode = f"{step:.1f} ({100 * step / peak:.0f} %; " + (
                    f"{100 * step / shape:.0f} %)" if shape else "n/a)")
            if row.get("outside_share") is not None:
                outside = f"{100 * row['outside_share']:.1f} % of {row['requests']} requests' latency"
            same = row.get("same_actions_as_float32")
            same_text = "–" if same is None else f"{same} of {row['episodes']}"
            lines.append(f"| {label} | {level} | {row['episodes']} / {row['turns']} | {row['wall_s']:.1f} | "
                         f"{row['turns'] / row['wall_s']:.2f} | {tokens:.0f} | {run} | {decode} | {outside} | "
                         f"{1000 * row['cpu_s'] / row['turns']:.0f} | {same_text} |")
    rates_text = "; ".join(f"{dtype}: " + ", ".join(f"{key.replace('_', ' ')} {value:.1f}" for key, value in rates.items())
                           for dtype, rates in gemm.items())
    turn_rate = {label: {level: row["turns"] / row["wall_s"] for level, row in rows.items()} for label, rows, _ in backends}
    served = turn_rate.pop("llama.cpp `llama-server` (Q4_1)")
    ratios = [f"llama.cpp / {label} turns/s: " + ", ".join(
        f"{served[level] / rate:.2f}x at {level}" for level, rate in rates_by_level.items() if level in served)
        for label, rates_by_level in turn_rate.items()]
    identical = all(row["replay_identical"] for rows in facts["local"].values() for row in rows.values())
    source = facts["provenance"]
    lines += ["", f"GEMM rates (GFLOP/s, {settings['threads']} threads, same run) — {rates_text}. "
                  + "; ".join(ratios) + ". FLOP counts from a replay of each local row: records identical to the "
                  f"timed run: {'yes' if identical else 'NO'}.",
              "", _source_line(path, source) + f" {settings['env']} ({settings['env_kwargs']}), T={settings['turns']}, "
                  f"the best prompt, greedy, torch {settings['torch']}."]
    return "\n".join(lines)


def _training_success(updates: list[dict[str, Any]], window: int = 5) -> str:
    """The mean training success of the first and the last ``window`` updates (``"–"`` without the metric)."""
    rates = [u["success_rate"] for u in updates if "success_rate" in u]
    if not rates:
        return "–"
    first, last = rates[:window], rates[-window:]
    return f"{sum(first) / len(first):.2f} → {sum(last) / len(last):.2f}"


def smollm2_turns_table(folder: Path | None = None) -> str:
    """Per ``benchmarks/smollm2_turns.py`` file (``docs/data/smollm2-rl/turns-*.json``): each state's commands."""
    folder = folder or DATA / "smollm2-rl"
    paths = sorted(folder.glob("turns-*.json"))
    if not paths:
        return "(no docs/data/smollm2-rl/turns-*.json yet)"
    kinds = ("take key", "task's door", "other door", "no command")
    lines = ["| model | SFT | state | " + " | ".join(kinds) + " | won / episodes |",
             "|---|---|---|" + "---|" * len(kinds) + "---|"]
    sources = []
    for path in paths:
        facts = json.loads(path.read_text(encoding="utf-8"))
        sft = facts.get("sft")
        made = "–" if sft is None else (f"{sft['source']}: {sft['turns']} turns, {sft['steps']} steps × "
                                        f"{sft['batch_size']}, reply loss {sft['reply_loss_after']:.2f}")
        for state, counts in facts["by_state"].items():
            total = sum(counts.values())
            cells = " | ".join(f"{counts[kind]} ({counts[kind] / total:.2f})" for kind in kinds)
            lines.append(f"| `{facts['settings']['model']}` | {made} | {state} | {cells} | "
                         f"{facts['won']} / {facts['episodes']} |")
        sources.append(f"- `{path.name}`: `{facts['provenance'].get('command', '?')}` at commit "
                       f"`{str(facts['provenance'].get('commit', '?'))[:10]}`; commands that are none: "
                       + (", ".join(f"`{reply}` × {n}" for reply, n in facts["no_command_replies"][:5]) or "none")
                       + ".")
    return "\n".join([*lines, "", "Uniformly random admissible play: take key 1/3, each door 1/3.", "", *sources])


def smollm2_rl_probes_table() -> str:
    """:func:`smollm2_rl_runs_table` over the probes (``docs/data/smollm2-rl/probes/*/results.json``)."""
    return smollm2_rl_runs_table(pattern="probes/*/results.json")


#: A seed whose last held-out Pass@(1,T) reaches this has learned (issue 36's target at T = 2).
SMOLLM2_LEARNED_AT = 0.8


def _advantage_name(settings: dict[str, Any]) -> str:
    """The run's advantage estimator as written in the docs (``--train-arg advantage=...``; GRPO by default)."""
    passed = dict(item.split("=", 1) for item in settings.get("train_arg", []) if "=" in item)
    name = passed.get("advantage", "grpo").strip().strip('"')
    return {"grpo": "GRPO", "gigpo": "GiGPO", "rloo": "RLOO"}.get(name, name)


#: The seeds' results files of each GRPO configuration run over seeds: 10 updates, then 50.
SMOLLM2_RL_SEED_SETS = {"10 updates": "rl-seed*/results.json", "50 updates": "long/seed*/results.json"}


def smollm2_rl_seeds(folder: Path | None = None, pattern: str = "rl-seed*/results.json") -> list[dict[str, Any]]:
    """The results files of the seeds of one GRPO configuration (``docs/data/smollm2-rl/<pattern>``)."""
    folder = folder or DATA / "smollm2-rl"
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob(pattern))]


def smollm2_rl_seeds_table(folder: Path | None = None, pattern: str = "rl-seed*/results.json") -> str:
    """Over the seeds: how many learned, the held-out curve's mean with its 95 % t-interval per evaluation, and the
    mean CPU seconds of each part of an update."""
    from agentgym_budget.eval.stats import t_interval

    seeds = smollm2_rl_seeds(folder, pattern)
    if not seeds:
        return f"(no docs/data/smollm2-rl/{pattern} yet)"
    t = seeds[0]["settings"]["eval_t"]
    finals = [facts["rl"]["rl_pass1"] for facts in seeds]
    learned = sum(value >= SMOLLM2_LEARNED_AT for value in finals)
    points = sorted({p["update"] for facts in seeds for p in facts["rl"]["held_out_curve"]})
    lines = [f"| held-out Pass@(1,T={t}) after update | mean over seeds [95 % t-CI] | per seed |", "|---|---|---|"]
    for update in points:
        values = [p["pass1"] for facts in seeds for p in facts["rl"]["held_out_curve"] if p["update"] == update]
        low, high = t_interval(values)
        interval = "" if low is None else f" [{max(low, 0.0):.2f}, {min(high, 1.0):.2f}]"
        lines.append(f"| {update} | {sum(values) / len(values):.2f}{interval} | "
                     f"{', '.join(f'{v:.2f}' for v in values)} |")
    parts = ("rollout", "old_logprobs", "ref_logprobs", "forward", "backward", "optimizer")
    cpu = {part: sum(f["rl"]["mean_cpu_seconds_per_update"][f"cpu_{part}_seconds"] for f in seeds) / len(seeds)
           for part in parts}
    per_turn = sum(f["rl"]["cpu_seconds_per_turn"] for f in seeds) / len(seeds)
    lines += ["", f"**Seeds learned** (last held-out Pass@(1,T={t}) ≥ {SMOLLM2_LEARNED_AT}): **{learned} of "
              f"{len(seeds)}** (seeds {', '.join(str(f['settings']['seed']) for f in seeds)}; last values "
              f"{', '.join(f'{v:.2f}' for v in finals)}). CPU seconds per update, mean over seeds: "
              + ", ".join(f"{part} {cpu[part]:.1f}" for part in parts)
              + f"; {sum(cpu.values()):.1f} in all, {per_turn:.2f} per turn."]
    return "\n".join(lines)


def smollm2_rl_table_row(folder: Path | None = None, pattern: str = "rl-seed*/results.json") -> dict[str, Any] | None:
    """The real-model table's "format SFT + RL mix" row from the seeds' results files: the last held-out
    evaluation of each seed pooled (successes over tasks) and its mean over seeds with a 95 % t-interval."""
    from agentgym_budget.eval.stats import t_interval

    seeds = smollm2_rl_seeds(folder, pattern)
    if not seeds:
        return None
    settings = seeds[0]["settings"]
    finals = [facts["rl"]["rl_pass1"] for facts in seeds]
    low, high = t_interval(finals)
    updates = sorted({len(f["rl"]["updates"]) for f in seeds})
    sft = seeds[0]["sft"]
    return {"t": settings["eval_t"], "advantage": _advantage_name(settings),
            "sft": f"SFT {sft['config']['source']}: {sft['turns']} turns, {sft['config']['steps']} steps × "
                   f"{sft['config']['batch_size']}, reply loss {sft['reply_loss_after']:.2f}", "mean": sum(finals) / len(finals), "t95": (low, high), "seeds": len(seeds),
            "tasks": settings["eval_tasks"], "successes": round(sum(v * settings["eval_tasks"] for v in finals)),
            "budget": settings["budget"], "updates": updates,
            "episodes": sum(sum(u["update_episodes"] for u in f["rl"]["updates"]) for f in seeds) / len(seeds),
            "cpu_minutes": sum(sum(u["cpu_rollout_seconds"] + u["cpu_update_seconds"] for u in f["rl"]["updates"])
                               for f in seeds) / len(seeds) / 60}

def decode_attention_ab_table(path: Path | None = None) -> str:
    """The eager decode attention A/B (``benchmarks/decode_attention_ab.py``): decode-step and run CPU seconds of
    each path per dtype (two alternated runs each), their ratio, and whether both played the same actions."""
    path = path or DATA / "smollm2-perf" / "decode-attention.json"
    if not path.is_file():
        return "(no docs/data/smollm2-perf/decode-attention.json yet)"
    facts = json.loads(path.read_text(encoding="utf-8"))
    lines = ["| weights | decode-step CPU-s: transformers' sdpa (`enable_gqa`) | grouped by key-value head | "
             "grouped / sdpa | run CPU-s: sdpa / grouped | same greedy actions |", "|---|---|---|---|---|---|"]
    for dtype, row in facts["dtypes"].items():
        sdpa, grouped = row["paths"]["transformers_sdpa"], row["paths"]["grouped"]
        mean = {name: sum(values) / len(values) for name, values in
                (("sdpa", sdpa["decode_cpu_s"]), ("grouped", grouped["decode_cpu_s"]))}
        lines.append(f"| {dtype} | {', '.join(f'{v:.2f}' for v in sdpa['decode_cpu_s'])} | "
                     f"{', '.join(f'{v:.2f}' for v in grouped['decode_cpu_s'])} | {mean['grouped'] / mean['sdpa']:.2f} | "
                     f"{', '.join(f'{v:.1f}' for v in sdpa['run_cpu_s'])} / "
                     f"{', '.join(f'{v:.1f}' for v in grouped['run_cpu_s'])} | {row['same_actions']} of {row['episodes']} |")
    settings, source = facts["settings"], facts["provenance"]
    lines += ["", _source_line(path, source) + f" {settings['episodes']} episodes in flight, T={settings['turns']}, "
                  f"{settings['threads']} thread, alternated runs (A B A B)."]
    return "\n".join(lines)


#: The phases of a training trace's updates that :func:`process_reward_training_trace_table` averages over.
TRACE_PHASES = ((1, 20), (21, 40), (41, 60))


#: The KeyDoorRooms training traces and the credit each ran with (the first ran before commit 72815cb, when
#: ``process_reward_norm="group"`` meant what ``"rewards"`` means now: its file says ``group``).
TRACES = (("rooms-training-mix-pr-seed0.json", "`rewards` (then called `group`)"),
          ("rooms-training-mix-pr-fixed-seed0.json", "`group` (returns-to-go standardised)"))


def process_reward_training_trace_table(traces: tuple[tuple[str, str], ...] = TRACES,
                                        folder: Path | None = None) -> str:
    """Per training trace (benchmarks/process_reward_training_trace.py) and phase of updates: the means of the
    training metrics and of what the credit told the learner (door decisions, the process credit per turn)."""
    folder = folder or DATA / "process-reward-trace"
    rows = ["| trace | updates | training success | invalid actions | turns at the doors that opened one | "
            "opened door was the goal | mean process credit c·G per turn | mean abs. outcome advantage | "
            "turns pushed up | entropy | KL to reference |", "|---|---|" + "---|" * 9]
    sources = []
    for name, credit in traces:
        path = folder / name
        if not path.exists():
            rows.append(f"| {name} | (no results file yet) |" + " |" * 9)
            continue
        report = json.loads(path.read_text(encoding="utf-8"))
        label = f"{report['arm']}, credit {credit}, seed {report['seed']}"
        for first, last in TRACE_PHASES:
            ups = [u for u in report["updates"] if first <= u["update"] <= last]
            if not ups:
                continue
            mean = lambda get: float(sum(map(get, ups)) / len(ups))  # noqa: E731
            pushed = (f"{100 * mean(lambda u: u['turns_pushed_up']):.0f} %" if "turns_pushed_up" in ups[0]
                      else "n/a")
            process = mean(lambda u: u["mean_process_credit"]) if "mean_process_credit" in ups[0] else mean(
                lambda u: sum(k["share"] * k.get("process_credit", 0.0) for kind, k in u["kinds"].items()
                              if kind != "stall_at_doors"))
            process = round(process, 2) + 0.0  # no "-0.00" for a credit that is 0 by construction
            rows.append(
                f"| {label} | {first}-{last} | {mean(lambda u: u['metrics']['success_rate']):.2f} | "
                f"{100 * mean(lambda u: u['metrics']['invalid_action_rate']):.0f} % | "
                f"{100 * mean(lambda u: u['door_open_rate']):.0f} % | "
                f"{100 * mean(lambda u: u['goal_door_share_of_opened']):.0f} % | {process:+.2f} | "
                f"{mean(lambda u: u['mean_abs_outcome_advantage']):.2f} | {pushed} | "
                f"{mean(lambda u: u['metrics']['entropy']):.2f} | {mean(lambda u: u['metrics']['kl']):.2f} |")
        source = report["provenance"]
        sources.append(f"- `{name}`: `{source.get('command', '?')}` at commit `{str(source.get('commit', '?'))[:10]}`"
                       f"{' (uncommitted changes)' if source.get('dirty') else ''}, load average {_load(source)}, "
                       f"{source.get('utc', '?')}; {report['cpu_seconds'] / 60:.1f} CPU-minutes.")
    return "\n".join([*rows, "", *sources])



def scienceworld_throughput_table() -> str:
    """Raw ScienceWorld vs our env on the same recorded actions (scienceworld/backend-throughput.json)."""
    report = _results("scienceworld/backend-throughput.json")
    rows = ["| backend | steps × rounds | raw steps/s | ours steps/s | ours/raw | ours/raw, range over rounds "
            "| engine share of our step time |", "|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        ratios = [ours / raw for raw, ours in zip(row["raw_steps_per_s_by_round"], row["ours_steps_per_s_by_round"])]
        rows.append(f"| {row['backend']} | {row['steps']} × {row['rounds']} | {row['raw_steps_per_s']:.1f} "
                    f"| {row['ours_steps_per_s']:.1f} | {row['ours_over_raw']:.2f} | {min(ratios):.2f}–{max(ratios):.2f} "
                    f"| {row['engine_share']:.4f} |")
    return "\n".join(rows + ["", "Medians over the rounds (after one warm-up round). "
                                  + _source("scienceworld/backend-throughput.json", report["provenance"])])


def webshop_bm25_engines_table() -> str:
    """bm25s vs rank-bm25 on the same tokens and queries: index build and per-query CPU, the ratios (webshop/bm25-engines.json)."""
    report = _results("webshop/bm25-engines.json")
    median, versions = report["median"], report["versions"]
    bm25s, okapi = median["bm25s"], median["rank_bm25"]
    rows = ["| engine | index build, CPU s (corpus tokenising included) | per query, CPU ms (query analysis included) |",
            "|---|---|---|",
            f"| bm25s {versions['bm25s']} (`BM25Search`) | {bm25s['build_cpu_s']:.3f} | {bm25s['query_cpu_ms']:.2f} |",
            f"| rank-bm25 {versions['rank-bm25']} (`BM25Okapi`) | {okapi['build_cpu_s']:.3f} | {okapi['query_cpu_ms']:.2f} |",
            "",
            f"**bm25s answers a query {okapi['query_cpu_ms'] / bm25s['query_cpu_ms']:.1f}× faster** (CPU time); "
            f"rank-bm25 builds its index in {okapi['build_cpu_s'] / bm25s['build_cpu_s']:.2f}× bm25s's time. "
            f"{report['products']:,} products, {report['queries']} instruction queries, median of {report['rounds']} "
            f"rounds; the two rankings agree on the top hit for {report['top1_agreement']:.0%} of the queries "
            "(Lucene's BM25 variant vs Okapi's idf). "
            + _source("webshop/bm25-engines.json", report["provenance"])]
    return "\n".join(rows)



def alfworld_real_engine_table() -> str:
    """Per game on the real engine: reset seconds and steps/s, raw vs ours; the ratio and engine share (alfworld-real-engine)."""
    report = _results("alfworld-real-engine/results.json")
    rows = ["| game | PDDL problem, characters | reset s: raw / ours | steps/s: raw / ours |", "|---|---|---|---|"]
    for game in report["games"]:
        raw, ours = game["raw"], game["ours"]
        rows.append(f"| `{game['id']}` | {game['pddl_chars']:,} | {raw['reset_s']:.1f} / {ours['reset_s']:.1f} "
                    f"| {game['steps'] / raw['step_s']:.2f} / {game['steps'] / ours['step_s']:.2f} |")
    return "\n".join(rows + [
        "", f"Over all {len(report['games'])} games ({report['split']}, {report['steps_per_game']} steps each): raw "
            f"{report['raw_steps_per_s']:.2f}, ours {report['ours_steps_per_s']:.2f} steps/s, **ours/raw "
            f"{report['ours_over_raw']:.2f}**; the engine's share of our step time **{report['engine_share']:.3f}** (our "
            f"env adds {1 - report['engine_share']:.1%} per step: the expert and the info dict; the load-robust figure). "
            + _source("alfworld-real-engine/results.json", report["provenance"])])



def llm_rollout_targets_table(path: Path | None = None) -> str:
    """Issue 29's targets per conversation format and decode step (llm-rollout/throughput.json): each figure, and
    which columns meet each target, computed from the file."""
    path = path or DATA / "llm-rollout" / "throughput.json"
    report = json.loads(path.read_text(encoding="utf-8"))
    batch = str(report["settings"]["batch"])
    runs = report["runs"]
    names = [f"`{run['history']}`, {'compiled step' if run['compiled'] else 'eager'}" for run in runs]

    def per_turn_ms(run: dict[str, Any], size: str) -> float:
        return 1000 * run["by_batch"][size]["cpu"] / run["by_batch"][size]["turns"]

    def ratio(run: dict[str, Any]) -> float:
        one, many = run["by_batch"]["1"], run["by_batch"][batch]
        return (many["turns"] / many["cpu"]) / (one["turns"] / one["cpu"])

    def outside(run: dict[str, Any]) -> tuple[float, float]:
        many = run["by_batch"][batch]
        return (many["cpu"] - many["model_cpu"]) / many["cpu"], 1000 * (many["cpu"] - many["model_cpu"]) / many["turns"]

    def verdict(values: list[float], meets: Callable[[float], bool], target: str) -> str:
        met = [name for name, value in zip(names, values) if meets(value)]
        if not met:
            return f"{target}: **not met**"
        return f"{target}: **met**" + ("" if len(met) == len(names) else " by " + "; ".join(met))

    batch1 = [per_turn_ms(run, "1") for run in runs]
    ratios = [ratio(run) for run in runs]
    steps = [run["by_batch"][batch]["step_ms"] for run in runs]
    shares = [outside(run) for run in runs]
    rows = ["| | " + " | ".join(names) + " | target |", "|---|" + "---|" * (len(runs) + 1),
            "| batch 1, CPU-ms per turn | " + " | ".join(f"{v:.0f}" for v in batch1) + " | "
            + verdict(batch1, lambda v: v <= 60, "≤ 60") + " |",
            f"| {batch} in flight, CPU-ms per turn | " + " | ".join(f"{per_turn_ms(run, batch):.1f}" for run in runs) + " | |",
            f"| ratio {batch} / 1, turns per CPU-second | " + " | ".join(f"{v:.1f}×" for v in ratios) + " | "
            + verdict(ratios, lambda v: v >= 10, "≥ 10×") + " |",
            f"| CPU-ms per decode step (a token for every row in flight), batch {batch} | "
            + " | ".join(f"{v:.2f}" for v in steps) + " | " + verdict(steps, lambda v: v <= 3, "≤ 3") + " |",
            "| prompt tokens per turn at batch 1: run / reused from the cache | "
            + " | ".join(f"{run['by_batch']['1']['run_tokens']:.0f} / {run['by_batch']['1']['reused']:.0f}" for run in runs)
            + " | the new observation + template only |",
            f"| time outside the model at batch {batch}: share of CPU time (CPU-ms per turn) | "
            + " | ".join(f"{100 * share:.1f} % ({ms:.2f})" for share, ms in shares) + " | "
            + verdict([share for share, _ in shares], lambda v: v < 0.05, "< 5 %") + " |",
            f"| the {runs[0]['shared_episodes']} episodes batch 1 and {batch} share identical | "
            + " | ".join("yes" if run["shared_episodes_identical"] else "**no**" for run in runs) + " | records identical |"]
    settings = report["settings"]
    return "\n".join(rows + ["", f"{settings['env_id']}, T = {settings['turns']}, {settings['new_tokens']} new tokens, "
                                  f"{settings['episodes_single']} episodes at batch 1 and {settings['episodes_batched']} at "
                                  f"{batch} in flight, torch on {settings['torch_threads']} thread(s). "
                                  + _source_line(path, report["provenance"])])



def budgetmix_study_table() -> str:
    """The BudgetMix study (fixed:2, fixed:6, mix, curriculum on KeyDoor): per seed, means, paired differences.

    The results file format of ``agentgym-budget sweep experiments/budgetmix/study.toml --results`` (and of
    ``benchmarks/budgetmix_study.py --results``, which measured the committed file and the process-reward
    study's), so the same table (from docs/data/budgetmix-study/keydoor.json).
    """
    path = DATA / "budgetmix-study" / "keydoor.json"
    if not path.is_file():
        return f"(no results file {path.relative_to(REPO).as_posix()} yet)"
    return process_reward_study_table(path)



def served_throughput_table() -> str:
    """The tiny model behind llama.cpp: build, start-up, latency, completions/s and episode turns/s at
    concurrency 1 vs 8, with the ratios (served/throughput.json)."""
    import statistics

    report = _results("served/throughput.json")
    request, rates = report["one_request"], report["completions_per_s_by_round"]
    one, eight = statistics.median(rates["1"]), statistics.median(rates["8"])
    rows = ["| | |", "|---|---|",
            f"| tiny model + tokenizer built ({report['env']} text) | {report['model_build_s']:.1f} s |",
            f"| GGUF f32 written | {report['gguf_write_s']:.2f} s, {report['gguf_kib']:.0f} KiB |",
            f"| server up (until `/v1/models` answers) | {report['server_startup_s']:.1f} s |",
            f"| one request (prompt ~{request['median_prompt_tokens']:.0f} tokens, ~{request['median_reply_tokens']:.0f} "
            f"new), median of {request['requests']} | {1e3 * request['median_latency_s']:.0f} ms |",
            f"| {report['conversations']} one-turn conversations, completions/s, max_concurrency 1 vs 8 (median of "
            f"{report['rounds']} rounds) | {one:.1f} vs {eight:.1f} (**{eight / one:.2f}×**) |"]
    for key, label in (("prompt_cache_off", "prompt cache off"), ("prompt_cache_on", "`LlamaServer(prompt_cache=True)`")):
        figures = report["episode_turns_per_s"][key]
        rows.append(f"| episodes ({report['episodes']} × ≤ {report['turns']} turns, `openai` policy), turns/s, "
                    f"concurrency 1 vs 8, {label} | {figures['1']:.1f} vs {figures['8']:.1f} "
                    f"(**{figures['8'] / figures['1']:.2f}×**) |")
    return "\n".join(rows + ["", f"llama.cpp with {report['n_threads']} thread(s). "
                                  + _source("served/throughput.json", report["provenance"])])



def alfworld_fast_speed_table() -> str:
    """Fast engine vs the real one (env_throughput.py, alfworld-fast/speed.json): steps/s, resets/s and the ratios."""
    report = _results("alfworld-fast/speed.json")
    fast, real = report["backends"]["alfworld-fast"], report["backends"]["alfworld-textworld"]

    def number(value: float | None) -> str:
        return "–" if value is None else (f"{value:,.0f}" if value >= 100 else f"{value:.3g}")

    def ratio(key: str) -> str:
        return "–" if not (fast.get(key) and real.get(key)) else f"×{fast[key] / real[key]:,.0f}"

    rows = ["| | fast | textworld (real) | fast / real |", "|---|---|---|---|"]
    for key, label in (("steps_per_s", "steps/s, wall clock"), ("steps_per_cpu_s", "steps per CPU second (one core)"),
                       ("resets_per_s", "resets/s, same game again (warm)"),
                       ("cold_resets_per_s", "resets/s, new game (cold: parse + compile)")):
        rows.append(f"| {label} | {number(fast.get(key))} | {number(real.get(key))} | {ratio(key)} |")
    rows.append(f"| batched: {report['settings']['batch']} engines round-robin, one process, steps/s "
                f"| {number(fast.get('batched_steps_per_s'))} | – | – |")
    settings = report["settings"]
    return "\n".join(rows + ["", f"{settings['games']} bundled games, scripts of {settings['script_length']} commands; "
                                  f"the fast engine replays {settings['steps']:,} steps, the real one {settings['slow_steps']} "
                                  f"steps and {settings['slow_resets']} resets. "
                                  + _source("alfworld-fast/speed.json", report["provenance"])])

def process_reward_credit_sums_table(folder: Path | None = None) -> str:
    """The process credit ``c · ΣG`` summed per episode, mean by budget, for wins and timeouts, before and after the
    fixes (``docs/data/process-reward-trace/{before,after}-fix.json``: the same sampled episodes credited twice)."""
    folder = folder or DATA / "process-reward-trace"
    files = {name: folder / f"{name}-fix.json" for name in ("before", "after")}
    if not all(path.is_file() for path in files.values()):
        return "(no docs/data/process-reward-trace/before-fix.json and after-fix.json yet)"
    traces = {name: json.loads(path.read_text(encoding="utf-8"))["envs"] for name, path in files.items()}
    lines = ["| | before: win | before: timeout | after: win | after: timeout |", "|---|---|---|---|---|"]
    for env in traces["before"]:
        budgets = sorted({t["budget"] for t in traces["before"][env]["sampled"]["episode_traces"]})
        cells = []
        for name in ("before", "after"):
            for outcome in ("win", "timeout"):
                sums = {b: [sum(turn["process_credit"] for turn in t["turns"])
                            for t in traces[name][env]["sampled"]["episode_traces"]
                            if t["budget"] == b and t["outcome"] == outcome] for b in budgets}
                cells.append(" / ".join("–" if not v else f"{sum(v) / len(v):+.2f}".replace("-", "−")
                                        + (" (1 episode)" if len(v) == 1 else "") for v in sums.values()))
        label = f"{env.removesuffix('-v0')} T=" + " / ".join(str(b) for b in budgets)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

def smollm2_pipeline_table(path: Path | None = None) -> str:
    """The first real-model pipeline run (``benchmarks/smollm2_rl.py``, ``docs/data/smollm2-rl/results.json``): SFT,
    held-out Pass@(1,T) zero-shot / after SFT / after RL, each update, and where an update's CPU time goes."""
    path = path or DATA / "smollm2-rl" / "results.json"
    if not path.is_file():
        return "(no docs/data/smollm2-rl/results.json yet)"
    facts = json.loads(path.read_text(encoding="utf-8"))
    sft, rl, settings, source = facts["sft"], facts["rl"], facts["settings"], facts["provenance"]
    updates, cpu = rl["updates"], rl["mean_cpu_seconds_per_update"]
    tasks, t = settings["eval_tasks"], settings["eval_t"]
    lines = ["| measured | figure |", "|---|---|",
             f"| SFT, {sft['episodes']} random episodes → {sft['turns']} turns, {sft['config']['steps']} LoRA steps of "
             f"{sft['config']['batch_size']} turns | reply loss {sft['reply_loss_before']:.2f} → "
             f"{sft['reply_loss_after']:.2f}; {sft['cpu_seconds']:.0f} CPU-s ({sft['seconds']:.0f} s wall) |",
             f"| held-out Pass@(1,T={t}), {tasks} tasks × 1 attempt: zero-shot / after SFT / after {len(updates)} RL "
             f"updates | {facts['zero_shot']['pass1']:.2g} / {rl['sft_pass1']:.2g} / {rl['rl_pass1']:.2g} "
             f"({round(rl['rl_pass1'] * tasks)} of {tasks}) |",
             f"| an update: {updates[0]['update_episodes']} episodes, "
             + " and ".join(str(u["update_turns"]) for u in updates) + " turns, "
             + " and ".join(str(u["action_tokens"]) for u in updates) + " action tokens | training success "
             + ", ".join(f"{u['success_rate']:.2f}" for u in updates) + "; invalid replies "
             + ", ".join(f"{100 * u['invalid_action_rate']:.0f} %" for u in updates) + " |",
             f"| CPU seconds per update (mean of {len(updates)}): generation + env / loss forward / backward / "
             f"optimizer | {cpu['cpu_rollout_seconds']:.1f} / {cpu['cpu_forward_seconds']:.1f} / "
             f"{cpu['cpu_backward_seconds']:.1f} / {cpu['cpu_optimizer_seconds']:.2f} — **{rl['cpu_seconds_per_update']:.0f}"
             f" s, {rl['cpu_seconds_per_turn']:.1f} CPU-s per turn** |",
             "| the same in wall seconds (rollout / update) | "
             f"{sum(u['rollout_seconds'] for u in updates) / len(updates):.1f} / "
             f"{sum(u['update_seconds'] for u in updates) / len(updates):.1f} |",
             f"| the held-out evaluations (with loading and saving) | {rl['eval_cpu_seconds']:.0f} CPU-s |",
             "", _source_line(path, source)]
    return "\n".join(lines)


#: The real-model table's rows before RL (issue 36): the base model, the format SFT start every arm trains from,
#: the expert clone (the paper's "before RL" row), as ``(folder under docs/data, row)``.
SMOLLM2_BEFORE_RL = (("smollm2-table", "zero-shot"), ("smollm2-arms", "sft-format-40"), ("smollm2-table", "sft-expert"))


def smollm2_fixed_vs_mix_table(path: Path | None = None) -> str:
    """Issue 36's real-model table: the rows before RL (one evaluation each, Wilson CIs), then the RL arms from
    ``benchmarks/smollm2_budget_arms.py``'s study file (per seed, means, paired differences over seeds)."""
    path = path or DATA / "smollm2-arms" / "study.json"
    if not path.is_file():
        return f"(no results file {path.name} under {path.parent} yet)"
    report = json.loads(path.read_text(encoding="utf-8"))
    ts = report["ts"]
    lines = ["| before RL | training | " + " | ".join(f"T={t} [95 % Wilson CI]" for t in ts) + " | tasks |",
             "|---|---|" + "---|" * len(ts) + "---|"]
    sources = []
    for folder, name in SMOLLM2_BEFORE_RL:
        row_path = DATA / folder / f"{name}.json"
        if not row_path.is_file():
            continue
        row = json.loads(row_path.read_text(encoding="utf-8"))
        lines.append(_smollm2_row_line({**row, "row": name}, ts, lambda c: f"{100 * c['pass1']:.1f} "
                                       f"[{100 * c['wilson95'][0]:.1f}, {100 * c['wilson95'][1]:.1f}]"))
        sources.append(f"- {name}: " + _source_line(row_path, row["provenance"]))
    runs = [f"- {arm} seed {seed}: `{run['run_command']}`" for arm, by_seed in report["per_seed"].items()
            for seed, run in by_seed.items()]
    return "\n".join([*lines, "", *sources, "", process_reward_study_table(path), "", "The runs:", *runs])


#: The rows before RL of a sweep study, as its tables name them.
_BASELINE_NAMES = {"base": "zero-shot", "sft": "SFT start"}
#: The behaviour metrics the SmolLM2 KeyDoorRooms table shows: (sweep key, column title).
_ROOMS_BEHAVIOUR = (("probes.agreement", "probe agreement (single step)"),
                    ("decision_quality.overall", "decision quality"),
                    ("success_after_error", "success after an error"),
                    ("success_without_error", "success without one"),
                    ("recovered_fraction", "errors recovered"),
                    ("errors_per_episode", "errors per episode"))


def _sweep_cell(cell: dict[str, Any] | None) -> str:
    """``54.2 [44.0, 63.5]`` in points: a sweep results cell (``value`` or ``mean``, with its CI when known)."""
    if cell is None:
        return "–"
    value = cell.get("value", cell.get("mean"))
    if value is None:
        return "n/a"
    low, high = cell.get("ci_low"), cell.get("ci_high")
    return f"{100 * value:.1f}" + ("" if low is None or high is None else f" [{100 * low:.1f}, {100 * high:.1f}]")


def sweep_study_table(path: Path, cells: tuple[tuple[int, int], ...]) -> str:
    """A sweep study's held-out Pass@(K,T) per row: the rows before RL (one evaluation each, 95 % bootstrap CI
    over tasks), then each arm over its seeds (mean, 95 % t-CI over seeds), then the paired differences of
    ``[[compare]]`` (95 % paired bootstrap CI over seeds; * excludes 0), from ``agentgym-budget sweep --results``."""
    if not path.exists():
        return f"(no results file {_shown(path)} yet)"
    report = json.loads(path.read_text(encoding="utf-8"))
    names = " | ".join(f"Pass@({k},{t})" for k, t in cells)
    rows = [f"| row | seeds | {names} |", "|---|---|" + "---|" * len(cells)]
    for name, row in report.get("baselines", {}).items():
        rows.append(f"| {_BASELINE_NAMES.get(name, name)} | – | "
                    + " | ".join(_sweep_cell(row["pass_kt"].get(f"K={k},T={t}")) for k, t in cells) + " |")
    for arm, by_cell in report.get("pass_kt", {}).items():
        seeds = len(report["per_seed"][arm])
        rows.append(f"| RL `{report['arms'][arm]['budget']}` | {seeds} | "
                    + " | ".join(_sweep_cell(by_cell.get(f"K={k},T={t}")) for k, t in cells) + " |")
    for name, by_cell in report.get("paired_kt", {}).items():
        diffs = [by_cell.get(f"K={k},T={t}") for k, t in cells]
        seeds = max((d["seeds"] for d in diffs if d), default=0)
        rows.append(f"| {name} (points) | {seeds} | " + " | ".join(
            "–" if d is None or d["diff"] is None else f"{100 * d['diff']:+.1f}"
            + ("" if d["ci_low"] is None else f" [{_points(d['ci_low'], True)}, {_points(d['ci_high'], True)}]")
            + ("*" if d.get("significant") else "") for d in diffs) + " |")
    source = report["provenance"]
    rows += ["", _source_line(path, source) + f" {report['eval_tasks']} held-out tasks x {report['eval_attempts']} "
             f"attempts; {report['cpu_seconds'] / 60:.1f} CPU-minutes over the runs (SFT start, rows and arms)."]
    return "\n".join(rows)


def sweep_behaviour_table(path: Path, metrics: tuple[tuple[str, str], ...] = _ROOMS_BEHAVIOUR) -> str:
    """Per row of a sweep study: its behaviour metrics (the rows before RL: one evaluation; an arm: mean and
    95 % t-CI over seeds), then each arm minus the SFT start, paired over seeds (the SFT row is one evaluation,
    so that CI holds the RL seeds' spread only)."""
    if not path.exists():
        return f"(no results file {_shown(path)} yet)"
    report = json.loads(path.read_text(encoding="utf-8"))
    titles = " | ".join(title for _, title in metrics)
    rows = [f"| row | seeds | {titles} |", "|---|---|" + "---|" * len(metrics)]
    for name, row in report.get("baselines", {}).items():
        rows.append(f"| {_BASELINE_NAMES.get(name, name)} | – | " + " | ".join(
            _behaviour_text(key, row["behaviour"].get(key)) for key, _ in metrics) + " |")
    for arm, by_metric in report.get("behaviour", {}).items():
        rows.append(f"| RL `{report['arms'][arm]['budget']}` | {len(report['per_seed'][arm])} | " + " | ".join(
            _behaviour_cell(by_metric.get(key), key) for key, _ in metrics) + " |")
    for arm, by_metric in report.get("behaviour_vs_sft", {}).items():
        rows.append(f"| RL `{report['arms'][arm]['budget']}` − SFT start | {len(report['per_seed'][arm])} | "
                    + " | ".join(_behaviour_diff(by_metric.get(key), key) for key, _ in metrics) + " |")
    rows += ["", "Rates in points (errors per episode as a count). " + _source_line(path, report["provenance"])]
    return "\n".join(rows)


def _shown(path: Path) -> str:
    """``path`` relative to the checkout (a file outside it, as in the tests, by its name)."""
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name


def _behaviour_cell(cell: dict[str, Any] | None, key: str) -> str:
    """An arm's metric over seeds: its mean [t-CI]."""
    return "n/a" if cell is None else _behaviour_text(key, cell["mean"], cell["ci_low"], cell["ci_high"])


def _behaviour_diff(cell: dict[str, Any] | None, key: str) -> str:
    """An arm minus the SFT start: the difference [paired CI], * where it excludes 0."""
    if cell is None:
        return "n/a"
    text = _behaviour_text(key, cell["diff"], cell["ci_low"], cell["ci_high"], signed=True)
    return text + ("*" if cell.get("significant") else "")


def _behaviour_text(key: str, value: float | None, low: float | None = None, high: float | None = None,
                    signed: bool = False) -> str:
    """A behaviour metric in points (errors per episode as a count), with its CI when known."""
    if value is None:
        return "n/a"
    scale, digits = (1, 2) if key == "errors_per_episode" else (100, 1)
    spec = f"{'+' if signed else ''}.{digits}f"
    ci = "" if low is None or high is None else f" [{scale * low:{spec}}, {scale * high:{spec}}]"
    return f"{scale * value:{spec}}{ci}"


#: The SmolLM2 KeyDoorRooms study's results file and the cells its table shows.
SMOLLM2_ROOMS = DATA / "smollm2-rooms" / "study.json"
SMOLLM2_ROOMS_CELLS = ((1, 4), (1, 5), (1, 6), (1, 8), (4, 4), (4, 8))


#: Every generator by the name its docs block carries.
GENERATORS: dict[str, Generator] = {
    "learning-check": learning_check_table,
    "process-reward-study": process_reward_study_table,
    "smollm2-eval": smollm2_eval_table,
    "smollm2-fewshot-gap": smollm2_fewshot_gap_table,
    "logprob-kernels-smollm2": logprob_kernels_smollm2_table,
    "frontier-alfworld": frontier_alfworld_table,
    "stopping-rules": stopping_rules_table,
    "alfworld-equivalence": alfworld_equivalence_table,
    "webshop-difficulty": webshop_difficulty_table,
    "webshop-throughput": webshop_throughput_table,
    "textworld-throughput": textworld_throughput_table,
    "ray-scaling": ray_scaling_table,
    "alfworld-bundle": alfworld_bundle_table,
    "action-rewrites": action_rewrites_table,
    "action-rewrites-alfworld": lambda: action_rewrites_table("alfworld.json", "another object or receptacle number"),
    "alfworld-difficulty": alfworld_difficulty_table,
    "verifiers-concurrency": verifiers_concurrency_table,
    "chars-per-token": chars_per_token_table,
    "trl-turn-length": trl_turn_length_table,
    "smollm2-adapters": smollm2_adapters_table,
    "smollm2-table": smollm2_table,
    "smollm2-step-cost": smollm2_step_cost_table,
    "update-cost": update_cost_table,
    "smollm2-rl-runs": smollm2_rl_runs_table,
    "smollm2-perf": smollm2_perf_table,
    "decode-attention-ab": decode_attention_ab_table,
    "smollm2-rl-probes": smollm2_rl_probes_table,
    "smollm2-turns": smollm2_turns_table,
    "smollm2-rl-seeds": smollm2_rl_seeds_table,
    "smollm2-pipeline": smollm2_pipeline_table,
    "smollm2-rl-long-runs": lambda: smollm2_rl_runs_table(pattern=SMOLLM2_RL_SEED_SETS["50 updates"]),
    "smollm2-rl-long-seeds": lambda: smollm2_rl_seeds_table(pattern=SMOLLM2_RL_SEED_SETS["50 updates"]),
    "process-reward-study-rooms": lambda: process_reward_study_table(
        DATA / "process-reward-study" / "keydoorrooms-seed0.json"),
    "process-reward-training-trace": process_reward_training_trace_table,
    "process-reward-credit-sums": process_reward_credit_sums_table,
    "process-reward-study-rooms-fixed": lambda: process_reward_study_table(
        DATA / "process-reward-study" / "keydoorrooms-seed0-fixed.json"),
    "process-reward-study-rooms-paired": lambda: process_reward_study_table(
        DATA / "process-reward-study" / "keydoorrooms.json"),
    "scienceworld-throughput": scienceworld_throughput_table,
    "webshop-bm25-engines": webshop_bm25_engines_table,
    "alfworld-real-engine": alfworld_real_engine_table,
    "llm-rollout-targets": llm_rollout_targets_table,
    "budgetmix-study": budgetmix_study_table,
    "served-throughput": served_throughput_table,
    "alfworld-fast-speed": alfworld_fast_speed_table,
    "smollm2-fixed-vs-mix": smollm2_fixed_vs_mix_table,
    "smollm2-rooms": lambda: sweep_study_table(SMOLLM2_ROOMS, SMOLLM2_ROOMS_CELLS),
    "smollm2-rooms-behaviour": lambda: sweep_behaviour_table(SMOLLM2_ROOMS),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report tables that disagree with their files")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_tables()
        for entry in stale:
            print(f"stale: {entry} (run: python -m tools.docs_tables)")
        return 1 if stale else 0
    for path in regenerate():
        print(f"rewrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

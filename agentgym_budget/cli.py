"""The ``agentgym-budget`` command line: ``eval``, ``compare``, ``probe``, ``aggregate`` and ``list``.

    agentgym-budget eval                      # = the Quickstart main job:
    agentgym-budget eval --env ALFWorld-Budget-v0 --policy noisy-expert --k 1,2,4,8 \\
        --t 5,10,20,30,50 --tasks 50 --attempts 8 --seed 0 --workers 1 --out results/
    agentgym-budget compare results/base/passkt.json results/rl/passkt.json --out diff.png
    agentgym-budget probe --env KeyDoor-Budget-v0 --policy random --probes 40
    agentgym-budget aggregate results/seed*/passkt.json --out results/aggregate
    agentgym-budget list

``eval`` prints the Pass@(K,T) table and the behaviour metrics and writes ``passkt.json``,
``passkt.csv``, ``task_counts.csv``, ``episodes.jsonl``, ``passkt_heatmap.png`` and
``passkt_curves.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]

DEFAULT_ENV = "ALFWorld-Budget-v0"


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 1,2,4,8; got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def _key_value(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)  # numbers, true/false, null, lists
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentgym-budget", description="Text environments with turn budgets: Pass@(K,T) evaluation."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser("eval", help="Pass@(K,T) of a policy on an env, with behaviour metrics and plots")
    ev.add_argument("--env", default=DEFAULT_ENV, help=f"registered env id (default {DEFAULT_ENV})")
    ev.add_argument("--policy", default="noisy-expert", help="policy name: random, expert, noisy-expert, hf")
    ev.add_argument("--policy-arg", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                    help="policy option, repeatable (e.g. p=0.5, model=path/to/model)")
    ev.add_argument("--env-arg", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                    help="gym.make option, repeatable (e.g. show_budget=true)")
    ev.add_argument("--k", type=_int_list, default=[1, 2, 4, 8], help="attempts K (default 1,2,4,8)")
    ev.add_argument("--t", type=_int_list, default=[5, 10, 20, 30, 50], help="turn budgets T (default 5,10,20,30,50)")
    ev.add_argument("--tasks", type=int, default=50, help="tasks (env reset seeds), default 50")
    ev.add_argument("--attempts", type=int, default=None, help="attempts N per task (default max(K))")
    ev.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    ev.add_argument("--workers", type=int, default=1,
                    help="worker processes, or Ray actors with --backend ray (there 1 = one per cluster CPU); "
                         "results do not depend on it")
    ev.add_argument("--backend", choices=["local", "ray"], default="local",
                    help="local processes, or Ray actors (needs the 'ray' extra)")
    ev.add_argument("--ray-address", default=None,
                    help="Ray cluster to join with --backend ray (auto, HOST:PORT); default: a local Ray instance")
    ev.add_argument("--resume", action="store_true",
                    help="keep the episodes already in --out/episodes.jsonl (same settings) and run only the missing")
    ev.add_argument("--mode", choices=["auto", "shortcut", "per_t"], default="auto",
                    help="auto: one rollout at max T unless the budget is shown/read (then one per T)")
    ev.add_argument("--out", default="results", help="output folder (default results/)")
    ev.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples per cell (default 1000)")
    ev.add_argument("--no-plots", action="store_true", help="do not write the PNG plots")
    ev.add_argument("--no-progress", action="store_true", help="no progress bar")
    ev.add_argument("--probes", type=int, default=0,
                    help="also measure single-step quality on N fixed probe states (see 'probe'); default 0: none")
    ev.add_argument("--probe-horizon", type=int, default=50, help="expert turns allowed after a probe action")

    cmp = sub.add_parser("compare", help="paired differences b - a with bootstrap CIs over tasks, and their heatmap")
    cmp.add_argument("a", help="passkt.json (or its folder) of the baseline")
    cmp.add_argument("b", help="passkt.json (or its folder) to compare with it")
    cmp.add_argument("--out", default="passkt_diff.png", help="PNG to write (default passkt_diff.png); the "
                     "differences go to the same name with .json")
    cmp.add_argument("--labels", default=None, help="names of a and b, comma-separated (default: the policies)")
    cmp.add_argument("--bootstrap", type=int, default=1000, help="paired bootstrap resamples (default 1000)")
    cmp.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")

    _add_probe_parser(sub)
    _add_aggregate_parser(sub)

    sub.add_parser("list", help="registered envs, their backends and whether each is installed")

    from agentgym_budget.train.config import add_config_arguments  # torch-free: only the flags

    add_config_arguments(sub.add_parser(
        "train", help="reference GRPO/RLOO LLM trainer: fixed, BudgetMix or curriculum budgets (extra 'llm')"))
    return parser


def _eval(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import agentgym_budget  # noqa: F401  (registers the envs)
    from agentgym_budget.eval.evaluate import RepeatedGamesWarning, plan_evaluation, run_evaluation

    console = Console()
    attempts = args.attempts if args.attempts is not None else max(args.k)
    plan = plan_evaluation(args.env, args.policy, ks=args.k, ts=args.t, tasks=args.tasks, attempts=attempts,
                           seed=args.seed, env_kwargs=dict(args.env_arg), policy_kwargs=dict(args.policy_arg),
                           mode=args.mode)
    out = Path(args.out)
    with _executor(args) as executor, Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=Console(stderr=True), transient=True, disable=args.no_progress) as progress:
        bar = progress.add_task(f"{args.env} x {plan.policy_name} ({plan.mode})", total=len(plan.jobs))
        with warnings.catch_warnings():  # printed below, with the tables
            warnings.simplefilter("ignore", RepeatedGamesWarning)
            result = run_evaluation(plan, executor=executor, workers=args.workers, out=out, resume=args.resume,
                                    on_record=lambda _: progress.advance(bar), bootstrap=args.bootstrap)
    if args.probes:
        written_probes = _eval_probes(args, plan, result, out)
    written = [*result.save(out), out / "episodes.jsonl", *([written_probes] if args.probes else [])]
    if not args.no_plots:
        from agentgym_budget.eval.plots import save_plots

        written += save_plots(result, out)
    console.print(result.table())
    console.print(result.metrics_table())
    _warn_repeated_games(console, result)
    timing = result.timing
    console.print(f"{timing['episodes']} episodes, {timing['steps']} turns in {timing['rollout_seconds']:.1f} s "
                  f"({timing['episodes_per_second']:.0f} episodes/s, workers={args.workers}); metrics "
                  f"{timing['metrics_seconds'] * 1000:.0f} ms")
    console.print("wrote " + ", ".join(str(p) for p in written))
    return 0


@contextlib.contextmanager
def _executor(args: argparse.Namespace) -> Iterator[Any]:
    """The executor ``--backend``/``--workers`` ask for (``None``: the evaluator's local default), closed after."""
    if args.backend != "ray":
        yield None
        return
    from agentgym_budget.distributed import RayExecutor

    with RayExecutor(actors=None if args.workers == 1 else args.workers, address=args.ray_address) as executor:
        yield executor


def _compare(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from agentgym_budget.eval.compare import compare_results
    from agentgym_budget.eval.plots import plot_diff_heatmap
    from agentgym_budget.eval.results import PassKTResult

    a, b = PassKTResult.load(args.a), PassKTResult.load(args.b)
    labels = tuple(args.labels.split(",", 1)) if args.labels else (a.policy, b.policy)
    if len(labels) != 2:
        raise ValueError(f"--labels needs two comma-separated names, got {args.labels!r}")
    comparison = compare_results(a, b, resamples=args.bootstrap, seed=args.seed, labels=labels)
    level = f"{next(iter(comparison.passkt.values())).level:.0%}"
    console = Console()
    table = Table(title=f"Pass@(K,T): {labels[1]} minus {labels[0]}, {a.n_tasks} paired tasks",
                  caption=f"difference, under it its {level} paired bootstrap CI over tasks; * = CI excludes 0")
    table.add_column("K \\ T", justify="right", style="bold")
    for t in comparison.ts:
        table.add_column(str(t), justify="right")
    for k in comparison.ks:
        table.add_row(str(k), *(_cell_text(comparison.passkt[(k, t)]) for t in comparison.ts))
    console.print(table)
    metrics = Table(title=f"Behaviour metrics: b = {labels[1]} minus a = {labels[0]}",
                    caption=f"paired over tasks (probes: over probes); {level} CI; * = CI excludes 0")
    for column in ("metric", "a", "b", "b - a [CI]"):
        metrics.add_column(column, justify="left" if column == "metric" else "right", no_wrap=True)
    for name, d in {**comparison.metrics, **comparison.probes}.items():
        metrics.add_row(name, _fmt(d.a), _fmt(d.b), _diff_text(d))
    console.print(metrics)
    for note in comparison.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    path = plot_diff_heatmap(a, b, args.out, labels=labels, comparison=comparison)
    json_path = Path(args.out).with_suffix(".json")
    json_path.write_text(json.dumps(comparison.to_dict(), indent=1) + "\n")
    console.print(f"wrote {path}, {json_path}")
    return 0


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _diff_text(d: Any) -> str:
    """``+0.120 [+0.050, +0.190]*`` (``*``: the CI excludes 0; no CI from a single task)."""
    if d.diff is None:
        return "n/a"
    ci = "(no CI: one task)" if d.ci_low is None else f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]"
    return f"{d.diff:+.3f} {ci}{'*' if d.significant else ' '}"


def _cell_text(d: Any) -> str:
    """A grid cell on two short lines: ``+0.120*`` over ``[+.05,+.19]``."""
    if d.diff is None:
        return "n/a"
    def short(x: float) -> str:  # "+.08": the grid has five columns in 80 characters
        return f"{x:+.2f}".replace("0.", ".", 1)

    ci = "no CI" if d.ci_low is None else f"[{short(d.ci_low)},{short(d.ci_high)}]"
    return f"{d.diff:+.3f}{'*' if d.significant else ' '}\n[dim]{ci}[/dim]"


def _warn_repeated_games(console: Any, result: Any) -> None:
    from agentgym_budget.eval.evaluate import repeated_games, repeated_games_message

    repeated = repeated_games(result.task_games)
    if repeated:
        console.print(f"[yellow]note:[/yellow] {repeated_games_message(repeated, result.n_tasks)}")


def _add_probe_parser(sub: Any) -> None:
    pr = sub.add_parser("probe", help="single-step quality of a policy on a fixed, seeded set of probe states")
    pr.add_argument("--env", default=DEFAULT_ENV, help=f"registered env id (default {DEFAULT_ENV})")
    pr.add_argument("--policy", default="noisy-expert", help="policy name: random, expert, noisy-expert, hf")
    pr.add_argument("--policy-arg", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                    help="policy option, repeatable")
    pr.add_argument("--env-arg", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                    help="gym.make option, repeatable")
    pr.add_argument("--probes", type=int, default=50, help="probe states (default 50; two per task)")
    pr.add_argument("--seed", type=int, default=0, help="base seed: the same as eval's gives its tasks (default 0)")
    pr.add_argument("--horizon", type=int, default=50, help="expert turns allowed after the probe action")
    pr.add_argument("--out", default="results", help="folder for probes.json (default results/)")


def _probe(args: argparse.Namespace) -> int:
    from rich.console import Console

    import agentgym_budget  # noqa: F401  (registers the envs)
    from agentgym_budget.eval.probes import build_probes, run_probes

    probes = build_probes(args.env, args.probes, args.seed, dict(args.env_arg))
    outcome = run_probes(args.env, args.policy, probes, dict(args.env_arg), dict(args.policy_arg), seed=args.seed,
                         horizon=args.horizon)
    path = _write_probes(Path(args.out), args.env, args.policy, outcome)
    console = Console()
    console.print(_probe_table(args.env, args.policy, outcome))
    console.print(f"wrote {path}")
    return 0


def _eval_probes(args: argparse.Namespace, plan: Any, result: Any, out: Path) -> Path:
    """Run ``--probes`` for ``eval``: outcomes into ``result.metrics["probes"]`` and ``probes.json``."""
    from agentgym_budget.eval.probes import build_probes, run_probes

    probes = build_probes(plan.env_id, args.probes, plan.seed, plan.env_kwargs)
    outcome = run_probes(plan.env_id, plan.policy, probes, plan.env_kwargs, plan.policy_kwargs, seed=plan.seed,
                         horizon=args.probe_horizon, bootstrap=args.bootstrap)
    result.metrics["probes"] = {key: value for key, value in outcome.items() if key != "probes"}
    return _write_probes(out, plan.env_id, plan.policy_name, outcome)


def _write_probes(out: Path, env_id: str, policy: str, outcome: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "probes.json"
    path.write_text(json.dumps({"env_id": env_id, "policy": str(policy), **outcome}, indent=1) + "\n")
    return path


def _probe_table(env_id: str, policy: str, outcome: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"Probe states — {env_id}, {policy}\nset {outcome['set_id']}, {len(outcome['source'])} probes")
    for column in ("metric", "value", "95% CI", "probes"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for name, row in outcome["summary"].items():
        ci = "n/a" if row["ci_low"] is None else f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
        table.add_row(name, _fmt(row["value"]), ci, str(row["probes"]))
    return table


def _add_aggregate_parser(sub: Any) -> None:
    ag = sub.add_parser("aggregate", help="several runs of one recipe (e.g. training seeds): mean, spread, CI per cell")
    ag.add_argument("results", nargs="+", help="passkt.json files (or their folders), one per run")
    ag.add_argument("--out", default="aggregate", help="folder for aggregate.json and aggregate.csv")
    ag.add_argument("--level", type=float, default=0.95, help="CI level (default 0.95)")


def _aggregate(args: argparse.Namespace) -> int:
    import csv

    from rich.console import Console
    from rich.table import Table

    from agentgym_budget.eval.compare import aggregate_results
    from agentgym_budget.eval.results import PassKTResult

    aggregate = aggregate_results([PassKTResult.load(path) for path in args.results], level=args.level)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "aggregate.json").write_text(json.dumps(aggregate.to_dict(), indent=1) + "\n")
    with (out / "aggregate.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["metric", "mean", "std", "min", "max", "ci_low", "ci_high", "runs"])
        rows = [(f"pass@({k},{t})", cell) for (k, t), cell in aggregate.passkt.items()] + list(aggregate.metrics.items())
        for name, cell in rows:
            writer.writerow([name, *(cell[key] for key in ("mean", "std", "min", "max", "ci_low", "ci_high")),
                             aggregate.runs])

    def cell_text(cell: dict[str, Any]) -> str:
        if cell["mean"] is None:
            return "n/a"
        spread = "" if cell["std"] is None else f" sd {cell['std']:.3f}"
        ci = "" if cell["ci_low"] is None else f" [{cell['ci_low']:.3f}, {cell['ci_high']:.3f}]"
        return f"{cell['mean']:.3f}{spread}{ci}"

    console = Console()
    table = Table(title=f"Pass@(K,T) over {aggregate.runs} runs — {aggregate.env_id}",
                  caption=f"mean sd (between runs) [{args.level:.0%} Student-t CI of the mean]")
    table.add_column("K \\ T", justify="right", style="bold")
    for t in aggregate.ts:
        table.add_column(str(t), justify="right")
    for k in aggregate.ks:
        table.add_row(str(k), *(cell_text(aggregate.passkt[(k, t)]) for t in aggregate.ts))
    console.print(table)
    metrics = Table(title="Behaviour metrics over runs")
    metrics.add_column("metric")
    metrics.add_column("mean sd [CI]", justify="right")
    for name, cell in aggregate.metrics.items():
        metrics.add_row(name, cell_text(cell))
    console.print(metrics)
    console.print(f"wrote {out / 'aggregate.json'}, {out / 'aggregate.csv'}")
    return 0


def _list(_: argparse.Namespace) -> int:
    from rich.console import Console

    from agentgym_budget.envs.registration import FAMILIES, MULTI_AGENT_FAMILIES

    console = Console()
    console.print(f"[bold]{len(FAMILIES)} environment families[/bold] (each registers X-v0 and X-Budget-v0)\n")
    for family in FAMILIES:
        _print_family(console, ", ".join(family.ids), family.installed, family.extra, family.entry_point,
                      family.description)
    console.print(f"[bold]{len(MULTI_AGENT_FAMILIES)} multi-agent (PettingZoo) families[/bold] "
                  "(made with agentgym_budget.envs.registration.make_multi_agent_env(id))\n")
    for ma_family in MULTI_AGENT_FAMILIES:
        _print_family(console, ma_family.id, ma_family.installed, ma_family.extra, ma_family.parallel_entry_point,
                      ma_family.description)
    return 0


def _print_family(console: Any, ids: str, installed: bool, extra: str | None, entry_point: str,
                  description: str) -> None:
    from rich.markup import escape
    from rich.padding import Padding

    if installed:
        status = "[green]installed[/green]"
    else:  # escaped: rich would read "[webshop]" as a markup tag and drop it
        status = "[red]not installed[/red]: " + escape(f"pip install 'agentgym-budget[{extra}]'")
    module = entry_point.split(":")[0].removeprefix("agentgym_budget.")
    console.print(f"[bold]{ids}[/bold]  {status}")
    console.print(Padding(f"backend {module}, extra {extra or '-'}: {description}", (0, 0, 1, 4)),
                  style="dim", highlight=False)


def _train(args: argparse.Namespace) -> int:
    from agentgym_budget.train import train
    from agentgym_budget.train.config import config_from_arguments

    config = config_from_arguments(args)
    rollout_pool = None
    if config.rollout_backend == "ray":
        from agentgym_budget.distributed import RayRolloutPool

        rollout_pool = RayRolloutPool.for_config
    train(config, rollout_pool)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    args = _parser().parse_args(argv)
    from agentgym_budget._optional import MissingBackendError
    from agentgym_budget.eval.episode_log import EvaluationInterrupted

    command = {"eval": _eval, "compare": _compare, "probe": _probe, "aggregate": _aggregate, "list": _list,
               "train": _train}[args.command]
    try:
        return command(args)
    except (MissingBackendError, ValueError, FileNotFoundError) as e:
        print(f"agentgym-budget {args.command}: error: {e}", file=sys.stderr)
        return 2
    except EvaluationInterrupted as e:
        print(f"agentgym-budget {args.command}: {e}", file=sys.stderr)
        return 130  # the shell's code for a run stopped by SIGINT


if __name__ == "__main__":
    sys.exit(main())

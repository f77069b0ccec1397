"""The ``agentgym-budget`` command line: ``eval``, ``report``, ``compare`` and ``list``.

    agentgym-budget eval                      # = the Quickstart main job:
    agentgym-budget eval --env ALFWorld-Budget-v0 --policy noisy-expert --k 1,2,4,8 \\
        --t 5,10,20,30,50 --tasks 50 --attempts 8 --seed 0 --workers 1 --out results/
    agentgym-budget report results/                  # -> results/report.html
    agentgym-budget report results/base results/rl --out compare.html
    agentgym-budget compare results/base/passkt.json results/rl/passkt.json --out diff.png
    agentgym-budget list

``eval`` prints the Pass@(K,T) table and the behaviour metrics and writes ``passkt.json``,
``passkt.csv``, ``task_counts.csv``, ``episodes.jsonl``, ``passkt_heatmap.png`` and
``passkt_curves.png`` into ``--out`` (and ``transcripts.jsonl.gz`` with ``--transcripts``);
``report`` turns such a folder into one offline HTML page.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
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
    ev.add_argument("--policy", default="noisy-expert",
                    help="policy name: random, expert, noisy-expert, hf (local model), openai (served model)")
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
    ev.add_argument("--concurrency", "--batch-size", dest="concurrency", type=int, default=1, metavar="N",
                    help="episodes in flight per worker: an LLM policy gets all their turns in one batched call "
                         "(local model) or N concurrent requests (served model); results do not depend on it")
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
    ev.add_argument("--transcripts", action=argparse.BooleanOptionalAction, default=None,
                    help="keep every turn's observation, raw reply and action in --out/transcripts.jsonl.gz "
                         "(default: on for LLM policies, off for random/expert/noisy-expert)")

    rpt = sub.add_parser("report", help="one self-contained HTML page of an eval's results (or of two, compared)")
    rpt.add_argument("results", help="an eval's --out folder")
    rpt.add_argument("results_b", nargs="?", default=None, help="a second one to compare with the first (b - a)")
    rpt.add_argument("--out", default=None, help="HTML file to write (default RESULTS/report.html)")
    rpt.add_argument("--labels", default=None, help="names of the two runs, comma-separated (default: the policies)")

    cmp = sub.add_parser("compare", help="difference heatmap of two passkt.json results (b - a)")
    cmp.add_argument("a", help="passkt.json (or its folder) of the baseline")
    cmp.add_argument("b", help="passkt.json (or its folder) to compare with it")
    cmp.add_argument("--out", default="passkt_diff.png", help="PNG to write (default passkt_diff.png)")
    cmp.add_argument("--labels", default=None, help="names of a and b, comma-separated (default: the policies)")

    sub.add_parser("list", help="registered envs, their backends and whether each is installed")

    from agentgym_budget.train.config import add_config_arguments  # torch-free: only the flags

    add_config_arguments(sub.add_parser(
        "train", help="reference GRPO/RLOO LLM trainer: fixed, BudgetMix or curriculum budgets (extra 'llm')"))
    return parser


def _eval(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import agentgym_budget  # noqa: F401  (registers the envs)
    from agentgym_budget.eval.evaluate import plan_evaluation, run_evaluation

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
        result = run_evaluation(plan, executor=executor, workers=args.workers, concurrency=args.concurrency, out=out,
                                resume=args.resume, on_record=lambda _: progress.advance(bar),
                                bootstrap=args.bootstrap, transcripts=args.transcripts)
    written = [*result.save(out), out / "episodes.jsonl"]
    if result.config["transcripts"]:
        written.append(out / "transcripts.jsonl.gz")
    if not args.no_plots:
        from agentgym_budget.eval.plots import save_plots

        written += save_plots(result, out)
    console.print(result.table())
    console.print(result.metrics_table())
    timing = result.timing
    console.print(f"{timing['episodes']} episodes, {timing['steps']} turns in {timing['rollout_seconds']:.1f} s "
                  f"({timing['episodes_per_second']:.0f} episodes/s, workers={args.workers}, "
                  f"concurrency={args.concurrency}); metrics {timing['metrics_seconds'] * 1000:.0f} ms")
    if result.usage.get("completion_tokens") is not None:
        console.print(f"tokens: {result.usage['prompt_tokens']:,} prompt, {result.usage['completion_tokens']:,} "
                      f"completion")
    console.print("wrote " + ", ".join(str(p) for p in written))
    console.print(f"see every episode: agentgym-budget report {out}  (writes {out / 'report.html'})",
                  highlight=False)
    return 0


def _report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from agentgym_budget.eval.report import write_report

    labels = tuple(args.labels.split(",", 1)) if args.labels else None
    if labels is not None and (len(labels) != 2 or args.results_b is None):
        raise ValueError(f"--labels needs two results folders and two comma-separated names, got {args.labels!r}")
    path = write_report(args.results, args.out, args.results_b, labels)
    Console().print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB; opens offline in any browser)",
                    highlight=False)
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

    from agentgym_budget.eval.plots import plot_diff_heatmap
    from agentgym_budget.eval.results import PassKTResult, difference

    a, b = PassKTResult.load(args.a), PassKTResult.load(args.b)
    labels = tuple(args.labels.split(",", 1)) if args.labels else (a.policy, b.policy)
    if len(labels) != 2:
        raise ValueError(f"--labels needs two comma-separated names, got {args.labels!r}")
    ks, ts, diff = difference(a, b)
    table = Table(title=f"Pass@(K,T): {labels[1]} minus {labels[0]}")
    table.add_column("K \\ T", justify="right", style="bold")
    for t in ts:
        table.add_column(str(t), justify="right")
    for i, k in enumerate(ks):
        table.add_row(str(k), *(f"{value:+.3f}" for value in diff[i]))
    Console().print(table)
    path = plot_diff_heatmap(a, b, args.out, labels=labels)
    Console().print(f"wrote {path}")
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
    from agentgym_budget.policies.served import ServedModelError

    command = {"eval": _eval, "report": _report, "compare": _compare, "list": _list, "train": _train}[args.command]
    try:
        return command(args)
    except (MissingBackendError, ValueError, FileNotFoundError) as e:
        print(f"agentgym-budget {args.command}: error: {e}", file=sys.stderr)
        return 2
    except ServedModelError as e:  # server down, unknown model, timeouts: one line, no traceback
        print(f"agentgym-budget {args.command}: error: {e}", file=sys.stderr)
        return 1
    except EvaluationInterrupted as e:
        print(f"agentgym-budget {args.command}: {e}", file=sys.stderr)
        return 130  # the shell's code for a run stopped by SIGINT


if __name__ == "__main__":
    sys.exit(main())

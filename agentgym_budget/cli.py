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

A mistake on the command line (an unknown env or option, a bad value, an ``--out`` that is a
file, an absurd size) is one line on stderr naming the bad value and what is accepted, exit
status 2, no traceback, and nothing written: the env is built (and reset once) before
``--out`` is touched, and sizes beyond the limits (``--tasks``, ``--t``, ``--bootstrap``,
``--workers``) are refused before anything runs.
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
#: Upper limits of the size arguments (beyond them a run cannot fit in memory or on this machine).
MAX_WORKERS = 256
MAX_CONCURRENCY = 4096
MAX_BOOTSTRAP = 1_000_000
_MAX_DIGITS = 19  # an int argument longer than this is no count or seed anyone means


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:40]) + f"... ({len(text)} characters)"


def _parse_int(text: str) -> int:
    digits = text.strip().lstrip("+-")
    if not (digits.isascii() and digits.isdigit()) or len(digits) > _MAX_DIGITS:
        raise ValueError(text)
    return int(text)


def _int_list(text: str) -> list[int]:
    try:
        values = [_parse_int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers >= 1 such as 1,2,4,8; got {_shown(text)}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer >= 1, got {_shown(text)}")
    bad = [v for v in values if v < 1]
    if bad:
        raise argparse.ArgumentTypeError(f"every value must be >= 1, got {bad[0]} in {_shown(text)}")
    return values


def _int_in(low: int, high: int | None = None) -> Any:
    """An argparse type: an int in ``low..high``; the message names the bad value and the range."""
    accepted = f"an integer >= {low}" if high is None else f"an integer in {low}..{high:,}"

    def parse(text: str) -> int:
        try:
            value = _parse_int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {accepted}, got {_shown(text)}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {accepted}, got {value}")
        return value

    parse.__name__ = accepted  # argparse names the type in its own messages
    return parse


def _key_value(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY a Python name (e.g. p=0.5), got {_shown(text)}")
    try:
        value = json.loads(raw)  # numbers, true/false, null, lists
    except (json.JSONDecodeError, RecursionError):
        value = raw
    return key.strip(), value


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (argparse prints the usage block first)."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    from agentgym_budget.eval.evaluate import MAX_EPISODES  # numpy and gymnasium only

    parser = _Parser(
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
    ev.add_argument("--tasks", type=_int_in(1, MAX_EPISODES), default=50, help="tasks (env reset seeds), default 50")
    ev.add_argument("--attempts", type=_int_in(1, MAX_EPISODES), default=None,
                    help="attempts N per task (default max(K))")
    ev.add_argument("--seed", type=_int_in(0, 2**63 - 1), default=0, help="base seed (default 0)")
    ev.add_argument("--workers", type=_int_in(1, MAX_WORKERS), default=1,
                    help="worker processes, or Ray actors with --backend ray (there 1 = one per cluster CPU); "
                         "results do not depend on it")
    ev.add_argument("--concurrency", "--batch-size", dest="concurrency", type=_int_in(1, MAX_CONCURRENCY), default=1,
                    metavar="N",
                    help="episodes in flight per worker: an LLM policy gets all their turns in one batched call "
                         "(local model) or N concurrent requests (served model); results do not depend on it")
    ev.add_argument("--backend", choices=["local", "ray"], default="local",
                    help="local processes, or Ray actors (needs the 'ray' extra)")
    ev.add_argument("--ray-address", default=None,
                    help="Ray cluster to join with --backend ray (auto, HOST:PORT); default: a local Ray instance")
    ev.add_argument("--resume", action="store_true",
                    help="keep the episodes already in --out/episodes.jsonl (same settings) and run only the missing")
    ev.add_argument("--overwrite", action="store_true",
                    help="replace an evaluation already in --out (without it or --resume, such an --out is refused)")
    ev.add_argument("--mode", choices=["auto", "shortcut", "per_t"], default="auto",
                    help="auto: one rollout at max T unless the budget is shown/read (then one per T)")
    ev.add_argument("--out", default="results", help="output folder (default results/)")
    ev.add_argument("--bootstrap", type=_int_in(0, MAX_BOOTSTRAP), default=1000,
                    help="bootstrap resamples per cell (default 1000; 0: no CI resampling)")
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
    cmp.add_argument("--out", default="passkt_diff.png",
                     help="PNG to write (default passkt_diff.png; a folder: passkt_diff.png in it)")
    cmp.add_argument("--labels", default=None, help="names of a and b, comma-separated (default: the policies)")
    cmp.add_argument("--shared-cells", action="store_true",
                     help="compare results of different envs, grids, attempts or modes on the cells they share")

    sub.add_parser("list", help="registered envs, their backends and whether each is installed")

    from agentgym_budget.train.config import add_config_arguments  # torch-free: only the flags

    add_config_arguments(sub.add_parser(
        "train", help="reference GRPO/RLOO LLM trainer: fixed, BudgetMix or curriculum budgets (extra 'llm')"))
    return parser


def _eval(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import agentgym_budget  # noqa: F401  (registers the envs)
    from agentgym_budget.eval.episode_log import lock_output
    from agentgym_budget.eval.evaluate import check_scoring, plan_evaluation, run_evaluation

    console = Console()
    _check_env_id(args.env)
    attempts = args.attempts if args.attempts is not None else max(args.k)
    plan = plan_evaluation(args.env, args.policy, ks=args.k, ts=args.t, tasks=args.tasks, attempts=attempts,
                           seed=args.seed, env_kwargs=dict(args.env_arg), policy_kwargs=dict(args.policy_arg),
                           mode=args.mode)
    check_scoring(plan, args.bootstrap, 0.95)
    if args.resume and args.overwrite:
        raise ValueError("--resume and --overwrite exclude each other: keep the saved episodes or replace them")
    out = Path(args.out)
    _check_out(out)
    _check_env_builds(plan)
    # The lock spans the run and the files written after it: a second run into --out refuses at once.
    with _removed_if_failed(out), lock_output(out), _executor(args) as executor, Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=Console(stderr=True), transient=True, disable=args.no_progress) as progress:
        bar = progress.add_task(f"{args.env} x {plan.policy_name} ({plan.mode})", total=len(plan.jobs))
        result = run_evaluation(plan, executor=executor, workers=args.workers, concurrency=args.concurrency, out=out,
                                resume=args.resume, overwrite=args.overwrite, on_record=lambda _: progress.advance(bar),
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


def _check_env_id(env_id: str) -> None:
    import gymnasium as gym

    from agentgym_budget.envs.registration import FAMILIES

    if env_id not in gym.registry:
        ours = ", ".join(family.ids[1] for family in FAMILIES)
        raise ValueError(f"--env {_shown(env_id)} is not a registered env id; accepted: {ours} (or their X-v0 ids, "
                         f"or any registered text env); 'agentgym-budget list' shows them")


def _check_env_builds(plan: Any) -> None:
    """Build and reset the env once before ``--out`` is touched: a bad ``--env-arg`` (or an env that is
    not a text env) is then a one-line error with nothing written.  The caches it fills (game
    files) are the run's own, so the run itself does not pay twice."""
    import gymnasium as gym

    from agentgym_budget._optional import MissingBackendError
    from agentgym_budget.eval.rollout import RolloutSpec, task_seed

    given = " ".join(f"--env-arg {k}={v!r}" for k, v in plan.env_kwargs.items())
    where = f"--env {plan.env_id}" + (f" with {given}" if given else "")
    try:
        env = RolloutSpec(plan.env_id, "random", plan.seed, max(plan.ts), plan.env_kwargs).make_env()
    except MissingBackendError:
        raise
    except (TypeError, ValueError, KeyError, AssertionError, gym.error.Error) as e:
        raise ValueError(f"{where}: the env cannot be built: {_one_line(e)}") from None
    try:
        if not isinstance(env.observation_space, gym.spaces.Text):
            raise ValueError(f"{where}: not a text env (observation space {env.observation_space}); the evaluator "
                             f"plays text envs such as the ones 'agentgym-budget list' shows")
        try:
            env.reset(seed=task_seed(plan.seed, 0))
        except (TypeError, ValueError, KeyError, AssertionError, gym.error.Error) as e:
            raise ValueError(f"{where}: the env cannot be reset: {_one_line(e)}") from None
    finally:
        env.close()


_OUTPUT_FILES = ("passkt.json", "passkt.csv", "task_counts.csv", "episodes.jsonl", "episodes.run.json",
                 "passkt_heatmap.png", "passkt_curves.png")


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder (created if missing) for the results")
    for name in _OUTPUT_FILES:
        if (out / name).is_dir():
            raise ValueError(f"--out {out}: {out / name} is a folder where eval writes a file; remove it or use "
                             f"another --out")


@contextlib.contextmanager
def _removed_if_failed(out: Path) -> Iterator[None]:
    """If the block fails before writing anything into ``out`` that did not exist, remove it again."""
    from agentgym_budget.eval.episode_log import LOCK_FILE

    existed = out.exists()
    try:
        yield
    except Exception:
        if not existed and out.is_dir() and {p.name for p in out.iterdir()} <= {LOCK_FILE}:
            with contextlib.suppress(OSError):
                (out / LOCK_FILE).unlink(missing_ok=True)
                out.rmdir()
        raise


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


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

    a, b = _load_result(PassKTResult, args.a), _load_result(PassKTResult, args.b)
    labels = tuple(args.labels.split(",", 1)) if args.labels else (a.policy, b.policy)
    if len(labels) != 2:
        raise ValueError(f"--labels needs two comma-separated names, got {args.labels!r}")
    mismatch = [f"{name} {getattr(a, name)} vs {getattr(b, name)}" for name in ("env_id", "ks", "ts", "attempts", "mode")
                if getattr(a, name) != getattr(b, name)]
    if mismatch and not args.shared_cells:
        raise ValueError(f"the results differ in {'; '.join(mismatch)}: their Pass@(K,T) are not the same quantity; "
                         f"--shared-cells compares them anyway on the cells they share")
    if mismatch:
        print(f"agentgym-budget compare: note: comparing on the shared cells only ({'; '.join(mismatch)})",
              file=sys.stderr)
    out = Path(args.out)
    if out.is_dir():
        out = out / "passkt_diff.png"
    elif not out.suffix:
        out = out.with_suffix(".png")  # what matplotlib would write; say so, not the name given
    if not out.parent.is_dir():
        raise ValueError(f"--out {args.out}: the folder {out.parent} does not exist")
    ks, ts, diff = difference(a, b)
    table = Table(title=f"Pass@(K,T): {labels[1]} minus {labels[0]}")
    table.add_column("K \\ T", justify="right", style="bold")
    for t in ts:
        table.add_column(str(t), justify="right")
    for i, k in enumerate(ks):
        table.add_row(str(k), *(f"{value:+.3f}" for value in diff[i]))
    Console().print(table)
    path = plot_diff_heatmap(a, b, out, labels=labels)
    Console().print(f"wrote {path}")
    return 0


def _load_result(cls: Any, path: str) -> Any:
    """A ``passkt.json`` (or its folder), or a one-line ``ValueError`` saying why it is not one."""
    file = Path(path) / "passkt.json" if Path(path).is_dir() else Path(path)
    if not file.is_file():
        raise ValueError(f"{path}: no such passkt.json (give a passkt.json written by 'agentgym-budget eval' or its "
                         f"folder)")
    try:
        return cls.load(file)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, UnicodeDecodeError) as e:
        what = f"missing key {e}" if isinstance(e, KeyError) else _one_line(e)
        raise ValueError(f"{path} is not a passkt.json written by 'agentgym-budget eval' ({what})") from None


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
    from gymnasium.error import Error as GymError

    from agentgym_budget._optional import MissingBackendError
    from agentgym_budget.eval.episode_log import EvaluationInterrupted
    from agentgym_budget.policies.served import ServedModelError

    command = {"eval": _eval, "report": _report, "compare": _compare, "list": _list, "train": _train}[args.command]
    try:
        return command(args)
    except (MissingBackendError, ValueError, OSError, GymError) as e:  # the user's mistake: one line, no traceback
        print(f"agentgym-budget {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except ServedModelError as e:  # server down, unknown model, timeouts: one line, no traceback
        print(f"agentgym-budget {args.command}: error: {e}", file=sys.stderr)
        return 1
    except EvaluationInterrupted as e:
        print(f"agentgym-budget {args.command}: {e}", file=sys.stderr)
        return 130  # the shell's code for a run stopped by SIGINT


if __name__ == "__main__":
    sys.exit(main())

"""The ``agentgym-budget`` command line: ``eval``, ``report``, ``compare``, ``probe``, ``aggregate`` and ``list``.

Examples::

    agentgym-budget eval                      # = the Quickstart main job:
    agentgym-budget eval --env ALFWorld-Budget-v0 --policy noisy-expert --k 1,2,4,8 \\
        --t 5,10,20,30,50 --tasks 50 --attempts 8 --seed 0 --workers 1 --out results/
    agentgym-budget report results/                  # -> results/report.html
    agentgym-budget report results/base results/rl --out compare.html
    agentgym-budget compare results/base/passkt.json results/rl/passkt.json --out diff.png
    agentgym-budget probe --env KeyDoor-Budget-v0 --policy random --probes 40
    agentgym-budget aggregate results/seed*/passkt.json --out results/aggregate
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
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]

def _int_in(low: int, high: int) -> Any:
    """An argparse type: an int in ``low..high``; the message names the bad value and the range."""
    from agentgym_budget.flags import parse_int

    parse = parse_int(low, high)

    def checked(text: str) -> int:
        value = parse(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {parse.__name__}, got {value}")
        return value

    checked.__name__ = parse.__name__
    return checked


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (argparse prints the usage block first)."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    from agentgym_budget.eval.config import EvalConfig  # numpy and gymnasium only
    from agentgym_budget.flags import add_arguments

    parser = _Parser(
        prog="agentgym-budget", description="Text environments with turn budgets: Pass@(K,T) evaluation."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    add_arguments(sub.add_parser("eval", help="Pass@(K,T) of a policy on an env, with behaviour metrics and plots"),
                  EvalConfig, show_default=False, config_file=True)

    from agentgym_budget.eval.command_settings import AggregateSettings, CompareSettings, ReportSettings

    for name, settings in (("report", ReportSettings), ("compare", CompareSettings), ("aggregate", AggregateSettings)):
        add_arguments(sub.add_parser(name, help=_summary_of(settings)), settings, show_default=False)

    _add_probe_parser(sub)

    sub.add_parser("list", help="registered envs, their backends and whether each is installed")

    from agentgym_budget.train.config import SFTConfig, add_config_arguments  # torch-free: only the flags

    add_config_arguments(sub.add_parser(
        "train", help="reference GRPO/RLOO LLM trainer: fixed, BudgetMix or curriculum budgets (extra 'llm')"))
    add_config_arguments(sub.add_parser(
        "sft", help="SFT warm start: clone expert or random-format play on the training split, save the model for "
                    "'train --model FOLDER' and the data as a chat dataset (extras 'llm', 'trl')"), SFTConfig)
    _add_sweep_parser(sub)
    return parser


def _add_sweep_parser(sub: Any) -> None:
    from agentgym_budget.flags import key_value

    sw = sub.add_parser("sweep", help="run a study (experiments/<study>/study.toml): arms x seeds, held-out "
                                      "evaluation, paired comparisons; finished runs are reused")
    sw.add_argument("study", help="the study file, e.g. experiments/budgetmix/study.toml")
    sw.add_argument("--dry-run", action="store_true", help="list the runs (train, reuse or retrain) and stop")
    sw.add_argument("--seeds", default=None, help="a comma-separated subset of the study's seeds, e.g. 0,1")
    sw.add_argument("--arms", default=None, help="a comma-separated subset of the study's arms")
    sw.add_argument("--before-rl", action="store_true", help="only the SFT start and the rows before RL "
                    "([study] baselines); no arm trains")
    sw.add_argument("--out", default=None, help="the run folder (default runs/<study name>/)")
    sw.add_argument("--results", default=None, help="also write the study's figures to this file (default: "
                    "none; the committed results file is written only when asked, e.g. the study's [study] results)")
    sw.add_argument("--workers", type=int, default=None, help="runs in parallel processes (default [study] workers)")
    sw.add_argument("--set", action="append", type=key_value, default=[], metavar="KEY=VALUE", dest="train_set",
                    help="set a TrainConfig field in every arm, e.g. --set total_updates=2 (repeatable; the value "
                         "as JSON where it is JSON)")


def _sweep(args: argparse.Namespace) -> int:
    import dataclasses

    from agentgym_budget.experiments import StudyError, load_study, sweep, with_overrides

    study = load_study(args.study)
    try:
        seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else None
    except ValueError:
        raise StudyError(f"--seeds takes comma-separated integers, got {args.seeds!r}") from None
    if args.workers is not None:
        study = dataclasses.replace(study, workers=args.workers)
    if args.train_set:
        study = with_overrides(study, dict(args.train_set))
    out = Path(args.out or f"runs/{study.name}")
    sweep(study, out, seeds=seeds, arms=args.arms.split(",") if args.arms else None, dry_run=args.dry_run,
          before_rl=args.before_rl,
          argv=["-m", "agentgym_budget.cli", *args.argv],
          results=Path(args.results) if args.results else None)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import agentgym_budget  # noqa: F401  (registers the envs)
    from agentgym_budget.eval.config import EvalConfig
    from agentgym_budget.eval.episode_log import lock_output
    from agentgym_budget.eval.evaluate import RepeatedGamesWarning, plan_evaluation, run_evaluation
    from agentgym_budget.flags import from_arguments
    from agentgym_budget.text import printable_line

    config: EvalConfig = from_arguments(EvalConfig, args)  # every value checked here, before anything runs
    console = Console()
    _check_env_id(config.env_id)
    plan = plan_evaluation(config)
    assert config.out is not None  # the --out flag's default is results/
    out = Path(config.out)
    _check_out(out)
    _check_env_builds(plan)
    # The lock spans the run and the files written after it: a second run into --out refuses at once.
    with _removed_if_failed(out), lock_output(out), _executor(config) as executor, Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=Console(stderr=True), transient=True, disable=not config.progress) as progress:
        bar = progress.add_task(escape(f"{config.env_id} x {plan.policy_name} ({plan.mode})"), total=len(plan.jobs))
        with warnings.catch_warnings():  # printed below, with the tables
            warnings.simplefilter("ignore", RepeatedGamesWarning)
            result = run_evaluation(plan, executor=executor, on_record=lambda _: progress.advance(bar))
        written = [*result.save(out), out / "episodes.jsonl", *([out / "probes.json"] if config.probes else [])]
        if result.config["transcripts"]:
            written.append(out / "transcripts.jsonl.gz")
        if config.plots:
            from agentgym_budget.eval.plots import save_plots

            written += save_plots(result, out)
        stopping = _save_stopping(config, result, out) if config.stopping_rules else None
        if stopping is not None:
            written.append(stopping[0])
    console.print(result.table())
    console.print(result.metrics_table())
    _warn_repeated_games(console, result)
    timing = result.timing
    console.print(f"{timing['episodes']} episodes, {timing['steps']} turns in {timing['rollout_seconds']:.1f} s "
                  f"({timing['episodes_per_second']:.0f} episodes/s, workers={config.workers}, "
                  f"concurrency={config.concurrency}); metrics {timing['metrics_seconds'] * 1000:.0f} ms")
    if timing.get("env_failures"):
        console.print(f"[yellow]the env raised {timing['env_failures']:.0f} times: each episode was replayed once in a "
                      f"fresh env; {timing.get('failed_episodes', 0):.0f} raised again and count as not won "
                      f"(episodes.jsonl: failed, error)[/yellow]")
    usage = result.usage
    if usage.get("completion_tokens") is not None or usage.get("prompt_tokens") is not None:
        counts = {k: "unknown" if usage.get(k) is None else f"{usage[k]:,}" for k in ("prompt_tokens",
                                                                                      "completion_tokens")}
        console.print(f"tokens: {counts['prompt_tokens']} prompt, {counts['completion_tokens']} completion")
    _print_frontier(console, result)
    if stopping is not None:
        console.print(stopping[1])
    elif config.stopping_rules:
        console.print("[yellow]note:[/yellow] stopping rules not scored: the result holds no attempt costs")
    # paths are the user's text: printed as they are ("[/]" is no markup), control characters dropped
    console.print(printable_line("wrote " + ", ".join(str(p) for p in written)), markup=False)
    console.print(printable_line(f"see every episode: agentgym-budget report {out}  (writes {out / 'report.html'})"),
                  highlight=False, markup=False)
    return 0


def _save_stopping(config: Any, result: Any, out: Path) -> tuple[Path, Any] | None:
    """Score ``--stopping-rules`` on the run's episodes (as ``report --stopping-rules`` does): write
    ``stopping.csv`` into ``out`` and return it with the table to print (``None``: no attempt costs)."""
    from agentgym_budget.eval.episode_log import read_episodes
    from agentgym_budget.eval.stopping import STOPPING_FILE, parse_rules, rule_points, save_stopping_csv, stopping_table

    frontier = result.frontier()
    if frontier is None:
        return None
    points = rule_points(read_episodes(out), parse_rules(config.stopping_rules), result.ks, result.ts,
                         bootstrap=config.bootstrap, ci_level=config.ci_level)
    return save_stopping_csv(points, frontier, out / STOPPING_FILE), stopping_table(points, frontier)


def _report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from agentgym_budget.eval.command_settings import ReportSettings
    from agentgym_budget.eval.report import write_report
    from agentgym_budget.flags import from_arguments

    settings: ReportSettings = from_arguments(ReportSettings, args)
    labels = tuple(settings.labels.split(",", 1)) if settings.labels else None
    if labels is not None and (len(labels) != 2 or settings.results_b is None):
        raise ValueError(f"--labels needs two results folders and two comma-separated names, got {settings.labels!r}")
    from agentgym_budget.eval.stopping import parse_rules

    rules = parse_rules(settings.stopping_rules) if settings.stopping_rules else []
    path = write_report(settings.results, settings.out, settings.results_b, labels, rules)
    Console().print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB; opens offline in any browser)",
                    highlight=False)
    return 0


def _check_env_id(env_id: str) -> None:
    import gymnasium as gym

    from agentgym_budget.envs.registration import FAMILIES
    from agentgym_budget.flags import shown

    if env_id not in gym.registry:
        ours = ", ".join(family.ids[1] for family in FAMILIES)
        raise ValueError(f"--env {shown(env_id)} is not a registered env id; accepted: {ours} (or their X-v0 ids, "
                         f"or any registered text env); 'agentgym-budget list' shows them")


def _check_env_builds(plan: Any) -> None:
    """Build and reset the env once before ``--out`` is touched: a bad ``--env-arg`` (or an env that is
    not a text env) is then a one-line error with nothing written.  The caches it fills (game
    files) are the run's own, so the run itself does not pay twice."""
    import gymnasium as gym

    from agentgym_budget._optional import MissingBackendError
    from agentgym_budget.episodes.runner import RolloutSpec
    from agentgym_budget.seeds import task_seed
    from agentgym_budget.text import error_line

    given = " ".join(f"--env-arg {k}={v!r}" for k, v in plan.env_kwargs.items())
    where = f"--env {plan.config.env_id}" + (f" with {given}" if given else "")
    try:
        env = RolloutSpec(plan.config.env_id, "random", plan.config.seed, max(plan.config.ts), plan.env_kwargs).make_env()
    except MissingBackendError:
        raise
    except (TypeError, ValueError, KeyError, AssertionError, gym.error.Error) as e:
        raise ValueError(f"{where}: the env cannot be built: {error_line(e)}") from None
    try:
        if not isinstance(env.observation_space, gym.spaces.Text):
            raise ValueError(f"{where}: not a text env (observation space {env.observation_space}); the evaluator "
                             f"plays text envs such as the ones 'agentgym-budget list' shows")
        try:
            env.reset(seed=task_seed(plan.config.seed, 0))
        except (TypeError, ValueError, KeyError, AssertionError, gym.error.Error) as e:
            raise ValueError(f"{where}: the env cannot be reset: {error_line(e)}") from None
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


@contextlib.contextmanager
def _executor(config: Any) -> Iterator[Any]:
    """The executor ``--backend``/``--workers`` ask for (``None``: the evaluator's local default), closed after."""
    if config.backend != "ray":
        yield None
        return
    from agentgym_budget.distributed import RayExecutor

    with RayExecutor(actors=None if config.workers == 1 else config.workers, address=config.ray_address) as executor:
        yield executor


def _compare(args: argparse.Namespace) -> int:
    from rich.console import Console

    from agentgym_budget.eval.command_settings import CompareSettings
    from agentgym_budget.eval.compare import compare_results
    from agentgym_budget.eval.plots import plot_diff_heatmap
    from agentgym_budget.eval.results import PassKTResult
    from agentgym_budget.flags import from_arguments

    settings: CompareSettings = from_arguments(CompareSettings, args)
    a, b = _load_result(PassKTResult, settings.a), _load_result(PassKTResult, settings.b)
    labels = tuple(settings.labels.split(",", 1)) if settings.labels else (a.policy, b.policy)
    if len(labels) != 2:
        raise ValueError(f"--labels needs two comma-separated names, got {settings.labels!r}")
    out = Path(settings.out)
    if out.is_dir():
        out = out / "passkt_diff.png"
    elif not out.suffix:
        out = out.with_suffix(".png")  # what matplotlib would write; say so, not the name given
    if not out.parent.is_dir():
        raise ValueError(f"--out {settings.out}: the folder {out.parent} does not exist")
    from agentgym_budget.eval.stopping import parse_rules

    rules = parse_rules(settings.stopping_rules) if settings.stopping_rules else []
    records = (_records_beside(settings.a), _records_beside(settings.b)) if rules else None
    comparison = compare_results(a, b, resamples=settings.bootstrap, seed=settings.seed, labels=labels, rules=rules,
                                 records=records)
    console = Console()
    for table in comparison.tables():
        console.print(table)
    for note in comparison.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    path = plot_diff_heatmap(a, b, out, labels=labels, comparison=comparison)
    json_path = comparison.save_json(out.with_suffix(".json"))
    console.print(f"wrote {path}, {json_path}")
    return 0


def _records_beside(path: str) -> Any:
    """The episode records in the folder of ``path`` (a passkt.json or its folder), for ``--stopping-rules``."""
    from agentgym_budget.eval.episode_log import EPISODES_FILE, read_episodes

    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    if not (folder / EPISODES_FILE).is_file():
        raise ValueError(f"--stopping-rules scores the episode records, and {folder / EPISODES_FILE} is missing "
                         f"(agentgym-budget eval --out {folder} writes it beside passkt.json)")
    return read_episodes(folder)


def _print_frontier(console: Any, result: Any) -> None:
    """One line on the frontier: its sequential cells in expected turns, and whether tokens were recorded."""
    frontier = result.frontier()
    if frontier is None:
        return
    cells = ", ".join(f"{c.label} {c.success:.2f} @{c.cost:.0f}" for c in frontier.frontier("sequential", "turns"))
    tokens = "" if "tokens" in frontier.kinds() else "; tokens: not recorded (the policy reports none)"
    console.print(f"frontier, sequential (K×T Pass@(K,T) @expected turns per task): {cells}{tokens}",
                  markup=False, highlight=False)


def _warn_repeated_games(console: Any, result: Any) -> None:
    from agentgym_budget.eval.evaluate import repeated_games, repeated_games_message

    repeated = repeated_games(result.task_games)
    if repeated:
        console.print(f"[yellow]note:[/yellow] {repeated_games_message(repeated, result.n_tasks)}")


#: The settings ``probe`` shares with ``eval``: their flags are eval's (made from :class:`EvalConfig`'s fields).
_PROBE_SETTINGS = ("env_id", "policy", "policy_kwargs", "env_kwargs", "seed")


def _add_probe_parser(sub: Any) -> None:
    from agentgym_budget.eval.command_settings import ProbeSettings
    from agentgym_budget.eval.config import EvalConfig
    from agentgym_budget.flags import add_arguments

    pr = sub.add_parser("probe", help="single-step quality of a policy on a fixed, seeded set of probe states")
    add_arguments(pr, EvalConfig, show_default=False, only=_PROBE_SETTINGS)  # --seed: the same as eval's, its tasks
    add_arguments(pr, ProbeSettings, show_default=False)


def _probe(args: argparse.Namespace) -> int:
    from rich.console import Console

    import agentgym_budget  # noqa: F401  (registers the envs)
    from agentgym_budget.eval.command_settings import ProbeSettings
    from agentgym_budget.eval.config import EvalConfig
    from agentgym_budget.eval.evaluate import build_policy
    from agentgym_budget.eval.probes import build_probes, probe_table, run_probes, write_probes
    from agentgym_budget.flags import from_arguments

    config: EvalConfig = from_arguments(EvalConfig, args, only=_PROBE_SETTINGS)  # checked as eval's are
    settings: ProbeSettings = from_arguments(ProbeSettings, args)
    policy = build_policy(str(config.policy), config.policy_kwargs)  # a wrong --policy-arg: one line, as in eval
    probes = build_probes(config.env_id, settings.probes, config.seed, config.env_kwargs)
    outcome = run_probes(config.env_id, policy, probes, config.env_kwargs, seed=config.seed, horizon=settings.horizon,
                         concurrency=settings.concurrency)
    path = write_probes(Path(settings.out), config.env_id, str(config.policy), outcome)
    console = Console()
    console.print(probe_table(config.env_id, str(config.policy), outcome))
    console.print(f"wrote {path}")
    return 0


def _summary_of(settings: type) -> str:
    """A command's one-line help: its settings class's docstring after the command's name."""
    return (settings.__doc__ or "").split(": ", 1)[-1].strip().rstrip(".")


def _aggregate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from agentgym_budget.eval.command_settings import AggregateSettings
    from agentgym_budget.eval.compare import aggregate_results
    from agentgym_budget.eval.results import PassKTResult
    from agentgym_budget.flags import from_arguments

    settings: AggregateSettings = from_arguments(AggregateSettings, args)
    aggregate = aggregate_results([PassKTResult.load(path) for path in settings.results], level=settings.level)
    written = aggregate.save(Path(settings.out))
    console = Console()
    for table in aggregate.tables():
        console.print(table)
    console.print(f"wrote {written[0]}, {written[1]}")
    return 0


def _load_result(cls: Any, path: str) -> Any:
    """A ``passkt.json`` (or its folder), or a one-line ``ValueError`` saying why it is not one."""
    from agentgym_budget.text import error_line

    file = Path(path) / "passkt.json" if Path(path).is_dir() else Path(path)
    if not file.is_file():
        raise ValueError(f"{path}: no such passkt.json (give a passkt.json written by 'agentgym-budget eval' or its "
                         f"folder)")
    try:
        return cls.load(file)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, UnicodeDecodeError) as e:
        what = f"missing key {e}" if isinstance(e, KeyError) else error_line(e)
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


def _sft(args: argparse.Namespace) -> int:
    from agentgym_budget.train.config import SFTConfig, config_from_arguments
    from agentgym_budget.train.sft import sft

    config = config_from_arguments(args, SFTConfig)
    summary = sft(config)
    print(f"sft: {summary['episodes']} {config.source} episodes, {summary['turns']} turns; reply loss "
          f"{summary['reply_loss_before']:.3f} -> {summary['reply_loss_after']:.3f} after {config.steps} steps "
          f"({summary['seconds']:.0f} s); model, tokenizer and dataset/ in {config.output_dir}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    from agentgym_budget.flags import parse_with_config

    args = parse_with_config(_parser(), argv)  # a --config FILE's values, then the flags over them
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command a results file records
    from gymnasium.error import Error as GymError

    from agentgym_budget._optional import MissingBackendError
    from agentgym_budget.eval.episode_log import EvaluationInterrupted
    from agentgym_budget.policies.served import ServedModelError
    from agentgym_budget.text import error_line

    command = {"eval": _eval, "report": _report, "compare": _compare, "probe": _probe, "aggregate": _aggregate,
               "list": _list, "train": _train, "sft": _sft, "sweep": _sweep}[args.command]
    try:
        return command(args)
    except (MissingBackendError, ValueError, OSError, GymError) as e:  # the user's mistake: one line, no traceback
        print(f"agentgym-budget {args.command}: error: {error_line(e)}", file=sys.stderr)
        return 2
    except ServedModelError as e:  # server down, unknown model, timeouts: one line, no traceback
        print(f"agentgym-budget {args.command}: error: {error_line(e)}", file=sys.stderr)
        return 1
    except EvaluationInterrupted as e:
        print(f"agentgym-budget {args.command}: {e}", file=sys.stderr)
        return 130  # the shell's code for a run stopped by SIGINT


if __name__ == "__main__":
    sys.exit(main())

"""Did a training run learn?  One seed of the documented KeyDoor smoke run, trained and then
evaluated on set-ups held out from training (``benchmarks/learning_check.py`` runs many seeds).

A seed *learned* when its mean training success over the last :data:`LAST_UPDATES` updates is
at least :data:`TRAIN_SUCCESS_TO_LEARN` (random play: 0.264 under the smoke run's ``mix:2,3,4,6``,
exact: :func:`~agentgym_budget.envs.toy.key_door.random_play_win_rate`) **and** its evaluation
Pass@(1,T) at the smallest evaluated T (2 by default) on KeyDoor's ``test`` set-ups — door
pairs never seen in training, nor in the format warm-up or the tiny tokenizer's text, which read
the ``train`` split too — is at least :data:`HELD_OUT_PASS_TO_LEARN` (random play:
1/9 = 0.111).  The second condition is what makes it a check of *reading the task*: KeyDoor's
``train`` split shows every door pair with either door as the goal, and ``test`` asks for the
same reading with new door pairs.

Example:
    >>> run = LearningRun(seed=0, success=[0.3] * 10 + [0.9] * 20, held_out_pass1={2: 0.85, 4: 0.9},
    ...                   cpu_seconds=1.0, wall_seconds=1.0)
    >>> run.last_success, run.learned
    (0.9, True)
"""

from __future__ import annotations

import ast
import contextlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["EVAL_TS", "HELD_OUT_PASS_TO_LEARN", "LAST_UPDATES", "TRAIN_SUCCESS_TO_LEARN", "LearningRun",
           "evaluate_model", "held_out_env_kwargs", "held_out_settings", "parse_overrides", "run_baseline",
           "run_seed", "run_sft_start", "train_and_evaluate", "training_curve"]

EVAL_TS: tuple[int, ...] = (2, 3, 4, 6)
TRAIN_SUCCESS_TO_LEARN = 0.8
HELD_OUT_PASS_TO_LEARN = 0.8
LAST_UPDATES = 20


@dataclass
class LearningRun:
    """One seed's training curve, held-out evaluation and cost."""

    seed: int
    success: list[float]  # training success rate per update
    held_out_pass1: dict[int, float]  # Pass@(1,T) on the held-out set-ups, by T (int or, read back from JSON, str)
    cpu_seconds: float  # model building, format warm-up, training and evaluation, this process
    wall_seconds: float

    @property
    def last_success(self) -> float:
        last = self.success[-LAST_UPDATES:]
        return sum(last) / len(last)

    @property
    def learned(self) -> bool:
        smallest_t = min(self.held_out_pass1, key=int)
        return self.last_success >= TRAIN_SUCCESS_TO_LEARN and self.held_out_pass1[smallest_t] >= HELD_OUT_PASS_TO_LEARN

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "last_success": self.last_success, "learned": self.learned}


def train_and_evaluate(seed: int, output_dir: str, eval_tasks: int = 40, eval_attempts: int = 2,
                       eval_ts: Sequence[int] = EVAL_TS, result_dir: str | None = None,
                       smoke: bool = True, eval_settings: Mapping[str, Any] | None = None,
                       **overrides: Any) -> LearningRun:
    """Train :func:`~agentgym_budget.train.config.keydoor_smoke_config` (``seed``, ``overrides``), then
    evaluate Pass@(1,T) for ``eval_ts`` on the env's held-out split (KeyDoor: ``test``; a setting whose
    evaluation tasks overlap the training ones is refused before training, :func:`held_out_env_kwargs`), the tasks
    from the config's ``eval_seed`` (the same for every seed and every override but ``eval_seed``).
    ``result_dir``: where to save the evaluator's result (``passkt.json``; ``agentgym-budget
    compare``/``aggregate`` read it).  ``smoke=False``: ``overrides`` apply to :class:`TrainConfig`'s own
    defaults instead of the smoke run's (a study file that spells out its settings).  ``eval_settings``:
    more :class:`~agentgym_budget.eval.config.EvalConfig` fields of the evaluation (:func:`held_out_settings`:
    ``ks``, ``probes``, ``concurrency``, ``bootstrap``, ``seed``, ``env_kwargs`` on the held-out split);
    with ``result_dir`` the evaluation writes its episodes there as it goes and resumes from them.
    ``overrides`` may say ``resume="auto"``: an interrupted run goes on from its last checkpoint and
    its training curve is read back from ``metrics.jsonl`` (:func:`training_curve`)."""
    import torch

    from agentgym_budget.envs.registration import budget_env_id
    from agentgym_budget.eval import evaluate
    from agentgym_budget.train.config import TrainConfig, keydoor_smoke_config
    from agentgym_budget.train.rollout import training_policy
    from agentgym_budget.train.trainer import Trainer

    start_cpu, start_wall = time.process_time(), time.perf_counter()
    config = (keydoor_smoke_config if smoke else TrainConfig)(seed=seed, output_dir=output_dir, **overrides)
    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)
    settings = held_out_settings(config, eval_tasks, eval_attempts, eval_ts, eval_settings)  # refused before training
    trainer = Trainer(config)
    history = trainer.train()
    policy = training_policy(trainer.model, trainer.tokenizer, config, temperature=config.eval_temperature)
    saved: dict[str, Any] = {} if result_dir is None else {"out": result_dir, "resume": True}
    result = evaluate(budget_env_id(config.env_id) or config.env_id, policy, **settings, **saved)
    if result_dir is not None:
        result.save(result_dir)
    curve = training_curve(Path(output_dir)) if config.resume else []
    return LearningRun(seed=seed, success=curve or [h["success_rate"] for h in history],
                       held_out_pass1={t: result.value(1, t) for t in eval_ts},
                       cpu_seconds=time.process_time() - start_cpu, wall_seconds=time.perf_counter() - start_wall)


def held_out_settings(config: Any, tasks: int, attempts: int, ts: Sequence[int],
                      extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The :func:`~agentgym_budget.eval.evaluate` settings of a trained ``config``'s held-out evaluation:
    Pass@(1,T) at ``ts`` on :func:`held_out_env_kwargs`, tasks from ``config.eval_seed``, no bootstrap;
    ``extra`` replaces or adds fields (``ks``, ``probes``, ``seed``...), and its ``env_kwargs`` are merged
    over the held-out ones, a split other than the held-out one refused in one line.

    Example:
        >>> from agentgym_budget.train.config import keydoor_smoke_config
        >>> held_out_settings(keydoor_smoke_config(), 8, 2, (2, 4), {"ks": (1, 2)})["ks"]
        (1, 2)
        >>> held_out_settings(keydoor_smoke_config(), 8, 2, (2, 4), {"env_kwargs": {"split": "train"}})
        Traceback (most recent call last):
        ...
        ValueError: the evaluation's env_kwargs split 'train' is not the held-out split 'test'
    """
    held_out = held_out_env_kwargs(config)
    extra = dict(extra or {})
    asked = dict(extra.pop("env_kwargs", None) or {})
    if "split" in asked and asked["split"] != held_out.get("split"):
        raise ValueError(f"the evaluation's env_kwargs split {asked['split']!r} is not the held-out split "
                         f"{held_out.get('split')!r}")
    settings: dict[str, Any] = {"ks": (1,), "ts": tuple(ts), "tasks": tasks, "attempts": attempts, "seed": config.eval_seed,
                "bootstrap": 0, "env_kwargs": {**held_out, **asked}}
    settings.update({key: tuple(value) if isinstance(value, list) else value for key, value in extra.items()})
    return settings


def training_curve(folder: Path) -> list[float]:
    """The training success rate per update from ``folder/metrics.jsonl`` (a resumed run's lines are appended
    after its checkpoint's: an update logged twice keeps its last line); ``[]`` when there is none."""
    path = folder / "metrics.jsonl"
    if not path.is_file():
        return []
    by_update: dict[int, float] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        if "success_rate" in row and "update" in row:
            by_update[int(row["update"])] = float(row["success_rate"])
    return [by_update[update] for update in sorted(by_update)]


def held_out_env_kwargs(config: Any) -> dict[str, Any]:
    """The evaluation env's kwargs for ``config`` (a ``TrainConfig``), or a one-line ``ValueError`` when its
    tasks overlap the training ones (a "held-out" figure must be one).

    Example:
        >>> from agentgym_budget.train.config import keydoor_smoke_config
        >>> held_out_env_kwargs(keydoor_smoke_config())
        {'split': 'test', 'show_budget': False}
        >>> held_out_env_kwargs(keydoor_smoke_config(env_kwargs={}))
        Traceback (most recent call last):
        ...
        ValueError: the evaluation tasks (KeyDoor-v0 {'show_budget': False, 'split': 'test'}) overlap the training ones (env_kwargs {}): a held-out evaluation needs the training split, e.g. env_kwargs={'split': 'train'}
    """
    from agentgym_budget.train.trainer import evaluation_env_kwargs

    kwargs, held_out = evaluation_env_kwargs(config)
    if not held_out:
        raise ValueError(f"the evaluation tasks ({config.env_id} {kwargs}) overlap the training ones (env_kwargs "
                         f"{config.env_kwargs}): a held-out evaluation needs the training split, "
                         f"e.g. env_kwargs={{'split': 'train'}}")
    return kwargs


def run_seed(seed: int, folder: str, eval_tasks: int = 40, eval_attempts: int = 2, eval_ts: Sequence[int] = EVAL_TS,
             smoke: bool = True, eval_settings: Mapping[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """:func:`train_and_evaluate` for a worker process of a multi-seed benchmark: the run's output
    (stdout and stderr) goes to ``folder.log``, the trainer's files to ``folder``, the evaluator's
    result to ``folder/held_out_eval``; returns :meth:`LearningRun.to_dict` (picklable)."""
    Path(folder).parent.mkdir(parents=True, exist_ok=True)
    with open(f"{folder}.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        run = train_and_evaluate(seed, folder, eval_tasks, eval_attempts, eval_ts,
                                 result_dir=f"{folder}/held_out_eval", smoke=smoke, eval_settings=eval_settings,
                                 **overrides)
    return run.to_dict()


def evaluate_model(model: str, result_dir: str, eval_tasks: int, eval_attempts: int, eval_ts: Sequence[int],
                   eval_settings: Mapping[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """A model evaluated as a trained one would be, without training: ``model`` (a name, e.g. ``smollm2``, or a
    folder :func:`~agentgym_budget.train.sft.sft` saved) as the policy of ``TrainConfig(model=model,
    **overrides)`` (:func:`~agentgym_budget.train.rollout.training_policy`), on :func:`held_out_settings`, saved
    in ``result_dir`` (resumed from its episodes).  A study's rows before RL (the zero-shot model, the SFT
    start) are this, so they differ from the RL arms' rows in the weights only.  Returns the CPU-s it took."""
    import torch

    from agentgym_budget.envs.registration import budget_env_id
    from agentgym_budget.eval import evaluate
    from agentgym_budget.train.config import TrainConfig
    from agentgym_budget.train.rollout import training_policy
    from agentgym_budget.train.sft import load_for_training, training_device

    start_cpu, start_wall = time.process_time(), time.perf_counter()
    config = TrainConfig(**{**overrides, "model": model})
    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)
    settings = held_out_settings(config, eval_tasks, eval_attempts, eval_ts, eval_settings)
    loaded, tokenizer = load_for_training(model, config, training_device(config.device))
    policy = training_policy(loaded.eval(), tokenizer, config, temperature=config.eval_temperature)
    with torch.no_grad():
        result = evaluate(budget_env_id(config.env_id) or config.env_id, policy, **settings, out=result_dir,
                          resume=True)
    result.save(result_dir)
    return {"model": model, "cpu_seconds": time.process_time() - start_cpu,
            "wall_seconds": time.perf_counter() - start_wall}


def run_baseline(folder: str, model: str, eval_tasks: int, eval_attempts: int, eval_ts: Sequence[int],
                 eval_settings: Mapping[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """:func:`evaluate_model` for a worker process, as :func:`run_seed` (log in ``folder.log``, result in
    ``folder/held_out_eval``)."""
    Path(folder).parent.mkdir(parents=True, exist_ok=True)
    with open(f"{folder}.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        return evaluate_model(model, f"{folder}/held_out_eval", eval_tasks, eval_attempts, eval_ts, eval_settings,
                              **overrides)


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` command-line overrides of config fields (Python literals, else strings).

    Example:
        >>> parse_overrides(["kl_coef=0", "budget=fixed:2"])
        {'kl_coef': 0, 'budget': 'fixed:2'}
    """
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set takes KEY=VALUE, got {pair!r}")
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[key] = value
    return overrides


def run_sft_start(folder: str, **overrides: Any) -> dict[str, Any]:
    """:func:`~agentgym_budget.train.sft.sft` of ``SFTConfig(output_dir=folder, **overrides)`` for a worker
    process (log in ``folder.log``): a study's shared SFT start; returns its ``sft.json`` summary."""
    from agentgym_budget.train.config import SFTConfig
    from agentgym_budget.train.sft import sft

    Path(folder).parent.mkdir(parents=True, exist_ok=True)
    with open(f"{folder}.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        return sft(SFTConfig(output_dir=folder, **overrides))

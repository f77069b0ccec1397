"""Did a training run learn?  One seed of the documented KeyDoor smoke run, trained and then
evaluated on set-ups held out from training (``benchmarks/learning_check.py`` runs many seeds).

A seed *learned* when its mean training success over the last :data:`LAST_UPDATES` updates is
at least :data:`TRAIN_SUCCESS_TO_LEARN` (random play: ~0.3) **and** its evaluation
Pass@(1,T=2) on KeyDoor's ``test`` set-ups — door pairs never seen in training — is at least
:data:`HELD_OUT_PASS_TO_LEARN` (random play: 0.11).  The second condition is what makes it a
check of *reading the task*: KeyDoor's ``train`` split shows every door pair with either door
as the goal, and ``test`` asks for the same reading with new door pairs.

Example:
    >>> run = LearningRun(seed=0, success=[0.3] * 10 + [0.9] * 20, held_out_pass1={2: 0.85, 4: 0.9},
    ...                   cpu_seconds=1.0, wall_seconds=1.0)
    >>> run.last_success, run.learned
    (0.9, True)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["EVAL_TS", "HELD_OUT_PASS_TO_LEARN", "LAST_UPDATES", "TRAIN_SUCCESS_TO_LEARN", "LearningRun",
           "train_and_evaluate"]

EVAL_TS: tuple[int, ...] = (2, 3, 4, 6)
TRAIN_SUCCESS_TO_LEARN = 0.8
HELD_OUT_PASS_TO_LEARN = 0.8
LAST_UPDATES = 20


@dataclass
class LearningRun:
    """One seed's training curve, held-out evaluation and cost."""

    seed: int
    success: list[float]  # training success rate per update
    held_out_pass1: dict[int, float]  # Pass@(1,T) on the held-out set-ups, by T
    cpu_seconds: float  # model building, format warm-up, training and evaluation, this process
    wall_seconds: float

    @property
    def last_success(self) -> float:
        last = self.success[-LAST_UPDATES:]
        return sum(last) / len(last)

    @property
    def learned(self) -> bool:
        return self.last_success >= TRAIN_SUCCESS_TO_LEARN and self.held_out_pass1[2] >= HELD_OUT_PASS_TO_LEARN

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "last_success": self.last_success, "learned": self.learned}


def train_and_evaluate(seed: int, output_dir: str, eval_tasks: int = 40, eval_attempts: int = 2,
                       **overrides: Any) -> LearningRun:
    """Train :func:`~agentgym_budget.train.config.keydoor_smoke_config` (``seed``, ``overrides``),
    then evaluate Pass@(1,T) for :data:`EVAL_TS` on KeyDoor's held-out ``test`` set-ups."""
    import torch

    from agentgym_budget.eval import evaluate
    from agentgym_budget.train.config import keydoor_smoke_config
    from agentgym_budget.train.rollout import training_policy
    from agentgym_budget.train.trainer import Trainer

    start_cpu, start_wall = time.process_time(), time.perf_counter()
    config = keydoor_smoke_config(seed=seed, output_dir=output_dir, **overrides)
    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)
    trainer = Trainer(config)
    history = trainer.train()
    policy = training_policy(trainer.model, trainer.tokenizer, config, temperature=config.eval_temperature)
    result = evaluate("KeyDoor-Budget-v0", policy, ks=(1,), ts=EVAL_TS, tasks=eval_tasks, attempts=eval_attempts,
                      seed=config.eval_seed, env_kwargs={"split": "test", "show_budget": config.show_budget},
                      bootstrap=0)
    return LearningRun(seed=seed, success=[h["success_rate"] for h in history],
                       held_out_pass1={t: result.value(1, t) for t in EVAL_TS},
                       cpu_seconds=time.process_time() - start_cpu, wall_seconds=time.perf_counter() - start_wall)

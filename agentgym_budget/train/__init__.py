"""The reference multi-turn LLM trainer: fixed-budget, BudgetMix and curriculum RL (GRPO/RLOO).

Needs torch and transformers (extra ``llm``), imported when a trainer name is first used;
``import agentgym_budget`` and ``agentgym_budget.train.config`` do not import them.

* :mod:`~agentgym_budget.train.config` — :class:`TrainConfig`, every hyperparameter (and :class:`SFTConfig`);
* :mod:`~agentgym_budget.train.rollout` — multi-turn episode collection through the LLM policy layer;
* :mod:`~agentgym_budget.train.grpo` — group advantages, turn samples, action log-probs;
* :mod:`~agentgym_budget.train.kernels` — fused chunked log-probs and the policy loss;
* :mod:`~agentgym_budget.train.trainer` — the loop, checkpoints, evaluation, logging;
* :mod:`~agentgym_budget.train.sft` — SFT on demonstrations (expert or random play on the training
  split): the warm start of any model, and the tiny model's format warm-up (the model itself:
  :mod:`agentgym_budget.policies.tiny_model`).

Example:
    >>> from agentgym_budget.train import TrainConfig, train  # doctest: +SKIP
    >>> train(TrainConfig(env_id="KeyDoor-v0", budget="mix:2,3,4,6"))  # doctest: +SKIP
"""

import importlib
from typing import Any

# Resolved on first use, so that ``agentgym_budget.train.config`` (what the CLI needs to list
# the flags) imports without torch; everything else needs the extra ``llm``.
_EXPORTS = {
    "TrainConfig": "agentgym_budget.train.config",
    "keydoor_smoke_config": "agentgym_budget.train.config",
    "Episode": "agentgym_budget.train.rollout",
    "collect_episodes": "agentgym_budget.train.rollout",
    "format_warmup": "agentgym_budget.train.sft",
    "sft": "agentgym_budget.train.sft",
    "SFTConfig": "agentgym_budget.train.config",
    "make_train_env": "agentgym_budget.train.rollout",
    "tiny_model_and_tokenizer": "agentgym_budget.policies.tiny_model",
    "training_policy": "agentgym_budget.train.rollout",
    "Trainer": "agentgym_budget.train.trainer",
    "train": "agentgym_budget.train.trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _EXPORTS[name]
    if module != "agentgym_budget.train.config":
        from agentgym_budget._optional import require

        require("torch", "llm", "the trainer")
        require("transformers", "llm", "the trainer")
    return getattr(importlib.import_module(module), name)

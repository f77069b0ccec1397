"""agentgym-budget: text environments for LLM agents as Gymnasium envs, with the turn budget
as a first-class, swappable part of the RL pipeline.

Importing the package registers every environment id (``ALFWorld-v0``,
``ALFWorld-Budget-v0``, ...) with Gymnasium; backends are imported only when an env is made.

The package is layered along the data path; a module imports only its own layer and the
layers below it (``tests/test_layering.py`` checks every import)::

    cli                            the command line
    experiments                    the sweep runner of studies (experiments/<study>/study.toml)
    distributed                    Ray executors and rollout pools, handed to eval/train
    train, integrations            the trainer; SB3 / PettingZoo / vector-env adapters
    eval                           Pass@(K,T) evaluation, behaviour metrics, results, reports
    policies                       what acts: baselines, LLM policies; what is made by playing episodes:
                                   demonstrations, few-shot examples, the tiny model's tokenizer
    episodes                       how an episode is played: the policy protocol and registry, the one
                                   episode runner, the end-of-episode rule, records, process pool
    envs                           the text envs, their registry, the budgeted-env factory
    wrappers                       TurnBudget, budget schedules, ProcessReward
    _optional, _once, text, flags, optional-backend imports, loads done once, text, flags from
    compiling, seeds, provenance   settings dataclasses, torch.compile with a fallback to eager, seed
                                   streams, where a results file's figures came from

A higher layer hands what it owns to a lower one instead of being imported by it: the CLI
passes a ``RayExecutor`` to ``evaluate(executor=...)`` and ``RayRolloutPool.for_config`` to
``Trainer(rollout_pool=...)``.
"""

from agentgym_budget.envs.registration import register_envs as _register_envs

__version__ = "0.1.0"
__all__ = ["__version__"]

_register_envs()

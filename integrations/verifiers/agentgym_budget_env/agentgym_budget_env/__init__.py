"""agentgym-budget's budgeted text envs as a verifiers v1 environment (taskset + env).

verifiers resolves a taskset id to this package (``vf-eval agentgym-budget-env``) and takes the
``Taskset`` and ``Env`` it exports through ``__all__``: one task per seed, the episode's drawn budget
as the ``player`` seat's turn limit (see :mod:`agentgym_budget.integrations.verifiers_v1`).
:func:`load_environment` builds the same env in Python.
"""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf

from agentgym_budget.integrations.verifiers_v1 import BudgetEnv, BudgetEnvConfig, BudgetTaskset

__all__ = ["BudgetEnv", "BudgetTaskset", "load_environment"]

TASKSET_ID = "agentgym-budget-env"


def load_environment(**taskset: Any) -> vf.Env:
    """The env over this package's taskset (a :class:`BudgetEnv`), as verifiers' loader builds it for
    ``vf-eval``; ``taskset``: ``BudgetTasksetConfig`` fields (``env_id``, ``budget``, ``num_tasks``, ...)."""
    return vf.load_environment(BudgetEnvConfig(taskset={"id": TASKSET_ID, **taskset}))

"""The wire types of the agentgym-budget OpenEnv environment.

Defined once, in :mod:`agentgym_budget.integrations.openenv_env`, and served by ``server/app.py``:

* ``TextAction``: ``command`` (the text command to play).
* ``TextObservation``: OpenEnv's ``done`` and ``reward``, plus ``text`` (the env's observation),
  ``message`` (the user message an LLM reads), ``task``, ``admissible_commands``, ``budget`` (this
  episode's turn budget), ``turn``, ``turns_left``, ``won``, ``terminated`` (the env ended the
  episode), ``truncated`` (the budget did; ``done == terminated or truncated``), ``info``,
  ``env_failures``.
* ``BudgetState``: ``episode_id``, ``step_count``, ``env_id``, ``budget``, ``turns_left``.
"""

from agentgym_budget.integrations.openenv_env import BudgetState, TextAction, TextObservation

__all__ = ["BudgetState", "TextAction", "TextObservation"]

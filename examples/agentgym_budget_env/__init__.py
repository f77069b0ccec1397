"""agentgym-budget's turn-budgeted text envs as an OpenEnv environment (client side).

The types and the client are :mod:`agentgym_budget.integrations.openenv_env`'s (one definition,
shared with the server): :class:`TextAction` (``command``), :class:`TextObservation` (``text``,
``message``, ``budget``, ``turn``, ``turns_left``, ``terminated``, ``truncated``, ``won``, ...),
:class:`BudgetState`, and :class:`BudgetEnv`, OpenEnv's ``EnvClient`` for them.
"""

from .client import BudgetEnv
from .models import BudgetState, TextAction, TextObservation

__all__ = ["BudgetEnv", "BudgetState", "TextAction", "TextObservation"]

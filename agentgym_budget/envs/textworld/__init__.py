"""TextWorld backend (extra ``textworld``): generated challenge games and user game files.

See :mod:`agentgym_budget.envs.textworld.env` for the envs and their semantics; importing
this package does not import ``textworld`` (that happens when an env is made).
"""

from agentgym_budget.envs.textworld.challenges import CHALLENGES, COOKING_LEVELS
from agentgym_budget.envs.textworld.env import TextWorldChallengeEnv, TextWorldEnv

__all__ = ["CHALLENGES", "COOKING_LEVELS", "TextWorldChallengeEnv", "TextWorldEnv"]

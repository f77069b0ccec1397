"""ALFWorld household tasks as a Gymnasium text env (see :mod:`agentgym_budget.envs.alfworld.env`).

Importing this package is cheap: the real engine (TextWorld + Fast Downward, extra
``alfworld``) is only imported when an env or engine asks for it.
"""

from agentgym_budget.envs.alfworld.engine import AlfredEngine, EngineStep, make_engine
from agentgym_budget.envs.alfworld.game import SPLITS, TASK_TYPES, AlfredGame, load_games

__all__ = ["SPLITS", "TASK_TYPES", "AlfredEngine", "AlfredGame", "EngineStep", "load_games", "make_engine"]

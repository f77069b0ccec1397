"""The fast ALFWorld engine: the real engine's semantics and texts in plain Python.

See :mod:`.engine` for what it reproduces and ``docs/alfworld-fast.md`` for the
equivalence test and the speed figures.  Nothing here imports textworld or alfworld.

Example:
    >>> from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
    >>> engine = FastAlfredEngine()
"""

from agentgym_budget.envs.alfworld.fast.engine import FastAlfredEngine, load_world
from agentgym_budget.envs.alfworld.fast.world import UnsupportedGameError, World, compile_world

__all__ = ["FastAlfredEngine", "UnsupportedGameError", "World", "compile_world", "load_world"]

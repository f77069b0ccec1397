"""agentgym-budget: text environments for LLM agents as Gymnasium envs, with the turn budget
as a first-class, swappable part of the RL pipeline.

Importing the package registers every environment id (``ALFWorld-v0``,
``ALFWorld-Budget-v0``, ...) with Gymnasium; backends are imported only when an env is made.
"""

from agentgym_budget.envs.registration import register_envs as _register_envs

__version__ = "0.1.0"
__all__ = ["__version__"]

_register_envs()

"""ScienceWorld backend (extra ``scienceworld``; needs Java 8+ on the PATH).

See :mod:`agentgym_budget.envs.scienceworld.env`; importing this package does not import
``scienceworld`` or start a JVM (that happens when an env is made).
"""

from agentgym_budget.envs.scienceworld.env import ScienceWorldEnv

__all__ = ["ScienceWorldEnv"]

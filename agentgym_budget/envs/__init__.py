"""Text environments (one backend per subpackage) and the contract they share (``base``)."""

from agentgym_budget.envs.base import TextEnv

__all__ = ["TextEnv"]

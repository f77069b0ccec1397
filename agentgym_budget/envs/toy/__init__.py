"""Toy text environments: tiny, fast, pure-Python task families for tests and learning checks."""

from agentgym_budget.envs.toy.key_door import KeyDoorEnv

__all__ = ["KeyDoorEnv"]

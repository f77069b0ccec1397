"""Toy text environments: tiny, fast, pure-Python task families for tests and learning checks."""

from agentgym_budget.envs.toy.key_door import KeyDoorEnv
from agentgym_budget.envs.toy.key_door_rooms import KeyDoorRoomsEnv

__all__ = ["KeyDoorEnv", "KeyDoorRoomsEnv"]

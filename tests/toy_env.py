"""A tiny, deterministic TextEnv used by the core tests (independent of every backend)."""

from __future__ import annotations

from typing import Any

from agentgym_budget.envs.base import INVALID_ACTION_FEEDBACK, TextEnv


class CorridorEnv(TextEnv):
    """Walk ``length`` steps east to win; ``"fall"`` loses (terminates); anything else: nothing happens.

    The corridor length is drawn from ``np_random`` at reset, so seeding matters.
    """

    def __init__(self, min_length: int = 3, max_length: int = 8, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        self.min_length, self.max_length = min_length, max_length
        self.length = min_length
        self.position = 0

    def _info(self, won: bool = False, lost: bool = False) -> dict[str, Any]:
        return {
            "admissible_commands": ["go east", "go west", "look"],
            "won": won,
            "lost": lost,
            "task": f"walk {self.length} steps east",
            "expert_action": "go east",
            "expert_plan": ["go east"] * (self.length - self.position),
        }

    def _reset_game(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.length = int(options.get("task", self.np_random.integers(self.min_length, self.max_length + 1)))
        self.position = 0
        return f"You are at the west end of a corridor of length {self.length}.", self._info()

    def _step_game(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        command = action.strip()
        if command == "fall":
            return "You fall into a pit.", 0.0, True, self._info(lost=True)
        if command == "go east":
            self.position += 1
        elif command == "go west" and self.position > 0:
            self.position -= 1
        elif command != "look":
            return INVALID_ACTION_FEEDBACK, 0.0, False, self._info()
        won = self.position >= self.length
        return f"You are at position {self.position}.", float(won), won, self._info(won=won)

"""Small deterministic text envs for the integration tests (process reward, SB3, vector envs), and a fault injector."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agentgym_budget.envs.base import INVALID_ACTION_FEEDBACK, TextEnv


class LineWorld(TextEnv):
    """Walk ``length`` squares forward to win; ``"jump"`` loses; checkpoints every 2 squares.

    Commands: ``forward``, ``back``, ``wait`` (admissible) and ``jump`` (admissible only
    at square 1, where it loses).  ``info["subgoals"]`` (when ``report_subgoals``) lists the
    checkpoint reached by this turn.  The length is drawn at reset from ``np_random``.
    """

    max_observation_length = 256
    max_action_length = 32

    def __init__(self, min_length: int = 3, max_length: int = 6, report_subgoals: bool = False,
                 render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        self.min_length, self.max_length = min_length, max_length
        self.report_subgoals = report_subgoals
        self.length = min_length
        self.position = 0

    def _info(self, won: bool = False, lost: bool = False, subgoals: tuple[str, ...] = ()) -> dict[str, Any]:
        commands = ["back", "forward", "wait"] + (["jump"] if self.position == 1 else [])
        info = {
            "admissible_commands": commands,
            "won": won,
            "lost": lost,
            "task": f"walk {self.length} squares forward",
            "expert_action": "forward",
            "expert_plan": ["forward"] * (self.length - self.position),
        }
        if self.report_subgoals:
            info["subgoals"] = list(subgoals)
        return info

    def _reset_game(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.length = int(options.get("task", self.np_random.integers(self.min_length, self.max_length + 1)))
        self.position = 0
        return f"You stand on square 0 of {self.length}.", self._info()

    def _step_game(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        command = action.strip()
        if command == "jump" and self.position == 1:
            return "You jump into a pit.", 0.0, True, self._info(lost=True)
        if command == "forward":
            self.position += 1
        elif command == "back" and self.position > 0:
            self.position -= 1
        elif command != "wait":
            return INVALID_ACTION_FEEDBACK, 0.0, False, self._info()
        won = self.position >= self.length
        checkpoint = (f"checkpoint {self.position}",) if command == "forward" and self.position % 2 == 0 else ()
        return f"You stand on square {self.position}.", float(won), won, self._info(won=won, subgoals=checkpoint)


class FaultyEnv(gym.Wrapper):
    """Raises in ``step`` number ``turn`` (``reset`` when 0) of episodes reset with a seed in ``seeds``.

    ``budget`` (class-wide) is how many raises are left across every instance (``None``: always raise).
    ``instances`` (class-wide) are the instances that may raise, by the ``made`` count at their making
    (``None``: every one), to fail one episode of a group whose episodes share a seed.
    ``made`` and ``closed`` count instances made and closed; a closed one refuses to play (raises).
    """

    seeds: set[int] = set()
    turn = 1
    budget: int | None = None
    instances: set[int] | None = None
    made = 0
    closed = 0

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._ordinal = FaultyEnv.made
        FaultyEnv.made += 1
        self._seed: int | None = None
        self._turn = 0
        self._closed = False

    def _maybe_raise(self) -> None:
        if self._closed:
            raise RuntimeError("a closed env was played")
        chosen = FaultyEnv.instances is None or self._ordinal in FaultyEnv.instances
        if chosen and self._seed in FaultyEnv.seeds and self._turn == FaultyEnv.turn and FaultyEnv.budget != 0:
            if FaultyEnv.budget is not None:
                FaultyEnv.budget -= 1
            raise ConnectionError(f"backend lost at turn {self._turn}")

    def reset(self, *, seed=None, options=None):
        self._seed, self._turn = seed, 0
        self._maybe_raise()
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self._turn += 1
        self._maybe_raise()
        return self.env.step(action)

    def close(self):
        FaultyEnv.closed += 1
        self._closed = True
        super().close()

    @staticmethod
    def isolated(monkeypatch) -> type[FaultyEnv]:
        """``FaultyEnv`` with its class-wide settings at their defaults for one test (restored after it)."""
        for name, value in (("seeds", set()), ("turn", 1), ("budget", None), ("instances", None), ("made", 0),
                            ("closed", 0)):
            monkeypatch.setattr(FaultyEnv, name, value)
        return FaultyEnv

"""The real ALFWorld engine with upstream's own ``AlfredExpert(handcoded)`` on top: the expert's reference.

Upstream builds its env as ``PddlEnv`` wrapped in ``AlfredDemangler`` and ``AlfredExpert``
(``alfworld/agents/environment/alfred_tw_env.py``); the expert's next action is
``state["extra.expert_plan"][0]``.  ``AlfredExpert`` reads the game's ``traj_data.json`` next
to its ``game.tw-pddl`` (the task parameters), so each game is written to a temporary folder.
Its handcoded expert draws from the module-global ``random``; :meth:`UpstreamExpertEngine.seed_expert`
swaps in a ``random.Random(seed)`` so it draws exactly what a port seeded alike draws.

Where upstream's wrapper raises (its expert timed out, ran out of subgoals or chose from an
empty list), an upstream run ends; :attr:`UpstreamExpertEngine.expert_error` holds the error
and :attr:`UpstreamExpertEngine.expert_action` is ``None`` from then on.

Example (needs the ``alfworld`` extra):
    >>> from agentgym_budget.envs.alfworld.game import load_games
    >>> engine = UpstreamExpertEngine()
    >>> engine.seed_expert(0)
    >>> game = min(load_games("valid_seen", task_types=[1]), key=lambda g: len(g.pddl_problem))
    >>> engine.reset(game).observation.splitlines()[0], engine.expert_action
    ('-= Welcome to TextWorld, ALFRED! =-', 'look')
    >>> engine.step("look").observation.startswith("You are in the middle of a room."), engine.expert_action
    (True, 'go to dresser 1')
    >>> engine.step("").observation, engine.expert_action  # an empty command: AlfredExpert says "look"
    ('Nothing happens.', 'look')
    >>> engine.close()
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from agentgym_budget.envs.alfworld.engine import EngineStep
from agentgym_budget.envs.alfworld.game import AlfredGame

__all__ = ["UpstreamExpertEngine", "replay"]


class UpstreamExpertEngine:
    """An :class:`~agentgym_budget.envs.alfworld.engine.AlfredEngine` that also reports upstream's expert action."""

    def __init__(self) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert
        from textworld.envs.pddl import PddlEnv

        infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=True, extras=["expert_plan"])
        self._env = AlfredExpert(expert_type="handcoded")(AlfredDemangler(shuffle=False)(PddlEnv(infos)))
        self._folder = tempfile.TemporaryDirectory(prefix="alfworld-upstream-")
        self._game: AlfredGame | None = None
        #: ``extra.expert_plan[0]`` after the last reset/step; ``None`` once upstream's expert raised.
        self.expert_action: str | None = None
        self.expert_error: str | None = None

    @staticmethod
    def seed_expert(seed: int) -> None:
        """Make upstream's handcoded expert draw from ``random.Random(seed)`` (it uses the global ``random``)."""
        import alfworld.agents.expert.handcoded_expert as handcoded

        handcoded.random = random.Random(seed)

    def reset(self, game: AlfredGame) -> EngineStep:
        if game != self._game:
            self._env.load(self._write(game))
            self._game = game
        self.expert_error = None
        return self._record(self._env.reset())

    def step(self, command: str) -> EngineStep:
        if self._game is None:
            raise RuntimeError("UpstreamExpertEngine.step() called before reset()")
        try:
            state, _, _ = self._env.step(command)
        except Exception as error:  # noqa: BLE001 - upstream's wrapper raises after stepping the game
            self.expert_error = f"{type(error).__name__}: {error}"
            state = self._env.state
        return self._record(state)

    def close(self) -> None:
        self._env.close()
        self._folder.cleanup()
        self._game = None

    def _write(self, game: AlfredGame) -> str:
        """``game.tw-pddl`` + ``traj_data.json`` (what ``HandCodedAgent.reset`` reads) in a fresh folder."""
        folder = Path(self._folder.name) / f"game{len(list(Path(self._folder.name).iterdir()))}"
        folder.mkdir()
        params = {key: value for key, value in game.task_params.items() if key != "task_type"}
        traj = {"task_type": game.task_type, "pddl_params": {**params, "mrecep_target": "", "object_sliced": False}}
        (folder / "traj_data.json").write_text(json.dumps(traj), encoding="utf-8")
        (folder / "game.tw-pddl").write_text(json.dumps(game.to_tw_pddl()), encoding="utf-8")
        return str(folder / "game.tw-pddl")

    def _record(self, state: Any) -> EngineStep:
        self.expert_action = None if self.expert_error else state["extra.expert_plan"][0]
        return EngineStep(state["feedback"], list(state["admissible_commands"]), bool(state["won"]))


def replay(game: AlfredGame, expert_seed: int, commands: list[str]) -> dict[str, Any]:
    """Upstream's expert action (``None`` once it raised) and the observation after ``commands``,
    played from a reset with the expert seeded by ``expert_seed`` (as the differential seeds it)."""
    from agentgym_budget.envs.alfworld.textworld_engine import memoize_textworld_parsers

    memoize_textworld_parsers()  # same output, several times faster
    engine = UpstreamExpertEngine()
    try:
        step = engine.reset(game)
        engine.seed_expert(expert_seed)  # after the reset, as compare_episode does (the reset draws nothing)
        for command in commands:
            step = engine.step(command)
        return {"expert_action": engine.expert_action, "observation": step.observation}
    finally:
        engine.close()


if __name__ == "__main__":
    # {"game": AlfredGame.to_record(), "expert_seed": int, "commands": [...]} on stdin -> replay() as JSON on
    # stdout: the differential runs this under another PYTHONHASHSEED (tools/alfworld/differential.py).
    job = json.load(sys.stdin)
    print(json.dumps(replay(AlfredGame.from_record(job["game"]), int(job["expert_seed"]), list(job["commands"]))))

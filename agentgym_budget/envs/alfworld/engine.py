"""The engine interface the ALFWorld env drives: the real engine and the fast one both implement it.

An engine plays one :class:`~agentgym_budget.envs.alfworld.game.AlfredGame` at a time and
returns exactly what upstream ALFWorld's TextWorld engine returns (with ``AlfredDemangler``
naming): the feedback text, the sorted admissible commands, and ``won``.  At reset the
observation is the intro, e.g. ``"-= Welcome to TextWorld, ALFRED! =-\\n\\nYou are in the
middle of a room. ... \\n\\nYour task is to: put a apple in fridge."``; an inadmissible
command gives ``"Nothing happens."`` and leaves the state unchanged.

Engines:

* ``"textworld"`` — :class:`~agentgym_budget.envs.alfworld.textworld_engine.TextWorldAlfredEngine`,
  the real engine (TextWorld ``PddlEnv`` + Fast Downward; extra ``alfworld``); ~8 steps/s.
* ``"fast"`` — ``agentgym_budget.envs.alfworld.fast.FastAlfredEngine``, a pure-Python engine
  that is step-for-step identical to the real one.

Example:
    >>> from agentgym_budget.envs.alfworld.engine import make_engine
    >>> from agentgym_budget.envs.alfworld.game import load_games
    >>> engine = make_engine("fast")
    >>> first = engine.reset(load_games("valid_seen")[0])
    >>> first.observation.startswith("-= Welcome to TextWorld, ALFRED! =-")
    True
    >>> engine.step("dance").observation
    'Nothing happens.'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agentgym_budget.envs.alfworld.game import AlfredGame

__all__ = ["ENGINES", "AlfredEngine", "CloneableAlfredEngine", "EngineStep", "make_engine"]


@dataclass(frozen=True)
class EngineStep:
    """What an engine returns after ``reset`` or ``step``.

    Attributes:
        observation: the engine's feedback text, verbatim.
        admissible_commands: the commands applicable now, as the real engine lists them
            (``sorted(set(...))``, plain string order: ``"cabinet 10" < "cabinet 2"``).
        won: whether the goal holds in the current state.
    """

    observation: str
    admissible_commands: list[str]
    won: bool


@runtime_checkable
class AlfredEngine(Protocol):
    """An ALFWorld game engine (one game at a time, reusable across games)."""

    def reset(self, game: AlfredGame) -> EngineStep:
        """Load ``game`` (if it is not the loaded one) and start it from its initial state."""
        ...

    def step(self, command: str) -> EngineStep:
        """Apply ``command`` (exact admissible string after ``strip()``; anything else: ``"Nothing happens."``)."""
        ...

    def close(self) -> None:
        """Release resources (idempotent)."""
        ...


@runtime_checkable
class CloneableAlfredEngine(AlfredEngine, Protocol):
    """An engine whose current state can be copied cheaply (used to roll the expert forward
    to compute ``expert_plan``).  The clone is independent: stepping it never changes the original."""

    def clone(self) -> CloneableAlfredEngine: ...


#: Engine names accepted by :func:`make_engine` -> ``"module:Class"``.
ENGINES: dict[str, str] = {
    "fast": "agentgym_budget.envs.alfworld.fast:FastAlfredEngine",
    "textworld": "agentgym_budget.envs.alfworld.textworld_engine:TextWorldAlfredEngine",
}


def make_engine(name: str) -> AlfredEngine:
    """Build the engine called ``name`` (``"fast"`` or ``"textworld"``), importing it lazily."""
    if name not in ENGINES:
        raise ValueError(f"unknown ALFWorld engine {name!r}; expected one of {sorted(ENGINES)}")
    import importlib

    module_name, class_name = ENGINES[name].split(":")
    engine_class = getattr(importlib.import_module(module_name), class_name)
    return engine_class()

"""The real ALFWorld engine: TextWorld's ``PddlEnv`` (Fast Downward) with ALFWorld's naming.

This is the engine upstream ALFWorld's ``AlfredTWEnv`` runs: ``PddlEnv`` wrapped in
``AlfredDemangler`` (``shuffle=False``, as for evaluation), asked for ``won`` and
``admissible_commands``.  It needs the ``alfworld`` extra (``alfworld`` + ``textworld[pddl]``,
which builds Fast Downward) and runs about 8 steps/s; loading and resetting a game translates
the PDDL problem with Fast Downward (about 1 s).

Example:
    >>> from agentgym_budget.envs.alfworld.game import load_games
    >>> from agentgym_budget.envs.alfworld.textworld_engine import TextWorldAlfredEngine
    >>> engine = TextWorldAlfredEngine()
    >>> first = engine.reset(load_games("valid_seen")[0])
    >>> first.observation.splitlines()[0]
    '-= Welcome to TextWorld, ALFRED! =-'
    >>> engine.step("look around").observation
    'Nothing happens.'
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.envs.alfworld.engine import EngineStep
from agentgym_budget.envs.alfworld.game import AlfredGame
from agentgym_budget.envs.textworld.parser_lock import TEXTWORLD_LOCK  # they are not thread-safe

__all__ = ["TextWorldAlfredEngine", "memoize_textworld_parsers"]

_WHAT = "ALFWorld's real engine (engine='textworld')"


#: TextWorld modules whose ``_parse_and_convert`` (a TatSu parse of a grammar or logic string)
#: dominates the real engine's step: each step re-parses the same few hundred strings.
_PARSER_MODULES = ("textworld.logic", "textworld.envs.pddl.textgen", "textworld.envs.pddl.logic")



def memoize_textworld_parsers() -> None:
    """Cache TextWorld's string parsers in this process (idempotent); the engine's output is unchanged.

    The parsers are pure functions of their arguments; each call gets a deep copy of the
    cached result because TextWorld mutates what they return (it sets symbol contexts).  This
    makes the real engine several times faster and is what ``benchmarks/alfworld_equivalence.py``
    uses by default (``--no-memo`` turns it off); ``tests/test_alfworld_fast_equivalence.py``
    pins that transcripts are identical with and without it.
    """
    import importlib

    for name in _PARSER_MODULES:
        module: Any = importlib.import_module(name)  # Any: the parser is assigned, not only read
        if not getattr(module._parse_and_convert, "_agentgym_memoized", False):
            module._parse_and_convert = _memoized(module._parse_and_convert)


def _memoized(parse: Callable[..., Any]) -> Callable[..., Any]:
    @functools.lru_cache(maxsize=None)
    def cached(*args: Any, **kwargs: Any) -> Any:
        return parse(*args, **kwargs)

    @functools.wraps(parse)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return copy.deepcopy(cached(*args, **kwargs))

    wrapper._agentgym_memoized = True  # type: ignore[attr-defined]
    return wrapper


class TextWorldAlfredEngine:
    """:class:`~agentgym_budget.envs.alfworld.engine.AlfredEngine` backed by TextWorld's ``PddlEnv``.

    Args:
        facts: also request the PDDL facts (``last_state["facts"]``), which upstream's
            handcoded expert reads; off by default because it costs time.
    """

    def __init__(self, *, facts: bool = False) -> None:
        textworld = require("textworld", "alfworld", _WHAT)
        require("fast_downward", "alfworld", _WHAT)
        require("alfworld", "alfworld", _WHAT)
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs.pddl import PddlEnv

        self.request_infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=facts)
        self._env = AlfredDemangler(shuffle=False)(PddlEnv(self.request_infos))
        self._game: AlfredGame | None = None
        #: The last TextWorld ``GameState`` (for checks against upstream code).
        self.last_state: Any = None

    def reset(self, game: AlfredGame) -> EngineStep:
        with TEXTWORLD_LOCK:
            if game != self._game:
                self._env.load(game.to_tw_pddl())  # PddlEnv.load takes the game dict as well as a path
                self._game = game
            return self._record(self._env.reset())

    def step(self, command: str) -> EngineStep:
        if self._game is None:
            raise RuntimeError("TextWorldAlfredEngine.step() called before reset()")
        with TEXTWORLD_LOCK:
            state, _, _ = self._env.step(command)
        return self._record(state)

    def close(self) -> None:
        with TEXTWORLD_LOCK:
            self._env.close()
        self._game = None

    def _record(self, state: Any) -> EngineStep:
        self.last_state = state
        return EngineStep(
            observation=state["feedback"],
            admissible_commands=list(state["admissible_commands"]),
            won=bool(state["won"]),
        )

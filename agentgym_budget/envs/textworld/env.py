"""TextWorld games as :class:`~agentgym_budget.envs.base.TextEnv` environments.

* :class:`TextWorldEnv` (``TextWorld-v0``) plays TextWorld-made game files: a ``.z8`` with
  the ``.json`` TextWorld writes next to it (``.ulx`` only on TextWorld < 1.7, which dropped
  Glulx).  ``game_file=`` takes a path, a directory (every game in it) or a list; without one
  it plays a shipped Treasure Hunter game.
* :class:`TextWorldChallengeEnv` (``TextWorld-Cooking-v0``, ``TextWorld-CoinCollector-v0``,
  ``TextWorld-TreasureHunter-v0``) plays a pool of ``n_games`` games that TextWorld's own
  generators make for a difficulty level and split, cached on disk
  (:mod:`agentgym_budget.envs.textworld.games`, levels in
  :mod:`agentgym_budget.envs.textworld.challenges`).

Both run the real TextWorld engine (``textworld.start``) with ``textworld.EnvInfos`` asking
for admissible commands, won / lost, the objective, the score and ``policy_commands``, and:

* ``reward`` is the change in the game's score this step (TextWorld reports the *cumulative*
  score); ``info["score"]`` / ``info["max_score"]`` give the totals and
  ``info["intermediate_reward"]`` TextWorld's dense progress signal (+1 / 0 / -1);
* ``terminated`` is ``won or lost``; step limits are left to ``TimeLimit`` / ``TurnBudget``;
* ``info["expert_plan"]`` is TextWorld's ``policy_commands``, re-planned from the current
  state every step (so it stays valid after the agent deviates); ``info["expert_action"]``
  is its first command, ``None`` once the game is over; ``info["expert_plan_length"]`` its
  length (0 once won, ``None`` once lost);
* ``info["action_effect"]`` comes from the engine: ``invalid`` when Inform 7 carried nothing
  out (its move counter did not advance: unknown verb, "You can't go that way", a refused
  command), ``no_effect`` when the game's logical facts did not change (``look``, ``examine``),
  else by win/loss, plan length and score;
* one action is one command: several commands in one string and Inform 7's out-of-world
  verbs (``restart``, ``quit``, ``superbrief``...) are refused in-game without reaching the
  engine (see :mod:`agentgym_budget.envs.textworld.commands`); any other string is played;
* the ASCII-art "TextWorld" banner is removed from the first observation
  (``strip_banner=False`` keeps it).

The episode's game is drawn from ``self.np_random`` (same seed, same game) or chosen with
``reset(options={"task": i})`` (an index into the pool, or for ``TextWorld-v0`` also a path).

Example:
    >>> import gymnasium as gym
    >>> import agentgym_budget
    >>> env = gym.make("TextWorld-CoinCollector-v0")
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(info["expert_action"])
    >>> obs, reward, terminated, truncated, info = env.step("restart")
    >>> obs
    'The command "restart" is not available in this game.'
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentgym_budget._optional import require
from agentgym_budget.envs.base import INVALID_ACTION_FEEDBACK, TextEnv, action_effect
from agentgym_budget.envs.textworld.challenges import CHALLENGES
from agentgym_budget.envs.textworld.commands import refusal, to_engine
from agentgym_budget.envs.textworld.games import BUNDLED_SEEDS, ensure_game, game_seed
from agentgym_budget.envs.textworld.parser_lock import TEXTWORLD_LOCK

__all__ = ["TextWorldChallengeEnv", "TextWorldEnv"]

_EXTRA = "textworld"
_GAME_SUFFIXES = (".z8", ".ulx")
_JERICHO_NOISE = "Unable to find valid actions in an unsupported game"
_INFO_FIELDS = (
    "admissible_commands", "won", "lost", "policy_commands", "intermediate_reward", "objective", "score", "max_score",
    "moves",  # Inform 7's turn counter, for info["action_effect"]
)  # fmt: skip


def request_infos() -> Any:
    """The ``textworld.EnvInfos`` every agentgym_budget TextWorld env asks for."""
    textworld = require("textworld", _EXTRA, "TextWorld environments")
    return textworld.EnvInfos(**{name: True for name in _INFO_FIELDS})


def _silence_jericho_warning() -> None:
    """Ignore Jericho's per-step "Unable to find valid actions in an unsupported game".

    TextWorld asks Jericho for its valid actions on every step of a ``tw-`` game, then
    replaces them with its own admissible commands; Jericho has no action generator for
    TextWorld games, so it warns and returns nothing.  The warning is not about the admissible
    commands we report (TextWorld's).  A filter for exactly that message from Jericho, rather
    than ``catch_warnings`` around each step, which costs more than the rest of our step.
    """
    warnings.filterwarnings("ignore", message=_JERICHO_NOISE, module="jericho")


def _facts(state: Any) -> frozenset[Any] | None:
    """The game's logical state: the propositions TextWorld keeps in ``state["_facts"]`` (it
    computes them for ``policy_commands`` anyway; requesting ``facts`` would also render each
    one as text, +30-55 % per step).  ``None`` if this TextWorld version does not keep them."""
    facts = state.get("_facts")
    return None if facts is None else frozenset(facts)


def strip_banner(text: str) -> str:
    """Drop the leading lines without a letter or digit (TextWorld's ASCII-art title)."""
    lines = text.split("\n")
    start = 0
    while start < len(lines) and not any(c.isalnum() for c in lines[start]):
        start += 1
    return "\n".join(lines[start:])


class _TextWorldGames(TextEnv):
    """The engine, the step semantics and the info dict shared by both TextWorld envs.

    Subclasses say what the pool of games is: :attr:`n_games`, :meth:`_game` (its file) and
    :meth:`_task_id`, and may accept more ``task`` forms in :meth:`_select`.
    """

    def __init__(self, *, strip_banner: bool, render_mode: str | None) -> None:
        super().__init__(render_mode=render_mode)
        require("textworld", _EXTRA, type(self).__name__)
        self._strip_banner = strip_banner
        self._engine: Any = None
        self._engine_game: Path | None = None
        self._links: tempfile.TemporaryDirectory[str] | None = None
        self._state: Any = None
        self._score = 0
        self._game_index = 0
        self._over = False

    # -- the pool of games (subclasses) -------------------------------------------------
    @property
    def n_games(self) -> int:
        """How many games episodes are drawn from."""
        raise NotImplementedError

    def _game(self, index: int) -> Path:
        """The compiled game file of pool entry ``index``."""
        raise NotImplementedError

    def _task_id(self, index: int) -> str:
        raise NotImplementedError

    def _select(self, task: Any) -> int:
        """The pool index a ``reset(options={"task": ...})`` value names."""
        if isinstance(task, str) and task.isdigit():
            task = int(task)
        if isinstance(task, bool) or not isinstance(task, (int, np.integer)) or not 0 <= task < self.n_games:
            raise ValueError(f"task must be a game index in [0, {self.n_games}), got {task!r}")
        return int(task)

    # -- TextEnv hooks ------------------------------------------------------------------
    def _reset_game(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task = options.pop("task", None)
        if options:
            raise ValueError(f"{type(self).__name__} reset options are 'task', got {sorted(options)}")
        index = int(self.np_random.integers(self.n_games)) if task is None else self._select(task)
        self._game_index = index
        self._state = self._load(self._game(index)).reset()
        self._score = self._state["score"]
        self._over = False
        feedback = self._state.feedback or ""
        observation = strip_banner(feedback) if self._strip_banner else feedback
        return observation.strip(), self._info()

    def _step_game(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._over:
            return INVALID_ACTION_FEEDBACK, 0.0, True, self._info(effect="invalid")
        refused = refusal(action)
        if refused is not None:
            return refused, 0.0, False, self._info(effect="invalid")
        before, plan_before = self._state, self._plan_length()
        self._state, score, _ = self._engine.step(to_engine(action))
        reward, self._score = score - self._score, score
        self._over = bool(self._state["won"] or self._state["lost"])
        # Inform 7 counts a move only for a command it carried out; the facts are the game state.
        effect = action_effect(
            valid=self._state["moves"] != before["moves"] or self._over,
            changed=_facts(self._state) != _facts(before) or _facts(before) is None,  # unknown: assume it changed
            won=bool(self._state["won"]), lost=bool(self._state["lost"]), plan_before=plan_before,
            plan_after=self._plan_length(), score_delta=reward)
        return (self._state.feedback or "").strip(), float(reward), self._over, self._info(effect=effect)

    def _plan_length(self) -> int | None:
        """The length of TextWorld's plan from the current state (re-planned each step): 0 once won."""
        if self._state["won"]:
            return 0
        plan = self._state["policy_commands"]
        return None if self._over or plan is None else len(plan)

    def _info(self, effect: str | None = None) -> dict[str, Any]:
        state = self._state
        plan = [] if self._over else list(state["policy_commands"] or [])
        info = {
            "admissible_commands": list(state["admissible_commands"] or []),
            "won": bool(state["won"]),
            "lost": bool(state["lost"]),
            "task": state["objective"] or "",
            "task_id": self._task_id(self._game_index),
            "expert_action": plan[0] if plan else None,
            "expert_plan": plan,
            "expert_plan_length": self._plan_length(),
            "score": state["score"],
            "max_score": state["max_score"],
            "intermediate_reward": state["intermediate_reward"],
        }
        if effect is not None:
            info["action_effect"] = effect
        return info

    # -- engine lifecycle ---------------------------------------------------------------
    def _load(self, game: Path) -> Any:
        """The engine playing ``game``; reused while consecutive episodes play the same game."""
        if self._engine is None or self._engine_game != game:
            self._close_engine()
            textworld = require("textworld", _EXTRA, type(self).__name__)
            _silence_jericho_warning()
            with TEXTWORLD_LOCK:  # loading parses the game's logic with TextWorld's shared parser
                self._engine = textworld.start(str(self._tw_named(game)), request_infos=request_infos())
            self._engine_game = game
        return self._engine

    def _tw_named(self, game: Path) -> Path:
        """``game`` under a file name starting with ``tw-`` (a link in a private directory).

        Jericho only strips the prompt and the status line from a game's output when the
        file name starts with ``tw-``; TextWorld's own tools name their games that way.
        """
        if game.name.startswith("tw-"):
            return game
        if self._links is None:
            self._links = tempfile.TemporaryDirectory(prefix="agentgym_budget_tw_")
        linked = Path(self._links.name) / f"tw-{game.name}"
        for source, target in ((game.with_suffix(".json"), linked.with_suffix(".json")), (game, linked)):
            if not target.exists():
                try:
                    target.symlink_to(source)
                except OSError:  # no symlinks on this file system: copy
                    shutil.copyfile(source, target)
        return linked

    def _close_engine(self) -> None:
        if self._engine is not None:
            self._engine.close()
        self._engine = self._engine_game = None

    def close(self) -> None:
        self._close_engine()
        if self._links is not None:
            self._links.cleanup()
            self._links = None
        super().close()


class TextWorldEnv(_TextWorldGames):
    """TextWorld-made game files as a TextEnv (see the module docstring).

    Args:
        game_file: a game path, a directory of games, or a sequence of paths; ``None`` plays
            the shipped Treasure Hunter game (default level, seed 0).
        strip_banner: remove the ASCII-art title from the first observation.
        render_mode: ``"ansi"``, ``"human"`` or ``None``.
    """

    def __init__(
        self,
        game_file: str | Path | Sequence[str | Path] | None = None,
        *,
        strip_banner: bool = True,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(strip_banner=strip_banner, render_mode=render_mode)
        self._games: list[Path] = _resolve_games(game_file)

    @property
    def n_games(self) -> int:
        return len(self._games)

    def _game(self, index: int) -> Path:
        return self._games[index]

    def _task_id(self, index: int) -> str:
        return self._games[index].stem

    def _select(self, task: Any) -> int:
        if isinstance(task, Path) or (isinstance(task, str) and not task.isdigit()):
            path = Path(task).resolve()
            if path not in self._games:
                raise ValueError(f"task {str(task)!r} is not one of this env's games: {[str(g) for g in self._games]}")
            return self._games.index(path)
        return super()._select(task)


def _resolve_games(game_file: str | Path | Sequence[str | Path] | None) -> list[Path]:
    """The checked, absolute game paths ``game_file`` names (see :class:`TextWorldEnv`)."""
    if game_file is None:
        default = CHALLENGES["treasure_hunter"]
        return [ensure_game(default, default.settings(split="train"), game_seed("train", 0))]
    entries = [game_file] if isinstance(game_file, (str, Path)) else list(game_file)
    games: list[Path] = []
    for entry in map(Path, entries):
        if entry.is_dir():
            games += sorted(p for p in entry.iterdir() if p.suffix in _GAME_SUFFIXES)
        else:
            games.append(entry)
    if not games:
        raise ValueError(f"no TextWorld games (*.z8, *.ulx) found in {game_file!r}")
    for game in games:
        if not game.is_file():
            raise FileNotFoundError(f"TextWorld game file not found: {game}")
        if game.suffix not in _GAME_SUFFIXES:
            raise ValueError(f"{game} is not a TextWorld game: expected a .z8 or .ulx file")
        if not game.with_suffix(".json").is_file():
            raise ValueError(
                f"{game} has no {game.with_suffix('.json').name} next to it: TextWorld-v0 plays games "
                "made by TextWorld (tw-make / textworld.generator.compile_game write both files)"
            )
    return [g.resolve() for g in games]


class TextWorldChallengeEnv(_TextWorldGames):
    """A pool of games from one of TextWorld's challenge generators.

    Args:
        challenge: ``"cooking"``, ``"coin_collector"`` or ``"treasure_hunter"``.
        level: difficulty level (see :mod:`agentgym_budget.envs.textworld.challenges`);
            default: the challenge's default level.
        settings: explicit generator settings instead of ``level`` (tw-cooking skills).
        split: ``"train"``, ``"valid"`` or ``"test"``: which seed range (and, for tw-cooking,
            which food split) the games come from.
        n_games: pool size: games ``0 .. n_games - 1`` of the split.  The 4 train games of
            each default level ship with the package; other games are generated on first
            use and cached (:meth:`prepare` generates the whole pool up front).
        cache_dir: cache root (default: see :func:`~agentgym_budget.envs.textworld.games.default_cache_dir`).
        strip_banner, render_mode: as in :class:`TextWorldEnv`.
    """

    def __init__(
        self,
        challenge: str,
        *,
        level: int | None = None,
        settings: dict[str, Any] | None = None,
        split: str = "train",
        n_games: int = len(BUNDLED_SEEDS),
        cache_dir: str | Path | None = None,
        strip_banner: bool = True,
        render_mode: str | None = None,
    ) -> None:
        if challenge not in CHALLENGES:
            raise ValueError(f"unknown TextWorld challenge {challenge!r}; known: {sorted(CHALLENGES)}")
        if isinstance(n_games, bool) or not isinstance(n_games, int) or n_games < 1:
            raise ValueError(f"n_games must be a positive int, got {n_games!r}")
        self.challenge = CHALLENGES[challenge]
        self.settings = self.challenge.settings(level=level, split=split, settings=settings)
        self.split = split
        self._n_games = n_games
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        super().__init__(strip_banner=strip_banner, render_mode=render_mode)

    @property
    def n_games(self) -> int:
        return self._n_games

    def _game(self, index: int) -> Path:
        return ensure_game(self.challenge, self.settings, game_seed(self.split, index), self._cache_dir)

    def _task_id(self, index: int) -> str:
        return f"{self.split}-{index}"

    def prepare(self) -> list[Path]:
        """Generate (or unpack) every game of the pool now; returns their paths."""
        return [self._game(index) for index in range(self.n_games)]

"""TextWorld game files: generated offline with TextWorld's challenge generators, cached on disk.

A game is keyed by ``(challenge, settings, seed)`` and lives at::

    <cache>/textworld/tw-<textworld version>/<challenge>/<settings key>/tw-<challenge>-seed<seed>.z8  (+ .json)

where ``<cache>`` is ``$AGENTGYM_BUDGET_CACHE``, else ``$XDG_CACHE_HOME/agentgym_budget``,
else ``~/.cache/agentgym_budget``.  A missing game is generated (TextWorld's generator, then
its bundled Inform 7 compiler: about 1-10 s per game on one core) and written atomically, so
parallel workers may share a cache.  A few games of each challenge's default level ship in
``data/`` (:data:`BUNDLED_SEEDS`) and are unpacked into the cache instead of generated, so the
default env ids start instantly and offline even where compiling is slow.  The TextWorld
version is part of the path because another version may generate a different game from the
same seed.  File names start with ``tw-``: Jericho (TextWorld's Z-machine interpreter) only
treats a game as a TextWorld game, and strips the prompt and status line from its output,
when the file name does.

Example:
    >>> from agentgym_budget.envs.textworld.games import game_seed
    >>> game_seed("train", 3), game_seed("test", 3)
    (3, 2000003)
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.envs.textworld.challenges import SPLITS, Challenge, settings_key
from agentgym_budget.envs.textworld.parser_lock import TEXTWORLD_LOCK

__all__ = [
    "BUNDLED_SEEDS",
    "MAX_GAMES_PER_SPLIT",
    "bundle_name",
    "default_cache_dir",
    "ensure_game",
    "game_path",
    "game_seed",
    "textworld_version",
]

logger = logging.getLogger(__name__)

#: Games per split; split ``s`` uses generator seeds ``[k * MAX, (k + 1) * MAX)``, k = its index.
MAX_GAMES_PER_SPLIT: int = 1_000_000
#: Seeds of the pre-generated games shipped for each challenge's default level (train split).
BUNDLED_SEEDS: range = range(4)
#: The TextWorld version the bundled games were generated with.
BUNDLED_TEXTWORLD_VERSION: str = "1.7.0"


def default_cache_dir() -> Path:
    """Root of agentgym_budget's on-disk cache (see the module docstring)."""
    if os.environ.get("AGENTGYM_BUDGET_CACHE"):
        return Path(os.environ["AGENTGYM_BUDGET_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "agentgym_budget"


def textworld_version() -> str:
    """The installed TextWorld version (raises MissingBackendError when it is not installed)."""
    return require("textworld", "textworld", "TextWorld games").__version__


def game_seed(split: str, index: int) -> int:
    """The generator seed of game ``index`` of ``split`` (splits use disjoint seed ranges)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not 0 <= index < MAX_GAMES_PER_SPLIT:
        raise ValueError(f"game index must be in [0, {MAX_GAMES_PER_SPLIT}), got {index}")
    return SPLITS.index(split) * MAX_GAMES_PER_SPLIT + index


def game_path(challenge: Challenge, settings: Mapping[str, Any], seed: int, cache_dir: Path | None = None) -> Path:
    """Where the compiled game for ``(challenge, settings, seed)`` lives in the cache."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / "textworld" / f"tw-{textworld_version()}" / challenge.name / settings_key(settings)
    return folder / _file_name(challenge, seed)


def _file_name(challenge: Challenge, seed: int) -> str:
    return f"tw-{challenge.name}-seed{seed}.z8"


def bundle_name(challenge: Challenge, settings: Mapping[str, Any]) -> str:
    """File name, inside ``data/``, of the shipped games for these settings."""
    return f"{challenge.name}-{settings_key(settings)}.tar.gz"


def ensure_game(
    challenge: Challenge,
    settings: Mapping[str, Any],
    seed: int,
    cache_dir: Path | None = None,
    *,
    bundled: bool = True,
) -> Path:
    """The path of the compiled game, unpacking (``bundled=True``) or generating it first when
    it is not cached."""
    path = game_path(challenge, settings, seed, cache_dir)
    if _complete(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    if not (bundled and _unpack_bundled(challenge, settings, seed, path)):
        _generate(challenge, settings, seed, path)
    return path


def _complete(path: Path) -> bool:
    return path.is_file() and path.with_suffix(".json").is_file()


def _unpack_bundled(challenge: Challenge, settings: Mapping[str, Any], seed: int, path: Path) -> bool:
    if seed not in BUNDLED_SEEDS or textworld_version() != BUNDLED_TEXTWORLD_VERSION:
        return False
    bundle = resources.files("agentgym_budget.envs.textworld") / "data" / bundle_name(challenge, settings)
    if not bundle.is_file():
        return False
    members = [path.with_suffix(".json").name, path.name]  # the .z8 last: it marks the game complete
    with resources.as_file(bundle) as bundle_path, tarfile.open(bundle_path, "r:gz") as archive:
        names = set(archive.getnames())
        if not set(members) <= names:
            return False
        for member in members:
            source = archive.extractfile(member)
            assert source is not None  # a regular file, checked by getnames above
            _write_atomically(path.with_name(member), source.read())
    return True


def _write_atomically(target: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, target)


def _generate(challenge: Challenge, settings: Mapping[str, Any], seed: int, path: Path) -> None:
    """Run TextWorld's generator for ``challenge`` and compile the game to ``path``."""
    textworld = require("textworld", "textworld", "generating TextWorld games")
    from textworld.challenges import CHALLENGES as TW_CHALLENGES
    from textworld.generator import compile_game

    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(dir=path.parent, prefix=".generating-"))
    try:
        options = textworld.GameOptions()
        options.seeds = seed
        options.path = str(workdir / path.name)
        options.file_ext = ".z8"
        make_game = TW_CHALLENGES[challenge.generator][1]
        with TEXTWORLD_LOCK:  # the generator parses rules and logic with TextWorld's shared parsers
            game = make_game(settings=dict(settings), options=options)
            compiled = Path(compile_game(game, options))
        os.replace(compiled.with_suffix(".json"), path.with_suffix(".json"))
        os.replace(compiled, path)  # last: a .z8 in the cache means the pair is complete
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(workdir)
    logger.info("generated %s in %.1f s", path, time.perf_counter() - started)

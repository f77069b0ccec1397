"""TextWorld's challenge generators and the difficulty levels we expose for each.

Pure data and validation (no ``textworld`` import): a :class:`Challenge` names one of
TextWorld's own generators (``tw-make <name>``) and maps a difficulty ``level`` to that
generator's settings.

* ``tw-coin_collector`` — TextWorld's own levels 1-300: the quest length is
  ``(level - 1) % 100 + 1`` rooms; levels 101-200 add distractor rooms along the chain,
  201-300 add them at random (see ``textworld.challenges.coin_collector.make``). TextWorld
  1.7 caps games at 100 rooms, so levels whose room count exceeds 100 fail to generate.
* ``tw-treasure_hunter`` — TextWorld's own levels 1-30: 1-10 easy (5 rooms, no doors),
  11-20 medium (10 rooms, closed doors and containers), 21-30 hard (20 rooms, locked doors
  and containers); the quest length grows with the level inside each band.
* ``tw-cooking`` — the generator of the First TextWorld Problems competition has skills, not
  levels; :data:`COOKING_LEVELS` is our ladder of ten skill sets of increasing difficulty
  (more rooms, then cooking and cutting, then three-ingredient recipes).  Any skill set can
  be passed directly as ``settings=``.

Example:
    >>> from agentgym_budget.envs.textworld.challenges import CHALLENGES
    >>> cooking = CHALLENGES["cooking"].settings(level=2, split="train")
    >>> {k: v for k, v in cooking.items() if v}
    {'recipe': 1, 'take': 1, 'go': 1, 'open': True, 'cook': True, 'split': 'train'}
    >>> CHALLENGES["coin_collector"].settings(level=5, split="train")
    {'level': 5}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CHALLENGES", "COOKING_LEVELS", "SPLITS", "Challenge", "settings_key"]

#: Game splits. Each split draws its games from its own range of generator seeds (and, for
#: tw-cooking, from the generator's own food split), so train and test games never coincide.
SPLITS: tuple[str, ...] = ("train", "valid", "test")

_COOKING_BASE: dict[str, Any] = {
    "recipe": 1, "take": 1, "go": 1, "open": True, "cook": False, "cut": False, "drop": False, "recipe_seed": 0,
}  # fmt: skip

#: Our tw-cooking ladder: level -> skills on top of ``recipe=1, take=1, go=1, open`` (see module doc).
COOKING_LEVELS: dict[int, dict[str, Any]] = {
    1: {},
    2: {"cook": True},
    3: {"cut": True},
    4: {"go": 6},
    5: {"go": 9},
    6: {"go": 12},
    7: {"cook": True, "cut": True},
    8: {"recipe": 3, "take": 3, "go": 6},
    9: {"recipe": 3, "take": 3, "go": 6, "cook": True, "cut": True},
    10: {"recipe": 3, "take": 3, "go": 12, "cook": True, "cut": True},
}

_COOKING_KEYS = frozenset(_COOKING_BASE)


@dataclass(frozen=True)
class Challenge:
    """One TextWorld challenge generator and its difficulty levels."""

    name: str  # our short name, used in env ids and cache paths
    generator: str  # TextWorld's challenge name (``tw-make <generator>``)
    levels: range
    default_level: int

    def settings(
        self, level: int | None = None, split: str = "train", settings: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The generator settings for ``level`` (or explicit ``settings``) in ``split``."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if settings is not None:
            if level is not None:
                raise ValueError("pass either level= or settings=, not both")
            return self._checked_settings(dict(settings), split)
        level = self.default_level if level is None else level
        if isinstance(level, bool) or not isinstance(level, int) or level not in self.levels:
            raise ValueError(
                f"{self.name} level must be an int in [{self.levels.start}, {self.levels.stop - 1}], got {level!r}"
            )
        if self.generator == "tw-cooking":
            return {**_COOKING_BASE, **COOKING_LEVELS[level], "split": split}
        return {"level": level}

    def _checked_settings(self, settings: dict[str, Any], split: str) -> dict[str, Any]:
        if self.generator != "tw-cooking":
            if set(settings) != {"level"}:
                raise ValueError(f"{self.name} settings are {{'level': int}}, got {settings!r}")
            return self.settings(level=settings["level"], split=split)
        unknown = set(settings) - _COOKING_KEYS
        if unknown:
            raise ValueError(f"unknown tw-cooking settings {sorted(unknown)}; known: {sorted(_COOKING_KEYS)}")
        full = {**_COOKING_BASE, **settings, "split": split}
        if full["go"] not in (1, 6, 9, 12):
            raise ValueError(f"tw-cooking 'go' (number of rooms) must be 1, 6, 9 or 12, got {full['go']!r}")
        if not 1 <= full["take"] <= full["recipe"]:
            raise ValueError(f"tw-cooking needs 1 <= take <= recipe, got take={full['take']}, recipe={full['recipe']}")
        return full


CHALLENGES: dict[str, Challenge] = {
    "cooking": Challenge("cooking", "tw-cooking", range(1, 11), default_level=1),
    "coin_collector": Challenge("coin_collector", "tw-coin_collector", range(1, 301), default_level=5),
    "treasure_hunter": Challenge("treasure_hunter", "tw-treasure_hunter", range(1, 31), default_level=5),
}


def settings_key(settings: Mapping[str, Any]) -> str:
    """A readable, filename-safe key for generator settings (``recipe1+take1+go1+open+train``).

    Booleans appear by name when true, ``split`` by value, other settings as ``name<value>``.
    """
    parts = []
    for name in sorted(k for k in settings if k != "split"):
        value = settings[name]
        if value is True:
            parts.append(name)
        elif value is not False and value is not None:
            parts.append(f"{name}{value}")
    if settings.get("split"):
        parts.append(str(settings["split"]))
    return "+".join(parts)

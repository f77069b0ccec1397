"""Differential testing: drive two ALFWorld engines with the same commands and compare every step.

Used by ``tests/test_alfworld_fast_equivalence.py`` (a small sample) and
``benchmarks/alfworld_equivalence.py`` (everything that fits in the time given).  Each
episode plays the game's walkthrough when it has one (the expert's commands), then a random
mix of admissible commands (biased away from ``go to`` so objects get moved, heated,
sliced, ...) and inadmissible strings (other objects' commands, wrong case, extra words,
gibberish, padding whitespace).  At every step the observation, the admissible commands
(order included) and ``won`` (hence the reward, ``1.0`` iff won) must be identical.

Example:
    >>> import random
    >>> from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
    >>> from agentgym_budget.envs.alfworld.fast.fuzz import fuzz_game
    >>> game = fuzz_game(random.Random(0))
    >>> report = compare_episode(FastAlfredEngine(), FastAlfredEngine(), game, random.Random(0), steps=20)
    >>> report.steps, report.mismatches
    (21, [])
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym_budget.envs.alfworld.engine import AlfredEngine, EngineStep

__all__ = ["EpisodeReport", "Mismatch", "compare_episode", "next_command"]


@dataclass(frozen=True)
class Mismatch:
    """The first difference found in an episode."""

    game_id: str
    step: int
    command: str | None
    field: str
    expected: Any
    got: Any

    def __str__(self) -> str:
        return (
            f"{self.game_id} step {self.step} after {self.command!r}: {self.field} differs\n"
            f"  reference: {self.expected!r}\n  candidate: {self.got!r}"
        )


@dataclass
class EpisodeReport:
    """Compared steps (the reset counts as one) and mismatches (at most one: the episode stops there)."""

    steps: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)


def _diff(game_id: str, step: int, command: str | None, expected: EngineStep, got: EngineStep) -> Mismatch | None:
    for name in ("observation", "admissible_commands", "won"):
        if getattr(expected, name) != getattr(got, name):
            return Mismatch(game_id, step, command, name, getattr(expected, name), getattr(got, name))
    return None


_INVALID_TEMPLATES = (
    "take {o} from {r}", "move {o} to {r}", "open {r}", "close {r}", "go to {r}", "examine {o}",
    "examine {r}", "use {o}", "heat {o} with {r}", "cool {o} with {r}", "clean {o} with {r}",
    "slice {o} with {o2}", "put {o} in/on {r}", "put {o} in {r}",
)


def _invalid_command(rng: random.Random, admissible: Sequence[str], names: Sequence[str]) -> str:
    """A command that is usually not admissible (it may be by chance: then it is simply played)."""
    kind = rng.randrange(8)
    pick = rng.choice(list(admissible)) if admissible else "look"
    if kind == 0:
        return pick.upper() if rng.random() < 0.5 else pick.capitalize()
    if kind == 1:
        return pick + rng.choice((" now", ".", " please", "s"))
    if kind == 2:
        return rng.choice(("", " ", "dance", "xyzzy", "go", "go to", "take", "inventory please", "help me", "look around"))
    if kind == 3:
        return pick.replace(" ", "  ", 1)
    if kind == 4:  # padding whitespace is stripped by the engines: a valid command
        return rng.choice((" ", "\t", "\n", "  ")) + pick + rng.choice(("", " ", "\n"))
    template = rng.choice(_INVALID_TEMPLATES)
    return template.format(o=rng.choice(names), r=rng.choice(names), o2=rng.choice(names))


def next_command(rng: random.Random, admissible: Sequence[str], names: Sequence[str], invalid_rate: float = 0.2) -> str:
    """One command of the random mix (see the module docstring)."""
    if not admissible or rng.random() < invalid_rate:
        return _invalid_command(rng, admissible, names)
    interacting = [c for c in admissible if not c.startswith(("go to ", "look", "help", "inventory"))]
    if interacting and rng.random() < 0.6:
        return rng.choice(interacting)
    return rng.choice(list(admissible))


def compare_episode(
    reference: AlfredEngine,
    candidate: AlfredEngine,
    game: Any,
    rng: random.Random,
    steps: int = 50,
    walkthrough: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
    choose: Callable[[random.Random, Sequence[str], Sequence[str]], str] = next_command,
) -> EpisodeReport:
    """Reset both engines on ``game``, play ``walkthrough`` (default: the game's) and then
    random commands, up to ``steps`` commands; stop at the first mismatch."""
    report = EpisodeReport()
    game_id = str(getattr(game, "id", "game"))
    expected, got = reference.reset(game), candidate.reset(game)
    report.steps += 1
    mismatch = _diff(game_id, 0, None, expected, got)
    if mismatch is not None:
        report.mismatches.append(mismatch)
        return report
    if walkthrough is None:
        walkthrough = getattr(game, "walkthrough", None) or ()
    if names is None:
        names = _display_names(candidate) or ["apple 1", "fridge 1", "countertop 1"]
    script = list(walkthrough)[:steps]
    for index in range(steps):
        command = script[index] if index < len(script) else choose(rng, expected.admissible_commands, names)
        report.commands.append(command)
        expected, got = reference.step(command), candidate.step(command)
        report.steps += 1
        mismatch = _diff(game_id, index + 1, command, expected, got)
        if mismatch is not None:
            report.mismatches.append(mismatch)
            break
    return report


def _display_names(engine: Any) -> list[str]:
    world = getattr(engine, "world", None)
    if world is None:
        return []
    return sorted(name for name in world.names.values() if not name.endswith(" "))

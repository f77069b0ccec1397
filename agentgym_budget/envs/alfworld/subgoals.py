"""ALFWorld subgoals read off the engine's feedback: the detector behind ``ProcessReward(signal="subgoal")``.

Example:
    >>> from agentgym_budget.envs.alfworld.subgoals import alfworld_subgoals
    >>> alfworld_subgoals("You heat the apple 1 using the microwave 1.", "", {"task": "put a hot apple in fridge"})
    ['heat apple 1']
    >>> alfworld_subgoals("You sliced the apple 1 with the knife 1.", "", {"task": "put a hot slice of apple in fridge"})
    ['slice apple 1']
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["alfworld_subgoals"]

# ALFWorld's feedback for the state changes the handcoded expert's subgoals are made of
# (alfred.twl2; 2.1.1 games say "put ... in/on" where 2.1.2 says "move ... to").
_ALFWORLD_EVENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("pick up", re.compile(r"You pick up the ([\w ]+?) from the")),
    ("heat", re.compile(r"You heat the ([\w ]+?) using the")),
    ("cool", re.compile(r"You cool the ([\w ]+?) using the")),
    ("clean", re.compile(r"You clean the ([\w ]+?) using the")),
    ("turn on", re.compile(r"You turn on the ([\w ]+?)\.")),
    ("slice", re.compile(r"You sliced the ([\w ]+?) with the")),
    ("put", re.compile(r"You (?:move the ([\w ]+?) to|put the ([\w ]+?) (?:in|on|in/on)) the ([\w ]+?)\.")),
)


def _kind(name: str) -> str:
    """``"apple 1"`` -> ``"apple"``: the object type the task text mentions."""
    return name.rstrip("0123456789 ").lower()


def alfworld_subgoals(obs: str, action: str, info: dict[str, Any]) -> list[str]:
    """Task-relevant ALFWorld subgoals in this turn's feedback, e.g. ``["heat apple 1"]``.

    An event counts only when the object (and, for ``put``, the receptacle) is of a type the
    task names, so picking up a random object is no progress.
    """
    task = str(info.get("task", "")).lower()
    found = []
    for verb, pattern in _ALFWORLD_EVENTS:
        for match in pattern.finditer(obs):
            groups = [g for g in match.groups() if g]
            if all(_kind(name) in task for name in groups):
                found.append(" ".join([verb, groups[0]] + ([f"to {groups[1]}"] if len(groups) > 1 else [])))
    return found


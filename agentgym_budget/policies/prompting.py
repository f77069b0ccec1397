"""Prompt building and action parsing for language-model agents (ReAct style).

Two small, documented pieces that the ``hf`` policy and the LLM trainer share:

* :func:`build_prompt` turns the task, the interaction history and (when the env shows it)
  the remaining budget into one prompt that ends where the model should write
  ``Thought: ...`` then ``Action: <command>``;
* :func:`parse_action` extracts the command from the model's text and maps it onto the
  admissible commands when it is a near miss.

Example:
    >>> prompt = build_prompt([("You are in a kitchen.", None)], task="put a mug in the sink",
    ...                       budget_text="[Turns left: 3 of 3]", admissible=["go to sink 1", "look"])
    >>> prompt.splitlines()[-1]
    'Thought:'
    >>> parse_action("Thought: the mug is here.\\nAction: Go to sink 1.", ["go to sink 1", "look"])
    'go to sink 1'
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

__all__ = ["SYSTEM_PROMPT", "build_prompt", "parse_action"]

#: The fixed instructions at the top of every prompt.
SYSTEM_PROMPT = (
    "You are an agent acting in a text environment. At each turn, think briefly, then give "
    "exactly one command.\nAnswer in the form:\nThought: <your reasoning>\nAction: <one command>"
)

_ACTION_LINE = re.compile(r"^\s*action\s*:\s*(.*)$", re.IGNORECASE | re.MULTILINE)
# Below this similarity a free-form action is kept as is (the env answers it in-game).
_MIN_SIMILARITY = 0.8


def build_prompt(
    history: Sequence[tuple[str, str | None]],
    task: str,
    budget_text: str | None = None,
    admissible: Sequence[str] | None = None,
    max_turns_shown: int | None = None,
) -> str:
    """A ReAct-style prompt from the interaction so far.

    Args:
        history: ``(observation, action)`` pairs in order; the first observation is the one
            ``reset`` returned, the action of the last pair is ``None`` (not chosen yet).
        task: the goal (``info["task"]``).
        budget_text: e.g. ``"[Turns left: 7 of 20]"``; shown only when given (pass it when
            the env shows the budget to the agent).
        admissible: the commands to list, or ``None`` to list none.
        max_turns_shown: keep only the last this-many turns of the history (``None``: all).

    Returns:
        The prompt; it ends with ``"Thought:"`` so the model continues with its reasoning.
    """
    turns = list(history)
    if max_turns_shown is not None and len(turns) > max_turns_shown:
        turns = turns[-max_turns_shown:]
    lines = [SYSTEM_PROMPT, "", f"Your task is to: {task}", ""]
    for observation, action in turns:
        lines.append(f"Observation: {observation.strip()}")
        if action is not None:
            lines.append(f"Action: {action}")
    if budget_text:
        lines.append(budget_text)
    if admissible:
        lines.append("Available commands: " + ", ".join(admissible))
    lines.append("Thought:")
    return "\n".join(lines)


def parse_action(text: str, admissible: Sequence[str] | None = None) -> str:
    """The command in a model's reply.

    Rules, in order:

    1. the text after the *last* ``Action:`` (case-insensitive) up to the end of its line;
       without one, the first non-empty line of the reply;
    2. surrounding whitespace, quotes, backticks and a final period are removed;
    3. if ``admissible`` is given: a case-insensitive exact match returns that command;
       otherwise the most similar command (``difflib`` ratio >= 0.8) is returned;
    4. otherwise the cleaned text is returned as is (the env answers an unknown command
       in-game, e.g. ``"Nothing happens."``); an empty reply becomes ``"look"``.
    """
    matches = _ACTION_LINE.findall(text)
    if matches:
        raw = matches[-1]
    else:
        raw = next((line for line in text.splitlines() if line.strip()), "")
    action = raw.strip().strip("`'\"").strip().rstrip(".").strip()
    if not action:
        return "look"
    if admissible:
        by_lower = {command.lower(): command for command in admissible}
        if action.lower() in by_lower:
            return by_lower[action.lower()]
        close = difflib.get_close_matches(action.lower(), list(by_lower), n=1, cutoff=_MIN_SIMILARITY)
        if close:
            return by_lower[close[0]]
    return action

"""The conversation an LLM agent sees, and how its reply becomes a command (ReAct style).

The one prompt builder and the one reply parser of every LLM policy (evaluation and training,
local and served models):

* :func:`build_messages` turns the task, the episode so far and (when asked) the remaining
  budget and the admissible commands into chat messages: a system message with the
  instructions and the task, then per turn a ``user`` message with the observation and an
  ``assistant`` message with what the model replied.  A tokenizer's chat template renders them
  (:func:`render_plain` for models without one);
* :func:`parse_action` extracts the command from a reply and maps a near miss onto the
  admissible commands.

Example:
    >>> messages = build_messages("put a mug in the sink", [("You are in a kitchen.", None)],
    ...                           budget_text="[Turns left: 3 of 3]", admissible=["go to sink 1", "look"])
    >>> [m["role"] for m in messages]
    ['system', 'user']
    >>> print(messages[1]["content"])
    Observation: You are in a kitchen.
    [Turns left: 3 of 3]
    Available commands: go to sink 1, look
    >>> parse_action("Thought: the mug is here.\\nAction: Go to sink 1.", ["go to sink 1", "look"])
    'go to sink 1'
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from agentgym_budget.policies.chat import Message

__all__ = ["SYSTEM_PROMPT", "build_messages", "parse_action", "render_plain", "strip_imagined_observation"]

#: The instructions at the top of every conversation (the task follows them).
SYSTEM_PROMPT = (
    "You are an agent acting in a text environment. At each turn, think briefly, then give "
    "exactly one command.\nAnswer in the form:\nThought: <your reasoning>\nAction: <one command>"
)

_ACTION_LINE = re.compile(r"^\s*action\s*:\s*(.*)$", re.IGNORECASE | re.MULTILINE)
_THOUGHT_LINE = re.compile(r"^\s*(think|thought)\s*:", re.IGNORECASE)
# Below this similarity a free-form action is kept as is (the env answers it in-game).
_MIN_SIMILARITY = 0.8


def build_messages(
    task: str,
    history: Sequence[tuple[str, str | None]],
    *,
    budget_text: str | None = None,
    admissible: Sequence[str] | None = None,
    max_turns_shown: int | None = None,
    system_prompt: str = SYSTEM_PROMPT,
) -> list[Message]:
    """The chat messages for the next reply.

    Args:
        task: the goal (``info["task"]``), put in the system message so that it stays when
            old turns are dropped to fit a context limit.
        history: ``(observation, reply)`` pairs in order; the first observation is the one
            ``reset`` returned; the reply of the last pair is ``None`` (not written yet).
        budget_text: e.g. ``"[Turns left: 7 of 20]"``, added to the last observation (pass
            it when the agent is to be told its budget and the env does not show it itself).
        admissible: commands listed under the last observation (``None``: none listed).
        max_turns_shown: keep only the last this-many turns (``None``: all).
        system_prompt: the instructions (the task is appended to them).
    """
    turns = list(history)
    if max_turns_shown is not None and len(turns) > max_turns_shown:
        turns = turns[-max_turns_shown:]
    messages: list[Message] = [{"role": "system", "content": f"{system_prompt}\n\nYour task is to: {task}"}]
    for index, (observation, reply) in enumerate(turns):
        lines = [f"Observation: {observation.strip()}"]
        if index == len(turns) - 1:
            if budget_text:
                lines.append(budget_text)
            if admissible:
                lines.append("Available commands: " + ", ".join(admissible))
        messages.append({"role": "user", "content": "\n".join(lines)})
        if reply is not None:
            messages.append({"role": "assistant", "content": reply})
    return messages


def render_plain(messages: Sequence[Message]) -> str:
    """The conversation as one ReAct text, for a model without a chat template.

    The system message, then per turn the observation and the model's reply (after
    ``Thought:``), ending with ``Thought:`` where the model goes on.

    Example:
        >>> print(render_plain([{"role": "system", "content": "Act."}, {"role": "user", "content": "Observation: a"},
        ...                     {"role": "assistant", "content": "I should look.\\nAction: look"},
        ...                     {"role": "user", "content": "Observation: b"}]))
        Act.
        <BLANKLINE>
        Observation: a
        Thought: I should look.
        Action: look
        Observation: b
        Thought:
    """
    lines = []
    for message in messages:
        content = message["content"].strip()
        if message["role"] == "system":
            lines += [content, ""]
        elif message["role"] == "assistant":  # a whole reply follows "Thought:"; a bare action stands alone
            lines.append(content if content.startswith("Action:") else f"Thought: {content.removeprefix('Thought:').strip()}")
        else:
            lines.append(content)
    return "\n".join(lines + ["Thought:"])


def strip_imagined_observation(reply: str) -> str:
    """The reply up to where a model starts imagining the env's answer (``Observation:``)."""
    return reply.split("Observation:", 1)[0].strip()


def parse_action(text: str, admissible: Sequence[str] | None = None) -> str:
    """The command in a model's reply.

    Rules, in order:

    1. the text after the *last* ``Action:`` (case-insensitive) up to the end of its line;
       without one, the first non-empty line that is not a ``Thought:``/``think:`` line (a
       ReAct thought is not a command), else the first non-empty line;
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
        lines = [line for line in text.splitlines() if line.strip()]
        raw = next((line for line in lines if not _THOUGHT_LINE.match(line)), lines[0] if lines else "")
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

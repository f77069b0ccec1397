"""What the agent sees, rendered once: the conversation an LLM agent reads, and how its reply becomes a command.

The one renderer of the model's input and the one reply parser, used by every path that puts a
model in front of an env: the evaluator and the trainer (through
:class:`~agentgym_budget.policies.llm.LLMPolicy`), SFT data, and every adapter (TRL, verifiers,
SkyRL, OpenEnv, through :func:`~agentgym_budget.integrations.session.format_turn`).  For the same
env state they all produce the same text (``tests/test_rendering.py``):

* :func:`turn_message` writes one turn's user message from the observation and ``info``:
  ``Observation: ...``, the budget line, ``Available commands: ...``.  The budget line is
  ``TurnBudget``'s own text (``info["budget_text"]``, in its ``budget_template``), shown once:
  where the env already shows it (``TurnBudget(show_budget=True)``) it is taken out of the
  observation and put on its line; where the env does not, the policy may add it
  (``show_budget=True``) — either way the model reads the same message;
* :func:`system_message` is the instructions followed by the task (``Your task is to: ...``);
  :func:`chat_messages` lays a conversation out as chat messages — also an append-only one
  (``LLMPolicy(history="append")``), whose every user message keeps its own budget line and
  commands; :func:`build_messages` is the whole conversation for the next reply from raw
  observations;
* a tokenizer's chat template renders the messages (:func:`render_plain` for models without one);
* :func:`parse_action` extracts the command from a reply and plays it as written — in the
  admissible spelling when it is an admissible command up to case, whitespace and trailing
  punctuation.  Mapping a near miss onto an admissible command is an explicit opt-in
  (``matching="fuzzy"``) that never changes a number or swaps one word of the game for
  another.

Example:
    >>> import gymnasium as gym, agentgym_budget
    >>> env = gym.make("KeyDoor-Budget-v0", budget=3, show_budget=True)
    >>> obs, info = env.reset(seed=0, options={"task": "red-blue"})
    >>> print(turn_message(obs, info))  # doctest: +ELLIPSIS
    Observation: You are in a hall...
    [Turns left: 3 of 3]
    Available commands: take key, open red door, open blue door
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
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym_budget.policies.chat import Message
from agentgym_budget.wrappers.budget_core import BUDGET_SEPARATOR, DEFAULT_BUDGET_TEMPLATE

__all__ = ["ACTION_MATCHING", "ACTION_PROMPT", "PROMPTS", "SYSTEM_PROMPT", "Example", "budget_line", "build_messages",
           "chat_messages", "check_matching", "parse_action", "render_plain", "split_budget", "strip_imagined_observation", "system_message",
           "task_line", "turn_message", "user_message", "written_command"]

#: The instructions at the top of every conversation (the task follows them).
SYSTEM_PROMPT = (
    "You are an agent acting in a text environment. At each turn, think briefly, then give "
    "exactly one command.\nAnswer in the form:\nThought: <your reasoning>\nAction: <one command>"
)

#: A stricter reply format for small models: one ``Action:`` line, a command copied from the list.
ACTION_PROMPT = (
    "You are an agent acting in a text environment. At each turn, choose one of the available commands.\n"
    "Reply with exactly one line: Action: <one of the available commands, copied exactly>\n"
    "Write nothing else."
)
#: The fewest tokens that still state the reply format (11 SmolLM2 tokens, the ReAct prompt's 44): for a
#: model trained on the format (SFT), where every prompt token is paid again in each turn's forward.
SHORT_PROMPT = "Reply with one line: Action: <one available command>"
#: The named system prompts (``LLMPolicy(prompt=...)``): ``react`` is the default.
PROMPTS: dict[str, str] = {"react": SYSTEM_PROMPT, "action": ACTION_PROMPT, "short": SHORT_PROMPT}

#: A worked example for a few-shot conversation: ``(task, [(user message, reply), ...])``.
Example = tuple[str, Sequence[tuple[str, str]]]

_ACTION_LINE = re.compile(r"^\s*action\s*:\s*(.*)$", re.IGNORECASE | re.MULTILINE)
_THOUGHT_LINE = re.compile(r"^\s*(think|thought)\s*:", re.IGNORECASE)
#: How :func:`parse_action` maps a written command onto the admissible ones: ``exact`` (the
#: default: up to case, whitespace and trailing punctuation) or ``fuzzy`` (also a misspelling).
ACTION_MATCHING = ("exact", "fuzzy")
_TRAILING_PUNCTUATION = ".!?,;:"
_QUOTES = "`'\""
# Fuzzy matching: below this similarity two words are different words, not a typo.
_MIN_WORD_SIMILARITY = 0.8
# Words that name a different thing even when spelled alike (brown/crown), whatever the env lists.
_COLOURS = frozenset({"black", "blue", "brown", "gold", "gray", "green", "grey", "orange", "pink", "purple", "red",
                      "silver", "white", "yellow"})


def build_messages(
    task: str,
    history: Sequence[tuple[str, str | None]],
    *,
    budget_text: str | None = None,
    admissible: Sequence[str] | None = None,
    max_turns_shown: int | None = None,
    system_prompt: str = SYSTEM_PROMPT,
    last_message: str | None = None,
    examples: Sequence[Example] = (),
) -> list[Message]:
    """The chat messages for the next reply.

    Earlier turns show their observation only; the last one also the budget line and the
    commands (its :func:`user_message`, or ``last_message`` when given: a :func:`turn_message`).

    Args:
        task: the goal (``info["task"]``), put in the system message so that it stays when
            old turns are dropped to fit a context limit.
        history: ``(observation, reply)`` pairs in order; the first observation is the one
            ``reset`` returned; the reply of the last pair is ``None`` (not written yet).
            Observations without the budget line (:func:`split_budget`).
        budget_text: e.g. ``"[Turns left: 7 of 20]"``, added to the last observation.
        admissible: commands listed under the last observation (``None``: none listed).
        max_turns_shown: keep only the last this-many turns (``None``: all).
        system_prompt: the instructions (the task is appended to them).
        last_message: the last turn's user message as written (then ``budget_text`` and
            ``admissible`` are not used).
        examples: worked examples shown before the conversation (:func:`chat_messages`).
    """
    turns = list(history)
    if max_turns_shown is not None and len(turns) > max_turns_shown:
        turns = turns[-max_turns_shown:]
    last = len(turns) - 1
    messages = [user_message(observation) for observation, _ in turns[:-1]]
    if turns:
        messages.append(last_message if last_message is not None else
                        user_message(turns[last][0], budget_text=budget_text, admissible=admissible))
    return chat_messages(task, [(message, reply) for message, (_, reply) in zip(messages, turns)],
                         system_prompt=system_prompt, examples=examples)


def turn_message(observation: str, info: Mapping[str, Any], *, show_budget: bool = False,
                 list_commands: bool = True) -> str:
    """The user message of one turn, for every path (evaluator, trainer, SFT data, adapters).

    ``Observation: <the observation>``, the budget line (when the env shows it, or
    ``show_budget=True`` and ``info`` has it: :func:`budget_line`; before the observation where the
    env shows it as a prefix), then ``Available commands: ...`` (``list_commands`` and ``info``
    lists them).  The budget line appears once, whichever of the env and the policy shows it.

    Example:
        >>> info = {"budget_text": "[Turns left: 2 of 3]", "budget_shown": "suffix", "admissible_commands": ["look"]}
        >>> print(turn_message("A hall.\\n\\n[Turns left: 2 of 3]", info, show_budget=True))
        Observation: A hall.
        [Turns left: 2 of 3]
        Available commands: look
        >>> turn_message("A hall.", {**info, "budget_shown": ""}, show_budget=True) == turn_message(
        ...     "A hall.\\n\\n[Turns left: 2 of 3]", info)
        True
    """
    body, shown = split_budget(observation, info)
    line = shown if shown is not None else (budget_line(info) if show_budget else None)
    admissible = info.get("admissible_commands") if list_commands else None
    return user_message(body, budget_text=line, admissible=admissible,
                        budget_first=shown is not None and info.get("budget_shown") == "prefix")


def split_budget(observation: str, info: Mapping[str, Any]) -> tuple[str, str | None]:
    """``(the observation without the budget line the env added, that line)``; ``(observation, None)`` if none.

    The env (``TurnBudget(show_budget=True)``) says in ``info["budget_shown"]`` whether and where
    it added ``info["budget_text"]``; only that exact text, at that end, is taken out.

    Example:
        >>> split_budget("A hall.\\n\\n[Turns left: 1 of 2]", {"budget_text": "[Turns left: 1 of 2]", "budget_shown": "suffix"})
        ('A hall.', '[Turns left: 1 of 2]')
        >>> split_budget("A hall.", {"budget_text": "[Turns left: 1 of 2]", "budget_shown": ""})
        ('A hall.', None)
    """
    where, text = info.get("budget_shown"), info.get("budget_text")
    if not where or not text:
        return observation, None
    if where == "suffix" and observation.endswith(BUDGET_SEPARATOR + text):
        return observation[: -len(BUDGET_SEPARATOR + text)], text
    if where == "prefix" and observation.startswith(text + BUDGET_SEPARATOR):
        return observation[len(text + BUDGET_SEPARATOR):], text
    return observation, None


def budget_line(info: Mapping[str, Any]) -> str | None:
    """The remaining budget as ``TurnBudget`` writes it (``info["budget_text"]``, in its ``budget_template``).

    Without that key (an env not wrapped by a current ``TurnBudget``), ``turns_left`` and
    ``budget`` in :data:`~agentgym_budget.wrappers.budget_core.DEFAULT_BUDGET_TEMPLATE`;
    ``None`` when ``info`` has no budget at all.

    Example:
        >>> budget_line({"turns_left": 3, "budget": 5}), budget_line({"budget_text": "3 turns left"}), budget_line({})
        ('[Turns left: 3 of 5]', '3 turns left', None)
    """
    if info.get("budget_text"):
        return str(info["budget_text"])
    if "turns_left" in info and "budget" in info:
        return DEFAULT_BUDGET_TEMPLATE.format(turns_left=info["turns_left"], budget=info["budget"],
                                              turn=info.get("turn", 0))
    return None


def user_message(observation: str, *, budget_text: str | None = None, admissible: Sequence[str] | None = None,
                 budget_first: bool = False) -> str:
    """One turn's user message: the observation, then (when given) the budget line and the admissible commands.

    ``budget_first``: the budget line before the observation (an env that shows it as a prefix).

    Example:
        >>> print(user_message(" A key. ", budget_text="[Turns left: 2 of 3]", admissible=["take key"]))
        Observation: A key.
        [Turns left: 2 of 3]
        Available commands: take key
    """
    lines = [f"Observation: {observation.strip()}"]
    if budget_text:
        lines.insert(0 if budget_first else 1, budget_text)
    if admissible:
        lines.append("Available commands: " + ", ".join(admissible))
    return "\n".join(lines)


def system_message(task: str, system_prompt: str = SYSTEM_PROMPT) -> Message:
    """The conversation's first message: the instructions, then the task.

    Example:
        >>> system_message("open the door", "Act.")["content"]
        'Act.\\n\\nYour task is to: open the door'
    """
    return {"role": "system", "content": f"{system_prompt}\n\n{task_line(task)}"}


def chat_messages(task: str, turns: Sequence[tuple[str, str | None]], *,
                  system_prompt: str = SYSTEM_PROMPT, examples: Sequence[Example] = ()) -> list[Message]:
    """The system message with the task, then per turn its ``user`` message and (when written) the ``assistant`` reply.

    ``turns``: ``(user message, reply)`` pairs, the messages already written
    (:func:`user_message`); the last reply is ``None`` (the one to generate).

    ``examples`` (few-shot): worked episodes, each ``(its task, [(user message, reply), ...])``
    as :func:`turn_message` wrote them, placed after the system message as ``user``/``assistant``
    exchanges.  Then every episode's first user message — each example's and this conversation's
    first one shown — begins with its own task line (:func:`task_line`), so the model reads
    which task each exchange is about; without examples nothing changes.

    Example:
        >>> [m["role"] for m in chat_messages("t", [("Observation: a", "Action: look"), ("Observation: b", None)])]
        ['system', 'user', 'assistant', 'user']
        >>> shots = [("open the red door", [("Observation: a hall", "Action: take key")])]
        >>> messages = chat_messages("open the blue door", [("Observation: b", None)], examples=shots)
        >>> [(m["role"], m["content"].splitlines()[0]) for m in messages[1:]]
        [('user', 'Your task is to: open the red door'), ('assistant', 'Action: take key'), ('user', 'Your task is to: open the blue door')]
    """
    messages: list[Message] = [system_message(task, system_prompt)]
    for example_task, example_turns in examples:
        messages += _exchanges(example_task, list(example_turns))
    messages += _exchanges(task if examples else None, list(turns))
    return messages


def task_line(task: str) -> str:
    """The line that opens an episode's first user message in a few-shot conversation.

    Example:
        >>> task_line("open the door")
        'Your task is to: open the door'
    """
    return f"Your task is to: {task}"


def _exchanges(task: str | None, turns: Sequence[tuple[str, str | None]]) -> list[Message]:
    """``user``/``assistant`` messages of ``turns``; the first user message opens with ``task``'s line when given."""
    messages: list[Message] = []
    for index, (content, reply) in enumerate(turns):
        if index == 0 and task is not None:
            content = f"{task_line(task)}\n{content}"
        messages.append({"role": "user", "content": content})
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


def check_matching(matching: str) -> str:
    """``matching`` if it is a known matching mode (:data:`ACTION_MATCHING`), else a one-line ``ValueError``.

    Example:
        >>> check_matching("exact")
        'exact'
        >>> check_matching("closest")
        Traceback (most recent call last):
        ...
        ValueError: action matching must be one of ('exact', 'fuzzy'), got 'closest'
    """
    if matching not in ACTION_MATCHING:
        raise ValueError(f"action matching must be one of {ACTION_MATCHING}, got {matching!r}")
    return matching


def written_command(text: str) -> str:
    """The command a model's reply names, cleaned but not matched (``""``: it names none).

    The text after the *last* ``Action:`` (case-insensitive) up to the end of its line;
    without one, the first non-empty line that is not a ``Thought:``/``think:`` line (a ReAct
    thought is not a command), else the first non-empty line.  Surrounding whitespace, quotes
    and backticks and trailing punctuation are removed, and runs of whitespace become one space;
    the case is kept.

    Example:
        >>> written_command("Thought: the door.\\nAction:  Open   red door. ")
        'Open red door'
    """
    matches = _ACTION_LINE.findall(text)
    if matches:
        raw = matches[-1]
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        raw = next((line for line in lines if not _THOUGHT_LINE.match(line)), lines[0] if lines else "")
    return " ".join(raw.strip().strip(_QUOTES).rstrip(_TRAILING_PUNCTUATION + _QUOTES + " \t").split())


def parse_action(text: str, admissible: Sequence[str] | None = None, *, matching: str = "exact") -> str:
    """The command to play for a model's reply: the :func:`written_command`, in the admissible spelling when it is one.

    1. the reply's :func:`written_command`; an empty one becomes ``"look"``;
    2. if it equals an admissible command up to case, whitespace and trailing punctuation,
       that command's own spelling is played;
    3. only with ``matching="fuzzy"``: a near miss becomes the one admissible command it is a
       misspelling of (see :func:`_misspelling_of`: same words in the same order, each
       differing word a close spelling of the other; never a different number, never a word
       that names another thing in the game, e.g. ``red`` for ``green``);
    4. otherwise the written command is played as is: the env answers an unknown command
       in-game (e.g. ``"Nothing happens."``) and the loss scores the tokens that chose it.

    Example:
        >>> doors = ["open blue door", "open green door", "take key"]
        >>> parse_action("Action: OPEN  Blue door!", doors)
        'open blue door'
        >>> parse_action("Action: open red door", doors, matching="fuzzy")
        'open red door'
        >>> parse_action("Action: opn blue door", doors), parse_action("Action: opn blue door", doors, matching="fuzzy")
        ('opn blue door', 'open blue door')
    """
    check_matching(matching)
    command = written_command(text)
    if not command:
        return "look"
    if not admissible:
        return command
    by_key = {_normal(candidate): candidate for candidate in admissible}
    if _normal(command) in by_key:
        return by_key[_normal(command)]
    if matching == "fuzzy":
        return _misspelling_of(command, admissible) or command
    return command


def _normal(command: str) -> str:
    """The form two spellings of one command share: lower case, single spaces, no trailing punctuation."""
    return " ".join(command.lower().split()).rstrip(_TRAILING_PUNCTUATION).strip()


def _misspelling_of(command: str, admissible: Sequence[str]) -> str | None:
    """The one admissible command that ``command`` misspells, or ``None`` (none, or more than one).

    A candidate qualifies when it has as many words as ``command`` and every word that differs
    is a typo: neither word holds a digit (a number is never changed: ``cabinet 9`` is not
    ``cabinet 2``), the two are close spellings (``difflib`` ratio >= 0.8), and the written
    word is not itself a word of an admissible command or a colour (then it names another
    thing: ``drawer`` is not ``drawers`` when both occur, ``brown`` is not ``crown``).  When two
    candidates qualify, the reply is ambiguous and played as written.

    Example:
        >>> _misspelling_of("go to cabnet 2", ["go to cabinet 2", "go to cabinet 9"])
        'go to cabinet 2'
        >>> _misspelling_of("go to cabinet 9", ["go to cabinet 2"]) is None
        True
    """
    written = _normal(command).split()
    vocabulary = {word for candidate in admissible for word in _normal(candidate).split()} | _COLOURS
    found = [candidate for candidate in admissible
             if _is_typo_of(written, _normal(candidate).split(), vocabulary)]
    return found[0] if len(found) == 1 else None


def _is_typo_of(written: list[str], candidate: list[str], vocabulary: set[str]) -> bool:
    """Whether the words ``written`` are ``candidate``'s with typos only (see :func:`_misspelling_of`)."""
    if len(written) != len(candidate):
        return False
    for mine, theirs in zip(written, candidate):
        if mine == theirs:
            continue
        if any(ch.isdigit() for ch in mine + theirs) or mine in vocabulary:
            return False
        if difflib.SequenceMatcher(None, mine, theirs).ratio() < _MIN_WORD_SIMILARITY:
            return False
    return True

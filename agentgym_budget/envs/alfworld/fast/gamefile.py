"""Checks that a ``game.tw-pddl`` uses the domain and grammar the fast engine reproduces.

A ``game.tw-pddl`` embeds its own PDDL domain and text grammar; the fast engine implements
those of alfworld 0.4.2 (data ``json_2.1.2``: ``move X to Y``, ``You arrive at <receptacle>.``,
``help``).  Anything else (e.g. the older ``json_2.1.1`` grammar with ``put X in/on Y``) is
refused with :class:`~.world.UnsupportedGameError` instead of being played differently.
Whitespace and PDDL comments are not significant for the comparison.

Example:
    >>> from agentgym_budget.envs.alfworld.game import domain_text, grammar_text
    >>> task_from_game_texts(domain_text(), grammar_text("put a apple in fridge"))
    'put a apple in fridge'
"""

from __future__ import annotations

import functools
import json
import re

from agentgym_budget._once import load_once
from agentgym_budget.envs.alfworld.fast.world import UnsupportedGameError

__all__ = ["task_from_game_texts"]

_TASK_MARKER = "Your task is to: "
_GOAL_PLACEHOLDER = "UNKNOWN GOAL"
#: Characters the grammar would read as symbols (``#rule#``, ``{eval}``, ``[list]``).
_GRAMMAR_SYNTAX = re.compile(r"[#{}\[\]]")


def _normalized_domain(domain: str) -> str:
    return " ".join(re.sub(r";[^\n]*", "", domain).lower().split())


def _normalized_grammar(grammar: str) -> str:
    return " ".join(grammar.split())


@load_once()
def _reference() -> tuple[str, str]:
    from agentgym_budget.envs.alfworld.game import domain_text, grammar_text

    return _normalized_domain(domain_text()), _normalized_grammar(grammar_text(_GOAL_PLACEHOLDER))


@functools.lru_cache(maxsize=256)
def task_from_game_texts(domain: str, grammar: str) -> str:
    """The task sentence of a game whose domain and grammar are alfworld 0.4.2's (else raise)."""
    reference_domain, reference_grammar = _reference()
    if _normalized_domain(domain) != reference_domain:
        raise UnsupportedGameError(
            "this game's PDDL domain is not alfworld 0.4.2's alfred.pddl; play it with engine='textworld'"
        )
    start = grammar.find(_TASK_MARKER)
    if start < 0:
        raise UnsupportedGameError("this game's grammar has no 'Your task is to: ...' rule")
    start += len(_TASK_MARKER)
    end = grammar.find('"', start)
    while end > 0 and grammar[end - 1] == "\\":  # an escaped quote inside the sentence
        end = grammar.find('"', end + 1)
    raw = grammar[start:end]
    if not raw.endswith("."):
        raise UnsupportedGameError("this game's task rule does not end with '.'")
    task = json.loads(f'"{raw[:-1]}"')
    if _GRAMMAR_SYNTAX.search(task):
        raise UnsupportedGameError(f"the task sentence {task!r} contains grammar symbols (#, {{, [)")
    if _normalized_grammar(grammar[:start] + _GOAL_PLACEHOLDER + grammar[end - 1 :]) != reference_grammar:
        raise UnsupportedGameError(
            "this game's grammar is not alfworld 0.4.2's alfred.twl2 (json_2.1.1 games say 'put X in/on Y'); "
            "play it with engine='textworld'"
        )
    return task

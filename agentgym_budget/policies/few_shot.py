"""Worked examples for a few-shot prompt: a training-split episode played by the env's expert.

:func:`expert_example` plays ``info["expert_action"]`` on an env of the family made with
``split="train"`` (never the evaluation split) through
:func:`~agentgym_budget.policies.demonstrations.play_demonstrations` (the expert demonstrations the
SFT stage clones), so each turn is rendered by the one renderer
(:func:`~agentgym_budget.policies.prompting.turn_message`); the replies are ``Action: <command>``.
:class:`~agentgym_budget.policies.llm.LLMPolicy` (``examples=``; the ``hf`` and ``openai``
policies' ``few_shot_env=``) puts the result after the system message
(:func:`~agentgym_budget.policies.prompting.chat_messages`).

Example:
    >>> task, turns = expert_example("KeyDoor-v0")
    >>> task.startswith("open the"), [reply for _, reply in turns][0]
    (True, 'Action: take key')
    >>> print(turns[0][0].splitlines()[-1])
    Available commands: take key, open yellow door, open red door
"""

from __future__ import annotations

from functools import lru_cache

from agentgym_budget.envs.registration import make_budget_env
from agentgym_budget.policies.demonstrations import play_demonstrations
from agentgym_budget.policies.prompting import Example

__all__ = ["EXAMPLE_SPLIT", "expert_example", "few_shot_examples"]

#: The split every worked example is drawn from.
EXAMPLE_SPLIT = "train"


def few_shot_examples(few_shot_env: str | None, few_shot_seed: int = 0, few_shot_candidates: int = 1, *,
                      list_commands: bool = True) -> tuple[Example, ...]:
    """The worked examples of a ``few_shot_env`` setting: ``()`` for ``None`` (zero-shot), else its :func:`expert_example`.

    What every path that takes the option reads (the ``hf`` and ``openai`` policies, the verifiers and
    SkyRL adapters), so the same setting shows the model the same example everywhere.

    Example:
        >>> few_shot_examples(None)
        ()
        >>> [task for task, _ in few_shot_examples("KeyDoor-v0")] == [expert_example("KeyDoor-v0")[0]]
        True
    """
    if few_shot_env is None:
        return ()
    return (expert_example(str(few_shot_env), int(few_shot_seed), list_commands=bool(list_commands),
                           candidates=int(few_shot_candidates)),)


@lru_cache(maxsize=16)
def expert_example(env_id: str, seed: int = 0, *, list_commands: bool = True, max_turns: int = 30,
                   candidates: int = 1) -> Example:
    """``(task, [(user message, "Action: <expert command>"), ...])`` of a won expert episode of ``env_id``'s train split.

    ``env_id``: a registered env id without a budget (e.g. ``KeyDoor-v0``), made with
    ``split="train"``; ``candidates``: reset seeds ``seed .. seed + candidates - 1`` are played
    and the shortest won episode is kept (a short example keeps the prompt short).
    A bad id, an env without ``split``/expert, or no won episode is a one-line ``ValueError``.
    """
    if candidates < 1 or max_turns < 1:
        raise ValueError(f"candidates and max_turns must be >= 1, got {candidates} and {max_turns}")
    if "-Budget-" in env_id:
        raise ValueError(f"few_shot_env is an env id without a budget (e.g. KeyDoor-v0), got {env_id!r}")
    try:
        env = make_budget_env(env_id, max_turns, split=EXAMPLE_SPLIT)  # the budget: max_turns
    except Exception as error:  # noqa: BLE001 - one line for any failure to make it
        raise ValueError(f"cannot make {env_id!r} with split={EXAMPLE_SPLIT!r}: {error}") from None
    # the one implementation of "play a scripted source, render each turn as the policy would": the
    # example's user messages are exactly what LLMPolicy shows for those turns
    played = play_demonstrations(lambda: env, "expert", episodes=candidates, seed=seed,
                                 policy_options={"list_admissible": list_commands})
    won = [turns for turns in played if turns and turns[-1].won]
    if not won:
        raise ValueError(f"the expert won no {env_id} episode from seeds {seed}..{seed + candidates - 1} "
                         f"within {max_turns} turns")
    shortest = min(won, key=len)  # the first of the shortest, as before
    return shortest[0].task, tuple((turn.messages[-1]["content"], turn.reply) for turn in shortest)

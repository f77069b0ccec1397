"""Worked examples for a few-shot prompt: a training-split episode played by the env's expert.

:func:`expert_example` plays ``info["expert_action"]`` on an env of the family made with
``split="train"`` (never the evaluation split) and renders each turn with the one renderer
(:func:`~agentgym_budget.policies.prompting.turn_message`); the replies are ``Action: <command>``.
:class:`~agentgym_budget.policies.llm.LLMPolicy` (``few_shot_env=``) puts the result after
the system message (:func:`~agentgym_budget.policies.prompting.chat_messages`).

Example:
    >>> task, turns = expert_example("KeyDoor-v0")
    >>> task.startswith("open the"), [reply for _, reply in turns][0]
    (True, 'Action: take key')
    >>> print(turns[0][0].splitlines()[-1])
    Available commands: take key, open yellow door, open red door
"""

from __future__ import annotations

from functools import lru_cache

import gymnasium as gym

from agentgym_budget.policies.prompting import Example, turn_message

__all__ = ["EXAMPLE_SPLIT", "expert_example"]

#: The split every worked example is drawn from.
EXAMPLE_SPLIT = "train"


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
        env = gym.make(env_id, split=EXAMPLE_SPLIT)
    except Exception as error:  # noqa: BLE001 - one line for any failure to make it
        raise ValueError(f"cannot make {env_id!r} with split={EXAMPLE_SPLIT!r}: {error}") from None
    try:
        episodes = [_expert_episode(env, s, list_commands, max_turns) for s in range(seed, seed + candidates)]
    finally:
        env.close()
    won = [episode for episode in episodes if episode is not None]
    if not won:
        raise ValueError(f"the expert won no {env_id} episode from seeds {seed}..{seed + candidates - 1} "
                         f"within {max_turns} turns")
    return min(won, key=lambda episode: len(episode[1]))


def _expert_episode(env: gym.Env, seed: int, list_commands: bool, max_turns: int) -> Example | None:
    """One expert episode rendered turn by turn, or ``None`` when it is not won within ``max_turns``."""
    obs, info = env.reset(seed=seed)
    task, turns = str(info.get("task", "")), []
    for _ in range(max_turns):
        action = info.get("expert_action")
        if not isinstance(action, str):
            raise ValueError(f"{env.spec.id if env.spec else env} gives no info['expert_action']")
        turns.append((turn_message(obs, info, list_commands=list_commands), f"Action: {action}"))
        obs, _, terminated, truncated, info = env.step(action)
        if info.get("won"):
            return task, tuple(turns)
        if terminated or truncated:
            return None
    return None

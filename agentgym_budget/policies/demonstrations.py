"""Demonstrations: a scripted source's episodes, written as the LLM policy's prompts and replies.

:func:`play_demonstrations` plays episodes with a *source* of commands — the env's expert
(``"expert"``: ``info["expert_action"]``) or uniformly random admissible commands (``"random"``:
the reply format only, nothing about the task) — through the one episode loop
(:func:`~agentgym_budget.episodes.runner.play_episodes`), and keeps per turn a
:class:`Demonstration`: the conversation that
:meth:`LLMPolicy.messages <agentgym_budget.policies.llm.LLMPolicy.messages>` rendered for that
turn and the reply that plays the source's command, as later turns show it (what
``LLMPolicy`` records of a reply ``Action: <command>``).  The LLM policy renders and records
every turn itself — its backend is scripted to answer with the source's replies — so a change
of the renderer reaches the data with no line changed here.  What the SFT stage clones
(:mod:`agentgym_budget.train.sft`) and what the tiny model's tokenizer learns from
(:mod:`agentgym_budget.policies.tiny_model`).

Data for training comes from the training split: :func:`training_env_kwargs` sets
``split="train"`` for a family with a held-out split and refuses another split in one line.

Example:
    >>> from agentgym_budget.envs.registration import make_budget_env
    >>> kwargs = training_env_kwargs("KeyDoor-v0")
    >>> kwargs
    {'split': 'train'}
    >>> [episode] = play_demonstrations(lambda: make_budget_env("KeyDoor-v0", 4, **kwargs), "expert", episodes=1)
    >>> [turn.reply for turn in episode]
    ['Action: take key', 'Action: open yellow door']
    >>> [m["role"] for m in episode[1].messages]
    ['system', 'user', 'assistant', 'user']
    >>> training_env_kwargs("KeyDoor-v0", {"split": "test"})
    Traceback (most recent call last):
    ...
    ValueError: training data comes from the training split only: KeyDoor-v0 split='test' is the held-out split; use split='train'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import gymnasium as gym

from agentgym_budget.envs.registration import family_of
from agentgym_budget.episodes.outcome import episode_over
from agentgym_budget.episodes.runner import play_episodes
from agentgym_budget.episodes.policy import Policy, PolicyReply, make_policy
from agentgym_budget.policies.chat import Completion, Message, Sampling
from agentgym_budget.policies.llm import LLMEpisode, LLMPolicy

__all__ = ["SOURCES", "TRAINING_SPLIT", "Demonstration", "play_demonstrations", "training_env_kwargs"]

#: Where a demonstration's commands come from: the env's expert, or uniformly random admissible commands.
SOURCES = ("expert", "random")
#: The split every family with a held-out split trains on.
TRAINING_SPLIT = "train"


@dataclass(frozen=True)
class Demonstration:
    """One turn to clone: the prompt as the LLM policy renders it, and the reply to learn (no end-of-turn token).

    ``task``: the episode's (``info["task"]``); ``won``: the env reported the win after this reply.
    """

    messages: list[Message]
    reply: str
    task: str = ""
    won: bool = False


def training_env_kwargs(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``env_kwargs`` on ``env_id``'s training split: ``split="train"`` is added for a family with a
    held-out split; any other split there is a one-line ``ValueError`` (see the module example)."""
    kwargs = dict(env_kwargs or {})
    try:
        held_out = family_of(env_id).held_out_split
    except gym.error.NameNotFound:  # a text env that is not ours: no split is known
        return kwargs
    if held_out is None:
        return kwargs
    split = kwargs.setdefault("split", TRAINING_SPLIT)
    if split != TRAINING_SPLIT:
        relation = "is the held-out split" if split == held_out else f"is not it (held out: {held_out!r})"
        raise ValueError(f"training data comes from the training split only: {env_id} split={split!r} {relation}; "
                         f"use split={TRAINING_SPLIT!r}")
    return kwargs


def play_demonstrations(make_env: Callable[[], gym.Env], source: str, episodes: int, seed: int = 0, *,
                        policy_options: Mapping[str, Any] | None = None,
                        concurrency: int = 1) -> list[list[Demonstration]]:
    """Each episode's turns as :class:`Demonstration` s, episode ``i`` reset with ``seed + i``.

    ``make_env``: an env under a ``TurnBudget`` (it ends each episode at its budget);
    ``policy_options``: the :class:`~agentgym_budget.policies.llm.LLMPolicy` settings that
    render the prompts (history mode, ``list_admissible``, ``max_turns_shown``, ...: the
    trainer's come from :func:`agentgym_budget.train.rollout.policy_options`);
    ``concurrency``: episodes in flight, on as many envs (each reused for later episodes; no model
    runs here, so 1 is as fast as any).
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    policy = _Demonstrator(source, dict(policy_options or {}))
    free: list[gym.Env] = []
    made: list[gym.Env] = []
    recorded: list[list[Demonstration]] = [[] for _ in range(episodes)]

    def start(index: int) -> _Recorder:
        env = free.pop() if free else _made(make_env, made)
        return _Recorder(recorded[index], env, policy, seed + index)

    try:
        play_episodes(policy, [partial(start, i) for i in range(episodes)], concurrency,
                      on_end=lambda recorder: free.append(recorder.env))
    finally:
        for env in made:
            env.close()
    return recorded


def _made(make_env: Callable[[], gym.Env], made: list[gym.Env]) -> gym.Env:
    env = make_env()
    made.append(env)
    return env


@dataclass
class _Completion(Completion):
    """A scripted reply, with the conversation it answers (the prompt as the LLM policy rendered it)."""

    messages: list[Message] = field(default_factory=list)


class _ScriptedBackend:
    """A chat backend that answers each conversation with the reply set for it before the call."""

    name = "demonstration"

    def __init__(self) -> None:
        self.replies: list[str] = []

    def complete(self, conversations: Sequence[Sequence[Message]], seeds: Sequence[int], sampling: Sampling,
                 **options: Any) -> list[Completion]:
        return [_Completion(text=reply, messages=[dict(m) for m in conversation])
                for conversation, reply in zip(conversations, self.replies, strict=True)]


@dataclass
class _State:
    """One demonstrated episode: the LLM policy's state for it and its own copy of the source."""

    llm: LLMEpisode
    source: Policy


class _Demonstrator:
    """A batch policy: the source picks each command, the LLM policy renders the prompt and records the reply."""

    reads_budget = False

    def __init__(self, source: str, policy_options: dict[str, Any]) -> None:
        self.source, self.name = source, f"demonstration({source})"
        self.backend = _ScriptedBackend()
        self.renderer = LLMPolicy(self.backend, **policy_options)

    def start(self, seed: int) -> _State:
        source = make_policy(self.source)
        source.reset(seed=seed)
        return _State(self.renderer.start(seed), source)

    def act_batch(self, states: Sequence[_State], observations: Sequence[str],
                  infos: Sequence[dict[str, Any]]) -> list[PolicyReply]:
        self.backend.replies = [f"Action: {_command(s.source, o, i)}" for s, o, i in zip(states, observations, infos)]
        return self.renderer.act_batch([s.llm for s in states], observations, infos)


def _command(source: Policy, obs: str, info: dict[str, Any]) -> str:
    try:
        return source.act(obs, info)
    except KeyError as error:  # the expert of an env without one
        raise ValueError(f"source {source.name!r}: {error.args[0]}") from None


class _Recorder:
    """One episode in flight: plays the replies in ``env`` and keeps each turn's prompt and reply."""

    def __init__(self, turns: list[Demonstration], env: gym.Env, policy: _Demonstrator, seed: int) -> None:
        self.turns, self.env, self.state, self.done = turns, env, policy.start(seed), False
        self.obs, self.info = env.reset(seed=seed)
        self.task = str(self.info.get("task", ""))

    def step(self, reply: PolicyReply) -> None:
        messages = cast(_Completion, reply.completion).messages  # the scripted backend's completion
        shown = self.state.llm.history[-1][1]  # the reply as the LLM policy recorded it for later turns
        self.obs, _, terminated, truncated, self.info = self.env.step(reply.action)
        won = bool(self.info.get("won"))
        self.turns.append(Demonstration(messages, shown, self.task, won))
        self.done = episode_over(terminated, truncated, won, stop_at_win=True)

"""The one LLM policy: conversations per episode, a chat backend, replies parsed into commands.

:class:`LLMPolicy` is a :class:`~agentgym_budget.episodes.policy.BatchPolicy` over any
:class:`~agentgym_budget.policies.chat.ChatBackend` — a local model
(:class:`~agentgym_budget.policies.hf.HFChatBackend`, registered as ``hf``) or a served one
over the OpenAI protocol (``openai``); :mod:`agentgym_budget.policies.factories` builds both
by name.  The evaluator and the trainer both drive it: each turn it builds every pending episode's messages with the one renderer
(:func:`~agentgym_budget.policies.prompting.turn_message`,
:func:`~agentgym_budget.policies.prompting.build_messages`), asks the backend for all replies
at once, and parses each with :func:`~agentgym_budget.policies.prompting.parse_action`
(exact matching unless ``action_matching="fuzzy"``; a reply's command that is played in another
spelling is kept in :attr:`~agentgym_budget.episodes.policy.PolicyReply.written_action`).
An episode's sampling seed at turn ``t`` derives from (episode seed, ``t``) alone, so an
episode's actions do not depend on which other episodes share its batches.

Example (a backend that always answers the same):
    >>> from types import SimpleNamespace
    >>> from agentgym_budget.policies.chat import Completion
    >>> backend = SimpleNamespace(name="same", complete=lambda conversations, seeds, sampling: [
    ...     Completion("Thought: the key first.\\nAction: take key") for _ in conversations])
    >>> policy = LLMPolicy(backend)
    >>> state = policy.start(seed=0)
    >>> info = {"task": "open the door", "admissible_commands": ["take key", "open door"]}
    >>> [reply] = policy.act_batch([state], ["You see a key."], [info])
    >>> reply.action, len(state.history)
    ('take key', 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym_budget.episodes.policy import PolicyReply
from agentgym_budget.policies.chat import ChatBackend, Completion, Message, Sampling
from agentgym_budget.policies.prompting import (PROMPTS, Example, build_messages, chat_messages, check_matching,
                                                parse_action, split_budget, strip_imagined_observation,
                                                turn_message, written_command)
from agentgym_budget.seeds import turn_seed

__all__ = ["HISTORIES", "LLMEpisode", "LLMPolicy"]

#: What earlier turns show of the model's answers (see :class:`LLMPolicy`).
HISTORIES = ("replies", "actions", "append")
#: ``LLMPolicy(examples=)``'s default: a list, not a tuple, because the evaluator records a policy's
#: plain defaults (tuples included) as its settings, and the examples are content, recorded through
#: the ``few_shot_env`` setting they were built from.
NO_EXAMPLES: list[Example] = []


@dataclass
class LLMEpisode:
    """One episode's state in an :class:`LLMPolicy`: its seed and the ``(observation, reply)`` turns so far.

    The observations are kept without the budget line an env adds (earlier turns do not show it).

    ``history="append"`` also keeps each turn's user message as it was shown, the first turn the
    conversation shows, and (on a backend that appends ids) the last prompt's ids followed by the
    reply ids sampled for it.
    """

    seed: int
    history: list[tuple[str, str]] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)  # history="append": each turn's user message
    first_shown: int = 0  # history="append": the conversation shows the turns from this one on
    ids: list[int] | None = None  # history="append": the last prompt's ids + the reply ids sampled for it


class LLMPolicy:
    """A language model as a policy (see the module docstring).

    Args:
        backend: generates the replies.
        sampling: temperature, top-p, new-token limit, stop strings (exactly what the backend applies).
        show_budget: show the remaining budget under the latest observation, as the env's
            ``TurnBudget`` writes it (``info["budget_text"]``, its ``budget_template``).
            The policy then reads the budget, so the evaluator runs one rollout per budget.
            Where the env shows the budget itself (``TurnBudget(show_budget=True)``) the line is
            shown once either way: the message is the same.
        list_admissible: list ``info["admissible_commands"]`` under the latest observation.
        max_turns_shown: keep only this many recent turns in the conversation (``None``: all).
        system_prompt: the instructions; the task is appended to them.
        history: what earlier turns show of the model's answers: ``"replies"`` (the whole
            reply, thought included: ReAct) or ``"actions"`` (``Action: <command>`` only, as
            verl-agent's ALFWorld prompts do: shorter prompts; what the trainer uses, as its
            earlier rollouts did) or ``"append"`` (append-only: each user message keeps its own
            budget line and commands, and a past reply is what the model sampled — on a backend
            with ``appends_ids`` (``hf``) the very ids, so each turn's prompt is the last one +
            its reply + the new message, and with the KV cache only the new message is run).
            In append mode ``max_turns_shown`` is reached by starting the conversation again
            from the latest half of the turns (then appending goes on), so the prefix is kept
            between those restarts.
        action_matching: how a reply's command becomes an admissible one
            (:func:`~agentgym_budget.policies.prompting.parse_action`): ``"exact"`` (up to case,
            whitespace and trailing punctuation; anything else is played as written) or
            ``"fuzzy"`` (also a misspelling, never a different number or word).
        prompt: the named instructions used when ``system_prompt`` is not given
            (:data:`~agentgym_budget.policies.prompting.PROMPTS`): ``"react"`` (the default,
            ``Thought:``/``Action:``) or ``"action"`` (one ``Action:`` line, a command copied from
            the list: for small models, with ``stop="\\n"``).
        examples: worked examples shown before the conversation (``(task, [(user message, reply),
            ...])`` each, :data:`~agentgym_budget.policies.prompting.Example`); none by default.
            The ``hf`` and ``openai`` policies build them from their ``few_shot_env`` setting
            (:func:`~agentgym_budget.policies.few_shot.few_shot_examples`: a train-split episode
            played by the env's expert, rendered as this policy renders a turn).

    Example (a few-shot conversation: system, the worked example, then this episode):
        >>> from types import SimpleNamespace
        >>> from agentgym_budget.policies.few_shot import few_shot_examples
        >>> examples = few_shot_examples("KeyDoor-v0")
        >>> policy = LLMPolicy(SimpleNamespace(name="none"), prompt="action", examples=examples)
        >>> info = {"task": "open the blue door", "admissible_commands": ["take key", "open blue door"]}
        >>> [m["role"] for m in policy.messages(policy.start(0), "A hall.", info)]
        ['system', 'user', 'assistant', 'user', 'assistant', 'user']
    """

    llm = True  # the evaluator keeps transcripts of LLM policies by default

    def __init__(self, backend: ChatBackend, sampling: Sampling = Sampling(), *, show_budget: bool = False,
                 list_admissible: bool = True, max_turns_shown: int | None = 20,
                 system_prompt: str | None = None, history: str = "replies", action_matching: str = "exact",
                 prompt: str = "react", examples: Sequence[Example] = NO_EXAMPLES) -> None:
        if sampling.temperature < 0 or not 0 < sampling.top_p <= 1 or sampling.max_new_tokens < 1:
            raise ValueError(f"need temperature >= 0, 0 < top_p <= 1 and max_new_tokens >= 1, got {sampling}")
        if max_turns_shown is not None and max_turns_shown < 1:
            raise ValueError(f"max_turns_shown must be >= 1 or None, got {max_turns_shown}")
        if history not in HISTORIES:
            raise ValueError(f"history must be one of {HISTORIES}, got {history!r}")
        if prompt not in PROMPTS:
            raise ValueError(f"prompt must be one of {sorted(PROMPTS)}, got {prompt!r}")
        self.history = history
        self.action_matching = check_matching(action_matching)
        self.backend, self.sampling = backend, sampling
        self.name = backend.name
        self.show_budget = self.reads_budget = bool(show_budget)
        self.list_admissible = bool(list_admissible)
        self.max_turns_shown = max_turns_shown
        self.system_prompt = PROMPTS[prompt] if system_prompt is None else system_prompt
        self.examples: tuple[Example, ...] = tuple(examples)
        self._episode = LLMEpisode(seed=0)

    @property
    def secret_settings(self) -> tuple[str, ...]:
        """Settings never recorded (results, run identity): the backend's own (``api_key``)."""
        return tuple(getattr(self.backend, "secret_settings", ()))

    @property
    def settings_without_effect(self) -> tuple[str, ...]:
        """Settings that say how replies are fetched, not what they are (a resume may change them): the backend's."""
        return tuple(getattr(self.backend, "settings_without_effect", ()))

    # -- the batched interface the evaluator and the trainer use --------------------------------
    def start(self, seed: int) -> LLMEpisode:
        return LLMEpisode(seed=int(seed))

    def messages(self, state: LLMEpisode, obs: str, info: dict[str, Any]) -> list[Message]:
        """The conversation the model sees for this turn (without changing the state)."""
        new = self._turn_message(obs, info)
        task = str(info.get("task", ""))
        if self.history == "append":
            first = self._first_shown(state)
            replies = [reply for _, reply in state.history[first:]]
            return chat_messages(task, [*zip(state.shown[first:], replies), (new, None)],
                                 system_prompt=self.system_prompt, examples=self.examples)
        return build_messages(task, [*state.history, (split_budget(obs, info)[0], None)], last_message=new,
                              max_turns_shown=self.max_turns_shown, system_prompt=self.system_prompt,
                              examples=self.examples)

    def act_batch(self, states: Sequence[LLMEpisode], observations: Sequence[str],
                  infos: Sequence[dict[str, Any]]) -> list[PolicyReply]:
        conversations = [self.messages(s, o, i) for s, o, i in zip(states, observations, infos)]
        seeds = [turn_seed(state.seed, len(state.history)) for state in states]
        options: dict[str, Any] = {}
        if getattr(self.backend, "reuses_prefixes", False):  # a local model keeps each episode's KV cache
            options["keys"] = [id(s) for s in states]
        if self.history == "append" and getattr(self.backend, "appends_ids", False):
            options["previous"] = [s.ids if self._first_shown(s) == s.first_shown else None for s in states]
        completions = self.backend.complete(conversations, seeds, self.sampling, **options)
        replies = []
        for state, obs, info, conversation, completion in zip(states, observations, infos, conversations, completions):
            reply = strip_imagined_observation(completion.text)
            action = parse_action(reply, info.get("admissible_commands"), matching=self.action_matching)
            written = written_command(reply)
            # the turn's own message, not conversation[-1]: with few-shot examples the first one shown opens
            # with the task line, which chat_messages adds again each time it lays the conversation out
            self._record(state, split_budget(obs, info)[0], self._turn_message(obs, info), completion, reply, action)
            replies.append(PolicyReply(action, completion.text, completion.prompt_tokens, completion.completion_tokens,
                                       completion, written_action=written if written != action else None))
        return replies

    def _turn_message(self, obs: str, info: dict[str, Any]) -> str:
        """This turn's user message (:func:`~agentgym_budget.policies.prompting.turn_message`)."""
        return turn_message(obs, info, show_budget=self.show_budget, list_commands=self.list_admissible)

    def _record(self, state: LLMEpisode, obs: str, shown: str, completion: Completion, reply: str,
                action: str) -> None:
        """Add this turn to the episode: what later turns show of it (``reply``: the completion's text
        without an imagined observation)."""
        if self.history != "append":
            state.history.append((obs, reply if self.history == "replies" else f"Action: {action}"))
            return
        state.first_shown = self._first_shown(state)
        state.history.append((obs, completion.text))  # the whole reply, as sampled
        state.shown.append(shown)
        if completion.prompt_ids is not None and completion.completion_ids is not None:
            state.ids = completion.prompt_ids + completion.completion_ids

    def _first_shown(self, state: LLMEpisode) -> int:
        """The first turn this turn's append-only conversation shows: past ``max_turns_shown``, the latest half."""
        turns = len(state.history) + 1 - state.first_shown  # with the one being asked for
        if self.max_turns_shown is None or turns <= self.max_turns_shown:
            return state.first_shown
        return len(state.history) + 1 - max(self.max_turns_shown // 2, 1)

    def release(self, state: LLMEpisode) -> None:
        """The episode is over: the backend may drop what it kept for it."""
        forget = getattr(self.backend, "forget", None)
        if forget is not None:
            forget(id(state))

    # -- the plain Policy interface, for one episode at a time ----------------------------------
    def reset(self, seed: int | None = None) -> None:
        self._episode = self.start(0 if seed is None else seed)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return self.act_batch([self._episode], [obs], [info])[0].action

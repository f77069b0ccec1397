"""The episode loop every caller shares, and when an episode is over.

* :func:`play_episodes` — up to ``concurrency`` episodes in flight, one ``act_batch`` call per
  round for all of them.  The evaluator's :class:`~agentgym_budget.eval.runner.EpisodeRunner`,
  the trainer's :func:`~agentgym_budget.train.rollout.collect_episodes` and the demonstrations
  of :mod:`~agentgym_budget.policies.demonstrations` (SFT data, the tiny model's tokenizer text)
  each play their episodes here, recording what they need in their own
  :class:`EpisodeInFlight`.
* :func:`episode_over` — the one definition of "done" (see :mod:`agentgym_budget.eval.outcome`,
  which re-exports it with the history of the differences it names).

It sits in the policies layer, below the evaluator, so that a policy-layer caller (the tiny
model's tokenizer corpus) can play episodes without a loop of its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from agentgym_budget.policies.base import BatchPolicy, PolicyReply

__all__ = ["EpisodeInFlight", "episode_over", "play_episodes"]


def episode_over(terminated: bool, truncated: bool, won: bool = False, *, stop_at_win: bool = False) -> bool:
    """Whether the episode has ended: the env ended it, the budget truncated it, or
    (``stop_at_win``) the task is ``won`` though the env plays on."""
    return bool(terminated or truncated or (stop_at_win and won))


class EpisodeInFlight(Protocol):
    """An episode being played, as :func:`play_episodes` sees it; what it records is its own."""

    state: Any  # the policy's state for this episode (from BatchPolicy.start)
    obs: Any
    info: dict[str, Any]
    done: bool

    def step(self, reply: PolicyReply) -> None:
        """Play the policy's reply in the env; set ``done`` once the episode is over."""


Episode = TypeVar("Episode", bound=EpisodeInFlight)


def play_episodes(policy: BatchPolicy, starts: Iterable[Callable[[], Episode]], concurrency: int,
                  on_end: Callable[[Episode], None], stop: Callable[[], bool] | None = None) -> None:
    """The episode loop of evaluation and training: up to ``concurrency`` episodes in flight, one
    ``act_batch`` call per round for all of them.

    ``starts`` are called in order, each when a place is free, and give the started episode
    (which resets its env); one that is already ``done`` (its env failed at reset) ends at once.
    Each ended episode is released by the policy, then passed to ``on_end``.  ``stop`` is asked
    before every round; once it answers true the episodes still running are abandoned.

    Example:
        >>> from agentgym_budget.policies.base import SequentialBatchPolicy
        >>> class Look:  # a plain policy
        ...     name, reads_budget = "look", False
        ...     def reset(self, seed=None): pass
        ...     def act(self, obs, info): return "look"
        >>> class Countdown:  # an episode of 3 turns that records its actions
        ...     def __init__(self, policy):
        ...         self.state, self.obs, self.info, self.done, self.actions = policy.start(0), "", {}, False, []
        ...     def step(self, reply):
        ...         self.actions.append(reply.action)
        ...         self.done = len(self.actions) == 3
        >>> policy = SequentialBatchPolicy(Look())
        >>> ended = []
        >>> play_episodes(policy, [lambda: Countdown(policy)] * 2, concurrency=2, on_end=ended.append)
        >>> [e.actions for e in ended]
        [['look', 'look', 'look'], ['look', 'look', 'look']]
    """
    pending = deque(starts)
    running: list[Episode] = []
    while (pending or running) and not (stop is not None and stop()):
        while pending and len(running) < concurrency:
            episode = pending.popleft()()
            if episode.done:
                _end(policy, episode, on_end)
            else:
                running.append(episode)
        if not running:
            continue
        replies = policy.act_batch([e.state for e in running], [e.obs for e in running], [e.info for e in running])
        for episode, reply in zip(running, replies):
            episode.step(reply)
            if episode.done:
                _end(policy, episode, on_end)
        running = [episode for episode in running if not episode.done]


def _end(policy: BatchPolicy, episode: Episode, on_end: Callable[[Episode], None]) -> None:
    if hasattr(policy, "release"):
        policy.release(episode.state)
    on_end(episode)

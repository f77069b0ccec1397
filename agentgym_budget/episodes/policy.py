"""What the episode runner needs of a policy: the :class:`Policy` protocol, its batched form, and policies by name.

A policy maps a text observation (and the env's ``info`` dict) to a text action.  The
evaluator calls :meth:`Policy.reset` with a seed at the start of every episode — the seed
depends only on (base seed, task, attempt), so a policy that draws all its randomness from
it is reproducible whatever process or order the episode runs in.

Example:
    >>> policy = make_policy("expert")
    >>> policy.reset(seed=0)
    >>> policy.act("You are in a room.", {"admissible_commands": ["look", "go north"], "expert_action": "go north"})
    'go north'

The protocol lives here, below the policies themselves (:mod:`agentgym_budget.policies`), because
the runner plays any policy and some policies are made by playing episodes (demonstrations, the
few-shot examples, the tiny model's corpus).  The registry names each built-in policy by an entry
point ``"module:factory"``, imported when the policy is first built (as the envs' registry does), so
a process that only unpickled a :class:`~agentgym_budget.episodes.runner.RolloutSpec` builds any of them.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "POLICIES",
    "BatchPolicy",
    "Policy",
    "PolicyReply",
    "SequentialBatchPolicy",
    "as_batch_policy",
    "make_policy",
    "policy_factory",
    "policy_names",
    "register_policy",
]


@runtime_checkable
class Policy(Protocol):
    """What the evaluator needs from a policy.

    * ``name``: a short label for tables and result files.
    * ``reads_budget``: ``True`` if the action choice may depend on the turn budget
      (``info["budget"]``/``info["turns_left"]`` or a budget shown in the observation).  The
      evaluator then runs one rollout per budget instead of reusing the longest one.
    * ``reset(seed)``: start a new episode; all randomness of the episode comes from ``seed``.
    * ``act(obs, info)``: the action for the current turn (called at every turn, first one
      included, with the observation and info returned by ``reset``/``step``).
    """

    name: str
    reads_budget: bool

    def reset(self, seed: int | None = None) -> None: ...

    def act(self, obs: str, info: dict[str, Any]) -> str: ...


@dataclass
class PolicyReply:
    """What a policy answered at one turn: the action, and for a language model what it said.

    ``text`` is the raw reply the action was parsed from (``None`` for non-LLM policies);
    token counts are ``None`` where the backend does not report them; ``completion`` is the
    backend's whole answer (a :class:`~agentgym_budget.policies.chat.Completion`: token ids and
    log-probs of a local model, for the trainer; the runner only carries it);
    ``written_action`` is the command as the reply wrote it when ``action`` (what is played)
    spells it otherwise (another case, an admissible command it misspells), else ``None``.
    """

    action: str
    text: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    completion: Any = field(default=None, repr=False)
    written_action: str | None = None


@runtime_checkable
class BatchPolicy(Protocol):
    """A policy that acts on many episodes at once (what the evaluator and the trainer drive).

    * ``start(seed)``: a new episode; returns that episode's state (history, random state),
      which the policy alone reads or changes.  All randomness of the episode comes from
      ``seed``, so an episode's actions do not depend on which other episodes share a batch.
    * ``act_batch(states, observations, infos)``: one :class:`PolicyReply` per episode, in order.
      A policy that talks to a server may run the requests concurrently inside this call.
    * optionally ``release(state)``: the episode is over (its state may be reused).

    A plain :class:`Policy` becomes one with :func:`as_batch_policy`.
    """

    name: str
    reads_budget: bool

    def start(self, seed: int) -> Any: ...

    def act_batch(
        self, states: Sequence[Any], observations: Sequence[str], infos: Sequence[dict[str, Any]]
    ) -> list[PolicyReply]: ...


class SequentialBatchPolicy:
    """A :class:`Policy` as a :class:`BatchPolicy`: one copy of the policy per episode in flight.

    Each episode's state is a copy of the policy, reset with the episode's seed and asked for
    its actions one by one, so the actions are exactly those of the policy run alone (batching
    a plain policy changes nothing but the order of calls).  The first episode in flight plays
    with the policy object itself; ``copy.deepcopy`` makes another only while more episodes
    are in flight than copies exist, and a copy handed back with :meth:`release` (the
    evaluator does, when an episode ends) serves the next one.  So one episode at a time never
    copies anything (a policy holding e.g. a torch model that cannot be deep-copied still runs).
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.reads_budget = policy.reads_budget
        self._free: list[Policy] = [policy]

    def start(self, seed: int) -> Policy:
        episode_policy = self._free.pop() if self._free else self._copy()
        episode_policy.reset(seed=seed)
        return episode_policy

    def _copy(self) -> Policy:
        try:
            return copy.deepcopy(self.policy)
        except Exception as e:
            raise TypeError(
                f"policy {self.name!r} cannot be copied for several episodes in flight ({type(e).__name__}: {e}); "
                "run one episode at a time (concurrency=1) or give it act_batch/start (a BatchPolicy)") from e

    def release(self, state: Policy) -> None:
        """The episode played with ``state`` is over: reuse its copy."""
        self._free.append(state)

    def act_batch(
        self, states: Sequence[Policy], observations: Sequence[str], infos: Sequence[dict[str, Any]]
    ) -> list[PolicyReply]:
        return [PolicyReply(state.act(obs, info)) for state, obs, info in zip(states, observations, infos)]


def as_batch_policy(policy: Policy | BatchPolicy) -> BatchPolicy:
    """``policy`` itself when it acts in batches, else a :class:`SequentialBatchPolicy` over it."""
    if hasattr(policy, "act_batch") and hasattr(policy, "start"):
        return policy  # type: ignore[return-value]
    return SequentialBatchPolicy(policy)


#: Policy factories by name (``make_policy(name, **kwargs)`` calls them): a factory, or the entry point
#: ``"module:factory"`` of a built-in one, imported when it is first built.
POLICIES: dict[str, Callable[..., Policy] | str] = {
    "random": "agentgym_budget.policies.baselines:RandomPolicy",
    "expert": "agentgym_budget.policies.baselines:ExpertPolicy",
    "noisy-expert": "agentgym_budget.policies.baselines:NoisyExpertPolicy",
    "hf": "agentgym_budget.policies.factories:make_hf_policy",  # torch and transformers: imported when built
    "openai": "agentgym_budget.policies.factories:make_openai_policy",  # openai: imported when built
}


def register_policy(name: str) -> Callable[[Callable[..., Policy]], Callable[..., Policy]]:
    """Class/function decorator: make a policy factory available as ``make_policy(name)``."""

    def decorator(factory: Callable[..., Policy]) -> Callable[..., Policy]:
        if name in POLICIES and POLICIES[name] is not factory:
            raise ValueError(f"a policy named {name!r} is already registered ({POLICIES[name]!r})")
        POLICIES[name] = factory
        return factory

    return decorator


def policy_names() -> list[str]:
    """The registered policy names, sorted."""
    return sorted(POLICIES)


def policy_factory(name: str) -> Callable[..., Policy]:
    """The factory registered as ``name`` (a built-in's module is imported here, once).

    Example:
        >>> policy_factory("expert").__name__
        'ExpertPolicy'
        >>> policy_factory("nope")
        Traceback (most recent call last):
        ...
        ValueError: unknown policy 'nope'; registered policies: expert, hf, noisy-expert, openai, random
    """
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; registered policies: {', '.join(policy_names())}") from None
    if isinstance(factory, str):
        module, _, attribute = factory.partition(":")
        factory = POLICIES[name] = getattr(importlib.import_module(module), attribute)
    return factory


def make_policy(name: str, **kwargs: Any) -> Policy:
    """Build the policy registered as ``name`` with ``kwargs``."""
    return policy_factory(name)(**kwargs)

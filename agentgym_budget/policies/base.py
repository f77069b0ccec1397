"""The :class:`Policy` protocol and the registry of policies by name.

A policy maps a text observation (and the env's ``info`` dict) to a text action.  The
evaluator calls :meth:`Policy.reset` with a seed at the start of every episode — the seed
depends only on (base seed, task, attempt), so a policy that draws all its randomness from
it is reproducible whatever process or order the episode runs in.

Example:
    >>> from agentgym_budget.policies import make_policy
    >>> policy = make_policy("expert")
    >>> policy.reset(seed=0)
    >>> policy.act("You are in a room.", {"admissible_commands": ["look", "go north"], "expert_action": "go north"})
    'go north'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["POLICIES", "Policy", "make_policy", "policy_names", "register_policy"]


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


#: Policy factories by name (``make_policy(name, **kwargs)`` calls them).
POLICIES: dict[str, Callable[..., Policy]] = {}


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


def make_policy(name: str, **kwargs: Any) -> Policy:
    """Build the policy registered as ``name`` with ``kwargs``."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; registered policies: {', '.join(policy_names())}") from None
    return factory(**kwargs)


def admissible_of(info: dict[str, Any]) -> Sequence[str]:
    """``info["admissible_commands"]``, with a clear error when the env does not provide it."""
    try:
        return info["admissible_commands"]
    except KeyError:
        raise KeyError("this policy needs info['admissible_commands'], which the env did not provide") from None

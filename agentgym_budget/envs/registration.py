"""Every environment agentgym_budget registers with Gymnasium, in one place.

Each :class:`EnvFamily` ``X`` registers two ids:

* ``X-v0`` — the bare text env, with the backend's default step limit (``TimeLimit``);
* ``X-Budget-v0`` — the same env under :class:`~agentgym_budget.wrappers.TurnBudget`;
  ``budget=`` and the other ``TurnBudget`` options pass through ``gym.make`` kwargs, every
  other kwarg goes to the env.

Example:
    >>> import gymnasium as gym
    >>> import agentgym_budget
    >>> env = gym.make("ALFWorld-Budget-v0", budget="mix:10,20")
    >>> _, info = env.reset(seed=0)
    >>> info["budget"] in (10, 20)
    True
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from agentgym_budget._optional import is_installed
from agentgym_budget.wrappers.budget import TurnBudget

__all__ = ["FAMILIES", "EnvFamily", "eval_kwargs_of", "family_of", "make_budget_env", "register_envs"]

BUDGET_OPTIONS = frozenset(inspect.signature(TurnBudget.__init__).parameters) - {"self", "env"}


@dataclass(frozen=True)
class EnvFamily:
    """One environment family: how to build it, what it needs, its default limits."""

    name: str
    entry_point: str
    description: str
    extra: str | None = None  # the pip extra it needs; None = runs on a bare install
    requires: tuple[str, ...] = ()  # modules that must import for the backend to run
    max_episode_steps: int = 50
    default_budget: str = "fixed:50"
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: env kwargs the evaluator adds unless given: what the behaviour metrics need (full expert plans).
    eval_kwargs: dict[str, Any] = field(default_factory=dict)
    #: the ``split=`` value of the family's held-out tasks (``None``: the family has no split, e.g. KeyDoor).
    held_out_split: str | None = None

    @property
    def ids(self) -> tuple[str, str]:
        return f"{self.name}-v0", f"{self.name}-Budget-v0"

    @property
    def installed(self) -> bool:
        return all(is_installed(module) for module in self.requires)


FAMILIES: tuple[EnvFamily, ...] = (
    EnvFamily(
        name="ALFWorld",
        entry_point="agentgym_budget.envs.alfworld.env:ALFWorldEnv",
        description="ALFWorld household tasks (6 task types), bundled generated games; "
        "engine='fast' (pure Python) or 'textworld' (the real engine, extra 'alfworld')",
        eval_kwargs={"expert_plan_horizon": 100},
        held_out_split="valid_unseen",
    ),
    EnvFamily(
        name="KeyDoor",
        entry_point="agentgym_budget.envs.toy.key_door:KeyDoorEnv",
        description="toy: take the key, open the door of the task's colour (3 commands, 2-turn expert); "
        "for tests and learning checks",
        max_episode_steps=8,
        default_budget="fixed:4",
    ),
    EnvFamily(
        name="WebShop",
        entry_point="agentgym_budget.envs.webshop.env:WebShopEnv",
        description="WebShop text mode (search[...]/click[...]) over a bundled generated 3,000-product "
        "catalog or upstream's items_*.json, BM25 search (bm25s), upstream's purchase reward",
        extra="webshop",
        requires=("bm25s", "Stemmer", "rapidfuzz"),
        max_episode_steps=15,
        default_budget="fixed:15",
        held_out_split="test",
    ),
    EnvFamily(
        name="TextWorld",
        entry_point="agentgym_budget.envs.textworld.env:TextWorldEnv",
        description="any TextWorld-made game file(s) (game_file=: .z8 + its .json, a directory or a list) "
        "on the real engine; default: a shipped Treasure Hunter game",
        extra="textworld",
        requires=("textworld",),
    ),
    EnvFamily(
        name="TextWorld-Cooking",
        entry_point="agentgym_budget.envs.textworld.env:TextWorldChallengeEnv",
        description="TextWorld tw-cooking games (level 1-10, split, n_games), generated offline and cached",
        extra="textworld",
        requires=("textworld",),
        kwargs={"challenge": "cooking"},
        held_out_split="valid",
    ),
    EnvFamily(
        name="TextWorld-CoinCollector",
        entry_point="agentgym_budget.envs.textworld.env:TextWorldChallengeEnv",
        description="TextWorld coin collector games (level 1-300, split, n_games), generated offline and cached",
        extra="textworld",
        requires=("textworld",),
        kwargs={"challenge": "coin_collector"},
        held_out_split="valid",
    ),
    EnvFamily(
        name="TextWorld-TreasureHunter",
        entry_point="agentgym_budget.envs.textworld.env:TextWorldChallengeEnv",
        description="TextWorld treasure hunter games (level 1-30, split, n_games), generated offline and cached",
        extra="textworld",
        requires=("textworld",),
        kwargs={"challenge": "treasure_hunter"},
        held_out_split="valid",
    ),
    EnvFamily(
        name="ScienceWorld",
        entry_point="agentgym_budget.envs.scienceworld.env:ScienceWorldEnv",
        description="ScienceWorld's 30 science tasks (task=, variation=, split=) on its bundled simulator "
        "(Java); gold action sequence as expert",
        extra="scienceworld",
        requires=("scienceworld",),
        max_episode_steps=100,
        default_budget="fixed:100",
        held_out_split="dev",
    ),
)


def family_of(env_id: str) -> EnvFamily:
    """The family an id (``X-v0`` or ``X-Budget-v0``) belongs to."""
    for family in FAMILIES:
        if env_id in family.ids:
            return family
    known = ", ".join(i for f in FAMILIES for i in f.ids)
    raise gym.error.NameNotFound(f"unknown agentgym_budget env id {env_id!r}; known ids: {known}")


def eval_kwargs_of(env_id: str) -> dict[str, Any]:
    """The env kwargs the evaluator adds for ``env_id`` (``{}`` for ids that are not ours)."""
    try:
        return dict(family_of(env_id).eval_kwargs)
    except gym.error.NameNotFound:
        return {}


def make_budget_env(base_id: str, **kwargs: Any) -> TurnBudget:
    """Entry point of the ``X-Budget-v0`` ids: ``TurnBudget(X env, budget options)``."""
    budget_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in BUDGET_OPTIONS}
    base_spec = gym.spec(base_id)
    env = load_env_creator(base_spec.entry_point)(**{**base_spec.kwargs, **kwargs})
    return TurnBudget(env, **budget_kwargs)


def register_envs() -> None:
    """Register ``X-v0`` and ``X-Budget-v0`` for every family (idempotent)."""
    for family in FAMILIES:
        base_id, budget_id = family.ids
        if base_id in gym.registry:
            continue
        gym.register(
            id=base_id,
            entry_point=family.entry_point,
            max_episode_steps=family.max_episode_steps,
            kwargs=dict(family.kwargs),
        )
        gym.register(
            id=budget_id,
            entry_point="agentgym_budget.envs.registration:make_budget_env",
            kwargs={"base_id": base_id, "budget": family.default_budget},
        )

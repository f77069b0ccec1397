"""Every environment agentgym_budget registers with Gymnasium, in one place.

Each :class:`EnvFamily` ``X`` registers two ids:

* ``X-v0`` — the bare text env, with the backend's default step limit (``TimeLimit``);
* ``X-Budget-v0`` — the same env under :class:`~agentgym_budget.wrappers.TurnBudget`;
  ``budget=`` and the other ``TurnBudget`` options pass through ``gym.make`` kwargs, every
  other kwarg goes to the env.

:func:`make_budget_env` is the one way the package wraps an env in a ``TurnBudget``: the
``X-Budget-v0`` ids, the evaluator, the trainer and the integrations all call it.

Example:
    >>> import gymnasium as gym
    >>> import agentgym_budget
    >>> env = gym.make("ALFWorld-Budget-v0", budget="mix:10,20")
    >>> _, info = env.reset(seed=0)
    >>> info["budget"] in (10, 20)
    True
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator

from agentgym_budget._optional import is_installed
from agentgym_budget.text import BUDGET_ID_SUFFIX, family_name
from agentgym_budget.wrappers.budget import BUDGET_OPTIONS, TurnBudget
from agentgym_budget.wrappers.budget_spec import BudgetSpec
from agentgym_budget.wrappers.process_reward import register_subgoal_detector

__all__ = [
    "FAMILIES",
    "MULTI_AGENT_FAMILIES",
    "EnvFamily",
    "MultiAgentFamily",
    "budget_env_id",
    "env_creator",
    "env_settings",
    "eval_kwargs_of",
    "family_of",
    "make_budget_env",
    "make_multi_agent_env",
    "plain_defaults",
    "register_envs",
]

_BUDGET_ENTRY_POINT = "agentgym_budget.envs.registration:make_budget_env"


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
    #: the ``split=`` value of the family's held-out tasks (``None``: the family has no split, e.g. a single TextWorld game).
    held_out_split: str | None = None

    @property
    def ids(self) -> tuple[str, str]:
        return f"{self.name}-v0", f"{self.name}{BUDGET_ID_SUFFIX}-v0"

    @property
    def installed(self) -> bool:
        return all(is_installed(module) for module in self.requires)


FAMILIES: tuple[EnvFamily, ...] = (
    EnvFamily(
        name="ALFWorld",
        entry_point="agentgym_budget.envs.alfworld.env:ALFWorldEnv",
        description="ALFWorld household tasks (6 task types), bundled generated games; "
        "engine='fast' (pure Python) or 'textworld' (the real engine, extra 'alfworld')",
        # the whole plan, as long as upstream's expert may play (bundled plans reach 163 actions)
        eval_kwargs={"expert_plan_horizon": 200},
        held_out_split="valid_unseen",
    ),
    EnvFamily(
        name="KeyDoor",
        entry_point="agentgym_budget.envs.toy.key_door:KeyDoorEnv",
        description="toy: take the key, open the door of the task's colour (3 commands, 2-turn expert); "
        "for tests and learning checks",
        max_episode_steps=8,
        default_budget="fixed:4",
        held_out_split="test",
    ),
    EnvFamily(
        name="KeyDoorRooms",
        entry_point="agentgym_budget.envs.toy.key_door_rooms:KeyDoorRoomsEnv",
        description="toy: KeyDoor's task with the key and the doors in rooms along a corridor of 3-5 rooms "
        "(at most 4 commands, 4-6-turn expert); for budget-sensitive learning checks",
        max_episode_steps=16,
        default_budget="fixed:8",
        held_out_split="test",
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


@dataclass(frozen=True)
class MultiAgentFamily:
    """A multi-agent (PettingZoo) env family.  PettingZoo has no registry, so ours makes it by id.

    ``parallel_entry_point`` builds the ``ParallelEnv``, ``aec_entry_point`` the AEC env; turn
    budgets come from ``agentgym_budget.integrations.pettingzoo_budget`` (``ParallelTurnBudget``).
    """

    name: str
    parallel_entry_point: str
    aec_entry_point: str
    description: str
    extra: str | None = None
    requires: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.name}-v0"

    @property
    def installed(self) -> bool:
        return all(is_installed(module) for module in self.requires)


MULTI_AGENT_FAMILIES: tuple[MultiAgentFamily, ...] = (
    MultiAgentFamily(
        name="SharedHousehold",
        parallel_entry_point="agentgym_budget.envs.household.shared_household:parallel_env",
        aec_entry_point="agentgym_budget.envs.household.shared_household:env",
        description="multi-agent household: 1-4 agents share one put-objects-on-the-table task (PettingZoo "
        "Parallel and AEC; n_agents=, n_objects=); wrap in ParallelTurnBudget for a turn budget",
        extra="multiagent",
        requires=("pettingzoo",),
    ),
)


def make_multi_agent_env(env_id: str, api: Literal["parallel", "aec"] = "parallel", **kwargs: Any) -> Any:
    """Make a multi-agent env by id: the PettingZoo ``ParallelEnv`` (or, ``api="aec"``, the AEC env).

    Example:
        >>> env = make_multi_agent_env("SharedHousehold-v0", n_agents=3)  # needs the multiagent extra
        >>> env.reset(seed=0)[0].keys()
        dict_keys(['alice', 'bob', 'carol'])
    """
    if api not in ("parallel", "aec"):
        raise ValueError(f"api must be 'parallel' or 'aec', got {api!r}")
    for family in MULTI_AGENT_FAMILIES:
        if family.id == env_id:
            entry_point = family.parallel_entry_point if api == "parallel" else family.aec_entry_point
            return load_env_creator(entry_point)(**kwargs)
    known = ", ".join(f.id for f in MULTI_AGENT_FAMILIES)
    raise ValueError(f"unknown multi-agent env id {env_id!r}; known ids: {known}")


def family_of(env_id: str) -> EnvFamily:
    """The family an id (``X-v0`` or ``X-Budget-v0``) belongs to."""
    for family in FAMILIES:
        if family.name == family_name(env_id) and env_id in family.ids:
            return family
    known = ", ".join(i for f in FAMILIES for i in f.ids)
    raise gym.error.NameNotFound(f"unknown agentgym_budget env id {env_id!r}; known ids: {known}")


def eval_kwargs_of(env_id: str) -> dict[str, Any]:
    """The env kwargs the evaluator adds for ``env_id`` (``{}`` for ids that are not ours)."""
    try:
        return dict(family_of(env_id).eval_kwargs)
    except gym.error.NameNotFound:
        return {}


def env_settings(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every setting of the env ``make_budget_env(env_id, ..., **kwargs)`` builds, defaults included:
    its constructor's plain-valued defaults, then the registration's kwargs, then ``kwargs``.

    What a results file records, so a reader sees the settings a run left at their defaults
    (ALFWorld's ``expert_type``, ``engine``) as well as those it gave.

    Example:
        >>> import agentgym_budget
        >>> settings = env_settings("ALFWorld-Budget-v0", {"expert_plan_horizon": 200})
        >>> settings["expert_type"], settings["engine"], settings["expert_plan_horizon"]
        ('upstream', 'fast', 200)
    """
    spec = gym.spec(env_id)
    if spec.entry_point == _BUDGET_ENTRY_POINT:  # an X-Budget-v0 id: the settings of its env
        return env_settings(spec.kwargs["env_id"], kwargs)
    try:
        creator: Callable[..., Any] | None = env_creator(spec)
    except (ImportError, AttributeError):  # a backend whose extra is missing: making it will say so
        creator = None
    return {**plain_defaults(creator), **spec.kwargs, **kwargs}


def env_creator(spec: EnvSpec) -> Callable[..., Any]:
    """The class or function ``spec``'s entry point names (gymnasium takes an ``"module:name"`` string or
    the callable itself); an error, as ``gym.make`` gives, when it has none.

    Example:
        >>> import agentgym_budget
        >>> env_creator(gym.spec("KeyDoor-v0")).__name__
        'KeyDoorEnv'
    """
    entry_point = spec.entry_point
    if entry_point is None:
        raise gym.error.Error(f"{spec.id} registered but entry_point is not specified")
    return load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point


def plain_defaults(source: Callable[..., Any] | None) -> dict[str, Any]:
    """The parameters of ``source`` (a class or function) whose default is a plain value: a default
    object (e.g. ``Sampling()``) is what the caller replaces, not a setting to record.

    Example:
        >>> def make(name: str, p: float = 0.5, sampling: object = object(), shape: tuple = (1, 2)): ...
        >>> plain_defaults(make), plain_defaults(None)
        ({'p': 0.5, 'shape': (1, 2)}, {})
    """
    try:
        parameters = inspect.signature(source).parameters.values() if source is not None else ()
    except (TypeError, ValueError):  # no signature to read (a builtin)
        return {}
    return {p.name: p.default for p in parameters
            if p.default is not inspect.Parameter.empty
            and isinstance(p.default, (str, int, float, bool, type(None), tuple))}


def budget_env_id(env_id: str) -> str | None:
    """The ``X-Budget-v0`` id of a registered family's id, ``None`` for other ids."""
    try:
        return family_of(env_id).ids[1]
    except gym.error.NameNotFound:
        return None


def make_budget_env(env_id: str, budget: BudgetSpec | None = None, **kwargs: Any) -> TurnBudget:
    """``env_id``'s env under a :class:`TurnBudget` of ``budget`` and no other step limit.

    ``env_id`` is any registered text env id; an ``X-Budget-v0`` id stands for its ``X-v0``
    env with its default budget.  Among ``kwargs``, the ``TurnBudget`` options
    (``show_budget``, ``budget_template``, ...) go to the wrapper, the rest to the env.  The
    budget is the episode's only limit (``TurnBudget`` raises the env's own ``TimeLimit`` to
    it).  This is the entry point of the ``X-Budget-v0`` ids, so ``gym.make("X-Budget-v0", ...)``
    builds the same env.

    Example:
        >>> import agentgym_budget
        >>> env = make_budget_env("KeyDoor-v0", budget="mix:2,3", show_budget=True)
        >>> _, info = env.reset(seed=0)
        >>> type(env).__name__, info["budget"] in (2, 3), make_budget_env("KeyDoor-Budget-v0").budget
        ('TurnBudget', True, 4)
    """
    spec = gym.spec(env_id)
    if spec.entry_point == _BUDGET_ENTRY_POINT:  # an X-Budget-v0 id: its env, its default budget
        options = {**spec.kwargs, **kwargs}
        env_id = options.pop("env_id")
        budget = options.pop("budget") if budget is None else budget
        options.pop("budget", None)
        return make_budget_env(env_id, budget, **options)
    if budget is None:
        raise ValueError(f"make_budget_env({env_id!r}) needs budget= (an int, a budget spec or a BudgetSchedule)")
    budget_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in BUDGET_OPTIONS}
    bare = dataclasses.replace(spec, order_enforce=False)
    return TurnBudget(gym.make(bare, disable_env_checker=True, **kwargs), budget, **budget_kwargs)


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
            entry_point=_BUDGET_ENTRY_POINT,
            kwargs={"env_id": base_id, "budget": family.default_budget},
        )
    from agentgym_budget.envs.alfworld.subgoals import alfworld_subgoals  # cheap: no engine import

    register_subgoal_detector("ALFWorld", alfworld_subgoals)

"""SkyRL-gym (``skyrl-gym``): our budgeted text envs as SkyRL ``BaseTextEnv`` environments.

:func:`register_skyrl_envs` registers every ``X-Budget-v0`` id with ``skyrl_gym`` (SkyRL's own
registry), so a SkyRL dataset row's ``env_class: ALFWorld-Budget-v0`` makes a
:class:`SkyRLBudgetEnv`.  It follows SkyRL's generator loop (``skyrl_gym.make(env_class,
env_config=..., extras=...)``, ``init(prompt)``, ``step(llm_output)`` until ``done``,
``get_metrics()``, ``close()``):

* ``env_config`` (SkyRL's per-env-class config, a mapping or ``DictConfig``): ``budget`` (any
  budget spec; default: the id's), ``action_matching`` (``exact``, the default, or ``fuzzy``: see
  below) and ``make_budget_env`` kwargs (``show_budget``, env options).
* ``extras`` (the dataset row's fields): ``seed`` (the episode's task and budget draw),
  ``budget`` (force this episode's budget), ``task``/other keys under ``options``.  SkyRL's
  generator also passes ``max_turns``; the turn budget is the episode's limit, so it is not used.
* ``init`` appends the first observation (with the admissible commands and, with
  ``show_budget=True``, the remaining budget) as a user message.  ``step`` reads the command from
  the model's reply (``Action: <command>``, :func:`~agentgym_budget.policies.prompting.parse_action`:
  played as written, in the admissible spelling when it is one up to case, whitespace and trailing
  punctuation; near misses only with ``action_matching: fuzzy``, which a trainer should not use, as
  its loss must score the tokens that determined the action) and returns the next observation;
  ``reward`` is the env's (won → 1, plus any ``ProcessReward``).
* ``done`` is ``terminated or truncated``: SkyRL's step output has one flag, so
  ``metadata["terminated"]`` / ``metadata["truncated"]`` tell which (with ``budget``, ``turn``,
  ``turns_left``, ``won``, the parsed ``command``); ``get_metrics()`` reports the episode.

Example:
    >>> import skyrl_gym
    >>> from agentgym_budget.integrations.skyrl import register_skyrl_envs
    >>> "ALFWorld-Budget-v0" in register_skyrl_envs()
    True
    >>> env = skyrl_gym.make("KeyDoor-Budget-v0", env_config={"budget": "mix:2,3"}, extras={"seed": 0, "budget": 2})
    >>> prompt, meta = env.init([{"role": "system", "content": "Play the game."}])
    >>> prompt[-1]["role"], meta["budget"]
    ('user', 2)
    >>> out = env.step("Action: look")
    >>> out = env.step("Action: look")
    >>> out["done"], out["metadata"]["truncated"], out["metadata"]["terminated"], out["observations"]
    (True, True, False, [])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.envs.registration import FAMILIES
from agentgym_budget.integrations.session import BudgetSession, Wrapper, format_turn
from agentgym_budget.policies.prompting import check_matching, parse_action

_WHAT = "the SkyRL-gym adapter"
skyrl_gym = require("skyrl_gym", "skyrl", _WHAT)

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402

__all__ = ["SkyRLBudgetEnv", "register_skyrl_envs"]

class SkyRLBudgetEnv(BaseTextEnv):
    """A SkyRL ``BaseTextEnv`` over one budgeted text env (see the module docstring).

    Args:
        env_config: ``budget``, ``action_matching`` and ``make_budget_env`` kwargs (``env_id`` too, unless given).
        extras: the episode: ``seed``, ``budget`` (forced), ``options`` (env reset options).
        env_id: the registered id (set by :func:`register_skyrl_envs`).
        wrappers: extra wrappers on top of the budgeted env (e.g. ``ProcessReward``).
    """

    def __init__(self, env_config: Mapping[str, Any] | None = None, extras: Mapping[str, Any] | None = None,
                 env_id: str | None = None, wrappers: Iterable[Wrapper] = ()) -> None:
        super().__init__()
        config = _plain(env_config)
        env_id = config.pop("env_id", env_id)
        if env_id is None:
            raise ValueError("SkyRLBudgetEnv needs env_id (register_skyrl_envs() sets it per id)")
        budget = config.pop("budget", None)
        self.list_commands = bool(config.pop("list_commands", True))
        self.action_matching = check_matching(config.pop("action_matching", "exact"))
        self.session = BudgetSession(env_id, budget, wrappers=wrappers, **config)
        self.extras = _plain(extras)
        self.max_turns = self.session.turn_budget.schedule.max_budget  # for code that reads BaseTextEnv.max_turns

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Reset the env; the prompt with the first observation appended as a user message."""
        options = self.extras.get("options")
        self.session.reset(seed=self.extras.get("seed"), budget=self.extras.get("budget"), options=options,
                           progress=self.extras.get("progress"))
        self.turns = 0
        first = {"role": "user", "content": format_turn(self.session, self.list_commands)}
        return [*prompt, first], self._metadata()

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Play the command in ``action`` (the model's reply); the next observation, reward, done."""
        command = parse_action(action, self.session.admissible_commands, matching=self.action_matching)
        self.session.step(command)
        self.turns += 1
        done = self.session.done
        observations = [] if done else [{"role": "user", "content": format_turn(self.session, self.list_commands)}]
        return BaseTextEnvStepOutput(observations=observations, reward=self.session.reward, done=done,
                                     metadata={**self._metadata(), "command": command}, postprocessed_action=None)

    def get_metrics(self) -> dict[str, Any]:
        """The episode, numeric (SkyRL averages these over episodes): budget, turns, won, return, how it ended."""
        s = self.session.summary()
        return {k: float(s[k]) for k in ("budget", "turns", "won", "terminated", "truncated", "return")}

    def close(self) -> None:
        self.session.close()

    def _metadata(self) -> dict[str, Any]:
        return {**self.session.public_info(), "terminated": self.session.terminated,
                "truncated": self.session.truncated}


def register_skyrl_envs(env_ids: Iterable[str] | None = None) -> list[str]:
    """Register ``env_ids`` (default: every family's ``X-Budget-v0`` id) with ``skyrl_gym``; idempotent."""
    ids = list(env_ids) if env_ids is not None else [family.ids[1] for family in FAMILIES]
    for env_id in ids:
        if env_id not in skyrl_gym.registry:
            skyrl_gym.register(id=env_id, entry_point=f"{__name__}:SkyRLBudgetEnv", kwargs={"env_id": env_id})
    return ids


def _plain(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A plain ``dict`` copy of a mapping or an omegaconf ``DictConfig`` (what SkyRL passes)."""
    if config is None:
        return {}
    from omegaconf import DictConfig, OmegaConf  # a skyrl-gym dependency

    if isinstance(config, DictConfig):
        return dict(OmegaConf.to_container(config, resolve=True))
    return dict(config)

"""SkyRL-gym (``skyrl-gym``): our budgeted text envs as SkyRL ``BaseTextEnv`` environments.

:func:`register_skyrl_envs` registers every ``X-Budget-v0`` id with ``skyrl_gym`` (SkyRL's own
registry), so a SkyRL dataset row's ``env_class: ALFWorld-Budget-v0`` makes a
:class:`SkyRLBudgetEnv`.  It follows SkyRL's generator loop (``skyrl_gym.make(env_class,
env_config=..., extras=...)``, ``init(prompt)``, ``step(llm_output)`` until ``done``,
``get_metrics()``, ``close()``):

* ``env_config`` (SkyRL's per-env-class config, a mapping or ``DictConfig``): ``budget`` (any
  budget spec; default: the id's), ``action_matching`` (``exact``, the default, or ``fuzzy``: see
  below), ``list_commands``, ``system_prompt``, ``few_shot_env`` / ``few_shot_seed`` /
  ``few_shot_candidates`` (as ``LLMPolicy``'s: the evaluator's worked example before the first
  turn), ``process_reward`` (a :class:`~agentgym_budget.wrappers.ProcessReward`
  on top: a signal name, or a mapping of its arguments such as ``{signal: subgoal, coef: 0.1}``),
  ``step_timeout_s`` (a deadline per env call: a hung env is a fault, see below),
  the ``TurnBudget`` options (``show_budget``, ``budget_template``, a curriculum's
  ``progress_unit``, ...) and the env's constructor arguments.  Any other key is refused with a
  one-line ``ValueError`` naming the known ones (a typo would otherwise be silently ignored by a
  SkyRL config, or fail deep inside the env).
* ``extras`` (the dataset row's fields): ``seed`` (the episode's task and budget draw),
  ``budget`` (force this episode's budget), ``task``/other keys under ``options``,
  ``progress`` (curriculum progress; see below).  SkyRL's generator also passes ``max_turns``;
  the turn budget is the episode's limit, so it is not used.
* **Curriculum progress.**  SkyRL makes a fresh env for every trajectory and never passes a
  progress, so a curriculum budget would stay at its start.  Each env therefore reads a
  process-wide counter kept per (env id, ``env_config``) — :func:`shared_progress` — that counts
  the episodes started (or, for a ``...steps`` curriculum, the steps taken) by every env of that
  key in this process: SkyRL's generator makes its envs in its own process, so the curriculum
  follows the training run.  ``extras["progress"]`` overrides it (for a trainer that knows the
  global progress, e.g. across several generator processes, each of which counts only its own);
  :func:`reset_shared_progress` starts the counters again.
* ``init`` appends the first turn's user message as the evaluator and the trainer render it
  (:func:`~agentgym_budget.policies.prompting.turn_message`: the observation, with
  ``show_budget=True`` the remaining budget, the admissible commands) and, when the dataset's prompt
  has no system message, puts theirs first (the instructions, ``env_config["system_prompt"]``,
  then the task).  ``step`` reads the command from
  the model's reply (``Action: <command>``, :func:`~agentgym_budget.policies.prompting.parse_action`:
  played as written, in the admissible spelling when it is one up to case, whitespace and trailing
  punctuation; near misses only with ``action_matching: fuzzy``, which a trainer should not use, as
  its loss must score the tokens that determined the action) and returns the next observation;
  ``reward`` is the env's (won → 1, plus any ``ProcessReward``).
* ``done`` is ``terminated or truncated``: SkyRL's step output has one flag, so
  ``metadata["terminated"]`` / ``metadata["truncated"]`` tell which (with ``budget``, ``turn``,
  ``turns_left``, ``won``, the parsed ``command``); ``get_metrics()`` reports the episode.
* **An env that raises** (in ``init`` or ``step``) costs its trajectory, never the training
  step: SkyRL's generator gathers a step's rollouts with ``asyncio.gather``, so an exception out
  of one env would abort them all (SkyRL #1613).  The session's fault policy
  (:mod:`~agentgym_budget.integrations.session`) replays the episode once in a fresh env (a
  one-off fault costs nothing); if that fails too the trajectory ends: ``done`` with reward 0,
  ``metadata["env_failure"]`` the one-line error, and ``get_metrics()`` reports ``failed`` = 1
  and ``env_failures`` (the env's raises, averaged by SkyRL into a rate).  SkyRL 0.4 cannot mask
  one trajectory's loss, so its 0 counts in its group's baseline like a lost game: watch
  ``failed``; a generator that skips failed rollouts (``skip_failed_rollouts``, proposed in
  SkyRL #1613) would be the better home for it.

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
    >>> from agentgym_budget.integrations.skyrl import reset_shared_progress, shared_progress
    >>> reset_shared_progress()
    >>> config = {"budget": "curriculum:8->2@6", "process_reward": {"signal": "invalid_penalty", "coef": 0.5}}
    >>> budgets = []
    >>> for seed in range(4):  # a fresh env per trajectory, as SkyRL's generator makes them
    ...     env = skyrl_gym.make("KeyDoor-Budget-v0", env_config=config, extras={"seed": seed})
    ...     budgets.append(env.init([])[1]["budget"])
    >>> budgets, shared_progress("KeyDoor-Budget-v0", config)
    ([8, 7, 6, 5], 4.0)
    >>> skyrl_gym.make("KeyDoor-Budget-v0", env_config={"show_budgte": True}, extras={})
    Traceback (most recent call last):
    ...
    ValueError: unknown env_config key 'show_budgte' for KeyDoor-Budget-v0; known: action_matching, ...
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any, cast

import gymnasium as gym

from agentgym_budget._optional import require
from agentgym_budget.envs.registration import FAMILIES, env_creator
from agentgym_budget.integrations.session import (
    BudgetSession, ProgressCounters, SharedProgress, Wrapper, format_turn, opening_messages, process_reward_wrapper)
from agentgym_budget.policies.few_shot import few_shot_examples
from agentgym_budget.policies.prompting import SYSTEM_PROMPT, check_matching, parse_action
from agentgym_budget.wrappers.budget import BUDGET_OPTIONS

_WHAT = "the SkyRL-gym adapter"
skyrl_gym = require("skyrl_gym", "skyrl", _WHAT)

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402

__all__ = ["SkyRLBudgetEnv", "register_skyrl_envs", "reset_shared_progress", "shared_progress"]

#: ``env_config`` keys this adapter reads itself (the rest go to ``make_budget_env``).
ADAPTER_KEYS = frozenset({"env_id", "budget", "action_matching", "list_commands", "process_reward",
                          "step_timeout_s", "system_prompt", "few_shot_env", "few_shot_seed", "few_shot_candidates"})

_progress = ProgressCounters()  # shared_progress's counters (thread-safe: SkyRL may init envs from an executor's threads)


class SkyRLBudgetEnv(BaseTextEnv):
    """A SkyRL ``BaseTextEnv`` over one budgeted text env (see the module docstring).

    Args:
        env_config: ``budget``, ``action_matching``, ``list_commands``, ``process_reward`` and ``make_budget_env``
            kwargs (``env_id`` too, unless given); other keys are refused.
        extras: the episode: ``seed``, ``budget`` (forced), ``options`` (env reset options), ``progress``
            (curriculum progress; default: :func:`shared_progress`'s counter, advanced by this episode).
        env_id: the registered id (set by :func:`register_skyrl_envs`).
        wrappers: extra wrappers on top of the budgeted env (e.g. ``ProcessReward``).
    """

    def __init__(self, env_config: Mapping[str, Any] | None = None, extras: Mapping[str, Any] | None = None,
                 env_id: str | None = None, wrappers: Iterable[Wrapper] = ()) -> None:
        super().__init__()
        config = _plain(env_config)
        env_id = config.get("env_id", env_id)
        if env_id is None:
            raise ValueError("SkyRLBudgetEnv needs env_id (register_skyrl_envs() sets it per id)")
        _check_keys(env_id, config)
        self.progress_key = _progress_key(env_id, config)
        config.pop("env_id", None)
        budget = config.pop("budget", None)
        self.list_commands = bool(config.pop("list_commands", True))
        self.system_prompt = str(config.pop("system_prompt", SYSTEM_PROMPT))
        self.action_matching = check_matching(config.pop("action_matching", "exact"))
        self.examples = few_shot_examples(config.pop("few_shot_env", None), config.pop("few_shot_seed", 0),
                                          config.pop("few_shot_candidates", 1), list_commands=self.list_commands)
        process_reward = config.pop("process_reward", None)
        if process_reward is not None:
            wrappers = [*wrappers, process_reward_wrapper(process_reward, "env_config")]
        # SkyRL makes a fresh env per trajectory: the session counts its curriculum on this config's
        # process-wide counter (an extras["progress"] passed to reset still wins)
        self.session = BudgetSession(env_id, budget, wrappers=wrappers, shared_progress=_counter(self.progress_key),
                                     **config)
        self.extras = _plain(extras)
        self.max_turns = self.session.turn_budget.schedule.max_budget  # for code that reads BaseTextEnv.max_turns

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Reset the env; the prompt with the first turn's user message appended, as the evaluator renders it.

        A prompt without a system message gets the one the evaluator and the trainer write (the
        instructions, ``env_config["system_prompt"]``, then the task); a dataset's own is kept.
        With ``env_config["few_shot_env"]`` the evaluator's worked example comes before the first turn.
        """
        options = self.extras.get("options")
        progress = self.extras.get("progress")  # SkyRL passes none: the shared counter (module docstring)
        self.turns = 0
        self.session.reset(seed=self.extras.get("seed"), budget=self.extras.get("budget"), options=options,
                           progress=progress)
        system, *opening = opening_messages(self.session, self.system_prompt, self.examples, self.list_commands)
        prompt = list(prompt)
        if not any(message.get("role") == "system" for message in prompt):
            prompt.insert(0, dict(system))
        return [*prompt, *(dict(message) for message in opening)], self._metadata()

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Play the command in ``action`` (the model's reply); the next observation, reward, done."""
        command = parse_action(action, self.session.admissible_commands, matching=self.action_matching)
        if not self.session.failed:  # failed at init: the trajectory ends at its first step, nothing is played
            self.session.step(command)
            self.turns += 1
        done = self.session.done
        observations = [] if done else [{"role": "user", "content": format_turn(self.session, self.list_commands)}]
        return BaseTextEnvStepOutput(observations=observations, reward=self.session.reward, done=done,
                                     metadata={**self._metadata(), "command": command}, postprocessed_action=None)

    def get_metrics(self) -> dict[str, Any]:
        """The episode, numeric (SkyRL averages these over episodes): budget, turns, won, return, how it ended."""
        s = self.session.summary()
        return {k: float(s[k]) for k in ("budget", "turns", "won", "terminated", "truncated", "return", "failed",
                                         "env_failures")}

    def close(self) -> None:
        self.session.close()

    def _metadata(self) -> dict[str, Any]:
        metadata = {**self.session.public_info(), "terminated": self.session.terminated,
                    "truncated": self.session.truncated, "env_failures": self.session.env_failures}
        if self.session.failed:
            metadata["env_failure"] = self.session.error
        return metadata


def register_skyrl_envs(env_ids: Iterable[str] | None = None) -> list[str]:
    """Register ``env_ids`` (default: every family's ``X-Budget-v0`` id) with ``skyrl_gym``; idempotent."""
    ids = list(env_ids) if env_ids is not None else [family.ids[1] for family in FAMILIES]
    for env_id in ids:
        if env_id not in skyrl_gym.registry:
            skyrl_gym.register(id=env_id, entry_point=f"{__name__}:SkyRLBudgetEnv", kwargs={"env_id": env_id})
    return ids


def shared_progress(env_id: str, env_config: Mapping[str, Any] | None = None) -> float:
    """The curriculum progress the SkyRL envs of ``(env_id, env_config)`` share in this process:
    episodes started (steps taken, for a curriculum counted in steps) by every env of that key."""
    return _counter(_progress_key(env_id, _plain(env_config))).value


def reset_shared_progress() -> None:
    """Start every :func:`shared_progress` counter again at 0 (a new training run in the same process)."""
    _progress.clear()


def _counter(key: str) -> SharedProgress:
    return _progress.get(key)


def _progress_key(env_id: str, config: Mapping[str, Any]) -> str:
    return ProgressCounters.key(env_id, config)


def _check_keys(env_id: str, config: Mapping[str, Any]) -> None:
    """Refuse ``env_config`` keys that neither this adapter, ``TurnBudget`` nor the env takes."""
    env_keys = _env_keywords(env_id)
    if env_keys is None:  # the env takes **kwargs: anything may be meant for it
        return
    known = ADAPTER_KEYS | BUDGET_OPTIONS | env_keys
    for key in config:
        if key not in known:
            raise ValueError(f"unknown env_config key {key!r} for {env_id}; known: {', '.join(sorted(known))}")


def _env_keywords(env_id: str) -> frozenset[str] | None:
    """The keyword arguments ``env_id``'s env takes (for ``X-Budget-v0``: ``X-v0``'s); ``None`` for ``**kwargs``."""
    spec = gym.spec(env_id)
    if "env_id" in spec.kwargs:  # an X-Budget-v0 id: make_budget_env of its base id
        spec = gym.spec(spec.kwargs["env_id"])
    parameters = inspect.signature(env_creator(spec)).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters) - {"self"}


def _plain(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A plain ``dict`` copy of a mapping or an omegaconf ``DictConfig`` (what SkyRL passes)."""
    if config is None:
        return {}
    from omegaconf import DictConfig, OmegaConf  # a skyrl-gym dependency

    if isinstance(config, DictConfig):
        # to_container's type covers every container it converts; a DictConfig becomes a dict
        return dict(cast("dict[str, Any]", OmegaConf.to_container(config, resolve=True)))
    return dict(config)

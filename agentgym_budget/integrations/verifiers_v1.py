"""verifiers v1: budgeted text envs as a ``verifiers.v1`` taskset and env (run by ``vf-eval``, prime-rl).

verifiers' v1 stack splits an environment into a *taskset* (the rows), the *agents* that play it
(each an ``AgentConfig``: harness, runtime, model, limits) and an ``Env`` whose ``run`` turns one
task into one episode.  Here:

* :class:`BudgetTaskset` — one task per seed (``first_seed ... first_seed + num_tasks - 1``) of a
  registered env id under a budget spec (fixed, ``mix``, ``curriculum``); configured under
  ``--env.taskset.*`` (:class:`BudgetTasksetConfig`).
* :class:`BudgetEnv` — the episode: it makes the row's episode (a
  :class:`~agentgym_budget.integrations.session.BudgetSession`, the budget drawn there as
  ``TurnBudget`` draws it, per episode for ``mix`` and ``curriculum``), opens the ``player``
  seat's interaction with the conversation's opening as the evaluator renders it
  (:func:`~agentgym_budget.integrations.session.opening_messages`: the system message with the
  task, the few-shot example if any, the first turn) and plays the engine as the run's user: each
  reply's ``Action:`` is parsed (:func:`~agentgym_budget.policies.prompting.parse_action`), played,
  and the next observation (:func:`~agentgym_budget.integrations.session.format_turn`) is the next
  user turn.
* **The budget is the seat's turn limit**: the episode's drawn budget becomes its agent's
  ``max_turns`` (``AgentConfig.max_turns``, verifiers' own ``RolloutLimits``), so verifiers refuses
  the turn after the last one and records the stop itself.  The trace's ``stop_condition`` says how
  the episode ended: ``won`` or ``lost`` (the env terminated it), ``max_turns`` (the budget ran out:
  ``trace.is_truncated``).  A win on the budget's last turn is ``won``.
* rewards and metrics on the trace: reward ``episode_return`` (won → 1, plus any process reward),
  metrics ``budget``, ``turns``, ``won``, ``terminated``, ``truncated``, ``env_failures``;
  ``trace.info["episode"]`` is the episode's JSON summary.
* an env that raises: the session's fault policy replays the episode once in a fresh env; if that
  fails too the episode fails (an :class:`EpisodeFailed` out of ``run``: verifiers records it on
  the episode's errors and retries per ``--env.retries``).
* the env runs off the event loop (``asyncio.to_thread``); curriculum budgets progress over all
  episodes of the taskset (one :class:`~agentgym_budget.integrations.session.SharedProgress`).

The ``player`` seat defaults to verifiers' tool-less chat loop (harness ``null``) in the
``subprocess`` runtime: the program verifiers runs per turn is its own chat script, prepared with
``uv`` (on ``PATH``; it fetches the script's few packages once).  A package in the Environments
Hub layout that exports these is ``integrations/verifiers/agentgym_budget_env``; ``vf-eval
agentgym-budget-env`` runs it (see docs/integrations.md).

Example (the rows; playing them needs a served model):
    >>> from agentgym_budget.integrations.verifiers_v1 import BudgetTaskset, BudgetTasksetConfig
    >>> taskset = BudgetTaskset(BudgetTasksetConfig(env_id="KeyDoor-Budget-v0", budget="mix:2,3", num_tasks=3))
    >>> [(task.data.name, task.data.seed) for task in taskset]
    [('KeyDoor-Budget-v0#0', 0), ('KeyDoor-Budget-v0#1', 1), ('KeyDoor-Budget-v0#2', 2)]
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.integrations.session import BudgetSession, SharedProgress, format_turn, opening_messages
from agentgym_budget.policies.few_shot import few_shot_examples
from agentgym_budget.policies.prompting import SYSTEM_PROMPT, check_matching, parse_action

_WHAT = "the verifiers v1 adapter"
require("verifiers", "verifiers", _WHAT)  # a missing extra: one line naming it
import verifiers.v1 as vf  # noqa: E402

__all__ = ["BudgetEnv", "BudgetEnvConfig", "BudgetTask", "BudgetTaskData", "BudgetTaskset", "BudgetTasksetConfig",
           "EpisodeFailed", "STOP_CONDITIONS"]

#: How an episode's trace stops: the env ended it (``won``/``lost``) or the budget did (verifiers' ``max_turns``).
STOP_CONDITIONS = ("won", "lost", "max_turns")
_MESSAGE_TYPES = {"user": vf.UserMessage, "assistant": vf.AssistantMessage}
_METRICS = ("budget", "turns", "won", "terminated", "truncated", "env_failures")


class EpisodeFailed(RuntimeError):
    """The env failed for good (after the session's one replay): the episode does not count."""


class BudgetTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.*``: which env, which budget, which seeds, how turns are rendered and parsed."""

    env_id: str = "KeyDoor-Budget-v0"
    """Any registered text env id (``ALFWorld-Budget-v0``, ``KeyDoor-v0``, ...)."""
    budget: str | int | None = None
    """A budget spec: ``6``, ``"mix:2,3,4,6"``, ``"curriculum:6->2@40"``; ``None``: the id's default."""
    num_tasks: int = 20
    """Rows: one episode seed each."""
    first_seed: int = 0
    env_kwargs: dict[str, Any] = {}
    """Passed to the env (``show_budget``, ``split``, ...)."""
    list_commands: bool = True
    """List the admissible commands in every observation."""
    action_matching: str = "exact"
    """``exact`` or ``fuzzy``, as ``parse_action``'s ``matching``; keep ``exact`` to train on the rollouts."""
    instructions: str = SYSTEM_PROMPT
    """The system message's instructions (the episode's task follows them)."""
    few_shot_env: str | None = None
    """A worked expert episode of this env id's training split before the first turn (``None``: zero-shot)."""
    few_shot_seed: int = 0
    few_shot_candidates: int = 1


class BudgetTaskData(vf.TaskData):
    """One row: the episode's env, budget spec and seed (the task and the budget draw)."""

    env_id: str
    budget_spec: str | int | None = None
    seed: int
    budget: int | None = None
    """Force this row's budget (else it is drawn from the spec by the seed)."""


class BudgetTask(vf.Task[BudgetTaskData]):
    """Scores an episode from its summary (``trace.info["episode"]``, written by :class:`BudgetEnv`)."""

    @vf.reward(weight=1.0)
    async def episode_return(self, trace: vf.Trace) -> float:
        """The episode's return: the env's reward (won → 1) plus any process reward."""
        episode = trace.info.get("episode", {})
        return 0.0 if episode.get("failed", True) else float(episode.get("return", 0.0))

    @vf.metric
    async def episode(self, trace: vf.Trace) -> dict[str, float]:
        """Budget, turns played, won, terminated, truncated, env failures."""
        episode = trace.info.get("episode", {})
        return {name: float(episode.get(name, 0.0)) for name in _METRICS}


class BudgetTaskset(vf.Taskset[BudgetTask, BudgetTasksetConfig]):
    """One task per seed; the prompt is made per episode (the first observation), so rows carry none."""

    def load(self) -> Iterator[BudgetTask]:
        config = self.config
        check_matching(config.action_matching)
        if config.num_tasks < 1:
            raise ValueError(f"num_tasks must be at least 1, got {config.num_tasks}")
        for seed in range(config.first_seed, config.first_seed + config.num_tasks):
            data = BudgetTaskData(name=f"{config.env_id}#{seed}", env_id=config.env_id,
                                  budget_spec=config.budget, seed=seed)
            yield BudgetTask(data, config.task)


def _player() -> vf.AgentConfig:
    """The seat's defaults: verifiers' tool-less chat loop, run as a local subprocess."""
    return vf.AgentConfig(harness={"id": "null"}, runtime={"type": "subprocess"})


class BudgetEnvConfig(vf.EnvConfig):
    """``--env.*``: the ``player`` seat (``--env.player.*``); its ``max_turns`` is set per episode (the budget)."""

    player: vf.AgentConfig = _player()


class BudgetEnv(vf.Env[BudgetEnvConfig]):
    """One budgeted episode per task, the engine playing the run's user (see the module docstring)."""

    def __init__(self, config: BudgetEnvConfig) -> None:
        if config.player.max_turns is not None:
            raise ValueError("BudgetEnv sets the player's max_turns itself (each episode's turn budget): "
                             "pass --env.taskset.budget instead")
        super().__init__(config)
        taskset_config = self.taskset.config
        self.examples = few_shot_examples(taskset_config.few_shot_env, taskset_config.few_shot_seed,
                                          taskset_config.few_shot_candidates,
                                          list_commands=taskset_config.list_commands)
        #: the curriculum's progress over all episodes (each episode makes a fresh env)
        self.progress = SharedProgress()

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        config = self.taskset.config
        session = await asyncio.to_thread(self._start_episode, task.data)
        try:
            await self._play(task, agents.player, session, config)
        finally:
            await asyncio.to_thread(session.close)

    async def _play(self, task: vf.Task, player: vf.Agent, session: BudgetSession,
                    config: BudgetTasksetConfig) -> None:
        system, *opening = opening_messages(session, config.instructions, self.examples, config.list_commands)
        prompt = [_MESSAGE_TYPES[m["role"]](content=m["content"]) for m in opening]
        episode_task = task.with_data(system_prompt=system["content"], prompt=prompt)
        # the budget drawn for this episode is the seat's turn limit: verifiers refuses the turn after it
        player.limits = dataclasses.replace(player.limits, max_turns=session.budget)
        async with player.interaction(episode_task) as interaction:
            trace = interaction.trace
            segment = await interaction.turn()
            while not segment.terminated:
                command = parse_action(segment.last_reply, session.admissible_commands,
                                       matching=config.action_matching)
                await asyncio.to_thread(session.step, command)
                trace.info["episode"] = session.summary()
                if session.failed:
                    raise EpisodeFailed(f"{session.env_id} (seed {session.seed}) failed: {session.error}")
                if session.terminated:
                    trace.stop("won" if session.won else "lost")
                    break
                # with the budget spent this turn is refused (stop condition max_turns): the seat's limit is the budget
                segment = await interaction.turn(format_turn(session, config.list_commands))
            trace.info["episode"] = session.summary()
            if session.truncated and trace.stop_condition != "max_turns":
                raise RuntimeError(f"the budget ran out but the trace stopped on {trace.stop_condition!r}")

    def _start_episode(self, data: BudgetTaskData) -> BudgetSession:
        """A fresh env playing the row's episode (runs in a worker thread)."""
        config = self.taskset.config
        session = BudgetSession(data.env_id, data.budget_spec, shared_progress=self.progress, **config.env_kwargs)
        session.reset(seed=data.seed, budget=data.budget)
        if session.failed:
            session.close()
            raise EpisodeFailed(f"{session.env_id} (seed {session.seed}) failed at reset: {session.error}")
        return session

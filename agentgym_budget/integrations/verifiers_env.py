"""verifiers: budgeted text envs as a ``verifiers`` ``MultiTurnEnv`` (evaluated through any OpenAI server).

:class:`BudgetMultiTurnEnv` is a classic (v0) ``vf.MultiTurnEnv`` — the API ``vf.load_environment``,
``vf-eval`` and prime-rl/TRL trainers drive.  Each dataset row is one episode: ``info["seed"]``
(the task and the budget draw), optionally ``info["budget"]`` (force it).  The rollout:

* ``setup_state`` makes the row's episode (a
  :class:`~agentgym_budget.integrations.session.BudgetSession`: any registered id, any budget
  spec, extra wrappers such as ``ProcessReward``), puts the task under the instructions in the
  system message and appends the first turn's user message to the prompt — both as the
  evaluator and the trainer render them
  (:func:`~agentgym_budget.policies.prompting.system_message`,
  :func:`~agentgym_budget.policies.prompting.turn_message`: the observation, with
  ``show_budget=True`` the remaining budget, the admissible commands); with ``few_shot_env=`` the
  evaluator's worked example comes between them (:func:`~agentgym_budget.integrations.session.opening_messages`);
* ``env_response`` reads the command from the model's reply (``Action: <command>``,
  :func:`~agentgym_budget.policies.prompting.parse_action`: played as written, in the admissible
  spelling when it is one up to case, whitespace and trailing punctuation; near misses only with
  ``action_matching="fuzzy"``) and answers with the next observation;
* the rollout stops exactly when the env terminates (stop condition ``env_terminated``) or the
  budget truncates (``budget_truncated``): verifiers records which in ``stop_condition``;
  ``max_turns`` is left unlimited (the budget is the limit);
* the reward is the episode's return (won → 1, plus any process reward); metrics ``budget``,
  ``turns``, ``won``, ``terminated``, ``truncated`` (weight 0) and ``state["episode"]``
  (the JSON summary) come with every rollout.  A win on the budget's last turn is
  ``env_terminated`` / ``terminated``; ``budget_truncated`` means the budget ran out first.
* the env runs off the event loop (``asyncio.to_thread``, as verifiers' own TextArena env
  does): a real engine's seconds-long reset or step never stalls the other rollouts;
* an env that raises costs its rollout only: the session's fault policy
  (:mod:`~agentgym_budget.integrations.session`) replays the episode once in a fresh env; if that
  fails too the rollout ends with verifiers' own error field, ``state["error"]`` a
  ``vf.InfraError`` (stop condition ``has_error``, the output's ``error``), reward 0 and metrics
  ``failed`` = 1, ``env_failures`` (the env's raises); the other rollouts play on;
* curriculum budgets progress across rollouts: every episode is a fresh env, so the rollouts
  share one :class:`~agentgym_budget.integrations.session.SharedProgress` (their count of
  episodes, or steps); a row's ``info["progress"]`` (a trainer's global progress) still wins.

``dataset``, ``eval_dataset`` and ``max_turns`` are the adapter's own (the rows are seeds, the
budget is the limit): passing them is refused with a one-line ``TypeError``.

Example:
    >>> from agentgym_budget.integrations.verifiers_env import BudgetMultiTurnEnv
    >>> env = BudgetMultiTurnEnv("KeyDoor-Budget-v0", budget="mix:2,3", num_examples=4)
    >>> len(env.get_eval_dataset()), env.get_eval_dataset()[0]["info"]["seed"]
    (4, 0)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.integrations.session import BudgetSession, SharedProgress, Wrapper, format_turn, opening_messages
from agentgym_budget.policies.few_shot import few_shot_examples
from agentgym_budget.policies.prompting import SYSTEM_PROMPT, check_matching, parse_action
from agentgym_budget.wrappers.budget_spec import BudgetSpec

_WHAT = "the verifiers adapter"
require("verifiers", "verifiers", _WHAT)  # a missing extra: one line naming it
import verifiers as vf  # noqa: E402  (imported by name, so that the annotations vf.State, vf.Messages resolve)

datasets = require("datasets", "verifiers", _WHAT)

__all__ = ["BudgetMultiTurnEnv", "StrictServerClient"]

_MESSAGE_TYPES = {"user": vf.UserMessage, "assistant": vf.AssistantMessage}
_METRICS = ("budget", "turns", "won", "terminated", "truncated", "failed", "env_failures")
#: ``vf.MultiTurnEnv`` arguments the adapter sets itself, and what to pass instead.
_OWN_ARGUMENTS = {
    "dataset": "its rows are episode seeds: pass num_examples= and first_seed=",
    "eval_dataset": "its rows are episode seeds: pass num_examples= and first_seed=",
    "max_turns": "the turn budget is each episode's limit: pass budget=",
}


class BudgetMultiTurnEnv(vf.MultiTurnEnv):
    """A ``vf.MultiTurnEnv`` over a budgeted text env; one dataset row per episode (see the module docstring).

    Args:
        env_id, budget, wrappers, env_kwargs: as :class:`~agentgym_budget.integrations.session.BudgetSession`.
        num_examples: rows of the (eval) dataset, seeds ``first_seed ... first_seed + num_examples - 1``.
        first_seed: the first row's seed.
        system_prompt: the instructions (default: the project's ReAct prompt: ``Thought:``/``Action:``).
        list_commands: list the admissible commands in every observation.
        action_matching: ``"exact"`` (default) or ``"fuzzy"``, as
            :func:`~agentgym_budget.policies.prompting.parse_action`'s ``matching``.  Keep ``exact``
            to train on the rollouts: the loss must score the tokens that determined the action.
        few_shot_env, few_shot_seed, few_shot_candidates: as the ``hf``/``openai`` policies'
            (``eval --policy-arg few_shot_env=...``): a worked expert episode of this env id's training split after the
            system message, the same example the evaluator shows
            (:func:`~agentgym_budget.policies.few_shot.few_shot_examples`); ``None``: zero-shot.
        vf_kwargs: passed to ``vf.MultiTurnEnv`` (``timeout_seconds``, ``max_seq_len``, ...; not
            ``dataset``, ``eval_dataset``, ``max_turns``: see the module docstring).
    """

    def __init__(self, env_id: str, budget: BudgetSpec | None = None, *, num_examples: int = 20, first_seed: int = 0,
                 system_prompt: str = SYSTEM_PROMPT, list_commands: bool = True, wrappers: Iterable[Wrapper] = (),
                 env_kwargs: dict[str, Any] | None = None, action_matching: str = "exact",
                 few_shot_env: str | None = None, few_shot_seed: int = 0, few_shot_candidates: int = 1,
                 **vf_kwargs: Any) -> None:
        _refuse_own_arguments(vf_kwargs)
        self.action_matching = check_matching(action_matching)
        self.examples = few_shot_examples(few_shot_env, few_shot_seed, few_shot_candidates,
                                          list_commands=list_commands)
        self.budget_env_id, self.budget_spec = env_id, budget
        self.wrappers, self.env_kwargs, self.list_commands = tuple(wrappers), dict(env_kwargs or {}), list_commands
        rows = [{"question": "", "answer": "", "info": {"seed": first_seed + i}}
                for i in range(num_examples)]
        dataset = datasets.Dataset.from_list(rows)
        rubric = vf.Rubric(funcs=[episode_return], weights=[1.0])
        for name in _METRICS:
            rubric.add_metric(_metric(name))
        super().__init__(dataset=dataset, eval_dataset=dataset, system_prompt=system_prompt, rubric=rubric,
                         max_turns=-1, **vf_kwargs)
        self._sessions: dict[int, BudgetSession] = {}
        #: the curriculum's progress over all rollouts (each rollout builds a fresh env)
        self.progress = SharedProgress()

    async def setup_state(self, state: vf.State) -> vf.State:
        # make + reset can take seconds on a real engine: off the event loop
        session = await asyncio.to_thread(self._start_episode, state["info"] or {})
        self._sessions[id(state)] = session
        prompt = list(state["prompt"])
        if prompt and _role(prompt[-1]) == "user" and not _content(prompt[-1]):
            prompt = prompt[:-1]  # the dataset's empty question: the observation is the question
        # the system message with the task (known once the episode is made), the few-shot example, the
        # first turn: the policy path's opening
        system, *opening = opening_messages(session, self.system_prompt, self.examples, self.list_commands)
        if prompt and _role(prompt[0]) == "system" and _content(prompt[0]) == self.system_prompt:
            prompt[0] = vf.SystemMessage(content=system["content"])
        state["prompt"] = [*prompt, *(_MESSAGE_TYPES[m["role"]](content=m["content"]) for m in opening)]
        state["episode"] = session.summary()
        _raise_if_failed(session)
        return state

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:
        session = self._sessions[id(state)]
        reply = str(_content(messages[-1]) or "")
        command = parse_action(reply, session.admissible_commands, matching=self.action_matching)
        await asyncio.to_thread(session.step, command)
        state["episode"] = session.summary()
        _raise_if_failed(session)
        response = [vf.UserMessage(content=format_turn(session, self.list_commands))]
        if session.done:
            state["final_env_response"] = response
        return response

    @vf.stop(priority=50)
    async def env_terminated(self, state: vf.State) -> bool:
        """The env ended the episode (won or lost)."""
        return bool(state.get("episode", {}).get("terminated"))

    @vf.stop(priority=50)
    async def budget_truncated(self, state: vf.State) -> bool:
        """The turn budget ended the episode."""
        return bool(state.get("episode", {}).get("truncated"))

    @vf.cleanup
    async def close_episode(self, state: vf.State) -> None:
        session = self._sessions.pop(id(state), None)
        if session is not None:
            await asyncio.to_thread(session.close)

    def _start_episode(self, info: Mapping[str, Any]) -> BudgetSession:
        """A fresh env playing the row's episode (runs in a worker thread)."""
        session = BudgetSession(self.budget_env_id, self.budget_spec, wrappers=self.wrappers,
                                shared_progress=self.progress, **self.env_kwargs)
        session.reset(seed=info.get("seed"), budget=info.get("budget"), options=info.get("options"),
                      progress=info.get("progress"))
        return session


class StrictServerClient(vf.OpenAIChatCompletionsClient):
    """verifiers' chat-completions client for servers with a strict request schema (llama.cpp's).

    verifiers sends every assistant message with ``"tool_calls": null`` and
    ``"reasoning_content": null``; ``llama-cpp-python``'s server (0.3.x) rejects those with a 500.
    This drops the ``None`` fields.  It also cannot see ``max_tokens`` (verifiers renames it to
    ``max_completion_tokens``, which that server ignores): pass
    ``sampling_args={"extra_body": {"max_tokens": N}}`` there.
    """

    async def to_native_prompt(self, messages: vf.Messages) -> tuple[list[Any], dict]:
        native, extra = await super().to_native_prompt(messages)
        return [{k: v for k, v in dict(m).items() if v is not None} for m in native], extra


async def episode_return(state: vf.State, **_: Any) -> float:
    """The episode's return: the env's reward (won → 1) plus any process reward; 0 for a failed episode."""
    episode = state.get("episode", {})
    return 0.0 if episode.get("failed") else float(episode.get("return", 0.0))


def _raise_if_failed(session: BudgetSession) -> None:
    """verifiers' way to end a rollout on an infrastructure fault: a ``vf.InfraError`` (into ``state["error"]``)."""
    if session.failed:
        raise vf.InfraError(f"{session.env_id} (seed {session.seed}) failed: {session.error}")


def _refuse_own_arguments(vf_kwargs: Mapping[str, Any]) -> None:
    for name, instead in _OWN_ARGUMENTS.items():
        if name in vf_kwargs:
            raise TypeError(f"BudgetMultiTurnEnv sets {name}= itself ({instead})")


def _role(message: Any) -> str | None:
    return message.get("role") if isinstance(message, dict) else getattr(message, "role", None)


def _content(message: Any) -> Any:
    return message.get("content") if isinstance(message, dict) else getattr(message, "content", None)


def _metric(name: str):
    async def metric(state: vf.State, **_: Any) -> float:
        return float(state.get("episode", {}).get(name, 0.0))

    metric.__name__ = name
    return metric

"""verl (``verl==0.9.1``): an agent loop that plays our budgeted text envs inside verl's rollout.

verl's multi-turn rollout runs one *agent loop* per dataset row (``AgentLoopWorker.generate_sequences``
picks the class by the row's ``agent_name``).  :class:`BudgetAgentLoop`, registered as
``agentgym_budget`` (:data:`AGENT_NAME`), plays one episode of a budgeted env per row:

* **The episode** comes from the row's ``extra_info`` (written by
  :func:`~agentgym_budget.integrations.verl_dataset.write_verl_dataset`): ``env_id`` (any registered
  text env id), ``seed`` (task and budget draw: the ``n`` rollouts of a row play the same task under
  the same budget), ``budget`` (any budget spec: ``50``, ``"mix:10,20,30,40,50"``,
  ``"curriculum:50->10@2000"``; default: the id's), ``split`` (the env's data split), optional
  ``options`` (env reset options), ``progress`` (curriculum progress, overriding the counter below)
  and ``env_kwargs``.  The agent loop's own config (the ``agent_loop_config_path`` yaml entry) adds
  ``env_kwargs`` for every row (``show_budget: true``), ``process_reward`` (a signal name or
  ``ProcessReward``'s arguments), ``wrappers`` (callables or ``"module:name"`` paths),
  ``system_prompt`` (``react``, ``action`` or a text), ``list_commands``, ``action_matching`` and
  ``step_timeout_s``.  One :class:`~agentgym_budget.integrations.session.BudgetSession` holds the
  episode.
* **What the model reads** is the one renderer's
  (:mod:`~agentgym_budget.policies.prompting`): the system message (the instructions, then the
  task), then per turn the user message of
  :func:`~agentgym_budget.integrations.session.format_turn` (observation, ``TurnBudget``'s budget
  line, the admissible commands).  The dataset row's ``prompt`` holds only the instructions (a system
  message; the task is known once the env is reset); any other message there is refused.
* **Tokens.**  The first prompt is the chat template's rendering (verl's Continuous Token builder,
  ``ct_build_initial_tokens``).  Per turn: the server's tokens for the reply (``response_mask`` 1,
  ``response_logprobs`` the server's), then the env's next user message tokenised as the chat
  template's continuation of the conversation (``ct_merge_context_msg``: the template's tokens for
  that message plus the next generation prompt; ``response_mask`` 0, log-prob 0).  The reply's
  command is :func:`~agentgym_budget.policies.prompting.parse_action`'s (played as written unless
  ``action_matching: fuzzy``).
* **The end.**  The episode stops when the env ends it (*terminated*: won or lost, also on the
  budget's last turn) or the budget runs out (*truncated*); no end message follows the last reply.
  ``reward_score`` is the episode's return (1 for a win plus any process reward), which verl puts on
  the last response token.  ``extra_fields["reward_extra_info"]`` (what verl logs per sample:
  validation metrics by ``data_source``) holds numbers: ``budget``, ``turns``, ``won``,
  ``terminated``, ``truncated``, ``response_cut``, ``failed``, ``env_failures``, ``return``;
  ``extra_fields["episode"]`` the session's summary and ``extra_fields["stop_reason"]`` one of
  ``terminated``, ``truncated``, ``response_length``, ``env_failed``.
* **``rollout.response_length`` reached mid-episode.**  The response (replies and env messages
  together) may not exceed verl's ``response_length``.  Each reply is generated with ``max_tokens`` =
  the room left.  A reply that fills that room without ending (no end-of-sequence token) is cut: its
  command is **not played** (the trainer would score tokens of an action it never sees whole).  An env
  message that does not fit leaves no room for another reply.  Either way the trajectory stops there:
  ``stop_reason`` ``response_length``, ``response_cut`` 1, neither terminated nor truncated (the
  episode did not end), ``reward_score`` the return so far (0 unless process rewards were paid), and
  the tokens are cut at ``response_length`` (an env message's tail, mask 0, is what goes).  Raise
  ``response_length`` (or lower the budgets) when ``response_cut`` is not rare.
* **An env that raises** (or hangs past ``step_timeout_s``) follows the one fault policy
  (:mod:`~agentgym_budget.integrations.session`): the episode is replayed once in a fresh env; if that
  fails too, the trajectory stops: ``stop_reason`` ``env_failed``, ``failed`` 1, ``reward_score`` 0,
  and its ``response_mask`` is all 0 — no token of an episode the env failed gets a loss (its 0 still
  counts in its group's baseline: verl's GRPO has no per-sample drop).  Never an exception out of
  verl's ``asyncio.gather`` (which would abort the whole batch).  A row whose ``extra_info`` is
  invalid (no ``env_id``, an unknown budget spec, a task the env refuses) is the caller's error and
  raised as a one-line ``ValueError``.
* **Curriculum progress.**  verl instantiates a fresh agent loop per sample, so the sessions of one
  config share one counter (:func:`shared_progress`: episodes started, or steps taken).  When Ray is up
  (a verl run: its ``AgentLoopWorker`` s are Ray actors, ``rollout.agent.num_workers`` of them) the
  counters live in one named Ray actor of the job (:data:`PROGRESS_ACTOR`), so every worker advances
  the same curriculum; without Ray, in the process.  The ``n`` rollouts of one prompt (verl's
  ``uid``, else the row's ``index``) play the progress of the first of them, so a group plays one
  budget.  ``progress`` in ``extra_info`` overrides the counter.
* Env calls run in a thread (``run_in_executor``) so that one slow engine does not hold up the
  worker's other agent loops; a session (its env) is made per trajectory and closed at its end.
"""

from __future__ import annotations

import importlib
import numbers
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard
from uuid import uuid4

import gymnasium as gym

from agentgym_budget._optional import require
from agentgym_budget.integrations.session import (
    ARGUMENT_ERRORS, BudgetSession, ProgressCounters, SharedProgress, Wrapper, format_turn, json_safe,
    process_reward_wrapper)
from agentgym_budget.policies.prompting import PROMPTS, check_matching, parse_action, system_message

_WHAT = "the verl agent loop (verl pins transformers<5.11: install it in a venv of its own)"
require("verl", "verl", _WHAT)

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register  # noqa: E402
from verl.utils.profiler import simple_timer  # noqa: E402

__all__ = ["AGENT_NAME", "EPISODE_KEYS", "STOP_REASONS", "BudgetAgentLoop", "EpisodeRow", "counter_key", "reset_shared_progress",
           "shared_progress"]

#: The ``agent_name`` of the dataset rows this loop plays.
AGENT_NAME = "agentgym_budget"

#: The ``extra_info`` keys this loop reads (others, e.g. verl's ``index``, are left alone).
EPISODE_KEYS = ("env_id", "seed", "budget", "split", "options", "progress", "env_kwargs")

#: ``stop_reason`` values (``extra_fields``).
STOP_REASONS = ("terminated", "truncated", "response_length", "env_failed")

#: The name of the Ray actor that keeps the curriculum counters of every agent-loop worker of a Ray job.
PROGRESS_ACTOR = "agentgym_budget_verl_progress"
_GROUPS_KEPT = 10_000  # the progress of this many recent groups is remembered (their later rollouts reuse it)


class ProgressBook:
    """Curriculum counters by config key (:func:`counter_key`), and the progress each group plays.

    ``claim(key, amount, group)`` adds ``amount`` (an episode, or 0 when the curriculum counts steps) to
    the key's counter and returns the progress the episode plays: the counter before it, or, for a
    group (the ``n`` rollouts of one prompt) that already claimed, the progress of its first episode.
    Held in this process, or in a Ray actor shared by every worker of the job (:data:`PROGRESS_ACTOR`).
    """

    def __init__(self) -> None:
        self._counters = ProgressCounters()
        self._groups: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def claim(self, key: str, amount: float, group: str | None = None) -> float:
        start = self._counters.get(key).claim(amount)
        if group is None:
            return start
        with self._lock:
            progress = self._groups.setdefault((key, group), start)
            self._groups.move_to_end((key, group))
            while len(self._groups) > _GROUPS_KEPT:
                self._groups.popitem(last=False)
        return progress

    def value(self, key: str) -> float:
        return self._counters.get(key).value

    def clear(self) -> None:
        self._counters.clear()
        with self._lock:
            self._groups.clear()


class _BookCounter(SharedProgress):
    """A session's view of one counter of the book (the session claims steps on it, from a worker thread)."""

    def __init__(self, book: Any, key: str) -> None:
        super().__init__()
        self.book, self.key = book, key

    def claim(self, amount: float) -> float:
        return float(_book_call(self.book, "claim", self.key, amount))

    @property
    def value(self) -> float:
        return float(_book_call(self.book, "value", self.key))

    @value.setter
    def value(self, _: float) -> None:  # SharedProgress.__init__ sets it; the book holds the count
        pass


_local_book = ProgressBook()
_ray_books: dict[str, Any] = {}  # this process's handle on each Ray job's PROGRESS_ACTOR, by job id


def _book() -> Any:
    """The job's Ray actor when Ray is up (verl's agent-loop workers are Ray actors), else this process's book."""
    import ray  # a verl dependency

    if not ray.is_initialized():
        return _local_book
    job = ray.get_runtime_context().get_job_id()
    if job not in _ray_books:  # the first worker of the job makes it, the others find it by name
        _ray_books[job] = ray.remote(ProgressBook).options(name=PROGRESS_ACTOR, get_if_exists=True,
                                                           num_cpus=0).remote()
    return _ray_books[job]


def _book_call(book: Any, method: str, *args: Any) -> Any:
    if isinstance(book, ProgressBook):
        return getattr(book, method)(*args)
    import ray

    return ray.get(getattr(book, method).remote(*args))


@dataclass
class _Trajectory:
    """The conversation so far and its tokens: all of them, and the response's mask and log-probs."""

    messages: list[dict[str, Any]]
    tokens: list[int]
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    replies: int = 0
    user_messages: int = 1


class EpisodeRow:
    """One row's episode, validated from its ``extra_info`` (see the module docstring)."""

    def __init__(self, extra_info: Mapping[str, Any] | None) -> None:
        info = dict(extra_info or {})
        env_id, seed = info.get("env_id"), info.get("seed")
        if not isinstance(env_id, str) or not env_id:
            raise ValueError(f"a {AGENT_NAME} row needs extra_info['env_id'] (a registered env id), got {env_id!r}")
        if not _is_integral(seed):
            raise ValueError(f"a {AGENT_NAME} row needs an integer extra_info['seed'], got {seed!r}")
        self.env_id, self.seed = env_id, int(float(seed))  # checked integral above (parquet may give 3.0)
        budget = info.get("budget")
        self.budget: Any = int(float(budget)) if _is_integral(budget) else budget
        self.split: str | None = info.get("split")
        self.options: dict[str, Any] = dict(info.get("options") or {})
        progress = info.get("progress")
        if progress is not None and not (isinstance(progress, numbers.Real) and float(progress) >= 0):
            raise ValueError(f"extra_info['progress'] must be a number >= 0, got {progress!r}")
        self.progress: float | None = None if progress is None else float(progress)
        self.env_kwargs: dict[str, Any] = dict(info.get("env_kwargs") or {})
        if self.split is not None:
            self.env_kwargs["split"] = self.split


#: What a row with an unknown env id, budget spec or env option raises when its session is made.
_ROW_ERRORS: tuple[type[Exception], ...] = (*ARGUMENT_ERRORS, gym.error.Error)

@register(AGENT_NAME)
class BudgetAgentLoop(AgentLoopBase):
    """verl's agent loop over one budgeted text episode per dataset row (see the module docstring).

    The keyword arguments are the ``agent_loop_config_path`` yaml entry's keys (verl passes its own
    first).

    Keyword Arguments:
        env_kwargs: ``make_budget_env`` kwargs for every row (``show_budget: true``, env options).
        process_reward: a ``ProcessReward`` on top: a signal name or a mapping of its arguments.
        wrappers: more wrappers on top, as callables or ``"module:name"`` import paths.
        system_prompt: the instructions: ``"react"`` (default), ``"action"`` or the text; a system
            message in the row's ``prompt`` wins.
        list_commands: list the admissible commands in every user message (default true).
        action_matching: ``"exact"`` (default) or ``"fuzzy"`` (see ``parse_action``).
        step_timeout_s: a deadline for each env call (a hung env is a fault).
    """

    def __init__(self, *args: Any, env_kwargs: Mapping[str, Any] | None = None,
                 process_reward: str | Mapping[str, Any] | None = None,
                 wrappers: Iterable[Wrapper | str] = (), system_prompt: str = "react", list_commands: bool = True,
                 action_matching: str = "exact", step_timeout_s: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.env_kwargs = _plain(env_kwargs)
        self.process_reward = _plain(process_reward) if isinstance(process_reward, Mapping) else process_reward
        wrapper_specs = _plain_list(wrappers)
        self.wrappers = [_wrapper(w) for w in wrapper_specs]
        # what the counter key records of the wrappers: equal configs share a curriculum counter
        self.wrapper_names = [w if isinstance(w, str) else getattr(w, "__qualname__", repr(w)) for w in wrapper_specs]
        if self.process_reward is not None:
            self.wrappers.append(process_reward_wrapper(self.process_reward, "agent loop config"))
        self.instructions = PROMPTS.get(str(system_prompt), str(system_prompt))
        self.list_commands = bool(list_commands)
        self.action_matching = check_matching(str(action_matching))
        self.step_timeout_s = step_timeout_s
        self.eos_ids = _eos_token_ids(self.tokenizer)
        self.book = _book()

    # -- the episode -----------------------------------------------------------------------------
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        row = EpisodeRow(kwargs.get("extra_info"))
        instructions = self._instructions(kwargs.get("raw_prompt"))
        session = await self._call(self._new_session, row)
        try:
            return await self._play(session, row, instructions, sampling_params, kwargs)
        finally:
            await self._call(session.close)

    async def _play(self, session: BudgetSession, row: EpisodeRow, instructions: str,
                    sampling_params: dict[str, Any], kwargs: Mapping[str, Any]) -> AgentLoopOutput:
        metrics: dict[str, Any] = {}
        progress = row.progress if row.progress is not None else await self._group_progress(session, row, kwargs)
        with simple_timer("tool_calls", metrics):
            await self._call(session.reset, seed=row.seed, options=row.options or None, progress=progress)
        messages = [dict(system_message(str(session.info.get("task", "")), instructions)),
                    {"role": "user", "content": format_turn(session, self.list_commands)}]
        trajectory = _Trajectory(messages, await self.ct_build_initial_tokens(messages))
        request_id = uuid4().hex
        stop = "env_failed" if session.failed else None
        while stop is None:
            output = await self._reply(trajectory, sampling_params, request_id, metrics)
            if len(trajectory.mask) >= self.response_length and not self._ends_turn(output.token_ids):
                stop = "response_length"  # the reply was cut: its command is not played
                break
            reply = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            with simple_timer("tool_calls", metrics):
                await self._call(session.step, parse_action(reply, session.admissible_commands,
                                                            matching=self.action_matching))
            if session.done:
                stop = "env_failed" if session.failed else session.outcome
                break
            await self._env_message(trajectory, reply, format_turn(session, self.list_commands))
            if len(trajectory.mask) >= self.response_length:
                stop = "response_length"  # no room for another reply
        return self._output(session, trajectory, stop, metrics)

    async def _reply(self, trajectory: _Trajectory, sampling_params: dict[str, Any], request_id: str,
                     metrics: dict[str, Any]) -> Any:
        """The server's next reply (at most the room left), appended with mask 1 and its log-probs."""
        params = {**sampling_params, "max_tokens": self.response_length - len(trajectory.mask)}
        with simple_timer("generate_sequences", metrics):
            output = await self.server_manager.generate(request_id=request_id, prompt_ids=trajectory.tokens,
                                                        sampling_params=params)
        merged, trajectory.mask, trajectory.logprobs = await self.ct_merge_assistant_token(
            trajectory.tokens, output.token_ids, trajectory.mask, trajectory.logprobs,
            assistant_logprobs=_logprobs(output))
        trajectory.tokens, trajectory.replies = merged.token_ids, trajectory.replies + 1
        metrics["num_preempted"] = metrics.get("num_preempted", 0) + (output.num_preempted or 0)
        return output

    async def _env_message(self, trajectory: _Trajectory, reply: str, user_message: str) -> None:
        """The env's next user message, tokenised as the chat template's continuation (mask 0, log-prob 0)."""
        previous = [*trajectory.messages, {"role": "assistant", "content": reply}]
        trajectory.messages = [*previous, {"role": "user", "content": user_message}]
        merged, trajectory.mask, trajectory.logprobs = await self.ct_merge_context_msg(
            previous, trajectory.messages, trajectory.tokens, trajectory.mask, trajectory.logprobs)
        trajectory.tokens, trajectory.user_messages = merged.token_ids, trajectory.user_messages + 1

    def _output(self, session: BudgetSession, trajectory: _Trajectory, stop: str,
                metrics: dict[str, Any]) -> AgentLoopOutput:
        tokens, mask, logprobs = trajectory.tokens, trajectory.mask, trajectory.logprobs
        prompt_ids, response_ids = tokens[: len(tokens) - len(mask)], tokens[len(tokens) - len(mask):]
        failed = stop == "env_failed"
        if failed:  # no loss on an episode the env failed (the fault policy)
            mask = [0] * len(mask)
        summary = session.summary()
        numbers = {"budget": summary["budget"], "turns": summary["turns"], "won": float(summary["won"]),
                   "terminated": float(stop == "terminated"), "truncated": float(stop == "truncated"),
                   "response_cut": float(stop == "response_length"), "failed": float(failed),
                   "env_failures": float(summary["env_failures"]), "return": 0.0 if failed else summary["return"]}
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[: self.response_length],
            response_mask=mask[: self.response_length],
            response_logprobs=logprobs[: self.response_length],
            reward_score=numbers["return"],
            num_turns=trajectory.replies + trajectory.user_messages,
            metrics=metrics,
            extra_fields={"reward_extra_info": numbers, "stop_reason": stop,
                          "episode": {**json_safe(summary), "seed": session.seed, "stop_reason": stop},
                          "turn_scores": [], "tool_rewards": []},
        )

    # -- pieces ----------------------------------------------------------------------------------
    def _instructions(self, raw_prompt: Any) -> str:
        """The system instructions: the row's prompt's system message, else the configured ones."""
        messages = [dict(m) for m in (raw_prompt if raw_prompt is not None else [])]
        others = [m.get("role") for m in messages if m.get("role") != "system"]
        if others:
            raise ValueError(f"a {AGENT_NAME} row's prompt may hold only a system message (the env writes the "
                             f"user turns), got roles {[m.get('role') for m in messages]}")
        return str(messages[0]["content"]) if messages else self.instructions

    def _new_session(self, row: EpisodeRow) -> BudgetSession:
        env_kwargs = {**self.env_kwargs, **row.env_kwargs}
        key = self._counter_key(row)
        try:
            session = BudgetSession(row.env_id, row.budget, wrappers=self.wrappers, shared_progress=_BookCounter(self.book, key),
                                    step_timeout_s=self.step_timeout_s, **env_kwargs)
        except _ROW_ERRORS as error:  # an unknown id, budget spec or env option
            raise ValueError(f"{AGENT_NAME} row (env_id={row.env_id!r}, budget={row.budget!r}, seed={row.seed}): "
                             f"{error}") from None
        return session

    def _counter_key(self, row: EpisodeRow) -> str:
        """The curriculum counter of a row's configuration (equal configurations share one)."""
        env_kwargs = {**self.env_kwargs, **row.env_kwargs}
        return counter_key(row.env_id, row.budget, env_kwargs, self.process_reward, self.wrapper_names)

    async def _group_progress(self, session: BudgetSession, row: EpisodeRow, kwargs: Mapping[str, Any]) -> float:
        """Claim this episode on its config's counter; the progress of the first rollout of its group."""
        amount = 1.0 if session.turn_budget.core.counts_episodes else 0.0
        group = kwargs.get("uid", kwargs.get("index"))
        args = (self._counter_key(row), amount, None if group is None else str(group))
        if isinstance(self.book, ProgressBook):
            return self.book.claim(*args)
        return float(await self.book.claim.remote(*args))  # the job's actor (see _book)

    def _ends_turn(self, token_ids: list[int]) -> bool:
        return bool(token_ids) and token_ids[-1] in self.eos_ids

    async def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` in the loop's executor (env calls block)."""
        return await self.loop.run_in_executor(None, lambda: function(*args, **kwargs))


def counter_key(env_id: str, budget: Any, env_kwargs: Mapping[str, Any] | None = None,
                process_reward: Any = None, wrappers: Iterable[str] = ()) -> str:
    """The key of the curriculum counter that the agent loops of one config share (row and loop config)."""
    return ProgressCounters.key(env_id, {"budget": budget, **dict(env_kwargs or {}),
                                         "process_reward": process_reward, "wrappers": list(wrappers)})


def shared_progress(env_id: str, budget: Any, env_kwargs: Mapping[str, Any] | None = None,
                    process_reward: Any = None, wrappers: Iterable[str] = ()) -> float:
    """The curriculum progress the agent loops of one config share (episodes or steps): over every worker of
    the Ray job when Ray is up, else in this process."""
    return float(_book_call(_book(), "value", counter_key(env_id, budget, env_kwargs, process_reward, wrappers)))


def reset_shared_progress() -> None:
    """Start every curriculum counter (and group memory) again at 0: a new training run."""
    _book_call(_book(), "clear")


def _logprobs(output: Any) -> list[float]:
    if output.log_probs is None or len(output.log_probs) != len(output.token_ids):
        raise ValueError("the rollout server must return one log-prob per generated token "
                         "(set actor_rollout_ref.rollout.calculate_log_probs=True)")
    return list(output.log_probs)


def _eos_token_ids(tokenizer: Any) -> frozenset[int]:
    ids = tokenizer.eos_token_id
    ids = ids if isinstance(ids, (list, tuple, set)) else [ids]
    return frozenset(int(i) for i in ids if i is not None)


def _wrapper(spec: Wrapper | str) -> Wrapper:
    if callable(spec):
        return spec
    module, _, name = str(spec).partition(":")
    if not module or not name:
        raise ValueError(f"a wrapper is a callable or 'module:name', got {spec!r}")
    return getattr(importlib.import_module(module), name)


def _is_integral(value: Any) -> TypeGuard[numbers.Real]:
    """An int (numpy's too, or an integral float: parquet may give either), not a bool or a string."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value).is_integer()


def _plain(value: Any) -> Any:
    """A plain dict of a mapping or an omegaconf ``DictConfig`` (what hydra passes)."""
    if value is None:
        return {}
    from omegaconf import DictConfig, ListConfig, OmegaConf  # a verl dependency

    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return dict(value) if isinstance(value, Mapping) else value


def _plain_list(value: Any) -> list[Any]:
    plain = _plain(value) if value else []
    return list(plain)


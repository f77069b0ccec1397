"""TRL: budgeted text envs as ``GRPOTrainer(environment_factory=...)`` environments.

TRL's environment mode (``trl`` >= 1.x, marked experimental; transformers >= 5.2; no vLLM
needed) makes one environment instance per rollout, calls its ``reset(**dataset_row)`` and
appends the returned text to the prompt's last user message, then lets the model call the
instance's public methods as tools until it stops calling them (or
``GRPOConfig.max_tool_calling_iterations`` / ``max_completion_length`` is reached).

* :func:`environment_factory` — the factory to pass: each instance is a :class:`BudgetToolEnv`
  over a :class:`~agentgym_budget.integrations.session.BudgetSession` (any registered id, any
  budget spec: fixed, mix, curriculum; extra wrappers such as ``ProcessReward``).  It is a
  ``functools.partial``, so it pickles — TRL's async GRPO trainer sends it to a spawned process —
  as long as the wrappers do (``functools.partial(ProcessReward, signal=..., coef=...)``, not a lambda).
* :class:`BudgetToolEnv` — ``reset(seed=..., budget=..., **row)`` (the dataset row: ``seed``
  picks the task and the budget draw, so the ``num_generations`` completions of a prompt play
  the same task under the same budget, as GRPO's group baseline wants; ``budget`` forces it;
  a row without ``seed`` plays a fresh draw per rollout and warns, as then a group's members
  play different tasks under different budgets) and one tool, ``act(command)``, one env turn per call.  With ``show_budget=True`` each
  observation ends with the remaining budget.
* :func:`episode_reward` — the reward function to pass (``reward_funcs=[episode_reward]``): each
  rollout's return (the env's reward, won → 1, plus any process reward).  It also logs
  ``budget``, ``turns``, ``outcome``, ``won`` as columns of TRL's completions table
  (``log_completions=True``: printed, and written to ``output_dir/completions/*.parquet``) and
  their means as metrics (``episode/budget``, ...).
* :func:`chatml_tool_tokenizer` — for a tokenizer without a chat template (e.g. the tiny test
  model's): TRL's Qwen2.5 template and its ChatML tokens, so TRL can render and parse tool calls.

What TRL's API cannot express, and what this adapter does instead:

* The episode's end.  TRL's loop stops only when the model stops calling tools; an
  environment cannot end it.  When the env terminates or the budget truncates, ``act`` says so
  in its result ("The episode is over: ...") and every later call answers the same, plays
  nothing and spends nothing (a result, not an error: it names no other tool and does not count
  as a failed tool call in TRL's ``tools/failure_frequency``).  Which of the two ended it is in
  the ``outcome`` column (``terminated``, also for a win on the budget's last turn;
  ``truncated``: the budget ran out first; ``running`` when TRL stopped first: the model
  stopped calling ``act`` or hit ``max_completion_length``).  Set ``max_tool_calling_iterations``
  at least to the largest budget.
* An env that raises.  TRL would answer the tool call with the error and let the model call the
  broken env again.  The session's fault policy
  (:mod:`~agentgym_budget.integrations.session`) replays the episode once in a fresh env; if
  that fails too the episode ends: ``reset``/``act`` answer "The episode is over: the game's
  environment failed (...)", the ``outcome`` column says ``failed``, and :func:`episode_reward`
  returns ``None`` for it — TRL's "unscorable" reward, left out of its group's baseline and
  given zero advantage, so the other rollouts of the step train as usual.  Metrics:
  ``episode/env_failures`` (the env's raises in the batch), ``episode/failed``.
* Per-turn rewards.  GRPO scores a whole rollout: the reward is the episode's return.
* Action masks.  A tool takes a free-form string; the admissible commands are listed in the
  observation text (``list_commands=True``) and anything else is answered in-game.

Example:
    >>> from agentgym_budget.integrations.trl_env import environment_factory
    >>> make_env = environment_factory("KeyDoor-Budget-v0", budget="mix:1,2", show_budget=True)
    >>> env = make_env()
    >>> print(env.reset(seed=0, budget=1, options={"task": "red-blue"}))  # doctest: +ELLIPSIS
    Observation: You are in a hall...
    [Turns left: 1 of 1]
    Available commands: take key, open red door, open blue door
    >>> print(env.act("take key"))  # doctest: +ELLIPSIS
    Observation: You take the key...
    [Turns left: 0 of 1]
    <BLANKLINE>
    The episode is over: the turn budget is spent.
    >>> env.session.outcome, episode_reward([env])
    ('truncated', [0.0])
    >>> print(env.act("open red door"))  # after the end: answered, not played
    The episode is over: the turn budget is spent. This command was not played; the episode has no more turns.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.integrations.session import BudgetSession, Wrapper, end_text, format_turn
from agentgym_budget.wrappers.budget_spec import BudgetSpec

__all__ = ["BudgetToolEnv", "chatml_tool_tokenizer", "environment_factory", "episode_reward"]

_WHAT = "the TRL adapter"
NO_SEED_WARNING = (
    "the dataset row has no 'seed': each rollout draws its own task and budget, so the completions of one "
    "GRPO group play different episodes and the group baseline compares unlike ones; add a seed column "
    "(e.g. seed = row index)")

class BudgetToolEnv:
    """One TRL environment: a budgeted text env whose only tool is :meth:`act`.

    TRL turns every public *method* of the class into a tool, so the class has exactly two:
    ``reset`` and ``act``; the state is in :attr:`session`.
    """

    def __init__(self, env_id: str, budget: BudgetSpec | None = None, *, wrappers: Iterable[Wrapper] = (),
                 list_commands: bool = True, **env_kwargs: Any) -> None:
        self.session = BudgetSession(env_id, budget, wrappers=wrappers, **env_kwargs)
        self.list_commands = list_commands

    def reset(self, **row: Any) -> str:
        """Start an episode (``seed``, ``budget``, ``options`` from the dataset row); the first observation."""
        if row.get("seed") is None:
            warnings.warn(NO_SEED_WARNING, UserWarning, stacklevel=2)
        self.session.reset(seed=row.get("seed"), budget=row.get("budget"), options=row.get("options"),
                           progress=row.get("progress"))
        return format_turn(self.session, self.list_commands)

    def act(self, command: str) -> str:
        """Play one command in the text game and read what happens (one turn of the budget).

        Args:
            command: the command to play, one of the admissible commands (e.g. "go to fridge 1").

        Returns:
            What the game answers, and whether the episode is over.
        """
        if self.session.done:  # TRL lets the model keep calling: answer, play nothing
            return f"{end_text(self.session)} This command was not played; the episode has no more turns."
        self.session.step(command)
        return format_turn(self.session, self.list_commands)


def environment_factory(env_id: str, budget: BudgetSpec | None = None, *, wrappers: Iterable[Wrapper] = (),
                        list_commands: bool = True, **env_kwargs: Any) -> Callable[[], BudgetToolEnv]:
    """``GRPOTrainer(environment_factory=...)`` for ``env_id`` under ``budget`` (kwargs: :class:`BudgetToolEnv`).

    A ``functools.partial`` rather than a closure: TRL's async GRPO trainer pickles the factory
    into a spawned rollout process.
    """
    return functools.partial(BudgetToolEnv, env_id, budget, wrappers=tuple(wrappers), list_commands=list_commands,
                             **env_kwargs)


def episode_reward(environments: Sequence[BudgetToolEnv], log_extra: Callable[[str, list], None] | None = None,
                   log_metric: Callable[[str, float], None] | None = None, **_: Any) -> list[float | None]:
    """A TRL reward function: each rollout's episode return (``None`` for a failed one); logs the budget, how
    each episode ended and the env's faults."""
    summaries = [env.session.summary() for env in environments]
    if log_extra is not None:
        for column in ("budget", "turns", "outcome", "won", "env_failures"):
            log_extra(column, [s[column] for s in summaries])
    if log_metric is not None and summaries:
        for name in ("budget", "turns", "won", "terminated", "truncated", "failed"):
            log_metric(f"episode/{name}", sum(float(s[name]) for s in summaries) / len(summaries))
        log_metric("episode/env_failures", float(sum(s["env_failures"] for s in summaries)))
    # a failed episode is unscorable (None): TRL leaves it out of its group's baseline, gives it zero advantage
    return [None if s["failed"] else float(s["return"]) for s in summaries]


def chatml_tool_tokenizer(tokenizer: Any, model: Any = None, *, tool_call_tokens: bool | None = None) -> Any:
    """Give ``tokenizer`` TRL's Qwen2.5 chat template (tool calls in ``<tool_call>`` tags) and its tokens.

    For tokenizers whose chat template has no tool syntax (TRL refuses them: "The provided chat
    template does not support tool calling"): a tokenizer trained from scratch, like
    :func:`~agentgym_budget.policies.tiny_model.tiny_model_and_tokenizer`'s, or a ChatML chat model
    without tools, like SmolLM2-135M-Instruct (``model="smollm2"``).  Adds ``<|im_start|>`` and
    ``<|im_end|>`` (special) where the vocabulary lacks them, makes ``<|im_end|>`` the end of a turn
    (``eos_token``) and, given ``model``, resizes its embeddings when tokens were added.  Because
    the template is TRL's own, TRL recognises it and parses the model's tool calls.

    ``tool_call_tokens``: also add ``<tool_call>``, ``</tool_call>`` as tokens (as Qwen2.5's
    tokenizer has them).  ``None`` (default): only for a tokenizer that had no chat template — a
    pretrained chat model keeps its vocabulary and writes the tags as text (new tokens would start
    as untrained embeddings it never emits).  Returns ``tokenizer``.
    """
    chat_template_utils = require("trl.chat_template_utils", "trl", _WHAT)
    if tool_call_tokens is None:
        tool_call_tokens = not getattr(tokenizer, "chat_template", None)
    vocabulary = tokenizer.get_vocab()
    missing = [token for token in ("<|im_start|>", "<|im_end|>") if token not in vocabulary]
    before = len(tokenizer)
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing})
    if tool_call_tokens:
        tokenizer.add_tokens(["<tool_call>", "</tool_call>"])  # plain added tokens, as in Qwen2.5's tokenizer
    tokenizer.chat_template = chat_template_utils.qwen2_5_chat_template
    tokenizer.eos_token = "<|im_end|>"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model is not None:
        if len(tokenizer) != before:
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        model.config.eos_token_id = tokenizer.eos_token_id
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.eos_token_id = tokenizer.eos_token_id
            model.generation_config.pad_token_id = tokenizer.pad_token_id
    return tokenizer

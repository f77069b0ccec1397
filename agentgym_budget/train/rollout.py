"""Multi-turn episode collection for the learner, through the one LLM policy layer.

:func:`collect_episodes` is a plain function of (model, tokenizer, envs, seeds, config,
sampling seed) — no trainer state — so it can run anywhere (a Ray actor, another process).
It plays the episodes with :func:`training_policy` — an
:class:`~agentgym_budget.policies.llm.LLMPolicy` over an
:class:`~agentgym_budget.policies.hf.HFChatBackend`, the same prompt builder, context-limit
policy, batched KV-cache generation and reply parser the evaluator's ``hf`` policy uses — and
keeps, per turn, the prompt's token ids and the sampled reply tokens (what the loss scores).
The loop is the evaluator's (:func:`~agentgym_budget.episodes.runner.play_episodes`, with every
episode in flight at once); this module only records.  "Done", "invalid" and the sampling
seeds come from :mod:`~agentgym_budget.episodes.outcome`, :func:`~agentgym_budget.text.is_invalid`
and :mod:`~agentgym_budget.seeds`.
Every turn of every running episode goes through one batched generation; an episode's
tokens are drawn from its own seed (from the sampling seed and its index), so they do not
depend on which episodes share a batch.  A reply's command is played as written (exact
matching: never mapped onto a similar admissible command, whose outcome the loss would credit to
tokens that named another one); one that is no command gets the env's own ``"Nothing happens."``.

**Fault policy.**  An env that raises in ``reset`` or ``step`` costs its episode, not the
collection: the episode is played again from the start in a freshly made env with the same
reset seed, curriculum progress (and adaptive budget table) and sampling seed (so a one-off fault leaves the episode as it
would have been); if that env raises too, the episode comes back ``failed`` (no turns, no
return), and the trainer gives it zero advantage and computes its group's baseline over the
other episodes (:func:`~agentgym_budget.train.grpo.group_advantages`), so the ``B*G`` layout
of the groups never shifts and the rest of the group still trains.  An env that raised is not played
again: it is closed (best effort) and replaced in the caller's ``envs`` — the rollout pool kept
across updates — by the env that played the retry, or by another fresh one if that raised too.
``Episode.env_failures`` counts the raises (the trainer logs their sum as ``env_failures``).  Only the env's own calls are guarded:
an error of the policy or the model still stops the run.

Example:
    >>> from agentgym_budget.train import TrainConfig, make_train_env, tiny_model_and_tokenizer
    >>> config = TrainConfig(env_id="KeyDoor-v0", budget="fixed:3", max_new_tokens=4)
    >>> model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0")
    >>> envs = [make_train_env(config) for _ in range(2)]
    >>> episodes = collect_episodes(model, tokenizer, envs, seeds=[7, 7], config=config, sampling_seed=0)
    >>> [len(e.turns) for e in episodes], episodes[0].budget
    ([3, 3], 3)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, MutableSequence, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym
import torch

from agentgym_budget.envs.base import close_quietly
from agentgym_budget.envs.registration import make_budget_env
from agentgym_budget.episodes.outcome import episode_over
from agentgym_budget.episodes.runner import play_episodes
from agentgym_budget.episodes.policy import PolicyReply
from agentgym_budget.policies.chat import Sampling
from agentgym_budget.policies.hf import HFChatBackend
from agentgym_budget.policies.llm import LLMPolicy
from agentgym_budget.seeds import episode_sampling_seed
from agentgym_budget.text import admissibility, is_invalid, printable_line
from agentgym_budget.train.config import TrainConfig
from agentgym_budget.train.gigpo import state_key
from agentgym_budget.wrappers import ProcessReward

__all__ = ["Episode", "Turn", "collect_episodes", "make_train_env", "policy_options", "training_policy",
           "trunk_layer"]


@dataclass
class Turn:
    """One generation: the prompt the model saw and the tokens it sampled (the loss's sample)."""

    prompt_ids: list[int]
    action_ids: list[int]
    action: str  # the parsed command sent to the env
    process_reward: float = 0.0  # this turn's info["process_reward"] (0 without a ProcessReward wrapper)
    state_key: str = ""  # the state the turn acted on (train/gigpo.py's state_key: the anchor of GiGPO's step groups)
    #: [len(prompt_ids) + len(action_ids) - 1, hidden]: what entered the first trained layer for every token the
    #: rollout fed (trunk reuse, :func:`trunk_layer`; None when off): the loss runs only the layers from there on
    trunk_states: Any = field(default=None, repr=False)


@dataclass
class Episode:
    """One training episode as the learner needs it: every turn's prompt and sampled tokens, and its return.

    The evaluator's :class:`~agentgym_budget.episodes.records.EpisodeRecord` is the same kind of
    run seen by the metrics instead (actions and per-turn facts, no tokens); the two are kept
    apart because each holds what its consumer needs and nothing it does not (token lists would
    bloat ``episodes.jsonl``; metric facts are not a loss's input).
    """

    seed: int  # the env's reset seed; the episodes of a group share it (same task, same budget)
    task: str
    budget: int
    turns: list[Turn] = field(default_factory=list)
    won: bool = False
    terminated: bool = False  # the MDP ended (won or lost); False when the budget truncated it
    invalid_actions: int = 0  # turns whose command was invalid (agentgym_budget.text.is_invalid)
    env_failures: int = 0  # times the env raised while this episode was played (0, 1 or 2)
    failed: bool = False  # no attempt finished (the env raised twice): no turns, its group is dropped
    budget_key: str = ""  # an adaptive budget's task key (info["budget_key"]): its outcome is counted there

    @property
    def lost(self) -> bool:
        """Ended by the env without a win (e.g. KeyDoor's wrong door), not by the budget."""
        return self.terminated and not self.won


def make_train_env(config: TrainConfig) -> gym.Env:
    """The training env: ``config.env_id`` under ``TurnBudget(config.budget)`` (+ ``ProcessReward``)."""
    env: gym.Env = make_budget_env(config.env_id, config.budget, show_budget=config.show_budget, **config.env_kwargs)
    if config.process_reward:
        # Outermost, so it sees the budget's truncation (see ProcessReward's docstring).  The raw
        # per-turn signal (not the potential-based form, whose zero end potential hands every
        # bonus back on the last turn): the trainer turns it into per-turn returns-to-go.
        env = ProcessReward(env, signal=config.process_reward, coef=1.0, potential_based=False)
    return env


def training_policy(model: Any, tokenizer: Any, config: TrainConfig, temperature: float | None = None,
                    keep_hidden_at: int | None = None) -> LLMPolicy:
    """The model as the LLM policy the config describes (the trainer's sampler, and its evaluation policy).

    The budget reaches the model only through the env's observations (``show_budget`` is the
    env's, see :func:`make_train_env`), so the policy itself does not read it.  Earlier turns
    show the model's actions, not its whole replies (``config.history="actions"``, the default), or
    the conversation is append-only (``"append"``: past replies are the sampled ids).  Commands are matched
    exactly (``config.action_matching``, which :class:`TrainConfig` keeps at ``"exact"``): a command
    is played as the sampled tokens wrote it, so the loss credits those tokens with its outcome.
    ``keep_hidden_at``: the backend's (every reply carries the hidden states entering that layer).
    """
    sampling = Sampling(temperature=config.temperature if temperature is None else temperature, top_p=config.top_p,
                        max_new_tokens=config.max_new_tokens)
    backend = HFChatBackend(model, tokenizer, max_prompt_tokens=config.max_prompt_tokens, name=f"lm({config.model})",
                            keep_hidden_at=keep_hidden_at, share_prefix=config.share_prefix)
    return LLMPolicy(backend, sampling, **policy_options(config))


def policy_options(config: TrainConfig) -> dict[str, Any]:
    """The :class:`~agentgym_budget.policies.llm.LLMPolicy` settings of the trainer's policy: how its prompts
    are rendered and its replies matched (SFT data is rendered with the same, :mod:`~agentgym_budget.train.sft`).

    Example:
        >>> policy_options(TrainConfig())
        {'list_admissible': True, 'max_turns_shown': 20, 'history': 'actions', 'action_matching': 'exact', 'prompt': 'react'}
    """
    return {"list_admissible": config.list_admissible, "max_turns_shown": config.max_turns_shown,
            "history": config.history, "action_matching": config.action_matching, "prompt": config.prompt}


def trunk_layer(model: Any, config: TrainConfig) -> int | None:
    """The first trained decoder layer when the loss can reuse the rollout's hidden states below it; else ``None``.

    Trunk reuse (``config.trunk_reuse``, on by default) applies where it is exact: LoRA on the top
    ``lora_layers`` only (every layer below has no trainable weight, and the policy, its old copy
    and the reference share them), the loss in the rollout's dtype (no bf16 autocast) and no
    gradient checkpointing or FSDP (which wrap the layers the loss would run on its own).

    Example:
        >>> from agentgym_budget.train import tiny_model_and_tokenizer
        >>> model, _ = tiny_model_and_tokenizer("KeyDoor-v0")
        >>> trunk_layer(model, TrainConfig(lora_r=8, lora_layers=1)), trunk_layer(model, TrainConfig(lora_r=8))
        (1, None)
        >>> trunk_layer(model, TrainConfig(lora_r=8, lora_layers=1, trunk_reuse=False)) is None
        True
    """
    if not (config.trunk_reuse and config.lora_r and config.lora_layers) or config.gradient_checkpointing:
        return None
    parameter = next(model.parameters())
    bf16 = config.bf16 == "on" or (config.bf16 == "auto" and parameter.device.type == "cuda"
                                   and torch.cuda.is_bf16_supported())
    if bf16 or config.distributed == "fsdp" and torch.distributed.is_initialized():
        return None
    depth = len(model.get_decoder().layers)
    return depth - config.lora_layers if config.lora_layers < depth else None


@torch.no_grad()
def collect_episodes(
    model: Any,
    tokenizer: Any,
    envs: MutableSequence[gym.Env],
    seeds: Sequence[int],
    config: TrainConfig,
    sampling_seed: int,
    make_env: Callable[[], gym.Env] | None = None,
) -> list[Episode]:
    """Run one episode in each env (``envs[i].reset(seed=seeds[i])``) until all have ended.

    The same (model, seeds, sampling_seed) gives the same episodes.  An episode whose env raises
    is played again in ``make_env()`` (default: :func:`make_train_env`), then given up as
    ``failed``; the env that raised is closed and replaced in ``envs`` (see the module
    docstring's fault policy).
    """
    if len(envs) != len(seeds):
        raise ValueError(f"{len(envs)} envs for {len(seeds)} seeds")
    policy = training_policy(model, tokenizer, config, keep_hidden_at=trunk_layer(model, config))
    # taken before the resets count: a retry must draw the budget the first attempt drew
    progress = [_budget_schedule_state(env) for env in envs]
    episodes = _play(policy, envs, seeds, sampling_seed, list(range(len(envs))))
    retry = [i for i, episode in enumerate(episodes) if episode.failed]
    if retry:
        make = make_env or (lambda: make_train_env(config))
        fresh = [_fresh_env(make, progress[i]) for i in retry]
        again = _play(policy, fresh, [seeds[i] for i in retry], sampling_seed, retry)
        for i, env, episode in zip(retry, fresh, again):
            episode.env_failures += episodes[i].env_failures
            episodes[i] = episode
            close_quietly(envs[i])
            if episode.failed:  # the retry's env raised too: not kept either
                close_quietly(env)
                env = make()
            envs[i] = env
    return episodes


def _play(policy: LLMPolicy, envs: Sequence[gym.Env], seeds: Sequence[int], sampling_seed: int,
          indices: Sequence[int]) -> list[Episode]:
    """One episode per env, all in flight together (the evaluator's loop, :func:`play_episodes`); ``indices``
    are the episodes' places in the update (their sampling seeds).  An env that raises ends its episode as
    ``failed`` (one ``env_failures``) and the others play on."""
    episodes: list[Episode] = [Episode(seed=int(seed), task="", budget=0) for seed in seeds]
    starts = [partial(_Recorder, episode, env, policy, episode_sampling_seed(sampling_seed, index))
              for episode, env, index in zip(episodes, envs, indices)]
    play_episodes(policy, starts, max(len(starts), 1), on_end=lambda recorder: None)
    return episodes


class _Recorder:
    """One training episode in flight: plays it in ``env`` and records its turns' tokens and process rewards."""

    def __init__(self, episode: Episode, env: gym.Env, policy: LLMPolicy, policy_seed: int) -> None:
        self.episode, self.env, self.state, self.done = episode, env, policy.start(policy_seed), False
        try:
            self.obs, self.info = env.reset(seed=episode.seed)
        except Exception as error:  # noqa: BLE001 - any env fault is the env's, see the fault policy
            _fail(episode, error, "reset")
            self.obs, self.info, self.done = "", {}, True
        episode.task, episode.budget = str(self.info.get("task", "")), int(self.info.get("budget", 0))
        episode.budget_key = str(self.info.get("budget_key", ""))

    def step(self, reply: PolicyReply) -> None:
        episode, completion = self.episode, reply.completion
        # the training policy (training_policy: a local model) fills the token ids of every reply
        if completion is None or completion.prompt_ids is None or completion.completion_ids is None:
            raise TypeError(f"a training policy's reply must carry its token ids (a local model's), got {reply!r}")
        prompt_ids, completion_ids = completion.prompt_ids, completion.completion_ids
        admissible = admissibility(reply.action, self.info.get("admissible_commands"))
        anchor = state_key(self.obs, self.info)  # the state this turn acts on, before the step
        try:
            self.obs, _, terminated, truncated, self.info = self.env.step(reply.action)
        except Exception as error:  # noqa: BLE001 - any env fault is the env's, see the fault policy
            _fail(episode, error, f"step {len(episode.turns) + 1}")
            self.done = True
            return
        # the evaluator's definition: the env's verdict, the list only where the env gives none
        episode.invalid_actions += is_invalid(admissible, str(self.info.get("action_effect", "")))
        episode.turns.append(Turn(prompt_ids, completion_ids, reply.action,
                                  float(self.info.get("process_reward", 0.0)), anchor, completion.hidden_states))
        episode.won = episode.won or bool(self.info.get("won", False))
        episode.terminated = bool(terminated)
        self.done = episode_over(terminated, truncated)


def _fail(episode: Episode, error: Exception, where: str) -> None:
    """Mark ``episode`` failed: its turns are dropped (a half episode has no return to learn from)."""
    warnings.warn(f"the env of seed {episode.seed} raised at {where}: {type(error).__name__}: "
                  f"{printable_line(error, limit=300)}", RuntimeWarning, stacklevel=5)  # collect_episodes
    episode.env_failures += 1
    episode.failed = True
    episode.turns, episode.won, episode.terminated, episode.invalid_actions = [], False, False, 0


def _budget_schedule_state(env: gym.Env) -> tuple[float, Any] | None:
    """The env's budget state: curriculum progress and an adaptive budget's outcome table."""
    try:
        return float(env.get_wrapper_attr("progress")), env.get_wrapper_attr("outcomes")
    except AttributeError:  # no TurnBudget in the chain: nothing to carry over
        return None


def _fresh_env(make_env: Callable[[], gym.Env], progress: tuple[float, Any] | None) -> gym.Env:
    env = make_env()
    if progress is not None:
        env.get_wrapper_attr("set_progress")(progress[0])
        env.get_wrapper_attr("set_outcomes")(progress[1])
    return env



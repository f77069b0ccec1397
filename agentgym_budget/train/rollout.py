"""Multi-turn episode collection with a Hugging Face causal LM, batched across episodes.

:func:`collect_episodes` is a plain function of (model, tokenizer, envs, seeds, config,
sampling seed) — no trainer state — so it can run anywhere (a Ray actor, another process).

Per turn, every episode still running gets a prompt (:func:`fit_prompt`): the system prompt,
the task, the (observation, action) history, the admissible commands; the budget appears
when the env shows it (``TurnBudget(show_budget=True)`` puts ``[Turns left: x of T]`` in
each observation).  All those prompts go through one left-padded ``model.generate`` call;
each reply is cut at the first end-of-sequence token, its command extracted with
:func:`~agentgym_budget.policies.prompting.parse_action` and sent to the env (a reply that
is no command gets the env's own ``"Nothing happens."``).

**Context-limit policy** (:func:`fit_prompt`): keep at most ``max_turns_shown`` recent
turns; while the prompt is longer than ``max_prompt_tokens`` drop the oldest remaining turn
(the system prompt, the task and the current observation always stay); if the current turn
alone is too long, keep the last ``max_prompt_tokens`` tokens.

Example:
    >>> import torch
    >>> from agentgym_budget.train import TrainConfig, make_train_env, tiny_model_and_tokenizer
    >>> config = TrainConfig(env_id="KeyDoor-v0", budget="fixed:3", max_new_tokens=4)
    >>> model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0")
    >>> envs = [make_train_env(config) for _ in range(2)]
    >>> episodes = collect_episodes(model, tokenizer, envs, seeds=[7, 7], config=config, sampling_seed=0)
    >>> [len(e.turns) for e in episodes], episodes[0].budget
    ([3, 3], 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import torch

from agentgym_budget.envs.registration import make_budget_env
from agentgym_budget.policies.prompting import build_prompt, parse_action
from agentgym_budget.train.config import TrainConfig
from agentgym_budget.wrappers import ProcessReward

__all__ = [
    "Episode",
    "LMPolicy",
    "Turn",
    "collect_episodes",
    "fit_prompt",
    "generate_replies",
    "make_train_env",
    "reply_to_action",
]


@dataclass
class Turn:
    """One generation: the prompt the model saw and the tokens it sampled (the loss's sample)."""

    prompt_ids: list[int]
    action_ids: list[int]
    action: str  # the parsed command sent to the env
    process_reward: float = 0.0  # this turn's info["process_reward"] (0 without a ProcessReward wrapper)


@dataclass
class Episode:
    """One training episode as the learner needs it: every turn's prompt and sampled tokens, and its return.

    The evaluator's :class:`~agentgym_budget.eval.rollout.EpisodeRecord` is the same kind of
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
    invalid_actions: int = 0  # commands that were not admissible

    @property
    def lost(self) -> bool:
        """Ended by the env without a win (e.g. KeyDoor's wrong door), not by the budget."""
        return self.terminated and not self.won


def make_train_env(config: TrainConfig) -> gym.Env:
    """The training env: ``config.env_id`` under ``TurnBudget(config.budget)`` (+ ``ProcessReward``)."""
    env = make_budget_env(config.env_id, config.budget, show_budget=config.show_budget, **config.env_kwargs)
    if config.process_reward:
        # Outermost, so it sees the budget's truncation (see ProcessReward's docstring).  The raw
        # per-turn signal (not the potential-based form, whose zero end potential hands every
        # bonus back on the last turn): the trainer turns it into per-turn returns-to-go.
        env = ProcessReward(env, signal=config.process_reward, coef=1.0, potential_based=False)
    return env


def fit_prompt(
    tokenizer: Any,
    history: Sequence[tuple[str, str | None]],
    task: str,
    admissible: Sequence[str] | None,
    max_prompt_tokens: int,
    max_turns_shown: int | None = None,
) -> list[int]:
    """The prompt's token ids under the context-limit policy of the module docstring."""
    turns = list(history)[-max_turns_shown:] if max_turns_shown else list(history)
    while True:
        ids = tokenizer(build_prompt(turns, task=task, admissible=admissible))["input_ids"]
        if len(ids) <= max_prompt_tokens:
            return ids
        if len(turns) == 1:
            return ids[-max_prompt_tokens:]
        turns = turns[1:]


@torch.no_grad()
def collect_episodes(
    model: Any,
    tokenizer: Any,
    envs: Sequence[gym.Env],
    seeds: Sequence[int],
    config: TrainConfig,
    sampling_seed: int,
) -> list[Episode]:
    """Run one episode in each env (``envs[i].reset(seed=seeds[i])``) until all have ended.

    Sampling draws from a ``torch`` generator state set from ``sampling_seed``, so the same
    (model, seeds, sampling_seed) gives the same episodes.
    """
    if len(envs) != len(seeds):
        raise ValueError(f"{len(envs)} envs for {len(seeds)} seeds")
    was_training = model.training
    model.eval()
    torch.manual_seed(sampling_seed)

    episodes, histories, infos, running = [], [], [], []
    for env, seed in zip(envs, seeds):
        obs, info = env.reset(seed=int(seed))
        episodes.append(Episode(seed=int(seed), task=str(info["task"]), budget=int(info.get("budget", 0))))
        histories.append([(obs, None)])
        infos.append(info)
        running.append(True)

    while any(running):
        active = [i for i, r in enumerate(running) if r]
        prompts = [
            fit_prompt(tokenizer, histories[i], episodes[i].task,
                       infos[i]["admissible_commands"] if config.list_admissible else None,
                       config.max_prompt_tokens, config.max_turns_shown)
            for i in active
        ]
        replies = generate_replies(model, tokenizer, prompts, temperature=config.temperature, top_p=config.top_p,
                                   max_new_tokens=config.max_new_tokens)
        for i, prompt_ids, reply_ids in zip(active, prompts, replies):
            admissible = infos[i]["admissible_commands"]
            action = reply_to_action(tokenizer, reply_ids, admissible)
            episode = episodes[i]
            episode.invalid_actions += action not in admissible
            obs, _, terminated, truncated, info = envs[i].step(action)
            episode.turns.append(Turn(prompt_ids, reply_ids, action, float(info.get("process_reward", 0.0))))
            episode.won = episode.won or bool(info.get("won", False))
            episode.terminated = bool(terminated)
            histories[i][-1] = (histories[i][-1][0], action)
            histories[i].append((obs, None))
            infos[i] = info
            running[i] = not (terminated or truncated)
    model.train(was_training)
    return episodes


def reply_to_action(tokenizer: Any, reply_ids: Sequence[int], admissible: Sequence[str] | None) -> str:
    """The command in a sampled reply (text after an imagined next ``Observation:`` is ignored)."""
    text = tokenizer.decode(reply_ids, skip_special_tokens=True).split("Observation:", 1)[0]
    return parse_action(text, admissible)


def generate_replies(model: Any, tokenizer: Any, prompts: list[list[int]], *, temperature: float, top_p: float,
                     max_new_tokens: int) -> list[list[int]]:
    """Sample a reply per prompt (one left-padded batch); each reply ends at its first EOS."""
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids):] = torch.tensor(ids)
        attention_mask[row, width - len(ids):] = 1
    out = model.generate(
        input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
        do_sample=True, temperature=temperature, top_p=top_p, top_k=0,
        max_new_tokens=max_new_tokens, pad_token_id=pad_id, eos_token_id=tokenizer.eos_token_id,
        synced_gpus=False,  # ranks generate apart (transformers would lock-step an FSDP model's ranks)
    )
    replies = []
    for row in out[:, width:].tolist():
        if tokenizer.eos_token_id in row:
            row = row[: row.index(tokenizer.eos_token_id) + 1]  # the EOS is a sampled action token too
        replies.append(row)
    return replies


class LMPolicy:
    """The model being trained as an evaluator :class:`~agentgym_budget.policies.base.Policy`.

    It prompts, samples and parses exactly as :func:`collect_episodes` does, so Pass@(K,T)
    measures the policy that training optimises.
    """

    reads_budget = False  # the budget reaches the model only through the env's observations

    def __init__(self, model: Any, tokenizer: Any, config: TrainConfig, temperature: float | None = None) -> None:
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.temperature = config.temperature if temperature is None else temperature
        self.name = f"lm({config.model})"
        self._history: list[tuple[str, str | None]] = []

    def reset(self, seed: int | None = None) -> None:
        self._history = []
        if seed is not None:
            torch.manual_seed(seed)

    @torch.no_grad()
    def act(self, obs: str, info: dict[str, Any]) -> str:
        admissible = info.get("admissible_commands")
        prompt = fit_prompt(self.tokenizer, [*self._history, (obs, None)], str(info.get("task", "")),
                            admissible if self.config.list_admissible else None, self.config.max_prompt_tokens,
                            self.config.max_turns_shown)
        was_training = self.model.training
        self.model.eval()
        [reply] = generate_replies(self.model, self.tokenizer, [prompt], temperature=self.temperature,
                                   top_p=self.config.top_p, max_new_tokens=self.config.max_new_tokens)
        self.model.train(was_training)
        action = reply_to_action(self.tokenizer, reply, admissible)
        self._history.append((obs, action))
        return action

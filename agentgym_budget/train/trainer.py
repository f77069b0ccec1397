"""The training loop: rollout → group advantages → clipped-ratio update, with checkpoints and eval.

One *update* (``config.total_updates`` of them) is::

    tasks   = tasks_per_update env seeds drawn from (seed, update)      # B tasks
    seeds   = each task repeated group_size times                       # B*G episodes
    episodes = collect_episodes(model, envs, seeds)                     # multi-turn, batched generation
    R       = won                                                       # [B*G] outcome returns
    A       = group_advantages(R, failed)                               # [B*G], GRPO or RLOO (GRPO's for GiGPO)
              # a failed episode (env raised twice): A = 0, outside its group's baseline (train/rollout.py)
    G[i,t]  = process return-to-go of turn t (0 without process reward) # per turn (train/grpo.py)
    S[i,t]  = GiGPO step advantage of turn t (0 unless advantage=gigpo) # per turn, anchor states (train/gigpo.py)
    samples = every turn of every episode, its tokens carry A[i] + c*G[i,t] + omega*S[i,t]   # S turns, N tokens
    for epoch in range(update_epochs):
        for minibatch in per_shard_split(shuffle(samples), minibatches):   # minibatch m = every shard's part m
            for micro in split(minibatch, micro_batch_size):           # gradient accumulation
                logp, entropy = action_logprobs(model, micro)           # [n], fused chunked LM head
                # (trunk reuse, LoRA on the top N: only those N layers, on the rollout's hidden states)
                loss = policy_loss(logp, old_logp, ref_logp, A, weights) / tokens-in-minibatch
                loss.backward()
            clip_grad_norm_(max_grad_norm); optimizer.step()

Everything random in an update derives from ``(seed, update)``, so a run resumed from a
checkpoint continues exactly as the uninterrupted run would.  Under ``torchrun`` each rank
collects its own shards of whole groups and the gradients are all-reduced
(:mod:`~agentgym_budget.train.parallel`).

Example:
    >>> from agentgym_budget.train import TrainConfig, Trainer
    >>> trainer = Trainer(TrainConfig(env_id="KeyDoor-v0", total_updates=1, tasks_per_update=2, group_size=2,
    ...                               max_new_tokens=4, eval_every=0, output_dir=str(getfixture("tmp_path")),
    ...                               progress_bar=False, tensorboard=False))  # doctest: +SKIP
    >>> history = trainer.train()  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import copy
import csv
import inspect
import json
import math
import random
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from agentgym_budget.envs.registration import budget_env_id, env_creator
from agentgym_budget.seeds import shard_shuffle_seed
from agentgym_budget.train.config import TrainConfig
from agentgym_budget.train.gigpo import step_advantages, step_group_sizes
from agentgym_budget.train.grpo import (action_logprobs, collate, group_advantages,
                                        token_weight, turn_credits, turn_samples)
from agentgym_budget.train.kernels import policy_loss
from agentgym_budget.train.parallel import (all_gather_objects, all_reduce_max, all_reduce_sum, barrier,
                                            full_model_state, full_parameters, init_process_group,
                                            load_optimizer_state, optimizer_state, wrap_for_training)
from agentgym_budget.train.rollout import training_policy, trunk_layer
from agentgym_budget.train.sharding import LocalRolloutPool, RolloutPoolFactory, shard_seeds
from agentgym_budget.train.sft import load_for_training, with_lora
from agentgym_budget.wrappers.budget_spec import OutcomeSchedule, parse_budget_spec

__all__ = ["Trainer", "load_for_training", "train"]

_CHECKPOINT_PREFIX = "update_"


def train(config: TrainConfig, rollout_pool: RolloutPoolFactory | None = None) -> list[dict[str, float]]:
    """Build a :class:`Trainer` for ``config`` and run it; returns the per-update metrics."""
    return Trainer(config, rollout_pool).train()


class _EpisodeFacts(NamedTuple):
    """What the logged metrics need of one finished episode (gathered from every rank: small, picklable)."""

    won: bool
    budget: int
    turns: int
    invalid_actions: int
    process_return: float  # the sum of its turns' process rewards
    credited_return: float  # what the learner credits its first turn: won + coef * G_0 (train/grpo.py)
    shared_turns: int  # GiGPO: turns whose state another turn of the group also acted on (train/gigpo.py)
    budget_key: str = ""  # an adaptive budget's task key, and whether the MDP ended (its outcome)
    terminated: bool = False

    @classmethod
    def of(cls, episode: Any, config: TrainConfig, credits: list[float], shared_turns: int = 0) -> _EpisodeFacts:
        rewards = [turn.process_reward for turn in episode.turns]
        coef = config.process_reward_coef if config.process_reward else 0.0
        return cls(episode.won, episode.budget, len(episode.turns), episode.invalid_actions, sum(rewards),
                   float(episode.won) + coef * (credits[0] if credits else 0.0), shared_turns,
                   episode.budget_key, episode.terminated)


class _ActionLogprobs(torch.nn.Module):
    """``action_logprobs(model, batch)`` as a module: what DDP/FSDP wrap (the model's weights are
    used in this ``forward`` only, through the decoder and the fused LM head)."""

    def __init__(self, model: Any, trainer: Trainer) -> None:
        super().__init__()
        self.model = model
        self._kwargs = trainer.logprob_kwargs

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return action_logprobs(self.model, batch, **self._kwargs())


def _lr_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig) -> Any:
    """transformers' constant or cosine schedule with linear warm-up, over every planned optimizer step."""
    import transformers

    total = config.total_updates * config.update_epochs * config.minibatches
    if config.lr_schedule == "cosine":
        return transformers.get_cosine_schedule_with_warmup(optimizer, config.lr_warmup_steps, total)
    return transformers.get_constant_schedule_with_warmup(optimizer, config.lr_warmup_steps)


class Trainer:
    """The reference multi-turn GRPO/RLOO trainer (see the module docstring).

    ``rollout_pool`` builds what collects the episodes, ``factory(config, model, tokenizer)``:
    ``None`` is :class:`~agentgym_budget.train.sharding.LocalRolloutPool` (this process); for
    ``rollout_backend="ray"`` pass ``agentgym_budget.distributed.RayRolloutPool.for_config``
    (the CLI does).  Every pool gives the same episodes for the same seeds and shards.

    Under ``torchrun`` with W processes each rank collects its own whole groups and the
    gradients are all-reduced (:mod:`~agentgym_budget.train.parallel`); the result equals one
    process run with ``rollout_shards`` multiplied by W.
    """

    def __init__(self, config: TrainConfig, rollout_pool: RolloutPoolFactory | None = None) -> None:
        if rollout_pool is None and config.rollout_backend != "local":
            raise ValueError(
                f"rollout_backend={config.rollout_backend!r} needs its rollout pool: "
                "Trainer(config, rollout_pool=agentgym_budget.distributed.RayRolloutPool.for_config) "
                "(the CLI's --rollout-backend ray passes it)")
        self.config = config
        if config.torch_threads is not None:
            torch.set_num_threads(config.torch_threads)
        self.device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if config.device == "auto"
                                   else config.device)
        self.group = init_process_group(self.device.type)
        if self.group.active:
            if self.device.type == "cuda":
                self.device = torch.device("cuda", self.group.local_rank)
            shards = self.group.world_size * config.rollout_shards
            if config.tasks_per_update % shards:
                raise ValueError(f"tasks_per_update={config.tasks_per_update} must split evenly over "
                                 f"{self.group.world_size} ranks x rollout_shards={config.rollout_shards}")
        use_bf16 = config.bf16 == "on" or (config.bf16 == "auto" and self.device.type == "cuda"
                                           and torch.cuda.is_bf16_supported())
        self.autocast_dtype = torch.bfloat16 if use_bf16 else None
        self.use_compile = config.compile == "on" or (config.compile == "auto" and self.device.type == "cuda")
        self.eval_env_kwargs, self.eval_held_out = evaluation_env_kwargs(config)  # fail before loading anything
        self.output_dir = Path(config.output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)

        checkpoint = self._find_checkpoint(config.resume)
        self.model, self.tokenizer, self.reference = self._build_models(checkpoint)
        # trunk reuse: the first trained layer, where the rollout's hidden states enter the loss (None: off)
        self.trunk_layer = trunk_layer(self.model, config)
        # the log-prob pass as a module, so that DDP/FSDP hooks see every use of the weights
        self.train_module = wrap_for_training(_ActionLogprobs(self.model, self), self.group, config.distributed,
                                              self.device)
        assert config.learning_rate is not None  # TrainConfig.__post_init__ resolves None (per model)
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad], lr=config.learning_rate,
            weight_decay=config.weight_decay, betas=(config.adam_beta1, config.adam_beta2))
        self.scheduler = _lr_scheduler(self.optimizer, config)
        self.rollout_pool = (rollout_pool or LocalRolloutPool)(config, self.model, self.tokenizer)
        self.update = 0  # updates done
        self._cpu = dict.fromkeys(_CPU_PARTS, 0.0)  # this update's CPU seconds by part (_cpu_timer)
        self.episodes_done = 0  # over all ranks
        self.env_steps_done = 0
        # an adaptive budget's outcome table, fed every update's episodes (all ranks'), handed to every env copy
        self.budget_schedule = parse_budget_spec(config.budget)
        self.budget_outcomes: dict[str, dict[int, list[float]]] = {}
        if checkpoint:
            self._load_state(checkpoint)
        self.logger = (_MetricsLogger(self.output_dir, config.tensorboard, resume=checkpoint is not None)
                       if self.group.is_main else _NullLogger())

    def _build_models(self, checkpoint: Path | None) -> tuple[Any, Any, Any]:
        """``(model, tokenizer, reference)``: the policy (from ``checkpoint`` when resuming, LoRA when
        ``lora_r``, gradient checkpointing when asked) and the frozen initial policy (``kl_coef > 0``)."""
        config = self.config
        # TrainConfig.__post_init__ resolves these None defaults (per model)
        assert config.format_warmup_steps is not None and config.kl_coef is not None
        warmup_steps = config.format_warmup_steps

        def initial() -> tuple[Any, Any]:
            return load_for_training(config.model, config, self.device, warmup_steps)

        if checkpoint is None or config.lora_r:
            model, tokenizer = initial()
        else:
            model, tokenizer = load_for_training(str(checkpoint), config, self.device)
        reference = None
        if config.kl_coef > 0:
            reference = copy.deepcopy(model) if checkpoint is None or config.lora_r else initial()[0]
            reference.eval().requires_grad_(False)
        if config.lora_r:
            model = with_lora(model, config, checkpoint)
        if config.gradient_checkpointing:
            if hasattr(model, "activation_checkpointing_enable"):  # transformers 5's name
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model, tokenizer, reference

    # -- the loop -------------------------------------------------------------------------
    def train(self) -> list[dict[str, float]]:
        config = self.config
        history = []
        bar = _progress_bar(config.progress_bar and self.group.is_main, initial=self.update,
                            total=config.total_updates)
        if config.eval_every and self.update == 0:  # the starting point, for "before → after"
            self.evaluate()
        while self.update < config.total_updates:
            metrics = self.train_step()
            history.append(metrics)
            self.logger.log(metrics)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(success=f"{metrics['success_rate']:.2f}", loss=f"{metrics['loss']:.3f}")
            if config.eval_every and self.update % config.eval_every == 0 and self.update < config.total_updates:
                self.evaluate()
            if config.save_every and self.update % config.save_every == 0:
                self.save_checkpoint()
        if bar is not None:
            bar.close()
        if config.eval_every:
            self.evaluate()
        if not (config.save_every and self.update % config.save_every == 0):
            self.save_checkpoint()
        self.logger.close()
        self.rollout_pool.close()
        return history

    def train_step(self) -> dict[str, float]:
        """One update: collect B*G episodes (this rank's groups), compute advantages, take the optimizer steps."""
        config, update, group = self.config, self.update, self.group
        task_rng = np.random.default_rng([config.seed, update])
        task_seeds = task_rng.integers(0, 2**31 - 1, size=config.tasks_per_update)
        seeds = np.repeat(task_seeds, config.group_size).tolist()  # [B*G]; a group shares task and budget

        start, cpu_start = time.perf_counter(), time.process_time()
        sampling_seed = int(task_rng.integers(2**31 - 1))
        # the update's shards of whole groups; rank r collects shards r*rollout_shards ... (r+1)*rollout_shards-1
        plan = shard_seeds(seeds, config.group_size, sampling_seed, group.world_size * config.rollout_shards)
        mine = plan[group.rank * config.rollout_shards:(group.rank + 1) * config.rollout_shards]
        with full_parameters(self.train_module):
            if not group.active:  # one call: a pool may run the shards in parallel
                episodes = self.rollout_pool.collect(self.model, seeds, sampling_seed, config.rollout_shards,
                                                     self.episodes_done, self.env_steps_done, **self._budget_state())
            else:
                episodes = []
                for shard, shard_seed in mine:
                    episodes += self.rollout_pool.collect(self.model, shard, shard_seed, 1, self.episodes_done,
                                                          self.env_steps_done, **self._budget_state())
        rollout_seconds = time.perf_counter() - start
        cpu_rollout_seconds = time.process_time() - cpu_start

        returns = torch.tensor([float(e.won) for e in episodes])  # [this rank's episodes] outcome returns
        failed = [e.failed for e in episodes]  # no return: zero advantage, outside its group's baseline
        gigpo = config.advantage == "gigpo"  # the episode level is GRPO's; the step level is added per turn
        advantages = group_advantages(returns, config.group_size, "grpo" if gigpo else config.advantage,
                                      config.scale_by_std, failed=failed)
        # GiGPO: each turn against the turns of its group that acted on the same state (train/gigpo.py)
        steps = step_advantages(episodes, config.group_size, config.gigpo_gamma, config.scale_by_std) if gigpo else None
        # per-turn advantages: outcome advantage + coef * process return-to-go (+ omega * A^S), per shard
        coef = config.process_reward_coef if config.process_reward else 0.0
        credits = turn_credits(episodes, config.group_size, config.process_gamma, config.process_reward_norm)
        samples_by_shard, offset = [], 0
        for shard, _ in mine:
            n = len(shard)
            samples_by_shard.append(turn_samples(
                episodes[offset:offset + n], advantages[offset:offset + n], coef, config.process_gamma,
                steps[offset:offset + n] if steps is not None else None, config.gigpo_omega if gigpo else 0.0,
                credits[offset:offset + n]))
            offset += n
        zero_groups = (advantages.view(-1, config.group_size).abs().sum(1) == 0).tolist()
        # failed episodes (no turns, no return) are left out of the episode metrics; their faults are counted
        shared = ([sum(size > 1 for size in sizes) for sizes in step_group_sizes(episodes, config.group_size)]
                  if gigpo else [0] * len(episodes))
        facts = [_EpisodeFacts.of(e, config, c, n) for e, c, n in zip(episodes, credits, shared) if not e.failed]
        faults = (sum(e.env_failures for e in episodes), sum(failed))
        everything = all_gather_objects(group, (facts, zero_groups, faults))  # every rank's, for the logged metrics
        facts = [f for rank_facts, _, _ in everything for f in rank_facts]
        zero_groups = [z for _, rank_zero, _ in everything for z in rank_zero]
        env_failures, dropped_episodes = (sum(rank[2][k] for rank in everything) for k in (0, 1))
        if not facts:
            raise RuntimeError(f"update {update + 1}: every episode's env raised twice (see the warnings); "
                               f"nothing to learn from")
        self.episodes_done += len(facts)
        self.env_steps_done += sum(f.turns for f in facts)
        self._record_outcomes(facts)

        start, cpu_start = time.perf_counter(), time.process_time()
        self._cpu = dict.fromkeys(_CPU_PARTS, 0.0)
        first_shard = group.rank * config.rollout_shards
        update_stats = self._optimize(samples_by_shard, int(task_rng.integers(2**31 - 1)), first_shard, len(plan))
        self.update += 1
        turns = [f.turns for f in facts]
        return {
            "update": self.update,
            "episodes": self.episodes_done,
            "env_steps": self.env_steps_done,
            "success_rate": float(np.mean([f.won for f in facts])),
            # the outcome return is the win (1 or 0): without process_reward this equals success_rate
            "return_mean": float(np.mean([f.credited_return for f in facts])),
            "budget_mean": float(np.mean([f.budget for f in facts])),
            "turns_mean": float(np.mean(turns)),
            "invalid_action_rate": sum(f.invalid_actions for f in facts) / max(sum(turns), 1),
            "zero_advantage_groups": float(np.mean(zero_groups)),
            "process_return_mean": float(np.mean([f.process_return for f in facts])),
            # GiGPO: the share of turns in a step group of two or more (the others get A^S = 0)
            **({"shared_state_turns": sum(f.shared_turns for f in facts) / max(sum(turns), 1)}
               if config.advantage == "gigpo" else {}),
            "env_failures": env_failures,  # env raises this update (retries included), see train/rollout.py
            "dropped_episodes": dropped_episodes,  # episodes whose env failed twice: no return, zero advantage
            **update_stats,
            "learning_rate": self.optimizer.param_groups[0]["lr"],
            "update_episodes": len(facts),
            "update_turns": sum(turns),
            "rollout_seconds": rollout_seconds,
            "update_seconds": time.perf_counter() - start,
            # CPU seconds of this process (every thread; not the time spent waiting for a shared core):
            # rollout = batched generation + env steps; the update's parts (see _CPU_PARTS)
            "cpu_rollout_seconds": cpu_rollout_seconds,
            **{f"cpu_{part}_seconds": seconds for part, seconds in self._cpu.items()},
            "cpu_update_seconds": time.process_time() - cpu_start,
            **self._budget_choices(facts),
        }

    def _budget_state(self) -> dict[str, Any]:
        """The ``budget_outcomes=`` of a rollout pool's collect: an adaptive budget's table, else nothing."""
        return {"budget_outcomes": self.budget_outcomes} if isinstance(self.budget_schedule, OutcomeSchedule) else {}

    def _record_outcomes(self, facts: list[_EpisodeFacts]) -> None:
        """Count every rank's finished episodes in the adaptive budget's table (in gather order: the same on every rank)."""
        schedule = self.budget_schedule
        if isinstance(schedule, OutcomeSchedule):
            for f in facts:
                schedule.record(self.budget_outcomes, f.budget_key, f.budget, f.turns, f.won, f.terminated)

    def _budget_choices(self, facts: list[_EpisodeFacts]) -> dict[str, float]:
        """An adaptive budget's choices this update: the share of episodes drawn at each budget (``budget_share_T<T>``)."""
        schedule = self.budget_schedule
        if not isinstance(schedule, OutcomeSchedule):
            return {}
        budgets = [f.budget for f in facts]
        return {f"budget_share_T{b}": budgets.count(b) / len(budgets) for b in getattr(schedule, "budgets", ())}

    def _minibatches(self, samples_by_shard: list[list], generators: list[torch.Generator]) -> list[list]:
        """This epoch's minibatches: each shard's samples shuffled by its own generator and split into
        ``minibatches`` parts; minibatch m is every shard's part m (so W ranks form the same global
        minibatches as one process that holds all W shards)."""
        offsets = np.cumsum([0] + [len(s) for s in samples_by_shard])
        parts: list[list[int]] = [[] for _ in range(self.config.minibatches)]
        for shard, (shard_samples, generator) in enumerate(zip(samples_by_shard, generators)):
            order = torch.randperm(len(shard_samples), generator=generator).numpy() + offsets[shard]
            for m, part in enumerate(np.array_split(order, self.config.minibatches)):
                parts[m] += part.tolist()
        return parts

    def _optimize(self, samples_by_shard: list[list], shuffle_seed: int, first_shard: int, shards: int
                  ) -> dict[str, float]:
        config, group = self.config, self.group
        samples = [s for shard in samples_by_shard for s in shard]
        if not samples:
            raise RuntimeError("no turn with a sampled token in this rank's episodes (max_new_tokens >= 1?)")
        with full_parameters(self.train_module), self._cpu_timer("old_logprobs"):
            old_logps = self._per_sample_logprobs(self.model, samples) if self._needs_old_logps() else None
        with self._cpu_timer("ref_logprobs"):
            ref_logps = self._per_sample_logprobs(self.reference, samples) if self.reference is not None else None
        generators = [torch.Generator().manual_seed(
            shuffle_seed if shards == 1 else shard_shuffle_seed(shuffle_seed, first_shard + j))
            for j in range(len(samples_by_shard))]
        skip_zero = config.kl_coef == 0 and config.entropy_coef == 0  # zero advantage = zero gradient
        sums: dict[str, float] = {}
        steps = 0
        self.model.train()
        for _ in range(config.update_epochs):
            for minibatch in self._minibatches(samples_by_shard, generators):
                weights = [token_weight(samples[i], config.loss_aggregation) * samples[i].action_tokens
                           for i in minibatch]
                active = [i for i in minibatch if samples[i].advantage != 0] if skip_zero else minibatch
                total_weight, total_active = all_reduce_sum(group, [sum(weights), len(active)])
                normalizer = max(total_weight, 1e-8)  # the loss is a mean over the whole (global) minibatch
                if total_active == 0:
                    with warnings.catch_warnings():  # the schedule follows the planned steps, taken or not
                        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
                        self.scheduler.step()
                    continue
                micros = [(active[i:i + config.micro_batch_size], 1.0)
                          for i in range(0, len(active), config.micro_batch_size)]
                # every rank runs as many micro-batches (FSDP gathers weights in each forward, a collective);
                # a rank with fewer pads with zero-weight ones (no gradient, but it joins the all-reduce)
                micros += [([0], 0.0)] * (all_reduce_max(group, len(micros)) - len(micros))
                for index, (micro, scale) in enumerate(micros):
                    with self._gradient_sync(index == len(micros) - 1):
                        stats = self._backward_micro(samples, micro, old_logps, ref_logps, normalizer, scale)
                    for key, value in stats.items():
                        sums[key] = sums.get(key, 0.0) + value
                with self._cpu_timer("optimizer"):
                    grad_norm = torch.nn.utils.clip_grad_norm_(
                        [p for p in self.model.parameters() if p.requires_grad], config.max_grad_norm)
                    self.optimizer.step()
                    self.scheduler.step()
                    self.optimizer.zero_grad(set_to_none=True)
                sums["grad_norm"] = sums.get("grad_norm", 0.0) + float(grad_norm) / group.world_size
                steps += 1
        keys = ("loss", "pg_loss", "kl", "clip_fraction", "approx_kl_old", "grad_norm", "entropy_sum", "weight_sum")
        totals = dict(zip(keys, all_reduce_sum(group, [sums.get(key, 0.0) for key in keys])))
        out = {key: totals[key] / max(steps, 1) for key in keys[:6]}
        # the mean entropy of the tokens that went through the model (zero-advantage turns may be skipped)
        out["entropy"] = totals["entropy_sum"] / max(totals["weight_sum"], 1e-8)
        out["optimizer_steps"] = steps
        out["action_tokens"] = int(all_reduce_sum(group, [sum(s.action_tokens for s in samples)])[0])
        # trunk reuse: the hidden states this update kept (tokens x hidden x bytes), freed with the update's samples
        out["trunk_state_bytes"] = sum(s.trunk_states.nelement() * s.trunk_states.element_size()
                                       for s in samples if s.trunk_states is not None)
        out["trunk_reused_samples"] = sum(s.trunk_states is not None for s in samples) / len(samples)
        return out

    def _gradient_sync(self, sync: bool) -> Any:
        """DDP's ``no_sync`` for all but the last micro-batch of a minibatch (one all-reduce per step;
        FSDP2 reduce-scatters after every micro-batch, in step on every rank)."""
        if sync or not hasattr(self.train_module, "no_sync"):
            return contextlib.nullcontext()
        return self.train_module.no_sync()

    def _backward_micro(self, samples, micro, old_logps, ref_logps, normalizer, scale=1.0) -> dict[str, float]:
        config = self.config
        batch = collate([samples[i] for i in micro], self.tokenizer.pad_token_id, config.loss_aggregation)
        with self._cpu_timer("forward"):
            logp, entropy = self.train_module(batch)
            old = torch.cat([old_logps[i] for i in micro]) if old_logps is not None else logp.detach()
            ref = torch.cat([ref_logps[i] for i in micro]) if ref_logps is not None else None
            weights = batch["weights"].to(logp.device) * scale
            loss, stats = policy_loss(
                logp, old, ref, batch["advantages"].to(logp.device), weights, epsilon_low=config.epsilon_low,
                epsilon_high=config.epsilon_high, kl_coef=config.kl_coef, normalizer=normalizer,
                compile=self.use_compile)
            entropy_term = (weights * entropy).sum() / normalizer
            loss = loss - config.entropy_coef * entropy_term
        with self._cpu_timer("backward"):  # DDP/FSDP average the ranks' gradients: each loss is its share
            (loss * self.group.world_size).backward()
        return {"loss": float(loss.detach()), "entropy_sum": float((weights * entropy.detach()).sum()),
                "weight_sum": float(weights.sum()), **{k: float(v) for k, v in stats.items()}}

    @contextlib.contextmanager
    def _cpu_timer(self, part: str) -> Any:
        """Add the process CPU seconds of the block to this update's ``part`` (logged as ``cpu_<part>_seconds``).

        CPU time, not wall time: on a shared machine the wall clock also counts the time other
        processes hold the cores.  On CUDA the kernels run asynchronously, so there the parts are the
        host's share (launch, Python) and ``update_seconds``/``rollout_seconds`` the wall times."""
        start = time.process_time()
        try:
            yield
        finally:
            self._cpu[part] = self._cpu.get(part, 0.0) + time.process_time() - start

    def _needs_old_logps(self) -> bool:
        # With one optimizer step per rollout the policy is still the sampler: old = logp.detach().
        return self.config.update_epochs * self.config.minibatches > 1

    def logprob_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of every log-prob pass (update, old policy, reference)."""
        config = self.config
        return {"temperature": config.temperature, "fused": config.fused_logprobs,
                "chunk_size": config.logprob_chunk_size, "compile": self.use_compile,
                "autocast_dtype": self.autocast_dtype, "trunk_layer": self.trunk_layer}

    @torch.no_grad()
    def _per_sample_logprobs(self, model: Any, samples: list) -> list[torch.Tensor]:
        """Each sample's action-token log-probs under ``model`` (old policy / reference)."""
        config, out = self.config, []
        was_training = model.training
        model.eval()
        for start in range(0, len(samples), config.micro_batch_size):
            chunk = samples[start : start + config.micro_batch_size]
            batch = collate(chunk, self.tokenizer.pad_token_id, config.loss_aggregation)
            logp, _ = action_logprobs(model, batch, **self.logprob_kwargs())
            out += list(logp.split([len(s.input_ids) - s.prompt_length for s in chunk]))
        model.train(was_training)
        return out

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(self) -> Any:
        """Pass@(K,T) of the current policy on the evaluation tasks (``eval_split``, seeds from ``eval_seed``).

        Writes ``output_dir/eval/update_NNNNNN/`` (the evaluator's ``passkt.json``/CSV files and
        heatmap) and logs every cell as ``eval/pass@K,T=T`` to ``eval.jsonl``/``eval.csv``.
        Under ``torchrun`` rank 0 evaluates (the others wait; they return ``None``).
        """
        with full_parameters(self.train_module):
            result = self._evaluate() if self.group.is_main else None
            barrier(self.group)
        return result

    def _evaluate(self) -> Any:
        from agentgym_budget.eval import evaluate

        config = self.config
        env_id = budget_env_id(config.env_id) or config.env_id
        policy = training_policy(self.model, self.tokenizer, config, temperature=config.eval_temperature)
        result = evaluate(env_id, policy, ks=config.eval_ks, ts=config.eval_ts, tasks=config.eval_tasks,
                          attempts=config.eval_attempts, seed=config.eval_seed,
                          env_kwargs=self.eval_env_kwargs, bootstrap=200)
        folder = self.output_dir / "eval" / f"{_CHECKPOINT_PREFIX}{self.update:06d}"
        result.save(folder)  # passkt.json, passkt.csv, task_counts.csv
        if config.eval_plots:
            from agentgym_budget.eval.plots import save_plots

            save_plots(result, folder)  # passkt_heatmap.png, passkt_curves.png
        metrics = {"update": self.update, "eval/held_out": float(self.eval_held_out),
                   **{f"eval/pass@{k},T={t}": result.value(k, t)
                                              for k in config.eval_ks for t in config.eval_ts}}
        self.logger.log(metrics, stream="eval")
        return result

    # -- checkpoints ----------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Rank 0 writes ``checkpoints/update_NNNNNN/`` (model or LoRA adapter, tokenizer, trainer state)."""
        folder = self.output_dir / "checkpoints" / f"{_CHECKPOINT_PREFIX}{self.update:06d}"
        optimizer = optimizer_state(self.train_module, self.optimizer)  # collectives under FSDP
        weights = full_model_state(self.train_module)
        if self.group.is_main:
            self._write_checkpoint(folder, optimizer, weights)
        barrier(self.group)
        return folder

    def _write_checkpoint(self, folder: Path, optimizer: dict[str, Any], weights: dict | None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        if weights is not None and getattr(self.model.config, "tie_word_embeddings", False):
            # a gathered state dict holds tied weights twice; save_pretrained drops them only from its own
            for key in getattr(self.model, "_tied_weights_keys", None) or ():
                weights.pop(key, None)
        self.model.save_pretrained(folder, **({} if weights is None else {"state_dict": weights}))
        self.tokenizer.save_pretrained(folder)
        torch.save({
            "update": self.update,
            "episodes_done": self.episodes_done,
            "env_steps_done": self.env_steps_done,
            "budget_outcomes": self.budget_outcomes,
            "optimizer": optimizer,
            "scheduler": self.scheduler.state_dict(),
            "rng": {"python": random.getstate(), "numpy": _numpy_rng_state(), "torch": torch.get_rng_state()},
            "config": self.config.to_dict(),
        }, folder / "trainer_state.pt")
        checkpoints = sorted((self.output_dir / "checkpoints").glob(f"{_CHECKPOINT_PREFIX}*"))
        for old in checkpoints[: -self.config.keep_checkpoints]:
            shutil.rmtree(old)

    def _find_checkpoint(self, resume: str | None) -> Path | None:
        if resume is None:
            return None
        if resume == "auto":
            found = sorted((self.output_dir / "checkpoints").glob(f"{_CHECKPOINT_PREFIX}*"))
            return found[-1] if found else None
        path = Path(resume)
        if not (path / "trainer_state.pt").is_file():
            raise FileNotFoundError(f"resume={resume!r} is not a checkpoint folder (no trainer_state.pt in it)")
        return path

    def _load_state(self, folder: Path) -> None:
        state = load_trainer_state(folder / "trainer_state.pt", self.device)
        load_optimizer_state(self.train_module, self.optimizer, state["optimizer"])
        if "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
        self.update, self.episodes_done, self.env_steps_done = (
            state["update"], state["episodes_done"], state["env_steps_done"])
        self.budget_outcomes = state.get("budget_outcomes", {})  # checkpoints before adaptive budgets have none
        random.setstate(state["rng"]["python"])
        _set_numpy_rng_state(state["rng"]["numpy"])
        torch.set_rng_state(state["rng"]["torch"])


def load_trainer_state(path: Path, device: Any = "cpu") -> dict[str, Any]:
    """A checkpoint's ``trainer_state.pt``, unpickled with ``weights_only=True``.

    Only tensors and plain containers load: a file that would build any other object (a crafted
    pickle that calls ``os.system``, say) is refused with a :class:`ValueError`, never run.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "trainer_state.pt"
        >>> torch.save({"update": 3, "rng": {"numpy": _numpy_rng_state()}}, path)
        >>> load_trainer_state(path)["update"]
        3
    """
    import pickle

    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as e:
        raise ValueError(f"{path} holds objects other than tensors and plain containers; refusing to load it "
                         f"(weights_only=True): {str(e).splitlines()[0]}") from None


def _numpy_rng_state() -> dict[str, Any]:
    # np.random's legacy state holds an ndarray, which weights_only loading refuses: store a tensor.
    state = np.random.get_state(legacy=True)
    assert isinstance(state, tuple)  # the legacy form of np.random's MT19937; the dict form is for others
    name, keys, pos, has_gauss, cached = state
    return {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def _set_numpy_rng_state(state: dict[str, Any]) -> None:
    keys = state["keys"].numpy().astype(np.uint32)
    np.random.set_state((state["name"], keys, state["pos"], state["has_gauss"], state["cached_gaussian"]))


def evaluation_env_kwargs(config: TrainConfig) -> tuple[dict[str, Any], bool]:
    """The evaluation env's kwargs under ``config.eval_split``, and whether its tasks are held out.

    Example:
        >>> evaluation_env_kwargs(TrainConfig(env_id="ALFWorld-v0"))
        ({'show_budget': False, 'split': 'valid_unseen'}, True)
        >>> evaluation_env_kwargs(TrainConfig(env_id="KeyDoor-v0"))  # trained on every set-up, 'test' ones too
        ({'show_budget': False, 'split': 'test'}, False)
        >>> evaluation_env_kwargs(TrainConfig(env_id="KeyDoor-v0", env_kwargs={"split": "train"}))
        ({'split': 'test', 'show_budget': False}, True)
    """
    from agentgym_budget.envs.registration import family_of

    kwargs = {**config.env_kwargs, "show_budget": config.show_budget}
    if config.eval_split == "same":
        return kwargs, False
    try:
        held_out = family_of(config.env_id).held_out_split
    except gym.error.NameNotFound:  # a text env that is not ours: only an explicit split can be set
        held_out = None
    split = held_out if config.eval_split == "auto" else config.eval_split
    if split is None:
        return kwargs, False
    train_split = config.env_kwargs.get("split", _default_split(config.env_id))
    if train_split == split:
        raise ValueError(f"eval_split {split!r} is the training split (env_kwargs split={train_split!r}); "
                         f"pick another split or eval_split='same'")
    return {**kwargs, "split": split}, train_split != "all"  # WebShop's 'all' contains every split


def _default_split(env_id: str) -> Any:
    """The ``split`` an env id is made with when none is given (its class's default)."""
    spec = gym.spec(env_id)
    if "split" in spec.kwargs:
        return spec.kwargs["split"]
    parameter = inspect.signature(env_creator(spec)).parameters.get("split")
    return None if parameter is None else parameter.default


def _progress_bar(enabled: bool, initial: int, total: int) -> Any:
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(initial=initial, total=total, desc="updates", dynamic_ncols=True)


class _NullLogger:
    """What ranks other than 0 log to: nothing."""

    def log(self, metrics: dict[str, float], stream: str = "metrics") -> None:
        pass

    def close(self) -> None:
        pass


class _MetricsLogger:
    """One line per update on stdout, and ``metrics.jsonl``/``metrics.csv`` (+ TensorBoard)."""

    def __init__(self, folder: Path, tensorboard: bool, resume: bool) -> None:
        self.folder = folder
        self.mode = "a" if resume else "w"
        self.files: dict[str, Any] = {}
        self.csv_writers: dict[str, csv.DictWriter] = {}
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(folder / "tensorboard"))
            except ImportError:  # tensorboard is optional
                self.writer = None

    def log(self, metrics: dict[str, float], stream: str = "metrics") -> None:
        if stream not in self.files:
            jsonl = (self.folder / f"{stream}.jsonl").open(self.mode)
            csv_path = self.folder / f"{stream}.csv"
            write_header = self.mode == "w" or not csv_path.exists()
            csv_file = csv_path.open(self.mode, newline="")
            writer = csv.DictWriter(csv_file, fieldnames=list(metrics), extrasaction="ignore")
            if write_header:
                writer.writeheader()
            self.files[stream] = (jsonl, csv_file)
            self.csv_writers[stream] = writer
        jsonl, csv_file = self.files[stream]
        jsonl.write(json.dumps(metrics) + "\n")
        jsonl.flush()
        self.csv_writers[stream].writerow(metrics)
        csv_file.flush()
        shown = {k: v for k, v in metrics.items() if k in _SHOWN or stream == "eval"}
        print(f"[{stream}] " + " ".join(f"{k}={_fmt(v)}" for k, v in shown.items()), flush=True)
        if self.writer is not None:
            step = int(metrics["update"])
            for key, value in metrics.items():
                if key != "update" and isinstance(value, (int, float)) and math.isfinite(value):
                    self.writer.add_scalar(key if "/" in key else f"train/{key}", value, step)

    def close(self) -> None:
        for jsonl, csv_file in self.files.values():
            jsonl.close()
            csv_file.close()
        if self.writer is not None:
            self.writer.close()


_SHOWN = ("update", "success_rate", "return_mean", "budget_mean", "turns_mean", "loss", "kl", "entropy", "grad_norm",
          "update_episodes", "update_turns", "rollout_seconds", "update_seconds", "cpu_rollout_seconds",
          "cpu_old_logprobs_seconds", "cpu_ref_logprobs_seconds", "cpu_forward_seconds", "cpu_backward_seconds",
          "cpu_optimizer_seconds")
#: The parts of an update whose CPU seconds are logged (``cpu_<part>_seconds``; ``Trainer._cpu_timer``):
#: old-policy and reference log-probs, the loss's forward (log-probs + loss), its backward, the optimizer
#: step (clip, AdamW, schedule).  The rollout (generation + env steps) is ``cpu_rollout_seconds``.
_CPU_PARTS = ("old_logprobs", "ref_logprobs", "forward", "backward", "optimizer")


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)

"""The training loop: rollout → group advantages → clipped-ratio update, with checkpoints and eval.

One *update* (``config.total_updates`` of them) is::

    tasks   = tasks_per_update env seeds drawn from (seed, update)      # B tasks
    seeds   = each task repeated group_size times                       # B*G episodes
    episodes = collect_episodes(model, envs, seeds)                     # multi-turn, batched generation
    R       = won                                                       # [B*G] outcome returns
    A       = group_advantages(R)                                       # [B*G], GRPO or RLOO
    G[i,t]  = process return-to-go of turn t (0 without process reward) # per turn (train/grpo.py)
    samples = every turn of every episode, its tokens carry A[i] + c*G[i,t]   # S turns, N action tokens
    for epoch in range(update_epochs):
        for minibatch in split(shuffle(samples), minibatches):
            for micro in split(minibatch, micro_batch_size):           # gradient accumulation
                logp, entropy = action_logprobs(model, micro)           # [n], fused chunked LM head
                loss = policy_loss(logp, old_logp, ref_logp, A, weights) / tokens-in-minibatch
                loss.backward()
            clip_grad_norm_(max_grad_norm); optimizer.step()

Everything random in an update derives from ``(seed, update)``, so a run resumed from a
checkpoint continues exactly as the uninterrupted run would.

Example:
    >>> from agentgym_budget.train import TrainConfig, Trainer
    >>> trainer = Trainer(TrainConfig(env_id="KeyDoor-v0", total_updates=1, tasks_per_update=2, group_size=2,
    ...                               max_new_tokens=4, eval_every=0, output_dir=str(getfixture("tmp_path")),
    ...                               progress_bar=False, tensorboard=False))  # doctest: +SKIP
    >>> history = trainer.train()  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import inspect
import json
import math
import random
import shutil
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from agentgym_budget.envs.registration import budget_env_id
from agentgym_budget.policies import hf
from agentgym_budget.train.config import TrainConfig
from agentgym_budget.train.grpo import action_logprobs, collate, group_advantages, token_weight, turn_samples
from agentgym_budget.train.kernels import policy_loss
from agentgym_budget.train.rollout import training_policy
from agentgym_budget.train.sharding import LocalRolloutPool, RolloutPoolFactory

__all__ = ["Trainer", "load_model_and_tokenizer", "train"]

_CHECKPOINT_PREFIX = "update_"


def train(config: TrainConfig, rollout_pool: RolloutPoolFactory | None = None) -> list[dict[str, float]]:
    """Build a :class:`Trainer` for ``config`` and run it; returns the per-update metrics."""
    return Trainer(config, rollout_pool).train()


def load_model_and_tokenizer(name: str, env_id: str, seed: int, device: torch.device) -> tuple[Any, Any]:
    """``"tiny"`` → the offline tiny model for ``env_id``; otherwise a local/cached HF model."""
    model, tokenizer = hf.load_model_and_tokenizer(name, tiny_env=env_id, seed=seed)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device), tokenizer


class Trainer:
    """The reference multi-turn GRPO/RLOO trainer (see the module docstring).

    ``rollout_pool`` builds what collects the episodes, ``factory(config, model, tokenizer)``:
    ``None`` is :class:`~agentgym_budget.train.sharding.LocalRolloutPool` (this process); for
    ``rollout_backend="ray"`` pass ``agentgym_budget.distributed.RayRolloutPool.for_config``
    (the CLI does).  Every pool gives the same episodes for the same seeds and shards.
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
        use_bf16 = config.bf16 == "on" or (config.bf16 == "auto" and self.device.type == "cuda"
                                           and torch.cuda.is_bf16_supported())
        self.autocast_dtype = torch.bfloat16 if use_bf16 else None
        self.use_compile = config.compile == "on" or (config.compile == "auto" and self.device.type == "cuda")
        self.eval_env_kwargs, self.eval_held_out = evaluation_env_kwargs(config)  # fail before loading anything
        self.output_dir = Path(config.output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)

        checkpoint = self._find_checkpoint(config.resume)
        self.model, self.tokenizer = load_model_and_tokenizer(
            str(checkpoint) if checkpoint else config.model, config.env_id, config.seed, self.device)
        self.reference = None
        if config.kl_coef > 0:  # the frozen initial policy
            self.reference, _ = load_model_and_tokenizer(config.model, config.env_id, config.seed, self.device)
            self.reference.eval().requires_grad_(False)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay,
            betas=(config.adam_beta1, config.adam_beta2))
        self.rollout_pool = (rollout_pool or LocalRolloutPool)(config, self.model, self.tokenizer)
        self.update = 0  # updates done
        self.episodes_done = 0
        self.env_steps_done = 0
        if checkpoint:
            self._load_state(checkpoint)
        self.logger = _MetricsLogger(self.output_dir, config.tensorboard, resume=checkpoint is not None)

    # -- the loop -------------------------------------------------------------------------
    def train(self) -> list[dict[str, float]]:
        config = self.config
        history = []
        bar = _progress_bar(config.progress_bar, initial=self.update, total=config.total_updates)
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
        """One update: collect B*G episodes, compute advantages, take the optimizer steps."""
        config, update = self.config, self.update
        task_rng = np.random.default_rng([config.seed, update])
        task_seeds = task_rng.integers(0, 2**31 - 1, size=config.tasks_per_update)
        seeds = np.repeat(task_seeds, config.group_size)  # [B*G]; a group shares task and budget

        start = time.perf_counter()
        sampling_seed = int(task_rng.integers(2**31 - 1))
        # rollout_shards=1: one collect_episodes call; the progress drives a curriculum budget
        episodes = self.rollout_pool.collect(self.model, seeds.tolist(), sampling_seed, config.rollout_shards,
                                             self.episodes_done, self.env_steps_done)
        rollout_seconds = time.perf_counter() - start
        self.episodes_done += len(episodes)
        self.env_steps_done += sum(len(e.turns) for e in episodes)

        returns = torch.tensor([float(e.won) for e in episodes])  # [B*G] outcome returns
        advantages = group_advantages(returns, config.group_size, config.advantage, config.scale_by_std)
        # per-turn advantages: outcome advantage + coef * process return-to-go (see train/grpo.py)
        samples = turn_samples(episodes, advantages, config.process_reward_coef if config.process_reward else 0.0,
                               config.process_gamma)

        start = time.perf_counter()
        update_stats = self._optimize(samples, shuffle_seed=int(task_rng.integers(2**31 - 1)))
        self.update += 1
        turns = [len(e.turns) for e in episodes]
        return {
            "update": self.update,
            "episodes": self.episodes_done,
            "env_steps": self.env_steps_done,
            "success_rate": float(np.mean([e.won for e in episodes])),
            "return_mean": float(returns.mean()),
            "budget_mean": float(np.mean([e.budget for e in episodes])),
            "turns_mean": float(np.mean(turns)),
            "invalid_action_rate": sum(e.invalid_actions for e in episodes) / max(sum(turns), 1),
            "zero_advantage_groups": float((advantages.view(-1, config.group_size).abs().sum(1) == 0).float().mean()),
            "process_return_mean": float(np.mean([sum(t.process_reward for t in e.turns) for e in episodes])),
            **update_stats,
            "rollout_seconds": rollout_seconds,
            "update_seconds": time.perf_counter() - start,
        }

    def _optimize(self, samples: list, shuffle_seed: int) -> dict[str, float]:
        config = self.config
        pad_id = self.tokenizer.pad_token_id
        old_logps = self._per_sample_logprobs(self.model, samples) if self._needs_old_logps() else None
        ref_logps = self._per_sample_logprobs(self.reference, samples) if self.reference is not None else None
        generator = torch.Generator().manual_seed(shuffle_seed)
        sums: dict[str, float] = {}
        steps = 0
        self.model.train()
        for _ in range(config.update_epochs):
            order = torch.randperm(len(samples), generator=generator).tolist()
            for minibatch in np.array_split(np.array(order, dtype=np.int64), config.minibatches):
                minibatch = minibatch.tolist()
                weights = [token_weight(samples[i], config.loss_aggregation) * samples[i].action_tokens
                           for i in minibatch]
                normalizer = max(sum(weights), 1e-8)  # the loss is a mean over the whole minibatch
                if config.kl_coef == 0 and config.entropy_coef == 0:  # zero advantage = zero gradient
                    minibatch = [i for i in minibatch if samples[i].advantage != 0]
                if not minibatch:
                    continue
                for start in range(0, len(minibatch), config.micro_batch_size):
                    micro = minibatch[start : start + config.micro_batch_size]
                    stats = self._backward_micro(samples, micro, old_logps, ref_logps, normalizer, pad_id)
                    for key, value in stats.items():
                        sums[key] = sums.get(key, 0.0) + value
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.max_grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                sums["grad_norm"] = sums.get("grad_norm", 0.0) + float(grad_norm)
                steps += 1
        keys = ("loss", "pg_loss", "kl", "clip_fraction", "approx_kl_old", "grad_norm")
        out = {key: sums.get(key, 0.0) / max(steps, 1) for key in keys}
        # the mean entropy of the tokens that went through the model (zero-advantage turns may be skipped)
        out["entropy"] = sums.get("entropy_sum", 0.0) / max(sums.get("weight_sum", 0.0), 1e-8)
        out["optimizer_steps"] = steps
        out["action_tokens"] = sum(len(s.input_ids) - s.prompt_length for s in samples)
        return out

    def _backward_micro(self, samples, micro, old_logps, ref_logps, normalizer, pad_id) -> dict[str, float]:
        config = self.config
        batch = collate([samples[i] for i in micro], pad_id, config.loss_aggregation)
        logp, entropy = action_logprobs(
            self.model, batch, temperature=config.temperature, fused=config.fused_logprobs,
            chunk_size=config.logprob_chunk_size, compile=self.use_compile, autocast_dtype=self.autocast_dtype)
        old = torch.cat([old_logps[i] for i in micro]) if old_logps is not None else logp.detach()
        ref = torch.cat([ref_logps[i] for i in micro]) if ref_logps is not None else None
        weights = batch["weights"].to(logp.device)
        loss, stats = policy_loss(
            logp, old, ref, batch["advantages"].to(logp.device), weights, epsilon_low=config.epsilon_low,
            epsilon_high=config.epsilon_high, kl_coef=config.kl_coef, normalizer=normalizer, compile=self.use_compile)
        entropy_term = (weights * entropy).sum() / normalizer
        loss = loss - config.entropy_coef * entropy_term
        loss.backward()
        return {"loss": float(loss.detach()), "entropy_sum": float((weights * entropy.detach()).sum()),
                "weight_sum": float(weights.sum()), **{k: float(v) for k, v in stats.items()}}

    def _needs_old_logps(self) -> bool:
        # With one optimizer step per rollout the policy is still the sampler: old = logp.detach().
        return self.config.update_epochs * self.config.minibatches > 1

    @torch.no_grad()
    def _per_sample_logprobs(self, model: Any, samples: list) -> list[torch.Tensor]:
        """Each sample's action-token log-probs under ``model`` (old policy / reference)."""
        config, out = self.config, []
        was_training = model.training
        model.eval()
        for start in range(0, len(samples), config.micro_batch_size):
            chunk = samples[start : start + config.micro_batch_size]
            batch = collate(chunk, self.tokenizer.pad_token_id, config.loss_aggregation)
            logp, _ = action_logprobs(model, batch, temperature=config.temperature, fused=config.fused_logprobs,
                                      chunk_size=config.logprob_chunk_size, compile=self.use_compile,
                                      autocast_dtype=self.autocast_dtype)
            out += list(logp.split([len(s.input_ids) - s.prompt_length for s in chunk]))
        model.train(was_training)
        return out

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(self) -> Any:
        """Pass@(K,T) of the current policy on the evaluation tasks (``eval_split``, seeds from ``eval_seed``).

        Writes ``output_dir/eval/update_NNNNNN/`` (the evaluator's ``passkt.json``/CSV files and
        heatmap) and logs every cell as ``eval/pass@K,T=T`` to ``eval.jsonl``/``eval.csv``.
        """
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
        folder = self.output_dir / "checkpoints" / f"{_CHECKPOINT_PREFIX}{self.update:06d}"
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        torch.save({
            "update": self.update,
            "episodes_done": self.episodes_done,
            "env_steps_done": self.env_steps_done,
            "optimizer": self.optimizer.state_dict(),
            "rng": {"python": random.getstate(), "numpy": _numpy_rng_state(), "torch": torch.get_rng_state()},
            "config": self.config.to_dict(),
        }, folder / "trainer_state.pt")
        checkpoints = sorted((self.output_dir / "checkpoints").glob(f"{_CHECKPOINT_PREFIX}*"))
        for old in checkpoints[: -self.config.keep_checkpoints]:
            shutil.rmtree(old)
        return folder

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
        self.optimizer.load_state_dict(state["optimizer"])
        self.update, self.episodes_done, self.env_steps_done = (
            state["update"], state["episodes_done"], state["env_steps_done"])
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
    name, keys, pos, has_gauss, cached = np.random.get_state()
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
        >>> evaluation_env_kwargs(TrainConfig(env_id="KeyDoor-v0"))  # no split: the seeds repeat training set-ups
        ({'show_budget': False}, False)
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
    parameter = inspect.signature(gym.envs.registration.load_env_creator(spec.entry_point)).parameters.get("split")
    return None if parameter is None else parameter.default


def _progress_bar(enabled: bool, initial: int, total: int) -> Any:
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(initial=initial, total=total, desc="updates", dynamic_ncols=True)


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
          "rollout_seconds", "update_seconds")


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)

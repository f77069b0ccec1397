"""Every hyperparameter of the reference trainer, in one dataclass (CleanRL-style).

Fixed-budget RL and BudgetMix RL differ only in :attr:`TrainConfig.budget`::

    TrainConfig(budget="fixed:30")            # fixed-budget RL
    TrainConfig(budget="mix:10,20,30,40,50")  # BudgetMix RL
    TrainConfig(budget="curriculum:50->10@20000")

Example:
    >>> config = TrainConfig(env_id="KeyDoor-v0", budget="mix:2,3,4", total_updates=3)
    >>> config.episodes_per_update
    32
    >>> TrainConfig(advantage="ppo")
    Traceback (most recent call last):
    ...
    ValueError: advantage must be one of ('grpo', 'rloo', 'gigpo'), got 'ppo'
    >>> TrainConfig(advantage="gigpo", gigpo_gamma=0.0)
    Traceback (most recent call last):
    ...
    ValueError: gigpo_gamma must be in (0, 1], got 0.0
    >>> TrainConfig(action_matching="fuzzy")
    Traceback (most recent call last):
    ...
    ValueError: action_matching must be 'exact' for training, got 'fuzzy': the loss must score the tokens that determined the action, and a fuzzy match plays another command
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from agentgym_budget.flags import add_arguments, flag, from_arguments
from agentgym_budget.flags import flag_table as table_of_flags
from agentgym_budget.wrappers.budget_spec import parse_budget_spec

#: The process credits of ``process_reward_norm`` (train/grpo.py ``turn_credits`` computes them).
PROCESS_NORMS = ("none", "rewards", "group")

__all__ = ["PROCESS_NORMS", "SFTConfig", "TrainConfig", "add_config_arguments", "config_from_arguments", "flag_table",
           "keydoor_smoke_config"]

#: ``None`` defaults resolved by the model: ``(for "tiny", for any other model)``.  The tiny values
#: are those of ``benchmarks/learning_check.py`` (experiments/learning_check/README.md).
_MODEL_DEFAULTS: dict[str, tuple[Any, Any]] = {
    "format_warmup_steps": (400, 0),
    "learning_rate": (1e-3, 1e-5),
    "kl_coef": (0.02, 0.0),
}


@dataclass
class TrainConfig:
    # -- experiment -----------------------------------------------------------------------
    env_id: str = field(default="KeyDoor-v0", metadata=flag("--env-id", "--env"))
    """any registered text env id (``X-v0`` or ``X-Budget-v0``); it is run under ``TurnBudget``"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """extra ``gym.make`` kwargs for the env (e.g. ``{"engine": "fast"}``)"""
    budget: str = "fixed:4"
    """the turn budget of training episodes: ``fixed:T``, ``mix:T1,T2,..``, ``uniform:A-B``, ``curriculum:..``"""
    show_budget: bool = False
    """append ``[Turns left: x of T]`` to every observation (the agent sees its budget)"""
    model: str = "tiny"
    """``tiny`` (a 2-layer Qwen2 + BPE tokenizer built offline from the env's text), ``smollm2``
    (SmolLM2-135M-Instruct, extra ``smollm2``) or a HF name/path"""
    format_warmup_steps: int | None = None
    """``tiny`` only: supervised steps that clone a *uniformly random* policy (the reply format, nothing
    about the task) before RL; ``None``: 400 for ``tiny``, 0 for any other model"""
    output_dir: str = "runs/train"
    """checkpoints, ``metrics.jsonl``/``metrics.csv``, TensorBoard events and eval results go here"""
    seed: int = 0
    """seeds the model init (tiny), task draws, sampling; the same seed gives the same run"""
    resume: str | None = None
    """a checkpoint folder, or ``"auto"`` for the latest one in ``output_dir``"""
    device: str = "auto"
    """``auto`` (cuda if available, else cpu), ``cpu``, ``cuda``, ``cuda:1``, ..."""
    torch_threads: int | None = None
    """``torch.set_num_threads`` for CPU work (``None``: torch's default); 1 is fastest for tiny
    models on a busy machine, where spinning intra-op threads slow small ops down ~10x"""

    # -- rollout --------------------------------------------------------------------------
    tasks_per_update: int = 8
    """distinct tasks (env seeds) per update"""
    group_size: int = 4
    """G: episodes per task; advantages are normalised within each group"""
    max_new_tokens: int = 32
    """generation length per turn (thought + action)"""
    temperature: float = 1.0
    """sampling temperature (> 0); log-probs in the loss use the same temperature"""
    top_p: float = 1.0
    """nucleus sampling mass (1.0: off, which keeps the sampler and the loss's distribution equal)"""
    max_prompt_tokens: int = 1024
    """context limit of a turn's prompt; older turns are dropped first (see ``policies.hf.HFChatBackend.fit``)"""
    prompt: str = "react"
    """the named system prompt (``policies.prompting.PROMPTS``): ``react`` (Thought/Action), ``action`` (one
    Action line, a command copied from the list) or ``short`` (the format in 11 tokens: for an SFT-started model)"""
    max_turns_shown: int | None = 20
    """at most this many recent (observation, action) turns in the prompt (``None``: all that fit)"""
    list_admissible: bool = True
    """list ``info["admissible_commands"]`` in the prompt"""
    history: str = "actions"
    """what earlier turns show of the model's replies: ``actions`` (``Action: <command>``, the commands
    listed under the latest observation only: the prompt the learning results were measured with) or
    ``append`` (append-only: each turn's message keeps its own commands, past replies are the sampled
    ids, and only the new message runs through the model; ``policies.llm.LLMPolicy``)"""
    action_matching: str = "exact"
    """how a reply's command is matched to the admissible ones: ``exact`` only (case, whitespace and
    trailing punctuation aside, it is played as written; ``fuzzy``, which the evaluator offers, is
    refused: the loss must score the tokens that determined the action)"""
    rollout_shards: int = 1
    """split an update's groups into this many batched-generation calls, each with its own sampling seed
    (part of the result: the same shards give the same episodes on every backend)"""
    rollout_backend: str = "local"
    """``local`` (the shards one after another in this process) or ``ray`` (on Ray actors; extra ``ray``)"""
    rollout_actors: int = 2
    """Ray actors for ``rollout_backend="ray"`` (weights shipped once per update via the object store)"""
    ray_address: str | None = None
    """the Ray cluster to join (``auto``, ``HOST:PORT``); ``None``: a local Ray instance"""

    # -- credit ---------------------------------------------------------------------------
    advantage: str = "grpo"
    """``grpo``: (R - mean_group) / (std_group + eps); ``rloo``: R - mean of the other G-1 returns; ``gigpo``:
    GRPO's plus ``gigpo_omega`` times a step-level advantage within anchor-state groups (train/gigpo.py)"""
    scale_by_std: bool = True
    """GRPO and GiGPO (both levels): divide by the group's std (``False``: Dr. GRPO's mean-centring only)"""
    gigpo_omega: float = 1.0
    """``gigpo`` only: weight omega of the step-level advantage in ``A = A_episode + omega * A_step``"""
    gigpo_gamma: float = 0.95
    """``gigpo`` only: discount of the step returns ``R_t = gamma^(turns after t) * won`` compared within a state"""
    process_reward: str | None = None
    """a ``ProcessReward`` signal (``expert_progress``, ``subgoal``, ``invalid_penalty``) credited per turn"""
    process_reward_coef: float = 0.1
    """weight ``c`` of the process return-to-go in each turn's advantage ``A_i + c * G_i,t`` (train/grpo.py)"""
    process_gamma: float = 1.0
    """discount of the process returns-to-go ``G_i,t`` (1: undiscounted, the progress from turn t on)"""
    process_reward_norm: str = "group"
    """``group``: each turn's process reward normalised over all turns of its group, the returns-to-go taken, then
    those standardised over the group's turns (mean 0: it moves credit between turns, never the group's level);
    ``rewards``: the first normalisation only (DeepSeekMath's process supervision); ``none``: raw (train/grpo.py
    ``turn_credits``)"""

    # -- loss -----------------------------------------------------------------------------
    epsilon_low: float = 0.2
    """ratio clip below: ``ratio >= 1 - epsilon_low``"""
    epsilon_high: float = 0.28
    """ratio clip above: ``ratio <= 1 + epsilon_high`` (DAPO's clip-higher)"""
    kl_coef: float | None = None
    """weight of the k3 KL to the frozen initial model (0: no reference model is kept; ``None``: 0.02 for
    ``tiny``, whose reply format is fragile, 0 for any other model)"""
    entropy_coef: float = 0.0
    """entropy bonus weight (the loss subtracts ``entropy_coef * mean entropy``)"""
    loss_aggregation: str = "token-mean"
    """``token-mean``: sum over all action tokens / their number in the update batch;
    ``turn-mean``: mean over turns of each turn's token mean (GRPO's original);
    ``episode-mean``: mean over episodes of each episode's token mean (long episodes do not dominate)"""

    # -- optimisation ---------------------------------------------------------------------
    total_updates: int = 200
    """iterations of rollout → update"""
    learning_rate: float | None = None
    """AdamW learning rate (``None``: 1e-3 for ``tiny``, 1e-5 for any other model)"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    adam_beta1: float = 0.9
    """AdamW β1"""
    adam_beta2: float = 0.999
    """AdamW β2"""
    update_epochs: int = 1
    """passes over each rollout batch (> 1 makes the ratio differ from 1 and the clip matter)"""
    minibatches: int = 1
    """optimizer steps per epoch; the rollout's turns are split into this many minibatches"""
    micro_batch_size: int = 16
    """turns per forward/backward (gradient accumulation inside a minibatch)"""
    max_grad_norm: float = 1.0
    """gradient clipping (global L2 norm)"""
    lr_schedule: str = "constant"
    """``constant`` or ``cosine`` (to 0 at the last optimizer step), after ``lr_warmup_steps`` (transformers' schedules)"""
    lr_warmup_steps: int = 0
    """optimizer steps of linear learning-rate warm-up from 0"""
    bf16: str = "auto"
    """bf16 autocast: ``auto`` (on when CUDA supports bf16), ``on``, ``off``"""
    gradient_checkpointing: bool = False
    """recompute the decoder's activations in backward (HF gradient checkpointing, non-reentrant)"""
    lora_r: int = 0
    """LoRA rank via ``peft`` on every linear layer of the decoder (0: full fine-tuning; extra ``llm``)"""
    lora_alpha: float = 16.0
    """LoRA scaling ``alpha`` (the update is scaled by ``alpha / r``)"""
    lora_dropout: float = 0.0
    """dropout on the LoRA path (0 keeps the sampler and the loss's distribution equal)"""
    lora_layers: int = 0
    """LoRA on the top this many decoder layers only (0: every layer); the layers below have no adapter
    and autograd stops at the first adapted one, so the backward and its saved activations shrink"""
    trunk_reuse: bool = True
    """with ``lora_layers``: the rollout keeps the hidden states entering the first adapted layer for every
    token it fed, and every log-prob pass of the update (loss, old policy, reference) runs only the top
    layers on them, not the frozen trunk again (exact: the same layers on the same tokens; off with
    bf16 autocast, gradient checkpointing or FSDP); the states are held for one update only"""
    share_prefix: bool = True
    """the rollout runs a token prefix that several of its prompts share (a group's system message and task)
    once and copies its keys and values (and trunk states) into each row; the same tokens at the same
    positions, so the replies are today's up to float rounding (log-probs within 1e-5)"""

    # -- several processes (torchrun) -----------------------------------------------------
    distributed: str = "ddp"
    """under ``torchrun`` with more than one process: ``ddp`` (DistributedDataParallel) or ``fsdp`` (FSDP2
    ``fully_shard``); each rank collects whole groups, gradients are all-reduced, rank 0 logs and saves"""

    # -- kernels --------------------------------------------------------------------------
    fused_logprobs: bool = True
    """chunked log-probs from hidden states (never the full [tokens, vocab] logits)"""
    logprob_chunk_size: int = 512
    """tokens per chunk of the fused log-prob kernel (peak extra memory ≈ 3 × chunk × vocab floats)"""
    compile: str = "auto"
    """``torch.compile`` the kernels in every log-prob pass and the loss (falls back to eager with a
    warning): ``auto`` (on for CUDA, off on CPU, where compiling costs more than it saves for
    small models), ``on``, ``off``"""

    # -- evaluation, logging, checkpoints -------------------------------------------------
    eval_every: int = 50
    """Pass@(K,T) on the evaluation tasks (``eval_split``) every this many updates (0: never; also before the first update and at the end)"""
    eval_tasks: int = 20
    """evaluation tasks per evaluation"""
    eval_attempts: int = 4
    """attempts N per task (every K ≤ N)"""
    eval_ks: tuple[int, ...] = (1, 2, 4)
    """the K (attempts) of the Pass@(K,T) grid"""
    eval_ts: tuple[int, ...] = (2, 3, 4, 6)
    """the T (turn budgets) of the grid"""
    eval_split: str = "auto"
    """the ``split=`` of the evaluation env: ``auto`` (the family's held-out split: ALFWorld
    ``valid_unseen``, WebShop ``test``, ScienceWorld ``dev``, TextWorld challenges ``valid``, KeyDoor
    ``test``; none for single TextWorld games, whose evaluation tasks repeat training ones), a split
    name, or ``same`` (the training env's kwargs)"""
    eval_seed: int = 1_000_003
    """base seed of the evaluation tasks (training draws its tasks from ``seed``)"""
    eval_temperature: float = 1.0
    """sampling temperature of the evaluated policy"""
    eval_plots: bool = True
    """also write the evaluator's ``passkt_heatmap.png``/``passkt_curves.png`` at each evaluation"""
    save_every: int = 50
    """checkpoint every this many updates (0: only at the end)"""
    keep_checkpoints: int = 2
    """keep this many most recent checkpoints (>= 1)"""
    tensorboard: bool = True
    """also log to TensorBoard when ``tensorboard`` is installed"""
    progress_bar: bool = True
    """show a tqdm progress bar"""

    def __post_init__(self) -> None:
        parse_budget_spec(self.budget)  # fail early on a malformed spec
        tiny = self.model == "tiny"  # the model-dependent defaults (see _MODEL_DEFAULTS)
        for name, (for_tiny, otherwise) in _MODEL_DEFAULTS.items():
            if getattr(self, name) is None:
                setattr(self, name, for_tiny if tiny else otherwise)
        _one_of("advantage", self.advantage, ("grpo", "rloo", "gigpo"))
        _one_of("process_reward_norm", self.process_reward_norm, PROCESS_NORMS)
        _one_of("loss_aggregation", self.loss_aggregation, ("token-mean", "turn-mean", "episode-mean"))
        _one_of("bf16", self.bf16, ("auto", "on", "off"))
        _one_of("compile", self.compile, ("auto", "on", "off"))
        _one_of("rollout_backend", self.rollout_backend, ("local", "ray"))
        _one_of("lr_schedule", self.lr_schedule, ("constant", "cosine"))
        _one_of("distributed", self.distributed, ("ddp", "fsdp"))
        from agentgym_budget.policies.prompting import PROMPTS  # here: the flags table stays importable alone

        _one_of("prompt", self.prompt, tuple(PROMPTS))
        for name in ("lr_warmup_steps", "lora_r", "lora_layers"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.lora_layers and not self.lora_r:
            raise ValueError(f"lora_layers={self.lora_layers} needs LoRA (lora_r > 0)")
        if self.format_warmup_steps is not None and self.format_warmup_steps < 0:
            raise ValueError(f"format_warmup_steps must be >= 0 or None, got {self.format_warmup_steps}")
        if self.format_warmup_steps and self.model != "tiny":
            raise ValueError(f"format_warmup_steps={self.format_warmup_steps} is for model='tiny' only "
                             f"(it clones a random policy); set it to 0 for {self.model!r}")
        for name in ("tasks_per_update", "max_new_tokens", "max_prompt_tokens", "total_updates", "update_epochs",
                     "minibatches", "micro_batch_size", "logprob_chunk_size", "eval_tasks", "eval_attempts",
                     "rollout_shards", "rollout_actors", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (advantages compare episodes of a group), got {self.group_size}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 for on-policy sampling, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not (0 <= self.epsilon_low < 1 and self.epsilon_high >= 0):
            raise ValueError(f"need 0 <= epsilon_low < 1 and epsilon_high >= 0, got {self.epsilon_low}, {self.epsilon_high}")
        for name in ("process_gamma", "gigpo_gamma"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        if not 0 <= self.gigpo_omega < float("inf"):
            raise ValueError(f"gigpo_omega must be a finite number >= 0, got {self.gigpo_omega}")
        if self.max_turns_shown is not None and self.max_turns_shown < 1:
            raise ValueError(f"max_turns_shown must be >= 1 or None, got {self.max_turns_shown}")
        if self.history not in ("actions", "append"):
            raise ValueError(f"history must be 'actions' or 'append' for training, got {self.history!r}")
        if self.action_matching != "exact":
            raise ValueError(f"action_matching must be 'exact' for training, got {self.action_matching!r}: the loss "
                             "must score the tokens that determined the action, and a fuzzy match plays another command")
        self.eval_ks, self.eval_ts = tuple(self.eval_ks), tuple(self.eval_ts)
        if max(self.eval_ks) > self.eval_attempts:
            raise ValueError(f"eval_ks up to {max(self.eval_ks)} need eval_attempts >= that, got {self.eval_attempts}")

    @property
    def episodes_per_update(self) -> int:
        return self.tasks_per_update * self.group_size

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s) {unknown}")
        return cls(**data)


#: Where SFT demonstrations come from (:data:`agentgym_budget.policies.demonstrations.SOURCES`).
SFT_SOURCES = ("expert", "random")


@dataclass
class SFTConfig:
    """The SFT warm start (``agentgym-budget sft``, :mod:`agentgym_budget.train.sft`): demonstrations
    on the training split, cloned by supervised steps, the model saved for ``train --model FOLDER``.

    The prompt settings (``budget``, ``show_budget``, ``history``, ``list_admissible``,
    ``max_turns_shown``, ``max_prompt_tokens``) are the trainer's: give the same to ``train``.

    Example:
        >>> config = SFTConfig(source="random", steps=5)
        >>> config.learning_rate, config.training_config().history
        (0.003, 'actions')
        >>> SFTConfig(source="teacher")
        Traceback (most recent call last):
        ...
        ValueError: source must be one of ('expert', 'random'), got 'teacher'
    """

    env_id: str = field(default="KeyDoor-v0", metadata=flag("--env-id", "--env"))
    """any registered text env id; the demonstrations are played on its training split"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """extra ``gym.make`` kwargs; ``split`` defaults to ``train`` where the family has a held-out split, and
    any other split there is refused"""
    budget: str = "fixed:4"
    """the turn budget of the demonstrated episodes (as ``train --budget``)"""
    show_budget: bool = False
    """append ``[Turns left: x of T]`` to every observation (as ``train --show-budget``)"""
    source: str = "expert"
    """``expert`` (the env's expert: cloning it teaches the task) or ``random`` (uniformly random admissible
    commands: the reply format only, reading the task is left to RL)"""
    episodes: int = 200
    """demonstrated episodes (episode i is reset with seed + i)"""
    model: str = "tiny"
    """``tiny`` (the offline tiny model for ``env_id``) or a HF name/path (e.g. SmolLM2-135M-Instruct)"""
    steps: int = 100
    """supervised optimizer steps"""
    batch_size: int = 16
    """demonstrated turns per step (drawn with replacement)"""
    loss_turns: int = 64
    """demonstrated turns (the first ones) whose reply loss is measured before and after (``sft.json``);
    a forward pass over every turn costs more than the steps themselves for a real model on CPU"""
    learning_rate: float | None = None
    """AdamW learning rate (``None``: 3e-3 for ``tiny``, 1e-5 for any other model)"""
    history: str = "actions"
    """what earlier turns show of the model's replies (as ``train --history``)"""
    list_admissible: bool = True
    """list ``info["admissible_commands"]`` in the prompt (as ``train --list-admissible``)"""
    max_turns_shown: int | None = 20
    """at most this many recent turns in the prompt (as ``train --max-turns-shown``)"""
    max_prompt_tokens: int = 1024
    """demonstrated turns whose prompt is longer are dropped (as ``train --max-prompt-tokens``)"""
    prompt: str = "react"
    """the named system prompt (as ``train --prompt``)"""
    lora_r: int = 0
    """LoRA rank via ``peft`` (0: full fine-tuning); the adapters are merged into the saved model"""
    lora_alpha: float = 16.0
    """LoRA scaling ``alpha``"""
    lora_dropout: float = 0.0
    """dropout on the LoRA path"""
    output_dir: str = "runs/sft"
    """the saved model and tokenizer (``save_pretrained``), ``sft.json`` (losses, settings), and the
    demonstrations as a chat dataset in ``dataset/`` (``datasets.load_from_disk``)"""
    seed: int = 0
    """seeds the tiny model's init, the demonstrations (episode seeds) and the batch draws"""
    device: str = "auto"
    """``auto`` (cuda if available, else cpu), ``cpu``, ``cuda``, ..."""
    torch_threads: int | None = None
    """``torch.set_num_threads`` for CPU work (``None``: torch's default)"""

    def __post_init__(self) -> None:
        parse_budget_spec(self.budget)
        _one_of("source", self.source, SFT_SOURCES)
        if self.learning_rate is None:
            self.learning_rate = 3e-3 if self.model == "tiny" else 1e-5
        for name in ("episodes", "steps", "batch_size", "loss_turns", "max_prompt_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lora_r < 0:
            raise ValueError(f"lora_r must be >= 0, got {self.lora_r}")
        self.training_config()  # the prompt settings are checked where the trainer checks them

    def training_config(self) -> TrainConfig:
        """The :class:`TrainConfig` whose prompts these demonstrations share (env, budget, prompt settings)."""
        return TrainConfig(env_id=self.env_id, env_kwargs=dict(self.env_kwargs), budget=self.budget,
                           show_budget=self.show_budget, model=self.model, format_warmup_steps=0,
                           history=self.history, list_admissible=self.list_admissible,
                           max_turns_shown=self.max_turns_shown, max_prompt_tokens=self.max_prompt_tokens,
                           prompt=self.prompt, seed=self.seed)


def keydoor_smoke_config(seed: int = 0, **overrides: Any) -> TrainConfig:
    """The documented CPU smoke run (docs/trainer.md): BudgetMix GRPO of the tiny model on KeyDoor.

    It trains on KeyDoor's ``train`` set-ups, so the trainer's evaluation (``eval_split`` auto:
    ``test``) is on held-out ones.  ``benchmarks/learning_check.py`` runs it over many seeds;
    ``overrides`` replace any field.

    Example:
        >>> config = keydoor_smoke_config(seed=3, total_updates=10)
        >>> config.env_kwargs, config.budget, config.episodes_per_update, config.total_updates, config.seed
        ({'split': 'train'}, 'mix:2,3,4,6', 64, 10, 3)
    """
    smoke = dict(env_id="KeyDoor-v0", env_kwargs={"split": "train"}, budget="mix:2,3,4,6", total_updates=200,
                 tasks_per_update=16, group_size=4, update_epochs=2, minibatches=2, max_new_tokens=12,
                 torch_threads=1, eval_every=0,
                 save_every=0, progress_bar=False, tensorboard=False, seed=seed)
    return TrainConfig(**{**smoke, **overrides})


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def add_config_arguments(parser: argparse.ArgumentParser, cls: type = TrainConfig) -> argparse.ArgumentParser:
    """One ``--flag`` per field of ``cls`` (:class:`TrainConfig` or :class:`SFTConfig`; ``env_id`` →
    ``--env-id``), help from its docs, and ``--config FILE`` (TOML or YAML; flags override it:
    :func:`agentgym_budget.flags.parse_with_config`)."""
    return add_arguments(parser, cls, config_file=True)


def config_from_arguments(args: argparse.Namespace, cls: type = TrainConfig) -> Any:
    """The ``cls`` (:class:`TrainConfig` or :class:`SFTConfig`) of parsed :func:`add_config_arguments` flags."""
    return from_arguments(cls, args)


def flag_table() -> str:
    """The Markdown table of every ``--flag``, its default and its meaning (docs/trainer.md holds it verbatim).

    Example:
        >>> flag_table().splitlines()[2]
        "| `--env-id` | `'KeyDoor-v0'` | any registered text env id (`X-v0` or `X-Budget-v0`); it is run under `TurnBudget` |"
    """
    return table_of_flags(TrainConfig)

"""Data parallelism over ``torch.distributed`` for the trainer: DDP or FSDP2, launched by ``torchrun``.

``torchrun --nproc_per_node W examples/train_llm_budgetmix.py ...`` starts W processes; each
reads its rank from the environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) and
:func:`init_process_group` joins them (``gloo`` on CPU, ``nccl`` on CUDA).  What each rank
does (see ``Trainer.train_step``): it collects its own whole groups of the update (the
update's shards ``r * rollout_shards ... (r + 1) * rollout_shards - 1``), computes their
advantages locally (a group never spans ranks), and backpropagates through the model wrapped
by :func:`wrap_for_training` — ``DistributedDataParallel`` (gradients all-reduced in backward)
or FSDP2's ``fully_shard`` (parameters sharded, gradients reduce-scattered).  The loss of
every rank is divided by the token count of the *global* minibatch (:func:`all_reduce_sum`)
and multiplied by W (both wrappers average gradients over ranks), so W processes take the
same optimizer step as one process that collects all shards itself.  Rank 0 logs, evaluates
and writes checkpoints; every rank resumes from the same checkpoint.

Without ``torchrun`` (or with one process) nothing here starts a process group.

Example:
    >>> group = init_process_group("cpu")  # not under torchrun: a single process
    >>> group.world_size, group.rank, group.is_main
    (1, 0, True)
    >>> all_reduce_sum(group, [1.0, 2.0])
    [1.0, 2.0]
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist

__all__ = ["ProcessGroup", "all_gather_objects", "all_reduce_max", "all_reduce_sum", "barrier", "full_parameters",
           "full_model_state", "init_process_group", "load_optimizer_state", "optimizer_state", "wrap_for_training"]


@dataclass(frozen=True)
class ProcessGroup:
    """This process's place among the ``torchrun`` workers (``world_size = 1``: training alone)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def init_process_group(device_type: str) -> ProcessGroup:
    """Join the ``torchrun`` process group when there is one (``WORLD_SIZE > 1``).

    The backend is ``nccl`` for CUDA and ``gloo`` otherwise; an already initialised default
    group is reused.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return ProcessGroup()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    return ProcessGroup(rank=rank, world_size=world_size, local_rank=local_rank)


def all_reduce_sum(group: ProcessGroup, values: list[float]) -> list[float]:
    """The element-wise sum of ``values`` over all ranks (float64, on CPU; ``values`` itself alone)."""
    if not group.active:
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def all_reduce_max(group: ProcessGroup, value: int) -> int:
    """The largest ``value`` over all ranks."""
    if not group.active:
        return value
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def all_gather_objects(group: ProcessGroup, obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order (``[obj]`` alone)."""
    if not group.active:
        return [obj]
    out: list[Any] = [None] * group.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(group: ProcessGroup) -> None:
    """Wait for every rank (nothing alone)."""
    if group.active:
        dist.barrier()


def wrap_for_training(module: torch.nn.Module, group: ProcessGroup, strategy: str, device: torch.device) -> Any:
    """``module`` as the update's backward goes through it: itself alone, else DDP or FSDP2.

    ``module`` must do all its parameter work in its own ``forward`` (the trainer wraps the
    log-prob pass in one), so that the wrapper's hooks see every use of the weights.
    """
    if not group.active:
        return module
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [device.index or 0] if device.type == "cuda" else None
        return DistributedDataParallel(module, device_ids=device_ids)
    if strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        return fully_shard(module)
    raise ValueError(f"distributed strategy must be 'ddp' or 'fsdp', got {strategy!r}")


def _is_fsdp(module: Any) -> bool:
    return hasattr(module, "unshard") and hasattr(module, "reshard")


@contextlib.contextmanager
def full_parameters(module: Any) -> Iterator[None]:
    """The whole weights in every rank for a while (generation, old-policy passes, saving): FSDP2's
    ``unshard``/``reshard`` (a collective: every rank must enter); nothing for DDP or one process."""
    if not _is_fsdp(module):
        yield
        return
    module.unshard()
    try:
        yield
    finally:
        module.reshard()


def optimizer_state(module: Any, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """What a checkpoint keeps of ``optimizer``: its ``state_dict`` (the same on every rank under DDP),
    or under FSDP2 the full, unsharded state gathered by ``torch.distributed.checkpoint`` (a collective)."""
    if not _is_fsdp(module):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(module, optimizer, options=StateDictOptions(full_state_dict=True,
                                                                                cpu_offload=True))


def load_optimizer_state(module: Any, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """The inverse of :func:`optimizer_state` (under FSDP2 every rank takes its shard of the full state)."""
    if not _is_fsdp(module):
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(module, optimizer, optim_state_dict=state,
                             options=StateDictOptions(full_state_dict=True))


def full_model_state(module: Any, prefix: str = "model.") -> dict[str, torch.Tensor] | None:
    """Under FSDP2 the whole weights (on CPU, names without ``prefix``) gathered for saving, a collective;
    ``None`` otherwise (the model's own ``state_dict`` is whole)."""
    if not _is_fsdp(module):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    # torch types the values as any state value (DTensor, ShardedTensor, containers, ...); gathered to full
    # (full_state_dict=True), a model's state is plain tensors
    return {key.removeprefix(prefix): value for key, value in cast("dict[str, torch.Tensor]", state).items()}

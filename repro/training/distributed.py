"""Data-parallel training across processes started by ``torchrun``.

``torchrun --nproc_per_node=N experiments/run.py ...`` starts N copies of the runner with
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (and ``MASTER_ADDR``/``MASTER_PORT``) in their
environment. :func:`setup` reads them and joins the process group: NCCL when the run is on
CUDA (one GPU per process, ``cuda:LOCAL_RANK``), gloo on CPU. A process started without
them (``python experiments/run.py``) is world 1: no process group, and every helper below
is the identity, so single-process runs do exactly what they did before this module.

What the training loop must agree on every step (stop by time budget, by signal, time-based
evaluation and checkpoints) goes through one :func:`agree_max` per step on CPU tensors over a
gloo group, so it never waits on the GPU stream.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in a data-parallel run."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    control_group: object = None  # a gloo group for CPU-side agreements (None: the default group)

    @property
    def is_main(self) -> bool:
        """Rank 0 writes checkpoints, history and the record, and decides time-based stops."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


_CONTEXT: DistContext | None = None


def world_from_env() -> int:
    """``WORLD_SIZE`` as torchrun sets it; 1 when absent."""
    value = os.environ.get("WORLD_SIZE", "1")
    try:
        return int(value)
    except ValueError:
        raise ValueError(
            f"environment variable WORLD_SIZE={value!r} is not an integer (torchrun sets it; unset it for one process)"
        ) from None


def setup(device: torch.device) -> DistContext:
    """The context of this process; joins torchrun's process group when ``WORLD_SIZE`` > 1.

    Called once per process (later calls return the same context, so an arm's tasks run in
    turn, or a multirun under torchrun, reuse one group). ``device``: the run's device as
    the profile chose it; with several processes on CUDA each takes ``cuda:LOCAL_RANK``.
    """
    global _CONTEXT
    if _CONTEXT is not None:
        return _CONTEXT
    world = world_from_env()
    if world <= 1:
        tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "1")
        if "WORLD_SIZE" not in os.environ and tasks.isdigit() and int(tasks) > 1:
            raise RuntimeError(
                f"this Slurm step runs {tasks} tasks but no torchrun environment (WORLD_SIZE): each task would "
                f"train and write the same run; use one task per run (hydra.launcher.tasks_per_node=1) or "
                f"start torchrun --nproc_per_node=N inside a one-task step"
            )
        _CONTEXT = DistContext(device=device)
        return _CONTEXT
    missing = [key for key in ENV_KEYS + ("MASTER_ADDR", "MASTER_PORT") if key not in os.environ]
    if missing:
        raise RuntimeError(
            f"WORLD_SIZE={world} but {', '.join(missing)} not set: start several processes with "
            f"torchrun --nproc_per_node=N experiments/run.py ..., or unset WORLD_SIZE for one"
        )
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(
                f"LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} CUDA device(s) are visible; "
                f"use --nproc_per_node={torch.cuda.device_count()} or fewer"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
        atexit.register(shutdown)
    control = dist.new_group(backend="gloo") if backend != "gloo" else None
    _CONTEXT = DistContext(rank=rank, world=world, local_rank=local_rank, device=device, control_group=control)
    return _CONTEXT


def shutdown() -> None:
    """Leave the process group (registered at exit by :func:`setup`)."""
    global _CONTEXT
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _CONTEXT = None


def barrier(ctx: DistContext) -> None:
    if ctx.active:
        dist.barrier(group=ctx.control_group)


def agree_max(ctx: DistContext, values: list[float]) -> list[float]:
    """Element-wise maximum of ``values`` over the ranks (CPU, float64); the identity for one process.

    Rank 0 alone contributes the decisions it owns (elapsed time, time-based evaluation and
    checkpoints; the others pass 0), and any rank a signal it caught, so every rank acts
    on the same step.
    """
    if not ctx.active:
        return values
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=ctx.control_group)
    return tensor.tolist()


def mean_(ctx: DistContext, tensor: torch.Tensor) -> torch.Tensor:
    """Average ``tensor`` over the ranks, in place (per-rank batch means -> the global-batch mean)."""
    if ctx.active:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        tensor /= ctx.world
    return tensor


def sum_(ctx: DistContext, tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over the ranks, in place."""
    if ctx.active:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def gather_1d(ctx: DistContext, tensor: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
    """Every rank's 1-D ``tensor`` (rank ``r`` holds ``lengths[r]`` items), on every rank."""
    if not ctx.active:
        return [tensor]
    width = max(max(lengths), 1)
    padded = torch.zeros(width, dtype=tensor.dtype, device=tensor.device)
    padded[: len(tensor)] = tensor
    parts = [torch.empty_like(padded) for _ in range(ctx.world)]
    dist.all_gather(parts, padded)
    return [part[:n] for part, n in zip(parts, lengths, strict=True)]


def broadcast_object(ctx: DistContext, obj):
    """Rank 0's picklable ``obj`` on every rank; the identity for one process.

    What rank 0 alone can see goes through here (a run's record folder and checkpoints, written
    by rank 0), so ranks on other machines need no shared filesystem. Send tensors on the CPU:
    each rank moves them to its own device.
    """
    if not ctx.active:
        return obj
    box = [obj if ctx.is_main else None]
    dist.broadcast_object_list(box, src=0, group=ctx.control_group)
    return box[0]


def gather_objects(ctx: DistContext, obj) -> list:
    """Every rank's picklable ``obj`` (the RNG states a checkpoint keeps per rank), on every rank."""
    if not ctx.active:
        return [obj]
    out = [None] * ctx.world
    dist.all_gather_object(out, obj, group=ctx.control_group)
    return out

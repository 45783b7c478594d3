"""One optimiser step and the record of its loss.

The step sets the schedule's learning rate on every parameter group, runs the forward pass
under autocast (bf16 on CUDA), takes the cross-entropy (or a training technique's own loss,
the multitask MLM), backpropagates, clips and updates. Under DistributedDataParallel the
gradients are averaged over the ranks' equal slices, so a step is the step of one process
on the whole batch (up to floating-point reduction order).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .batches import Batch
from .distributed import DistContext, mean_
from .schedule import LRController
from .settings import TrainSettings
from .state import RunState


class NonFiniteLoss(RuntimeError):
    """The training loss became NaN or infinite."""


NORMS = (nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm, nn.RMSNorm)
DECAYED_WORDS = ("linear", "conv", "kernel", "weight")  # no_decay=bias_norm_embedding: names that decay


def undecayed(model: torch.nn.Module, rule: str) -> set[int]:
    """The ids of the parameters ``train.no_decay`` exempts from weight decay.

    ``1d``: every parameter of fewer than two dimensions (biases, norm gains). ``bias_norm_embedding``
    (the follow-up's code, src/utils/weight_decay_param_filter.py): biases, the parameters of norm layers
    and of embedding tables, and every parameter whose name holds none of linear, conv, kernel, weight;
    the code matches the words bias, norm and embedding in the names of its own modules, so here the
    module types stand for the last two.
    """
    if rule == "1d":
        return {id(p) for p in model.parameters() if p.ndim < 2}
    if rule != "bias_norm_embedding":
        raise ValueError(f"train.no_decay={rule!r}: choose one of 1d, bias_norm_embedding")
    exempt = set()
    for module_name, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            full = f"{module_name}.{name}".lower()
            kept = isinstance(module, (*NORMS, nn.Embedding)) or "bias" in name.lower()
            if kept or not any(word in full for word in DECAYED_WORDS):
                exempt.add(id(p))
    return exempt


def make_optimizer(model: torch.nn.Module, s: TrainSettings, device: torch.device) -> torch.optim.Optimizer:
    """AdamW; by default no decay on 1-D parameters (biases, norm gains); ``train.no_decay`` names the rule
    (:func:`undecayed`), ``train.decay_1d_params`` decays every parameter.

    A parameter may carry ``param._optim = {"lr": ..., "weight_decay": ...}`` (the state-space
    parameters of S4D and S5, which their papers train at a smaller rate without decay): it
    gets its own group whose ``lr_scale`` (its rate over ``s.lr``) the schedule multiplies,
    so the schedule's shape applies to every group.
    """
    decay, no_decay, special = [], [], {}
    exempt = set() if s.decay_1d_params else undecayed(model, s.no_decay)
    for p in model.parameters():
        if not p.requires_grad:
            continue
        hint = getattr(p, "_optim", None)
        if hint:
            key = (float(hint.get("lr", s.lr)), float(hint.get("weight_decay", s.weight_decay)))
            special.setdefault(key, []).append(p)
        else:
            (no_decay if id(p) in exempt else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": s.weight_decay, "lr_scale": 1.0},
        {"params": no_decay, "weight_decay": 0.0, "lr_scale": 1.0},
    ]
    for (lr, wd), params in sorted(special.items()):
        groups.append({"params": params, "weight_decay": wd, "lr_scale": lr / s.lr, "lr": lr})
    return torch.optim.AdamW(groups, lr=s.lr, betas=s.betas, eps=s.eps, fused=device.type == "cuda")


CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile's modes that replay CUDA graphs


class TechniqueLoss(torch.nn.Module):
    """A technique's replacement loss as a module's forward of tensors (the step's random draws made
    before it, ``augment.loss_inputs``): DistributedDataParallel sees the pass, torch.compile takes it
    whole."""

    def __init__(self, model: torch.nn.Module, augment):
        super().__init__()
        self.model = model
        self.augment = augment

    def forward(self, *tensors):
        return self.augment.loss_of(self.model, *tensors)


class TrainStep:
    """Calling it runs one optimiser step on a :class:`Batch`; returns the (device) loss and the rate used."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        controller: LRController,
        settings: TrainSettings,
        device: torch.device,
        ctx: DistContext,
        augment=None,
        autocast_dtype: torch.dtype | None = None,
    ):
        self.model, self.optimizer, self.controller, self.augment = model, optimizer, controller, augment
        self.grad_clip, self.device, self.autocast_dtype = settings.grad_clip, device, autocast_dtype
        self.technique_loss = augment is not None and augment.has_loss
        # what the step calls: the model (or, with a technique's loss, TechniqueLoss around it), compiled as
        # a whole with train.compile (the same function: tests/test_compiled_step.py), or its DDP wrapper
        # (then compiled around DDP, as torch's DDP and compile documentation recommend)
        core = TechniqueLoss(model, augment) if self.technique_loss else model
        if ctx.active:
            from torch.nn.parallel import DistributedDataParallel

            core = DistributedDataParallel(core, device_ids=[device.index] if device.type == "cuda" else None)
        self.forward = torch.compile(core, mode=settings.compile_mode) if settings.compile else core
        self.ddp = ctx.active
        # CUDA graphs replay into the same memory: each step is marked as a new one, and the loss kept
        # past the step (the loss log holds it on the device) is copied out of the graph's memory
        self.graphs = settings.compile and settings.compile_mode in CUDA_GRAPH_MODES
        # train.pack_sequences: the batch's lengths, read on the host, for the model's packed layout
        self.expect_lengths = getattr(model, "expect_lengths", None)

    def __call__(self, batch: Batch, step: int, progress: float) -> tuple[torch.Tensor, float]:
        if self.graphs:
            torch.compiler.cudagraph_mark_step_begin()
        lr = self.controller.lr(step, progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        if batch.lengths is not None and self.expect_lengths is not None:
            self.expect_lengths(batch.lengths)
        with torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
            if self.technique_loss:  # task + auxiliary (through DDP, where active: its gradients are averaged)
                loss = self.forward(*self.augment.loss_inputs(batch.inputs, batch.draws), batch.labels)
            else:
                logits = self.forward(batch.inputs)
        if not self.technique_loss:
            loss = F.cross_entropy(logits.float(), batch.labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        return (loss.detach().clone() if self.graphs else loss.detach()), lr


class LossLog:
    """Step losses kept on the device and moved to the host together (one sync per ``flush``).

    Each flush appends a history row (the mean over the steps since the last), adds the
    losses to the epoch's running sum the plateau schedule reads, and stops the run on the
    first non-finite loss, naming its step. A checkpoint between two rows logs nothing: ``keep``
    moves the losses so far into the run's state (``RunState.pending_losses``, which ``last.pt``
    holds), so a resumed run writes the rows an uninterrupted one writes.
    """

    def __init__(
        self,
        ctx: DistContext,
        optimizer: torch.optim.Optimizer,
        steps_per_epoch: int,
        last_path: Path,
        first_step: int,
        pending: list[float] | None = None,
    ):
        self.ctx, self.optimizer, self.steps_per_epoch, self.last_path = ctx, optimizer, steps_per_epoch, last_path
        self.losses: list[torch.Tensor] = []
        self.kept = [float(v) for v in pending or []]  # global-batch means of the first steps, on the host
        self.first_step = first_step - len(self.kept)  # the step before the first buffered loss

    def __len__(self) -> int:
        return len(self.kept) + len(self.losses)

    def _host_values(self) -> torch.Tensor:
        parts = [torch.tensor(self.kept, dtype=torch.float32)] if self.kept else []
        if self.losses:  # per-rank means -> global-batch means
            parts.append(mean_(self.ctx, torch.stack(self.losses).float()).cpu())
        return torch.cat(parts)

    def keep(self, state: RunState) -> None:
        """The losses since the last row into ``state.pending_losses``, unlogged (before a checkpoint)."""
        if self.losses:
            self.kept = self._host_values().tolist()
            self.losses.clear()
        state.pending_losses = list(self.kept)

    def add(self, loss: torch.Tensor) -> None:
        self.losses.append(loss)

    def flush(self, state: RunState) -> None:
        if not self.losses and not self.kept:
            return
        values = self._host_values()
        bad = (~torch.isfinite(values)).nonzero()
        if len(bad):
            step = self.first_step + int(bad[0]) + 1
            written = self.last_path.exists()
            where = f"last good checkpoint: {self.last_path}" if written else "no checkpoint was written yet"
            raise NonFiniteLoss(f"training loss is {float(values[bad[0]])} at step {step}; {where}")
        state.epoch_loss_sum += float(values.double().sum())
        state.epoch_loss_count += len(values)
        state.log(self.steps_per_epoch, lr=self.optimizer.param_groups[0]["lr"], train_loss=float(values.mean()))
        self.losses.clear()
        self.kept, state.pending_losses = [], []
        self.first_step = state.step

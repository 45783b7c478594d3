"""FLOPs per step of a benchmark row: analytic where the architecture is written out, counted otherwise.

What is counted, everywhere: the FLOPs of matrix products (2 per multiply-add):
linear layers, attention score and context products, convolutions. Embedding
lookups, norms, activations, softmax, masking and the optimiser are not counted
(they are memory-bound and small in FLOPs). A training step is 3x the forward
FLOPs (the backward pass computes two products per forward product).

Analytic counts (``flops_source: analytic``):

* the LRA Transformer encoder with full attention (``attention: vanilla``, either
  backend), for ``S`` states (tokens plus CLS), width ``D``, q/k/v width ``Q``,
  FFN width ``F``, per layer and sequence: q/k/v projections ``2 S D 3Q``, output
  projection ``2 S Q D``, scores ``Q K^T`` ``2 S^2 Q``, context ``A V`` ``2 S^2 Q``,
  FFN ``2 S D F + 2 S F D``;
* the follow-up's bounded-conv model (``backbone: conv``), per layer: the
  convolution ``2 L H (D / groups) K`` (``BoundedConvMixer.conv_flops``; the direct
  convolution's count, whichever implementation runs it, FFT included) and the
  linear layer ``2 L H D``;
* the shared classifier head on the pooled vector: ``2 (D h1 + h1 h2 + ... + h C)``.

Every other mechanism is counted with ``torch.utils.flop_counter.FlopCounterMode``
on one forward pass of the real model (``flops_source: counted``). FlopCounterMode
counts ``mm``/``bmm``/``addmm``/convolution and the fused attention kernels it has
formulas for; on CPU it counts nothing for ``scaled_dot_product_attention`` (no
formula for the CPU kernel), one reason the vanilla count is analytic. Mixers with a fused
fast path (``PLAIN_PATH``: flex_attention, fused SDPA, a compiled rotation) are counted on
their plain path, the same function written as explicit products (flex_attention does not run
under the counter), and nothing compiled runs under the counter: dynamo skips a frame it meets
under a dispatch mode such as FlopCounterMode, and on torch 2.11 that skip outlived the count, which
left Sinkhorn's compiled balancing eager for the rest of the benchmark (paper/performance.md,
Sinkhorn's note).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch
from torch.utils.flop_counter import FlopCounterMode

from ..models.heads import n_outputs
from ..models.mixer import TokenMixer

TRAIN_FACTOR = 3  # forward + backward (input and weight gradients)


def head_widths(model_cfg: dict, num_classes: int) -> list[int]:
    """Widths of the one-tower classifier's layers, input first (``repro.models.heads.classifier``)."""
    hidden = model_cfg.get("head_hidden")
    if hidden == "lra":
        hidden = [model_cfg["d_ff"]]
    if not hidden:
        hidden = []
    elif isinstance(hidden, int):
        hidden = [hidden]
    outputs = n_outputs(int(num_classes), bool(model_cfg.get("single_logit", False)))  # one logit for two classes
    return [int(model_cfg["d_model"]), *[int(w) for w in hidden], outputs]


def head_flops(model_cfg: dict, batch: int, num_classes: int) -> int:
    widths = head_widths(model_cfg, num_classes)
    return 2 * batch * sum(a * b for a, b in zip(widths[:-1], widths[1:], strict=True))


def transformer_forward_flops(model_cfg: dict, batch: int, seq_len: int, num_classes: int) -> int:
    """Forward matmul FLOPs of the LRA Transformer encoder with full attention, plus the head."""
    d, f = int(model_cfg["d_model"]), int(model_cfg["d_ff"])
    q = int(model_cfg.get("qkv_dim") or d)
    s = int(seq_len)
    per_layer = 2 * s * d * 3 * q + 2 * s * q * d + 2 * s * s * q + 2 * s * s * q + 2 * s * d * f + 2 * s * f * d
    return batch * int(model_cfg["depth"]) * per_layer + head_flops(model_cfg, batch, num_classes)


def conv_forward_flops(model_cfg: dict, batch: int, seq_len: int, num_classes: int) -> int:
    """Forward FLOPs of the bounded-conv model (the follow-up study, appendix A.2), plus the head."""
    d, h, k = int(model_cfg["d_model"]), int(model_cfg["d_hidden"]), int(model_cfg["kernel_size"])
    groups = int(model_cfg.get("groups", 1))
    per_layer = 2 * seq_len * h * (d // groups) * k + 2 * seq_len * h * d
    return batch * int(model_cfg["depth"]) * per_layer + head_flops(model_cfg, batch, num_classes)


def conv_layer_flops(model_cfg: dict, batch: int, seq_len: int) -> int:
    """Forward FLOPs of the convolutions alone (all layers)."""
    d, h, k = int(model_cfg["d_model"]), int(model_cfg["d_hidden"]), int(model_cfg["kernel_size"])
    return batch * int(model_cfg["depth"]) * 2 * seq_len * h * (d // int(model_cfg.get("groups", 1))) * k


def analytic_forward_flops(model_cfg: dict, batch: int, seq_len: int, num_classes: int) -> int | None:
    """The analytic forward count for ``model_cfg``, or None where none is written."""
    backbone = model_cfg.get("backbone")
    if backbone == "lra_transformer" and model_cfg.get("attention") == "vanilla":
        return transformer_forward_flops(model_cfg, batch, seq_len, num_classes)
    if backbone == "conv":
        return conv_forward_flops(model_cfg, batch, seq_len, num_classes)
    return None


@contextmanager
def plain_paths(model: torch.nn.Module):
    """Every mixer set to its plain path (``TokenMixer.PLAIN_PATH``, attribute -> value) meanwhile."""
    saved = []
    for module in model.modules():
        if not isinstance(module, TokenMixer):
            continue
        for name, value in type(module).PLAIN_PATH.items():
            saved.append((module, name, getattr(module, name)))
            setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def counted_forward_flops(model: torch.nn.Module, ids: torch.Tensor, autocast_dtype: torch.dtype | None = None) -> int:
    """FLOPs FlopCounterMode sees in one forward pass of ``model`` on ``ids`` (evaluation mode, plain paths)."""
    was_training = model.training
    model.eval()
    autocast = torch.autocast(ids.device.type, dtype=autocast_dtype) if autocast_dtype is not None else nullcontext()
    try:
        with plain_paths(model), FlopCounterMode(display=False) as counter, torch.no_grad(), autocast:
            model(ids)
    finally:
        model.train(was_training)
    return int(counter.get_total_flops())


def step_flops(forward_flops: int, mode: str) -> int:
    """FLOPs of one step: the forward pass (``infer``) or forward + backward (``train``)."""
    if mode not in ("train", "infer"):
        raise ValueError(f"mode {mode!r}: choose train or infer")
    return forward_flops * (TRAIN_FACTOR if mode == "train" else 1)

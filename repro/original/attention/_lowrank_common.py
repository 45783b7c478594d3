"""Helpers shared by the low-rank, kernel, hashing and sorting mixers.

Used by ``linformer``, ``reformer``, ``sinkhorn``, ``synthesizer``, ``linear``
and ``performer`` in this package; the general helpers (head split/merge,
the mask check) come from ``_common.py``.

Conventions
-----------
* Heads are split as ``[B, L, D] -> [B, H, L, D // H]``.
* ``mask`` is ``[B, L]`` bool, True = real token.
* Masked logits are filled with ``finfo(dtype).min`` (finite, never ``-inf``),
  so a row whose keys are all masked gives a uniform softmax instead of NaN.
* ``forward`` sets the outputs at padded positions to exactly 0, like the
  softmax mixers of ``_common.py``; ``attend`` itself returns finite garbage
  there.
* LRA's attention blocks use ``bias=False`` and Xavier-uniform kernels for the
  q/k/v/out projections; so do these mixers (``bias`` is a keyword).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from ...models.mixer import TokenMixer
from ._common import full_mask, merge_heads, split_heads  # noqa: F401 (re-exported for the six mixers)
from ._flex import raise_recompile_limit

# Logit given to "a token attends to itself" where a mechanism forbids it unless
# nothing else is left (Reformer's shared-QK self-mask). Finite and small enough
# for float16/bfloat16; padding uses ``finfo.min`` and so always loses to it.
SELF_MASK_VALUE = -5e4
_COMPILED: dict = {}  # function -> its torch.compile


def neg_fill(dtype: torch.dtype) -> float:
    """The fill value for masked logits: the most negative finite number."""
    return torch.finfo(dtype).min


def compiled(fn):
    """The one ``torch.compile`` of ``fn`` (shapes static: one graph per shape, module setting and grad
    mode; past dynamo's default of 8 the function would run eagerly, hence the raised limit)."""
    if fn not in _COMPILED:
        raise_recompile_limit()
        _COMPILED[fn] = torch.compile(fn, dynamic=False)
    return _COMPILED[fn]


def on_device(fn, device: torch.device, mode: str):
    """``fn``, through ``torch.compile`` when ``mode`` is ``compiled`` and the device is CUDA (Sinkhorn's
    ``balance`` and ``attend``, Linformer's ``attend``); elsewhere ``fn`` itself. Inside a function being
    compiled, ``fn`` itself: the outer graph takes it in. (Traced there, the compiled wrapper left ``fn``
    eager for every later call outside: on torch 2.11, Sinkhorn's balancing ran eagerly after its
    compiled ``attend`` had been traced.)"""
    if torch.compiler.is_compiling():
        return fn
    return compiled(fn) if mode == "compiled" and device.type == "cuda" else fn


def xavier_linear(d_in: int, d_out: int, bias: bool = False) -> nn.Linear:
    """A Linear layer with Xavier-uniform weights and zero bias (the LRA blocks'
    ``kernel_init=xavier_uniform``; LRA's attention blocks use ``bias=False``)."""
    layer = nn.Linear(d_in, d_out, bias=bias)
    nn.init.xavier_uniform_(layer.weight)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


def pad_to_multiple(x: torch.Tensor, mask: torch.Tensor, multiple: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad ``x [B, H, L, d]`` and ``mask [B, L]`` on the right so that L is a
    multiple of ``multiple``; the new positions are zeros and mask False."""
    length = x.shape[-2]
    extra = (-length) % multiple
    if extra == 0:
        return x, mask
    x = torch.cat([x, x.new_zeros(*x.shape[:-2], extra, x.shape[-1])], dim=-2)
    mask = torch.cat([mask, mask.new_zeros(mask.shape[0], extra)], dim=-1)
    return x, mask


class HeadedMixer(TokenMixer):
    """Base of the six mixers: input projections, head split, output projection.

    Subclasses implement ``attend(q, k, v, mask) -> [B, H, L, dh]`` on
    head-split tensors (``None`` for a projection the mechanism does not have).
    ``project_qkv`` is public so that tests can rebuild references from the
    module's own q, k, v.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        projections: Sequence[str] = ("q", "k", "v"),
        bias: bool = False,
    ):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.max_len = max_len
        for name in ("q", "k", "v"):
            layer = xavier_linear(d_model, d_model, bias) if name in projections else None
            setattr(self, f"{name}_proj", layer)
        self.out_proj = xavier_linear(d_model, d_model, bias)
        self.attn_dropout = nn.Dropout(dropout)

    def project_qkv(self, x: torch.Tensor):
        """The head-split projections ``(q, k, v)``, each [B, H, L, dh] or None."""
        out = []
        for name in ("q", "k", "v"):
            layer = getattr(self, f"{name}_proj")
            out.append(None if layer is None else split_heads(layer(x), self.n_heads))
        return tuple(out)

    def attend(self, q, k, v, mask: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        mask = full_mask(x, mask)
        q, k, v = self.project_qkv(x)
        y = self.out_proj(merge_heads(self.attend(q, k, v, mask)))
        # Padded queries: exactly 0 (the package convention, see _common.py);
        # torch.where, so nothing computed there can leak.
        return torch.where(mask[..., None], y, torch.zeros((), dtype=y.dtype, device=y.device))

    def _check_len(self, length: int) -> None:
        if length > self.max_len:
            raise ValueError(f"{type(self).__name__}: sequence length {length} exceeds max_len={self.max_len}")


def xavier_bound(fan_in: int, fan_out: int) -> float:
    return math.sqrt(6.0 / (fan_in + fan_out))

"""Vanilla (full) multi-head softmax attention (Vaswani et al., 2017), the LRA baseline.

Two backends that compute the same function:

* ``"sdpa"`` (default): ``torch.nn.functional.scaled_dot_product_attention`` with the key
  padding mask as a boolean ``attn_mask`` (fused kernels on GPU).
* ``"materialized"``: the explicit ``softmax(q k^T / sqrt(Dh)) v`` in the input dtype,
  with the ``[L, L]`` score matrix in memory, as LRA's Flax
  ``nn.attention.dot_product_attention`` does.

Fully padded samples: SDPA would give NaN for a query row with no allowed key, so for a
sample with no real token the key mask is opened (its outputs are then zeroed with the
rest of the padded positions).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from . import ATTENTION
from ._common import AttentionMixer, dense_attention, open_fully_masked, sdpa_key_mask

BACKENDS = ("sdpa", "materialized")


def dense_mask(L: int, device=None) -> Tensor:
    """Full attention: every position sees every position."""
    return torch.ones(L, L, dtype=torch.bool, device=device)


@ATTENTION.register("vanilla")
class VanillaAttention(AttentionMixer):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        backend: str = "sdpa",
    ):
        super().__init__(d_model, n_heads, max_len, dropout)
        if backend not in BACKENDS:
            raise ValueError(f"unknown vanilla backend {backend!r}; choose from {BACKENDS}")
        self.backend = backend

    def dense_mask(self, L: int, device=None) -> Tensor:
        return dense_mask(L, device)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, x: Tensor) -> Tensor:
        p = self.dropout if self.training else 0.0
        if self.backend == "sdpa":  # no padding in the batch: no mask, so the flash kernel
            return F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_key_mask(mask), dropout_p=p)
        allowed = open_fully_masked(mask)[:, None, None, :]  # [B, 1, 1, L]
        return dense_attention(q, k, v, allowed, dropout_p=p, training=self.training)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", backend={self.backend!r}"

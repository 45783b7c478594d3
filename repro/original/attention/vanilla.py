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

``model.release_masking`` (``repro.models.model``): the LRA release's encoders mask input id 0
(``src_padding_mask = (inputs > 0)``), which on the pixel tasks makes every black pixel padding.
Its flax ``SelfAttention`` masks queries and keys with a 0 / -1e10 bias: a real query ignores
the black keys; a black query's logits are all -1e10 (float32 absorbs ``q.k``), so it attends
uniformly to every key, black ones included, and its output is kept (``release_masking``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from . import ATTENTION
from ._common import (
    AttentionMixer,
    dense_attention,
    fold_key_mask,
    open_fully_masked,
    release_masked_softmax,
    sdpa_aligned,
    sdpa_key_mask,
)

BACKENDS = ("sdpa", "materialized")


def dense_mask(L: int, device=None) -> Tensor:
    """Full attention: every position sees every position."""
    return torch.ones(L, L, dtype=torch.bool, device=device)


@ATTENTION.register("vanilla")
class VanillaAttention(AttentionMixer):
    RELEASE_ZERO_MASK = "uniform_rows"  # what the release's attention does with (inputs > 0): module docstring

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
        self.release_masking = False  # set by the encoder under model.release_masking

    def forward(self, x: Tensor, mask: Tensor | None = None, shared: object = None) -> Tensor:
        if not self.release_masking or mask is None:
            return super().forward(x, mask, shared)
        q, k, v = self.project(x)
        return self.proj.output(self.attend_release(q, k, v, mask))

    def attend_release(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """The release's masking (module docstring). Its black row ``q.k - 1e10`` has the value of a
        constant row (float32 absorbs ``q.k``) and the gradient of ``q.k``; here that row's logits are
        ``(q - q') . k + q' . (k - k')`` (primes: detached), 0 in value with that gradient, and a real
        row's are ``q . k`` with ``-PAD_LOGIT`` on black keys (``_common.fold_key_mask``). Both as one
        product of features ``2 * head_dim + 1`` wide (zero-padded to a multiple of 8), for SDPA; the
        materialized backend writes the same function out (``_common.release_masked_softmax``)."""
        if self.backend != "sdpa":
            allowed = mask[:, None, :, None] & mask[:, None, None, :]
            return torch.matmul(release_masked_softmax(q, k, allowed, self.dropout, self.training).to(v.dtype), v)
        p = self.dropout if self.training else 0.0
        scale = 1.0 / math.sqrt(q.shape[-1])
        real = mask[:, None, :, None].to(q.dtype)  # [B, 1, L, 1]: real queries
        q_fixed, k_fixed = q.detach(), k.detach()
        black = 1 - real
        q_wide, k_wide = fold_key_mask(
            torch.cat([q * real + (q - q_fixed) * black, q_fixed * black], dim=-1),
            torch.cat([k, k - k_fixed], dim=-1),
            mask[:, None, :],
            scale,
            query_feature=real,  # black queries: no penalty on black keys (their row stays constant)
        )
        return sdpa_aligned(q_wide, k_wide, v, scale=scale, dropout_p=p)

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

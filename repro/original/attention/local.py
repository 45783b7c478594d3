"""Local (block) attention, LRA's "simple local attention baseline" (Tay et al. 2021, section 3.1).

The sequence is cut into consecutive blocks of ``block_size`` tokens (padded internally
to a whole number of blocks); a query in block ``i`` attends to the keys of blocks
``i - look_backward .. i + look_forward``.

Defaults follow LRA's released code (google-research/long-range-arena,
``lra_benchmarks/models/local/local.py``: ``block_size=50`` in ``LocalTransformerBlock``
and ``LocalTransformerEncoder``; no task config overrides it; ``local_attention.py``
attends within the block only), i.e. ``look_backward = look_forward = 0``: each query sees
exactly the keys of its own block. ``look_backward=1`` (+ ``look_forward=1``) gives the
overlapping, lucidrains-style variant.

``release=True``: what LRA's ``local_attention.py`` computes, which is not that. It pads the layer's
input with ``block_size - (L mod block_size)`` zero positions (a whole block when ``L`` is a multiple),
marked real in its mask (``jnp.pad`` of a boolean mask with -1e9 gives True), reshapes ``[B, Lp, H, Dh]``
to ``[B, block_size, NB, H, Dh]`` (``NB = Lp / block_size``) and attends over axis 1: group ``n`` is
the strided positions ``n, n + NB, n + 2 NB, ...``. Its padding mask is cut into contiguous blocks
instead, and group ``n`` takes block ``n``'s: query ``i`` and key ``j`` of group ``n`` are allowed when
positions ``n block_size + i`` and ``n block_size + j`` are both real; a masked key gets -1e10 added;
a masked query's row is all -1e10, which float32 makes uniform over the group while ``q.k`` keeps its
gradient (here: logits ``q.k - (q.k).detach()``, as ``vanilla``'s release masking). No output is
zeroed. The mask is the release's ``(inputs > 0)``: padding on text and ListOps, black pixels on the
pixel tasks under ``model.release_masking`` (``RELEASE_ZERO_MASK = "padding"``). Logits in float32.
The default (``release=False``) implements the stated intent: contiguous blocks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from . import ATTENTION
from ._common import (
    BLOCKSPARSE_BACKENDS,
    AttentionMixer,
    FlexPatternMixin,
    full_mask,
    gather_block_mask,
    gather_blocks,
    n_blocks,
    open_fully_masked,
    release_masked_softmax,
)
from ._pad import pad_dim


def dense_mask(L: int, block_size: int = 50, look_backward: int = 0, look_forward: int = 0, device=None) -> Tensor:
    """[L, L] bool: query i may attend key j."""
    b = torch.arange(L, device=device) // block_size
    d = b[None, :] - b[:, None]  # key block - query block
    return (d >= -look_backward) & (d <= look_forward)


@ATTENTION.register("local")
class LocalAttention(FlexPatternMixin, AttentionMixer):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        block_size: int = 50,
        look_backward: int = 0,
        look_forward: int = 0,
        backend: str = "blockwise",
        release: bool = False,
    ):
        super().__init__(d_model, n_heads, max_len, dropout)
        self.release = bool(release)
        if self.release and (look_backward or look_forward or backend != "blockwise"):
            raise ValueError(
                "local: attention_params.release=true computes the release's strided groups; remove "
                "look_backward, look_forward and backend"
            )
        if self.release:  # the release's attention takes (inputs > 0) as its padding mask
            self.RELEASE_ZERO_MASK = "padding"
        if block_size < 1 or look_backward < 0 or look_forward < 0:
            raise ValueError("block_size must be >= 1 and look_backward/look_forward >= 0")
        self.block_size = int(block_size)
        self.look_backward, self.look_forward = int(look_backward), int(look_forward)
        if backend not in BLOCKSPARSE_BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose from {BLOCKSPARSE_BACKENDS}")
        self.backend = backend

    def dense_mask(self, L: int, device=None) -> Tensor:
        return dense_mask(L, self.block_size, self.look_backward, self.look_forward, device)

    def flex_mask_mod(self, device, dense_rows: bool = False):
        S, back, fwd = self.block_size, self.look_backward, self.look_forward

        def mask_mod(b, h, qi, kv):
            d = kv // S - qi // S
            return (d >= -back) & (d <= fwd)

        return mask_mod

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if not self.release:
            return super().forward(x, mask)
        q, k, v = self.project(x)
        return self.proj.output(self.release_attend(q, k, v, full_mask(x, mask)))

    def release_attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """The release's strided groups and misaligned mask (module docstring, ``release=True``)."""
        B, H, L, Dh = q.shape
        S = self.block_size
        Lp = L + S - L % S
        nb = Lp // S
        # position i * NB + n is member i of group n: [B, H, Lp, Dh] -> [B, H, NB, S, Dh]
        q, k, v = (pad_dim(t, 2, Lp).view(B, H, S, nb, Dh).transpose(2, 3) for t in (q, k, v))
        chunk = pad_dim(mask, 1, Lp, True).view(B, 1, nb, S)  # contiguous block n's mask, given to group n
        allowed = chunk.unsqueeze(-1) & chunk.unsqueeze(-2)  # both positions real
        probs = release_masked_softmax(q, k, allowed, self.dropout, self.training)
        out = torch.matmul(probs.to(v.dtype), v)  # [B, H, NB, S, Dh]
        return out.transpose(2, 3).reshape(B, H, Lp, Dh)[:, :, :L]

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, x: Tensor) -> Tensor:
        if self.backend in ("flex", "dense"):
            return self.fast_attend(q, k, v, mask)
        B, H, L, Dh = q.shape
        S = self.block_size
        nb = n_blocks(L, S)
        Lp = nb * S
        q, k, v = (pad_dim(t, 2, Lp).view(B, H, nb, S, Dh) for t in (q, k, v))
        km = pad_dim(mask, 1, Lp, False).view(B, nb, S)

        if self.look_backward == 0 and self.look_forward == 0:
            keys_k, keys_v, key_ok = k, v, km  # [B, H, NB, S, Dh], [B, NB, S]
        else:
            offs = torch.arange(-self.look_backward, self.look_forward + 1, device=q.device)
            idx = torch.arange(nb, device=q.device)[:, None] + offs  # [NB, N]
            valid = (idx >= 0) & (idx < nb)
            idx = idx.clamp(0, nb - 1)
            valid_k = valid[:, :, None].expand(nb, idx.shape[1], S).reshape(nb, -1)
            keys_k, keys_v = gather_blocks(k, idx), gather_blocks(v, idx)  # [B, H, NB, N*S, Dh]
            key_ok = gather_block_mask(km, idx)[:, 0, :, 0, :] & valid_k  # [B, NB, N*S]
        p = self.dropout if self.training else 0.0
        out = _blocks_sdpa(q, keys_k, keys_v, key_ok, p)
        return out.reshape(B, H, Lp, Dh)[:, :, :L]

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", block_size={self.block_size}, "
            f"look_backward={self.look_backward}, look_forward={self.look_forward}, "
            f"backend={self.backend!r}"
        )


def _blocks_sdpa(q: Tensor, k: Tensor, v: Tensor, key_ok: Tensor, dropout_p: float) -> Tensor:
    """Each query block [B, H, NB, S, Dh] attends to its own key window [B, H, NB, W, Dh].

    One ``scaled_dot_product_attention`` call with the blocks folded into the heads axis
    ([B, H*NB, S, Dh], a view), so the fused kernels (and their attention dropout) do the
    work instead of an explicit score tensor. ``key_ok`` [B, NB, W] marks real keys inside
    the window; a window with no real key (a padded query block) is opened (no NaN; the
    mixer zeroes those queries' outputs).
    """
    B, H, NB, S, Dh = q.shape
    W = k.shape[3]
    key_ok = open_fully_masked(key_ok)
    mask = None if bool(key_ok.all()) else key_ok[:, None, :, None, :].expand(B, H, NB, 1, W).reshape(B, H * NB, 1, W)
    out = F.scaled_dot_product_attention(
        q.reshape(B, H * NB, S, Dh),
        k.reshape(B, H * NB, W, Dh),
        v.reshape(B, H * NB, W, Dh),
        attn_mask=mask,
        dropout_p=dropout_p,
    )
    return out.view(B, H, NB, S, Dh)

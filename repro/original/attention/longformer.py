"""Longformer attention (Beltagy et al., 2020): sliding window + global tokens.

Pattern (LRA's convention, ``lra_benchmarks/models/longformer/longformer_attention.py``,
``_build_sliding_window_mask``): with ``right = window // 2`` and
``left = window - right``, query ``i`` attends keys ``j`` with ``i - left < j <= i + right``
(``window`` keys counting itself; for even ``window`` the left side gets one more).

Global tokens: the first ``n_global`` positions (e.g. a CLS token). They attend to every
position and every position attends to them. As in Longformer and LRA's code, the global
queries use their own q/k/v projections (``separate_global_proj=True``): their rows are
``softmax(q_g k_g^T) v_g`` over all keys; the other rows use the shared projections.

Computation is blockwise: queries are cut into chunks of ``chunk_size`` (default
``window // 2``), each chunk gathers the few neighbouring key chunks that cover its band,
and the exact band mask is applied inside; the ``n_global`` global keys form one more
small key segment (masked where they already lie in the band, so nothing counts twice).
Global query rows are computed densely (``n_global x L``).

Defaults: ``window=512`` is LRA's ``sliding_window_size`` default (``longformer.py`` /
``longformer_attention.py``; no task config changes it). LRA's encoder passes
``global_mask=None``, i.e. no global tokens, so ``n_global=0`` reproduces LRA; set
``n_global=1`` to make a prepended CLS token global, as Longformer does for
classification.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import ATTENTION
from ._common import (
    AttentionMixer,
    FlexPatternMixin,
    QKVOut,
    dense_attention,
    gather_block_mask,
    gather_blocks,
    n_blocks,
    segment_attention,
)
from ._pad import pad_dim


def window_sides(window: int) -> tuple[int, int]:
    """(left, right): keys ``i - left < j <= i + right``."""
    right = window // 2
    return window - right, right


def dense_mask(L: int, window: int = 512, n_global: int = 0, device=None) -> Tensor:
    """[L, L] bool: query i may attend key j."""
    left, right = window_sides(window)
    r = torch.arange(L, device=device)
    d = r[None, :] - r[:, None]  # key - query
    m = (d > -left) & (d <= right)
    g = r < n_global
    return m | g[:, None] | g[None, :]


@ATTENTION.register("longformer")
class LongformerAttention(FlexPatternMixin, AttentionMixer):
    FLEX_MECHANISM = "longformer"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        window: int = 512,
        n_global: int = 0,
        separate_global_proj: bool = True,
        chunk_size: int | None = None,
        backend: str = "auto",
        flex_block="auto",
        flex_global_rows: str = "auto",
        flex_lse_pass: str = "auto",
    ):
        super().__init__(d_model, n_heads, max_len, dropout)
        if window < 1 or n_global < 0:
            raise ValueError("window must be >= 1 and n_global >= 0")
        self.window, self.n_global = int(window), int(n_global)
        self.left, self.right = window_sides(self.window)
        self.init_flex(backend, flex_block, flex_global_rows, flex_lse_pass)
        self.chunk_size = int(chunk_size) if chunk_size else max(1, self.window // 2)
        self.separate_global_proj = bool(separate_global_proj) and self.n_global > 0
        # global q/k/v (its out projection is unused: both paths share ``proj.out``)
        self.global_proj = QKVOut(d_model, n_heads, with_out=False) if self.separate_global_proj else None

    def dense_mask(self, L: int, device=None) -> Tensor:
        return dense_mask(L, self.window, self.n_global, device)

    def flex_mask_mod(self, device, dense_rows: bool = False):
        left, right, g = self.left, self.right, self.n_global

        def mask_mod(b, h, qi, kv):
            d = kv - qi
            return ((d > -left) & (d <= right)) | (qi < g) | (kv < g)

        return mask_mod

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, x: Tensor) -> Tensor:
        B, H, L, Dh = q.shape
        g = min(self.n_global, L)
        p = self.dropout if self.training else 0.0
        out = self.fast_attend(q, k, v, mask)
        if out is None:
            out = self._blockwise(q, k, v, mask)
        if g > 0 and self.global_proj is not None:  # global query rows, own projections
            qg, kg, vg = self.global_proj.project(x)
            og = dense_attention(qg[:, :, :g], kg, vg, mask[:, None, None, :], dropout_p=p, training=self.training)
            out = torch.cat([og, out[:, :, g:]], dim=2)
        return out

    def _blockwise(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        B, H, L, Dh = q.shape
        dev = q.device
        C = self.chunk_size
        nb = n_blocks(L, C)
        Lp = nb * C
        back = n_blocks(self.left - 1, C)  # chunks behind that the band reaches
        fwd = n_blocks(self.right, C)  # chunks ahead
        g = min(self.n_global, L)

        qb, kb, vb = (pad_dim(t, 2, Lp).view(B, H, nb, C, Dh) for t in (q, k, v))
        km = pad_dim(mask, 1, Lp, False)

        offs = torch.arange(-back, fwd + 1, device=dev)
        idx = torch.arange(nb, device=dev)[:, None] + offs  # [NB, N]
        valid = (idx >= 0) & (idx < nb)
        idx = idx.clamp(0, nb - 1)
        within = torch.arange(C, device=dev)
        kpos = (idx[:, :, None] * C + within).reshape(nb, -1)  # [NB, N*C]
        qpos = torch.arange(Lp, device=dev).view(nb, C)  # [NB, C]
        d = kpos[:, None, :] - qpos[:, :, None]  # [NB, C, N*C]
        band = (d > -self.left) & (d <= self.right)
        band &= valid[:, :, None].expand(-1, -1, C).reshape(nb, 1, -1)
        segs = [
            (
                gather_blocks(kb, idx),
                gather_blocks(vb, idx),
                [gather_block_mask(km.view(B, nb, C), idx), band[None, None]],
            )
        ]
        if g > 0:
            gpos = torch.arange(g, device=dev)
            dg = gpos[None, None, :] - qpos[:, :, None]  # [NB, C, G]
            in_band = (dg > -self.left) & (dg <= self.right)
            segs.append(
                (
                    k[:, :, None, :g],
                    v[:, :, None, :g],
                    [km[:, None, None, None, :g], ~in_band[None, None]],
                )
            )
        p = self.dropout if self.training else 0.0
        out = segment_attention(qb, segs, dropout_p=p, training=self.training)
        out = out.reshape(B, H, Lp, Dh)[:, :, :L]
        if g > 0 and self.global_proj is None:  # global query rows: full attention
            og = dense_attention(q[:, :, :g], k, v, mask[:, None, None, :], dropout_p=p, training=self.training)
            out = torch.cat([og, out[:, :, g:]], dim=2)
        return out

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", window={self.window}, n_global={self.n_global}, "
            f"separate_global_proj={self.separate_global_proj}, chunk_size={self.chunk_size}, "
            f"backend={self.backend!r}, flex_block={self.flex_block!r}, flex_lse_pass={self.flex_lse_pass!r}"
        )

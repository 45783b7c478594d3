"""Sparse Transformer attention (Child et al., 2019), the "fixed" factorised pattern.

With block ("stride") ``l`` and ``c`` summary columns, position ``i`` attends to

* every position of its own block (``floor(j / l) == floor(i / l)``), and
* the summary columns of every block: ``j mod l >= l - c`` (plus ``j mod l == 0`` when
  ``block_start_summary``, as in LRA's ``Fixed2Pattern``),

both restricted to ``j <= i`` when ``causal``. The first ``n_global`` positions (a CLS
token) attend to everything and are attended by everything; the pattern above is laid
over the positions after them (LRA's ``use_cls_token``, which pads the sparse mask with a
full first row and column).

Defaults follow LRA's released code (``lra_benchmarks/models/sparse_transformer/
sparse_attention.py``: when no patterns are given, ``Fixed1Pattern(block_size=128)`` +
``Fixed2Pattern(block_size=128, c=32)``, the merged fixed pattern of the paper's EnWik8
model; "all attention patterns are causal", and ``Fixed2Pattern`` also keeps
``remainder == 0``). So: ``stride=128, c=32, causal=True, block_start_summary=True``.
``causal=False, block_start_summary=False`` gives the textbook bidirectional fixed
pattern. ``n_global=1`` reproduces LRA's CLS handling when the backbone prepends a CLS
token (LRA sets ``use_cls_token`` whenever ``classifier_pool == 'CLS'``).

Blockwise computation: queries in blocks of ``l``; segment 1 = the own block (``l``
keys), segment 2 = all summary columns (``ceil(L/l) * n_summary`` keys, shared by every
query block, masked to other blocks, and to earlier ones when causal), segment 3 = the
global keys. Cost per query: ``l + (L / l) * c`` keys, not ``L``. The flex backend gathers
the summary columns the same way (``flex_layout``), and the global keys once more in front of
them, so that neither leaves a column in every tile of the sequence; ``flex_global_rows=dense``
computes the global query rows apart (``_common.FlexPatternMixin``), ``flex_block=64`` halves the
area of the partial tiles the 50-wide own blocks leave along the diagonal (``_flex.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import ATTENTION
from ._common import (
    AttentionMixer,
    FlexPatternMixin,
    dense_attention,
    n_blocks,
    segment_attention,
)
from ._pad import pad_dim


def summary_offsets(stride: int, c: int, block_start_summary: bool) -> list[int]:
    offs = set(range(max(0, stride - c), stride))
    if block_start_summary:
        offs.add(0)
    return sorted(offs)


def dense_mask(
    L: int,
    stride: int = 128,
    c: int = 32,
    causal: bool = True,
    block_start_summary: bool = True,
    n_global: int = 0,
    device=None,
) -> Tensor:
    """[L, L] bool: query i may attend key j."""
    g = min(n_global, L)
    n = L - g
    r = torch.arange(n, device=device)
    qi, kj = r[:, None], r[None, :]
    same_block = (qi // stride) == (kj // stride)
    rem = kj % stride
    summary = rem >= stride - c
    if block_start_summary:
        summary = summary | (rem == 0)
    m = same_block | summary
    if causal:
        m = m & (kj <= qi)
    out = torch.ones(L, L, dtype=torch.bool, device=device)
    out[g:, g:] = m
    return out


@ATTENTION.register("sparse")
class SparseAttention(FlexPatternMixin, AttentionMixer):
    FLEX_MECHANISM = "sparse"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        stride: int = 128,
        c: int = 32,
        causal: bool = True,
        block_start_summary: bool = True,
        n_global: int = 0,
        backend: str = "auto",
        flex_block="auto",
        flex_global_rows: str = "auto",
        flex_lse_pass: str = "auto",
    ):
        super().__init__(d_model, n_heads, max_len, dropout)
        if stride < 1 or not 0 <= c <= stride or n_global < 0:
            raise ValueError("need stride >= 1, 0 <= c <= stride, n_global >= 0")
        self.stride, self.c = int(stride), int(c)
        self.causal, self.block_start_summary = bool(causal), bool(block_start_summary)
        self.n_global = int(n_global)
        self.init_flex(backend, flex_block, flex_global_rows, flex_lse_pass)
        offs = summary_offsets(self.stride, self.c, self.block_start_summary)
        self.register_buffer("_summary", torch.tensor(offs, dtype=torch.long), persistent=False)

    def dense_mask(self, L: int, device=None) -> Tensor:
        return dense_mask(L, self.stride, self.c, self.causal, self.block_start_summary, self.n_global, device)

    def flex_global_rows(self, L: int) -> list[int]:
        return list(range(min(self.n_global, L)))

    def flex_layout(self, L: int, device, dense_rows: bool = False) -> tuple:
        """Keys in three regions: positions ``0..L-1`` (own block, causal; all of them for the
        global rows), then the ``g`` global keys gathered once more, then the summary columns
        gathered (``key_index``), allowed for the query blocks after theirs (causal) or other than
        theirs. Every allowed pair lies in one slot; the global keys and the summary columns form
        a few dense key tiles instead of a column in every tile of the sequence (which would leave
        no tile of the mask full and none empty). ``dense_rows``: the global rows allowed nothing
        (computed apart)."""
        S, causal = self.stride, self.causal
        g = min(self.n_global, L)
        offs = self._summary.tolist()
        ns = len(offs)
        slots = [g + blk * S + off for blk in range(n_blocks(L - g, S)) for off in offs]
        slots = [pos for pos in slots if pos < L]  # ascending: the cut ones are a suffix
        key_index = torch.cat([torch.arange(L), torch.arange(g), torch.tensor(slots, dtype=torch.long)]).to(device)
        first_summary = L + g

        def mask_mod(b, h, qi, kv):
            qq, kk = qi - g, kv - g
            own = kv < L
            near = (qq // S) == (kk // S)
            if causal:
                near = near & (kk <= qq)
            m = own & (kv >= g) & near
            if g:
                m = m | ((kv >= L) & (kv < first_summary))
            if ns:
                kb = (kv - first_summary) // ns  # the summary slot's block (meaningless elsewhere)
                far = (kb < qq // S) if causal else (kb != qq // S)
                m = m | ((kv >= first_summary) & far)
            return torch.where(qi < g, own & (not dense_rows), m)

        return mask_mod, first_summary + len(slots), key_index

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, x: Tensor) -> Tensor:
        out = self.fast_attend(q, k, v, mask)
        if out is not None:
            return out
        B, H, L, Dh = q.shape
        dev = q.device
        g = min(self.n_global, L)
        n = L - g
        S = self.stride
        p = self.dropout if self.training else 0.0
        out_g = None
        if g > 0:  # global query rows: full attention
            out_g = dense_attention(q[:, :, :g], k, v, mask[:, None, None, :], dropout_p=p, training=self.training)
            if n == 0:
                return out_g
        nb = n_blocks(n, S)
        Lp = nb * S
        qb, kb, vb = (pad_dim(t[:, :, g:], 2, Lp).view(B, H, nb, S, Dh) for t in (q, k, v))
        km = pad_dim(mask[:, g:], 1, Lp, False).view(B, nb, S)

        own = [km[:, None, :, None, :]]
        if self.causal:
            own.append(torch.ones(S, S, dtype=torch.bool, device=dev).tril())
        segs = [(kb, vb, own)]

        offs = self._summary.to(dev)
        if len(offs):
            ns = len(offs)
            ks = kb[:, :, :, offs].reshape(B, H, 1, nb * ns, Dh)
            vs = vb[:, :, :, offs].reshape(B, H, 1, nb * ns, Dh)
            kblock = torch.arange(nb, device=dev).repeat_interleave(ns)  # [NB*ns]
            qblock = torch.arange(nb, device=dev)[:, None]
            rel = (kblock[None, :] < qblock) if self.causal else (kblock[None, :] != qblock)
            kms = km[:, :, offs].reshape(B, 1, 1, 1, nb * ns)
            segs.append((ks, vs, [kms, rel[None, None, :, None, :]]))
        if g > 0:
            segs.append((k[:, :, None, :g], v[:, :, None, :g], [mask[:, None, None, None, :g]]))
        out = segment_attention(qb, segs, dropout_p=p, training=self.training)
        out = out.reshape(B, H, Lp, Dh)[:, :, :n]
        return out if out_g is None else torch.cat([out_g, out], dim=2)

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", stride={self.stride}, c={self.c}, "
            f"causal={self.causal}, block_start_summary={self.block_start_summary}, "
            f"n_global={self.n_global}, backend={self.backend!r}, flex_block={self.flex_block!r}, "
            f"flex_global_rows={self.flex_global_rows_mode!r}, flex_lse_pass={self.flex_lse_pass!r}"
        )

"""Pieces shared by the softmax-attention mixers: projections, head split/merge, the
dense masked-softmax reference, the block-sparse ("segment") attention core and the key
padding mask folded into the queries and keys for fused kernels (``fold_key_mask``).

Conventions (all mixers):

* ``x`` is ``[B, L, D]``; ``mask`` is ``[B, L]`` bool, True = real token (``None`` = all real).
* ``q, k, v`` are ``[B, H, L, Dh]`` with ``Dh = D // H``; scores are ``q k^T / sqrt(Dh)``.
* A padded key is never attended; a padded query's output is set to exactly 0 (it is
  not mixed into anything, and it is finite). A real query whose every allowed key is
  padding would get a zero context (no NaN); none of the patterns here produce that,
  since every pattern lets a token see itself.

The block-sparse mechanisms never build an ``[L, L]`` mask: they cut the (padded)
sequence into query blocks and, for each block, gather the key/value blocks its pattern
needs (``gather_blocks``), then run ``segment_attention``: one softmax over the
concatenation of a few key "segments" (gathered neighbour blocks, a set of keys shared by
every query block, ...), each with its own boolean mask. Memory is linear in ``L`` times
the number of keys a query block sees. On CUDA, BigBird, Longformer and Sparse run through
``flex_attention`` instead (``backend="auto"``; ``FlexPatternMixin`` and ``_flex.py``: a
cached block mask, LRA's attention dropout exact), or at short lengths through one
``scaled_dot_product_attention`` call with the whole pattern as its mask (``backend="dense"``;
``fast_defaults`` says up to which length ``auto`` takes it); ``backend="blockwise"`` keeps this path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ...models.mixer import TokenMixer
from ._flex import FlexSettings, flex_pattern_attention, tile_block_mask
from ._pad import pad_dim
from .fast_defaults import FAST_DEFAULTS, check_choice, choose

# One segment of keys: (k, v, masks). ``k``/``v`` are [B|1, H|1, NQ|1, K, Dh] (a size-1
# query-block axis means the same keys for every query block); every mask is a bool
# tensor broadcastable to the score shape [B, H, NQ, BQ, K], True = may attend.
Segment = tuple[Tensor, Tensor, Sequence[Tensor]]

# A masked key's additive logit where a fused kernel takes a float bias: exp underflows to
# exactly 0 in float32 and float64 while every value stays finite in bfloat16 (finfo.min would
# overflow to -inf once a kernel scales it by log2(e), and a row of -inf gives NaN).
MASKED_LOGIT = -1.0e5


# --------------------------------------------------------------------------- helpers


def full_mask(x: Tensor, mask: Tensor | None) -> Tensor:
    """``mask`` as a bool [B, L] on ``x``'s device (all True when None)."""
    if mask is None:
        return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
    if mask.shape != x.shape[:2]:
        raise ValueError(f"mask shape {tuple(mask.shape)} does not match x {tuple(x.shape[:2])}")
    return mask.to(device=x.device, dtype=torch.bool)


def split_heads(t: Tensor, n_heads: int) -> Tensor:
    return rearrange(t, "b l (h d) -> b h l d", h=n_heads)


def merge_heads(t: Tensor) -> Tensor:
    return rearrange(t, "b h l d -> b l (h d)")


def n_blocks(length: int, block: int) -> int:
    return -(-length // block)


def gather_blocks(t: Tensor, idx: Tensor) -> Tensor:
    """Pick blocks of ``t`` [B, H, NB, S, Dh] for each query block.

    ``idx`` is [NQ, N] (same for every head) or [H, NQ, N] (per head), with indices already
    clamped into range. Returns [B, H, NQ, N * S, Dh].
    """
    if idx.dim() == 2:
        g = t[:, :, idx]  # [B, H, NQ, N, S, Dh]
    else:
        heads = torch.arange(t.shape[1], device=t.device)[:, None, None]
        g = t[:, heads, idx]  # [B, H, NQ, N, S, Dh]
    return g.flatten(3, 4)


def gather_block_mask(key_mask: Tensor, idx: Tensor) -> Tensor:
    """Key padding mask [B, NB, S] picked like ``gather_blocks``: [B, 1|H, NQ, 1, N * S]."""
    if idx.dim() == 2:
        g = key_mask[:, idx]  # [B, NQ, N, S]
        return g.flatten(2, 3)[:, None, :, None, :]
    g = key_mask[:, idx]  # [B, H, NQ, N, S]
    return g.flatten(3, 4)[:, :, :, None, :]


# --------------------------------------------------------------------------- attention


def _neg(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).min


def dense_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> Tensor:
    """Explicit ``softmax(q k^T / sqrt(Dh)) v`` in the input dtype.

    ``allowed`` is bool, broadcastable to [B, H, Lq, Lk], True = may attend. Rows with no
    allowed key give a zero output (never NaN).
    """
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    neg = _neg(s.dtype)
    if allowed is not None:
        s.masked_fill_(~allowed, neg)  # s is a fresh tensor; matmul's backward does not need it
    p = torch.softmax(s, dim=-1)
    if allowed is not None:
        p = p.masked_fill(s.amax(dim=-1, keepdim=True) <= neg, 0.0)
    if dropout_p > 0.0 and training:
        p = F.dropout(p, dropout_p, training=True)
    return torch.matmul(p, v)


def segment_attention(
    q: Tensor,
    segments: Sequence[Segment],
    dropout_p: float = 0.0,
    training: bool = False,
) -> Tensor:
    """Softmax attention of query blocks ``q`` [B, H, NQ, BQ, Dh] over the union of key
    ``segments`` (see ``Segment``); one softmax across all segments. Returns
    [B, H, NQ, BQ, Dh]. Fully masked rows give zeros.
    """
    nq, bq = q.shape[2], q.shape[3]
    q = q * (1.0 / math.sqrt(q.shape[-1]))
    neg = _neg(q.dtype)
    scores, sizes = [], []
    for k, _v, masks in segments:
        if k.shape[2] == 1 and nq > 1:  # shared keys: one matmul over all queries
            s = torch.matmul(q.flatten(2, 3), k[:, :, 0].transpose(-1, -2)).unflatten(2, (nq, bq))
        else:
            s = torch.matmul(q, k.transpose(-1, -2))
        for m in masks:
            s.masked_fill_(~m, neg)  # fresh matmul output, not needed by its backward
        scores.append(s)
        sizes.append(s.shape[-1])
    s = scores[0] if len(scores) == 1 else torch.cat(scores, dim=-1)
    del scores
    p = torch.softmax(s, dim=-1)
    p = p.masked_fill(s.amax(dim=-1, keepdim=True) <= neg, 0.0)
    del s
    if dropout_p > 0.0 and training:
        p = F.dropout(p, dropout_p, training=True)
    out = None
    for (_k, v, _), pp in zip(segments, torch.split(p, sizes, dim=-1), strict=True):
        if v.shape[2] == 1 and nq > 1:
            o = torch.matmul(pp.flatten(2, 3), v[:, :, 0]).unflatten(2, (nq, bq))
        else:
            o = torch.matmul(pp, v)
        out = o if out is None else out + o
    return out


def open_fully_masked(key_mask: Tensor) -> Tensor:
    """``key_mask`` [..., K] with every all-False row set all-True: a query with no real key
    (a fully padded sample, or a window of padding) then attends to everything instead of
    giving NaN; the mixer zeroes those queries' outputs."""
    return key_mask | ~key_mask.any(dim=-1, keepdim=True)


def sdpa_key_mask(mask: Tensor) -> Tensor | None:
    """The key mask for ``scaled_dot_product_attention``: ``None`` when every key is real.

    A boolean ``attn_mask`` rules out the flash kernel, so a batch without padding (the
    speed benchmark's, or a batch of full-length texts) runs unmasked: on an H200 the LRA
    text Transformer at 4K trains about twice as fast that way. Costs one host sync per
    call. Otherwise [B, 1, 1, L], a fully padded sample's keys opened (no NaN; its outputs
    are zeroed by the mixer).
    """
    if bool(mask.all()):
        return None
    return open_fully_masked(mask)[:, None, None, :]


# --------------------------------------------------------------------------- folded key mask

# A key padding mask folded into the queries and keys, so a fused attention kernel needs no per-sample mask.
#
# ``scaled_dot_product_attention`` takes one ``attn_mask`` broadcast to [N, heads, Lq, Lk]. A mechanism
# with a structural bias shared by every sample (Reformer's self-mask within a chunk, MEGA's relative
# position bias) plus a key padding mask per sample would have to materialise their sum, one
# [Lq, Lk] matrix per sample and head. Folding the padding into one extra feature keeps the bias
# broadcast: queries get a 1, keys get 0 (real) or ``-PAD_LOGIT / scale`` (padding), so
#
#     scale * (q' . k') = scale * (q . k)              for a real key,
#                       = scale * (q . k) - PAD_LOGIT  for a padded key,
#
# whose softmax weight is exactly 0 next to any key within ``PAD_LOGIT`` of the row's maximum (it
# underflows in float32 and float64). A row whose keys are all padding keeps its softmax over
# ``q . k + bias`` (the constant cancels): finite, no NaN. The feature dimension is zero-padded to a
# multiple of 8, the alignment the fused CUDA kernels ask of bf16 inputs.

PAD_LOGIT = 1.0e6  # far below any score and below Reformer's self-mask value (-5e4), finite in bf16


def fold_key_mask(
    q: Tensor, k: Tensor, key_mask: Tensor, scale: float, query_feature: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``q`` [..., Lq, d], ``k`` [..., Lk, d], ``key_mask`` [..., Lk] (True = real key) -> (q', k') of width
    d' (the next multiple of 8 above d), to be used with ``scale`` (the caller's, not 1/sqrt(d')).
    ``query_feature`` (broadcastable to [..., Lq, 1]): each query's folded channel instead of 1; a query
    with 0 there sees the padded keys unpenalised."""
    width = q.shape[-1] + 1
    extra = -width % 8
    ones = q.new_ones(*q.shape[:-1], 1)
    if query_feature is not None:
        ones = ones * query_feature.to(q.dtype)
    key_feature = torch.where(key_mask, 0.0, -PAD_LOGIT / scale).to(k.dtype).unsqueeze(-1)
    q_folded = F.pad(torch.cat([q, ones], dim=-1), (0, extra))
    k_folded = F.pad(torch.cat([k, key_feature.expand(*k.shape[:-1], 1)], dim=-1), (0, extra))
    return q_folded, k_folded


def release_masked_softmax(q: Tensor, k: Tensor, allowed: Tensor, dropout: float, training: bool) -> Tensor:
    """The LRA release's masked attention weights: the dropped-out softmax of ``q.k / sqrt(d)`` in float32
    (outside autocast) with -1e10 on the pairs ``allowed`` (broadcast to the logits) forbids; a row with no
    allowed pair has the value of a constant row (float32 absorbs ``q.k`` in ``q.k - 1e10``) and ``q.k``'s
    gradient, here through ``q.k - (q.k).detach()``."""
    wide = torch.promote_types(q.dtype, torch.float32)
    with torch.autocast(q.device.type, enabled=False):  # autocast would run the product in bf16
        logits = torch.matmul(q.to(wide), k.to(wide).transpose(-1, -2)) / math.sqrt(q.shape[-1])
        any_allowed = allowed.any(dim=-1, keepdim=True)
        logits = torch.where(any_allowed, logits.masked_fill(~allowed, -1e10), logits - logits.detach())
        return F.dropout(torch.softmax(logits, dim=-1), p=dropout, training=training)


def refuse_release_ignored(mechanism: str, given: dict, defaults: dict) -> None:
    """``attention_params.release=true`` computes one fixed function: refuse every setting in ``given`` that
    differs from its default in ``defaults`` (it would be ignored), naming it."""
    for key, default in defaults.items():
        if given[key] != default:
            raise ValueError(f"{mechanism}: attention_params.{key} has no meaning with release=true; remove it")


SDPA_WIDTH = 8  # 16-bit heads of other widths keep SDPA off its memory-efficient kernel (flash takes no float mask)


def sdpa_aligned(q: Tensor, k: Tensor, v: Tensor, *, scale: float, **kwargs) -> Tensor:
    """``F.scaled_dot_product_attention(q, k, v, scale=scale, **kwargs)`` with the head widths
    zero-padded to one multiple of ``SDPA_WIDTH``, and the output cut back to ``v``'s width.

    The same function: zero q/k columns add nothing to a logit, zero v columns give zero output
    columns, and dropout acts on the probabilities. Without it a 4-wide head with a float mask (LRA's
    image and Pathfinder Reformer) sends torch to its math kernel, which writes the logits and the
    dropout mask out: under bf16 the memory-efficient kernel takes widths that are multiples of 8
    only, and flash takes no float mask. ``scale`` is required: SDPA's default would
    read the padded width."""
    width = -(-max(q.shape[-1], v.shape[-1]) // SDPA_WIDTH) * SDPA_WIDTH
    q, k, vw = (pad_dim(t, -1, width) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, vw, scale=scale, **kwargs)
    return out if vw is v else out[..., : v.shape[-1]]


# --------------------------------------------------------------------------- modules


class QKVOut(nn.Module):
    """The q/k/v input projections and the output projection of multi-head attention.

    LRA (``lra_benchmarks/models/*``) uses ``bias=False`` and Xavier-uniform kernels for
    all four; each projection is initialised as its own ``[D, D]`` matrix even though
    q/k/v share one fused ``Linear``.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = False, with_out: bool = True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.d_model, self.n_heads = d_model, n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias) if with_out else None
        with torch.no_grad():
            for w in self.qkv.weight.chunk(3, dim=0):
                nn.init.xavier_uniform_(w)
            for lin in (self.qkv, self.out):
                if lin is None:
                    continue
                if lin is self.out:
                    nn.init.xavier_uniform_(lin.weight)
                if lin.bias is not None:
                    lin.bias.zero_()

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``x`` [B, L, D] -> q, k, v each [B, H, L, Dh]."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return tuple(split_heads(t, self.n_heads) for t in (q, k, v))

    def output(self, ctx: Tensor) -> Tensor:
        """``ctx`` [B, H, L, Dh] -> [B, L, D]."""
        return self.out(merge_heads(ctx))


class AttentionMixer(TokenMixer):
    """Base of the softmax-attention mixers: owns ``self.proj`` (q/k/v/out) and the
    padding convention; subclasses implement ``attend(q, k, v, mask) -> ctx``."""

    def __init__(self, d_model: int, n_heads: int, max_len: int, dropout: float = 0.0):
        super().__init__()
        self.d_model, self.n_heads, self.max_len = d_model, n_heads, max_len
        self.head_dim = d_model // n_heads
        self.dropout = float(dropout)
        self.proj = QKVOut(d_model, n_heads)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.proj.project(x)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, x: Tensor) -> Tensor:
        raise NotImplementedError

    def attend_shared(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, shared: object) -> Tensor:
        """``attend`` with the structure ``shared_padding`` names, built once a forward pass by the encoder;
        only a mixer whose ``shared_padding`` names one is called with it."""
        raise NotImplementedError

    def forward(self, x: Tensor, mask: Tensor | None = None, shared: object = None) -> Tensor:
        mask = full_mask(x, mask)
        q, k, v = self.project(x)
        ctx = self.attend(q, k, v, mask, x) if shared is None else self.attend_shared(q, k, v, mask, shared)
        y = self.proj.output(ctx)
        # padded queries: exactly 0 (torch.where, so even a NaN there could not leak)
        return torch.where(mask[..., None], y, torch.zeros((), dtype=y.dtype, device=y.device))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, max_len={self.max_len}"


# --------------------------------------------------------------------------- flex backend

# "auto": on CUDA "dense" up to the mechanism's fast_defaults "dense_max_len" tokens and flex above
# (its fused kernel; heads narrower than FLEX_MIN_HEAD_DIM padded to it), "blockwise" elsewhere (eager
# flex_attention on CPU materialises the whole score matrix); "dense": the whole pattern as one boolean
# mask of scaled_dot_product_attention; "flex" / "dense" / "blockwise" force one (a GPU problem can be
# diagnosed by switching: attention_params.backend=blockwise).
BLOCKSPARSE_BACKENDS = ("auto", "blockwise", "flex", "dense")


class FlexPatternMixin:
    """The ``flex_attention`` backend of the position-pattern mixers (torch >= 2.5).

    The structural pattern is a ``BlockMask`` built once per (length, device, tile side) from the
    subclass's ``flex_mask_mod(device)`` (``(b, h, q, kv) -> bool``, broadcast over the
    batch; ``flex_heads()`` heads or ``None``), or from ``flex_layout(L, device)`` when the
    keys are gathered into another axis; ``_flex.tile_block_mask`` classifies its tiles exactly.
    Padding, the key layout and LRA's attention dropout (exact, through two passes and their
    log-sum-exps) are ``_flex``'s.

    How it runs (``fast_defaults.FAST_DEFAULTS[FLEX_MECHANISM]`` for ``"auto"``): ``flex_block``
    (tile side, 64 or 128), ``flex_global_rows`` (``dense``: the rows returned by
    ``flex_global_rows`` -- queries that attend to every key -- are left out of the flex call and
    computed as dense rows over all keys, as the blockwise backend computes them; at a tile side
    of 128 such a row otherwise makes every tile of its row band partial), ``flex_lse_pass``
    (``_flex.FlexSettings``).

    Speed (H200, torch 2.11, B=8, L=4096, D=256, H=4, fwd+bwd, no dropout, peak memory):
    under bf16 autocast flex beats the blockwise path (bigbird 2.3 vs 5.8 ms, sparse 2.5 vs
    10.3 ms, longformer 2.5 vs 6.2 ms; ~280 MiB vs 1.3-2.6 GiB); in float32 it is 2-4x
    slower than blockwise (no tensor cores).
    """

    PLAIN_PATH: ClassVar[Mapping[str, object]] = {"backend": "blockwise"}  # TokenMixer.PLAIN_PATH
    FLEX_MECHANISM: ClassVar[str] = ""  # the mechanism's row of fast_defaults.FAST_DEFAULTS ("": none)

    def init_flex(self, backend: str, flex_block="auto", flex_global_rows="auto", flex_lse_pass="auto") -> None:
        """Check and keep the backend and the flex options (constructor arguments)."""
        if backend not in BLOCKSPARSE_BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose from {BLOCKSPARSE_BACKENDS}")
        self.backend = backend
        name = self.FLEX_MECHANISM
        self.flex_block = check_choice(name, "flex_block", flex_block, "attention_params.flex_block")
        self.flex_global_rows_mode = check_choice(
            name, "flex_global_rows", flex_global_rows, "attention_params.flex_global_rows"
        )
        self.flex_lse_pass = check_choice(name, "flex_lse_pass", flex_lse_pass, "attention_params.flex_lse_pass")

    def flex_settings(self, length: int | None = None) -> FlexSettings:
        """How the flex call runs at sequence ``length``: an ``auto`` tile side below 128 applies from the
        table's ``flex_narrow_min_len`` on (128-wide tiles below it; fast_defaults.py says why)."""
        name = self.FLEX_MECHANISM
        if not name:  # a mixer without fast-path options (local attention): the defaults
            return FlexSettings()
        block = int(choose(name, "flex_block", self.flex_block))
        narrow_from = FAST_DEFAULTS[name].get("flex_narrow_min_len")
        if self.flex_block == "auto" and block < 128 and narrow_from and length is not None and length < narrow_from:
            block = 128
        return FlexSettings(block=block, lse_pass=choose(name, "flex_lse_pass", self.flex_lse_pass))

    def flex_mask_mod(self, device, dense_rows: bool = False):  # pragma: no cover - abstract
        raise NotImplementedError

    def flex_heads(self) -> int | None:
        return None

    def flex_global_rows(self, L: int) -> list[int]:
        """Query rows that attend to every key (none by default)."""
        return []

    def flex_layout(self, L: int, device, dense_rows: bool = False) -> tuple:
        """(mask_mod, key-axis length, key_index or None) of the block mask at length ``L``;
        ``dense_rows``: the rows of ``flex_global_rows`` allowed nothing (computed apart)."""
        return self.flex_mask_mod(device, dense_rows), L, None

    def pattern_backend(self, t: Tensor) -> str:
        """The backend that runs for queries ``t`` ([B, H, L, head width]): ``backend`` when set; for
        ``auto``, on CUDA ``dense`` up to the table's ``dense_max_len`` tokens and ``flex`` above, on
        other devices ``blockwise``."""
        if self.backend != "auto":
            return self.backend
        if t.device.type != "cuda":
            return "blockwise"
        dense_to = FAST_DEFAULTS.get(self.FLEX_MECHANISM, {}).get("dense_max_len", 0)
        return "dense" if t.shape[2] <= dense_to else "flex"

    def fast_attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor | None:
        """The flex or the dense backend's attention for these queries; None where the blockwise one runs."""
        backend = self.pattern_backend(q)
        if backend == "flex":
            return self.flex_attend(q, k, v, mask)
        return self.dense_attend(q, k, v, mask) if backend == "dense" else None

    def dense_attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """The pattern (``dense_mask``, built once per length and device) as the boolean ``attn_mask`` of
        one ``scaled_dot_product_attention`` call with LRA's attention dropout (on the probabilities, as
        the release applies it), the key padding folded into the features (``fold_key_mask``), so the
        mask stays [1, 1|H, L, L] whatever the batch. Every query sees at least itself, so no row is
        empty; a padded query's row is zeroed by the mixer. Quadratic in memory traffic: the
        memory-efficient kernel reads the mask for every tile, which at short lengths beats flex's
        tile bookkeeping (paper/performance.md)."""
        L, scale = q.shape[2], 1.0 / math.sqrt(q.shape[-1])
        cache = self.__dict__.setdefault("_dense_cache", {})
        key = (L, str(q.device))
        if key not in cache:
            pattern = self.dense_mask(L, device=q.device)
            cache[key] = (pattern[None] if pattern.dim() == 2 else pattern)[None]  # [1, 1|H, L, L]
        q, k = fold_key_mask(q, k, mask[:, None, :], scale)
        p = self.dropout if self.training else 0.0
        return sdpa_aligned(q, k, v, attn_mask=cache[key], dropout_p=p, scale=scale)

    def dense_row_index(self, L: int, device) -> Tensor | None:
        """The global rows computed apart (``flex_global_rows=dense``), or None."""
        name = self.FLEX_MECHANISM
        if not name or choose(name, "flex_global_rows", self.flex_global_rows_mode) != "dense":
            return None
        rows = self.flex_global_rows(L)
        return torch.tensor(rows, dtype=torch.long, device=device) if rows else None

    def flex_pattern(self, L: int, device, block: int = 128, dense_rows: bool = False) -> tuple:
        """(BlockMask, key_index), built once per (length, device, tile side, dense rows) and cached on
        the module."""
        cache = self.__dict__.setdefault("_flex_cache", {})
        key = (L, str(device), block, dense_rows)
        if key not in cache:
            mask_mod, kv_len, key_index = self.flex_layout(L, device, dense_rows)
            block_mask = tile_block_mask(mask_mod, self.flex_heads(), L, kv_len, block, device)
            cache[key] = (block_mask, key_index)
        return cache[key]

    def flex_attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        L = q.shape[2]
        settings = self.flex_settings(L)
        rows = self.dense_row_index(L, q.device)
        block_mask, key_index = self.flex_pattern(L, q.device, settings.block, rows is not None)
        p = self.dropout if self.training else 0.0
        out = flex_pattern_attention(q, k, v, mask, block_mask, key_index, dropout_p=p, settings=settings)
        if rows is None:
            return out
        dense = dense_attention(
            q.index_select(2, rows), k, v, mask[:, None, None, :], dropout_p=p, training=self.training
        )
        return out.index_copy(2, rows, dense.to(out.dtype))

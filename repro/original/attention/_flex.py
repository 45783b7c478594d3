"""``flex_attention`` for the position-pattern mixers, with LRA's attention dropout kept exact.

The mixers (``_common.FlexPatternMixin``) hand over a ``BlockMask`` built once per pattern,
length and device; this module runs the attention over it:

* Padding: a ``score_mod`` adds a float32 key bias (0, or -inf on padded keys); it also acts
  inside fully unmasked blocks, where the kernel skips ``mask_mod``. It runs on every batch, with
  padding or without: measured as fast as no ``score_mod`` (H200, bf16, L = 4096), it spares a
  host synchronisation per call (the check whether every key is real) and a second compiled graph.
* Key layout: a mixer may gather its keys into a longer axis (``key_index``: extended key
  slot -> original position) so that a scattered pattern becomes a few dense blocks
  (Sparse Transformer's summary columns); every (query, original key) pair must then appear
  in exactly one allowed slot.
* Attention dropout (LRA: ``dropout(softmax(s)) @ v``, the kept weights scaled by
  ``1 / (1 - p)``, no renormalisation). flex_attention has no dropout, so:

  1. the keep-mask is a deterministic function of (batch, head, query, key): the 32-bit
     integer hash ``lowbias32`` (C. Wellons' hash-prospector) of ``row_key[b, h, q] ^
     col_key[key]``, compared with a threshold (``p`` rounded to a multiple of 2^-24); the
     int32 keys are drawn from torch's RNG at every call (``draw_dropout_keys``), so the
     forward and the backward kernels see the same mask without storing it;
  2. one pass over the pattern with the dropped keys at -inf gives ``o_kept`` (the softmax
     over the kept keys) and its log-normaliser ``lse_kept``; a second pass over the whole
     pattern gives ``lse_full``. With ``P = exp(s - lse_full)`` the weights of the full
     softmax, ``sum_kept P v = o_kept * exp(lse_kept - lse_full)``, hence
     ``dropout(P) @ v = o_kept * exp(lse_kept - lse_full) / (1 - p)`` exactly. Gradients
     flow through both log-normalisers (flex_attention differentiates its returned
     log-sum-exp), so the backward is the exact gradient of LRA's dropout too.

  Cost: two passes over the pattern, forward and backward. The draws differ from
  ``torch.nn.functional.dropout``'s (the plain backends), the distribution is the same.
  The second pass needs only ``lse_full`` (and its gradients with respect to q and k):
  ``lse_pass="narrow"`` runs it with a zero value tensor 16 wide instead of the values, which
  leaves the log-normaliser and those gradients unchanged and cuts the value products (and
  their backward) to a quarter at a head width of 64.

* Tiles (``tile_block_mask``, ``FlexSettings.block``): the kernel skips a tile the block mask
  leaves out, runs a full tile without ``mask_mod``, and evaluates ``mask_mod`` (and masks) on
  every pair of a partial tile. Measured on an H200 (torch 2.11, one layer forward and backward
  with LRA's dropout, L = 4097, batch 32), partial tiles dominate: Longformer (159 tiles of
  128 x 128 per head, 41% partial) took 8.4 ms, Sparse (263, 75% partial) 20.7 ms, BigBird (345,
  90% partial: its 64-wide blocks cut every 128-wide tile, and its per-head table is gathered
  per pair) 35.8 ms; a fit puts a partial tile at about 4x a full one. Hence: (1) the tiles are
  classified exactly, over whole tiles: the inputs are padded to a multiple of the tile, a
  padded position takes the last real position's pattern and the padded keys are masked by the
  key bias (``create_block_mask`` would mark every last tile of a length that is not a multiple
  of the tile partial, and the kernels have known faults at such lengths); (2) a tile side of 64
  is selectable, at which BigBird's pattern has no partial tile at all (158 tile-equivalents of
  128 x 128 per head, none partial); (3) the mixers may take their global query rows (rows that
  see every key) out of the flex call (``FlexPatternMixin``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ._pad import pad_dim

try:  # newer torch; older versions return the log-sum-exp with return_lse=True
    from torch.nn.attention.flex_attention import AuxRequest
except ImportError:  # pragma: no cover - depends on the torch version
    AuxRequest = None

KEEP_BITS = 24  # the keep decision compares the hash's low 24 bits with a threshold
_COMPILED: dict = {}  # autotune (bool) -> compiled flex_attention
# lengths x (train, eval) x (plain, dropout, log-normaliser) x batch sizes x tile sides, each its own graph
RECOMPILE_LIMIT = 256


# --------------------------------------------------------------------------- dropout mask


def _mix32(x: Tensor) -> Tensor:
    """``lowbias32`` on int32 (wrapping products; logical shifts written as masked arithmetic
    shifts), the same bits in eager torch and in a compiled Triton kernel."""
    x = x ^ ((x >> 16) & 0xFFFF)
    x = x * 0x7FEB352D
    x = x ^ ((x >> 15) & 0x1FFFF)
    x = x * (0x846CA68B - (1 << 32))
    return x ^ ((x >> 16) & 0xFFFF)


def dropout_threshold(p: float) -> int:
    """The hash threshold of drop probability ``p``: drop when the low 24 bits are below it."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"attention dropout must be in [0, 1), got {p}")
    return int(round(p * (1 << KEEP_BITS)))


def keep_probability(threshold: int) -> float:
    """The exact keep probability of ``threshold`` (``1 - p`` with ``p`` rounded to 2^-24)."""
    return 1.0 - threshold / (1 << KEEP_BITS)


def keep_mask(row_key: Tensor, col_key: Tensor, threshold: int) -> Tensor:
    """True where a (query row, key) pair is kept; the keys are int32, broadcast together."""
    return (_mix32(row_key ^ col_key) & ((1 << KEEP_BITS) - 1)) >= threshold


def draw_dropout_keys(batch: int, heads: int, q_len: int, k_len: int, device) -> tuple[Tensor, Tensor]:
    """Fresh int32 keys from torch's RNG: one per (batch, head, query) row and one per key."""
    lo, hi = -(1 << 31), 1 << 31
    row = torch.randint(lo, hi, (batch, heads, q_len), dtype=torch.int32, device=device)
    col = torch.randint(lo, hi, (k_len,), dtype=torch.int32, device=device)
    return row, col


# --------------------------------------------------------------------------- score mods


def key_bias(key_mask: Tensor) -> Tensor:
    """float32 [B, Lk]: 0 on real keys, -inf on padded ones (no check whether any is padded: that
    would synchronise with the host at every call)."""
    zeros = torch.zeros(key_mask.shape, dtype=torch.float32, device=key_mask.device)
    return zeros.masked_fill(~key_mask, float("-inf"))


def padding_mod(bias: Tensor | None, bias_mod: Callable | None = None) -> Callable | None:
    """``bias_mod`` (a mechanism's own additive term, e.g. a relative position bias) and the key
    padding bias; None when there is neither."""
    # additive bias: measured on an H200 (torch 2.11, bf16, L=4096) as fast as no score_mod
    if bias is None and bias_mod is None:
        return None

    def score_mod(score, b, h, q_idx, kv_idx):
        if bias_mod is not None:
            score = bias_mod(score, b, h, q_idx, kv_idx)
        if bias is not None:
            score = score + bias[b, kv_idx]
        return score

    return score_mod


def dropout_mod(
    bias: Tensor | None, row_key: Tensor, col_key: Tensor, threshold: int, bias_mod: Callable | None = None
) -> Callable:
    """Padding (and ``bias_mod``) as ``padding_mod``, and -inf on the keys the hash drops."""
    base = padding_mod(bias, bias_mod)

    def score_mod(score, b, h, q_idx, kv_idx):
        if base is not None:
            score = base(score, b, h, q_idx, kv_idx)
        keep = keep_mask(row_key[b, h, q_idx], col_key[kv_idx], threshold)
        return torch.where(keep, score, float("-inf"))

    return score_mod


# --------------------------------------------------------------------------- block masks


def _tile_reduce(allowed: Tensor, rows: int, cols: int, block: int, fill: bool, reduce) -> Tensor:
    """``allowed`` [H, r, c] padded with ``fill`` to whole tiles, reduced per tile: [H, r/block, c/block]."""
    padded = F.pad(allowed.to(torch.uint8), (0, cols - allowed.shape[2], 0, rows - allowed.shape[1]), value=int(fill))
    tiles = padded.view(allowed.shape[0], rows // block, block, cols // block, block)
    return reduce(reduce(tiles.bool(), dim=4), dim=2)


def _ordered(tiles: Tensor) -> tuple[Tensor, Tensor]:
    """(number [1, H, NQ], indices [1, H, NQ, NK]) of the True tiles of ``tiles`` [H, NQ, NK],
    ascending, as BlockMask stores them."""
    number = tiles.sum(dim=-1, dtype=torch.int32)
    order = torch.argsort((~tiles).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return number[None], order[None]


def clamped_mod(mask_mod: Callable, q_len: int, kv_len: int) -> Callable:
    """``mask_mod`` with positions past ``q_len`` / ``kv_len`` taking the last position's pattern."""

    def padded(b, h, qi, kv):
        return mask_mod(b, h, qi.clamp(max=q_len - 1), kv.clamp(max=kv_len - 1))

    return padded


def tile_block_mask(mask_mod: Callable, heads: int | None, q_len: int, kv_len: int, block: int, device):
    """A ``BlockMask`` of ``block`` x ``block`` tiles over the lengths rounded up to whole tiles,
    whose classification is exact: a tile is full when every pair in it is allowed (the kernel then
    never calls ``mask_mod`` there), partial when some pair is allowed, absent otherwise.

    Whole tiles: a position past the end takes the pattern of the last position (``mask_mod`` sees
    clamped indices), and ``flex_pattern_attention`` pads the inputs to these lengths and masks the
    padded keys. So the kernel never meets a sequence that ends inside a tile, where torch's flex
    kernels have known faults (NaN gradients with a score_mod and a block mask, pytorch/pytorch
    #153799; a max-autotune compilation that hit an illegal memory access at 2,001 tokens with
    64-wide tiles here), and a pattern aligned to the tiles keeps its last tiles full.

    The pattern is evaluated on [heads, rows, kv_len] index grids, a band of query rows at a time
    (construction only; the mask is cached by its mixer)."""
    from torch.nn.attention.flex_attention import BlockMask

    n_heads = heads or 1
    nq, nk = -(-q_len // block), -(-kv_len // block)
    if (nq * block, nk * block) != (q_len, kv_len):
        mask_mod = clamped_mod(mask_mod, q_len, kv_len)
        q_len, kv_len = nq * block, nk * block
    h = torch.arange(n_heads, device=device)[:, None, None]
    kv = torch.arange(kv_len, device=device)[None, None, :]
    band = max(1, (1 << 24) // max(1, n_heads * kv_len * block))  # query tiles per evaluation
    some, full = [], []
    for first in range(0, nq, band):
        last = min(nq, first + band)
        qi = torch.arange(first * block, min(q_len, last * block), device=device)[None, :, None]
        allowed = mask_mod(torch.zeros((), dtype=torch.long, device=device), h, qi, kv)
        allowed = allowed.expand(n_heads, qi.shape[1], kv_len)
        rows, cols = (last - first) * block, nk * block
        some.append(_tile_reduce(allowed, rows, cols, block, False, torch.any))
        full.append(_tile_reduce(allowed, rows, cols, block, True, torch.all))
    some, full = torch.cat(some, dim=1), torch.cat(full, dim=1)
    partial_num, partial_idx = _ordered(some & ~full)
    full_num, full_idx = _ordered(full)
    return BlockMask.from_kv_blocks(
        partial_num, partial_idx, full_num, full_idx, BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(q_len, kv_len)
    )


# --------------------------------------------------------------------------- the kernel

LSE_PASSES = ("full", "narrow")
# torch 2.11's compiled flex_attention takes no head narrower than this ("embedding dimension of the
# query, key, and value must be at least 16"); flex_pattern_attention pads narrower heads with zeros.
FLEX_MIN_HEAD_DIM = 16
NARROW_VALUE_DIM = FLEX_MIN_HEAD_DIM  # the smallest value width flex_attention's kernels take


@dataclass(frozen=True)
class FlexSettings:
    """How a flex call runs (not what it computes): the block mask's tile side, the dropout's
    log-normaliser pass (``full`` with the values, ``narrow`` with a 16-wide zero value tensor),
    and ``kernel_options`` (sorted (name, value) pairs) for flex_attention.

    Tiles narrower than 128 compile with max-autotune: torch 2.11's default backward configuration
    on sm90 (64 x 128 and 128 x 64 tiles for a head width of 64) does not divide a 64-wide block, and
    the kernel's own options cannot override that check; max-autotune also tries 32- and 64-wide
    configurations and keeps the fastest that fits."""

    block: int = 128
    lse_pass: str = "full"
    kernel_options: tuple = ()

    @property
    def autotune(self) -> bool:
        """Compile with inductor's ``max_autotune`` (tiles narrower than 128)."""
        return self.block < 128

    @property
    def options(self) -> dict | None:
        return dict(self.kernel_options) or None


def raise_recompile_limit() -> None:
    """Let dynamo keep RECOMPILE_LIMIT graphs of one function (each length, grad mode and setting is one)."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
    for name in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):  # all code objects together
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), 4 * RECOMPILE_LIMIT))
            break


def flex_fn(device: torch.device, autotune: bool = False) -> Callable:
    """``flex_attention``, compiled on CUDA (its fused kernel; ``autotune``: with inductor's
    ``max_autotune``, which benchmarks the kernel configurations that fit the block mask and keeps
    the fastest, without the coordinate-descent tuning of the ``max-autotune`` modes); eager
    elsewhere (a dense reference implementation, for tests). Each length, grad mode and score_mod
    is its own graph, hence the raised recompile limit (past it dynamo would fall back to eager)."""
    from torch.nn.attention.flex_attention import flex_attention

    if device.type != "cuda":
        return flex_attention
    if autotune not in _COMPILED:
        raise_recompile_limit()
        options = {"max_autotune": True} if autotune else None
        _COMPILED[autotune] = torch.compile(flex_attention, dynamic=False, options=options)
    return _COMPILED[autotune]


def dense_flex(q, k, v, score_mod, block_mask, with_lse: bool, scale: float | None = None):
    """What ``flex_attention`` computes, materialised and differentiable by autograd: torch
    raises on a CPU backward through flex_attention, so a CPU step that needs gradients (tests,
    ``backend=flex`` on CPU) runs this. ``score_mod`` and the block mask's ``mask_mod`` are
    called once on broadcast index tensors (the mods here are written for that); no block mask
    is full attention."""
    B, H, Lq, Dh = q.shape
    Lk = k.shape[2]
    dev = q.device
    b = torch.arange(B, device=dev)[:, None, None, None]
    h = torch.arange(H, device=dev)[None, :, None, None]
    qi = torch.arange(Lq, device=dev)[None, None, :, None]
    kv = torch.arange(Lk, device=dev)[None, None, None, :]
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / Dh**0.5 if scale is None else scale)
    if score_mod is not None:
        scores = score_mod(scores, b, h, qi, kv)
    if block_mask is not None:
        scores = scores.masked_fill(~block_mask.mask_mod(b, h, qi, kv), float("-inf"))
    some = (scores > float("-inf")).any(dim=-1, keepdim=True)  # rows with a key left
    scores = scores.masked_fill(~some, 0.0)  # (no -inf - -inf in the backward)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    weights = torch.exp(scores - lse).masked_fill(~some, 0.0)
    lse = lse.masked_fill(~some, float("-inf")).squeeze(-1)
    return torch.matmul(weights.to(v.dtype), v), (lse if with_lse else None)


def _flex(q, k, v, score_mod, block_mask, with_lse: bool, settings: FlexSettings, scale: float | None = None):
    if q.device.type == "cpu" and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return dense_flex(q, k, v, score_mod, block_mask, with_lse, scale)
    fn = flex_fn(q.device, settings.autotune)
    kwargs = dict(score_mod=score_mod, block_mask=block_mask, scale=scale, kernel_options=settings.options)
    if not with_lse:
        return fn(q, k, v, **kwargs), None
    if AuxRequest is not None:
        out, aux = fn(q, k, v, return_aux=AuxRequest(lse=True), **kwargs)
        return out, aux.lse
    return fn(q, k, v, return_lse=True, **kwargs)  # pragma: no cover


def rescale_kept(out_kept: Tensor, lse_kept: Tensor, lse_full: Tensor, keep_prob: float) -> Tensor:
    """``o_kept * exp(lse_kept - lse_full) / keep_prob``; 0 on rows with no kept or no allowed
    key (their log-normalisers are -inf), with no NaN in the gradient."""
    finite = torch.isfinite(lse_kept) & torch.isfinite(lse_full)
    zero = torch.zeros((), dtype=lse_kept.dtype, device=lse_kept.device)
    diff = torch.where(finite, lse_kept, zero) - torch.where(finite, lse_full, zero)
    ratio = torch.where(finite, torch.exp(diff), zero) * (1.0 / keep_prob)
    return (out_kept * ratio.unsqueeze(-1)).to(out_kept.dtype)


def full_log_normaliser(q, k, v, score_mod, block_mask, settings: FlexSettings, scale: float | None) -> Tensor:
    """The log-normaliser of the softmax over every allowed key (the dropout's second pass).
    ``narrow``: computed with a zero value tensor 16 wide, so the kernel's value products and
    their gradients shrink to a quarter (Dh = 64); the log-normaliser and its gradients with
    respect to q and k are the same."""
    if settings.lse_pass == "narrow":
        v = torch.zeros(*k.shape[:3], NARROW_VALUE_DIM, dtype=v.dtype, device=v.device)
    return _flex(q, k, v, score_mod, block_mask, True, settings, scale)[1]


def flex_pattern_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_mask: Tensor,
    block_mask,
    key_index: Tensor | None = None,
    dropout_p: float = 0.0,
    settings: FlexSettings = FlexSettings(),
    bias_mod: Callable | None = None,
    scale: float | None = None,
    value_split: int = 1,
) -> Tensor:
    """Softmax attention of ``q`` [B, H, L, Dh] over the pattern of ``block_mask`` (None: every
    key), padded keys (``key_mask`` [B, Lk], True = real) never attended, attention dropout
    ``dropout_p`` (pass 0 outside training), ``bias_mod`` (a score_mod term of the mechanism's own,
    applied before padding and dropout), logits scaled by ``scale`` (default 1/sqrt(Dh)).
    ``key_index`` [Lk'] gathers the keys into the block mask's key axis (None: the identity).
    ``value_split``: the values' width cut into that many flex calls (same scores, same keep-mask),
    for values too wide for the kernel's registers. Returns [B, H, L, Dv].

    A block mask over whole tiles (``tile_block_mask``) is longer than the inputs: q, the keys
    and the values are padded with zeros to its lengths, the padded keys masked and the padded
    rows dropped; the dropout's keys are drawn for the real lengths, as without padding.
    Heads narrower than ``FLEX_MIN_HEAD_DIM`` (LRA's image Sparse Transformer: 8 wide) are padded
    with zero columns to it, the scale kept at the real width's, and the output cut back: zero q/k
    columns add nothing to a score and zero value columns give zero output columns."""
    L, value_width = q.shape[2], v.shape[-1]
    part_width = max(FLEX_MIN_HEAD_DIM, -(-value_width // value_split))  # every v.chunk piece this wide
    if q.shape[-1] < FLEX_MIN_HEAD_DIM or part_width * value_split != value_width:
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        q, k = (pad_dim(t, -1, max(t.shape[-1], FLEX_MIN_HEAD_DIM)) for t in (q, k))
        v = pad_dim(v, -1, part_width * value_split)
    if key_index is not None:
        k, v = k.index_select(2, key_index), v.index_select(2, key_index)
    slot_mask = key_mask if key_index is None else key_mask.index_select(1, key_index)
    lengths = (L, k.shape[2]) if block_mask is None else tuple(block_mask.seq_lengths)
    if lengths != (L, k.shape[2]):
        if bias_mod is not None:
            bias_mod = clamped_score_mod(bias_mod, L, k.shape[2])
        q, k, v = pad_dim(q, 2, lengths[0]), pad_dim(k, 2, lengths[1]), pad_dim(v, 2, lengths[1])
        slot_mask = pad_dim(slot_mask, 1, lengths[1], False)
    bias = key_bias(slot_mask)
    values = v.chunk(value_split, dim=-1) if value_split > 1 else (v,)
    if dropout_p <= 0.0:
        mod = padding_mod(bias, bias_mod)
        outs = [_flex(q, k, part, mod, block_mask, False, settings, scale)[0] for part in values]
        return _real_rows(outs, L, value_width)
    threshold = dropout_threshold(dropout_p)
    B, H = q.shape[:2]
    row_key, col_key = draw_dropout_keys(B, H, L, key_mask.shape[1], q.device)
    if key_index is not None:
        col_key = col_key.index_select(0, key_index)
    row_key, col_key = pad_dim(row_key, 2, lengths[0]), pad_dim(col_key, 0, lengths[1])
    kept_mod = dropout_mod(bias, row_key, col_key, threshold, bias_mod)
    kept = [_flex(q, k, part, kept_mod, block_mask, True, settings, scale) for part in values]
    lse_kept = kept[0][1]
    lse_full = full_log_normaliser(q, k, v, padding_mod(bias, bias_mod), block_mask, settings, scale)
    outs = [rescale_kept(out, lse_kept, lse_full, keep_probability(threshold)) for out, _ in kept]
    return _real_rows(outs, L, value_width)


def _real_rows(outs: list[Tensor], length: int, width: int) -> Tensor:
    """The value-split outputs joined along the value width, the rows padded to whole tiles and the
    columns padded to the kernel's smallest head dropped."""
    return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1))[:, :, :length, :width]


def clamped_score_mod(score_mod: Callable, q_len: int, kv_len: int) -> Callable:
    """``score_mod`` with positions past ``q_len`` / ``kv_len`` read as the last position."""

    def padded(score, b, h, qi, kv):
        return score_mod(score, b, h, qi.clamp(max=q_len - 1), kv.clamp(max=kv_len - 1))

    return padded


def dense_dropout_reference(scores: Tensor, allowed: Tensor, keep: Tensor, keep_prob: float, v: Tensor) -> Tensor:
    """``(softmax(scores | allowed) * keep / keep_prob) @ v`` materialised, rows with no allowed
    key 0: what ``flex_pattern_attention`` computes, for tests and the GPU check."""
    some = allowed.any(-1, keepdim=True)
    p = torch.softmax(scores.masked_fill(~(allowed | ~some), float("-inf")), dim=-1)
    p = torch.where(some, p, torch.zeros((), dtype=p.dtype, device=p.device))
    return torch.matmul(p * keep / keep_prob, v)


# --------------------------------------------------------------------------- padding alone

PADDING_TILE = 128  # flex_attention's default tile side; the padding masks' tiles


def padding_block_mask(mask: Tensor, block: int = PADDING_TILE):
    """A ``BlockMask`` for softmax attention under padding at the end of each sample: ``mask`` [B, L]
    (True = real token, every real token before every padded one, as every task here pads); query q may
    see key k when both are real, and a padded query sees nothing (flex_attention returns 0 for a row
    with no allowed key, the mixers' convention for padded queries).

    Built from the lengths on the device with no host synchronisation (so a compiled model traces it):
    a tile is absent when its queries or its keys are all padding, full when both are all real (the
    kernel skips ``mask_mod`` there), partial otherwise; a batch of mean length l/L computes about
    (l/L)^2 of the tiles. A mask with a padded position before a real one is refused (on CUDA by a
    device-side assertion, which stops the run instead of skipping real tokens)."""
    from torch.nn.attention.flex_attention import BlockMask

    B, L = mask.shape
    lengths = mask.sum(dim=-1)
    suffix = torch.arange(L, device=mask.device)[None, :] < lengths[:, None]
    if mask.device.type == "cuda":
        torch._assert_async((suffix == mask).all())
    elif not torch.equal(suffix, mask):
        raise ValueError("padding_block_mask: padding must come after every real token of a sample")
    n = -(-L // block)
    tile = torch.arange(n, device=mask.device)[None, :]  # [1, n]
    some = (-(-lengths // block))[:, None]  # tiles holding a real token, per sample
    every = (lengths // block)[:, None]  # tiles of real tokens alone
    q_full, q_some = tile < every, tile < some  # [B, n] per query tile
    full_num = torch.where(q_full, every, 0)  # a query tile of real tokens: the keys' full tiles ...
    partial_num = torch.where(q_full, some - every, torch.where(q_some, some, 0))  # ... and their last, partial
    kv = torch.arange(n, device=mask.device)[None, None, :]  # [1, 1, n]
    partial_idx = torch.where(q_full[..., None], every[..., None] + kv, kv).clamp(max=n - 1)  # [B, n, n]
    full_idx = kv.expand(B, n, n)

    def mask_mod(b, h, q, k):
        return (q < lengths[b]) & (k < lengths[b])

    tables = (partial_num[:, None], partial_idx[:, None], full_num[:, None], full_idx[:, None])
    return BlockMask.from_kv_blocks(
        *(table.to(torch.int32) for table in tables), BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(L, L)
    )


def document_block_mask(doc: Tensor, lengths: Tensor, starts: Tensor, block: int = PADDING_TILE):
    """A ``BlockMask`` for softmax attention over a packed stream (``repro.models.packing``): ``doc``
    [C] the example each slot's token belongs to (-1: an empty slot), ``lengths`` and ``starts`` [B] each
    example's real tokens and first slot (a multiple of ``block``; each example in whole tiles of its own).
    Query q may see key k when both hold tokens of one example; an empty slot sees nothing (0 out).

    Built on the device with no host synchronisation: a tile of an example's is full against the example's
    tiles of real tokens alone when it is one itself, partial against the example's last tile when that one
    ends inside it, and partial against every tile of the example when it is that last tile; tiles of
    different examples, and empty tiles, are absent. So the kernel computes each example's own tiles, about
    what attention over the padded batch's examples computes."""
    from torch.nn.attention.flex_attention import BlockMask

    capacity, device = int(doc.shape[0]), doc.device
    # Index tables as wide as the stream's tiles (an example holds at most ceil(its length / block) of them,
    # but torch 2.11's BlockMask transposes its tables through a dense [tiles, table width] grid)
    n = width = capacity // block
    tile_doc = doc[::block]  # a tile's first slot is real unless the tile is empty (examples start on tiles)
    inside = tile_doc >= 0
    d = tile_doc.clamp(min=0)
    first = starts[d] // block
    every = lengths[d] // block  # the example's tiles of real tokens alone
    some = -(-lengths[d] // block)  # the example's tiles
    own = torch.arange(n, device=device) - first  # the tile's place in its example
    q_full = inside & (own < every)
    full_num = torch.where(q_full, every, 0)
    partial_num = torch.where(q_full, some - every, torch.where(inside, some, 0))
    m = torch.arange(width, device=device)[None, :]
    full_idx = (first[:, None] + m).clamp(max=n - 1)
    partial_idx = torch.where(q_full[:, None], (first + every)[:, None] + m, first[:, None] + m).clamp(max=n - 1)

    def mask_mod(b, h, q, k):
        return (doc[q] == doc[k]) & (doc[q] >= 0)

    tables = (partial_num, partial_idx, full_num, full_idx)
    return BlockMask.from_kv_blocks(
        *(table[None, None].to(torch.int32) for table in tables),
        BLOCK_SIZE=block,
        mask_mod=mask_mod,
        seq_lengths=(capacity, capacity),
    )


@torch.compiler.disable
def eager_padding_block_mask(mask: Tensor, block: int = PADDING_TILE):
    """``padding_block_mask`` built outside any compiled graph (a compiled model breaks its graph here and
    hands the tables to the kernel as inputs). Traced into the graph, on one H200 with torch 2.11 inductor
    fused the tables' computation (BlockMask's sort of its transposed tables among it) into the
    flex_attention kernel, which then read out of bounds (an illegal memory access, ListOps at 2,000
    tokens); the eager path ran."""
    return padding_block_mask(mask, block)


def padded_flex_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, block_mask=None) -> Tensor:
    """Softmax attention of ``q, k, v`` [B, H, L, Dh] over the real keys of ``mask`` [B, L] (padding at the
    end), through
    flex_attention's fused kernel on CUDA (the padding block mask skips every tile of padding);
    0 on padded queries. On the CPU (tests), the dense reference of the same function. ``block_mask``:
    ``eager_padding_block_mask(mask)`` built by the caller (once for every layer), else built here."""
    if block_mask is None:
        block_mask = eager_padding_block_mask(mask)
    if q.device.type == "cpu":
        return dense_flex(q, k, v, None, block_mask, with_lse=False)[0]
    return flex_fn(q.device)(q, k, v, block_mask=block_mask)

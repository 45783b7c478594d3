"""``flex_attention`` for the position-pattern mixers, with LRA's attention dropout kept exact.

The mixers (``_common.FlexPatternMixin``) hand over a ``BlockMask`` built once per pattern,
length and device; this module runs the attention over it:

* Padding: a ``score_mod`` adds a float32 key bias (0, or -inf on padded keys); it also acts
  inside fully unmasked blocks, where the kernel skips ``mask_mod``. A batch without padding
  runs with no ``score_mod`` at all.
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
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

try:  # newer torch; older versions return the log-sum-exp with return_lse=True
    from torch.nn.attention.flex_attention import AuxRequest
except ImportError:  # pragma: no cover - depends on the torch version
    AuxRequest = None

KEEP_BITS = 24  # the keep decision compares the hash's low 24 bits with a threshold
_COMPILED = None
RECOMPILE_LIMIT = 64  # lengths x (train, eval) x (plain, dropout) x batch sizes, each its own graph


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


def key_bias(key_mask: Tensor) -> Tensor | None:
    """float32 [B, Lk]: 0 on real keys, -inf on padded ones; None when every key is real
    (one host sync; the kernel then runs without a score_mod)."""
    if bool(key_mask.all()):
        return None
    zeros = torch.zeros(key_mask.shape, dtype=torch.float32, device=key_mask.device)
    return zeros.masked_fill(~key_mask, float("-inf"))


def padding_mod(bias: Tensor | None) -> Callable | None:
    # additive bias: measured on an H200 (torch 2.11, bf16, L=4096) as fast as no score_mod
    if bias is None:
        return None

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[b, kv_idx]

    return score_mod


def dropout_mod(bias: Tensor | None, row_key: Tensor, col_key: Tensor, threshold: int) -> Callable:
    """Padding as ``padding_mod``, and -inf on the keys the hash drops."""

    def score_mod(score, b, h, q_idx, kv_idx):
        if bias is not None:
            score = score + bias[b, kv_idx]
        keep = keep_mask(row_key[b, h, q_idx], col_key[kv_idx], threshold)
        return torch.where(keep, score, float("-inf"))

    return score_mod


# --------------------------------------------------------------------------- the kernel


def _raise_recompile_limit() -> None:
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))


def flex_fn(device: torch.device) -> Callable:
    """``flex_attention``, compiled on CUDA (its fused kernel); eager elsewhere (a dense
    reference implementation, for tests). Each length, grad mode and score_mod is its own
    graph, hence the raised recompile limit (past it dynamo would fall back to eager)."""
    global _COMPILED
    from torch.nn.attention.flex_attention import flex_attention

    if device.type != "cuda":
        return flex_attention
    if _COMPILED is None:
        _raise_recompile_limit()
        _COMPILED = torch.compile(flex_attention, dynamic=False)
    return _COMPILED


def dense_flex(q, k, v, score_mod, block_mask, with_lse: bool):
    """What ``flex_attention`` computes, materialised and differentiable by autograd: torch
    raises on a CPU backward through flex_attention, so a CPU step that needs gradients (tests,
    ``backend=flex`` on CPU) runs this. ``score_mod`` and the block mask's ``mask_mod`` are
    called once on broadcast index tensors (the mods here are written for that)."""
    B, H, Lq, Dh = q.shape
    Lk = k.shape[2]
    dev = q.device
    b = torch.arange(B, device=dev)[:, None, None, None]
    h = torch.arange(H, device=dev)[None, :, None, None]
    qi = torch.arange(Lq, device=dev)[None, None, :, None]
    kv = torch.arange(Lk, device=dev)[None, None, None, :]
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / Dh ** 0.5)
    if score_mod is not None:
        scores = score_mod(scores, b, h, qi, kv)
    allowed = block_mask.mask_mod(b, h, qi, kv)
    scores = scores.masked_fill(~allowed, float("-inf"))
    some = (scores > float("-inf")).any(dim=-1, keepdim=True)  # rows with a key left
    scores = scores.masked_fill(~some, 0.0)  # (no -inf - -inf in the backward)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    weights = torch.exp(scores - lse).masked_fill(~some, 0.0)
    lse = lse.masked_fill(~some, float("-inf")).squeeze(-1)
    return torch.matmul(weights, v), (lse if with_lse else None)


def _flex(q, k, v, score_mod, block_mask, with_lse: bool):
    if q.device.type == "cpu" and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return dense_flex(q, k, v, score_mod, block_mask, with_lse)
    fn = flex_fn(q.device)
    if not with_lse:
        return fn(q, k, v, score_mod=score_mod, block_mask=block_mask), None
    if AuxRequest is not None:
        out, aux = fn(q, k, v, score_mod=score_mod, block_mask=block_mask, return_aux=AuxRequest(lse=True))
        return out, aux.lse
    return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, return_lse=True)  # pragma: no cover


def rescale_kept(out_kept: Tensor, lse_kept: Tensor, lse_full: Tensor, keep_prob: float) -> Tensor:
    """``o_kept * exp(lse_kept - lse_full) / keep_prob``; 0 on rows with no kept or no allowed
    key (their log-normalisers are -inf), with no NaN in the gradient."""
    finite = torch.isfinite(lse_kept) & torch.isfinite(lse_full)
    zero = torch.zeros((), dtype=lse_kept.dtype, device=lse_kept.device)
    diff = torch.where(finite, lse_kept, zero) - torch.where(finite, lse_full, zero)
    ratio = torch.where(finite, torch.exp(diff), zero) * (1.0 / keep_prob)
    return (out_kept * ratio.unsqueeze(-1)).to(out_kept.dtype)


def flex_pattern_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_mask: Tensor,
    block_mask,
    key_index: Tensor | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Softmax attention of ``q`` [B, H, L, Dh] over the pattern of ``block_mask``, padded
    keys (``key_mask`` [B, L], True = real) never attended, attention dropout ``dropout_p``
    (pass 0 outside training). ``key_index`` [Lk] gathers the keys into the block mask's key
    axis (None: the identity). Returns [B, H, L, Dh]."""
    if key_index is not None:
        k, v = k.index_select(2, key_index), v.index_select(2, key_index)
    slot_mask = key_mask if key_index is None else key_mask.index_select(1, key_index)
    bias = key_bias(slot_mask)
    if dropout_p <= 0.0:
        return _flex(q, k, v, padding_mod(bias), block_mask, with_lse=False)[0]
    threshold = dropout_threshold(dropout_p)
    B, H, L = q.shape[:3]
    row_key, col_key = draw_dropout_keys(B, H, L, key_mask.shape[1], q.device)
    if key_index is not None:
        col_key = col_key.index_select(0, key_index)
    kept, lse_kept = _flex(q, k, v, dropout_mod(bias, row_key, col_key, threshold), block_mask, with_lse=True)
    _, lse_full = _flex(q, k, v, padding_mod(bias), block_mask, with_lse=True)
    return rescale_kept(kept, lse_kept, lse_full, keep_probability(threshold))


def dense_dropout_reference(scores: Tensor, allowed: Tensor, keep: Tensor, keep_prob: float, v: Tensor) -> Tensor:
    """``(softmax(scores | allowed) * keep / keep_prob) @ v`` materialised, rows with no allowed
    key 0: what ``flex_pattern_attention`` computes, for tests and the GPU check."""
    some = allowed.any(-1, keepdim=True)
    p = torch.softmax(scores.masked_fill(~(allowed | ~some), float("-inf")), dim=-1)
    p = torch.where(some, p, torch.zeros((), dtype=p.dtype, device=p.device))
    return torch.matmul(p * keep / keep_prob, v)


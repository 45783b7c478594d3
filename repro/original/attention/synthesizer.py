"""Synthesizer attention (Tay et al., 2020a): learned (synthetic) attention logits, with or without q.k.

Variants (``variant=``):

* ``"dense"``: a per-token MLP maps token i to logits over the ``max_len``
  positions, ``B_i = W2_h relu(W1 x_i)`` with ``W1: D -> D`` (split into heads)
  and a per-head ``W2_h: dh -> max_len``; the first L columns are used.
* ``"random"``: a learned ``R [n_heads, max_len, max_len]`` logits matrix,
  independent of the input (``fixed=True``: a buffer, never trained);
  ``R[:, :L, :L]`` is used.
* ``"factorized_random"``: ``R = R1 R2`` with ``R1 [H, max_len, k]``,
  ``R2 [H, k, max_len]``.

``softmax(logits) V`` with ``V`` projected as usual. ``dot_product=True`` adds
``q.k / sqrt(dh)`` (q and k projected as in vanilla attention) to the synthetic logits, as
the LRA release's ``SynthesizerBlock`` does (``ignore_dot_product=False``, its default,
before its random logits in ``synthetic_attention``); the random variants only. Without it
the "query" slot of ``project_qkv`` carries the raw input ``x`` (used only by ``dense``).
Random logits are initialised as flax's ``xavier_uniform`` initialises an ``[H, n, m]``
parameter, the heads counted in both fans: ``U(+-sqrt(6 / (H (n + m))))``.

Defaults: ``factorized_random``, ``k=32``, no q.k (the Synthesizer paper's factorized random
Synthesizer); the ``lra_synthesizer`` arm sets what the release runs.

Padding: padded keys get ``finfo.min`` logits before the softmax. Since the
logits are tied to absolute positions (row i / column j of R, or column j of
the dense MLP output), the guarantees are:

* Guaranteed: appending padding on the right leaves outputs at real positions
  exactly unchanged: a real query i keeps its logits over the real columns
  ``0..L_real-1`` and the new columns are masked.
* Not guaranteed: invariance to left padding or to any shift of the tokens
  (different rows and columns of R would be used); that is inherent to the
  mechanism.

Test hook: ``set_random_logits(R)`` copies a given ``[H, L, L]`` matrix into
the top-left block of the random logits.

Backends (``backend=``), the same function: ``"materialized"`` builds the ``[B, H, L, L]``
logits, masks, softmaxes and drops out explicitly (several such tensors live for the
backward pass); ``"sdpa"`` hands the logits to ``scaled_dot_product_attention`` with
``scale=1``: as a product ``q k^T`` where they have one (factorized: ``R1 R2``; dense:
``relu(W1 x) W2 + b``, the bias as one more channel), else as the float ``attn_mask``
(random: ``R``, one ``[1, H, L, L]`` tensor broadcast over the batch). Padded keys get
``MASKED_LOGIT`` through one more q/k channel, so no per-sample mask is ever built; the
attention dropout is SDPA's (dropout on the probabilities, unrenormalised, as
``nn.Dropout``); with ``dot_product`` the scaled queries and the keys are prepended to those
features. ``"auto"`` (default): sdpa on CUDA, materialized elsewhere (the measurement that chose
sdpa, against the materialized path also through ``torch.compile``, is in paper/performance.md).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import ATTENTION
from ._common import MASKED_LOGIT, sdpa_aligned
from ._lowrank_common import HeadedMixer, neg_fill, split_heads, xavier_bound, xavier_linear

VARIANTS = ("dense", "random", "factorized_random")
BACKENDS = ("auto", "sdpa", "materialized")


def materialized_attention(logits, q, k, v, mask, head_dim: int | None, dropout_p: float):
    """The plain path: ``logits`` ([H, L, L] or [B, H, L, L]) plus ``q k^T / sqrt(head_dim)`` (when
    ``head_dim`` is given: the release's q.k term), padded keys masked, softmax, dropout, times ``v``."""
    logits = logits.to(v.dtype).expand(v.shape[0], -1, -1, -1)
    if head_dim is not None:
        logits = logits + torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(head_dim)
    logits = logits.masked_fill(~mask[:, None, None, :], neg_fill(logits.dtype))
    return torch.matmul(F.dropout(torch.softmax(logits, dim=-1), dropout_p), v)


@ATTENTION.register("synthesizer")
class SynthesizerAttention(HeadedMixer):
    PLAIN_PATH = {"backend": "materialized"}  # what FLOP counting runs (repro/bench/flops.py)

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        variant: str = "factorized_random",
        k: int = 32,
        fixed: bool = False,
        bias: bool = False,
        backend: str = "auto",
        dot_product: bool = False,
    ):
        super().__init__(d_model, n_heads, max_len, dropout, ("q", "k", "v") if dot_product else ("v",), bias)
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, not {variant!r}")
        if dot_product and variant == "dense":
            raise ValueError("dot_product=True is implemented for the random variants, not for variant='dense'")
        self.dot_product = dot_product
        if backend not in BACKENDS:
            raise ValueError(f"unknown synthesizer backend {backend!r}; choose from {BACKENDS}")
        self.variant = variant
        self.backend = backend
        h, n = n_heads, max_len
        # flax's xavier_uniform on [H, n, m] counts H in both fans (its receptive field): bound sqrt(6 / (H (n + m)))
        if variant == "random":
            bound = xavier_bound(h * n, h * n)
            logits = torch.empty(h, n, n).uniform_(-bound, bound)
            if fixed:
                self.register_buffer("random_logits", logits)
            else:
                self.random_logits = nn.Parameter(logits)
        elif variant == "factorized_random":
            bound = xavier_bound(h * n, h * k)
            self.random_left = nn.Parameter(torch.empty(h, n, k).uniform_(-bound, bound))
            self.random_right = nn.Parameter(torch.empty(h, k, n).uniform_(-bound, bound))
            if fixed:
                self.random_left.requires_grad_(False)
                self.random_right.requires_grad_(False)
        else:  # dense
            self.dense_hidden = xavier_linear(d_model, d_model, bias=True)
            bound = xavier_bound(self.head_dim, n)
            self.dense_out = nn.Parameter(torch.empty(h, self.head_dim, n).uniform_(-bound, bound))
            self.dense_out_bias = nn.Parameter(torch.zeros(h, n))

    def project_qkv(self, x):
        if self.dot_product:
            return super().project_qkv(x)
        v = split_heads(self.v_proj(x), self.n_heads)
        return (x if self.variant == "dense" else None), None, v

    def logits(self, x: torch.Tensor | None, length: int) -> torch.Tensor:
        """Synthetic logits ``[H, L, L]`` (random variants) or ``[B, H, L, L]``."""
        self._check_len(length)
        if self.variant == "random":
            return self.random_logits[:, :length, :length]
        if self.variant == "factorized_random":
            return torch.matmul(self.random_left[:, :length], self.random_right[:, :, :length])
        hidden = split_heads(torch.relu(self.dense_hidden(x)), self.n_heads)  # [B,H,L,dh]
        out = torch.einsum("bhld,hdn->bhln", hidden, self.dense_out[..., :length])
        return out + self.dense_out_bias[:, None, :length]

    def attend(self, q, k, v, mask):
        if self.backend == "sdpa" or (self.backend == "auto" and v.device.type == "cuda"):
            return self.attend_sdpa(q, k, v, mask)
        p = self.attn_dropout.p if self.training else 0.0
        head_dim = self.head_dim if self.dot_product else None
        return materialized_attention(self.logits(q, v.shape[-2]), q, k, v, mask, head_dim, p)

    def synthetic_qk(self, x, mask, dtype):
        """q, k [B, H, L, E] in ``dtype`` with ``q k^T`` = the logits (all but ``random``'s) plus
        ``MASKED_LOGIT`` on padded keys, and the float ``attn_mask`` (``random``) or None."""
        batch, length = mask.shape
        self._check_len(length)
        one = torch.ones(batch, self.n_heads, length, 1, dtype=dtype, device=mask.device)
        pad = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, MASKED_LOGIT)
        pad = pad[:, None, :, None].expand(-1, self.n_heads, -1, -1)
        expand = lambda t: t.to(dtype).expand(batch, -1, -1, -1)  # noqa: E731 - [H, L, E] over the batch
        if self.variant == "random":
            logits = self.random_logits[:, :length, :length].to(dtype)
            aligned = -(-length // 16) * 16  # rows 16-aligned: SDPA's fused kernels take it as it is
            return one, pad, F.pad(logits, (0, aligned - length))[None, :, :, :length]
        if self.variant == "factorized_random":
            q = expand(self.random_left[:, :length])
            k = expand(self.random_right[:, :, :length].transpose(-1, -2))
            return torch.cat([q, one], dim=-1), torch.cat([k, pad], dim=-1), None
        hidden = split_heads(torch.relu(self.dense_hidden(x)), self.n_heads).to(dtype)  # [B, H, L, dh]
        k = expand(self.dense_out[..., :length].transpose(-1, -2))
        bias = expand(self.dense_out_bias[:, :length, None])
        return torch.cat([hidden, one, one], dim=-1), torch.cat([k, bias, pad], dim=-1), None

    def attend_sdpa(self, q, k, v, mask):
        """The attention through ``scaled_dot_product_attention`` (see the module docstring); with
        ``dot_product`` the scaled q and the keys are prepended to the synthetic features."""
        qs, ks, attn_mask = self.synthetic_qk(q, mask, v.dtype)
        if self.dot_product:
            qs = torch.cat([(q / math.sqrt(self.head_dim)).to(v.dtype), qs], dim=-1)
            ks = torch.cat([k.to(v.dtype), ks], dim=-1)
        p = self.attn_dropout.p if self.training else 0.0
        return sdpa_aligned(qs, ks, v, attn_mask=attn_mask, dropout_p=p, scale=1.0)

    @torch.no_grad()
    def set_random_logits(self, logits: torch.Tensor) -> None:
        """Test hook: copy ``logits [H, L, L]`` into ``R[:, :L, :L]`` (variant "random")."""
        if self.variant != "random":
            raise ValueError("set_random_logits needs variant='random'")
        h, lq, lk = logits.shape
        if h != self.n_heads or lq != lk or lq > self.max_len:
            raise ValueError(f"expected [{self.n_heads}, L, L] with L <= max_len, got {tuple(logits.shape)}")
        self.random_logits[:, :lq, :lk] = logits.to(self.random_logits)

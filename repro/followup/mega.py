"""MEGA: Ma et al. (2023), "Mega: moving average equipped gated attention" (the follow-up study, sections
2.3.3 and 5, Table 2), with softmax attention only (the follow-up study, appendix A.2).

Multi-dimensional damped EMA (the follow-up study, eq. 4, Mega section 3.1): each of the D channels is
expanded to ``ema_dim`` = N dimensions by beta, each runs

    h_t = alpha * u_t + (1 - alpha * delta) * h_{t-1},   u_t = beta * x_t

and eta projects them back: y_t = sqrt(1/N) sum_j eta_j h_t^(j), with alpha, delta in
(0, 1) by sigmoids. That is a convolution with the kernel
k[l] = sqrt(1/N) sum_j eta_j alpha_j beta_j (1 - alpha_j delta_j)^l, applied here by FFT.
Bidirectional (Mega's LRA encoders): a second EMA with its own parameters runs backwards
(both read the current token). ``ema_truncation`` (Mega's ``truncation_length``, 1024 on
LRA except Path-X) cuts the kernel to that many taps.

Gated attention (Mega section 3.2-3.3), for the sublayer input X:
    X' = SiLU(EMA(X) + omega * X)
    V = SiLU(X W_v),  Z = SiLU(X' W_z),  Q = kappa_q Z + mu_q,  K = kappa_k Z + mu_k
    O = softmax(Q K^T / sqrt(z) + rel_bias) V                      (single head)
    gamma = SiLU(X' W_gamma),  phi = sigmoid(X' W_phi)              (reset / update gates)
    H = SiLU(X' W_h + (gamma * O) U_h)
    Y = phi * H + (1 - phi) * X
The mixer returns ``phi * (H - X)``, so the shared residual block's ``x + drop(mixer(x))``
is Mega's Y. With ``prenorm: false`` (Mega's ListOps, text and retrieval settings) the
mixer sees the raw residual stream and Y is exactly Mega's, then normed. With prenorm the
shared block hands the mixer the normalised input, so (1 - phi) gates norm(X) where Mega
gates the raw X (a deviation, documented in the arm). ``rel_bias`` is Mega's 'simple'
relative position bias (one learned scalar per offset).

Chunking (Mega-chunk, section 3.5): ``chunk_size`` splits the sequence into chunks that
attend only within themselves; null is full attention (Mega's ListOps, text, retrieval;
image and Pathfinder set chunk 1024 = the whole sequence).

The attention function is softmax everywhere (the follow-up's restriction; Mega's own LRA
settings use laplace on image, Pathfinder and Path-X, not modelled), so it runs fused
(``attention_impl``, the same function):

- ``materialized``: softmax(Q K^T / sqrt(z) + rel_bias) V written out, the [L, L] scores in memory.
- ``sdpa``: ``scaled_dot_product_attention`` with the [c, c] relative bias as a float
  ``attn_mask`` broadcast over the batch (never one matrix per sample) and the key padding
  folded into one extra query/key feature (``fold_key_mask`` in ``repro/original/attention/_common.py``).
- ``flex``: ``flex_attention`` with the relative bias as a score_mod term (one learned scalar per
  offset read per score; its gradient accumulated inside the kernel), the key padding a -inf key
  bias. Why: with a float ``attn_mask`` that needs a gradient SDPA runs the memory-efficient kernel,
  which writes the bias gradient as one [c, c] matrix per sample and head (32 x 4096^2 values a
  layer at LRA text size) and is slow with 256-wide values; measured on an H200 at 4K the whole
  model was slower on ``sdpa`` than ``materialized``. The flex kernel reads the 2c - 1 scalars
  and adds each score's gradient to one of them. The 256-wide values (``d_hidden``) need kernel
  options with a 64-row query tile and 8 warps (``flex_kernel_options``) or the value width cut into
  ``flex_value_split`` calls; attention dropout, where set, is the flex path's exact one
  (``repro/original/attention/_flex.py``: same distribution as ``F.dropout``, other draws).
- ``auto`` (default): ``repro/original/attention/fast_defaults.py``'s choice on CUDA, ``materialized``
  elsewhere.

Padded keys get no weight; a chunk made only of padding (its queries are padding too) attends
over itself unmasked, as Mega's release does (``padding_mask_all`` in ``softmax_attention``).

Initialisation as the Mega release (``moving_average_gated_attention.py``, ``reset_parameters``):
the projections N(0, 0.02) with zero biases, the query/key scales (its ``gamma``) N(0, 0.02),
the offsets (``beta``) 0, the relative bias N(0, 0.02); the EMA's as ``MultiDimEMA`` says.

A Mega block is this sublayer followed by a normalised feed-forward sublayer (SiLU), each in
the shared residual block: ``build_mega_layers`` returns them alternately.

Padding: padded inputs are zeroed before the EMA (linear, so the backward EMA reads zeros
there), padded keys are masked, and a chunk of padding only attends to itself, so real
outputs do not depend on appended padding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from ..models.mixer import BACKBONES, TokenMixer
from ..models.settings import encoder_setting
from ..original.attention._common import fold_key_mask, open_fully_masked
from ..original.attention._flex import FlexSettings, flex_pattern_attention, padding_block_mask
from ..original.attention.fast_defaults import check_choice, choose
from .fftconv import fft_conv, two_sided

ATTENTION_IMPLS = ("auto", "materialized", "sdpa", "flex")


class MultiDimEMA(nn.Module):
    """Mega's multi-dimensional damped EMA, [B, L, D] -> [B, L, D] (before omega and SiLU)."""

    def __init__(self, d_model: int, ema_dim: int = 16, bidirectional: bool = True, truncation: int | None = None):
        super().__init__()
        directions = 2 if bidirectional else 1
        self.bidirectional = bidirectional
        self.truncation = truncation
        self.scale = math.sqrt(1.0 / ema_dim)
        # Mega's initialisation: alpha, delta logits N(0, 0.2); beta N(0, 0.02) + (1, -1, 1, ...); eta N(0, 1)
        self.alpha = nn.Parameter(torch.randn(directions, d_model, ema_dim) * 0.2)
        self.delta = nn.Parameter(torch.randn(directions, d_model, ema_dim) * 0.2)
        signs = torch.ones(ema_dim)
        signs[1::2] = -1.0
        self.beta = nn.Parameter(torch.randn(directions, d_model, ema_dim) * 0.02 + signs)
        self.eta = nn.Parameter(torch.randn(directions, d_model, ema_dim))

    def coefficients(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(alpha, 1 - alpha * delta), each [directions, D, N]: the recurrence's input weight and decay."""
        alpha, delta = torch.sigmoid(self.alpha), torch.sigmoid(self.delta)
        return alpha, 1.0 - alpha * delta

    def kernel(self, length: int) -> torch.Tensor:
        """k [directions, D, K] with K = min(length, truncation), in float32 (float64 if the parameters are)."""
        taps = length if self.truncation is None else min(self.truncation, length)
        with torch.autocast(device_type=self.alpha.device.type, enabled=False):
            alpha, decay = self.coefficients()
            steps = torch.arange(taps, device=alpha.device, dtype=alpha.dtype)
            powers = torch.exp(torch.log(decay).unsqueeze(-1) * steps)  # decay^l, [dirs, D, N, K]
            weights = alpha * self.beta * self.eta * self.scale
            return torch.einsum("cdn,cdnk->cdk", weights, powers)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
        k = self.kernel(x.shape[1])
        kernel, left = two_sided(k[0], k[1], backward_includes_current=True) if self.bidirectional else (k[0], 0)
        return fft_conv(x.transpose(1, 2), kernel, left).transpose(1, 2)


class RelativePositionBias(nn.Module):
    """Mega's 'simple' relative position bias: one learned scalar per offset j - i."""

    def __init__(self, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.bias = nn.Parameter(torch.randn(2 * max_len - 1) * 0.02)

    def forward(self, length: int) -> torch.Tensor:
        """[L, L]: entry (i, j) is the bias of offset j - i."""
        if length > self.max_len:
            raise ValueError(f"MEGA: attention span {length} exceeds max_len {self.max_len}")
        offsets = self.bias[self.max_len - length : self.max_len + length - 1]  # offsets -(L-1) .. L-1
        return offsets.unfold(0, length, 1).flip(0)  # row i = offsets[L-1-i : 2L-1-i]


@torch.compiler.disable
def chunked_padding_block_mask(mask: torch.Tensor, chunk: int):
    """The block mask of the flex path's padding, for the padding mask ``mask`` [B, L] cut into chunks of
    ``chunk`` positions (the last padded up): one row of ``padding_block_mask`` per chunk, a chunk of padding
    alone opened (its queries see its keys, as in ``materialized_attention``). Built outside any compiled
    graph (``_flex.eager_padding_block_mask`` says why)."""
    batch, length = mask.shape
    pad = (-length) % chunk
    keys = F.pad(mask, (0, pad), value=False) if pad else mask
    return padding_block_mask(open_fully_masked(keys.reshape(-1, chunk)))


class MegaMixer(TokenMixer):
    """Mega's moving-average gated attention sublayer; returns phi * (H - X) (see the module doc)."""

    PLAIN_PATH = {"attention_impl": "materialized"}  # what FLOP counting runs (repro/bench/flops.py)

    def __init__(
        self,
        d_model: int,
        d_hidden: int,
        qkv_dim: int,
        max_len: int,
        ema_dim: int = 16,
        bidirectional: bool = True,
        ema_truncation: int | None = None,
        chunk_size: int | None = None,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        hidden_dropout: float = 0.0,
        attention_impl: str = "auto",
        flex_value_split="auto",
        flex_kernel_options="auto",
    ):
        super().__init__()
        if attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"model.attention_impl={attention_impl!r}: choose one of {', '.join(ATTENTION_IMPLS)}")
        self.d_model, self.d_hidden, self.qkv_dim = d_model, d_hidden, qkv_dim
        self.chunk_size = chunk_size
        self.attention_impl = attention_impl
        self.flex_value_split = check_choice("mega", "flex_value_split", flex_value_split, "model.flex_value_split")
        if flex_kernel_options != "auto" and not isinstance(flex_kernel_options, (dict, type(None))):
            raise ValueError(
                f"model.flex_kernel_options={flex_kernel_options!r}: give auto, null or a mapping of "
                "flex_attention kernel options"
            )
        self.flex_kernel_options = flex_kernel_options
        self.ema = MultiDimEMA(d_model, ema_dim, bidirectional, ema_truncation)
        self.omega = nn.Parameter(torch.randn(d_model))
        self.v_proj = nn.Linear(d_model, d_hidden)
        self.mx_proj = nn.Linear(d_model, d_model + qkv_dim + d_hidden + d_model)  # phi, Z, gamma, H's X' term
        self.h_proj = nn.Linear(d_hidden, d_model)
        self.qk_scale = nn.Parameter(torch.randn(2, qkv_dim) * 0.02)  # Mega's gamma: N(0, 0.02)
        self.qk_offset = nn.Parameter(torch.zeros(2, qkv_dim))
        self.rel_bias = RelativePositionBias(min(max_len, chunk_size) if chunk_size else max_len)
        self.drop = nn.Dropout(dropout)
        self.attention_dropout = attention_dropout
        self.hidden_drop = nn.Dropout(hidden_dropout)
        for linear in (self.v_proj, self.mx_proj, self.h_proj):  # Mega: N(0, 0.02) weights, zero biases
            nn.init.normal_(linear.weight, std=0.02)
            nn.init.zeros_(linear.bias)

    def resolved_attention_impl(self, device: torch.device) -> str:
        """``materialized``, ``sdpa`` or ``flex``: ``auto`` is ``fast_defaults``' choice on CUDA, ``materialized``
        elsewhere."""
        if self.attention_impl != "auto":
            return self.attention_impl
        return choose("mega", "attention_impl", "auto") if device.type == "cuda" else "materialized"

    def flex_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        keys: torch.Tensor | None,
        scale: float,
        dropout: float,
        block_mask=None,
    ) -> torch.Tensor:
        """The same attention through ``flex_attention``: the relative bias is a score_mod term reading one
        scalar per offset (its gradient accumulated by the kernel, never a dense [c, c] bias or its
        gradient), the key padding a -inf key bias (a chunk of padding only attends over itself
        unmasked, as ``materialized_attention``), dropout the flex path's exact one (``_flex``).

        With padding, a block mask of the padding (``padding_block_mask``) skips every tile whose queries or
        keys are all padding: a ListOps batch averages about half its 2,000 positions, so about a quarter
        of the tiles hold work. A padded query's output is then 0, where ``materialized_attention`` gives
        it the real keys' average; nothing reads it (each MEGA layer zeroes its padded inputs, the
        position-wise sublayers keep them apart, the pooling reads real tokens), so the real positions,
        the logits and every gradient are the same (tests/test_fast_sequence.py)."""
        length = q.shape[2]
        table = self.rel_bias.bias
        centre = self.rel_bias.max_len - 1
        if length > self.rel_bias.max_len:
            raise ValueError(f"MEGA: attention span {length} exceeds max_len {self.rel_bias.max_len}")

        def relative_bias(score, b, h, q_idx, kv_idx):
            return score + table[kv_idx - q_idx + centre]  # entry (i, j): the bias of offset j - i

        key_mask = (
            torch.ones(q.shape[0], length, dtype=torch.bool, device=q.device)
            if keys is None
            else (open_fully_masked(keys[:, 0]))
        )
        if keys is not None and block_mask is None:
            block_mask = chunked_padding_block_mask(keys[:, 0], length)
        options = choose("mega", "flex_kernel_options", self.flex_kernel_options)
        settings = FlexSettings(kernel_options=tuple(sorted((options or {}).items())))
        split = choose("mega", "flex_value_split", self.flex_value_split)
        return flex_pattern_attention(
            q,
            k,
            v,
            key_mask,
            block_mask,
            dropout_p=dropout,
            settings=settings,
            bias_mod=relative_bias,
            scale=scale,
            value_split=split,
        )

    def chunk_of(self, length: int) -> int:
        return self.chunk_size if self.chunk_size and self.chunk_size < length else length

    def shared_padding(self, mask: torch.Tensor) -> tuple[str, Callable[[torch.Tensor], object]] | None:
        """On the flex path, the chunks' padding block mask, built once a pass for every layer of the same
        chunk size (``repro.models.model.Encoder``)."""
        if self.resolved_attention_impl(mask.device) != "flex":
            return None
        chunk = self.chunk_of(mask.shape[1])
        return f"mega_padding_block_mask_{chunk}", partial(chunked_padding_block_mask, chunk=chunk)

    def attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, shared: object = None
    ) -> torch.Tensor:
        """Single-head softmax attention with the relative bias, within chunks when ``chunk_size`` is set;
        ``shared``: the flex path's block mask of ``mask``, built once for every layer."""
        batch, length, _ = q.shape
        chunk = self.chunk_of(length)
        pad = (-length) % chunk
        if mask is None and pad:
            mask = torch.ones(batch, length, dtype=torch.bool, device=q.device)
        if pad:
            q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
            mask = F.pad(mask, (0, pad), value=False)
        chunks = (length + pad) // chunk
        device = q.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else q.dtype
        q, k, v = (t.to(dtype).reshape(batch * chunks, 1, chunk, t.shape[-1]) for t in (q, k, v))
        keys = None if mask is None else mask.reshape(batch * chunks, 1, chunk)
        dropout = self.attention_dropout if self.training else 0.0
        scale = 1.0 / math.sqrt(self.qkv_dim)
        impl = self.resolved_attention_impl(q.device)
        if impl == "flex":
            out = self.flex_attention(q, k, v, keys, scale, dropout, block_mask=shared)
            return out.reshape(batch, chunks * chunk, -1)[:, :length]
        bias = self.rel_bias(chunk).to(dtype)  # [c, c], shared by every chunk and sample
        if impl == "sdpa":
            if keys is not None:
                q, k = fold_key_mask(q, k, keys, scale)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout, scale=scale)
        else:
            out = materialized_attention(q, k, v, bias, keys, scale, dropout)
        return out.reshape(batch, chunks * chunk, -1)[:, :length]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, shared: object = None) -> torch.Tensor:
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
        v = F.silu(self.v_proj(x))
        mx = self.drop(F.silu(self.ema(x, None) + self.omega.to(x.dtype) * x))
        phi, zr, hx = torch.split(self.mx_proj(mx), [self.d_model, self.qkv_dim + self.d_hidden, self.d_model], dim=-1)
        phi = torch.sigmoid(phi)
        z, gamma = torch.split(F.silu(zr), [self.qkv_dim, self.d_hidden], dim=-1)
        q = z * self.qk_scale[0] + self.qk_offset[0]
        k = z * self.qk_scale[1] + self.qk_offset[1]
        o = self.attention(q, k, v, mask, shared)  # scores scaled by 1/sqrt(qkv_dim)
        h = self.hidden_drop(F.silu(hx + self.h_proj(gamma * o)))
        return phi * (h - x.to(h.dtype))


def materialized_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    keys: torch.Tensor | None,
    scale: float,
    dropout: float,
) -> torch.Tensor:
    """softmax(q k^T * scale + bias) v with the scores in memory; padded keys (``keys`` [N, 1, c] False) get
    no weight unless a row has no real key at all (Mega's release then leaves the row unmasked)."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale + bias
    if keys is not None:
        keys = keys | ~keys.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~keys.unsqueeze(-2), torch.finfo(scores.dtype).min)
    return torch.matmul(F.dropout(torch.softmax(scores, dim=-1), dropout), v)


class MegaFeedForward(TokenMixer):
    """Mega's normalised FFN body: Linear(D, d_ff) -> SiLU -> dropout -> Linear(d_ff, D)."""

    def __init__(self, d_model: int, d_ff: int, hidden_dropout: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.drop = nn.Dropout(hidden_dropout)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.fc2(self.drop(F.silu(self.fc1(x))))


@BACKBONES.register("mega")
def build_mega_layers(cfg: dict, max_len: int) -> list[TokenMixer]:
    """``depth`` Mega blocks: gated-attention sublayer then FFN sublayer, each in the shared residual block."""
    # techniques: see the techniques config group
    if cfg.get("attention", "softmax") != "softmax":
        raise ValueError(
            f"model.attention={cfg.get('attention')!r}: the follow-up study restricts MEGA to softmax (appendix A.2)"
        )
    layers: list[TokenMixer] = []
    for _ in range(cfg["depth"]):
        layers.append(
            MegaMixer(
                d_model=cfg["d_model"],
                d_hidden=cfg["d_hidden"],
                qkv_dim=cfg["qkv_dim"],
                max_len=max_len,
                ema_dim=cfg.get("ema_dim", 16),
                bidirectional=cfg.get("bidirectional", True),
                ema_truncation=cfg.get("ema_truncation"),
                chunk_size=cfg.get("chunk_size"),
                dropout=encoder_setting(cfg, "dropout"),
                attention_dropout=cfg.get("attention_dropout", 0.0),
                hidden_dropout=cfg.get("hidden_dropout", 0.0),
                attention_impl=cfg.get("attention_impl", "auto"),
                flex_value_split=cfg.get("flex_value_split", "auto"),
                flex_kernel_options=cfg.get("flex_kernel_options", "auto"),
            )
        )
        layers.append(MegaFeedForward(cfg["d_model"], cfg["d_ff"], cfg.get("hidden_dropout", 0.0)))
    return layers

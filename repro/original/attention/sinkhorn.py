"""Sparse Sinkhorn attention (Tay et al., 2020b), non-causal.

The sequence is cut into ``n_b`` blocks of ``block_size``. A sorting network
(one linear layer ``dh -> n_blocks(max_len)``, shared by the heads, applied to
the sum of each block's keys) gives block-to-block logits ``R [n_b, n_b]``.
Sinkhorn normalisation in log space, ``n_iters`` times ``R <- R - lse_rows(R);
R <- R - lse_cols(R)`` on ``R / temperature``, turns it into a (nearly)
doubly stochastic matrix ``P``, a relaxed permutation. The sorted key/value
blocks are ``K~_i = sum_j P_ij K_j`` (same for V). Each query block i attends
to its own block and to the sorted block ``K~_i``: one softmax over the
``2 * block_size`` keys (``combine="joint"``, the paper's local + sorted
attention) or, as in the LRA release, two separate softmaxes whose outputs are
added (``combine="sum"``). ``sorting_matrix(k, mask)`` returns ``P`` for tests.

Defaults and sources:

* ``block_size = 50``: LRA release (``SinkhornAttention(block_size=50)``, also
  the default of ``SinkhornTransformerEncoder``; configs do not override it).
* ``temperature = 1.0``: LRA release ``sinkhorn_operator(temp=1.0)``.
* ``n_iters = 20``: our choice. LRA's ``sinkhorn_operator`` defaults to one
  iteration, and LRA's *default* ``sort_activation`` is a plain row softmax,
  not Sinkhorn at all (available here as ``sort_activation="softmax"``); the
  default here follows the paper (Sinkhorn balancing). Columns sum to 1 exactly
  after every iteration (the column step comes last); rows converge linearly
  and slowly when the logits are sharp: at initialisation, with d_model=16 and
  block_size=4 rows are within ~1e-2 after 20 iterations and ~2e-4 after 50;
  at LRA scale (block_size=50, sort-net input a sum of 50 keys, logit std ~5-7)
  within ~5e-2 to ~1.3e-1 after 20 and ~1e-2 after 100. Raise ``n_iters`` or
  ``temperature`` for a closer doubly stochastic matrix (memory for backward
  grows as ``n_iters * n_blocks^2`` per head).
* Gumbel noise is not used.

``release=True``: what the LRA release's ``sinkhorn_attention.py`` computes (non-causal, its default
``sort_activation='softmax'``), which is not the mechanism above. Its reshape of ``[B, L, H, dh]`` to
``[B, block_size, NB, H, dh]`` (``NB = L / block_size``; ``L`` must be a multiple) makes group ``n``
the strided positions ``n, n + NB, ...``, and each query attends over its group ("local"). Its
"sorted" keys ``einsum('bskhd,bnhl->bsnhd', block_key, permutation)`` sum over the key blocks and
over the permutation's row separately, and a softmax row sums to 1, so sorted key ``s`` is the sum
of the ``NB`` consecutive keys ``s NB .. s NB + NB - 1`` (values alike), the same for every group,
and the sorting network gets no gradient (its parameters are left out here: they change nothing).
Local and sorted attention are two softmaxes, each with its own dropout, whose outputs are added.
The padding mask is cut into contiguous blocks of ``block_size`` and group ``n`` takes block ``n``'s
(as the release's local attention: ``local.py``); the sorted mask allows query member ``i`` and
sorted key ``j`` when some block has both its ``i``-th and ``j``-th positions real. Masked keys get
-1e10; a row with none allowed is uniform (float32), keeping ``q.k``'s gradient. No output is zeroed;
logits in float32. The mask is the release's ``(inputs > 0)`` (``RELEASE_ZERO_MASK = "padding"``).

Padding: padded keys and values are zeroed before the block sums and the
mixing; a block with no real token is "padding". The Sinkhorn logits between a
real and a padding block are ``finfo.min`` and a padding block maps to itself
(logit 0 on its diagonal), so ``P`` is block diagonal: the real-by-real part
is exactly the Sinkhorn matrix of the unpadded sequence and the padding part
is the identity (every row and column still sums to 1). A sorted key position
is masked when no real block contributes to it. Hence appending padding
leaves real outputs unchanged (the last, partial block is handled the same
way with and without padding, since the sequence is always padded internally
to a multiple of ``block_size``).

Backends (``backend=``), the same function: ``"materialized"`` writes the block scores,
masks, softmax and dropout out; ``"sdpa"`` runs each query block against its own and its
sorted key block through ``scaled_dot_product_attention`` (the blocks folded into the heads
axis, SDPA's dropout on the probabilities), fusing them. ``"auto"`` (default): sdpa on CUDA
from ``sdpa_min_len`` tokens on, materialized below that and elsewhere.

How the SDPA path takes the key mask (``sdpa_mask``): ``bias``, a float ``attn_mask`` with
``MASKED_LOGIT`` on masked keys, one row per block and head broadcast over its queries; or
``fold``, the mask folded into one extra query/key feature (``_common.fold_key_mask``; the
values zero-padded to the same width), so no ``attn_mask`` is passed; with no masked key at all
(lengths a multiple of the block, no padding) nothing is folded. Why: a float ``attn_mask`` rules
out the flash kernel, and the memory-efficient kernel it leaves pads the 100-key bias rows to an
aligned width and runs its 64-query tiles over 50-query blocks; measured on an H200 that path was
faster than the materialised one at 1K and slower at 4K.

The balancing (``balance``): ``eager`` runs the ``n_iters`` row and column normalisations as
written, ``compiled`` the same function through ``torch.compile`` on CUDA: each normalisation is a
small reduction over [B, H, n_b, n_b] (1 MB at 4K), so eagerly the 20 iterations are ~200 kernel
launches forward and twice that backward, each shorter than its launch; compiled, a few fused
kernels per iteration.

The block attention as a whole (``attend``): ``eager``, or ``compiled``: ``attend_blocks`` (blocks,
sorting matrix, balancing, the sorted keys, the SDPA or materialised attention) through
``torch.compile`` on CUDA, the same function (under attention dropout its random stream differs).
Eagerly (with the balancing compiled) a step of the LRA text model at 4K launches about 1,240
kernels (paper/performance.md, Sinkhorn's note); compiled, about 950: the many small copies and
reductions around the attention kernels fuse. A compiled ``attend`` takes the balancing into its
own graph, so ``balance`` matters only with ``attend=eager``. At a length padded to whole blocks the
key mask is folded without looking at it; otherwise its host check (``bool(key_ok.all())``, which
decides whether anything needs folding) splits the compiled graph in two.

``sdpa_min_len``, ``sdpa_mask``, ``balance`` and ``attend`` default to ``"auto"``:
``fast_defaults.FAST_DEFAULTS``.
"""

from __future__ import annotations

import math

import torch

from . import ATTENTION
from ._common import (
    MASKED_LOGIT,
    fold_key_mask,
    full_mask,
    merge_heads,
    refuse_release_ignored,
    release_masked_softmax,
    sdpa_aligned,
)
from ._lowrank_common import HeadedMixer, neg_fill, on_device, pad_to_multiple, xavier_linear
from .fast_defaults import check_at_least, check_choice, choose

BACKENDS = ("auto", "sdpa", "materialized")


def sinkhorn_log(log_alpha: torch.Tensor, n_iters: int) -> torch.Tensor:
    """Alternate row and column normalisation in log space; returns ``exp``."""
    for _ in range(n_iters):
        log_alpha = log_alpha - torch.logsumexp(log_alpha, dim=-1, keepdim=True)
        log_alpha = log_alpha - torch.logsumexp(log_alpha, dim=-2, keepdim=True)
    return torch.exp(log_alpha)


@ATTENTION.register("sinkhorn")
class SinkhornAttention(HeadedMixer):
    # What FLOP counting runs (repro/bench/flops.py, which says why balancing and attend are eager there)
    PLAIN_PATH = {"backend": "materialized", "balance": "eager", "attend_mode": "eager"}

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        block_size: int = 50,
        n_iters: int = 20,
        temperature: float = 1.0,
        sort_activation: str = "sinkhorn",
        combine: str = "joint",
        bias: bool = False,
        backend: str = "auto",
        sdpa_min_len="auto",
        sdpa_mask: str = "auto",
        balance: str = "auto",
        attend: str = "auto",
        release: bool = False,
    ):
        super().__init__(d_model, n_heads, max_len, dropout, ("q", "k", "v"), bias)
        self.release = bool(release)
        if self.release:
            given = dict(n_iters=n_iters, temperature=temperature, sort_activation=sort_activation, combine=combine)
            given.update(backend=backend, sdpa_min_len=sdpa_min_len, sdpa_mask=sdpa_mask)
            given.update(balance=balance, attend=attend)
            refuse_release_ignored("sinkhorn", given, RELEASE_IGNORES)
            self.RELEASE_ZERO_MASK = "padding"  # the release's attention takes (inputs > 0) as its padding
        if backend not in BACKENDS:
            raise ValueError(f"unknown sinkhorn backend {backend!r}; choose from {BACKENDS}")
        self.backend = backend
        self.sdpa_min_len = check_at_least("sinkhorn", "sdpa_min_len", sdpa_min_len, 0, "a length")
        self.sdpa_mask = check_choice("sinkhorn", "sdpa_mask", sdpa_mask, "attention_params.sdpa_mask")
        self.balance = check_choice("sinkhorn", "balance", balance, "attention_params.balance")
        self.attend_mode = check_choice("sinkhorn", "attend", attend, "attention_params.attend")
        if sort_activation not in ("sinkhorn", "softmax"):
            raise ValueError(f"sort_activation must be 'sinkhorn' or 'softmax', not {sort_activation!r}")
        if combine not in ("joint", "sum"):
            raise ValueError(f"combine must be 'joint' or 'sum', not {combine!r}")
        self.block_size = block_size
        self.n_iters = n_iters
        self.temperature = temperature
        self.sort_activation = sort_activation
        self.combine = combine
        self.max_blocks = math.ceil(max_len / block_size)
        self.sort_net = None if self.release else xavier_linear(self.head_dim, self.max_blocks, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if not self.release:
            return super().forward(x, mask)
        q, k, v = self.project_qkv(x)
        return self.out_proj(merge_heads(self.release_attend(q, k, v, full_mask(x, mask))))

    def release_attend(self, q, k, v, mask):
        """The release's strided local groups plus its summed-away "sorted" keys (module docstring)."""
        b, h, length, dh = q.shape
        size = self.block_size
        if length % size:
            raise ValueError(
                f"sinkhorn (release): length {length} is not a multiple of block_size={size}, which the "
                "release's reshape needs; use attention_params.release=false for this task"
            )
        nb = length // size
        qg, kg, vg = (t.view(b, h, size, nb, dh).transpose(2, 3) for t in (q, k, v))  # [B, H, NB, S, dh]
        sk, sv = (t.view(b, h, size, nb, dh).sum(dim=3)[:, :, None] for t in (k, v))  # [B, H, 1, S, dh]
        chunk = mask.view(b, nb, size)  # contiguous block n's mask, given to group n
        sorted_ok = torch.einsum("bni,bnj->bij", chunk.float(), chunk.float()) > 0  # [B, S, S]
        p, training = self.attn_dropout.p, self.training
        local = release_masked_softmax(qg, kg, chunk[:, None, :, :, None] & chunk[:, None, :, None, :], p, training)
        srt = release_masked_softmax(qg, sk, sorted_ok[:, None, None], p, training)
        out = torch.matmul(local.to(vg.dtype), vg) + torch.matmul(srt.to(sv.dtype), sv)
        return out.transpose(2, 3).reshape(b, h, length, dh)

    def _blocks(self, x: torch.Tensor, mask: torch.Tensor):
        """Pad to a multiple of block_size, zero padded rows, reshape to blocks."""
        x, mask = pad_to_multiple(x, mask, self.block_size)
        x = x.masked_fill(~mask[:, None, :, None], 0.0)
        b, h, lp, d = x.shape
        n_blocks = lp // self.block_size
        if n_blocks > self.max_blocks:
            raise ValueError(f"SinkhornAttention: {n_blocks} blocks exceed max_len={self.max_len}")
        return x.view(b, h, n_blocks, self.block_size, d), mask.view(b, n_blocks, self.block_size)

    def sorting_matrix(self, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The normalised block-to-block matrix ``P [B, H, n_b, n_b]`` (row i: how
        much of key block j query block i receives)."""
        kb, mb = self._blocks(k, mask)
        return self._sorting_matrix(kb, mb)

    def _sorting_matrix(self, kb: torch.Tensor, mb: torch.Tensor) -> torch.Tensor:
        n_blocks = kb.shape[2]
        logits = self.sort_net(kb.sum(dim=3))[..., :n_blocks] / self.temperature
        real = mb.any(dim=-1)  # [B, n_b]
        both_real = (real[:, :, None] & real[:, None, :])[:, None]
        eye = torch.eye(n_blocks, dtype=torch.bool, device=kb.device)
        pad_diag = ((~real)[:, :, None] & eye)[:, None]
        logits = torch.where(both_real, logits, torch.full_like(logits, neg_fill(logits.dtype)))
        logits = logits.masked_fill(pad_diag, 0.0)
        if self.sort_activation == "softmax":
            return torch.softmax(logits, dim=-1)
        balance = on_device(sinkhorn_log, logits.device, choose("sinkhorn", "balance", self.balance))
        return balance(logits, self.n_iters)

    def resolved_backend(self, device: torch.device, length: int) -> str:
        """``sdpa`` or ``materialized``: ``auto`` is sdpa on CUDA from ``sdpa_min_len`` tokens on."""
        if self.backend != "auto":
            return self.backend
        min_len = choose("sinkhorn", "sdpa_min_len", self.sdpa_min_len)
        return "sdpa" if device.type == "cuda" and length >= min_len else "materialized"

    def attend(self, q, k, v, mask):
        """``attend_blocks``, eager or compiled (``attend``)."""
        mode = choose("sinkhorn", "attend", self.attend_mode)
        return on_device(SinkhornAttention.attend_blocks, q.device, mode)(self, q, k, v, mask)

    def attend_blocks(self, q, k, v, mask):
        b, h, length, dh = q.shape
        kb, mb = self._blocks(k, mask)
        vb, _ = self._blocks(v, mask)
        qb, _ = self._blocks(q, mask)
        perm = self._sorting_matrix(kb, mb)  # [B, H, n_b, n_b]

        sk = torch.einsum("bhij,bhjsd->bhisd", perm, kb)
        sv = torch.einsum("bhij,bhjsd->bhisd", perm, vb)
        smask = torch.einsum("bhij,bjs->bhis", perm, mb.to(perm.dtype)) > 0  # [B, H, n_b, bs]

        if self.resolved_backend(q.device, length) == "sdpa":
            padded = qb.shape[2] * qb.shape[3] != length  # padded keys: the key mask holds a False
            out = self._blocks_sdpa(qb, (kb, vb, mb[:, None]), (sk, sv, smask), padded)
            return out.reshape(b, h, -1, dh)[:, :, :length]
        scale = 1.0 / math.sqrt(dh)
        neg = neg_fill(q.dtype)
        own = torch.matmul(qb, kb.transpose(-1, -2)) * scale  # [B, H, n_b, bs, bs]
        own = own.masked_fill(~mb[:, None, :, None, :], neg)
        srt = torch.matmul(qb, sk.transpose(-1, -2)) * scale
        srt = srt.masked_fill(~smask.unsqueeze(-2), neg)

        if self.combine == "joint":
            probs = self.attn_dropout(torch.softmax(torch.cat([own, srt], dim=-1), dim=-1))
            p_own, p_srt = probs.split(self.block_size, dim=-1)
        else:
            p_own = self.attn_dropout(torch.softmax(own, dim=-1))
            p_srt = self.attn_dropout(torch.softmax(srt, dim=-1))
        out = torch.matmul(p_own, vb) + torch.matmul(p_srt, sv)
        return out.reshape(b, h, -1, dh)[:, :, :length]

    def _blocks_sdpa(self, qb, own, srt, padded: bool = False):
        """Each query block against its own and its sorted key block through
        ``scaled_dot_product_attention`` (blocks folded into the heads axis); masked keys get
        ``MASKED_LOGIT`` or are folded into the features (``sdpa_mask``; a fully masked block,
        padding only, stays finite). Same function as the explicit scores, softmax and dropout of
        ``attend``. ``padded``: the length was padded to whole blocks (``_sdpa``'s ``known_masked``)."""
        (kb, vb, own_ok), (sk, sv, srt_ok) = own, srt
        if self.combine == "joint":
            own_ok = own_ok.expand(-1, srt_ok.shape[1], -1, -1)
            keys, values = torch.cat([kb, sk], dim=-2), torch.cat([vb, sv], dim=-2)
            return self._sdpa(qb, keys, values, torch.cat([own_ok, srt_ok], dim=-1), padded)
        return self._sdpa(qb, kb, vb, own_ok, padded) + self._sdpa(qb, sk, sv, srt_ok, padded)

    def _sdpa(self, qb, k, v, key_ok, known_masked: bool = False):
        """``qb`` [B, H, n_b, s, d] against ``k``, ``v`` [B, H|1, n_b, keys, d] with ``key_ok``
        [B, H|1, n_b, keys] (True = may attend). ``known_masked``: fold the key mask without looking at it
        (the same function whatever ``key_ok`` holds; no host sync); otherwise only if a key is masked."""
        p = self.attn_dropout.p if self.training else 0.0
        B, H, nb, s, d = qb.shape
        k, v = k.expand(B, H, -1, -1, -1), v.expand(B, H, -1, -1, -1)
        key_ok = key_ok.expand(B, H, -1, -1)
        scale = 1.0 / math.sqrt(d)
        if choose("sinkhorn", "sdpa_mask", self.sdpa_mask) == "fold":
            q = qb
            if known_masked or not bool(key_ok.all()):  # the check: one host sync
                q, k = fold_key_mask(qb, k, key_ok, scale)
            out = sdpa_aligned(q.flatten(1, 2), k.flatten(1, 2), v.flatten(1, 2), dropout_p=p, scale=scale)
            return out.unflatten(1, (H, nb))
        bias = torch.zeros(key_ok.shape, dtype=qb.dtype, device=qb.device).masked_fill(~key_ok, MASKED_LOGIT)
        out = sdpa_aligned(
            qb.flatten(1, 2),
            k.flatten(1, 2),
            v.flatten(1, 2),
            attn_mask=bias.flatten(1, 2)[:, :, None, :],
            dropout_p=p,
            scale=scale,
        )
        return out.unflatten(1, (H, nb))


RELEASE_IGNORES = dict(
    n_iters=20,
    temperature=1.0,
    sort_activation="sinkhorn",
    combine="joint",
    backend="auto",
    sdpa_min_len="auto",
    sdpa_mask="auto",
    balance="auto",
    attend="auto",
)

"""Reformer LSH attention (Kitaev et al., 2020), non-causal, vectorised.

Per hash round r (a Python loop runs only over rounds where needed; positions
and chunks are handled as tensor dimensions):

1. Shared QK: keys are the queries, normalised to unit length
   (``normalize_keys=True``, the paper's shared-QK rule), logits
   ``q_i . k_j`` (with ``normalize_keys=False``: ``q_i . q_j / sqrt(dh)``).
2. Angular LSH: random rotation ``R [dh, n_buckets/2]`` per head and round,
   ``bucket = argmax([qR; -qR])``.
3. Sort by (bucket, position), cut the sorted sequence into chunks of
   ``chunk_len``; every query attends to the keys of its own chunk and of the
   previous chunk.
4. Self-mask: the logit of a token to itself is ``-5e4``, so a token attends to
   itself only when it has nothing else to attend to.
5. Rounds are combined with the logsumexp weighting,
   ``out_i = sum_r exp(z_i^r - logsumexp_r z_i^r) o_i^r`` where ``z_i^r`` is the
   log-normaliser of round r. With ``dedup_rounds=True`` each logit is first
   lowered by ``log N_ij``, N_ij = number of rounds in which j is in i's window
   (the paper's duplicate correction, section 2 "multi-round LSH"); the
   combination is then exactly softmax attention over the union of the
   rounds' windows.

Departures from the LRA release (``lra_benchmarks/models/reformer/
reformer_attention.py``), which has no self-mask, no padding mask, no key
normalisation, scales logits by ``* sqrt(d)`` and draws rotations from a fixed
``PRNGKey(0)``:

* The first chunk does not wrap around to the last one ("one chunk back" with
  no circular look-back). Together with padding sorting last and a chunk
  length fixed at construction this makes the mechanism padding-invariant.
* Rotations are a buffer, redrawn at every training forward when
  ``redraw=True`` (trax behaviour); evaluation uses the buffer as it is.

Defaults and sources (LRA release, ``ReformerAttention`` arguments; the model
and configs do not override them): ``n_hashes=1``, ``n_buckets=10``. LRA
reshapes the sorted ``n_hashes * L`` sequence into ``n_hashes * n_buckets``
chunks, i.e. chunks of ``L / n_buckets``; since LRA inputs are padded to
``max_len``, the default here is ``chunk_len = ceil(max_len / n_buckets)``,
fixed at construction (not derived from the actual L, which would break
padding invariance).

Padding: padded positions get a bucket id ``n_buckets`` (after every real
bucket), so they sort behind all real tokens, and they are masked as keys.
With fixed rotations (eval mode or ``redraw=False``) appending padding leaves
real outputs exactly unchanged. Outputs at padded queries are set to 0.

Cost note: ``dedup_rounds`` with ``n_hashes > 1`` adds a loop over rounds of
tensor size equal to the chunked logits; with ``n_hashes=1`` it is skipped.

Backends (``backend``), the same function on the same sorted chunks:

* ``materialized``: the chunked logits ``[B, H, r, nc, c, 2c]`` written out, softmax, dropout.
* ``sdpa``: ``scaled_dot_product_attention`` per chunk (queries of a chunk against the keys of
  it and its predecessor), the fused kernels on CUDA. The self-mask is one float mask
  ``[c, 2c]`` broadcast over every chunk, padding folded into the queries and keys (see
  ``_chunk_attention_sdpa``); with ``n_hashes=1`` (the LRA setting) no per-sample mask and no
  logits are ever materialised. With ``n_hashes > 1`` the duplicate correction is a mask per
  chunk and each round's log-normaliser is computed from the logits once more (SDPA does not
  return it), so that case saves only the probabilities.
* ``auto`` (default): ``sdpa`` on CUDA, ``materialized`` elsewhere.

How the SDPA path lays its chunks out (each the same function; ``"auto"`` reads
``fast_defaults.FAST_DEFAULTS``): ``windows=concat`` builds each chunk's keys and values as its own
chunk followed by the previous one (a roll and a concatenation: two copies of [B, H, L, d] per
tensor, forward and backward); ``windows=unfold`` prepends one masked chunk to the sorted sequence
and takes the windows [previous, own] as overlapping views (``Tensor.unfold``; its backward sums
the overlaps), the padding folded once per sorted position rather than once per window slot.
``gather=per_tensor`` gathers q, the normalised keys and v by the sort order one at a time (each
``torch.gather`` reading an index per element); ``gather=fused`` gathers the rows of [q | v] once
(``index_select`` on [B H L, 2 d]) and normalises the keys after. ``sdpa_backends``: None lets
torch pick the SDPA kernel (on an H200 it took cuDNN's for the [c, 2c] float mask); a list of
``torch.nn.attention.SDPBackend`` names restricts it (``[EFFICIENT_ATTENTION]``, ...).

Attention dropout (the arm's ``attention_dropout``): both backends drop entries of the
normalised probabilities and scale the kept ones by 1/(1-p), without renormalising (the
materialised path through ``nn.Dropout`` after the softmax, SDPA through ``dropout_p``); same
distribution, different random draws. The release's ``ReformerAttention`` applies none, and
differs in more (no output projection, width ``emb_dim`` rather than ``qkv_dim``, padding
hashed and attended): ``release=True`` computes that attention instead.

``release=True``: the LRA release's ``ReformerAttention`` (``lra_benchmarks/models/reformer/
reformer_attention.py``), step by step. The layer's input is zero-padded by ``chunk_len -
(L mod chunk_len)`` positions (``chunk_len`` there is this argument, default 10: a padding multiple,
not a chunk size); queries and values are bias-free projections (no key projection, no output
projection: the block adds the heads' outputs, reshaped as below, to the residual, so the layer is
built at the width ``d_model`` whatever ``qkv_dim`` says: ``RELEASE_WIDTH_IS_INPUT``). One Gaussian
rotation ``[dh, n_hashes, n_buckets / 2]`` hashes every head of
every layer at every step (the release draws it from ``PRNGKey(0)`` in each call; here it is drawn
once from a generator seeded 0, so its values differ from JAX's); bucket ``argmax([qR; -qR])`` plus
``n_buckets`` times the round. The ``n_hashes x Lp`` positions are sorted by (bucket, position) and
cut into ``n_hashes x n_buckets`` chunks; each chunk's queries attend to the unnormalised shared keys
of their own chunk and the one before, the first chunk to the last (wrap-around), with logits
``q . k * sqrt(dh)`` (multiplied, as the release does), no self-mask, no padding mask (padding and
the added zero positions are hashed and attended) and no attention dropout; rounds combine by their
log-normalisers. The heads' outputs ``[B, H, Lp, dh]`` are then reshaped to ``[B, Lp, H dh]`` as they
lie in memory, without moving the heads axis first (the release's ``jnp.reshape``): output row ``l``
holds head ``floor(l H / Lp)``'s outputs at ``H`` consecutive positions, so positions and heads are
scrambled wherever ``H > 1``; the first ``L`` rows are kept. The mask is not read, and outputs at
padded positions are not zeroed.
"""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from . import ATTENTION
from ._common import fold_key_mask, refuse_release_ignored, sdpa_aligned
from ._lowrank_common import SELF_MASK_VALUE, HeadedMixer, neg_fill, pad_to_multiple
from .fast_defaults import check_choice, choose

BACKENDS = ("auto", "materialized", "sdpa")
SDPA_BACKEND_NAMES = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")


class SortedChunks(NamedTuple):
    """One layer's tokens hashed, sorted and chunked: ``q, k, v`` [B, H, r, nc, c, dh] (``k`` the
    normalised shared keys), ``mask`` and ``pos`` (original position) [B, H, r, nc, c], ``inv``
    (position -> sorted slot) [B, H, r, nc * c]."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor
    pos: torch.Tensor
    inv: torch.Tensor


def _gather_positions(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x [B, H, L, d]`` gathered at ``index [B, H, r, N]`` -> ``[B, H, r, N, d]``."""
    b, h, r, n = index.shape
    flat = index.reshape(b, h, r * n, 1).expand(-1, -1, -1, x.shape[-1])
    return torch.gather(x, 2, flat).view(b, h, r, n, x.shape[-1])


def _with_previous(t: torch.Tensor) -> torch.Tensor:
    """Window = own chunk + previous chunk: ``t`` [B, H, r, nc, c, ...] -> [B, H, r, nc, 2c, ...]."""
    return torch.cat([t, torch.roll(t, 1, dims=3)], dim=4)


def _window_mask(chunk_mask: torch.Tensor) -> torch.Tensor:
    """Real keys of each window [B, H, r, nc, 2c]; chunk 0 has no previous chunk (no wrap-around)."""
    previous = torch.roll(chunk_mask, 1, dims=3).clone()
    previous[:, :, :, 0] = False
    return torch.cat([chunk_mask, previous], dim=4)


def _unfold_windows(t: torch.Tensor, chunk: int) -> torch.Tensor:
    """``t`` [..., (nc + 1) c, d] (a masked chunk first) -> windows [..., nc, 2c, d]: chunk i's window is
    [chunk i - 1, chunk i] of the original, an overlapping view (no copy)."""
    return t.unfold(-2, 2 * chunk, chunk).transpose(-1, -2)


def _swap_halves(t: torch.Tensor, chunk: int) -> torch.Tensor:
    """[..., own c | previous c] -> [..., previous c | own c] along the last axis."""
    return torch.cat([t[..., chunk:], t[..., :chunk]], dim=-1)


def sdpa_backend_list(names) -> list | None:
    """``torch.nn.attention.SDPBackend`` members for ``names`` (None: torch picks)."""
    if names is None:
        return None
    from torch.nn.attention import SDPBackend

    return [getattr(SDPBackend, name) for name in names]


@ATTENTION.register("reformer")
class ReformerAttention(HeadedMixer):
    # the LRA release drops the (inputs > 0) mask here:
    # reformer/reformer_attention.py: padding_mask accepted, never read
    RELEASE_ZERO_MASK = "ignored"
    # release=True: built at the residual width d_model, ignoring qkv_dim, as the release (encoder.py)
    RELEASE_WIDTH_IS_INPUT = True

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        n_hashes: int = 1,
        n_buckets: int = 10,
        chunk_len: int | None = None,
        normalize_keys: bool = True,
        dedup_rounds: bool = True,
        redraw: bool = True,
        bias: bool = False,
        backend: str = "auto",
        windows: str = "auto",
        gather: str = "auto",
        sdpa_backends="auto",
        release: bool = False,
    ):
        super().__init__(d_model, n_heads, max_len, dropout, ("q", "v"), bias)
        self.release = bool(release)
        if self.release:
            _check_release_settings(dropout, n_buckets)
            given = dict(windows=windows, gather=gather, sdpa_backends=sdpa_backends, normalize_keys=normalize_keys)
            given.update(dedup_rounds=dedup_rounds, redraw=redraw, bias=bias)
            refuse_release_ignored("reformer", given, RELEASE_IGNORES)
        if n_buckets < 1 or (n_buckets > 1 and n_buckets % 2):
            raise ValueError(f"n_buckets must be 1 or even, not {n_buckets}")
        if backend not in BACKENDS:
            raise ValueError(f"unknown reformer backend {backend!r}; choose from {BACKENDS}")
        self.backend = backend
        self.windows = check_choice("reformer", "windows", windows, "attention_params.windows")
        self.gather = check_choice("reformer", "gather", gather, "attention_params.gather")
        if sdpa_backends not in ("auto", None):
            sdpa_backends = tuple(sdpa_backends)
            unknown = [name for name in sdpa_backends if name not in SDPA_BACKEND_NAMES]
            if unknown or not sdpa_backends:
                raise ValueError(
                    f"reformer: attention_params.sdpa_backends={list(sdpa_backends)!r}: give null or "
                    f"a list of {', '.join(SDPA_BACKEND_NAMES)}"
                )
        self.sdpa_backends = sdpa_backends
        self.n_hashes = n_hashes
        self.n_buckets = n_buckets
        self.chunk_len = chunk_len or (10 if self.release else max(1, math.ceil(max_len / n_buckets)))
        self.normalize_keys = normalize_keys
        self.dedup_rounds = dedup_rounds
        self.redraw = redraw and not self.release
        if self.release:
            self.out_proj = None
            shape = (self.head_dim, n_hashes, n_buckets // 2)
            self.register_buffer("rotations", torch.randn(shape, generator=torch.Generator().manual_seed(0)))
        else:
            self.register_buffer("rotations", self.draw_rotations())

    def draw_rotations(
        self, generator: torch.Generator | None = None, dtype=torch.float32, device=None
    ) -> torch.Tensor:
        """Gaussian rotations ``[H, n_hashes, dh, max(n_buckets // 2, 1)]``."""
        shape = (self.n_heads, self.n_hashes, self.head_dim, max(self.n_buckets // 2, 1))
        return torch.randn(shape, generator=generator, dtype=dtype, device=device)

    @torch.no_grad()
    def redraw_rotations(self, generator: torch.Generator | None = None) -> None:
        self.rotations.copy_(self.draw_rotations(generator, self.rotations.dtype).to(self.rotations.device))

    # -- hashing and sorting (public for tests) -------------------------------------------

    def hash_buckets(self, q: torch.Tensor, mask: torch.Tensor, rotations: torch.Tensor | None = None) -> torch.Tensor:
        """Bucket ids ``[B, H, n_hashes, L]``; padded positions get ``n_buckets``."""
        b, h, length, _ = q.shape
        if self.n_buckets == 1:
            buckets = torch.zeros(b, h, self.n_hashes, length, dtype=torch.long, device=q.device)
        else:
            rot = self.rotations if rotations is None else rotations
            rotated = torch.einsum("bhld,hrdn->bhrln", q.detach(), rot.to(q.dtype))
            buckets = torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)
        return buckets.masked_fill(~mask[:, None, None, :], self.n_buckets)

    def sort_order(self, buckets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``perm`` (sorted slot -> position) and ``inv`` (position -> sorted slot),
        both ``[B, H, r, L]``, sorting by (bucket, position)."""
        length = buckets.shape[-1]
        pos = torch.arange(length, device=buckets.device)
        perm = torch.argsort(buckets * length + pos, dim=-1, stable=True)
        inv = torch.empty_like(perm).scatter_(-1, perm, pos.expand_as(perm).contiguous())
        return perm, inv

    # -- attention --------------------------------------------------------------------------

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if not self.release:
            return super().forward(x, mask)
        length = x.shape[1]
        x = F.pad(x, (0, 0, 0, self.chunk_len - length % self.chunk_len))  # the release pads its input
        q, _, v = self.project_qkv(x)
        out = self.release_attention(q, v)  # [B, H, Lp, dh]
        # The release reshapes [B, H, Lp, dh] to [B, Lp, H dh] without moving the heads axis: row l holds
        # head floor(l H / Lp) at the H positions from (l H) mod Lp on, side by side (reformer_attention.py)
        return out.reshape(out.shape[0], out.shape[2], -1)[:, :length]

    def release_attention(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The release's LSH attention of ``q, v [B, H, Lp, dh]`` (module docstring, ``release=True``)."""
        b, h, lp, dh = q.shape
        r, nb = self.n_hashes, self.n_buckets
        if lp % nb:
            raise ValueError(
                f"reformer (release): padded length {lp} is not a multiple of n_buckets={nb}, so the release "
                f"cannot cut it into n_hashes x n_buckets chunks; choose chunk_len to make it one"
            )
        with torch.autocast(q.device.type, enabled=False):  # hashing in float32, as the release
            rotated = torch.einsum("bhld,drn->bhrln", q.detach().float(), self.rotations.float())
        offsets = torch.arange(r, device=q.device).view(r, 1) * nb
        buckets = (torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1) + offsets).flatten(2)  # [B, H, r Lp]
        ticker = torch.arange(r * lp, device=q.device)
        order = torch.argsort(lp * buckets + ticker % lp, dim=-1)  # the release's sticker
        undo = torch.argsort(order, dim=-1)
        n, c = r * nb, lp // nb
        sq, sv = (_gather_positions(t, (order % lp).unsqueeze(2)).view(b, h, n, c, dh) for t in (q, v))
        keys = torch.cat([sq, torch.roll(sq, 1, dims=2)], dim=3)  # own chunk, then the one before (wrapping)
        values = torch.cat([sv, torch.roll(sv, 1, dims=2)], dim=3)
        lse = None
        if r == 1 and self.resolved_backend(q.device) == "sdpa":
            out = sdpa_aligned(sq.flatten(0, 1), keys.flatten(0, 1), values.flatten(0, 1), scale=dh**0.5)
        else:
            dots = torch.matmul(sq, keys.transpose(-1, -2)) * dh**0.5
            lse = torch.logsumexp(dots, dim=-1, keepdim=True)
            out = torch.matmul(torch.exp(dots - lse), values)
        out = _gather_positions(out.reshape(b, h, r * lp, dh), undo.unsqueeze(2)).view(b, h, r, lp, dh)
        if r == 1:
            return out[:, :, 0]
        weights = torch.softmax(torch.gather(lse.reshape(b, h, r * lp), 2, undo).view(b, h, r, lp), dim=2)
        return (out * weights.unsqueeze(-1)).sum(dim=2)

    def resolved_backend(self, device: torch.device) -> str:
        """``materialized`` or ``sdpa``: ``auto`` is ``sdpa`` on CUDA."""
        if self.backend != "auto":
            return self.backend
        return "sdpa" if device.type == "cuda" else "materialized"

    def attend(self, q, k, v, mask):
        del k  # shared QK
        length = q.shape[-2]
        s = self._sorted_chunks(q, v, mask)
        if self.resolved_backend(q.device) == "sdpa":
            out, lse = self._chunk_attention_sdpa(s)
        else:
            out, lse = self._chunk_attention_materialized(s)
        b, h, r, lp = s.inv.shape
        # Unsort each round back to positions, then combine rounds by their log-normalisers.
        out = torch.gather(out.reshape(b, h, r, lp, -1), 3, s.inv.unsqueeze(-1).expand(-1, -1, -1, -1, out.shape[-1]))
        if r == 1:
            return out[:, :, 0, :length]
        weights = torch.softmax(torch.gather(lse.reshape(b, h, r, lp), 3, s.inv), dim=2).unsqueeze(-1)
        return (out * weights).sum(dim=2)[:, :, :length]

    def _sorted_chunks(self, q, v, mask) -> SortedChunks:
        """Hash, sort by (bucket, position) and cut into chunks of ``chunk_len`` (padding sorts last)."""
        b, h, _, dh = q.shape
        c = self.chunk_len
        q, _ = pad_to_multiple(q, mask, c)
        v, mask = pad_to_multiple(v, mask, c)
        lp = q.shape[-2]
        nc, r = lp // c, self.n_hashes

        rotations = None
        if self.training and self.redraw and self.n_buckets > 1:
            rotations = self.draw_rotations(dtype=q.dtype, device=q.device)
        perm, inv = self.sort_order(self.hash_buckets(q, mask, rotations))
        if choose("reformer", "gather", self.gather) == "fused":
            rows = (perm + torch.arange(b * h, device=q.device).view(b, h, 1, 1) * lp).flatten()
            qv = torch.cat([q, v.to(q.dtype)], dim=-1).flatten(0, 2).index_select(0, rows)
            sq, sv = qv.view(b, h, r, nc, c, 2 * dh).split(dh, dim=-1)
            sk = F.normalize(sq, dim=-1, eps=1e-6) if self.normalize_keys else sq
        else:
            keys = F.normalize(q, dim=-1, eps=1e-6) if self.normalize_keys else q
            sq, sk, sv = (_gather_positions(t, perm).view(b, h, r, nc, c, dh) for t in (q, keys, v))
        return SortedChunks(
            q=sq,
            k=sk,
            v=sv,
            mask=torch.gather(mask[:, None, None, :].expand(b, h, r, lp), 3, perm).view(b, h, r, nc, c),
            pos=perm.view(b, h, r, nc, c),
            inv=inv,
        )

    def _scale(self, head_dim: int) -> float:
        return 1.0 if self.normalize_keys else 1.0 / math.sqrt(head_dim)

    def _dedup_log_counts(self, s: SortedChunks) -> torch.Tensor:
        """log N_ij [B, H, r, nc, c, 2c]: the duplicate correction subtracted from the logits."""
        return torch.log(self._window_counts(s.inv // self.chunk_len, s.pos, _with_previous(s.pos)).to(s.q.dtype))

    def _chunk_attention_materialized(self, s: SortedChunks):
        """Logits [B, H, r, nc, c, 2c] in memory; returns (out [B, H, r, nc, c, dh], lse [B, H, r, nc, c])."""
        wk, wv, wpos, wmask = _with_previous(s.k), _with_previous(s.v), _with_previous(s.pos), _window_mask(s.mask)
        logits = torch.matmul(s.q, wk.transpose(-1, -2)) * self._scale(s.q.shape[-1])
        logits = logits.masked_fill(s.pos.unsqueeze(-1) == wpos.unsqueeze(-2), SELF_MASK_VALUE)
        if self.dedup_rounds and self.n_hashes > 1:
            logits = logits - self._dedup_log_counts(s).to(logits.dtype)
        logits = logits.masked_fill(~wmask.unsqueeze(-2), neg_fill(logits.dtype))
        lse = torch.logsumexp(logits, dim=-1, keepdim=True)
        probs = self.attn_dropout(torch.exp(logits - lse))
        return torch.matmul(probs, wv), lse.squeeze(-1)

    def _chunk_attention_sdpa(self, s: SortedChunks):
        """The same attention through ``scaled_dot_product_attention`` on the sorted chunks.

        The self-mask is a float ``attn_mask`` [c, 2c] shared by every chunk (-5e4 on the own-chunk
        diagonal: slot i of a chunk is the query's own position), added to the logit where the
        materialised path replaces it (either way the token gets weight 0 unless it has nothing else,
        then weight 1); padded keys and chunk 0's missing predecessor are folded into the queries and
        keys (``fold_key_mask``). With ``n_hashes > 1`` the duplicate correction makes the mask one
        [c, 2c] matrix per chunk, and the rounds' log-normalisers, which SDPA does not return, come
        from the logits computed once more (no dropout there, as in the materialised path).
        Window layout: ``windows`` (module docstring).
        """
        b, h, r, nc, c, dh = s.q.shape
        dtype = s.v.dtype
        scale = self._scale(dh)
        unfold = choose("reformer", "windows", self.windows) == "unfold"
        if unfold:  # windows [previous, own] as views of the sorted sequence behind one masked chunk
            key_mask = F.pad(s.mask.flatten(3), (c, 0), value=False)
            q, k = fold_key_mask(s.q.to(dtype), F.pad(s.k.flatten(3, 4), (0, 0, c, 0)).to(dtype), key_mask, scale)
            k, wv = _unfold_windows(k, c), _unfold_windows(F.pad(s.v.flatten(3, 4), (0, 0, c, 0)), c)
            own = slice(c, 2 * c)
        else:
            wv = _with_previous(s.v)
            q, k = fold_key_mask(s.q.to(dtype), _with_previous(s.k).to(dtype), _window_mask(s.mask), scale)
            own = slice(0, c)
        bias = torch.zeros(c, 2 * c, dtype=dtype, device=q.device)
        bias[:, own].fill_diagonal_(SELF_MASK_VALUE)
        if self.dedup_rounds and r > 1:
            counts = self._dedup_log_counts(s).to(dtype)  # [own | previous] order
            bias = bias - (_swap_halves(counts, c) if unfold else counts)
        flat_bias = bias.flatten(0, 2) if bias.dim() > 2 else bias
        dropout = self.attn_dropout.p if self.training else 0.0
        backends = sdpa_backend_list(choose("reformer", "sdpa_backends", self.sdpa_backends))
        with _sdpa_kernels(backends):
            out = sdpa_aligned(
                q.flatten(0, 2), k.flatten(0, 2), wv.flatten(0, 2), attn_mask=flat_bias, dropout_p=dropout, scale=scale
            )
        lse = None
        if r > 1:
            lse = torch.logsumexp(torch.matmul(q, k.transpose(-1, -2)) * scale + bias, dim=-1)
        return out, lse

    def _window_counts(self, chunk_of: torch.Tensor, spos: torch.Tensor, wpos: torch.Tensor):
        """N_ij: in how many rounds key j lies in query i's window (own or previous chunk).
        ``chunk_of [B, H, r, Lp]``; ``spos [B, H, r, nc, c]``; ``wpos [B, H, r, nc, 2c]``."""
        counts = torch.zeros(*spos.shape, wpos.shape[-1], dtype=torch.long, device=spos.device)
        for rr in range(self.n_hashes):
            table = chunk_of[:, :, rr]  # [B, H, Lp]
            cq = torch.gather(table, 2, spos.flatten(2)).view_as(spos).unsqueeze(-1)
            ck = torch.gather(table, 2, wpos.flatten(2)).view_as(wpos).unsqueeze(-2)
            counts += ((cq == ck) | (cq - 1 == ck)).long()
        return counts.clamp_min(1)


# the settings release=True ignores, at their defaults (refused otherwise)
RELEASE_IGNORES = dict(
    windows="auto", gather="auto", sdpa_backends="auto", normalize_keys=True, dedup_rounds=True, redraw=True, bias=False
)


def _check_release_settings(dropout, n_buckets) -> None:
    """``release=True`` is the release's attention: no attention dropout, at least two buckets."""
    if dropout:
        raise ValueError(
            f"reformer: attention_params.release=true is the LRA release's attention, which applies no "
            f"attention dropout; set model.attention_dropout=0.0 (not {dropout})"
        )
    if n_buckets < 2:
        raise ValueError(f"reformer: attention_params.release=true hashes into n_buckets >= 2 buckets, not {n_buckets}")


def _sdpa_kernels(backends):
    """``torch.nn.attention.sdpa_kernel(backends)``, or nothing when ``backends`` is None."""
    if backends is None:
        return contextlib.nullcontext()
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel(backends)

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
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from . import ATTENTION
from ._lowrank_common import SELF_MASK_VALUE, HeadedMixer, neg_fill, pad_to_multiple


def _gather_positions(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x [B, H, L, d]`` gathered at ``index [B, H, r, N]`` -> ``[B, H, r, N, d]``."""
    b, h, r, n = index.shape
    flat = index.reshape(b, h, r * n, 1).expand(-1, -1, -1, x.shape[-1])
    return torch.gather(x, 2, flat).view(b, h, r, n, x.shape[-1])


@ATTENTION.register("reformer")
class ReformerAttention(HeadedMixer):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        n_hashes: int = 1,
        n_buckets: int = 10,
        chunk_len: Optional[int] = None,
        normalize_keys: bool = True,
        dedup_rounds: bool = True,
        redraw: bool = True,
        bias: bool = False,
    ):
        super().__init__(d_model, n_heads, max_len, dropout, ("q", "v"), bias)
        if n_buckets < 1 or (n_buckets > 1 and n_buckets % 2):
            raise ValueError(f"n_buckets must be 1 or even, not {n_buckets}")
        self.n_hashes = n_hashes
        self.n_buckets = n_buckets
        self.chunk_len = chunk_len or max(1, math.ceil(max_len / n_buckets))
        self.normalize_keys = normalize_keys
        self.dedup_rounds = dedup_rounds
        self.redraw = redraw
        self.register_buffer("rotations", self.draw_rotations())

    def draw_rotations(
        self, generator: Optional[torch.Generator] = None, dtype=torch.float32, device=None
    ) -> torch.Tensor:
        """Gaussian rotations ``[H, n_hashes, dh, max(n_buckets // 2, 1)]``."""
        shape = (self.n_heads, self.n_hashes, self.head_dim, max(self.n_buckets // 2, 1))
        return torch.randn(shape, generator=generator, dtype=dtype, device=device)

    @torch.no_grad()
    def redraw_rotations(self, generator: Optional[torch.Generator] = None) -> None:
        self.rotations.copy_(self.draw_rotations(generator, self.rotations.dtype).to(self.rotations.device))

    # -- hashing and sorting (public for tests) -------------------------------------------

    def hash_buckets(
        self, q: torch.Tensor, mask: torch.Tensor, rotations: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
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

    def attend(self, q, k, v, mask):
        del k  # shared QK
        b, h, length, dh = q.shape
        c = self.chunk_len
        q, _ = pad_to_multiple(q, mask, c)
        v, mask = pad_to_multiple(v, mask, c)
        lp = q.shape[-2]
        nc, r = lp // c, self.n_hashes

        rotations = None
        if self.training and self.redraw and self.n_buckets > 1:
            rotations = self.draw_rotations(dtype=q.dtype, device=q.device)
        buckets = self.hash_buckets(q, mask, rotations)
        perm, inv = self.sort_order(buckets)

        keys = F.normalize(q, dim=-1, eps=1e-6) if self.normalize_keys else q
        scale = 1.0 if self.normalize_keys else 1.0 / math.sqrt(dh)

        # Sorted and chunked: [B, H, r, nc, c, ...].
        sq = _gather_positions(q, perm).view(b, h, r, nc, c, dh)
        sk = _gather_positions(keys, perm).view(b, h, r, nc, c, dh)
        sv = _gather_positions(v, perm).view(b, h, r, nc, c, dh)
        smask = torch.gather(mask[:, None, None, :].expand(b, h, r, lp), 3, perm).view(b, h, r, nc, c)
        spos = perm.view(b, h, r, nc, c)

        # Window = own chunk + previous chunk (chunk 0 has no previous one: masked).
        def with_previous(t: torch.Tensor) -> torch.Tensor:
            return torch.cat([t, torch.roll(t, 1, dims=3)], dim=4)

        wk, wv, wpos = with_previous(sk), with_previous(sv), with_previous(spos)
        prev_mask = torch.roll(smask, 1, dims=3).clone()
        prev_mask[:, :, :, 0] = False
        wmask = torch.cat([smask, prev_mask], dim=4)  # [B, H, r, nc, 2c]

        logits = torch.matmul(sq, wk.transpose(-1, -2)) * scale  # [B, H, r, nc, c, 2c]
        logits = logits.masked_fill(spos.unsqueeze(-1) == wpos.unsqueeze(-2), SELF_MASK_VALUE)
        if self.dedup_rounds and r > 1:
            logits = logits - torch.log(self._window_counts(inv // c, spos, wpos).to(logits.dtype))
        logits = logits.masked_fill(~wmask.unsqueeze(-2), neg_fill(logits.dtype))

        lse = torch.logsumexp(logits, dim=-1, keepdim=True)
        probs = self.attn_dropout(torch.exp(logits - lse))
        out = torch.matmul(probs, wv).view(b, h, r, lp, dh)
        lse = lse.view(b, h, r, lp)

        # Unsort each round back to positions, then combine rounds.
        out = torch.gather(out, 3, inv.unsqueeze(-1).expand(-1, -1, -1, -1, dh))
        lse = torch.gather(lse, 3, inv)
        weights = torch.softmax(lse, dim=2).unsqueeze(-1)
        return (out * weights).sum(dim=2)[:, :, :length]

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

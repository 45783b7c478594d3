"""BigBird attention (Zaheer et al., 2020), the block-sparse ITC variant LRA uses.

The sequence is cut into blocks of ``block_size``. Block ``i`` (queries) attends to

* its window: blocks ``i - window_blocks//2 .. i + window_blocks//2`` (3 blocks),
* the global blocks, which also attend to every position, and
* ``n_random`` random blocks, drawn per head and per query block from the blocks that are
  neither in its window nor global.

Global blocks: the first ``n_global`` blocks, plus, when ``global_last``, block
``max_len // block_size``. The latter mirrors LRA's code
(``lra_benchmarks/models/bigbird/bigbird_attention.py``): it pads every input by
``block_size - L % block_size`` (a whole block when ``L`` is a multiple) and makes the
first and the last block of that padded input global, so the last global block is the
one holding position ``L``. Fixing it from ``max_len`` (the length LRA pads every input
to) keeps the pattern a function of position only: appending padding to a batch changes
nothing for the real tokens.

Random blocks are drawn once, at construction, from ``torch.Generator().manual_seed(seed)``
over the blocks of ``max_len`` (LRA reseeds numpy with ``connectivity_seed`` = layer index
and also draws a different set per head); with ``random_max_len`` (LRA:
``last_idx=min(seq_length, 1024)``) only blocks lying wholly in the first
``random_max_len`` positions can be drawn. Rows with fewer candidates than ``n_random``
keep fewer (the rest are ``-1``). ``self.rand_blocks`` ([H, NB, n_random], long, ``-1`` =
none) exposes the draw; ``dense_mask`` rebuilds the exact pattern from it.

Defaults (LRA ``bigbird.py``: ``_DEFAULT_BLOCK_SIZE = 64``; ``bigbird_attention.py``:
``num_rand_blocks=3``, window of 3 blocks, first + last block global):
``block_size=64, n_random=3, window_blocks=3, n_global=1, global_last=True,
random_max_len=1024``.

Computation: each non-global query block gathers its window, global and random key
blocks (``(window_blocks + n_global_blocks + n_random) * block_size`` keys; a global block
that is also in the window is masked in one place so it is not counted twice); the
query rows of global blocks are computed densely over all keys.

``flex_attention`` backend (CUDA, ``_common.FlexPatternMixin``; ``_flex.py`` has the tile costs):
the pattern is a lookup in the [H, NB, NB] block table. With 128-wide tiles nearly every tile is
partial (the table is read per pair); with ``flex_block=64`` (= ``block_size``) every tile is
full or absent, the pattern is never evaluated in the kernel, and the work is the pattern's own
(~126 tiles of 128 x 128 per head at L = 4097 without the global rows, against 1089 for full
attention). ``flex_global_rows=dense`` computes the global blocks' query rows (block 0 and the
one holding position ``max_len``) as dense rows over all keys, as this blockwise path does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from . import ATTENTION
from ._common import (
    AttentionMixer,
    FlexPatternMixin,
    dense_attention,
    gather_block_mask,
    gather_blocks,
    n_blocks,
    segment_attention,
)
from ._pad import pad_dim


def global_blocks_for(max_len: int, block_size: int, n_global: int, global_last: bool) -> list[int]:
    blocks = set(range(n_global))
    if global_last:
        blocks.add(max_len // block_size)
    return sorted(blocks)


def draw_random_blocks(
    n_heads: int,
    max_len: int,
    block_size: int,
    n_random: int,
    window_blocks: int,
    global_blocks: Sequence[int],
    seed: int,
    random_max_len: int | None = 1024,
) -> Tensor:
    """[H, NB, n_random] long: random key blocks per head and query block (-1 = none);
    ``NB`` covers every block that can hold a position ``< max_len`` plus the last global
    block."""
    nb = max(n_blocks(max_len, block_size), max(global_blocks, default=-1) + 1, 1)
    half = window_blocks // 2
    i = torch.arange(nb)[:, None]
    j = torch.arange(nb)[None, :]
    cand = (j - i).abs() > half  # not in the window
    cand &= j * block_size < max_len  # holds a real position
    if random_max_len is not None:
        cand &= (j + 1) * block_size <= random_max_len
    for gb in global_blocks:
        cand[:, gb] = False
    out = torch.full((n_heads, nb, n_random), -1, dtype=torch.long)
    if n_random == 0:
        return out
    gen = torch.Generator().manual_seed(int(seed))
    keys = torch.rand(n_heads, nb, nb, generator=gen)
    keys = keys.masked_fill(~cand, -1.0)
    k = min(n_random, nb)
    top, idx = keys.topk(k, dim=-1)
    idx = idx.masked_fill(top < 0, -1)
    out[..., :k] = idx
    return out.sort(dim=-1).values  # fixed order; -1 (none) first


def block_pattern(
    nb: int,
    rand_blocks: Tensor,
    global_blocks: Sequence[int],
    window_blocks: int = 3,
    device=None,
) -> Tensor:
    """[H, nb, nb] bool: query block i may attend key block j (first ``nb`` blocks)."""
    rand_blocks = rand_blocks.to(device)
    blocks = torch.arange(nb, device=device)
    m = (blocks[None, :] - blocks[:, None]).abs() <= window_blocks // 2
    is_g = torch.zeros(nb, dtype=torch.bool, device=device)
    gb = [b for b in global_blocks if b < nb]
    if gb:
        is_g[gb] = True
    m = m | is_g[:, None] | is_g[None, :]
    rb = rand_blocks[:, :nb]  # [H, nb, R]
    rnd = (rb[..., None] == blocks).any(-2)  # [H, nb, nb]; -1 matches nothing
    return m[None] | rnd


def dense_mask(
    L: int,
    block_size: int,
    rand_blocks: Tensor,
    global_blocks: Sequence[int],
    window_blocks: int = 3,
    device=None,
) -> Tensor:
    """[H, L, L] bool pattern (one per head, since random blocks differ by head)."""
    blk = torch.arange(L, device=device) // block_size
    bp = block_pattern(n_blocks(L, block_size), rand_blocks, global_blocks, window_blocks, device)
    return bp[:, blk][:, :, blk]


@ATTENTION.register("bigbird")
class BigBirdAttention(FlexPatternMixin, AttentionMixer):
    FLEX_MECHANISM = "bigbird"
    # the LRA release (bigbird/bigbird_attention.py) masks keys with -10000 and multiplies the output by
    # the query mask: a masked position's attention output is 0, this package's padding convention
    RELEASE_ZERO_MASK = "padding"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        block_size: int = 64,
        n_random: int = 3,
        window_blocks: int = 3,
        n_global: int = 1,
        global_last: bool = True,
        random_max_len: int | None = 1024,
        seed: int = 0,
        backend: str = "auto",
        flex_block="auto",
        flex_global_rows: str = "auto",
        flex_lse_pass: str = "auto",
    ):
        super().__init__(d_model, n_heads, max_len, dropout)
        if block_size < 1 or n_random < 0 or n_global < 0:
            raise ValueError("need block_size >= 1, n_random >= 0, n_global >= 0")
        if window_blocks < 1 or window_blocks % 2 == 0:
            raise ValueError(f"window_blocks must be odd and >= 1, got {window_blocks}")
        self.block_size, self.n_random = int(block_size), int(n_random)
        self.window_blocks = int(window_blocks)
        self.n_global, self.global_last, self.seed = int(n_global), bool(global_last), int(seed)
        self.random_max_len = random_max_len
        self.init_flex(backend, flex_block, flex_global_rows, flex_lse_pass)
        self.global_blocks = global_blocks_for(max_len, self.block_size, self.n_global, self.global_last)
        rb = draw_random_blocks(
            n_heads,
            max_len,
            self.block_size,
            self.n_random,
            self.window_blocks,
            self.global_blocks,
            self.seed,
            random_max_len,
        )
        self.register_buffer("rand_blocks", rb, persistent=False)
        self.register_buffer("_global_blocks", torch.tensor(self.global_blocks, dtype=torch.long), persistent=False)

    def dense_mask(self, L: int, device=None) -> Tensor:
        return dense_mask(L, self.block_size, self.rand_blocks, self.global_blocks, self.window_blocks, device)

    def flex_heads(self) -> int:
        return self.n_heads

    def flex_global_rows(self, L: int) -> list[int]:
        S = self.block_size
        return [pos for blk in self.global_blocks for pos in range(blk * S, min(L, (blk + 1) * S))]

    def flex_mask_mod(self, device, dense_rows: bool = False):
        """The block-level pattern [H, NB, NB] over the blocks of max_len, looked up per pair (at a
        tile side of 64 = ``block_size`` every tile is full or absent and the kernel never calls
        it); ``dense_rows``: the global blocks' query rows allowed nothing (computed apart)."""
        S = self.block_size
        nb = self.rand_blocks.shape[1]
        table = block_pattern(nb, self.rand_blocks, self.global_blocks, self.window_blocks, device)
        if dense_rows:
            table[:, [b for b in self.global_blocks if b < nb]] = False

        def mask_mod(b, h, qi, kv):
            return table[h, qi // S, kv // S]

        return mask_mod

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, x: Tensor) -> Tensor:
        B, H, L, Dh = q.shape
        if L > self.max_len:
            raise ValueError(
                f"bigbird: sequence length {L} exceeds max_len {self.max_len}; "
                "the random and global blocks are laid out over max_len"
            )
        out = self.fast_attend(q, k, v, mask)
        if out is not None:
            return out
        dev = q.device
        S = self.block_size
        nb = n_blocks(L, S)
        Lp = nb * S
        p = self.dropout if self.training else 0.0
        qb, kb, vb = (pad_dim(t, 2, Lp).view(B, H, nb, S, Dh) for t in (q, k, v))
        km = pad_dim(mask, 1, Lp, False).view(B, nb, S)

        half = self.window_blocks // 2
        rows = torch.arange(nb, device=dev)[:, None]
        win = rows + torch.arange(-half, half + 1, device=dev)  # [NB, W]
        win_ok = (win >= 0) & (win < nb)
        gl = self._global_blocks[: sum(b < nb for b in self.global_blocks)]  # sorted; no sync
        glb = gl[None, :].expand(nb, -1)  # [NB, G]
        gl_ok = (glb - rows).abs() > half  # not already in the window
        rnd = self.rand_blocks[:, :nb].to(dev)  # [H, NB, R]
        rnd_ok = (rnd >= 0) & (rnd < nb)
        R = rnd.shape[-1]
        idx = torch.cat([win.expand(H, -1, -1), glb.expand(H, -1, -1), rnd], dim=-1)  # [H, NB, N]
        ok = torch.cat([win_ok.expand(H, -1, -1), gl_ok.expand(H, -1, -1), rnd_ok], dim=-1)
        if R == 0:  # same blocks for every head: gather without a head index
            idx, ok = idx[0], ok[0]
        idx = idx.clamp(0, nb - 1)
        ok_k = ok[..., None].expand(*ok.shape, S).flatten(-2)  # [(H,) NB, N*S]
        ok_k = ok_k[:, :, None, :] if ok_k.dim() == 3 else ok_k[None, :, None, :]
        seg = (
            gather_blocks(kb, idx),
            gather_blocks(vb, idx),
            [gather_block_mask(km, idx), ok_k[None]],
        )
        out = segment_attention(qb, [seg], dropout_p=p, training=self.training)  # [B,H,NB,S,Dh]

        if len(gl):  # global query blocks: full attention over all keys
            qg = qb[:, :, gl].flatten(2, 3)  # [B, H, G*S, Dh]
            og = dense_attention(qg, k, v, mask[:, None, None, :], dropout_p=p, training=self.training)
            out = out.index_copy(2, gl, og.view(B, H, len(gl), S, Dh))
        return out.reshape(B, H, Lp, Dh)[:, :, :L]

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", block_size={self.block_size}, "
            f"n_random={self.n_random}, window_blocks={self.window_blocks}, "
            f"global_blocks={self.global_blocks}, random_max_len={self.random_max_len}, "
            f"seed={self.seed}, backend={self.backend!r}, flex_block={self.flex_block!r}, "
            f"flex_global_rows={self.flex_global_rows_mode!r}, flex_lse_pass={self.flex_lse_pass!r}"
        )

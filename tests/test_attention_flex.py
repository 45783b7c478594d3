"""The flex_attention and dense backends of BigBird, Longformer and Sparse: the same function as
the blockwise backend (float64, with padding, forward and gradients), and LRA's attention
dropout kept exact (the fast path equals a dense reference applying the same keep-mask)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from repro.original.attention import ATTENTION, load_all
from repro.original.attention._common import dense_attention
from repro.original.attention._flex import (
    KEEP_BITS,
    dense_dropout_reference,
    draw_dropout_keys,
    dropout_threshold,
    flex_pattern_attention,
    keep_mask,
    keep_probability,
)

load_all()
pytestmark = pytest.mark.filterwarnings("ignore")  # eager flex_attention on CPU warns it is slow

D, H = 16, 2
# (name, params, max_len): blocks small enough that L ~ 150 spans several of them and more
# than one of flex's 128-position blocks
CASES = {
    "bigbird": ("bigbird", dict(block_size=8, n_random=2, random_max_len=None, seed=3), 160),
    "bigbird_lra": ("bigbird", dict(block_size=8, n_random=3, random_max_len=64, seed=1), 160),
    "longformer": ("longformer", dict(window=20), 160),
    "longformer_global": ("longformer", dict(window=9, n_global=2), 160),
    "longformer_global_shared": ("longformer", dict(window=9, n_global=3, separate_global_proj=False), 160),
    "sparse_lra": ("sparse", dict(stride=10, c=3, n_global=1), 160),
    "sparse_bidir": ("sparse", dict(stride=7, c=2, causal=False, block_start_summary=False, n_global=2), 160),
    "sparse_no_summary": ("sparse", dict(stride=9, c=0, block_start_summary=False), 160),
}
# Longformer's separate global projections go through dense_attention (F.dropout), not flex
DROPOUT_CASES = [c for c in CASES if c != "longformer_global"]


# how the flex call runs (the same function): the first round's settings, and every new option at once
SETTINGS = {
    "tile128": dict(flex_block=128, flex_global_rows="flex", flex_lse_pass="full"),
    "tile64_dense_narrow": dict(flex_block=64, flex_global_rows="dense", flex_lse_pass="narrow"),
}


def build(case: str, backend: str, dropout: float = 0.0, **flex):
    name, params, max_len = CASES[case]
    if name == "longformer" and flex.get("flex_global_rows") == "dense":
        flex = {**flex, "flex_global_rows": "flex"}  # Longformer's global rows have their own projections
    torch.manual_seed(0)
    m = ATTENTION.get(name)(d_model=D, n_heads=H, max_len=max_len, dropout=dropout, backend=backend, **params, **flex)
    return m.double()


def lengths_mask(L: int, lengths) -> torch.Tensor:
    return torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]


def step(m, x, mask):
    """Output and the gradients of a loss of it (input first, then every parameter)."""
    x = x.clone().requires_grad_(True)
    y = m(x, mask)
    (y.square().sum() + y.sum()).backward()
    grads = [x.grad] + [p.grad for p in m.parameters()]
    m.zero_grad(set_to_none=True)
    return y.detach(), grads


@pytest.mark.parametrize("settings", list(SETTINGS))
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("L", [150, 160])
def test_flex_equals_blockwise_with_padding_forward_and_gradients(case, L, settings):
    plain, fast = build(case, "blockwise"), build(case, "flex", **SETTINGS[settings])
    fast.load_state_dict(plain.state_dict())
    torch.manual_seed(1)
    x = torch.randn(3, L, D, dtype=torch.float64)
    mask = lengths_mask(L, [L, L - 37, 0])  # full, padded, fully padded
    for m in (plain, fast):
        m.train()  # dropout 0: the training code path
    y_plain, g_plain = step(plain, x, mask)
    y_fast, g_fast = step(fast, x, mask)
    torch.testing.assert_close(y_fast, y_plain, atol=1e-10, rtol=0)
    for a, b in zip(g_fast, g_plain, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    with torch.no_grad():  # eval: flex_attention itself (no backward on CPU, see _flex.dense_flex)
        torch.testing.assert_close(fast.eval()(x, mask), plain.eval()(x, mask), atol=1e-10, rtol=0)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("L", [150, 160])
def test_dense_equals_blockwise_with_padding_forward_and_gradients(case, L):
    plain, fast = build(case, "blockwise"), build(case, "dense")
    fast.load_state_dict(plain.state_dict())
    x = torch.randn(3, L, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mask = lengths_mask(L, [L, L - 37, 0])  # full, padded, fully padded
    for m in (plain, fast):
        m.train()  # dropout 0: the training code path
    (y_plain, g_plain), (y_fast, g_fast) = step(plain, x, mask), step(fast, x, mask)
    torch.testing.assert_close(y_fast, y_plain, atol=1e-10, rtol=0)
    for a, b in zip(g_fast, g_plain, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@pytest.mark.parametrize("case", ["bigbird", "longformer", "sparse_lra"])
def test_dense_dropout_drops_the_probabilities_as_a_dense_reference_does(case):
    """With the same random state, the dense backend's dropout (SDPA's, on CPU its math kernel) drops
    exactly the probabilities F.dropout drops after the masked softmax: LRA's attention dropout."""
    L, p = 150, 0.3
    m = build(case, "dense", dropout=p).train()
    x = torch.randn(3, L, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mask = lengths_mask(L, [L, L - 37, 0])
    torch.manual_seed(5)
    y = m(x, mask)
    q, k, v = m.project(x)
    pattern = m.dense_mask(L)
    pattern = pattern[None] if pattern.dim() == 2 else pattern
    torch.manual_seed(5)
    ctx = dense_attention(q, k, v, pattern[None] & mask[:, None, None, :], dropout_p=p, training=True)
    torch.testing.assert_close(y, m.proj.output(ctx) * mask[..., None], atol=1e-12, rtol=0)
    assert not torch.equal(y, build(case, "dense").train()(x, mask))  # something was dropped


def dense_dropout_forward(m, x, mask, seed: int):
    """The mixer's function with the keep-mask of the flex call drawn from ``seed``, materialised."""
    B, L, _ = x.shape
    torch.manual_seed(seed)
    row, col = draw_dropout_keys(B, H, L, L, x.device)
    threshold = dropout_threshold(m.dropout)
    keep = keep_mask(row[..., None], col[None, None, None, :], threshold)
    q, k, v = m.project(x)
    pattern = m.dense_mask(L, device=x.device)
    pattern = pattern[None] if pattern.dim() == 2 else pattern
    allowed = pattern[None] & mask[:, None, None, :]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    ctx = dense_dropout_reference(scores, allowed, keep, keep_probability(threshold), v)
    return m.proj.output(ctx) * mask[..., None]


@pytest.mark.parametrize("lse_pass", ["full", "narrow"])
@pytest.mark.parametrize("case", DROPOUT_CASES)
@pytest.mark.parametrize("p", [0.1, 0.9])
def test_flex_dropout_equals_a_dense_reference_with_the_same_keep_mask(case, p, lse_pass):
    m = build(case, "flex", dropout=p, flex_global_rows="flex", flex_lse_pass=lse_pass).train()
    L = 150
    torch.manual_seed(2)
    x = torch.randn(3, L, D, dtype=torch.float64)
    mask = lengths_mask(L, [L, 99, 0])
    torch.manual_seed(7)
    y_fast, g_fast = step(m, x, mask)
    xr = x.clone().requires_grad_(True)
    y_ref = dense_dropout_forward(m, xr, mask, seed=7)
    (y_ref.square().sum() + y_ref.sum()).backward()
    g_ref = [xr.grad] + [q.grad for q in m.parameters()]
    torch.testing.assert_close(y_fast, y_ref.detach(), atol=1e-10, rtol=0)
    for a, b in zip(g_fast, g_ref, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    # not vacuous: without dropout the output is another one
    assert (y_fast - m.eval()(x, mask)).abs().max() > 1e-3


@pytest.mark.parametrize("case", ["bigbird_lra", "sparse_lra"])
def test_dense_global_rows_with_dropout(case):
    """``flex_global_rows=dense``: the other rows are the flex call's (the hashed keep-mask), the global
    rows a dense softmax over every key with ``F.dropout`` drawn after the hash keys, forward and
    gradients."""
    p, L = 0.3, 150
    m = build(case, "flex", dropout=p, flex_global_rows="dense").train()
    rows = torch.tensor(m.flex_global_rows(L))
    assert len(rows) > 0
    torch.manual_seed(2)
    x = torch.randn(3, L, D, dtype=torch.float64)
    mask = lengths_mask(L, [L, 99, 0])
    torch.manual_seed(7)
    y_fast, g_fast = step(m, x, mask)

    xr = x.clone().requires_grad_(True)
    B = x.shape[0]
    torch.manual_seed(7)
    row, col = draw_dropout_keys(B, H, L, L, x.device)
    threshold = dropout_threshold(p)
    keep = keep_mask(row[..., None], col[None, None, None, :], threshold)
    q, k, v = m.project(xr)
    allowed = m.dense_mask(L)
    allowed = (allowed[None] if allowed.dim() == 2 else allowed)[None] & mask[:, None, None, :]
    ctx = dense_dropout_reference(
        q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), allowed, keep, keep_probability(threshold), v
    )
    dense = dense_attention(q[:, :, rows], k, v, mask[:, None, None, :], dropout_p=p, training=True)
    y_ref = m.proj.output(ctx.index_copy(2, rows, dense)) * mask[..., None]
    (y_ref.square().sum() + y_ref.sum()).backward()
    g_ref = [xr.grad] + [t.grad for t in m.parameters()]
    torch.testing.assert_close(y_fast, y_ref.detach(), atol=1e-10, rtol=0)
    for a, b in zip(g_fast, g_ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


def tile_tables(block_mask, heads: int):
    """(partial, full) tile booleans [heads, NQ, NK] of a BlockMask."""
    nq, nk = block_mask.kv_indices.shape[-2:]

    def table(num, idx):
        out = torch.zeros(block_mask.kv_num_blocks.shape[1], nq, nk, dtype=torch.bool)
        take = torch.arange(nk)[None, None, :] < num[0][..., None]
        out.scatter_(2, idx[0].long(), take)
        return out.expand(heads, -1, -1)

    return (
        table(block_mask.kv_num_blocks, block_mask.kv_indices),
        table(block_mask.full_kv_num_blocks, block_mask.full_kv_indices),
    )


@pytest.mark.parametrize("dense_rows", [False, True])
@pytest.mark.parametrize("block", [64, 128])
@pytest.mark.parametrize("case", list(CASES))
def test_block_mask_tiles_are_classified_exactly(case, block, dense_rows):
    """What the GPU kernel relies on (it skips ``mask_mod`` in full tiles and every absent tile): a full
    tile holds only allowed pairs within the sequences, a partial one some allowed pair, and every
    allowed pair lies in a full or a partial tile."""
    m = build(case, "flex")
    L = 157  # the cases' max_len is 160; the last tile is a short one
    mask_mod, kv_len, _ = m.flex_layout(L, torch.device("cpu"), dense_rows)
    block_mask, _ = m.flex_pattern(L, torch.device("cpu"), block, dense_rows)
    heads = m.flex_heads() or 1
    allowed = mask_mod(
        torch.tensor(0),
        torch.arange(heads)[:, None, None],
        torch.arange(L)[None, :, None],
        torch.arange(kv_len)[None, None, :],
    ).expand(heads, L, kv_len)
    partial, full = tile_tables(block_mask, heads)
    tile_q, tile_k = torch.arange(L) // block, torch.arange(kv_len) // block
    in_full = full[:, tile_q][:, :, tile_k]
    in_some = in_full | partial[:, tile_q][:, :, tile_k]
    assert not (in_full & ~allowed).any()
    assert not (allowed & ~in_some).any()
    per_tile = torch.zeros_like(partial, dtype=torch.long)
    per_tile.index_put_(
        (torch.arange(heads)[:, None, None], tile_q[None, :, None], tile_k[None, None, :]),
        allowed.long(),
        accumulate=True,
    )
    assert (per_tile[partial] > 0).all()
    assert not (partial & full).any()


@pytest.mark.parametrize("block", [64, 128])
@pytest.mark.parametrize("case", list(CASES))
def test_block_masks_cover_whole_tiles_and_padded_positions_repeat_the_last(case, block):
    """The kernel never meets a sequence that ends inside a tile: the block mask's lengths are whole
    tiles, and a position past the end has the pattern of the last real one."""
    m = build(case, "flex")
    L = 157
    mask_mod, kv_len, _ = m.flex_layout(L, torch.device("cpu"))
    block_mask, _ = m.flex_pattern(L, torch.device("cpu"), block)
    q_len_p, kv_len_p = block_mask.seq_lengths
    assert q_len_p % block == 0 and kv_len_p % block == 0
    assert q_len_p - block < L <= q_len_p and kv_len_p - block < kv_len <= kv_len_p
    heads = torch.arange(m.flex_heads() or 1)[:, None, None]
    b = torch.tensor(0)
    rows = torch.arange(q_len_p)[None, :, None]
    cols = torch.arange(kv_len_p)[None, None, :]
    padded = block_mask.mask_mod(b, heads, rows, cols)
    plain = mask_mod(b, heads, rows.clamp(max=L - 1), cols.clamp(max=kv_len - 1))
    assert torch.equal(padded, plain)
    assert torch.equal(padded[:, :L, :kv_len], mask_mod(b, heads, rows[:, :L], cols[:, :, :kv_len]))


def test_bigbird_at_its_own_block_width_has_no_partial_tile():
    """LRA's BigBird (blocks of 64) under 64-wide tiles: the kernel never evaluates the pattern, also in
    the last, shorter tiles of a length that is not a multiple of 64 (4096 + a CLS token)."""
    m = ATTENTION.get("bigbird")(d_model=32, n_heads=4, max_len=4097, block_size=64, n_random=3)
    for dense_rows in (False, True):
        block_mask, _ = m.flex_pattern(4097, torch.device("cpu"), 64, dense_rows)
        assert block_mask.kv_num_blocks.sum() == 0 and block_mask.full_kv_num_blocks.sum() > 0
    block_mask, _ = m.flex_pattern(4097, torch.device("cpu"), 128, False)
    assert block_mask.kv_num_blocks.sum() > 0  # 64-wide blocks leave 128-wide tiles partial


@pytest.mark.parametrize("case", ["bigbird", "sparse_lra"])
def test_eager_flex_attention_with_the_dropout_mod_equals_the_differentiable_emulation(case):
    """On CPU a step that needs gradients runs ``dense_flex`` (torch has no CPU flex backward);
    flex_attention itself computes the same, dropout hash included."""
    m = build(case, "flex")
    L = 150
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, H, L, D // H, dtype=torch.float64) for _ in range(3))
    mask = lengths_mask(L, [L, 120])
    block_mask, key_index = m.flex_pattern(L, q.device)
    torch.manual_seed(11)
    with torch.no_grad():
        eager = flex_pattern_attention(q, k, v, mask, block_mask, key_index, dropout_p=0.3)
    torch.manual_seed(11)
    emulated = flex_pattern_attention(q.requires_grad_(True), k, v, mask, block_mask, key_index, dropout_p=0.3)
    torch.testing.assert_close(eager, emulated.detach(), atol=1e-12, rtol=0)


def lowbias32_reference(x: np.ndarray) -> np.ndarray:
    """The hash on unsigned 32-bit integers, as published (numpy wraps uint32 products)."""
    x = x.astype(np.uint32)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


def test_the_int32_hash_is_lowbias32():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)
    low = lowbias32_reference(a ^ b) & np.uint32((1 << KEEP_BITS) - 1)
    threshold = dropout_threshold(0.37)
    expected = low >= threshold
    got = keep_mask(torch.from_numpy(a.view(np.int32)), torch.from_numpy(b.view(np.int32)), threshold)
    assert np.array_equal(got.numpy(), expected)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_keep_rate_is_one_minus_p_within_binomial_error(p):
    torch.manual_seed(0)
    row, col = draw_dropout_keys(4, 4, 256, 1024, "cpu")
    keep = keep_mask(row[..., None], col, dropout_threshold(p))  # 4M decisions
    n = keep.numel()
    assert abs(keep.double().mean().item() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)
    # neighbouring decisions independent: equal with probability p^2 + (1-p)^2
    same = (keep[..., 1:] == keep[..., :-1]).double().mean().item()
    q = p * p + (1 - p) * (1 - p)
    assert abs(same - q) < 5 * math.sqrt(q * (1 - q) / n)
    # a new draw is a new mask
    row2, col2 = draw_dropout_keys(4, 4, 256, 1024, "cpu")
    assert (keep_mask(row2[..., None], col2, dropout_threshold(p)) != keep).any()
    assert keep_probability(dropout_threshold(p)) == pytest.approx(1 - p, abs=2**-KEEP_BITS)


@pytest.mark.parametrize("case", ["sparse_lra", "sparse_bidir", "sparse_no_summary"])
@pytest.mark.parametrize("L", [1, 2, 150])
def test_sparse_key_layout_holds_every_allowed_pair_exactly_once(case, L):
    m = build(case, "flex")
    mask_mod, kv_len, key_index = m.flex_layout(L, torch.device("cpu"))
    qi = torch.arange(L)[:, None]
    kv = torch.arange(kv_len)[None, :]
    slots = mask_mod(torch.tensor(0), torch.tensor(0), qi, kv).long()  # [L, Lk]
    counts = torch.zeros(L, L, dtype=torch.long).index_add_(1, key_index, slots)
    assert torch.equal(counts, m.dense_mask(L).long())


def test_backend_choice():
    m = build("bigbird", "auto")
    assert m.pattern_backend(torch.zeros(1)) != "flex"
    assert build("bigbird", "flex").pattern_backend(torch.zeros(1)) == "flex"
    assert ATTENTION.get("bigbird")(d_model=D, n_heads=H, max_len=64).backend == "auto"
    with pytest.raises(ValueError, match="unknown backend 'fast'; choose from"):
        build("sparse_lra", "fast")
    first = m.flex_pattern(40, torch.device("cpu"))
    assert m.flex_pattern(40, torch.device("cpu")) is first  # built once per length and device


def test_auto_runs_flex_on_cuda_for_every_head_width():
    from types import SimpleNamespace

    def queries(device, width):  # what pattern_backend reads of the query tensor, no CUDA needed; 4,096 tokens,
        return SimpleNamespace(device=torch.device(device), shape=(2, H, 4096, width))  # above dense_max_len

    auto = build("sparse_lra", "auto")
    assert auto.pattern_backend(queries("cuda", 16)) == auto.pattern_backend(queries("cuda", 8)) == "flex"
    assert auto.pattern_backend(queries("cpu", 16)) != "flex"
    assert build("sparse_lra", "flex").pattern_backend(queries("cpu", 8)) == "flex"
    assert build("sparse_lra", "blockwise").pattern_backend(queries("cuda", 16)) != "flex"
    assert build("sparse_lra", "dense").pattern_backend(queries("cpu", 8)) == "dense"


def test_auto_runs_dense_up_to_the_tables_length_and_flex_above(monkeypatch):
    from types import SimpleNamespace

    from repro.original.attention.fast_defaults import FAST_DEFAULTS

    def queries(device, length):
        return SimpleNamespace(device=torch.device(device), shape=(2, H, length, 16))

    auto = build("longformer", "auto")
    monkeypatch.setitem(FAST_DEFAULTS["longformer"], "dense_max_len", 1025)
    assert [auto.pattern_backend(queries("cuda", n)) for n in (1024, 1025, 1026)] == ["dense", "dense", "flex"]
    assert auto.pattern_backend(queries("cpu", 1024)) == "blockwise"
    assert build("longformer", "flex").pattern_backend(queries("cuda", 1024)) == "flex"  # explicit wins


@pytest.mark.parametrize("d_model", [16, 4])  # heads 8 and 2 wide (LRA's image and Pathfinder Sparse)
def test_narrow_heads_reach_flex_sixteen_wide_and_equal_blockwise(monkeypatch, d_model):
    """Every flex call gets q, k and v at least FLEX_MIN_HEAD_DIM wide (torch's compiled kernel takes
    no narrower head), and the padded heads compute the blockwise path's outputs and gradients."""
    from repro.original.attention import _flex

    widths = set()
    real_flex = _flex._flex

    def spy(q, k, v, *args, **kwargs):
        widths.add((q.shape[-1], k.shape[-1], v.shape[-1]))
        return real_flex(q, k, v, *args, **kwargs)

    monkeypatch.setattr(_flex, "_flex", spy)
    name, params, max_len = CASES["sparse_lra"]
    modules = []
    for backend in ("blockwise", "flex"):
        torch.manual_seed(0)
        modules.append(ATTENTION.get(name)(d_model=d_model, n_heads=2, max_len=max_len, backend=backend, **params))
    plain, fast = (m.double() for m in modules)
    fast.load_state_dict(plain.state_dict())
    x = torch.randn(3, 150, d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mask = lengths_mask(150, [150, 61, 0])
    (y_fast, grads_fast), (y_plain, grads_plain) = step(fast, x, mask), step(plain, x, mask)
    for a, b in zip([y_fast, *grads_fast], [y_plain, *grads_plain], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    assert widths == {(_flex.FLEX_MIN_HEAD_DIM,) * 3}


def test_flex_options_are_checked_and_auto_reads_the_defaults_table(monkeypatch):
    from repro.original.attention.fast_defaults import FAST_DEFAULTS

    with pytest.raises(ValueError, match=r"bigbird: attention_params.flex_block=32 is not one of 'auto', 64, 128"):
        build("bigbird", "flex", flex_block=32)
    with pytest.raises(ValueError, match=r"longformer: attention_params.flex_global_rows='dense' is not one of"):
        ATTENTION.get("longformer")(d_model=D, n_heads=H, max_len=64, flex_global_rows="dense")
    m = build("sparse_lra", "flex")
    monkeypatch.setitem(FAST_DEFAULTS["sparse"], "flex_block", 128)
    monkeypatch.setitem(FAST_DEFAULTS["sparse"], "flex_lse_pass", "full")
    assert m.flex_settings().block == 128 and m.flex_settings().lse_pass == "full"
    monkeypatch.setitem(FAST_DEFAULTS["sparse"], "flex_block", 64)
    assert m.flex_settings().block == 64 and m.flex_settings().autotune
    assert build("sparse_lra", "flex", flex_block=128).flex_settings().block == 128  # explicit wins
    monkeypatch.setitem(FAST_DEFAULTS["bigbird"], "flex_block", 64)
    monkeypatch.setitem(FAST_DEFAULTS["bigbird"], "flex_narrow_min_len", 1536)
    auto_tiles = build("bigbird", "flex")
    assert [auto_tiles.flex_settings(n).block for n in (1001, 1535, 1536, 2001)] == [128, 128, 64, 64]
    assert build("bigbird", "flex", flex_block=64).flex_settings(1001).block == 64  # explicit wins
    monkeypatch.setitem(FAST_DEFAULTS["sparse"], "flex_global_rows", "flex")
    assert m.dense_row_index(40, torch.device("cpu")) is None
    monkeypatch.setitem(FAST_DEFAULTS["sparse"], "flex_global_rows", "dense")
    assert m.dense_row_index(40, torch.device("cpu")).tolist() == [0]


def test_dropout_probability_outside_zero_one_is_refused():
    with pytest.raises(ValueError, match=r"attention dropout must be in \[0, 1\), got 1.0"):
        dropout_threshold(1.0)

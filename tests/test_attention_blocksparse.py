"""Softmax-attention mixers (vanilla, local, longformer, bigbird, sparse): the blockwise
computations equal full softmax attention under their dense masks, the vanilla backends
agree, and padding neither changes real outputs nor produces NaN."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import assert_same_gradients

from repro.original.attention import ATTENTION, load_all, local, longformer, sparse

load_all()

D, H, B = 16, 2, 2

# (name, params, max_len): small blocks so that L=23 spans several of them
CASES = {
    "local": ("local", dict(block_size=5), 64),
    "local_overlap": ("local", dict(block_size=5, look_backward=1, look_forward=1), 64),
    "local_back": ("local", dict(block_size=4, look_backward=2), 64),
    "longformer": ("longformer", dict(window=6), 64),
    "longformer_global": ("longformer", dict(window=5, n_global=2, chunk_size=3), 64),
    "longformer_global_shared": ("longformer", dict(window=8, n_global=3, separate_global_proj=False), 64),
    "bigbird": ("bigbird", dict(block_size=4, n_random=2, random_max_len=None, seed=3), 38),
    "bigbird_lra": ("bigbird", dict(block_size=4, n_random=2, random_max_len=24, seed=1), 38),
    "bigbird_2g_nolast": (
        "bigbird",
        dict(block_size=3, n_random=1, n_global=2, global_last=False, random_max_len=None, seed=5),
        64,
    ),
    "sparse": ("sparse", dict(stride=6, c=2), 64),
    "sparse_cls": ("sparse", dict(stride=6, c=2, n_global=1), 64),
    "sparse_bidir": ("sparse", dict(stride=5, c=2, causal=False, block_start_summary=False, n_global=2), 64),
    "vanilla_sdpa": ("vanilla", dict(backend="sdpa"), 64),
    "vanilla_mat": ("vanilla", dict(backend="materialized"), 64),
}


def build(case: str, dtype=torch.float64, seed: int = 0):
    name, params, max_len = CASES[case]
    torch.manual_seed(seed)
    m = ATTENTION.get(name)(d_model=D, n_heads=H, max_len=max_len, dropout=0.0, **params)
    return m.to(dtype).eval()


def reference(m, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Full softmax attention with the module's own projections and its dense pattern."""
    L = x.shape[1]
    q, k, v = m.project(x)
    pattern = m.dense_mask(L, device=x.device)  # [L, L] or [H, L, L]
    if pattern.dim() == 2:
        pattern = pattern[None]
    allowed = pattern[None] & mask[:, None, None, :]  # [B, H|1, L, L]

    def attn(q, k, v):
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        s = s.masked_fill(~allowed, float("-inf"))
        p = torch.softmax(s, -1)
        p = torch.nan_to_num(p, nan=0.0)  # rows with no allowed key
        return p @ v

    ctx = attn(q, k, v)
    if getattr(m, "global_proj", None) is not None:  # longformer: global rows use q_g/k_g/v_g
        qg, kg, vg = m.global_proj.project(x)
        g = min(m.n_global, L)
        ctx[:, :, :g] = attn(qg, kg, vg)[:, :, :g]
    y = m.proj.output(ctx)
    return y * mask[..., None]


def make_mask(L: int, lengths) -> torch.Tensor:
    return torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]


# ------------------------------------------------------------------ patterns


def test_registry_has_all():
    for name in ("vanilla", "local", "longformer", "bigbird", "sparse"):
        assert name in ATTENTION


def test_dense_mask_examples():
    # local: own block only by default
    m = local.dense_mask(6, block_size=3)
    assert m[0].tolist() == [True] * 3 + [False] * 3
    # longformer window 4: left 2 (incl. self), right 2
    m = longformer.dense_mask(8, window=4)
    assert m[4].nonzero().flatten().tolist() == [3, 4, 5, 6]
    m = longformer.dense_mask(8, window=4, n_global=1)
    assert m[:, 0].all() and m[0].all()
    # sparse fixed, causal, stride 4, c 1, LRA's extra block-start column
    m = sparse.dense_mask(10, stride=4, c=1, causal=True, block_start_summary=True)
    assert m[9].nonzero().flatten().tolist() == [0, 3, 4, 7, 8, 9]
    m = sparse.dense_mask(10, stride=4, c=1, causal=False, block_start_summary=False)
    assert m[1].nonzero().flatten().tolist() == [0, 1, 2, 3, 7]
    # bigbird: window, global, random rows are consistent with the draw
    bb = build("bigbird")
    pat = bb.dense_mask(38)
    assert pat.shape == (H, 38, 38)
    rb = bb.rand_blocks
    for h in range(H):
        for qb in range(2, 8):
            rand = [b for b in rb[h, qb].tolist() if b >= 0]
            assert len(rand) == 2
            for b in rand:  # random blocks avoid the window and the global blocks
                assert abs(b - qb) > 1 and b not in bb.global_blocks
                assert pat[h, qb * 4, b * 4]
    assert bb.global_blocks == [0, 9]
    assert pat[:, 36].all() and pat[:, :, 36].all()  # last global block (max_len // 4)


def test_bigbird_draw_is_seeded():
    a, b, c = build("bigbird"), build("bigbird", seed=7), build("bigbird_lra")
    assert torch.equal(a.rand_blocks, b.rand_blocks)  # seed param, not the torch RNG
    assert not torch.equal(a.rand_blocks, c.rand_blocks)
    # random_max_len: only blocks wholly inside the first 24 positions
    assert c.rand_blocks.max() < 24 // 4
    # heads draw differently
    assert not torch.equal(a.rand_blocks[0], a.rand_blocks[1])


# ------------------------------------------------------------------ equivalence


EQUIV_CASES = list(CASES)


@pytest.mark.parametrize("case", EQUIV_CASES)
@pytest.mark.parametrize("L", [23, 24])
def test_blockwise_equals_dense(case, L):
    if CASES[case][2] < L:
        pytest.skip("longer than max_len")
    m = build(case)
    torch.manual_seed(1)
    x = torch.randn(B, L, D, dtype=torch.float64)
    mask = make_mask(L, [L, L - 6])
    with torch.no_grad():
        y = m(x, mask)
        ref = reference(m, x, mask)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, ref, atol=1e-6, rtol=0)


def test_bigbird_full_length_with_last_global_block():
    m = build("bigbird")
    torch.manual_seed(2)
    x = torch.randn(B, 38, D, dtype=torch.float64)
    mask = make_mask(38, [38, 30])
    with torch.no_grad():
        torch.testing.assert_close(m(x, mask), reference(m, x, mask), atol=1e-6, rtol=0)


def test_vanilla_backends_agree_float32():
    a, b = build("vanilla_sdpa", torch.float32), build("vanilla_mat", torch.float32)
    b.load_state_dict(a.state_dict())
    torch.manual_seed(3)
    x = torch.randn(3, 40, D)
    mask = make_mask(40, [40, 17, 0])
    with torch.no_grad():
        ya, yb = a(x, mask), b(x, mask)
    assert torch.isfinite(ya).all() and torch.isfinite(yb).all()
    torch.testing.assert_close(ya, yb, atol=1e-5, rtol=0)


@pytest.mark.filterwarnings("ignore")  # eager flex_attention on CPU warns it is slow
@pytest.mark.parametrize("backend", ["flex", "dense"])
@pytest.mark.parametrize("case", ["local_overlap", "local_back", "longformer_global", "bigbird", "sparse_cls"])
def test_flex_and_dense_backends_match_blockwise(case, backend):
    name, params, max_len = CASES[case]
    torch.manual_seed(0)
    a = build(case)
    b = ATTENTION.get(name)(d_model=D, n_heads=H, max_len=max_len, backend=backend, **params)
    b = b.to(torch.float64).eval()
    b.load_state_dict(a.state_dict())
    x = torch.randn(B, 23, D, dtype=torch.float64)
    mask = make_mask(23, [23, 15])
    with torch.no_grad():
        torch.testing.assert_close(b(x, mask), a(x, mask), atol=1e-6, rtol=0)


# ------------------------------------------------------------------ padding


@pytest.mark.parametrize("backend", ["sdpa", "materialized"])
def test_vanilla_release_masking_is_the_lra_release_s_flax_attention(backend):
    """``release_masking`` (model.release_masking) against the release's computation done literally in
    float32: logits + a 0 / -1e10 bias on the outer product of the query and key masks, softmax. A real
    query ignores black keys; a black query's row absorbs q.k (uniform attention over every key, its
    output kept) yet passes q.k's gradient. Forward and gradients; the second sample is all black."""
    torch.manual_seed(0)
    B, L, D, H = 2, 11, 16, 2
    mixer = ATTENTION.get("vanilla")(D, H, L, backend=backend)
    mixer.release_masking = True
    mask = torch.rand(B, L) > 0.4
    mask[0, :2], mask[1] = True, False
    x = torch.randn(B, L, D, requires_grad=True)
    out = mixer(x, mask)
    q, k, v = mixer.project(x)
    both = mask[:, None, :, None] & mask[:, None, None, :]
    bias = torch.where(both, 0.0, -1e10)
    expected = mixer.proj.output(torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // H) + bias, dim=-1) @ v)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    assert out[1].abs().min() > 0  # black queries keep their output
    assert_same_gradients(out, expected, [x, *mixer.parameters()], rtol=1e-4, atol=1e-5)
    mixer.dropout = 0.5  # attention dropout applies to the release path too
    assert not torch.allclose(mixer.train()(x, mask), out)


@pytest.mark.parametrize("L", [37, 40])  # 40: a whole extra block of zero positions, as the release pads
def test_local_release_mode_is_the_release_s_strided_groups_with_their_misaligned_mask(L):
    """release=True against local_attention.py done literally in float32: the input padded with zero
    positions marked real, [B, Lp, H, dh] reshaped to [B, block, NB, H, dh] and attended over axis 1
    (strided groups), the mask cut into contiguous blocks (block n's to group n), a 0 / -1e10 bias on the
    outer product of its query and key masks. Forward and gradients."""
    torch.manual_seed(0)
    B, D, H, S = 3, 16, 2, 8
    mixer = ATTENTION.get("local")(D, H, 64, block_size=S, release=True)
    assert mixer.RELEASE_ZERO_MASK == "padding"
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[1, 20:], mask[2, 5:] = False, False
    x = torch.randn(B, L, D, requires_grad=True)
    out = mixer(x, mask)
    extra = S - L % S
    lp, nb, dh = L + extra, (L + extra) // S, D // H
    wq, wk, wv = mixer.proj.qkv.weight.chunk(3, dim=0)
    xp = torch.nn.functional.pad(x, (0, 0, 0, extra))
    bq, bk, bv = ((xp @ w.T).reshape(B, S, nb, H, dh) for w in (wq, wk, wv))
    blocks = torch.nn.functional.pad(mask, (0, extra), value=True).reshape(B, nb, S)
    bias = torch.where(blocks[..., :, None] & blocks[..., None, :], 0.0, -1e10)  # [B, NB, S, S]
    logits = torch.einsum("binhd,bjnhd->bnhij", bq / math.sqrt(dh), bk) + bias[:, :, None]
    y = torch.einsum("bnhij,bjnhd->binhd", torch.softmax(logits, dim=-1), bv).reshape(B, lp, D)
    expected = (y @ mixer.proj.out.weight.T)[:, :L]
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    assert_same_gradients(out, expected, [x, *mixer.parameters()], rtol=1e-4, atol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as on the GPU: bf16 projections, float32 logits
        torch.testing.assert_close(mixer(x, mask).float(), out, rtol=0.05, atol=0.05)
    contiguous = ATTENTION.get("local")(D, H, 64, block_size=S)
    contiguous.load_state_dict(mixer.state_dict())
    assert not torch.allclose(contiguous(x, mask)[0], out[0])  # strided groups, not contiguous blocks
    with pytest.raises(ValueError, match="remove look_backward, look_forward and backend"):
        ATTENTION.get("local")(D, H, 64, block_size=S, look_backward=1, release=True)


@pytest.mark.parametrize("case", list(CASES))
def test_appending_padding_changes_nothing(case):
    m = build(case, torch.float32)
    torch.manual_seed(4)
    L, P = 19, 13
    x = torch.randn(B, L, D)
    mask = make_mask(L, [L, 12])
    xp = torch.cat([x, 100 * torch.randn(B, P, D)], dim=1)  # loud garbage in the padding
    maskp = torch.cat([mask, torch.zeros(B, P, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        y, yp = m(x, mask), m(xp, maskp)
    torch.testing.assert_close(yp[:, :L], y, atol=1e-5, rtol=0)
    assert (yp[:, L:] == 0).all()


@pytest.mark.parametrize("case", list(CASES))
def test_no_nan_with_padding(case):
    m = build(case, torch.float32)
    m.train()  # dropout off (p=0) but training paths
    torch.manual_seed(5)
    L = 23
    x = torch.randn(3, L, D, requires_grad=True)
    mask = make_mask(L, [L, 1, 0])  # full, one real token, fully padded
    y = m(x, mask)
    assert torch.isfinite(y).all()
    assert (y[1, 1:] == 0).all() and (y[2] == 0).all()
    y.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_dropout_is_applied_in_training():
    name, params, max_len = CASES["bigbird"]
    m = ATTENTION.get(name)(d_model=D, n_heads=H, max_len=max_len, dropout=0.5, **params)
    x = torch.randn(1, 20, D)
    mask = make_mask(20, [20])
    m.eval()
    torch.testing.assert_close(m(x, mask), m(x, mask))
    m.train()
    assert not torch.allclose(m(x, mask), m(x, mask))


def test_bigbird_rejects_longer_than_max_len():
    m = build("bigbird")
    with pytest.raises(ValueError, match="max_len"):
        m(torch.randn(1, 39, D, dtype=torch.float64))


def test_lra_defaults():
    def mk(n):
        return ATTENTION.get(n)(d_model=D, n_heads=H, max_len=2048)

    assert mk("local").block_size == 50 and mk("local").look_backward == 0
    lf = mk("longformer")
    assert (lf.window, lf.n_global) == (512, 0)
    bb = mk("bigbird")
    assert (bb.block_size, bb.n_random, bb.window_blocks, bb.global_blocks) == (64, 3, 3, [0, 32])
    sp = mk("sparse")
    assert (sp.stride, sp.c, sp.causal) == (128, 32, True)
    assert mk("vanilla").backend == "sdpa"


def test_sdpa_key_mask_drops_an_all_real_mask_and_opens_fully_padded_samples():
    from repro.original.attention._common import sdpa_key_mask

    assert sdpa_key_mask(torch.ones(3, 5, dtype=torch.bool)) is None
    mask = torch.tensor([[True, True, False], [False, False, False]])
    keys = sdpa_key_mask(mask)
    assert keys.shape == (2, 1, 1, 3)
    assert keys[0, 0, 0].tolist() == [True, True, False]
    assert keys[1, 0, 0].tolist() == [True, True, True]  # no real key: opened, no NaN

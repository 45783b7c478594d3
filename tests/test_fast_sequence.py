"""Fast paths of Reformer, S5 and MEGA against their plain paths, and the S5 / MEGA initialisations.

Every fast path is checked in float64 on CPU against the plain computation of the same module
(same parameters): outputs and the gradients of every parameter and of the input, with padding.
The initial parameter statistics are checked against the releases' formulas (lindermanlab/S5
``s5/ssm_init.py``, ``s5/ssm.py``; facebookresearch/mega ``moving_average_gated_attention.py``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import repro.followup.mega as mega_module
import repro.original.attention.reformer as reformer_module
from repro.followup.mega import MegaMixer, RelativePositionBias
from repro.followup.s5 import (
    S5SSM,
    TRUNCATED_STD,
    fft_states,
    fft_states_channels_last,
    lecun_normal,
    scan_time_invariant,
)
from repro.original.attention import load_all
from repro.original.attention.fast_defaults import FAST_DEFAULTS

ATTN = load_all()


def padded_batch(batch: int, length: int, width: int, lengths: list[int], seed: int = 1):
    """Random float64 inputs [B, L, D] with junk at the padded positions, and the mask [B, L]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, width, generator=g, dtype=torch.float64)
    mask = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]
    return x, mask


def outputs_and_grads(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor, call=None):
    """(output, d loss / d x, {name: d loss / d parameter}) for a fixed random linear loss of the output."""
    module.zero_grad()
    x = x.clone().requires_grad_(True)
    y = (call or module)(x, mask)
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(11), dtype=y.dtype)
    (y * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
    return y.detach(), x.grad.clone(), grads


def assert_same(fast, plain, tol: float = 1e-10):
    """Outputs at every position (real and padded), the input gradient and every parameter's gradient."""
    y_fast, dx_fast, g_fast = fast
    y_plain, dx_plain, g_plain = plain
    torch.testing.assert_close(y_fast, y_plain, rtol=tol, atol=tol)
    torch.testing.assert_close(dx_fast, dx_plain, rtol=tol, atol=tol)
    assert g_fast.keys() == g_plain.keys() and g_plain
    for name in g_plain:
        torch.testing.assert_close(g_fast[name], g_plain[name], rtol=tol, atol=tol, msg=name)


# ------------------------------------------------------------------ S5: FFT convolution vs scan


@pytest.mark.parametrize("length", [1, 2, 7, 40])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_s5_fft_states_equal_the_scan(length, bidirectional):
    g = torch.Generator().manual_seed(length)
    log_lam = torch.complex(
        -torch.rand(5, generator=g, dtype=torch.float64) * 0.3, torch.randn(5, generator=g, dtype=torch.float64)
    )
    bu = torch.randn(3, length, 5, generator=g, dtype=torch.complex128)
    states = fft_states(log_lam, bu, bidirectional)
    assert states.shape == (3, length, 2 if bidirectional else 1, 5)
    for direction in range(states.shape[2]):
        want = scan_time_invariant(torch.exp(log_lam), bu, reverse=direction == 1)
        torch.testing.assert_close(states[:, :, direction], want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("length", [1, 2, 7, 40])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_s5_channels_last_fft_states_are_the_transposed_states(length, bidirectional):
    g = torch.Generator().manual_seed(length)
    log_lam = torch.complex(
        -torch.rand(5, generator=g, dtype=torch.float64) * 0.3, torch.randn(5, generator=g, dtype=torch.float64)
    )
    bu = torch.randn(3, length, 5, generator=g, dtype=torch.complex128)
    want = fft_states(log_lam, bu, bidirectional)  # [B, L, dirs, P]
    got = fft_states_channels_last(log_lam, bu.transpose(1, 2).contiguous(), bidirectional)  # [B, dirs, P, L]
    torch.testing.assert_close(got.permute(0, 3, 1, 2), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fft_layout", ["time_major", "channels_last"])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("clip_eigs", [False, True])
def test_s5_fft_equals_scan_forward_and_gradients(bidirectional, clip_eigs, fft_layout):
    torch.manual_seed(0)
    shared = dict(
        d_model=6, d_state=8, blocks=2, bidirectional=bidirectional, clip_eigs=clip_eigs, dt_min=0.01, dt_max=0.5
    )
    scan = S5SSM(**shared, impl="scan").double()
    fft = S5SSM(**shared, impl="fft", fft_layout=fft_layout, proj_dtype="autocast").double()
    fft.load_state_dict(scan.state_dict())
    x, mask = padded_batch(3, 37, 6, lengths=[37, 20, 1])
    assert_same(outputs_and_grads(fft, x, mask), outputs_and_grads(scan, x, mask))


@pytest.mark.parametrize("fft_layout", ["time_major", "channels_last"])
def test_s5_projections_in_the_autocast_dtype(fft_layout):
    """``proj_dtype=autocast``: under bf16 autocast the two projections run in bf16 (the output moves by
    bf16 rounding, no more), the FFT in float32; ``float32`` keeps the autocast-free result exactly."""
    torch.manual_seed(0)
    ssm = S5SSM(d_model=16, d_state=16, blocks=2, impl="fft", fft_layout=fft_layout, proj_dtype="float32")
    low = S5SSM(d_model=16, d_state=16, blocks=2, impl="fft", fft_layout=fft_layout, proj_dtype="autocast")
    low.load_state_dict(ssm.state_dict())
    x = torch.randn(2, 50, 16, generator=torch.Generator().manual_seed(3))
    exact = ssm(x, None)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        same, rounded = ssm(x, None), low(x, None)
    assert same.dtype == rounded.dtype == torch.float32
    torch.testing.assert_close(same, exact, rtol=1e-6, atol=1e-6)
    error = ((rounded - exact).norm() / exact.norm()).item()
    assert 1e-5 < error < 2e-2, error


def test_s5_impl_choice():
    ssm = S5SSM(d_model=4, d_state=4)
    assert ssm.impl == "auto" and ssm.resolved_impl(torch.device("cpu")) == "scan"
    assert ssm.resolved_impl(torch.device("cuda")) == "fft"
    assert S5SSM(d_model=4, d_state=4, impl="fft").resolved_impl(torch.device("cpu")) == "fft"
    with pytest.raises(ValueError, match=r"model.ssm_impl='parallel': choose one of auto, scan, fft"):
        S5SSM(d_model=4, d_state=4, impl="parallel")
    with pytest.raises(ValueError, match=r"s5: model.ssm_fft_layout='rows' is not one of 'auto', 'time_major'"):
        S5SSM(d_model=4, d_state=4, fft_layout="rows")
    with pytest.raises(ValueError, match=r"s5: model.ssm_proj_dtype='bf16' is not one of 'auto', 'float32'"):
        S5SSM(d_model=4, d_state=4, proj_dtype="bf16")


# ------------------------------------------------------------------ S5: initialisation as the release


def test_lecun_normal_is_jax_truncated_normal_with_variance_one_over_fan_in():
    torch.manual_seed(0)
    fan_in = 50
    draws = lecun_normal((400, 500), fan_in=fan_in)
    bound = 2 * math.sqrt(1 / fan_in) / TRUNCATED_STD  # truncated at two standard deviations of the normal
    assert draws.abs().max() <= bound and draws.abs().max() > 0.99 * bound
    assert abs(draws.var().item() * fan_in - 1) < 0.01
    assert abs(draws.mean().item()) < 0.01 / math.sqrt(fan_in)
    assert abs(TRUNCATED_STD - 0.87962566103423978) < 1e-15  # the constant in jax.nn.initializers


@pytest.mark.parametrize("c_init", ["trunc_standard_normal", "lecun_normal", "complex_normal"])
def test_s5_initial_b_and_c_have_the_releases_variances(c_init):
    """B [P, H] ~ lecun_normal (variance 1/P); C per ``c_init``. V has unit columns, so the stored
    B_tilde = V^-1 B has E|entry|^2 = 1/P and C_tilde = C V has E|entry|^2 = 2 var(C part)."""
    torch.manual_seed(0)
    d_model, d_state = 384, 256
    ssm = S5SSM(d_model=d_model, d_state=d_state, blocks=8, c_init=c_init, bidirectional=True).double()
    b_power = torch.view_as_complex(ssm.B).abs().square().mean().item()
    assert abs(b_power * d_state - 1) < 0.04
    want_c = {"trunc_standard_normal": 2 / d_state, "lecun_normal": 2 / (d_model * d_state), "complex_normal": 1.0}
    for c in ssm.C:
        c_power = torch.view_as_complex(c).abs().square().mean().item()
        assert abs(c_power / want_c[c_init] - 1) < 0.04, (c_init, c_power)
    assert abs(ssm.D.std().item() - 1) < 0.15


# ------------------------------------------------------------------ Reformer: SDPA on the sorted chunks


def reformer(backend: str, dropout: float = 0.0, **params) -> torch.nn.Module:
    torch.manual_seed(0)
    module = ATTN.get("reformer")(d_model=16, n_heads=2, max_len=40, dropout=dropout, backend=backend, **params)
    return module.double()


REFORMER_CASES = [
    {"n_buckets": 4, "n_hashes": 1, "chunk_len": 5},
    {"n_buckets": 4, "n_hashes": 1, "chunk_len": 40},  # one chunk: the previous chunk is the chunk itself
    {"n_buckets": 4, "n_hashes": 3, "chunk_len": 5},
    {"n_buckets": 6, "n_hashes": 2, "chunk_len": 4, "dedup_rounds": False},
    {"n_buckets": 4, "n_hashes": 2, "chunk_len": 5, "normalize_keys": False},
    {"n_buckets": 1, "n_hashes": 1, "chunk_len": 8},
]


REFORMER_LAYOUTS = {
    "concat-per_tensor": dict(windows="concat", gather="per_tensor"),
    "unfold-fused": dict(windows="unfold", gather="fused"),
    "unfold-per_tensor": dict(windows="unfold", gather="per_tensor"),
    "unfold-fused-math": dict(windows="unfold", gather="fused", sdpa_backends=["MATH"]),  # a kernel choice
}


@pytest.mark.parametrize("layout", list(REFORMER_LAYOUTS))
@pytest.mark.parametrize("params", REFORMER_CASES, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_reformer_sdpa_equals_materialized_forward_and_gradients(params, layout):
    """Training mode (fixed rotations, dropout off): same outputs, input and parameter gradients, with
    padding, a single real token and a sample with no real token at all; every window layout and gather
    against the materialised path with the first round's (concatenated windows, one gather per tensor)."""
    plain = reformer("materialized", redraw=False, windows="concat", gather="per_tensor", **params).train()
    fast = reformer("sdpa", redraw=False, **REFORMER_LAYOUTS[layout], **params).train()
    fast.load_state_dict(plain.state_dict())
    x, mask = padded_batch(4, 37, 16, lengths=[37, 13, 1, 0])
    assert_same(outputs_and_grads(fast, x, mask), outputs_and_grads(plain, x, mask))


def test_reformer_sdpa_runs_one_fused_call_with_a_broadcast_mask(monkeypatch):
    """n_hashes=1: one SDPA call over [B H r, nc, c, d'] with a single [c, 2c] mask (nothing per sample)."""
    calls = []

    def spy(q, k, v, attn_mask=None, **kwargs):
        calls.append((tuple(q.shape), tuple(k.shape), tuple(attn_mask.shape)))
        return sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(reformer_module.F, "scaled_dot_product_attention", spy)
    x, mask = padded_batch(3, 37, 16, lengths=[37, 20, 5])
    for windows in ("concat", "unfold"):
        calls.clear()
        reformer("sdpa", n_buckets=4, n_hashes=1, chunk_len=5, windows=windows).eval()(x, mask)
        assert calls == [((3 * 2, 8, 5, 16), (3 * 2, 8, 10, 16), (5, 10))]  # head dim 8 + 1 folded, padded to 16


def test_reformer_unfold_windows_are_views_of_the_sorted_keys():
    """``windows=unfold``: window i is [chunk i - 1, chunk i] read in place (no copy), chunk 0's first half
    the prepended masked chunk."""
    t = torch.arange(4 * 3 * 2, dtype=torch.float64).view(4 * 3, 2)  # 4 chunks of 3 (the first the mask's)
    windows = reformer_module._unfold_windows(t, 3)
    assert windows.shape == (3, 6, 2) and windows.data_ptr() == t.data_ptr()
    for i in range(3):
        torch.testing.assert_close(windows[i], t[3 * i : 3 * i + 6], rtol=0, atol=0)


def test_reformer_layout_options_are_checked():
    with pytest.raises(ValueError, match=r"reformer: attention_params.windows='roll' is not one of 'auto', 'concat'"):
        reformer("sdpa", windows="roll")
    with pytest.raises(ValueError, match=r"attention_params.sdpa_backends=\['FLASH'\]: give null or a list of"):
        reformer("sdpa", sdpa_backends=["FLASH"])
    assert reformer("sdpa", sdpa_backends=["MATH"]).sdpa_backends == ("MATH",)


def test_reformer_backend_choice():
    module = reformer("auto", n_buckets=4)
    assert module.resolved_backend(torch.device("cpu")) == "materialized"
    assert module.resolved_backend(torch.device("cuda")) == "sdpa"
    message = r"unknown reformer backend 'flash'; choose from \('auto', 'materialized', 'sdpa'\)"
    with pytest.raises(ValueError, match=message):
        reformer("flash")


def release_lsh_reference(x, wq, wv, rotations, n_heads, n_buckets, n_hashes, chunk_len):
    """The LRA release's ReformerAttention (reformer_attention.py), one example and one head at a time; the
    heads' outputs [H, Lp, dh] reshaped to [Lp, H dh] without moving the heads axis, as the release does."""
    length = x.shape[1]
    x = torch.nn.functional.pad(x, (0, 0, 0, chunk_len - length % chunk_len))
    lp, dh = x.shape[1], x.shape[2] // n_heads
    heads = []
    for b in range(x.shape[0]):
        row = []
        for h in range(n_heads):
            query = (x[b] @ wq.T)[:, h * dh : (h + 1) * dh]
            value = (x[b] @ wv.T)[:, h * dh : (h + 1) * dh]
            rotated = torch.einsum("tf,fhi->hti", query, rotations.to(x.dtype))
            buckets = torch.cat([rotated, -rotated], -1).argmax(-1) + (torch.arange(n_hashes) * n_buckets)[:, None]
            ticker = torch.arange(n_hashes * lp)
            sticker = torch.sort(lp * buckets.reshape(-1) + ticker % lp).indices
            undo_sort = torch.sort(sticker).indices
            st = sticker % lp
            bq = query[st].reshape(n_hashes * n_buckets, -1, dh)
            bv = value[st].reshape(n_hashes * n_buckets, -1, dh)
            bk = torch.cat([bq, torch.cat([bq[-1:], bq[:-1]])], dim=1)  # look_one_back
            bv = torch.cat([bv, torch.cat([bv[-1:], bv[:-1]])], dim=1)
            dots = torch.einsum("hie,hje->hij", bq, bk) * dh**0.5
            lse = torch.logsumexp(dots, -1, keepdim=True)
            o = (torch.exp(dots - lse) @ bv).reshape(-1, dh)[undo_sort].reshape(n_hashes, lp, dh)
            probs = torch.softmax(lse.reshape(-1)[undo_sort].reshape(n_hashes, lp, 1), dim=0)
            row.append((o * probs).sum(0))
        heads.append(torch.stack(row).reshape(lp, -1))  # [H, Lp, dh] -> [Lp, H dh] as jnp.reshape does
    return torch.stack(heads)[:, :length]


@pytest.mark.parametrize("backend", ["sdpa", "materialized"])
@pytest.mark.parametrize("n_hashes, n_buckets, chunk_len", [(1, 10, 10), (2, 4, 4), (1, 4, 8)])
def test_reformer_release_mode_is_the_release_attention_forward_and_gradients(backend, n_hashes, n_buckets, chunk_len):
    """release=True against the release's code written out per example and head (float64, training
    mode): padding is hashed and attended, so the mask changes nothing; no output projection."""
    torch.manual_seed(0)
    build = ATTN.get("reformer")
    settings = dict(d_model=16, n_heads=2, max_len=40, n_hashes=n_hashes, n_buckets=n_buckets, release=True)
    module = build(**settings, chunk_len=chunk_len, backend=backend).double().train()
    assert module.out_proj is None and module.k_proj is None
    assert module.rotations.shape == (8, n_hashes, n_buckets // 2)
    x, mask = padded_batch(3, 37, 16, [37, 20, 5])
    weights = [module.q_proj.weight, module.v_proj.weight]
    x_ref = x.clone().requires_grad_(True)
    ref = release_lsh_reference(x_ref, *weights, module.rotations, 2, n_buckets, n_hashes, chunk_len)
    x = x.requires_grad_(True)
    out = module(x, mask)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(module(x.detach(), None), out.detach(), rtol=0, atol=0)
    padded = torch.nn.functional.pad(x, (0, 0, 0, chunk_len - 37 % chunk_len))
    heads_at_positions = module.release_attention(*module.project_qkv(padded)[::2])
    assert not torch.allclose(out, heads_at_positions.transpose(1, 2).flatten(2)[:, :37])  # the layouts differ
    grad_out = torch.randn_like(out)
    mine = torch.autograd.grad(out, [x, *weights], grad_out)
    theirs = torch.autograd.grad(ref, [x_ref, *weights], grad_out)
    for a, b in zip(mine, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    assert torch.equal(build(**settings).rotations, module.rotations.float())  # one rotation for every layer


def test_reformer_release_mode_refuses_what_it_would_ignore():
    build = ATTN.get("reformer")
    with pytest.raises(ValueError, match=r"applies no attention dropout; set model.attention_dropout=0.0 \(not 0.1\)"):
        build(d_model=16, n_heads=2, max_len=40, dropout=0.1, release=True)
    with pytest.raises(ValueError, match=r"attention_params.windows has no meaning with release=true; remove it"):
        build(d_model=16, n_heads=2, max_len=40, windows="unfold", release=True)
    module = build(d_model=16, n_heads=2, max_len=40, n_buckets=4, chunk_len=3, release=True)
    with pytest.raises(ValueError, match=r"padded length 39 is not a multiple of n_buckets=4"):
        module(torch.randn(1, 38, 16))


@pytest.mark.parametrize("backend", ["materialized", "sdpa"])
def test_reformer_attention_dropout_is_lra_dropout_in_distribution(backend):
    """Both backends drop entries of the normalised probabilities P and scale by 1/(1-p), no
    renormalisation: per output, mean sum_j P_ij v_j and variance p/(1-p) sum_j P_ij^2 v_j^2.
    Checked on 20,000 copies of one sorted batch (independent draws) against those formulas."""
    p, copies = 0.25, 20_000
    module = reformer(backend, dropout=p, n_buckets=4, n_hashes=1, chunk_len=4, redraw=False).train()
    x, mask = padded_batch(1, 8, 16, lengths=[7])
    q, _, v = module.project_qkv(x)
    chunks = module._sorted_chunks(q.detach(), v.detach(), mask)
    module.eval()
    _, lse = module._chunk_attention_materialized(chunks)  # no dropout: the exact probabilities
    window_k, window_v = reformer_module._with_previous(chunks.k), reformer_module._with_previous(chunks.v)
    logits = chunks.q @ window_k.transpose(-1, -2)  # normalised keys: scale 1
    logits = logits.masked_fill(
        chunks.pos.unsqueeze(-1) == reformer_module._with_previous(chunks.pos).unsqueeze(-2), -5e4
    )
    probs = torch.exp(
        logits.masked_fill(~reformer_module._window_mask(chunks.mask).unsqueeze(-2), -1e30) - lse.unsqueeze(-1)
    )
    mean = probs @ window_v
    variance = p / (1 - p) * (probs.square() @ window_v.square())
    module.train()
    many = reformer_module.SortedChunks(*(t.expand(copies, *t.shape[1:]) for t in chunks))
    draws = getattr(module, f"_chunk_attention_{backend}")(many)[0]
    draws = draws.reshape(copies, *mean.shape[1:])
    real = chunks.mask[0].unsqueeze(-1).expand_as(mean[0])  # outputs of real queries
    standard_error = (variance[0] / copies).sqrt()
    assert ((draws.mean(0) - mean[0]).abs() <= 5 * standard_error + 1e-12)[real].all()
    ratio = draws.var(0)[real] / variance[0][real]
    assert (ratio - 1).abs().max() < 0.1, ratio


# ------------------------------------------------------------------ MEGA: fused attention, initialisation


def mega(attention_impl: str, **params) -> MegaMixer:
    torch.manual_seed(0)
    mixer = MegaMixer(
        d_model=6, d_hidden=10, qkv_dim=4, max_len=32, ema_dim=3, attention_impl=attention_impl, **params
    ).double()
    with torch.no_grad():  # scales of order 1 (the release starts them near 0): attention far from uniform
        mixer.qk_scale.normal_()
        mixer.qk_offset.normal_(std=0.5)
        mixer.rel_bias.bias.normal_()
    return mixer


@pytest.mark.parametrize("chunk_size", [None, 8])
def test_mega_sdpa_equals_materialized_forward_and_gradients(chunk_size):
    """Training mode, dropout off; 30 tokens (chunks of 8: the last one padded), a short sample, a sample
    with one real token (chunks made only of padding) and a full one."""
    plain = mega("materialized", chunk_size=chunk_size).train()
    fast = mega("sdpa", chunk_size=chunk_size).train()
    fast.load_state_dict(plain.state_dict())
    x, mask = padded_batch(3, 30, 6, lengths=[30, 13, 1])
    assert_same(outputs_and_grads(fast, x, mask), outputs_and_grads(plain, x, mask))
    x_full = x[:1]
    assert_same(outputs_and_grads(fast, x_full, None), outputs_and_grads(plain, x_full, None))


@pytest.mark.parametrize("value_split", [1, 2])
@pytest.mark.parametrize("chunk_size", [None, 8])
def test_mega_flex_equals_materialized_forward_and_gradients(chunk_size, value_split):
    """The flex path (its differentiable emulation on CPU, ``_flex.dense_flex``: the same score_mod, the
    relative bias read per score): same outputs at the real positions, input and parameter gradients
    (the relative bias's included), with padding and chunks made only of padding. Its padding block mask
    leaves a padded query's output 0 (materialized: the real keys' average), which no later layer reads
    (the model-level test below), so the loss here reads the real positions."""
    plain = mega("materialized", chunk_size=chunk_size).train()
    fast = mega("flex", chunk_size=chunk_size, flex_value_split=value_split).train()
    fast.load_state_dict(plain.state_dict())
    x, mask = padded_batch(3, 30, 6, lengths=[30, 13, 1])

    def real_positions(module):
        return lambda inputs, m: module(inputs, m) * m[..., None]

    assert_same(
        outputs_and_grads(fast, x, mask, call=real_positions(fast)),
        outputs_and_grads(plain, x, mask, call=real_positions(plain)),
    )
    x_full = x[:1]
    assert_same(outputs_and_grads(fast, x_full, None), outputs_and_grads(plain, x_full, None))
    with torch.no_grad():  # eval: flex_attention itself (eager on CPU), score_mod and key bias included
        torch.testing.assert_close(fast.eval()(x, mask)[mask], plain.eval()(x, mask)[mask], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("chunk_size", [None, 16])
def test_mega_model_with_flex_padding_tiles_skipped_equals_materialized(chunk_size):
    """The whole MEGA classifier (two layers, mean pooling over real tokens) on a padded batch: the flex
    path, which skips padding tiles and leaves padded queries at 0, gives the materialized path's logits
    and every parameter gradient (float64)."""
    from repro.models.model import build_model
    from repro.tasks.base import Split, TaskData

    cfg = {"backbone": "mega", "d_model": 8, "d_hidden": 12, "qkv_dim": 4, "depth": 2, "d_ff": 16,
           "ema_dim": 3, "chunk_size": chunk_size, "dropout": 0.0, "attention_dropout": 0.0,
           "pooling": "mean", "cls_token": False}  # fmt: skip
    ids = torch.randint(1, 17, (4, 40), generator=torch.Generator().manual_seed(3))
    ids[torch.arange(40)[None, :] >= torch.tensor([40, 23, 9, 1])[:, None]] = 0
    split = Split(ids.numpy(), np.zeros(4, dtype=np.int64))
    task = TaskData("listops", split, split, split, 10, 17, 40, pad_id=0)
    results = []
    for impl in ("materialized", "flex"):
        torch.manual_seed(0)
        model = build_model({**cfg, "attention_impl": impl}, task).double().train()
        logits = model(ids)
        (logits * torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view_as(logits)).sum().backward()
        results.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (plain, plain_grads), (fast, fast_grads) = results
    torch.testing.assert_close(fast, plain, rtol=1e-10, atol=1e-12)
    assert plain_grads.keys() == fast_grads.keys()
    for name in plain_grads:
        torch.testing.assert_close(fast_grads[name], plain_grads[name], rtol=1e-9, atol=1e-12, msg=name)


def test_mega_flex_dropout_keeps_one_mask_across_value_splits():
    """With attention dropout the value halves of ``flex_value_split=2`` see the same keep-mask: the output
    equals the unsplit call's with the same random draws."""
    whole = mega("flex", attention_dropout=0.3).train()
    split = mega("flex", attention_dropout=0.3, flex_value_split=2).train()
    split.load_state_dict(whole.state_dict())
    x, mask = padded_batch(2, 30, 6, lengths=[30, 13])
    torch.manual_seed(5)
    y_whole = whole(x, mask)
    torch.manual_seed(5)
    y_split = split(x, mask)
    torch.testing.assert_close(y_split, y_whole, rtol=1e-10, atol=1e-10)
    assert (y_whole - whole.eval()(x, mask)).abs().max() > 1e-7  # dropout acted (float64 rounding is ~1e-16)


def test_mega_sdpa_shares_one_bias_matrix_across_the_batch(monkeypatch):
    calls = []

    def spy(q, k, v, attn_mask=None, **kwargs):
        calls.append((tuple(q.shape), tuple(attn_mask.shape)))
        return sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(mega_module.F, "scaled_dot_product_attention", spy)
    x, mask = padded_batch(3, 30, 6, lengths=[30, 13, 1])
    mega("sdpa", chunk_size=8).eval()(x, mask)
    assert calls == [((3 * 4, 1, 8, 8), (8, 8))]  # qkv_dim 4 + the folded padding feature, padded to 8


def test_mega_attention_impl_choice(monkeypatch):
    mixer = MegaMixer(d_model=4, d_hidden=4, qkv_dim=4, max_len=8)
    assert mixer.resolved_attention_impl(torch.device("cpu")) == "materialized"
    monkeypatch.setitem(FAST_DEFAULTS["mega"], "attention_impl", "sdpa")  # the one-line switch
    assert mixer.resolved_attention_impl(torch.device("cuda")) == "sdpa"
    monkeypatch.setitem(FAST_DEFAULTS["mega"], "attention_impl", "flex")
    assert mixer.resolved_attention_impl(torch.device("cuda")) == "flex"
    with pytest.raises(ValueError, match=r"model.attention_impl='fused': choose one of auto, materialized, sdpa, flex"):
        MegaMixer(d_model=4, d_hidden=4, qkv_dim=4, max_len=8, attention_impl="fused")
    with pytest.raises(ValueError, match=r"mega: model.flex_value_split=3 is not one of 'auto', 1, 2, 4"):
        MegaMixer(d_model=4, d_hidden=4, qkv_dim=4, max_len=8, flex_value_split=3)
    with pytest.raises(ValueError, match=r"model.flex_kernel_options=64: give auto, null or a mapping"):
        MegaMixer(d_model=4, d_hidden=4, qkv_dim=4, max_len=8, flex_kernel_options=64)


def test_mega_relative_bias_is_the_toeplitz_matrix_of_its_offsets():
    bias = RelativePositionBias(max_len=9)
    with torch.no_grad():
        bias.bias.copy_(torch.arange(17.0))  # entry m = offset m - 8
    for length in (1, 5, 9):
        i = torch.arange(length)
        want = (i[None, :] - i[:, None] + 8).float()
        torch.testing.assert_close(bias(length), want, rtol=0, atol=0)


def test_mega_initialisation_is_the_releases():
    """Mega's reset_parameters: projections N(0, 0.02) with zero biases, the query/key scales (gamma)
    N(0, 0.02), offsets (beta) 0, relative bias N(0, 0.02); EMA: alpha, delta N(0, 0.2), beta
    N(0, 0.02) + (1, -1, 1, ...), eta (gamma) and omega N(0, 1)."""
    torch.manual_seed(0)
    m = MegaMixer(d_model=256, d_hidden=512, qkv_dim=2048, max_len=4096, ema_dim=16)

    def close(t: torch.Tensor, mean: float, std: float) -> bool:
        n = t.numel()
        return abs(t.mean().item() - mean) < 5 * std / math.sqrt(n) and abs(t.std().item() / std - 1) < 8 / math.sqrt(n)

    for linear in (m.v_proj, m.mx_proj, m.h_proj):
        assert close(linear.weight, 0.0, 0.02) and (linear.bias == 0).all()
    assert close(m.qk_scale, 0.0, 0.02) and (m.qk_offset == 0).all()
    assert close(m.rel_bias.bias, 0.0, 0.02)
    assert close(m.ema.alpha, 0.0, 0.2) and close(m.ema.delta, 0.0, 0.2)
    signs = torch.tensor([1.0, -1.0] * 8)
    assert close(m.ema.beta - signs, 0.0, 0.02)
    assert close(m.ema.eta, 0.0, 1.0) and close(m.omega, 0.0, 1.0)


def test_every_arm_the_variant_check_orders_has_one_auto_row():
    """``experiments/check_fast.py variants`` times each arm's ``auto`` path (group 0) first."""
    from types import SimpleNamespace

    from repro.bench import fast_variants

    rows = fast_variants.ordered_variants(SimpleNamespace(only=None, variants=None))
    auto_arms = [v.arm for v in rows if v.group == 0]
    assert sorted(auto_arms) == sorted(fast_variants.AUTO_ORDER)

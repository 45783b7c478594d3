"""Tests of the low-rank / kernel / hashing / sorting mixers:
linformer, reformer, sinkhorn, synthesizer, linear, performer.

Exactness claims are checked in float64 against references built here from the
module's own projections; padding invariance is checked in float32 at 1e-5.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_gradients

from repro.original.attention import load_all
from repro.original.attention._lowrank_common import merge_heads

ATTN = load_all()
D, H = 16, 2
DH = D // H
NAMES = ("linformer", "reformer", "sinkhorn", "synthesizer", "linear", "performer")


def build(name: str, max_len: int = 32, dtype=torch.float64, seed: int = 0, **params):
    torch.manual_seed(seed)
    module = ATTN.get(name)(d_model=D, n_heads=H, max_len=max_len, **params)
    return module.to(dtype).eval()


def rand_x(b: int, length: int, dtype=torch.float64, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, length, D, generator=g, dtype=dtype)


def softmax_attention(logits, v, key_mask=None):
    if key_mask is not None:
        logits = logits.masked_fill(~key_mask, float("-inf"))
    return torch.softmax(logits, dim=-1) @ v


def finish(module, heads_out):
    """Merge heads and apply the module's output projection to a reference."""
    return module.out_proj(merge_heads(heads_out))


# --------------------------------------------------------------------------- registry


def test_all_registered_and_run_with_defaults():
    x = rand_x(2, 200, torch.float32)
    mask = torch.ones(2, 200, dtype=torch.bool)
    mask[1, 150:] = False
    for name in NAMES:
        assert name in ATTN
        torch.manual_seed(0)
        module = ATTN.get(name)(d_model=D, n_heads=H, max_len=256)
        y = module(x, mask)
        assert y.shape == x.shape and torch.isfinite(y).all(), name


# --------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("padded", [False, True])
def test_linear_equals_closed_form(padded):
    module = build("linear", eps=0.0)
    x = rand_x(2, 12)
    mask = torch.ones(2, 12, dtype=torch.bool)
    if padded:
        mask[1, 7:] = False
    q, k, v = module.project_qkv(x)
    phi = lambda t: F.elu(t) + 1.0  # noqa: E731
    phi_q, phi_k = phi(q), phi(k) * mask[:, None, :, None]
    ref = (phi_q @ (phi_k.transpose(-1, -2) @ v)) / (phi_q @ phi_k.sum(dim=-2).unsqueeze(-1))
    got = module(x, mask)
    expected = finish(module, ref) * mask[..., None]  # padded queries: 0 by convention
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("share_kv", [True, False])
def test_linformer_identity_projection_equals_full_attention(share_kv):
    length = 12
    module = build("linformer", max_len=20, k=length, share_kv=share_kv)
    module.set_identity_projections()
    x = rand_x(2, length)
    q, k, v = module.project_qkv(x)
    ref = softmax_attention(q @ k.transpose(-1, -2) / math.sqrt(DH), v)
    torch.testing.assert_close(module(x), finish(module, ref), rtol=0, atol=1e-12)


def shared_qk_reference(q, v, allowed, normalize_keys=True):
    """Shared-QK attention restricted to ``allowed [.., L, L]`` with the self-mask
    (self only when nothing else is allowed)."""
    keys = F.normalize(q, dim=-1) if normalize_keys else q
    logits = q @ keys.transpose(-1, -2)
    if not normalize_keys:
        logits = logits / math.sqrt(q.shape[-1])
    eye = torch.eye(q.shape[-2], dtype=torch.bool)
    others = allowed & ~eye
    has_other = others.any(dim=-1, keepdim=True)
    key_mask = torch.where(has_other, others, eye.expand_as(others))
    return softmax_attention(logits, v, key_mask)


@pytest.mark.parametrize(
    "n_buckets,n_hashes,normalize_keys",
    [(1, 1, True), (4, 1, True), (4, 3, True), (2, 2, False)],
)
def test_reformer_single_chunk_equals_shared_qk_attention(n_buckets, n_hashes, normalize_keys):
    length = 12  # chunk_len >= L: one chunk, every query sees every key in every round
    module = build(
        "reformer",
        n_buckets=n_buckets,
        n_hashes=n_hashes,
        chunk_len=length,
        normalize_keys=normalize_keys,
    )
    x = rand_x(2, length)
    q, _, v = module.project_qkv(x)
    allowed = torch.ones(length, length, dtype=torch.bool)
    ref = shared_qk_reference(q, v, allowed, normalize_keys)
    torch.testing.assert_close(module(x), finish(module, ref), rtol=0, atol=1e-12)


def reformer_union_windows(module, q, mask):
    """From the module's own hashing/sorting: which (i, j) share a window in some round."""
    c = module.chunk_len
    chunk_of = module.sort_order(module.hash_buckets(q, mask))[1] // c  # [B, H, r, L]
    ci, cj = chunk_of.unsqueeze(-1), chunk_of.unsqueeze(-2)
    return ((cj == ci) | (cj == ci - 1)).any(dim=2)  # [B, H, L, L]


def test_reformer_enough_rounds_cover_all_pairs():
    length = 8
    module = build("reformer", max_len=8, n_buckets=2, n_hashes=24, chunk_len=4)
    x = rand_x(2, length)
    q, _, v = module.project_qkv(x)
    mask = torch.ones(2, length, dtype=torch.bool)
    assert reformer_union_windows(module, q, mask).all()  # every pair met in some round
    allowed = torch.ones(length, length, dtype=torch.bool)
    ref = shared_qk_reference(q, v, allowed)
    torch.testing.assert_close(module(x), finish(module, ref), rtol=0, atol=1e-12)


@pytest.mark.parametrize("n_hashes", [1, 3])
def test_reformer_equals_softmax_over_union_of_windows(n_hashes):
    length = 16
    module = build("reformer", max_len=16, n_buckets=4, n_hashes=n_hashes, chunk_len=4)
    x = rand_x(2, length)
    q, _, v = module.project_qkv(x)
    mask = torch.ones(2, length, dtype=torch.bool)
    allowed = reformer_union_windows(module, q, mask)
    assert not allowed.all()  # a genuinely sparse pattern
    ref = shared_qk_reference(q, v, allowed)
    torch.testing.assert_close(module(x), finish(module, ref), rtol=0, atol=1e-12)


@pytest.mark.parametrize("fixed, dot_product", [(False, False), (True, False), (False, True)])
def test_synthesizer_random_with_given_matrix(fixed, dot_product):
    """softmax(R) V, or with dot_product (the release's SynthesizerBlock) softmax(q.k / sqrt(dh) + R) V."""
    length = 10
    module = build("synthesizer", max_len=16, variant="random", fixed=fixed, dot_product=dot_product)
    assert isinstance(module.random_logits, torch.nn.Parameter) != fixed
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(H, length, length, generator=g, dtype=torch.float64) * 2
    module.set_random_logits(logits)
    x = rand_x(2, length)
    q, k, v = module.project_qkv(x)
    if dot_product:
        logits = logits + q @ k.transpose(-1, -2) / math.sqrt(D // H)
    ref = torch.softmax(logits, dim=-1) @ v
    torch.testing.assert_close(module(x), finish(module, ref), rtol=0, atol=1e-12)


def test_synthesizer_random_logits_start_as_flax_s_xavier_uniform_of_their_shape():
    """flax's xavier_uniform on [H, n, m]: fans H*n and H*m (the heads are its receptive field)."""
    n, k = 64, 8
    random = build("synthesizer", max_len=n, variant="random").random_logits
    factorized = build("synthesizer", max_len=n, variant="factorized_random", k=k)
    left, right = factorized.random_left, factorized.random_right
    for weights, bound in (
        (random, math.sqrt(6 / (2 * H * n))),
        *((w, math.sqrt(6 / (H * (n + k)))) for w in (left, right)),
    ):
        assert weights.abs().max() <= bound and weights.abs().max() > 0.95 * bound
        assert abs(weights.std().item() - bound / math.sqrt(3)) < 0.05 * bound


def assert_backends_agree(plain, fused, x: torch.Tensor, real: list[int]) -> None:
    """``fused`` (given ``plain``'s weights) computes ``plain``'s outputs and every gradient to 1e-10,
    with each sample of ``x`` holding ``real[i]`` real tokens."""
    fused.load_state_dict(plain.state_dict())
    mask = torch.arange(x.shape[1])[None, :] < torch.tensor(real)[:, None]
    results = []
    for module in (plain, fused):
        xg = x.clone().requires_grad_(True)
        y = module(xg, mask)
        (y.square().sum() + y.sum()).backward()
        results.append([y.detach(), xg.grad] + [p.grad for p in module.parameters() if p.requires_grad])
    for a, b in zip(*results, strict=True):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(b, a, rtol=0, atol=1e-10)


def assert_unbiased_dropout(module, x: torch.Tensor) -> None:
    """Unrenormalised attention dropout scaled by 1/(1-p): over 2,000 draws (one mask per sample of a
    batch) the mean output is the output without dropout."""
    with torch.no_grad():
        expected = module(x)
        module.train()
        torch.manual_seed(0)
        draws = module(x.expand(2000, -1, -1))
    assert not torch.allclose(draws[0], draws[1])
    spread = draws.std(dim=0) / math.sqrt(len(draws))
    assert ((draws.mean(dim=0) - expected[0]).abs() <= 5 * spread + 1e-12).all()


SDPA_BACKEND_CASES = [  # (mechanism, max_len, its settings, the padded sample's real tokens)
    ("synthesizer", 80, dict(variant="random"), 33),
    ("synthesizer", 80, dict(variant="factorized_random", k=8), 33),
    ("synthesizer", 80, dict(variant="dense"), 33),
    ("synthesizer", 80, dict(variant="random", dot_product=True), 33),
    ("synthesizer", 80, dict(variant="factorized_random", k=8, dot_product=True), 33),
    ("linformer", 32, dict(), 13),
    ("linformer", 32, dict(share_kv=False, k=8), 13),
]


@pytest.mark.parametrize("name,max_len,params,padded", SDPA_BACKEND_CASES)
@pytest.mark.parametrize("shorter", [10, 0])
def test_sdpa_backend_equals_the_materialized_one(name, max_len, params, padded, shorter):
    length = max_len - shorter
    plain = build(name, max_len=max_len, backend="materialized", **params).train()  # dropout 0
    fused = build(name, max_len=max_len, backend="sdpa", **params).train()
    assert_backends_agree(plain, fused, rand_x(3, length), [length, padded, 0])  # full, padded, fully padded


def test_synthesizer_sdpa_dropout_is_unbiased_dropout_of_the_probabilities():
    assert_unbiased_dropout(
        build("synthesizer", max_len=24, backend="sdpa", variant="random", dropout=0.5), rand_x(1, 20)
    )


def test_linformer_sdpa_dropout_is_unbiased_dropout_of_the_probabilities():
    assert_unbiased_dropout(build("linformer", max_len=24, backend="sdpa", k=8, dropout=0.5), rand_x(1, 20))


def assert_compiled_equals_eager(eager, module, mask, params=()) -> None:
    """``eager(module, q, k, v, mask)`` through torch.compile (on the CPU here; ``on_device`` compiles only
    on CUDA) equals it run eagerly in float64: the output, and the gradients of q, k, v and ``params``."""
    from repro.original.attention._lowrank_common import compiled, on_device

    assert on_device(eager, torch.device("cpu"), "compiled") is eager
    q, k, v = (torch.randn(2, H, mask.shape[1], DH, dtype=torch.float64, requires_grad=True) for _ in range(3))
    weights = torch.linspace(-1, 1, DH, dtype=torch.float64)
    results = []
    for fn in (eager, compiled(eager)):
        out = fn(module, q, k, v, mask)
        results.append((out.detach(), torch.autograd.grad((out * weights).sum(), [q, k, v, *params])))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=0, atol=1e-10)
    for from_compiled, from_eager in zip(results[1][1], results[0][1], strict=True):
        torch.testing.assert_close(from_compiled, from_eager, rtol=0, atol=1e-10)


@pytest.mark.parametrize("backend", ["sdpa", "materialized"])
def test_linformer_compiled_attend_equals_the_eager_one(backend):
    """``attend=compiled`` runs ``attend_projected`` through torch.compile (on CUDA in the mixer; compiled
    here on CPU): with padding (one sample of 9 of 20 tokens), forward and gradients, the projection E's
    included, equal the eager path in float64."""
    module = build("linformer", max_len=24, backend=backend, k=8)
    mask = torch.arange(20)[None, :] < torch.tensor([20, 9])[:, None]
    assert_compiled_equals_eager(type(module).attend_projected, module, mask, [module.E])


@pytest.mark.parametrize("attend", ["eager", "compiled"])
def test_linformer_refuses_a_sequence_longer_than_its_projection(attend):
    """E has max_len columns: a longer sequence is refused before anything is computed, on either path."""
    module = build("linformer", max_len=16, k=4, attend=attend)
    with pytest.raises(ValueError, match=r"^LinformerAttention: sequence length 17 exceeds max_len=16$"):
        module(rand_x(1, 17))


@pytest.mark.parametrize(
    "k, sdpa_min_k, expected",
    [
        (16, "auto", "materialized"),
        (255, "auto", "materialized"),
        (256, "auto", "sdpa"),
        (4, 4, "sdpa"),
        (4, 5, "materialized"),
    ],
)
def test_linformer_auto_backend_by_k(monkeypatch, k, sdpa_min_k, expected):
    from repro.original.attention.fast_defaults import FAST_DEFAULTS

    monkeypatch.setitem(FAST_DEFAULTS["linformer"], "sdpa_min_k", 256)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(args[1].shape[-2])
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    x, mask = rand_x(2, 12), torch.arange(12)[None, :] < torch.tensor([12, 7])[:, None]
    auto = build("linformer", max_len=max(k, 12), k=k, sdpa_min_k=sdpa_min_k)
    assert auto.resolved_backend() == expected
    got = auto(x, mask)
    assert calls == ([k] if expected == "sdpa" else [])
    explicit = build("linformer", max_len=max(k, 12), k=k, backend=expected)  # same seed: same parameters
    torch.testing.assert_close(got, explicit(x, mask), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"linformer: attention_params.sdpa_min_k=0 is not auto or an int >= 1"):
        build("linformer", sdpa_min_k=0)


def test_synthesizer_backend_is_checked():
    with pytest.raises(ValueError, match="unknown synthesizer backend 'fast'; choose from"):
        build("synthesizer", backend="fast")
    with pytest.raises(ValueError, match="^dot_product=True is implemented for the random variants, not for variant"):
        build("synthesizer", variant="dense", dot_product=True)
    assert build("synthesizer").backend == "auto"


@pytest.mark.parametrize("sdpa_mask", ["bias", "fold"])
@pytest.mark.parametrize(
    "params",
    [dict(block_size=4), dict(block_size=5, combine="sum", sort_activation="softmax"), dict(block_size=7, n_iters=5)],
)
def test_sinkhorn_sdpa_backend_equals_the_materialized_one(params, sdpa_mask):
    plain = build("sinkhorn", max_len=64, backend="materialized", **params).train()  # dropout 0
    fused = build("sinkhorn", max_len=64, backend="sdpa", sdpa_mask=sdpa_mask, **params).train()
    fused.load_state_dict(plain.state_dict())
    x = rand_x(3, 43)
    mask = torch.arange(43)[None, :] < torch.tensor([43, 17, 0])[:, None]  # a partial last block, padding
    # 35 = 5 x 7: with block 5 or 7 and no padding, no mask; 40: whole blocks of 4 or 5, padded samples
    for length, lengths in ((43, mask), (35, None), (40, mask)):
        results = []
        for module in (plain, fused):
            xg = x[:, :length].clone().requires_grad_(True)
            y = module(xg, None if lengths is None else lengths[:, :length])
            (y.square().sum() + y.sum()).backward()
            results.append([y.detach(), xg.grad] + [p.grad for p in module.parameters()])
            module.zero_grad()
        for a, b in zip(*results, strict=True):
            assert torch.isfinite(b).all()
            torch.testing.assert_close(b, a, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="unknown sinkhorn backend 'fast'; choose from"):
        build("sinkhorn", backend="fast")


def release_sinkhorn_reference(x, mixer, mask, block_size, max_num_blocks=25):
    """sinkhorn_attention.py done literally in float32 (non-causal, sort_activation 'softmax'), with a
    sort net of the release's shape (dh -> max_num_blocks, no bias) whose output should not matter."""
    b, length, d = x.shape
    h = mixer.n_heads
    dh, nb = d // h, length // block_size
    q, k, v = (p(x).view(b, length, h, dh) for p in (mixer.q_proj, mixer.k_proj, mixer.v_proj))
    bq, bk, bv = (t.reshape(b, block_size, nb, h, dh) for t in (q, k, v))
    sort_net = torch.randn(dh, max_num_blocks, generator=torch.Generator().manual_seed(3))
    permutation = torch.softmax((bk.sum(dim=1) @ sort_net)[..., :nb], dim=-1)  # [b, nb, h, <=25]
    sorted_key = torch.einsum("bskhd,bnhl->bsnhd", bk, permutation)
    sorted_value = torch.einsum("bskhd,bnhl->bsnhd", bv, permutation)
    blocks = mask.reshape(b * nb, block_size)
    padding = (blocks[:, :, None] & blocks[:, None, :]).reshape(b, nb, block_size, block_size)
    sorted_padding = torch.einsum("bksj,bnhl->bnsj", padding.float(), permutation)

    def attention(keys, values, allowed):  # local_dot_product_attention over axis 1
        bias = torch.where(allowed, 0.0, -1e10)[:, :, None]  # [b, nb, 1, s, s]
        logits = torch.einsum("binhd,bjnhd->bnhij", bq / dh**0.5, keys) + bias
        return torch.einsum("bnhij,bjnhd->binhd", torch.softmax(logits, dim=-1), values)

    out = attention(bk, bv, padding) + attention(sorted_key, sorted_value, sorted_padding > 0)
    return mixer.out_proj(out.reshape(b, length, d))


@pytest.mark.parametrize("lengths", [(40, 40), (40, 13), (40, 5)])
def test_sinkhorn_release_mode_is_the_release_s_attention(lengths):
    """release=True against sinkhorn_attention.py done literally in float32: strided groups, sorted keys
    that sum the sorting network away, two softmaxes added, the misaligned padding masks; forward and
    gradients (the literal version's sort net gets none)."""
    torch.manual_seed(0)
    block_size, d = 8, 16
    mixer = ATTN.get("sinkhorn")(d_model=d, n_heads=2, max_len=40, block_size=block_size, release=True)
    assert mixer.sort_net is None and mixer.RELEASE_ZERO_MASK == "padding"
    mask = torch.arange(40)[None, :] < torch.tensor(lengths)[:, None]
    x = torch.randn(2, 40, d, requires_grad=True)
    out = mixer(x, mask)
    expected = release_sinkhorn_reference(x, mixer, mask, block_size)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert_same_gradients(out, expected, [x, *mixer.parameters()], rtol=1e-4, atol=1e-4)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as on the GPU: bf16 projections, float32 logits
        torch.testing.assert_close(mixer(x, mask).float(), out, rtol=0.05, atol=0.05)
    with pytest.raises(ValueError, match="length 41 is not a multiple of block_size=8"):
        mixer(torch.randn(1, 41, d))
    with pytest.raises(ValueError, match="attention_params.combine has no meaning with release=true"):
        ATTN.get("sinkhorn")(d_model=d, n_heads=2, max_len=40, combine="sum", release=True)


def test_sinkhorn_compiled_balance_equals_the_eager_one():
    """``balance=compiled`` runs ``sinkhorn_log`` through torch.compile (on CUDA in the mixer; compiled here on
    CPU, the same graph): forward and gradient equal the eager iterations in float64."""
    from repro.original.attention._lowrank_common import compiled
    from repro.original.attention.sinkhorn import sinkhorn_log

    logits = torch.randn(2, H, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    logits[1, :, 4:, :4] = torch.finfo(torch.float64).min  # a padding block, as the mixer writes it
    logits[1, :, :4, 4:] = torch.finfo(torch.float64).min
    results = []
    for fn in (sinkhorn_log, compiled(sinkhorn_log)):
        x = logits.clone().requires_grad_(True)
        y = fn(x, 7)
        (y.square() * torch.arange(6.0, dtype=torch.float64)).sum().backward()
        results.append((y.detach(), x.grad))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=0, atol=1e-12)
    torch.testing.assert_close(results[1][1], results[0][1], rtol=0, atol=1e-12)


def test_a_function_compiled_inside_a_compiled_one_still_compiles_alone():
    """``on_device`` inside a function being compiled returns the function itself: a later call outside
    still compiles it (traced through its compiled wrapper, dynamo left it eager: Sinkhorn's balancing
    after its compiled ``attend``)."""
    from torch._dynamo.utils import counters

    from repro.original.attention._lowrank_common import compiled, on_device

    cuda = torch.device("cuda")  # on_device reads only the device type; the tensors stay on the CPU

    def balance(x):
        return torch.softmax(x, dim=-1) * 2

    def attend(x):
        return on_device(balance, cuda, "compiled")(x) + 1

    x = torch.randn(3, 5)
    counters.clear()
    expected = torch.softmax(x, dim=-1) * 2
    torch.testing.assert_close(compiled(attend)(x), expected + 1)
    assert counters["stats"]["unique_graphs"] == 1
    torch.testing.assert_close(on_device(balance, cuda, "compiled")(x), expected)
    assert counters["stats"]["unique_graphs"] == 2  # balance compiled on its own


def test_compiling_raises_dynamo_s_recompile_limit():
    """Each length, module setting and grad mode is one graph of a compiled function: ``compiled`` lets
    dynamo keep RECOMPILE_LIMIT of them (past its default of 8 the function would silently run eagerly).

    dynamo's config is a module whose keys live outside its ``__dict__``: pytest's monkeypatch (9.2) undoes a
    setattr there by deleting the key, which breaks every later compile in the worker, so the test saves and
    restores the limits itself."""
    import torch._dynamo

    from repro.original.attention._flex import RECOMPILE_LIMIT
    from repro.original.attention._lowrank_common import compiled

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    keys = (name, "accumulated_recompile_limit", "accumulated_cache_size_limit")
    names = [key for key in keys if hasattr(config, key)]
    saved = {key: getattr(config, key) for key in names}
    setattr(config, name, 8)
    try:

        def scale(x):
            return x * 2

        compiled(scale)
        assert getattr(config, name) == RECOMPILE_LIMIT
    finally:
        for key, value in saved.items():
            setattr(config, key, value)
    assert {key: getattr(config, key) for key in names} == saved


def test_sinkhorn_compiled_attend_equals_the_eager_one():
    """``attend=compiled`` runs ``attend_blocks`` through torch.compile (on CUDA in the mixer; compiled here on
    CPU): with padding (43 tokens in blocks of 4, one sample of 17, so the key mask is folded), forward
    and gradients equal the eager path in float64."""
    module = build("sinkhorn", max_len=64, backend="sdpa", sdpa_mask="fold", block_size=4)
    mask = torch.arange(43)[None, :] < torch.tensor([43, 17])[:, None]
    assert_compiled_equals_eager(type(module).attend_blocks, module, mask)


def test_sinkhorn_fold_passes_no_attn_mask(monkeypatch):
    """``sdpa_mask=fold``: one SDPA call per block pair without an ``attn_mask`` (the flash kernel's
    condition), the key mask in one extra feature and the values padded to the same width."""
    calls = []

    def spy(q, k, v, attn_mask=None, **kwargs):
        calls.append((tuple(q.shape), tuple(k.shape), tuple(v.shape), attn_mask))
        return sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    module = build("sinkhorn", max_len=64, backend="sdpa", sdpa_mask="fold", block_size=4).eval()
    module(rand_x(2, 43), torch.arange(43)[None, :] < torch.tensor([43, 17])[:, None])
    blocks = 11  # 43 tokens in blocks of 4
    assert calls == [((2, H * blocks, 4, 16), (2, H * blocks, 8, 16), (2, H * blocks, 8, 16), None)]


def test_sinkhorn_folds_a_padded_length_without_a_host_check(monkeypatch):
    """A length padded to whole blocks has masked keys for certain: the mask is folded without reading it
    back (no ``Tensor.__bool__``, a host sync on a GPU); at a length of whole blocks the mask is checked."""
    reads = []
    to_bool = torch.Tensor.__bool__

    def spy(tensor):
        reads.append(tuple(tensor.shape))
        return to_bool(tensor)

    module = build("sinkhorn", max_len=64, backend="sdpa", sdpa_mask="fold", block_size=4).eval()
    monkeypatch.setattr(torch.Tensor, "__bool__", spy)
    for length, expected_reads in ((43, 0), (44, 1)):
        reads.clear()
        module(rand_x(2, length), torch.arange(length)[None, :] < torch.tensor([length, 17])[:, None])
        assert len(reads) == expected_reads, (length, reads)


@pytest.mark.parametrize("widths", [(3, 5), (4, 4), (8, 8), (12, 4)], ids=lambda w: f"qk{w[0]}-v{w[1]}")
def test_sdpa_aligned_is_sdpa_on_head_widths_padded_to_8(monkeypatch, widths):
    """The padded call computes what SDPA computes on the unpadded heads (float64, mask and scale
    given), and the fused kernels' condition holds: q, k and v reach SDPA one multiple of 8 wide."""
    from repro.original.attention._common import sdpa_aligned

    qk, vd = widths
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 7, qk, dtype=torch.float64, generator=gen) for _ in range(2))
    v = torch.randn(2, 3, 7, vd, dtype=torch.float64, generator=gen)
    bias = torch.randn(7, 7, dtype=torch.float64, generator=gen)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    expected = sdpa(q, k, v, attn_mask=bias, scale=0.3)
    seen = []

    def spy(q, k, v, **kwargs):
        seen.append((q.shape[-1], k.shape[-1], v.shape[-1]))
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    torch.testing.assert_close(sdpa_aligned(q, k, v, attn_mask=bias, scale=0.3), expected, rtol=0, atol=1e-12)
    width = 8 * -(-max(qk, vd) // 8)
    assert seen == [(width, width, width)]


NARROW_HEAD_CASES = [  # LRA's image and Pathfinder Reformer and Pathfinder's Sinkhorn have 4-wide heads
    ("reformer", dict(n_buckets=4, chunk_len=5, redraw=False)),
    ("sinkhorn", dict(block_size=4, sdpa_mask="bias")),
    ("sinkhorn", dict(block_size=4, sdpa_mask="fold")),
    ("synthesizer", dict(variant="random")),
]


@pytest.mark.parametrize("name,params", NARROW_HEAD_CASES, ids=lambda c: c if isinstance(c, str) else "")
def test_narrow_heads_reach_sdpa_eight_wide_and_equal_the_materialized_path(monkeypatch, name, params):
    """Heads 4 wide: every SDPA call gets q, k and v one multiple of 8 wide (the fused kernels'
    condition), and outputs and gradients equal the materialised path's (dropout off, padding)."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    widths = set()

    def spy(q, k, v, **kwargs):
        widths.add((q.shape[-1], k.shape[-1], v.shape[-1]))
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    modules = []
    for backend in ("materialized", "sdpa"):
        torch.manual_seed(0)
        module = ATTN.get(name)(d_model=8, n_heads=2, max_len=40, backend=backend, **params)
        modules.append(module.double().train())
    assert_backends_agree(*modules, rand_x(3, 37, seed=2)[..., :8], [37, 13, 0])
    assert widths and all(w % 8 == 0 and len(set(ws)) == 1 for ws in widths for w in ws)


def test_sinkhorn_auto_backend_by_length(monkeypatch):
    from repro.original.attention.fast_defaults import FAST_DEFAULTS

    module = build("sinkhorn", max_len=64)
    monkeypatch.setitem(FAST_DEFAULTS["sinkhorn"], "sdpa_min_len", 2048)
    assert module.resolved_backend(torch.device("cuda"), 1024) == "materialized"
    assert module.resolved_backend(torch.device("cuda"), 4097) == "sdpa"
    assert module.resolved_backend(torch.device("cpu"), 4097) == "materialized"
    assert build("sinkhorn", max_len=64, sdpa_min_len=0).resolved_backend(torch.device("cuda"), 8) == "sdpa"
    with pytest.raises(ValueError, match=r"sinkhorn: attention_params.sdpa_mask='none' is not one of 'auto', 'bias'"):
        build("sinkhorn", sdpa_mask="none")
    with pytest.raises(ValueError, match=r"sinkhorn: attention_params.sdpa_min_len=-1 is not auto or a length"):
        build("sinkhorn", sdpa_min_len=-1)
    with pytest.raises(ValueError, match=r"sinkhorn: attention_params.attend='jit' is not one of 'auto', 'eager'"):
        build("sinkhorn", attend="jit")


# --------------------------------------------------------------------------- approximation


def test_performer_error_falls_with_more_features():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, H, 32, DH, generator=g, dtype=torch.float64) * 0.8 for _ in range(3))
    mask = torch.ones(2, 32, dtype=torch.bool)
    exact = softmax_attention(q @ k.transpose(-1, -2) / math.sqrt(DH), v)
    errors = []
    for m in (16, 256, 4096):
        module = build("performer", nb_features=m)
        per_seed = []
        for seed in range(4):
            module.redraw_features(torch.Generator().manual_seed(100 + seed))
            approx = module.attend(q, k, v, mask)
            per_seed.append((approx - exact).abs().mean().item())
        errors.append(sum(per_seed) / len(per_seed))
    assert errors[0] > errors[1] > errors[2], errors
    # 1/sqrt(m) only asymptotically: the positive features are log-normal, heavy-tailed
    assert errors[2] < 0.5 * errors[0], errors


def test_performer_redraw_interval():
    module = build("performer", nb_features=32, redraw_interval=3).train()
    x = rand_x(1, 6)
    seen = []
    for _ in range(4):
        module(x)
        seen.append(module.projection.clone())
    # drawn at call 0 and call 3; kept for calls 1 and 2
    assert torch.equal(seen[0], seen[1]) and torch.equal(seen[1], seen[2])
    assert not torch.equal(seen[2], seen[3])
    frozen = module.projection.clone()
    module.eval()(x)
    assert torch.equal(frozen, module.projection)


def test_sinkhorn_matrix_is_doubly_stochastic():
    # n_iters=50: Sinkhorn converges linearly; the default 20 leaves rows within
    # ~1e-2 here (columns are exact after every iteration), see sinkhorn.py.
    module = build("sinkhorn", max_len=40, dtype=torch.float32, block_size=4, n_iters=50)
    x = rand_x(2, 40, torch.float32)
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[1, 21:] = False  # blocks 0-5 real (5 partial), 6-9 padding
    _, k, _ = module.project_qkv(x)
    perm = module.sorting_matrix(k, mask)
    assert perm.shape == (2, H, 10, 10)
    ones = torch.ones(2, H, 10)
    torch.testing.assert_close(perm.sum(-1), ones, rtol=0, atol=1e-3)
    torch.testing.assert_close(perm.sum(-2), ones, rtol=0, atol=1e-3)
    assert (perm[1, :, :6, 6:] == 0).all() and (perm[1, :, 6:, :6] == 0).all()
    torch.testing.assert_close(perm[1, :, 6:, 6:], torch.eye(4).expand(H, 4, 4))


# --------------------------------------------------------------------------- padding

PADDING_CASES = [
    ("linformer", {}),
    ("linformer", {"share_kv": False, "k": 8}),
    ("reformer", {"n_buckets": 4, "n_hashes": 1, "chunk_len": 3}),
    ("reformer", {"n_buckets": 4, "n_hashes": 3, "chunk_len": 4}),
    ("reformer", {"n_buckets": 4, "n_hashes": 1, "chunk_len": 3, "backend": "sdpa"}),
    ("reformer", {"n_buckets": 4, "n_hashes": 3, "chunk_len": 4, "backend": "sdpa"}),
    ("sinkhorn", {"block_size": 4}),
    ("sinkhorn", {"block_size": 4, "combine": "sum", "sort_activation": "softmax"}),
    ("synthesizer", {"variant": "dense"}),
    ("synthesizer", {"variant": "random"}),
    ("synthesizer", {"variant": "factorized_random", "k": 8}),
    ("linear", {}),
    ("performer", {"nb_features": 64}),
    ("performer", {"kernel": "relu"}),
]
CASE_IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in p.items()) or 'default'}" for n, p in PADDING_CASES]


@pytest.mark.parametrize("name,params", PADDING_CASES, ids=CASE_IDS)
def test_appending_padding_leaves_real_outputs_unchanged(name, params):
    # Right padding only. Linformer and Synthesizer tie parameters to absolute
    # positions (columns of E/F, rows/columns of R): appending padding keeps
    # every real token at its position, so the invariance is exact for them too
    # (Linformer because padded keys/values are zeroed before E, F; Synthesizer
    # because padded columns are masked). Left padding or shifts are NOT
    # invariant for those two and are not tested. Reformer/Performer run in eval
    # mode, so their rotations/features are the fixed buffers.
    module = build(name, max_len=32, dtype=torch.float32, **params)
    lengths, total = (11, 6), 19
    x = rand_x(2, total, torch.float32, seed=5) * 3.0  # junk in the padded slots
    mask = torch.arange(total)[None, :] < torch.tensor(lengths)[:, None]
    padded_out = module(x, mask)
    assert torch.isfinite(padded_out).all()
    for i, n in enumerate(lengths):
        alone = module(x[i : i + 1, :n])
        torch.testing.assert_close(padded_out[i : i + 1, :n], alone, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name,params", PADDING_CASES, ids=CASE_IDS)
def test_no_nan_with_padding_forward_and_backward(name, params):
    torch.manual_seed(0)
    module = ATTN.get(name)(d_model=D, n_heads=H, max_len=32, dropout=0.1, **params).train()
    x = rand_x(4, 20, torch.float32, seed=7).requires_grad_(True)
    mask = torch.ones(4, 20, dtype=torch.bool)
    mask[1, 9:] = False
    mask[2, 1:] = False  # a single real token
    mask[3, :] = False  # no real token at all
    y = module(x, mask)
    assert torch.isfinite(y).all()
    assert (y[~mask] == 0).all()  # padded queries: exactly 0
    y.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    for p in module.parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all()


def test_linformer_identity_is_not_masked_attention_under_padding():
    """Documents the limit stated in linformer.py: with k = L identity
    projections, zeroed padded keys still take softmax mass (logit 0)."""
    length = 10
    module = build("linformer", max_len=10, k=length)
    module.set_identity_projections()
    x = rand_x(1, length)
    mask = torch.ones(1, length, dtype=torch.bool)
    mask[0, 6:] = False
    q, k, v = module.project_qkv(x)
    masked = softmax_attention(q @ k.transpose(-1, -2) / math.sqrt(DH), v, mask[:, None, None, :])
    assert not torch.allclose(module(x, mask)[:, :6], finish(module, masked)[:, :6], atol=1e-6)

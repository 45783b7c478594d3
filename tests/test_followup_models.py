"""The follow-up's other sequence models: gMLP's long convolution, S4D, S5, MEGA.

Each layer is checked against a reference written here: the FFT convolution against direct
sums, S4D's kernel against its recurrence, S5's parallel scan against the sequential
recurrence, MEGA's EMA against the follow-up study, eq. 4 step by step; then shapes, padding and the arms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import SHORT_LISTOPS_OVERRIDES, composed, read_json, run_cli

from repro.followup.fftconv import fft_conv, two_sided
from repro.followup.gmlp import GMLPMixer, SpatialGatingUnit
from repro.followup.mega import MegaFeedForward, MegaMixer, MultiDimEMA, build_mega_layers
from repro.followup.s4 import S4DMixer, s4d_eigenvalues
from repro.followup.s5 import S5SSM, S5Mixer, block_hippo_n, hippo_legs, hippo_n_eig, scan_time_invariant
from repro.models.model import ResidualSublayer, SequenceClassifier
from repro.run.runner import execute
from repro.run.settings import arm_tasks, resolve

ARMS = ("gmlp", "s4", "s5", "mega")
TASKS = {"listops", "text", "retrieval", "image", "pathfinder", "pathx"}


# ------------------------------------------------------------------ the FFT long convolution


def direct_conv(u: np.ndarray, kernel: np.ndarray, left: int) -> np.ndarray:
    """y[..., t] = sum_m kernel[..., m] u[..., t - (m - left)], inputs outside [0, L) zero: explicit sums."""
    length = u.shape[-1]
    y = np.zeros(np.broadcast_shapes(u.shape, kernel.shape[:-1] + (length,)))
    for t in range(length):
        for m in range(kernel.shape[-1]):
            s = t - (m - left)
            if 0 <= s < length:
                y[..., t] += kernel[..., m] * u[..., s]
    return y


def test_causal_fft_conv_equals_np_convolve():
    rng = np.random.default_rng(0)
    u, k = rng.normal(size=37), rng.normal(size=37)
    got = fft_conv(torch.from_numpy(u), torch.from_numpy(k), left=0).numpy()
    np.testing.assert_allclose(got, np.convolve(u, k)[:37], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("length,k,left", [(23, 7, 3), (23, 45, 22), (23, 9, 0), (23, 9, 8), (10, 61, 30), (31, 5, 4)])
def test_fft_conv_equals_direct_sums(length, k, left):
    rng = np.random.default_rng(length + k + left)
    u, kernel = rng.normal(size=(2, 3, length)), rng.normal(size=(3, k))
    got = fft_conv(torch.from_numpy(u), torch.from_numpy(kernel), left).numpy()
    np.testing.assert_allclose(got, direct_conv(u, kernel, left), rtol=1e-10, atol=1e-10)


def test_fft_conv_float32_and_bf16_inputs_compute_in_float32():
    torch.manual_seed(0)
    u, k = torch.randn(2, 3, 50), torch.randn(3, 99)
    want = direct_conv(u.double().numpy(), k.double().numpy(), 49)
    got = fft_conv(u, k, 49)
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    assert fft_conv(u.bfloat16(), k, 49).dtype == torch.float32


@pytest.mark.parametrize("includes_current", [True, False])
def test_two_sided_kernel_places_the_backward_half(includes_current):
    rng = np.random.default_rng(3)
    fwd, bwd, u = rng.normal(size=(2, 12)), rng.normal(size=(2, 12)), rng.normal(size=(2, 12))
    kernel, left = two_sided(torch.from_numpy(fwd), torch.from_numpy(bwd), includes_current)
    got = fft_conv(torch.from_numpy(u), kernel, left).numpy()
    want = np.zeros_like(u)
    for t in range(12):
        for s in range(12):
            if s <= t:
                want[:, t] += fwd[:, t - s] * u[:, s]
            if includes_current and s >= t:
                want[:, t] += bwd[:, s - t] * u[:, s]
            if not includes_current and s > t:
                want[:, t] += bwd[:, s - t - 1] * u[:, s]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------ gMLP


def test_gmlp_spatial_projection_is_a_toeplitz_matrix_with_tiled_channel_kernels():
    """W z + b with W[t, s] = kernel[h mod channels, (t - s) + max_len - 1] (the follow-up study, eq. 5, Table 6)."""
    torch.manual_seed(0)
    sgu = SpatialGatingUnit(d_hidden=6, max_len=20, channels=3).double()
    with torch.no_grad():
        sgu.kernel.normal_()
        sgu.bias.normal_()
    z = torch.randn(2, 14, 6, dtype=torch.float64)
    got = sgu.spatial(z).detach().numpy()
    kernel, bias = sgu.kernel.detach().numpy(), sgu.bias.detach().numpy()
    want = np.zeros((2, 14, 6))
    for h in range(6):
        w = np.array([[kernel[h % 3, t - s + 19] for s in range(14)] for t in range(14)])
        want[:, :, h] = z[:, :, h].numpy() @ w.T + bias[:14]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_gmlp_gating_and_initialisation():
    """Zhat = Z1 * (W norm(Z2) + b); at initialisation W ~ 0 and b = 1, so Zhat ~ Z1 (Liu et al. 2.1)."""
    torch.manual_seed(0)
    mixer = GMLPMixer(d_model=8, d_hidden=12, max_len=30, channels=4).double()
    assert mixer.proj_in.out_features == 24 and mixer.proj_out.in_features == 12
    assert mixer.sgu.kernel.shape == (4, 59) and mixer.sgu.kernel.abs().max() <= 1e-3 / 30
    assert torch.equal(mixer.sgu.bias, torch.ones(30, dtype=torch.float64))
    z = torch.randn(2, 30, 24, dtype=torch.float64)
    z1, z2 = z.chunk(2, dim=-1)
    torch.testing.assert_close(mixer.sgu(z, None), z1 * mixer.sgu.spatial(mixer.sgu.norm(z2)))
    torch.testing.assert_close(mixer.sgu(z, None), z1, rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="sequence length 31 exceeds the kernel's max_len 30"):
        mixer(torch.randn(1, 31, 8, dtype=torch.float64), None)
    with pytest.raises(ValueError, match="model.channels=5 must divide model.d_hidden=12"):
        GMLPMixer(d_model=8, d_hidden=12, max_len=30, channels=5)


# ------------------------------------------------------------------ S4D


def s4d_recurrence(mixer: S4DMixer, u: torch.Tensor) -> np.ndarray:
    """x_t = A_bar x_{t-1} + B_bar u_t, y_t = 2 Re(C x_t) + D u_t step by step (+ the backward half).

    The backward half reads only later tokens: x'_t = A_bar x'_{t+1} + B_bar u_{t+1}.
    """
    dt_a, b_bar = (t.detach().numpy() for t in mixer.kernel.discrete())
    a_bar = np.exp(dt_a)  # [H, N/2]
    c = torch.view_as_complex(mixer.kernel.C.detach()).numpy()  # [channels, H, N/2]
    d = mixer.D.detach().numpy()
    u = u.numpy()  # [B, L, H]
    batch, length, hidden = u.shape
    y = d * u
    state = np.zeros((batch, hidden, a_bar.shape[1]), dtype=complex)
    for t in range(length):
        state = a_bar * state + b_bar * u[:, t, :, None]
        y[:, t] += 2 * (c[0] * state).sum(-1).real
    if mixer.bidirectional:
        state = np.zeros_like(state)
        for t in range(length - 1, -1, -1):
            y[:, t] += 2 * (c[1] * state).sum(-1).real
            state = a_bar * state + b_bar * u[:, t, :, None]
    return y


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("init", ["lin", "inv"])
def test_s4d_fft_kernel_equals_the_recurrence(bidirectional, init):
    torch.manual_seed(0)
    mixer = S4DMixer(d_model=5, d_state=8, init=init, bidirectional=bidirectional, dt_min=0.01, dt_max=0.5).double()
    u = torch.randn(2, 41, 5, dtype=torch.float64)
    np.testing.assert_allclose(mixer.ssm(u, None).detach().numpy(), s4d_recurrence(mixer, u), rtol=1e-6, atol=1e-6)


def test_s4d_initialisation():
    """S4D section 4: Lin A_n = -1/2 + i pi n; Inv A_n = -1/2 + i N/pi (N/(2n+1) - 1);
    log dt uniform in [dt_min, dt_max]."""
    lin = s4d_eigenvalues(4, "lin")
    np.testing.assert_allclose(lin.numpy(), -0.5 + 1j * math.pi * np.arange(4))
    inv = s4d_eigenvalues(4, "inv", 8)
    np.testing.assert_allclose(inv.numpy(), -0.5 + 1j * (8 / math.pi) * (8 / (2 * np.arange(4) + 1) - 1))
    torch.manual_seed(0)
    mixer = S4DMixer(d_model=64, d_state=8, dt_min=0.001, dt_max=0.1)
    dt = torch.exp(mixer.kernel.log_dt)
    assert dt.min() >= 0.001 and dt.max() <= 0.1 and dt.max() / dt.min() > 20
    np.testing.assert_allclose(-torch.exp(mixer.kernel.log_A_real).detach().numpy(), -0.5, rtol=1e-6)
    np.testing.assert_allclose(mixer.kernel.A_imag[3].detach().numpy(), math.pi * np.arange(4), rtol=1e-6)
    assert mixer.kernel.C.shape == (2, 64, 4, 2) and mixer.out.out_features == 128
    assert mixer.kernel.log_dt._optim == {"lr": 0.001, "weight_decay": 0.0}
    with pytest.raises(ValueError, match="model.init='legs': choose one of lin, inv"):
        S4DMixer(d_model=4, d_state=8, init="legs")


# ------------------------------------------------------------------ S5


def sequential_scan(a: np.ndarray, bu: np.ndarray, reverse: bool) -> np.ndarray:
    x = np.zeros_like(bu)
    state = np.zeros(bu.shape[::2], dtype=bu.dtype)  # [B, P]
    steps = range(bu.shape[1] - 1, -1, -1) if reverse else range(bu.shape[1])
    for t in steps:
        state = a * state + bu[:, t]
        x[:, t] = state
    return x


@pytest.mark.parametrize("length", [1, 2, 7, 16, 33])
@pytest.mark.parametrize("reverse", [False, True])
def test_s5_parallel_scan_equals_the_sequential_recurrence(length, reverse):
    rng = np.random.default_rng(length)
    a = rng.uniform(0.5, 0.99, size=6) * np.exp(1j * rng.uniform(-3, 3, size=6))
    bu = rng.normal(size=(3, length, 6)) + 1j * rng.normal(size=(3, length, 6))
    got = scan_time_invariant(torch.from_numpy(a), torch.from_numpy(bu), reverse=reverse).numpy()
    np.testing.assert_allclose(got, sequential_scan(a, bu, reverse), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_s5_ssm_equals_the_sequential_recurrence(bidirectional):
    """x_t = Lambda_bar x_{t-1} + B_bar u_t; y_t = 2 Re(C x_t) + D u_t (+ a backward scan with C2)."""
    torch.manual_seed(0)
    ssm = S5SSM(d_model=5, d_state=8, blocks=2, bidirectional=bidirectional, dt_min=0.01, dt_max=0.5).double()
    u = torch.randn(2, 29, 5, dtype=torch.float64)
    lam_bar, b_bar = (t.detach().numpy() for t in ssm.discrete())
    bu = u.numpy() @ b_bar.T
    want = ssm.D.detach().numpy() * u.numpy()
    for direction, c in enumerate(ssm.C):
        x = sequential_scan(lam_bar, bu, reverse=direction == 1)
        want = want + 2 * (x @ torch.view_as_complex(c.detach()).numpy().T).real
    np.testing.assert_allclose(ssm(u, None).detach().numpy(), want, rtol=1e-6, atol=1e-6)


def test_hippo_n_initialisation():
    """A_LegS + p p^T (p_n = sqrt(n + 1/2)) = V diag(Lambda) V^H, Re(Lambda) = -1/2 (S5 appendix B.1.1)."""
    values, vectors = hippo_n_eig(6)
    n = np.arange(6)
    normal = hippo_legs(6).numpy() + np.outer(np.sqrt(n + 0.5), np.sqrt(n + 0.5))
    np.testing.assert_allclose(np.diag(normal), -0.5)
    np.testing.assert_allclose(normal + normal.T, -np.eye(6), atol=1e-12)  # -1/2 I + skew-symmetric
    v = vectors.numpy()
    np.testing.assert_allclose(v @ np.diag(values.numpy()) @ v.conj().T, normal, atol=1e-10)
    np.testing.assert_allclose(values.real.numpy(), -0.5)
    lam, v_half = block_hippo_n(12, blocks=2)  # two blocks of 6: 3 kept eigenvalues each
    assert lam.shape == (6,) and v_half.shape == (12, 6) and (lam.imag > 0).all()
    np.testing.assert_allclose(lam[:3].numpy(), lam[3:].numpy())
    assert torch.all(v_half[:6, 3:] == 0) and torch.all(v_half[6:, :3] == 0)
    with pytest.raises(ValueError, match="model.d_state=12 must split into model.blocks=4 blocks of even size"):
        block_hippo_n(12, blocks=4)


@pytest.mark.parametrize("activation", ["gelu", "half_glu1", "half_glu2", "full_glu"])
def test_s5_output_activations(activation):
    torch.manual_seed(0)
    mixer = S5Mixer(d_model=6, d_state=8, activation=activation, blocks=2).double()
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    y = mixer.ssm(x, None)
    g = torch.nn.functional.gelu(y)
    want = {
        "gelu": lambda: g,
        "half_glu1": lambda: g * torch.sigmoid(mixer.out2(g)),
        "half_glu2": lambda: y * torch.sigmoid(mixer.out2(g)),
        "full_glu": lambda: mixer.out1(g) * torch.sigmoid(mixer.out2(g)),
    }[activation]()
    torch.testing.assert_close(mixer(x, None), want)


# ------------------------------------------------------------------ MEGA


def ema_recurrence(ema: MultiDimEMA, x: np.ndarray) -> np.ndarray:
    """The follow-up study, eq. 4 per expanded dimension: h_t = alpha u_t + (1 - alpha delta) h_{t-1}, u_t = beta x_t,
    y_t = sqrt(1/N) sum_j eta_j h_t^(j); the backward EMA runs the same recurrence from the end."""
    alpha = torch.sigmoid(ema.alpha).detach().numpy()  # [dirs, D, N]
    delta = torch.sigmoid(ema.delta).detach().numpy()
    beta, eta = ema.beta.detach().numpy(), ema.eta.detach().numpy()
    batch, length, d = x.shape
    y = np.zeros_like(x)
    for direction in range(alpha.shape[0]):
        h = np.zeros((batch, d, alpha.shape[2]))
        steps = range(length) if direction == 0 else range(length - 1, -1, -1)
        for t in steps:
            u = beta[direction] * x[:, t, :, None]
            h = alpha[direction] * u + (1 - alpha[direction] * delta[direction]) * h
            y[:, t] += math.sqrt(1 / alpha.shape[2]) * (eta[direction] * h).sum(-1)
    return y


@pytest.mark.parametrize("bidirectional", [False, True])
def test_mega_ema_equals_its_recurrence(bidirectional):
    torch.manual_seed(0)
    ema = MultiDimEMA(d_model=4, ema_dim=3, bidirectional=bidirectional).double()
    x = torch.randn(2, 33, 4, dtype=torch.float64)
    np.testing.assert_allclose(ema(x, None).detach().numpy(), ema_recurrence(ema, x.numpy()), rtol=1e-8, atol=1e-8)


def test_mega_ema_truncation_keeps_the_first_taps():
    torch.manual_seed(0)
    full = MultiDimEMA(d_model=4, ema_dim=3).double()
    cut = MultiDimEMA(d_model=4, ema_dim=3, truncation=10).double()
    cut.load_state_dict(full.state_dict())
    assert cut.kernel(40).shape == (2, 4, 10)
    torch.testing.assert_close(cut.kernel(40), full.kernel(40)[..., :10])
    x = torch.randn(1, 40, 4, dtype=torch.float64)
    k = cut.kernel(40).detach().numpy()
    kernel = np.concatenate([np.pad(k[0], ((0, 0), (9, 0))) + np.pad(k[1][:, ::-1], ((0, 0), (0, 9)))], axis=-1)
    want = direct_conv(x.transpose(1, 2).numpy(), kernel, 9).transpose(0, 2, 1)
    np.testing.assert_allclose(cut(x, None).detach().numpy(), want, rtol=1e-10, atol=1e-10)


def mega_reference(mixer: MegaMixer, x: torch.Tensor) -> torch.Tensor:
    """Mega section 3 written out: explicit softmax(QK^T/sqrt(z) + bias) V over the whole sequence."""
    xp = torch.nn.functional.silu(mixer.ema(x, None) + mixer.omega * x)
    v = torch.nn.functional.silu(mixer.v_proj(x))
    phi, zr, hx = torch.split(mixer.mx_proj(xp), [mixer.d_model, mixer.qkv_dim + mixer.d_hidden, mixer.d_model], -1)
    z, gamma = torch.split(torch.nn.functional.silu(zr), [mixer.qkv_dim, mixer.d_hidden], -1)
    q, k = z * mixer.qk_scale[0] + mixer.qk_offset[0], z * mixer.qk_scale[1] + mixer.qk_offset[1]
    length = x.shape[1]
    bias = torch.tensor(
        [
            [mixer.rel_bias.bias[j - i + mixer.rel_bias.max_len - 1].item() for j in range(length)]
            for i in range(length)
        ],
        dtype=x.dtype,
    )
    o = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(mixer.qkv_dim) + bias, -1) @ v
    h = torch.nn.functional.silu(hx + mixer.h_proj(gamma * o))
    y = torch.sigmoid(phi) * h + (1 - torch.sigmoid(phi)) * x
    return y - x  # the shared block adds x back


def test_mega_mixer_equals_the_written_out_layer_and_chunks_attend_within_themselves():
    torch.manual_seed(0)
    mixer = MegaMixer(d_model=6, d_hidden=10, qkv_dim=4, max_len=32, ema_dim=3).double().eval()
    with torch.no_grad():  # query/key scales of order 1 (Mega starts them at N(0, 0.02)): non-uniform attention
        mixer.qk_scale.normal_()
    x = torch.randn(2, 24, 6, dtype=torch.float64)
    torch.testing.assert_close(mixer(x, None), mega_reference(mixer, x), rtol=1e-9, atol=1e-9)
    # post-norm block: norm(x + mixer(x)) = norm(phi * H + (1 - phi) * x), Mega's output
    block = ResidualSublayer(mixer, 6, prenorm=False).double()
    torch.testing.assert_close(block(x, None), block.norm(x + mega_reference(mixer, x)))
    # chunk 8: the attention of each chunk of 8 sees only itself
    chunked = MegaMixer(d_model=6, d_hidden=10, qkv_dim=4, max_len=32, ema_dim=3, chunk_size=8).double().eval()
    q, k, v = torch.randn(3, 2, 24, 4, dtype=torch.float64)
    got = chunked.attention(q, k, v, None)
    bias = chunked.rel_bias(8)
    for c in range(3):
        sl = slice(8 * c, 8 * c + 8)
        want = torch.softmax(q[:, sl] @ k[:, sl].transpose(1, 2) / 2.0 + bias, -1) @ v[:, sl]
        torch.testing.assert_close(got[:, sl], want)
    with pytest.raises(ValueError, match="restricts MEGA to softmax"):
        build_mega_layers({"attention": "laplace", "depth": 1}, max_len=8)


# ------------------------------------------------------------------ shapes and padding, every layer


LAYERS = {
    "gmlp": lambda: GMLPMixer(d_model=8, d_hidden=12, max_len=64, channels=2),
    "s4": lambda: S4DMixer(d_model=8, d_state=8, bidirectional=True),
    "s4_causal": lambda: S4DMixer(d_model=8, d_state=8, bidirectional=False, init="inv"),
    "s5": lambda: S5Mixer(d_model=8, d_state=8, blocks=2, activation="full_glu"),
    "s5_fft": lambda: S5Mixer(d_model=8, d_state=8, blocks=2, activation="full_glu", impl="fft"),
    "mega": lambda: MegaMixer(d_model=8, d_hidden=12, qkv_dim=4, max_len=64, ema_dim=3),
    "mega_chunked_truncated": lambda: MegaMixer(
        d_model=8, d_hidden=12, qkv_dim=4, max_len=64, ema_dim=3, chunk_size=16, ema_truncation=12
    ),
    "mega_sdpa": lambda: MegaMixer(d_model=8, d_hidden=12, qkv_dim=4, max_len=64, ema_dim=3, attention_impl="sdpa"),
    "mega_chunked_sdpa": lambda: MegaMixer(
        d_model=8, d_hidden=12, qkv_dim=4, max_len=64, ema_dim=3, chunk_size=16, attention_impl="sdpa"
    ),
    "mega_ffn": lambda: MegaFeedForward(8, 16),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_layer_keeps_shape_and_ignores_appended_padding(name, dtype):
    torch.manual_seed(0)
    layer = LAYERS[name]().to(dtype).eval()
    x = torch.randn(3, 30, 8, dtype=dtype)
    mask = torch.ones(3, 30, dtype=torch.bool)
    mask[1, 21:] = False  # a shorter sequence inside the batch
    x[1, 21:] = torch.randn(9, 8, dtype=dtype)  # whatever sits at its padded positions
    out = layer(x, mask)
    assert out.shape == x.shape and torch.isfinite(out).all()
    padded_x = torch.cat([x, 5 * torch.randn(3, 26, 8, dtype=dtype)], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(3, 26, dtype=torch.bool)], dim=1)
    longer = layer(padded_x, padded_mask)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(longer[:, :30][mask].to(dtype), out[mask].to(dtype), rtol=tol, atol=tol)


def model_cfg(backbone: str, **extra) -> dict:
    base = {"backbone": backbone, "d_model": 8, "depth": 2, "pooling": "mean", "positional": "none", "dropout": 0.1}
    base.update(
        {
            "gmlp": {"d_hidden": 12, "channels": 2},
            "s4": {"d_state": 8},
            "s5": {"d_state": 8, "blocks": 2},
            "mega": {"d_hidden": 12, "qkv_dim": 4, "d_ff": 16, "ema_dim": 3, "prenorm": False},
        }[backbone]
    )
    base.update(extra)
    return base


@pytest.mark.parametrize("backbone", ARMS)
def test_backbone_plugs_into_the_shared_encoder_and_ignores_appended_padding(backbone):
    torch.manual_seed(0)
    model = SequenceClassifier(model_cfg(backbone), vocab_size=20, max_len=64, num_classes=3, pad_id=0, two_tower=False)
    model = model.double().eval()
    sublayers = model.encoder.sublayers
    assert all(isinstance(s, ResidualSublayer) for s in sublayers)
    assert len(sublayers) == (4 if backbone == "mega" else 2)  # Mega: attention + FFN sublayer per layer
    ids = torch.randint(1, 20, (3, 40))
    ids[2, 31:] = 0
    padded = torch.cat([ids, torch.zeros(3, 24, dtype=torch.long)], dim=1)
    out = model(ids)
    assert out.shape == (3, 3)
    torch.testing.assert_close(model(padded), out, rtol=1e-9, atol=1e-9)
    model.train()
    model(padded).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, missing


# ------------------------------------------------------------------ the arms


@pytest.mark.parametrize("arm", ARMS)
def test_arm_defines_all_six_tasks_and_its_backbone(arm):
    cfg = composed(f"arm={arm}", "task=listops")
    assert set(arm_tasks(cfg)) == TASKS and cfg.arm.name == arm and cfg.arm.source
    assert cfg.arm.model.backbone == arm


def test_arms_resolve_to_their_papers_settings():
    g = resolve(composed("arm=gmlp", "task=listops", "profile=paper"))
    assert (g["model"]["depth"], g["model"]["d_model"], g["model"]["d_hidden"], g["model"]["channels"]) == (
        6,
        128,
        256,
        4,
    )
    assert (g["train"]["lr"], g["train"]["batch_size"], g["train"]["weight_decay"], g["train"]["epochs"]) == (
        0.001,
        32,
        0.1,
        120,
    )
    g_img = resolve(composed("arm=gmlp", "task=image", "profile=paper"))
    assert g_img["model"]["depth"] == 10 and g_img["train"]["batch_size"] == 48 and g_img["train"]["epochs"] == 200
    g_text = resolve(composed("arm=gmlp", "task=text", "profile=paper"))
    assert (
        g_text["model"]["dropout"] == 0.1
        and g_text["task"]["max_len"] == 4096
        and g_text["train"]["weight_decay"] == 0.2
    )
    s4 = resolve(composed("arm=s4", "task=pathfinder", "profile=paper"))
    assert (s4["model"]["depth"], s4["model"]["d_model"], s4["model"]["d_state"], s4["model"]["prenorm"]) == (
        6,
        256,
        64,
        True,
    )
    assert (s4["train"]["lr"], s4["train"]["batch_size"], s4["train"]["weight_decay"]) == (0.004, 64, 0.05)
    s5 = resolve(composed("arm=s5", "task=pathfinder", "profile=paper"))
    assert s5["model"]["activation"] == "full_glu"  # the follow-up study, A.2
    assert (s5["model"]["d_model"], s5["model"]["d_state"], s5["model"]["blocks"], s5["train"]["lr"]) == (
        192,
        256,
        8,
        0.0045,
    )
    assert resolve(composed("arm=s5", "task=listops", "profile=paper"))["model"]["activation"] == "half_glu2"
    mega = resolve(composed("arm=mega", "task=listops", "profile=paper"))
    m = mega["model"]
    assert (m["d_model"], m["d_hidden"], m["qkv_dim"], m["ema_dim"], m["prenorm"], m["chunk_size"]) == (
        80,
        160,
        64,
        16,
        False,
        None,
    )
    assert m["ema_truncation"] == 1024 and m["attention"] == "softmax" and mega["train"]["grad_clip"] == 1.0
    for arm in ARMS:  # the follow-up study, A.2: the follow-up's scheduler for every model
        assert resolve(composed(f"arm={arm}", "task=listops", "profile=paper"))["train"]["schedule"] == "followup"


@pytest.mark.parametrize("arm", ARMS)
def test_smoke_profile_shrinks_the_arm(arm):
    run = resolve(composed(f"arm={arm}", "task=listops"))
    assert run["model"]["d_model"] == 32 and run["model"]["depth"] == 2
    if arm in ("gmlp", "mega"):
        assert run["model"]["d_hidden"] == 64
    if arm == "mega":
        assert run["model"]["qkv_dim"] == 16 and run["model"]["d_ff"] == 64


SHORT_LISTOPS = ["task=listops", *SHORT_LISTOPS_OVERRIDES]


@pytest.mark.parametrize("arm", ARMS)
def test_arm_trains_on_listops_and_generated_pathfinder(arm, tmp_path, shared_cache):
    """profile=smoke cut to 4 steps on ListOps shortened to 50-300 tokens and the smoke Pathfinder."""
    common = [
        f"arm={arm}",
        "profile=smoke",
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={shared_cache}",
        f"data_dir={tmp_path / 'no_data'}",
        "progress=false",
        "workers=2",
        "+train.max_steps=4",
    ]
    for task, extra in (("listops", SHORT_LISTOPS), ("pathfinder", ["task=pathfinder"])):
        assert execute(composed(*common, *extra)) == 0, (arm, task)
        metrics = read_json(tmp_path / "out" / "runs" / arm / task / "smoke" / "seed0" / "metrics.json")
        assert metrics["status"] == "complete" and metrics["steps"] == 4 and 0.0 <= metrics["test_acc"] <= 1.0


@pytest.mark.parametrize("techniques", ["none", "followup"])
@pytest.mark.parametrize("arm", ARMS)
def test_cli_runs_the_arm_on_smoke_listops(arm, techniques, tmp_path, shared_cache):
    """``python experiments/run.py arm=<arm> task=listops profile=smoke techniques=<t>`` (ListOps shortened, 4 steps).

    With the follow-up's techniques (ListOps operand permutation) the record goes to
    ``<arm>+followup/`` (repro/records.py: record_arm)."""
    done = run_cli(
        f"arm={arm}",
        "profile=smoke",
        f"techniques={techniques}",
        *SHORT_LISTOPS,
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={shared_cache}",
        f"data_dir={tmp_path / 'no_data'}",
        "task.source=generated",
        "progress=false",
        "+train.max_steps=4",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    default = composed(f"arm={arm}").arm.get("techniques_default", "none")
    folder = arm if techniques == default else f"{arm}+{techniques}"
    metrics = read_json(tmp_path / "out" / "runs" / folder / "listops" / "smoke" / "seed0" / "metrics.json")
    assert metrics["status"] == "complete" and metrics["steps"] == 4 and metrics["arm"] == arm
    assert metrics["techniques"]["name"] == techniques

"""S5: Smith, Warrington and Linderman (2023), "Simplified state space layers for sequence
modeling" (the follow-up study, Table 3). One multi-input, multi-output diagonal SSM per layer:

    x_t = Lambda_bar * x_{t-1} + B_bar u_t,   y_t = 2 Re(C_tilde x_t) + D * u_t

with u_t in R^H, x_t in C^{P/2}, applied with a parallel scan over time (S5 section 3.2) or, the
same function, an FFT convolution (``ssm_impl``, below).

- HiPPO-N initialisation (S5 section 4.1, appendix B.1.1): the normal part of HiPPO-LegS,
  A_N = A_LegS + p p^T with p_n = sqrt(n + 1/2), has diagonal -1/2 and a skew-symmetric
  rest; Lambda and V come from its eigendecomposition. ``blocks`` = J: A is initialised
  block-diagonal with J copies of a (P/J)-sized HiPPO-N (appendix B.1.1).
- Conjugate symmetry: each real block's eigenvalues come in conjugate pairs; the half with
  positive imaginary part is kept (P/2 states) and the output takes 2 Re(.).
- Initial B and C as the S5 release draws them (lindermanlab/S5 ``s5/ssm.py``, ``ssm_init.py``):
  JAX's ``lecun_normal``, a normal truncated at two standard deviations and rescaled to
  variance 1/fan_in, with the fan-in of JAX's rule (the second-to-last axis times all axes
  but the last two). B [P, H]: variance 1/P; B_tilde = V^{-1} B. C [H, P] complex, drawn as
  real and imaginary parts [H, P, 2]: ``trunc_standard_normal`` draws it row by row (each
  row [1, P, 2], fan-in P: variance 1/P per part), ``lecun_normal`` whole (fan-in H P:
  variance 1/(H P) per part); C_tilde = C V. ``complex_normal`` draws C_tilde [H, P/2]
  directly, N(0, 1/2) per part. D standard normal; log step ~ U[log dt_min, log dt_max]
  per state. ``clip_eigs`` keeps Re(Lambda) <= -1e-4.
- Zero-order hold: Lambda_bar = exp(Lambda dt), B_bar = (Lambda_bar - 1) / Lambda * B_tilde.
- Bidirectional: a second scan runs backwards over time (it reads the current token too)
  with the same Lambda, B and dt and its own C (S5's ``bidirectional``).
- Output stage (S5's ``activation_fn``): gelu, half_glu1 (g * sigmoid(W g), g = GELU(y)),
  half_glu2 (y * sigmoid(W g)) or full_glu (W1 g * sigmoid(W2 g)); residual and norm are the
  shared block's.

Two ways to run the states (``ssm_impl``), the same function. The layer is time-invariant
(Lambda_bar and B_bar do not change along the sequence: no per-step discretisation), so
x_t = sum_{j<=t} Lambda_bar^j B_bar u_{t-j} (the backward pass: sum_{j>=0} Lambda_bar^j B_bar u_{t+j}).

- ``scan``: log2(L) doubling steps (Hillis-Steele) x_t += Lambda_bar^s x_{t-s}, s = 1, 2, 4,
  ... -- no Python loop over time steps, but log2(L) copies of the [B, L, P/2] states are
  kept for the backward pass.
- ``fft``: each state is a convolution of (B_bar u) with its own kernel Lambda_bar^l,
  l = 0..L-1 (anti-causal for the backward pass), one FFT of the [B, L, P/2] projected
  inputs, one product per direction, one inverse FFT; C contracts the states afterwards,
  both directions in one matrix product. The [H, H, L] input-output kernel C Lambda_bar^l B
  is never built: the convolution runs per state, over P/2 complex channels.
- ``auto`` (default): ``fft`` on CUDA, ``scan`` elsewhere.

Both run in complex64 with autocast off (complex128 for float64 reference tests).

Two choices of the ``fft`` path, the same function (``"auto"``: ``repro/original/attention/
fast_defaults.py``, model keys ``ssm_fft_layout`` and ``ssm_proj_dtype``):

- ``fft_layout``: ``time_major`` keeps the states [B, L, P/2] and transforms along axis 1 (at the
  text setting a 96-channel stride, which torch's cuFFT plans serve by reordering the batch);
  ``channels_last`` projects straight into [B, P/2, L] (the input projection as B_bar @ u^T) and
  transforms along the contiguous last axis; the output contraction then reads the states as
  [B, L, dirs P/2 2] through one permuted copy.
- ``proj_dtype``: ``float32`` runs the input projection (u @ B_bar^T) and the output contraction
  (2 Re(C x)) in float32, as the release does; ``autocast`` runs those two products in the autocast
  dtype (bf16 on GPU), like every other linear layer of the model, and keeps the FFT, the kernel
  and the states in float32. Outside autocast the two are the same.

Padding: padded inputs are zeroed first; the system is linear, so the backward scan reads
zeros there and real outputs do not depend on appended padding.

Optimiser: S5 trains Lambda, B and dt with ``ssm_lr`` and no weight decay; the parameters
carry ``param._optim`` (see repro/followup/s4.py), which repro/train.py: make_optimizer honours.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..models.mixer import BACKBONES, TokenMixer
from ..models.settings import encoder_setting
from ..ops.fft import fft_size
from ..original.attention.fast_defaults import check_choice, choose

C_INITS = ("trunc_standard_normal", "lecun_normal", "complex_normal")
ACTIVATIONS = ("gelu", "half_glu1", "half_glu2", "full_glu")
SSM_IMPLS = ("auto", "scan", "fft")

# Standard deviation of a standard normal truncated to [-2, 2]: 1 - 4 phi(2) / (Phi(2) - Phi(-2)).
TRUNCATED_STD = math.sqrt(1.0 - 4.0 * math.exp(-2.0) / math.sqrt(2.0 * math.pi) / math.erf(math.sqrt(2.0)))


def lecun_normal(shape: tuple[int, ...], fan_in: int) -> torch.Tensor:
    """JAX's ``lecun_normal`` (float64): a normal truncated at +-2 standard deviations, rescaled so
    that the draws have variance exactly 1 / ``fan_in``."""
    std = math.sqrt(1.0 / fan_in) / TRUNCATED_STD
    return nn.init.trunc_normal_(torch.empty(shape, dtype=torch.float64), std=std, a=-2 * std, b=2 * std)


def hippo_legs(size: int) -> torch.Tensor:
    """HiPPO-LegS A [size, size] (float64): -sqrt(2n+1)sqrt(2k+1) below the diagonal, -(n+1) on it."""
    n = torch.arange(size, dtype=torch.float64)
    root = torch.sqrt(2 * n + 1)
    return -torch.tril(torch.outer(root, root), diagonal=-1) - torch.diag(n + 1)


def hippo_n_eig(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues [size] and unitary eigenvectors [size, size] (complex128) of HiPPO-N, imaginary parts ascending."""
    n = torch.arange(size, dtype=torch.float64)
    p = torch.sqrt(n + 0.5)
    normal = hippo_legs(size) + torch.outer(p, p)  # -1/2 I + skew-symmetric
    skew = normal + 0.5 * torch.eye(size, dtype=torch.float64)
    imag, vectors = torch.linalg.eigh(-1j * skew.to(torch.complex128))  # Hermitian: S v = i lambda v
    return torch.complex(torch.full_like(imag, -0.5), imag), vectors


def block_hippo_n(state_size: int, blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Conjugate-symmetric block-diagonal init: Lambda [P/2] and V [P, P/2] (complex128).

    Each of the ``blocks`` blocks of size P/J keeps the P/(2J) eigenvalues with positive
    imaginary part and their eigenvectors.
    """
    if state_size % blocks or (state_size // blocks) % 2:
        raise ValueError(f"model.d_state={state_size} must split into model.blocks={blocks} blocks of even size")
    size = state_size // blocks
    values, vectors = hippo_n_eig(size)
    keep = torch.arange(size // 2, size)  # eigh sorts ascending: the positive imaginary half
    values, vectors = values[keep], vectors[:, keep]
    return values.repeat(blocks), torch.block_diag(*[vectors] * blocks)


def scan_time_invariant(a_bar: torch.Tensor, bu: torch.Tensor, reverse: bool = False) -> torch.Tensor:
    """x_t = a_bar * x_{t-1} + bu_t (x_{-1} = 0) over axis 1 of ``bu`` [B, L, P], a_bar [P].

    ``reverse``: x_t = a_bar * x_{t+1} + bu_t. log2(L) doubling steps, each O(L P).
    """
    x = bu.flip(1) if reverse else bu
    length = x.shape[1]
    power, shift = a_bar, 1
    while shift < length:
        x = torch.cat([x[:, :shift], x[:, shift:] + power * x[:, :-shift]], dim=1)
        power, shift = power * power, 2 * shift
    return x.flip(1) if reverse else x


def fft_states(log_lam_bar: torch.Tensor, bu: torch.Tensor, bidirectional: bool) -> torch.Tensor:
    """The states of both directions by FFT: ``bu`` [B, L, P] (complex), ``log_lam_bar`` [P] = Lambda dt.

    Returns [B, L, dirs, P]: direction 0 is ``scan_time_invariant(exp(log_lam_bar), bu)``, direction 1
    (``bidirectional``) its ``reverse=True``. Kernel Lambda_bar^l = exp(l Lambda dt) at offsets l (causal)
    or -l (anti-causal); a circular size n >= 2L - 1 wraps nothing onto outputs 0..L-1.
    """
    length = bu.shape[1]
    n = fft_size(2 * length - 1)
    steps = torch.arange(length, device=bu.device, dtype=log_lam_bar.real.dtype)
    causal = torch.zeros(n, log_lam_bar.shape[0], dtype=bu.dtype, device=bu.device)
    causal[:length] = torch.exp(steps[:, None] * log_lam_bar)  # [n, P]: Lambda_bar^l at index l
    kernels = [causal]
    if bidirectional:
        kernels.append(torch.roll(causal.flip(0), 1, dims=0))  # Lambda_bar^l at index (n - l) % n: offset -l
    spectra = torch.fft.fft(torch.stack(kernels, dim=1), dim=0)  # [n, dirs, P]
    states = torch.fft.ifft(torch.fft.fft(bu, n=n, dim=1).unsqueeze(2) * spectra, dim=1)
    return states[:, :length]


def fft_states_channels_last(log_lam_bar: torch.Tensor, bu: torch.Tensor, bidirectional: bool) -> torch.Tensor:
    """``fft_states`` with the time axis last: ``bu`` [B, P, L] (complex) -> states [B, dirs, P, L], every
    FFT over the contiguous last axis (the transposed layout of ``fft_states``, same values)."""
    length = bu.shape[-1]
    n = fft_size(2 * length - 1)
    steps = torch.arange(length, device=bu.device, dtype=log_lam_bar.real.dtype)
    causal = torch.zeros(log_lam_bar.shape[0], n, dtype=bu.dtype, device=bu.device)
    causal[:, :length] = torch.exp(log_lam_bar[:, None] * steps)  # [P, n]: Lambda_bar^l at index l
    kernels = [causal]
    if bidirectional:
        kernels.append(torch.roll(causal.flip(-1), 1, dims=-1))  # offset -l at index (n - l) % n
    spectra = torch.fft.fft(torch.stack(kernels), dim=-1)  # [dirs, P, n]
    states = torch.fft.ifft(torch.fft.fft(bu, n=n, dim=-1).unsqueeze(1) * spectra, dim=-1)
    return states[..., :length]


def _real_pair(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t).clone()


class S5SSM(nn.Module):
    """The MIMO diagonal SSM, [B, L, H] -> [B, L, H]."""

    def __init__(
        self,
        d_model: int,
        d_state: int,
        blocks: int = 1,
        c_init: str = "trunc_standard_normal",
        bidirectional: bool = True,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        clip_eigs: bool = False,
        ssm_lr: float | None = 0.001,
        impl: str = "auto",
        fft_layout: str = "auto",
        proj_dtype: str = "auto",
    ):
        super().__init__()
        if c_init not in C_INITS:
            raise ValueError(f"model.c_init={c_init!r}: choose one of {', '.join(C_INITS)}")
        if impl not in SSM_IMPLS:
            raise ValueError(f"model.ssm_impl={impl!r}: choose one of {', '.join(SSM_IMPLS)}")
        self.fft_layout = check_choice("s5", "fft_layout", fft_layout, "model.ssm_fft_layout")
        self.proj_dtype = check_choice("s5", "proj_dtype", proj_dtype, "model.ssm_proj_dtype")
        lam, v = block_hippo_n(d_state, blocks)  # [P/2], [P, P/2]
        half = lam.shape[0]
        self.bidirectional = bidirectional
        self.clip_eigs = clip_eigs
        self.impl = impl
        self.Lambda_re = nn.Parameter(lam.real.float().clone())
        self.Lambda_im = nn.Parameter(lam.imag.float().clone())
        b = lecun_normal((d_state, d_model), fan_in=d_state)  # the release's B [P, H]: variance 1/P
        self.B = nn.Parameter(_real_pair(v.conj().T @ b.to(torch.complex128)).float())  # [P/2, H, 2]
        self.C = nn.ParameterList(
            nn.Parameter(_real_pair(self._draw_c(c_init, d_model, d_state, v)).float())
            for _ in range(2 if bidirectional else 1)
        )  # each [H, P/2, 2]
        self.D = nn.Parameter(torch.randn(d_model))
        log_step = torch.rand(half, dtype=torch.float64) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        self.log_step = nn.Parameter(log_step.float())
        if ssm_lr is not None:
            for p in (self.Lambda_re, self.Lambda_im, self.B, self.log_step):
                p._optim = {"lr": ssm_lr, "weight_decay": 0.0}

    @staticmethod
    def _draw_c(c_init: str, d_model: int, d_state: int, v: torch.Tensor) -> torch.Tensor:
        """C_tilde [H, P/2] (complex128), as the release draws it (see the module docstring)."""
        if c_init == "complex_normal":
            return torch.randn(d_model, v.shape[1], dtype=torch.complex128)  # variance 1/2 per part
        # trunc_standard_normal: rows [1, P, 2] drawn one by one, fan-in P; lecun_normal: [H, P, 2], fan-in H P
        fan_in = d_state if c_init == "trunc_standard_normal" else d_model * d_state
        parts = lecun_normal((d_model, d_state, 2), fan_in=fan_in)
        return torch.complex(parts[..., 0], parts[..., 1]) @ v

    def continuous_lambda(self) -> torch.Tensor:
        """Lambda [P/2], complex (real part clipped with ``clip_eigs``)."""
        re = self.Lambda_re.clamp(max=-1e-4) if self.clip_eigs else self.Lambda_re
        return torch.complex(re, self.Lambda_im)

    def log_lambda_bar(self) -> torch.Tensor:
        """log Lambda_bar = Lambda dt [P/2], complex (zero-order hold)."""
        return self.continuous_lambda() * torch.exp(self.log_step)

    def discrete(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(Lambda_bar [P/2], B_bar [P/2, H]), complex: zero-order hold."""
        lam = self.continuous_lambda()
        lam_bar = torch.exp(lam * torch.exp(self.log_step))
        return lam_bar, ((lam_bar - 1) / lam).unsqueeze(-1) * torch.view_as_complex(self.B)

    def resolved_impl(self, device: torch.device) -> str:
        """``scan`` or ``fft``: ``auto`` is ``fft`` on CUDA."""
        if self.impl != "auto":
            return self.impl
        return "fft" if device.type == "cuda" else "scan"

    def forward(self, u: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is not None:
            u = u.masked_fill(~mask.unsqueeze(-1), 0.0)
        dtype = torch.float64 if u.dtype == torch.float64 else torch.float32
        device = u.device.type
        autocast = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        with torch.autocast(device_type=device, enabled=False):
            u = u.to(dtype)
            lam_bar, b_bar = self.discrete()
            y = self.D * u
            if self.resolved_impl(u.device) == "fft":
                low = choose("s5", "proj_dtype", self.proj_dtype) == "autocast" and autocast is not None
                return y + self._fft_path(u, b_bar, autocast if low else dtype).to(dtype)
            bu = torch.complex(u @ b_bar.real.T, u @ b_bar.imag.T)  # [B, L, P/2]
            for direction, c in enumerate(self.C):
                x = scan_time_invariant(lam_bar, bu, reverse=direction == 1)
                c = torch.view_as_complex(c)  # [H, P/2]
                y = y + 2 * (x.real @ c.real.T - x.imag @ c.imag.T)
        return y

    def _fft_path(self, u: torch.Tensor, b_bar: torch.Tensor, mm_dtype: torch.dtype) -> torch.Tensor:
        """sum over directions of 2 Re(C x) by FFT (``fft_layout``), the two projections in ``mm_dtype``
        (``proj_dtype``), the FFT and the states in ``u``'s dtype."""
        # 2 Re(C x) = 2 (C_re x_re - C_im x_im), every direction and state in one product
        # (a [2, -2] tensor made from Python numbers would be a host-to-device copy, and a wait, every call)
        weight = torch.stack([torch.stack((2 * c[..., 0], -2 * c[..., 1]), dim=-1) for c in self.C], dim=1)
        low = u.to(mm_dtype)
        b_re, b_im = b_bar.real.to(mm_dtype), b_bar.imag.to(mm_dtype)
        if choose("s5", "fft_layout", self.fft_layout) == "channels_last":
            ut = low.transpose(1, 2)  # [B, H, L]
            bu = torch.complex((b_re @ ut).to(u.dtype), (b_im @ ut).to(u.dtype))  # [B, P/2, L]
            states = torch.view_as_real(fft_states_channels_last(self.log_lambda_bar(), bu, self.bidirectional))
            states = states.permute(0, 3, 1, 2, 4).flatten(2)  # [B, L, dirs P/2 2]
        else:
            bu = torch.complex((low @ b_re.T).to(u.dtype), (low @ b_im.T).to(u.dtype))  # [B, L, P/2]
            states = torch.view_as_real(fft_states(self.log_lambda_bar(), bu, self.bidirectional)).flatten(2)
        return states.to(mm_dtype) @ weight.flatten(1).T.to(mm_dtype)


class S5Mixer(TokenMixer):
    """S5 layer as a token mixer: the SSM, then S5's output activation (dropout inside as S5)."""

    def __init__(self, d_model: int, d_state: int, activation: str = "half_glu1", dropout: float = 0.0, **ssm_args):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"model.activation={activation!r}: choose one of {', '.join(ACTIVATIONS)}")
        self.ssm = S5SSM(d_model, d_state, **ssm_args)
        self.activation = activation
        self.drop = nn.Dropout(dropout)
        if activation == "full_glu":
            self.out1 = nn.Linear(d_model, d_model)
        if activation != "gelu":
            self.out2 = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        y = self.ssm(x, mask)
        g = self.drop(F.gelu(y))
        if self.activation == "gelu":
            return g
        if self.activation == "full_glu":
            return self.out1(g) * torch.sigmoid(self.out2(g))
        gate = torch.sigmoid(self.out2(g))
        return (g if self.activation == "half_glu1" else y.to(gate.dtype)) * gate


@BACKBONES.register("s5")
def build_s5_layers(cfg: dict, max_len: int) -> list[nn.Module]:
    """``depth`` S5 layers (S5 paper Table 11 settings; the follow-up study's appendix A.2 exceptions in the arm)."""
    # techniques: see the techniques config group
    return [
        S5Mixer(
            d_model=cfg["d_model"],
            d_state=cfg["d_state"],
            activation=cfg.get("activation", "half_glu1"),
            dropout=encoder_setting(cfg, "dropout"),
            blocks=cfg.get("blocks", 1),
            c_init=cfg.get("c_init", "trunc_standard_normal"),
            bidirectional=cfg.get("bidirectional", True),
            dt_min=cfg.get("dt_min", 0.001),
            dt_max=cfg.get("dt_max", 0.1),
            clip_eigs=cfg.get("clip_eigs", False),
            ssm_lr=cfg.get("ssm_lr", 0.001),
            impl=cfg.get("ssm_impl", "auto"),
            fft_layout=cfg.get("ssm_fft_layout", "auto"),
            proj_dtype=cfg.get("ssm_proj_dtype", "auto"),
        )
        for _ in range(cfg["depth"])
    ]

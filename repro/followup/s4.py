"""S4D: the diagonal state-space layer of Gu, Gupta, Goel and Re (2022), "On the
parameterization and initialization of diagonal state space models" (the follow-up's
"S4 (Gu et al., a)", the follow-up study, section 2.3.1 and Table 3).

Per channel h (H channels, N/2 complex modes n; conjugate pairs give the other N/2):

    A = -exp(log_A_real) + i A_imag          (complex diagonal, real part kept negative)
    dt = exp(log_dt),  log dt ~ U[log dt_min, log dt_max]
    A_bar = exp(dt A),  B_bar = (exp(dt A) - 1) / A * B                      (zero-order hold)
    K[l] = 2 Re( sum_n C_n B_bar_n A_bar_n^l ),  l = 0..L-1      (Vandermonde product)
    y = K * u + D u                                                (FFT convolution)

which is the recurrence x_t = A_bar x_{t-1} + B_bar u_t, y_t = 2 Re(C x_t) + D u_t.
Initialisation (S4D section 4): S4D-Lin A_n = -1/2 + i pi n; S4D-Inv A_n = -1/2 +
i (N/pi)(N/(2n+1) - 1); B = 1; C complex standard normal; D standard normal.

Bidirectional (the S4 repository's LRA models): a second C gives an anti-causal kernel
that reads the inputs after each position, sharing A, B and dt. The output stage is
that of the S4 LRA models: GELU, then a position-wise Linear(H, 2H) and a GLU. The
residual connection and the norm are the shared block's; its dropout follows the GLU.

Padding: padded inputs are zeroed before the convolution; the system is linear and
time-invariant, so the reversed half reads zeros there and real outputs do not
depend on appended padding.

Optimiser: S4D trains A, B and dt with learning rate 0.001 and no weight decay. The
parameters carry that as ``param._optim = {"lr": ..., "weight_decay": 0.0}`` (the S4
repository's convention); repro/train.py: make_optimizer gives them their own group, scaled by the schedule.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..models.mixer import BACKBONES, TokenMixer
from ..models.settings import encoder_setting
from .fftconv import compute_dtype, fft_conv, two_sided

INITS = ("lin", "inv")


def s4d_eigenvalues(n_modes: int, init: str, state_size: int | None = None) -> torch.Tensor:
    """The N/2 diagonal entries of A (complex128) of S4D-Lin or S4D-Inv (S4D section 4.1)."""
    state = state_size or 2 * n_modes
    n = torch.arange(n_modes, dtype=torch.float64)
    if init == "lin":
        imag = math.pi * n
    elif init == "inv":
        imag = (state / math.pi) * (state / (2 * n + 1) - 1)
    else:
        raise ValueError(f"model.init={init!r}: choose one of {', '.join(INITS)}")
    return torch.complex(torch.full_like(n, -0.5), imag)


def _complex(t: torch.Tensor) -> torch.Tensor:
    """A real tensor [..., 2] as complex (float32 -> complex64, float64 -> complex128)."""
    return torch.view_as_complex(t.contiguous())


class S4DKernel(nn.Module):
    """The S4D convolution kernel(s) K [channels, H, L] of H independent SISO systems."""

    def __init__(
        self,
        d_model: int,
        d_state: int = 64,
        channels: int = 1,
        init: str = "lin",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        ssm_lr: float | None = 0.001,
    ):
        super().__init__()
        if d_state % 2:
            raise ValueError(f"model.d_state={d_state} must be even (conjugate pairs keep d_state/2 modes)")
        modes = d_state // 2
        a = s4d_eigenvalues(modes, init, d_state).expand(d_model, modes)
        log_dt = torch.rand(d_model, dtype=torch.float64) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        self.log_dt = nn.Parameter(log_dt.float())
        self.log_A_real = nn.Parameter(torch.log(-a.real).float().clone())
        self.A_imag = nn.Parameter(a.imag.float().clone())
        self.B = nn.Parameter(torch.view_as_real(torch.ones(d_model, modes, dtype=torch.complex64)).clone())
        self.C = nn.Parameter(torch.view_as_real(torch.randn(channels, d_model, modes, dtype=torch.complex64)).clone())
        if ssm_lr is not None:
            for p in (self.log_dt, self.log_A_real, self.A_imag, self.B):
                p._optim = {"lr": ssm_lr, "weight_decay": 0.0}

    def discrete(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(dt A, B_bar), each [H, N/2] complex; A_bar = exp(dt A) (zero-order hold)."""
        dt = torch.exp(self.log_dt).unsqueeze(-1)
        a = torch.complex(-torch.exp(self.log_A_real), self.A_imag)
        dt_a = a * dt
        return dt_a, (torch.exp(dt_a) - 1) / a * _complex(self.B)

    def forward(self, length: int) -> torch.Tensor:
        """K [channels, H, length], float32 (float64 when the parameters are)."""
        with torch.autocast(device_type=self.log_dt.device.type, enabled=False):
            dt_a, b_bar = self.discrete()
            cb = _complex(self.C) * b_bar  # [channels, H, N/2]
            steps = torch.arange(length, device=dt_a.device, dtype=self.log_dt.dtype)
            vandermonde = torch.exp(dt_a.unsqueeze(-1) * steps)  # [H, N/2, L]: A_bar^l
            return 2 * torch.einsum("chn,hnl->chl", cb, vandermonde).real


class S4DMixer(TokenMixer):
    """S4D layer as a token mixer: SSM convolution + D skip, GELU, Linear(H, 2H), GLU."""

    def __init__(
        self,
        d_model: int,
        d_state: int = 64,
        init: str = "lin",
        bidirectional: bool = True,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dropout: float = 0.0,
        ssm_lr: float | None = 0.001,
    ):
        super().__init__()
        self.bidirectional = bidirectional
        self.kernel = S4DKernel(d_model, d_state, 2 if bidirectional else 1, init, dt_min, dt_max, ssm_lr)
        self.D = nn.Parameter(torch.randn(d_model))
        self.act = nn.GELU()
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(d_model, 2 * d_model)

    def ssm(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The state-space part y = K * u + D u, [B, L, H] -> [B, L, H] (float32 / float64)."""
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
        length = x.shape[1]
        k = self.kernel(length)
        if self.bidirectional:
            kernel, left = two_sided(k[0], k[1], backward_includes_current=False)
        else:
            kernel, left = k[0], 0
        u = x.transpose(1, 2)
        y = fft_conv(u, kernel, left) + self.D.to(compute_dtype(u)).unsqueeze(-1) * u.to(compute_dtype(u))
        return y.transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        y = self.drop(self.act(self.ssm(x, mask)))
        return F.glu(self.out(y), dim=-1)


@BACKBONES.register("s4")
def build_s4_layers(cfg: dict, max_len: int) -> list[nn.Module]:
    """``depth`` S4D layers (S4D paper's LRA models); the shared block adds residual and norm."""
    # techniques: see the techniques config group
    return [
        S4DMixer(
            d_model=cfg["d_model"],
            d_state=cfg.get("d_state", 64),
            init=cfg.get("init", "lin"),
            bidirectional=cfg.get("bidirectional", True),
            dt_min=cfg.get("dt_min", 0.001),
            dt_max=cfg.get("dt_max", 0.1),
            dropout=encoder_setting(cfg, "dropout"),
            ssm_lr=cfg.get("ssm_lr", 0.001),
        )
        for _ in range(cfg["depth"])
    ]

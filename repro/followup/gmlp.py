"""gMLP with a full-length learned convolution as its spatial projection
(the follow-up study, section 2.5, eq. 5, Table 6).

    Z = sigma(X U),  Z1, Z2 = split(Z),  Zhat = Z1 * (W Z2 + b),  O = Zhat V        (eq. 5)

The follow-up's reading of Liu et al. (2021): the learned spatial matrices W are
Toeplitz, so W is a convolution whose kernel covers every offset of the sequence,
in both directions (offsets -(L-1)..L-1: all of an L x L Toeplitz matrix), "fully
learned and unrestricted". Table 6: "H is the expanded number of dimensions where
the spatial convolution operates. The number of independent channels is the number
of channels of the spatial convolution kernel, which are repeated to reach H channels."

Our reading of the widths (the paper's U in R^{D x H}, V in R^{H x D} cannot both hold
once Z is split): Z1 and Z2 each have H channels (U: D -> 2H), the convolution runs on
H channels and V maps H -> D. Channel h uses kernel ``h mod channels`` (the kernels
tiled, as ``repeat``). The bias b is one value per position (W Z2 + b with b in R^L).
From Liu et al. section 2.1: LayerNorm on Z2 before the spatial projection, W near zero
and b = 1 at initialisation (so each block starts close to a channel MLP). The
initial kernel scale, uniform(-1e-3/L, 1e-3/L), is our choice.

The convolution runs by FFT in O(L log L) (repro/followup/fftconv.py). Padded
positions are zeroed before it, so real outputs do not depend on appended padding.
"""

from __future__ import annotations

import torch
from torch import nn

from ..models.mixer import BACKBONES, TokenMixer
from ..models.settings import encoder_setting
from .fftconv import fft_conv

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU}


class SpatialGatingUnit(nn.Module):
    """``Z1 * (conv(norm(Z2)) + b)``: a per-channel two-sided convolution of length 2*max_len - 1."""

    def __init__(self, d_hidden: int, max_len: int, channels: int, norm: bool = True, init_scale: float = 1e-3):
        super().__init__()
        if d_hidden % channels:
            raise ValueError(
                f"model.channels={channels} must divide model.d_hidden={d_hidden} (Table 6: kernels repeated to H)"
            )
        self.max_len = max_len
        self.channels = channels
        self.norm = nn.LayerNorm(d_hidden) if norm else nn.Identity()
        bound = init_scale / max_len
        # kernel[c, m] acts at offset m - (max_len - 1): output t reads input t - offset
        self.kernel = nn.Parameter(torch.empty(channels, 2 * max_len - 1).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.ones(max_len))

    def spatial(self, z: torch.Tensor) -> torch.Tensor:
        """``W z + b`` for z [B, L, H]: the Toeplitz projection along the sequence, by FFT."""
        batch, length, hidden = z.shape
        if length > self.max_len:
            raise ValueError(f"gMLP: sequence length {length} exceeds the kernel's max_len {self.max_len}")
        centre = self.max_len - 1
        kernel = self.kernel[:, centre - (length - 1) : centre + length]  # offsets -(L-1)..L-1
        u = z.transpose(1, 2).reshape(batch, hidden // self.channels, self.channels, length)
        y = fft_conv(u, kernel, left=length - 1).reshape(batch, hidden, length).transpose(1, 2)
        return y + self.bias[:length, None].to(y.dtype)

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        z1, z2 = z.chunk(2, dim=-1)
        z2 = self.norm(z2)
        if mask is not None:
            z2 = z2.masked_fill(~mask.unsqueeze(-1), 0.0)
        return z1 * self.spatial(z2).to(z1.dtype)


class GMLPMixer(TokenMixer):
    """One gMLP block's token mixer: U (D -> 2H), activation, spatial gating, V (H -> D)."""

    def __init__(
        self,
        d_model: int,
        d_hidden: int,
        max_len: int,
        channels: int,
        activation: str = "gelu",
        sgu_norm: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"model.activation={activation!r}: choose one of {', '.join(ACTIVATIONS)}")
        self.proj_in = nn.Linear(d_model, 2 * d_hidden)
        self.act = ACTIVATIONS[activation]()
        self.sgu = SpatialGatingUnit(d_hidden, max_len, channels, norm=sgu_norm)
        self.drop = nn.Dropout(dropout)
        self.proj_out = nn.Linear(d_hidden, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        z = self.act(self.proj_in(x))
        return self.proj_out(self.drop(self.sgu(z, mask)))


@BACKBONES.register("gmlp")
def build_gmlp_layers(cfg: dict, max_len: int) -> list[TokenMixer]:
    """``depth`` gMLP mixers (the follow-up study, Table 6); the shared block adds the residual and the norm."""
    # techniques: see the techniques config group
    return [
        GMLPMixer(
            d_model=cfg["d_model"],
            d_hidden=cfg["d_hidden"],
            max_len=max_len,
            channels=cfg.get("channels", 1),
            activation=cfg.get("activation", "gelu"),
            sgu_norm=cfg.get("sgu_norm", True),
            dropout=encoder_setting(cfg, "dropout"),
        )
        for _ in range(cfg["depth"])
    ]

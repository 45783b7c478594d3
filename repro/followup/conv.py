"""The follow-up's bounded-kernel convolution layer (seed 003 section 8, appendix A.2, Table 7).

"Each layer starts with a convolution that maps the input embeddings to H
channels, with kernel sizes varying between experiments ... After a
non-linearity, a linear layer returns back to D channels." The residual
connection and the (pre-)layer norm are the shared block's (``repro.blocks``).

The convolution is 'same'-padded and symmetric (K odd), so each output sees
K//2 tokens to each side: the receptive field per layer of seed 003 Table 1.
Padded positions are zeroed before the convolution, so a sequence's outputs do
not depend on how much padding follows it.

``impl`` picks how the convolution runs under bf16 autocast on GPU. cuDNN's bf16
conv1d with large kernels is slow (10 vs 149 TFLOP/s for TF32 on an H200,
kernel 61, 128->256 channels, length 2000), so the default runs the convolution
in float32 with TF32 tensor cores; ``benchmarks/conv_impl.py`` measures all.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

CONV_IMPLS = ("tf32", "bf16", "conv2d_bf16")
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


def conv1d_same(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int, impl: str) -> torch.Tensor:
    """Symmetric 'same' convolution of ``x`` [B, C_in, L] by ``weight`` [C_out, C_in/groups, K]."""
    pad = weight.shape[-1] // 2
    if impl == "tf32":
        # Leave autocast: float32 operands, which cuDNN runs on TF32 tensor cores
        # (torch.backends.cudnn.allow_tf32 is True by default).
        dtype = torch.float32 if x.dtype in (torch.bfloat16, torch.float16) else x.dtype
        with torch.autocast(device_type=x.device.type, enabled=False):
            return F.conv1d(x.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype), padding=pad, groups=groups)
    if impl == "bf16":
        return F.conv1d(x, weight, bias, padding=pad, groups=groups)
    if impl == "conv2d_bf16":
        # The same convolution as a 2-D one over a height-1 image: other cuDNN kernels.
        out = F.conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, padding=(0, pad), groups=groups)
        return out.squeeze(2)
    raise ValueError(f"conv impl {impl!r}: choose one of {', '.join(CONV_IMPLS)}")


class BoundedConvMixer(nn.Module):
    """Conv D->H (kernel K, groups g), activation, linear H->D (seed 003 appendix A.2)."""

    def __init__(
        self,
        d_model: int,
        d_hidden: int,
        kernel_size: int,
        groups: int = 1,
        activation: str = "relu",
        impl: str = "tf32",
    ):
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"kernel_size={kernel_size}: use an odd kernel so the convolution is symmetric")
        if d_model % groups or d_hidden % groups:
            raise ValueError(f"groups={groups} must divide d_model={d_model} and d_hidden={d_hidden}")
        if impl not in CONV_IMPLS:
            raise ValueError(f"conv impl {impl!r}: choose one of {', '.join(CONV_IMPLS)}")
        self.conv = nn.Conv1d(d_model, d_hidden, kernel_size, groups=groups)
        self.activation = ACTIVATIONS[activation]()
        self.out = nn.Linear(d_hidden, d_model)
        self.groups = groups
        self.impl = impl

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
        h = conv1d_same(x.transpose(1, 2), self.conv.weight, self.conv.bias, self.groups, self.impl)
        h = self.activation(h.transpose(1, 2))
        return self.out(h)

    def conv_flops(self, batch: int, length: int) -> int:
        """Multiply-adds x2 of the convolution's forward pass."""
        c_out, c_in_per_group, k = self.conv.weight.shape
        return 2 * batch * length * c_out * c_in_per_group * k


def build_conv_layers(cfg: dict) -> list[nn.Module]:
    """``depth`` bounded-conv mixers, one residual sublayer each (seed 003 Table 7)."""
    return [
        BoundedConvMixer(
            d_model=cfg["d_model"],
            d_hidden=cfg["d_hidden"],
            kernel_size=cfg["kernel_size"],
            groups=cfg.get("groups", 1),
            activation=cfg.get("activation", "relu"),
            impl=cfg.get("conv_impl", "tf32"),
        )
        for _ in range(cfg["depth"])
    ]

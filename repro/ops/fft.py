"""The 'same' convolution through the FFT, and FFT sizes that cuFFT and pocketfft run fast."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fft_size(minimum: int) -> int:
    """The smallest 2^a 3^b 5^c >= minimum (sizes cuFFT and pocketfft handle fast)."""
    best = 1 << (minimum - 1).bit_length()
    p5 = 1
    while p5 < best:
        p3 = p5
        while p3 < best:
            p2 = p3
            while p2 < minimum:
                p2 *= 2
            best = min(best, p2)
            p3 *= 3
        p5 *= 5
    return best


def conv1d_same_fft(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int) -> torch.Tensor:
    """Symmetric 'same' cross-correlation of ``x`` [B, C_in, L] by ``weight`` [C_out, C_in/groups, K]
    through the FFT, in float32 (float64 stays float64).

    With ``n >= L + K - 1`` the circular convolution of ``x`` with the flipped kernel is
    the linear one; output ``l`` of the cross-correlation is its entry ``l + K//2``. The
    channel mixing is one complex matrix product per frequency, so the cost no longer
    grows with K: about 8*B*C_in*C_out*(n/2+1)/groups real FLOPs instead of 2*B*C_in*C_out*L*K/groups.
    """
    batch, c_in, length = x.shape
    c_out, c_per_group, k = weight.shape
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    n = fft_size(length + k - 1)
    with torch.autocast(device_type=x.device.type, enabled=False):
        x_f = torch.fft.rfft(x.to(dtype), n=n)  # [B, C_in, F]
        w_f = torch.fft.rfft(weight.to(dtype).flip(-1), n=n)  # [C_out, C_in/g, F]
        x_f = x_f.unflatten(1, (groups, c_per_group))  # [B, G, c, F]
        w_f = w_f.unflatten(0, (groups, c_out // groups))  # [G, o, c, F]
        if groups == 1:
            # [F, B, c] @ [F, c, o]: one batched complex matrix product.
            y_f = torch.matmul(x_f[:, 0].permute(2, 0, 1), w_f[0].permute(2, 1, 0)).permute(1, 2, 0)
        else:
            y_f = torch.einsum("bgcf,gocf->bgof", x_f, w_f).flatten(1, 2)
        y = torch.fft.irfft(y_f, n=n)[..., k // 2 : k // 2 + length]
        if bias is not None:
            y = y + bias.to(dtype).unsqueeze(-1)
    return y


# impl name -> the dtype of the channel mixing (float64 inputs always mix in float64).
FFT_BLOCK_IMPLS = {"fft_blocks": "complex64", "fft_blocks_bf16": "bf16"}


def block_fft_size(kernel_size: int) -> int:
    """The FFT size of ``conv1d_same_fft_blocks``: the power of two >= 4 (K - 1), at least 16, so that
    each block's N - K + 1 outputs are at least three quarters of its N inputs (256 at K = 61)."""
    return max(16, 1 << max(0, 4 * (kernel_size - 1) - 1).bit_length())


def conv1d_same_fft_blocks(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    groups: int,
    mix: str = "complex64",
    n: int | None = None,
) -> torch.Tensor:
    """Symmetric 'same' cross-correlation of ``x`` [B, C_in, L] by ``weight`` [C_out, C_in/groups, K] by
    overlap-save: short FFTs of overlapping blocks, the channels mixed per frequency.

    The padded input is cut into blocks of ``n`` positions (``block_fft_size``) that start ``h = n - K + 1``
    apart; a block's circular cross-correlation with the kernel, ``irfft(rfft(block) * conj(rfft(w, n)))``,
    holds its ``h`` outputs without wrap-around in its first ``h`` entries. ``conv1d_same_fft`` transforms the
    whole row instead, so its kernel spectrum has a row's length of frequencies per channel pair
    ([C_out, C_in / groups, L / 2] complex, 35 times the kernel's bytes at K = 61, L = 2,000) and its
    products are small ones per frequency (the batch's rows). Here the spectrum has ``n / 2 + 1``
    frequencies and each frequency's product is, per group, [B * blocks, C_in / groups] by
    [C_in / groups, C_out / groups]. ``mix``: ``complex64`` multiplies complex numbers of float32 parts
    (training allows TF32 in float32 products; whether cuBLAS takes it for complex ones is not measured);
    ``bf16`` multiplies their real and imaginary parts as one real product of twice the width in bf16
    (tensor cores), its operands and its result rounded to bf16, as a bf16 convolution rounds its own.
    The result is float32 (float64 for float64 inputs, which compute in float64 throughout: the exact
    tests), laid out positions-major: [B, C_out, L] as a transposed view of [B, L, C_out].
    """
    if mix not in FFT_BLOCK_IMPLS.values():
        raise ValueError(f"mix={mix!r}: choose one of {', '.join(FFT_BLOCK_IMPLS.values())}")
    batch, c_in, length = x.shape
    c_out, c_per_group, k = weight.shape
    outs = c_out // groups
    n = block_fft_size(k) if n is None else n
    hop = n - k + 1
    if hop < 1:
        raise ValueError(f"FFT size {n} is below the kernel's {k} taps")
    blocks = -(-length // hop)
    pad = k // 2
    exact = x.dtype == torch.float64
    dtype = torch.float64 if exact else torch.float32
    with torch.autocast(device_type=x.device.type, enabled=False):
        rows = F.pad(x.to(dtype).transpose(1, 2), (0, 0, pad, blocks * hop + k - 1 - length - pad))  # [B, P, C]
        x_f = torch.fft.rfft(rows.unfold(1, n, hop), dim=-1)  # [B, blocks, C_in, F]
        freqs = x_f.shape[-1]
        x_f = x_f.unflatten(2, (groups, c_per_group)).permute(4, 2, 0, 1, 3)  # [F, G, B, blocks, c]
        x_f = x_f.reshape(freqs, groups, batch * blocks, c_per_group)  # contiguous: one copy, the product's layout
        w_f = torch.fft.rfft(weight.to(dtype), n=n, dim=-1).conj()  # [C_out, c, F]
        w_f = w_f.unflatten(0, (groups, outs)).permute(3, 0, 2, 1).contiguous()  # [F, G, c, o]
        if mix == "complex64":
            y_f = torch.matmul(x_f, w_f)  # [F, G, B * blocks, o]
        else:
            y_f = _real_block_product(x_f, w_f, dtype if exact else torch.bfloat16)
        y = torch.fft.irfft(y_f, n=n, dim=0)[:hop]  # [h, G, B * blocks, o]
        y = y.unflatten(2, (batch, blocks)).permute(2, 3, 0, 1, 4).reshape(batch, blocks * hop, c_out)
        y = y[:, :length].transpose(1, 2)  # [B, C_out, L], a view of the positions-major result
        if bias is not None:
            y = y + bias.to(dtype).unsqueeze(-1)
    return y


def _real_block_product(x_f: torch.Tensor, w_f: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x_f @ w_f`` of complex [..., M, c] by [..., c, o] as one real product in ``dtype``: the real and
    imaginary parts side by side, [..., M, 2c] by [[Re, Im], [-Im, Re]] of shape [..., 2c, 2o]."""
    x2 = torch.view_as_real(x_f).flatten(-2).to(dtype)  # [..., M, (c, re/im)]
    re, im = w_f.real, w_f.imag
    # rows (c, part of x), columns (o, part of y): y.re = x.re re - x.im im, y.im = x.re im + x.im re
    w2 = torch.stack([torch.stack([re, im], -1), torch.stack([-im, re], -1)], dim=-3).flatten(-4, -3).flatten(-2)
    y2 = torch.matmul(x2, w2.to(dtype)).to(x_f.real.dtype)  # [..., M, (o, re/im)]
    return torch.view_as_complex(y2.unflatten(-1, (-1, 2)).contiguous())

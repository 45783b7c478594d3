"""The 'same' convolution through the FFT, and FFT sizes that cuFFT and pocketfft run fast."""

from __future__ import annotations

import torch


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

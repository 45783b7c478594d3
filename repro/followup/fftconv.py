"""Long convolutions by FFT, O(L log L), shared by gMLP, S4D and MEGA's EMA.

One primitive: ``fft_conv(u, kernel, left)`` computes, along the last axis,

    y[..., t] = sum_m kernel[..., m] * u[..., t - (m - left)],   0 <= t < L,

so kernel entry ``m`` acts at offset ``d = m - left`` (output ``t`` reads input
``t - d``; ``left = 0`` is causal, ``left = K - 1`` anti-causal). Inputs outside
``[0, L)`` count as zero: the linear convolution, not a circular one.

With offsets in ``[-a, b]`` (``a = left``, ``b = K - 1 - left``, each at most
``L - 1``), a circular convolution of size ``n >= L + max(a, b)`` puts no wrapped
term on the outputs ``0..L-1`` (a term ``s + d < 0`` lands at ``n + s + d >= L``;
one ``s + d >= n`` would need ``n <= L - 1 + b``), so the full two-sided kernel
of a length-L sequence (``a = b = L - 1``) needs ``n >= 2L - 1``, as a causal one.

``torch.fft`` does not take bf16: the work runs in float32 with autocast off
(float64 stays float64 for the reference tests), and the result is float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops.fft import fft_size


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 stays float64 (exact reference checks); everything else computes in float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def fft_conv(u: torch.Tensor, kernel: torch.Tensor, left: int = 0) -> torch.Tensor:
    """Linear convolution of ``u`` [..., L] with ``kernel`` [..., K] (leading axes broadcast).

    Kernel entry ``m`` sits at offset ``m - left``; taps that can reach no output of a
    length-L sequence (offsets beyond ``L - 1`` either way) are dropped first.
    """
    length, k = u.shape[-1], kernel.shape[-1]
    if not 0 <= left < k:
        raise ValueError(f"fft_conv: left={left} must index the kernel (0 <= left < {k})")
    # drop taps at |offset| >= L: they never meet an input of this sequence
    lo = max(0, left - (length - 1))
    hi = min(k, left + length)
    kernel, left = kernel[..., lo:hi], left - lo
    k = kernel.shape[-1]
    n = fft_size(length + max(left, k - 1 - left))
    dtype = compute_dtype(u)
    with torch.autocast(device_type=u.device.type, enabled=False):
        circular = torch.roll(F.pad(kernel.to(dtype), (0, n - k)), -left, dims=-1)
        y = torch.fft.irfft(torch.fft.rfft(u.to(dtype), n=n) * torch.fft.rfft(circular, n=n), n=n)
    return y[..., :length]


def two_sided(
    forward: torch.Tensor, backward: torch.Tensor, backward_includes_current: bool
) -> tuple[torch.Tensor, int]:
    """One kernel for a bidirectional pass: ``forward`` [..., K] at offsets 0..K-1 (input at or
    before the output) and ``backward`` [..., K] reading inputs after it.

    ``backward_includes_current``: ``backward[j]`` acts at offset ``-j`` (MEGA's backward EMA,
    S5's reverse scan: both read the current token); otherwise at offset ``-(j + 1)`` (S4's
    bidirectional kernel: the current token belongs to the forward half only).
    Returns ``(kernel [..., 2K - 1], left)`` for :func:`fft_conv`.
    """
    k = forward.shape[-1]
    if backward_includes_current:
        combined = F.pad(forward, (k - 1, 0)) + F.pad(backward.flip(-1), (0, k - 1))
    else:
        combined = torch.cat([backward[..., : k - 1].flip(-1), forward], dim=-1)
    return combined, k - 1

"""Grouped 'same' convolution as one batched matrix product per group (the follow-up study's
Pathfinder layer, Table 7: groups 32), where cuDNN's grouped kernels run far below peak."""

from __future__ import annotations

import torch
import torch.nn.functional as F

TOEPLITZ_BLOCK = 64  # output positions per block: (block + K - 1) / K times the direct MACs


def conv1d_same_toeplitz(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int, block: int = TOEPLITZ_BLOCK
) -> torch.Tensor:
    """Symmetric 'same' cross-correlation of ``x`` [B, C_in, L] by ``weight`` [C_out, C_in/groups, K]
    as one batched matrix product per group.

    The output is cut into blocks of ``block`` positions; block ``j`` needs the input
    window of ``W = block + K - 1`` padded positions starting at ``j * block``. Per group,
    ``Y[(b, j), (o, t)] = sum_{c, w} X[(b, j), (c, w)] T[(c, w), (o, t)]`` with the banded
    (Toeplitz) matrix ``T[(c, w), (o, t)] = weight[o, c, w - t]`` where ``0 <= w - t < K``,
    else 0. That is ``W / K`` times the direct multiply-adds (about 2x at K=61, block 64),
    but as large dense products on tensor cores, where cuDNN runs grouped convolutions with
    few channels per group far below peak (paper/performance.md, "Bounded convolution").
    Autograd gives both gradients: products by ``T`` transposed, an overlap-add of the
    windows, and a sum over each band for the weight. Runs in the input's dtype (bf16
    under autocast, float64 in the exact tests).
    """
    if x.dtype == torch.float32 and torch.is_autocast_enabled(x.device.type):
        x = x.to(torch.get_autocast_dtype(x.device.type))  # build the windows once, in the product's dtype
    batch, c_in, length = x.shape
    c_out, c_per_group, k = weight.shape
    outs_per_group = c_out // groups
    pad = k // 2
    n_blocks = -(-length // block)
    width = block + k - 1
    x_pad = F.pad(x, (pad, pad + n_blocks * block - length))  # [B, C, n_blocks * block + K - 1]
    windows = x_pad.unfold(2, width, block)  # [B, C, n_blocks, W], a view
    windows = (
        windows.unflatten(1, (groups, c_per_group))
        .permute(1, 0, 3, 2, 4)
        .reshape(groups, batch * n_blocks, c_per_group * width)
    )
    # band[w, t] = weight[w - t] = padded[block - 1 + w - t]: row s = block - 1 - t of the padded
    # kernel's length-W windows (an unfold, whose backward is an overlap-add, not a scatter).
    padded = F.pad(weight.to(windows.dtype).unflatten(0, (groups, outs_per_group)), (block - 1, block - 1))
    band = padded.unfold(-1, width, 1).flip(-2)  # [G, o, c, T, W]: [..., t, w] = weight[w - t] or 0
    band = band.permute(0, 2, 4, 1, 3).reshape(groups, c_per_group * width, outs_per_group * block)
    y = torch.bmm(windows, band)  # [G, B * n_blocks, o * T]
    y = (
        y.view(groups, batch, n_blocks, outs_per_group, block)
        .permute(1, 0, 3, 2, 4)
        .reshape(batch, c_out, n_blocks * block)[..., :length]
    )
    if bias is not None:
        y = y + bias.to(y.dtype).unsqueeze(-1)
    return y

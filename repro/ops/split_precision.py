"""'Same' conv1d with a bf16 forward and a hand-written backward, for large kernels under bf16 autocast.

cuDNN's bf16 forward is fast at K=61 (about 300 TFLOP/s on an H200), but its bf16 *input-gradient*
kernel is the trap (10 TFLOP/s for the whole layer; paper/performance.md, "Bounded convolution").
Here the input gradient is a bf16 *forward* convolution of the output gradient by the flipped,
transposed kernel (``flip``), and the weight gradient is cuDNN's in TF32 or bf16 matrix products.
All accumulate in float32; float64 stays float64 (exact reference tests).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# impl name -> weight-gradient mode. "tf32": cuDNN's weight-gradient kernel on float32 operands
# (TF32 tensor cores); "mm": one bf16 matrix product per chunk of taps over channels-last windows.
SPLIT_IMPLS = {
    "bf16_flip_tf32w": "tf32",  # the built-in auto's choice for ungrouped K=61 above L=1,088
    "bf16_flip_mmw": "mm",  # fastest at ListOps' L=2,000 in one measurement; bench tables may pick it
}


def as_precision(dtype_name: str, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """Cast to the named compute precision (``bf16`` or ``tf32``, which runs float32 operands);
    float64 stays float64 (exact reference checks)."""
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    return [t if t.dtype == torch.float64 else t.to(dtype) for t in tensors]


def input_grad_flip(grad_out: torch.Tensor, weight: torch.Tensor, groups: int) -> torch.Tensor:
    """dL/dx as a forward 'same' convolution of ``grad_out`` by the flipped, transposed kernel.

    ``dx[c, m] = sum_{o,t} w[o, c, t] g[o, m + p - t]`` = ``sum_{o,s} w'[c, o, s] g[o, m + s - p]``
    with ``w'[c, o, s] = w[o, c, K-1-s]`` (per group). cuDNN's forward kernels are fast in
    bf16 where its bf16 input-gradient kernels are not (paper/performance.md).
    """
    c_out, c_per_group, k = weight.shape
    w_t = weight.unflatten(0, (groups, c_out // groups)).transpose(1, 2).flatten(0, 1).flip(-1)
    return F.conv1d(grad_out, w_t.contiguous(), None, padding=k // 2, groups=groups)


def weight_grad_mm(
    x: torch.Tensor, grad_out: torch.Tensor, weight_shape, groups: int, taps_per_chunk: int = 16
) -> torch.Tensor:
    """dL/dW[o, c, t] = sum_{b,l} g[b, o, l] x_pad[b, c, l + t] as matrix products over b*l.

    Channels-last windows of ``taps_per_chunk`` taps at a time are materialised
    ([B*L, C*taps], bounded memory) and multiplied by the output gradient [B*L, O]:
    a reduction of length B*L, which tensor cores run near peak.
    """
    c_out, c_per_group, k = weight_shape
    batch, c_in, length = x.shape
    pad = k // 2
    x_cl = F.pad(x, (pad, pad)).transpose(1, 2)  # [B, L+2p, C]
    g = grad_out.transpose(1, 2).reshape(batch * length, groups, c_out // groups)  # [N, G, O/G]
    pieces = []
    for t0 in range(0, k, taps_per_chunk):
        t1 = min(k, t0 + taps_per_chunk)
        # windows[b, l, t, c] = x_pad[b, c, l + t0 + t]
        win = x_cl[:, t0 : t1 + length - 1].unfold(1, length, 1)  # [B, taps, C, L]
        win = win.permute(0, 3, 1, 2).reshape(batch * length, t1 - t0, groups, c_per_group)
        if groups == 1:  # one plain GEMM: [O, N] @ [N, taps*C]
            piece = (g[:, 0].t() @ win.flatten(1)).unflatten(1, (t1 - t0, c_per_group)).unsqueeze(0)
        else:
            piece = torch.einsum("ngo,ntgc->gotc", g, win)
        pieces.append(piece)  # [G, O/G, taps, C/G]
    grad = torch.cat(pieces, dim=2)  # [G, O/G, K, C/G]
    return grad.flatten(0, 1).transpose(1, 2)


class FlippedGradConv(torch.autograd.Function):
    """'Same' conv1d: bf16 forward, ``flip`` input gradient, weight gradient by ``weight_grad`` mode."""

    @staticmethod
    def forward(ctx, x, weight, bias, groups, weight_grad):
        ctx.save_for_backward(x, weight)
        ctx.conf = (groups, weight_grad, bias is not None)
        pad = weight.shape[-1] // 2
        with torch.autocast(device_type=x.device.type, enabled=False):
            xf, wf = as_precision("bf16", x, weight)
            out = F.conv1d(xf, wf, None, padding=pad, groups=groups)
            if bias is not None:
                out = out + bias.to(out.dtype).unsqueeze(-1)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        groups, weight_grad, has_bias = ctx.conf
        pad = weight.shape[-1] // 2
        grad_x = grad_w = grad_b = None
        with torch.autocast(device_type=x.device.type, enabled=False):
            if ctx.needs_input_grad[0]:
                g, w = as_precision("bf16", grad_out, weight)
                grad_x = input_grad_flip(g.to(w.dtype), w, groups).to(x.dtype)
            if ctx.needs_input_grad[1]:
                if weight_grad == "mm":
                    g, xx = as_precision("bf16", grad_out, x)
                    grad_w = weight_grad_mm(xx, g.to(xx.dtype), weight.shape, groups)
                else:
                    g, xx = as_precision(weight_grad, grad_out, x)
                    grad_w = torch.nn.grad.conv1d_weight(xx, weight.shape, g, padding=pad, groups=groups)
                grad_w = grad_w.to(weight.dtype)
            if has_bias and ctx.needs_input_grad[2]:
                acc = torch.float64 if grad_out.dtype == torch.float64 else torch.float32
                grad_b = grad_out.sum((0, 2), dtype=acc).to(weight.dtype)
        return grad_x, grad_w, grad_b, None, None


def conv1d_same_split(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int, impl: str
) -> torch.Tensor:
    """Symmetric 'same' convolution of ``x`` [B, C_in, L] by ``weight`` [C_out, C_in/groups, K] by the
    split-precision ``impl`` (a key of ``SPLIT_IMPLS``)."""
    return FlippedGradConv.apply(x, weight, bias, groups, SPLIT_IMPLS[impl])

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
conv1d backward with large kernels is slow (10 vs 145 TFLOP/s for TF32 on an H200,
kernel 61, 128->256 channels, length 2000): its bf16 *input-gradient* kernel is the
trap, while its bf16 forward runs at about 300 TFLOP/s. ``bf16_flip_tf32w`` therefore
computes the input gradient as a bf16 forward convolution of the flipped, transposed
kernel (217 TFLOP/s for the whole layer). ``toeplitz`` runs the convolution as one
batched matrix product per group over blocks of positions (``conv1d_same_toeplitz``), for
grouped convolutions, where cuDNN's grouped kernels are slow (Pathfinder's groups 32).
``auto`` (the default) picks per shape the fastest implementation that
``experiments/bench_conv.py`` measured.
"""
from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# Forward, input-gradient and weight-gradient precisions of the split implementations.
# Gradient modes: "bf16" / "tf32" call cuDNN's own backward kernels in that precision;
# "flip" (input gradient) runs it as a bf16 *forward* convolution of the output gradient
# with the flipped, transposed kernel; "mm" (weight gradient) is one bf16 matrix product
# per chunk of taps over channels-last windows; "unfold" the older einsum over windows.
SPLIT_IMPLS = {
    "bf16_tf32wgrad": ("bf16", "bf16", "tf32"),
    "bf16_tf32bwd": ("bf16", "tf32", "tf32"),
    "bf16_unfoldwgrad": ("bf16", "bf16", "unfold"),
    "bf16_flip_tf32w": ("bf16", "flip", "tf32"),
    "bf16_flip_mmw": ("bf16", "flip", "mm"),
    "bf16_flip": ("bf16", "flip", "bf16"),  # cuDNN's bf16 weight gradient: measured slow (10 ms at K=61, L=2000)
}
CONV_IMPLS = ("tf32", "bf16", "conv2d_bf16", "fft", "fft_bf16", "toeplitz", *SPLIT_IMPLS)
IMPL_CHOICES = ("auto", *CONV_IMPLS)


AUTO_TABLE_ENV = "LRA_CONV_AUTO_TABLE"


def choose_impl(x: torch.Tensor, kernel_size: int, groups: int) -> str:
    """``impl=auto``: the fastest forward+backward measured by experiments/bench_conv.py.

    Off CUDA or outside bf16 autocast: the plain convolution (``bf16`` names cuDNN's own
    kernels in the input's dtype). Otherwise, if the environment variable
    ``LRA_CONV_AUTO_TABLE`` names a bench_conv JSON measured on this device, its fastest impl
    near this shape (``table_choice``), else the built-in rule (``builtin_choice``); decided
    once per shape.
    """
    if x.device.type != "cuda":
        return "bf16"
    if not (torch.is_autocast_enabled(x.device.type) and torch.get_autocast_dtype(x.device.type) == torch.bfloat16):
        return "bf16"  # full precision asked for (train.precision=fp32): the plain convolution, in fp32
    return _cuda_choice(os.environ.get(AUTO_TABLE_ENV), x.device.index, kernel_size, x.shape[-1], groups)


@functools.lru_cache(maxsize=None)
def _cuda_choice(table_path: str | None, device_index: int | None, kernel_size: int, length: int, groups: int) -> str:
    """``choose_impl`` under bf16 autocast on CUDA, memoised: it runs in every layer's forward."""
    measured = table_choice(_auto_table(), torch.cuda.get_device_name(device_index), kernel_size, length, groups)
    return measured if measured is not None else builtin_choice(kernel_size, length, groups)


def builtin_choice(kernel_size: int, length: int, groups: int) -> str:
    """``auto`` without a bench table (H200, torch 2.11, 128->256 channels, batch 32).

    K <= 31: cuDNN bf16. Grouped K=61 (Pathfinder, Path-X: groups 32): ``toeplitz``, 1.54 ms
    against cuDNN bf16's 3.00 (fwd+bwd, batch 128, L=1,024, 128->256; tenth session,
    experiments/evidence/2026-11-26-session10/bench_conv.json; its cost is linear in L like the
    direct sums', so Path-X's L=16,384 takes it too). Ungrouped K=61: the FFT up to L=1,088,
    ``bf16_flip_tf32w`` above (whatever the task: the image task's L=1,024 takes the FFT too).
    At L <= 1,024 cuDNN picks slow kernels for the flipped and weight-gradient convolutions
    (``bf16_flip_tf32w`` 3.8-7.4 ms at L=512-1,024 against the FFT's 1.8-2.4); from L=1,152 up
    the flipped path is faster (2.53 vs 2.74 ms at 1,152; 3.51 vs 3.86 at 2,000; 3.59 vs 6.99
    at 4,096, batch 16). Lengths 512-2,000 in steps of 128:
    experiments/evidence/2026-11-26-session4/bench_conv_lengths.json.
    """
    if kernel_size <= 31:
        return "bf16"
    if groups > 1:
        return "toeplitz"
    return "fft" if length <= 1088 else "bf16_flip_tf32w"


def table_choice(table: dict | None, device: str, kernel_size: int, length: int, groups: int) -> str | None:
    """The fastest impl a bench_conv record measured on this device for this kernel and groups at
    the measured length nearest ``length``, if that is within 6% (length-bucketed batches come in
    widths 128 apart, and cuDNN's kernel choice changes abruptly between them, see
    ``builtin_choice``); else None, and the built-in rule decides."""
    if not table or table.get("device") != device:
        return None
    rows = [r for r in table.get("rows", []) if (r["kernel"], r["groups"]) == (kernel_size, groups)
            and max(r["length"], length) <= TABLE_LENGTH_RATIO * min(r["length"], length)]
    if not rows:
        return None
    nearest = min(rows, key=lambda r: abs(math.log(r["length"] / length)))["length"]
    return min((r for r in rows if r["length"] == nearest), key=lambda r: r["fwd_bwd_ms"])["impl"]


TABLE_LENGTH_RATIO = 1.06


_TABLES: dict[str, dict] = {}


def _auto_table() -> dict | None:
    path = os.environ.get(AUTO_TABLE_ENV)
    if not path:
        return None
    if path not in _TABLES:
        try:
            table = json.loads(Path(path).read_text())
            rows = table["rows"]
            unknown = sorted({r["impl"] for r in rows} - set(CONV_IMPLS))
            numeric = ("kernel", "length", "groups", "fwd_bwd_ms")
            if not all(isinstance(r[key], (int, float)) for r in rows for key in numeric) or not isinstance(table["device"], str):
                raise TypeError("rows need numeric kernel, length, groups, fwd_bwd_ms and the record a device name")
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise RuntimeError(f"{AUTO_TABLE_ENV}={path}: not a readable experiments/bench_conv.py record "
                               f"({type(err).__name__}: {err}); unset it or point it at bench_conv.py --out output") from err
        if unknown:
            raise RuntimeError(f"{AUTO_TABLE_ENV}={path} names conv impl(s) {unknown} that this version does not have "
                               f"({', '.join(CONV_IMPLS)}); rerun experiments/bench_conv.py with this version")
        _TABLES[path] = table
    return _TABLES[path]


ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


def conv1d_same(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int, impl: str) -> torch.Tensor:
    """Symmetric 'same' convolution of ``x`` [B, C_in, L] by ``weight`` [C_out, C_in/groups, K]."""
    pad = weight.shape[-1] // 2
    if impl == "auto":
        impl = choose_impl(x, weight.shape[-1], groups)
    if impl == "tf32":
        # Leave autocast: float32 operands, which cuDNN runs on TF32 tensor cores
        # (torch.backends.cudnn.allow_tf32 is True by default).
        xf, wf = _as("tf32", x, weight)
        bf = None if bias is None else bias.to(xf.dtype)
        with torch.autocast(device_type=x.device.type, enabled=False):
            return F.conv1d(xf, wf, bf, padding=pad, groups=groups)
    if impl == "bf16":
        return F.conv1d(x, weight, bias, padding=pad, groups=groups)
    if impl in ("fft", "fft_bf16"):
        return conv1d_same_fft(x, weight, bias, groups, mix_in_bf16=impl == "fft_bf16")
    if impl == "toeplitz":
        return conv1d_same_toeplitz(x, weight, bias, groups)
    if impl in SPLIT_IMPLS:
        return _SplitPrecisionConv.apply(x, weight, bias, groups, *SPLIT_IMPLS[impl])
    if impl == "conv2d_bf16":
        # The same convolution as a 2-D one over a height-1 image: other cuDNN kernels.
        out = F.conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, padding=(0, pad), groups=groups)
        return out.squeeze(2)
    raise ValueError(f"conv impl {impl!r}: choose one of {', '.join(CONV_IMPLS)}")


def conv1d_same_fft(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int, mix_in_bf16: bool = False) -> torch.Tensor:
    """The same 'same' cross-correlation through the FFT, in float32 (float64 stays float64).

    ``mix_in_bf16`` (groups 1 only) does the per-frequency channel mixing as one real
    bf16 matrix product on tensor cores, ``[Xr, Xi] @ [[Wr, Wi], [-Wi, Wr]]``, instead of
    complex64 products; the FFTs stay in float32.

    With ``n >= L + K - 1`` the circular convolution of ``x`` with the flipped kernel is
    the linear one; output ``l`` of the cross-correlation is its entry ``l + K//2``. The
    channel mixing is one complex matrix product per frequency, so the cost no longer
    grows with K: about 8*B*C_in*C_out*(n/2+1)/groups real FLOPs instead of 2*B*C_in*C_out*L*K/groups.
    """
    batch, c_in, length = x.shape
    c_out, c_per_group, k = weight.shape
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    n = _fft_size(length + k - 1)
    with torch.autocast(device_type=x.device.type, enabled=False):
        x_f = torch.fft.rfft(x.to(dtype), n=n)  # [B, C_in, F]
        w_f = torch.fft.rfft(weight.to(dtype).flip(-1), n=n)  # [C_out, C_in/g, F]
        x_f = x_f.unflatten(1, (groups, c_per_group))  # [B, G, c, F]
        w_f = w_f.unflatten(0, (groups, c_out // groups))  # [G, o, c, F]
        if groups == 1 and mix_in_bf16:
            y_f = _mix_real_blocks(x_f[:, 0], w_f[0])
        elif groups == 1:
            # [F, B, c] @ [F, c, o]: one batched complex matrix product.
            y_f = torch.matmul(x_f[:, 0].permute(2, 0, 1), w_f[0].permute(2, 1, 0)).permute(1, 2, 0)
        else:
            y_f = torch.einsum("bgcf,gocf->bgof", x_f, w_f).flatten(1, 2)
        y = torch.fft.irfft(y_f, n=n)[..., k // 2 : k // 2 + length]
        if bias is not None:
            y = y + bias.to(dtype).unsqueeze(-1)
    return y


TOEPLITZ_BLOCK = 64  # output positions per block: (block + K - 1) / K times the direct MACs


def conv1d_same_toeplitz(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int,
                         block: int = TOEPLITZ_BLOCK) -> torch.Tensor:
    """The same 'same' cross-correlation as one batched matrix product per group.

    The output is cut into blocks of ``block`` positions; block ``j`` needs the input
    window of ``W = block + K - 1`` padded positions starting at ``j * block``. Per group,
    ``Y[(b, j), (o, t)] = sum_{c, w} X[(b, j), (c, w)] T[(c, w), (o, t)]`` with the banded
    (Toeplitz) matrix ``T[(c, w), (o, t)] = weight[o, c, w - t]`` where ``0 <= w - t < K``,
    else 0. That is ``W / K`` times the direct multiply-adds (about 2x at K=61, block 64),
    but as large dense products on tensor cores, where cuDNN runs grouped convolutions with
    few channels per group far below peak (experiments/perf_notes.md, "Grouped convolution as a
    Toeplitz product").
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
    windows = (windows.unflatten(1, (groups, c_per_group)).permute(1, 0, 3, 2, 4)
               .reshape(groups, batch * n_blocks, c_per_group * width))
    # band[w, t] = weight[w - t] = padded[block - 1 + w - t]: row s = block - 1 - t of the padded
    # kernel's length-W windows (an unfold, whose backward is an overlap-add, not a scatter).
    padded = F.pad(weight.to(windows.dtype).unflatten(0, (groups, outs_per_group)), (block - 1, block - 1))
    band = padded.unfold(-1, width, 1).flip(-2)  # [G, o, c, T, W]: [..., t, w] = weight[w - t] or 0
    band = band.permute(0, 2, 4, 1, 3).reshape(groups, c_per_group * width, outs_per_group * block)
    y = torch.bmm(windows, band)  # [G, B * n_blocks, o * T]
    y = (y.view(groups, batch, n_blocks, outs_per_group, block).permute(1, 0, 3, 2, 4)
         .reshape(batch, c_out, n_blocks * block)[..., :length])
    if bias is not None:
        y = y + bias.to(y.dtype).unsqueeze(-1)
    return y


def _mix_real_blocks(x_f: torch.Tensor, w_f: torch.Tensor) -> torch.Tensor:
    """``Y[b, o, f] = sum_c X[b, c, f] W[o, c, f]`` (complex) as a real bf16 product per frequency.

    x_f [B, C, F], w_f [O, C, F] complex -> [B, O, F] complex. float64 inputs stay float64.
    """
    low = torch.float64 if x_f.real.dtype == torch.float64 else torch.bfloat16
    xs = torch.cat([x_f.real, x_f.imag], dim=1).permute(2, 0, 1).to(low)  # [F, B, 2C]
    wr, wi = w_f.real.permute(2, 1, 0), w_f.imag.permute(2, 1, 0)  # [F, C, O]
    blocks = torch.cat([torch.cat([wr, wi], dim=2), torch.cat([-wi, wr], dim=2)], dim=1).to(low)  # [F, 2C, 2O]
    ys = torch.bmm(xs, blocks).to(x_f.real.dtype)  # [F, B, 2O]
    yr, yi = ys.permute(1, 2, 0).chunk(2, dim=1)  # [B, O, F] each
    return torch.complex(yr.contiguous(), yi.contiguous())


def _fft_size(minimum: int) -> int:
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


def _as(dtype_name: str, *tensors):
    """Cast to the named compute precision; float64 stays float64 (exact reference checks)."""
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    return [t if t.dtype == torch.float64 else t.to(dtype) for t in tensors]


def _input_grad_flip(grad_out: torch.Tensor, weight: torch.Tensor, groups: int) -> torch.Tensor:
    """dL/dx as a forward 'same' convolution of ``grad_out`` by the flipped, transposed kernel.

    ``dx[c, m] = sum_{o,t} w[o, c, t] g[o, m + p - t]`` = ``sum_{o,s} w'[c, o, s] g[o, m + s - p]``
    with ``w'[c, o, s] = w[o, c, K-1-s]`` (per group). cuDNN's forward kernels are fast in
    bf16 where its bf16 input-gradient kernels are not (experiments/perf_notes.md).
    """
    c_out, c_per_group, k = weight.shape
    w_t = weight.unflatten(0, (groups, c_out // groups)).transpose(1, 2).flatten(0, 1).flip(-1)
    return F.conv1d(grad_out, w_t.contiguous(), None, padding=k // 2, groups=groups)


def _weight_grad_mm(x: torch.Tensor, grad_out: torch.Tensor, weight_shape, groups: int, taps_per_chunk: int = 16) -> torch.Tensor:
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


def _weight_grad_unfold(x: torch.Tensor, grad_out: torch.Tensor, weight_shape, groups: int) -> torch.Tensor:
    """dL/dW[o, c, t] = sum_{b,l} g[b, o, l] x_pad[b, c, l + t], as bf16 matrix products."""
    c_out, c_per_group, k = weight_shape
    pad = k // 2
    windows = F.pad(x, (pad, pad)).unfold(2, k, 1)  # [B, C_in, L, K], a view
    g = grad_out.unflatten(1, (groups, c_out // groups))  # [B, G, O/G, L]
    w = windows.unflatten(1, (groups, c_per_group))  # [B, G, C/G, L, K]
    grad = torch.einsum("bgol,bgclk->gock", g, w)
    return grad.flatten(0, 1)


# Weight-gradient modes computed by our own bf16 matrix products (the others call cuDNN).
_MATMUL_WEIGHT_GRADS = {"mm": _weight_grad_mm, "unfold": _weight_grad_unfold}


class _SplitPrecisionConv(torch.autograd.Function):
    """'Same' conv1d whose forward, input gradient and weight gradient each pick a precision.

    cuDNN's bf16 kernels are fast for the forward pass but its bf16 backward with large
    kernels is slow (see experiments/bench_conv.py); the gradients can take TF32 or a
    bf16 matrix-product formulation instead. All accumulate in float32.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, groups, fwd, dgrad, wgrad):
        ctx.save_for_backward(x, weight)
        ctx.conf = (groups, dgrad, wgrad, bias is not None)
        pad = weight.shape[-1] // 2
        with torch.autocast(device_type=x.device.type, enabled=False):
            xf, wf = _as(fwd, x, weight)
            out = F.conv1d(xf, wf, None, padding=pad, groups=groups)
            if bias is not None:
                out = out + bias.to(out.dtype).unsqueeze(-1)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        groups, dgrad, wgrad, has_bias = ctx.conf
        pad = weight.shape[-1] // 2
        grad_x = grad_w = grad_b = None
        with torch.autocast(device_type=x.device.type, enabled=False):
            if ctx.needs_input_grad[0] and dgrad == "flip":
                g, w = _as("bf16", grad_out, weight)
                grad_x = _input_grad_flip(g.to(w.dtype), w, groups).to(x.dtype)
            elif ctx.needs_input_grad[0]:
                g, w = _as(dgrad, grad_out, weight)
                grad_x = torch.nn.grad.conv1d_input(x.shape, w, g, padding=pad, groups=groups).to(x.dtype)
            if ctx.needs_input_grad[1]:
                if wgrad in _MATMUL_WEIGHT_GRADS:
                    g, xx = _as("bf16", grad_out, x)
                    grad_w = _MATMUL_WEIGHT_GRADS[wgrad](xx, g.to(xx.dtype), weight.shape, groups)
                else:
                    g, xx = _as(wgrad, grad_out, x)
                    grad_w = torch.nn.grad.conv1d_weight(xx, weight.shape, g, padding=pad, groups=groups)
                grad_w = grad_w.to(weight.dtype)
            if has_bias and ctx.needs_input_grad[2]:
                acc = torch.float64 if grad_out.dtype == torch.float64 else torch.float32
                grad_b = grad_out.sum((0, 2), dtype=acc).to(weight.dtype)
        return grad_x, grad_w, grad_b, None, None, None, None


class BoundedConvMixer(nn.Module):
    """Conv D->H (kernel K, groups g), activation, linear H->D (seed 003 appendix A.2)."""

    # Padded positions are zeroed before the convolution and the linear layer is per token, so
    # trimming trailing padding leaves every real position's output unchanged (repro/batching.py).
    length_flexible = True

    def __init__(
        self,
        d_model: int,
        d_hidden: int,
        kernel_size: int,
        groups: int = 1,
        activation: str = "relu",
        impl: str = "auto",
    ):
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"kernel_size={kernel_size}: use an odd kernel so the convolution is symmetric")
        if d_model % groups or d_hidden % groups:
            raise ValueError(f"groups={groups} must divide d_model={d_model} and d_hidden={d_hidden}")
        if impl not in IMPL_CHOICES:
            raise ValueError(f"model.conv_impl={impl!r}: choose one of {', '.join(IMPL_CHOICES)}")
        self.conv = nn.Conv1d(d_model, d_hidden, kernel_size, groups=groups)
        self.activation = ACTIVATIONS[activation]()
        self.out = nn.Linear(d_hidden, d_model)
        self.groups = groups
        self.impl = impl
        self.resolved_impls: set[str] = set()  # what ran, every shape seen (run records; bucketed widths differ)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
        h_in = x.transpose(1, 2)
        impl = choose_impl(h_in, self.conv.kernel_size[0], self.groups) if self.impl == "auto" else self.impl
        self.resolved_impls.add(impl)
        h = conv1d_same(h_in, self.conv.weight, self.conv.bias, self.groups, impl)
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
            impl=cfg.get("conv_impl", "auto"),
        )
        for _ in range(cfg["depth"])
    ]


def resolved_impls(model: nn.Module) -> list[str] | None:
    """The conv implementations a model's bounded-conv layers ran (for the run record), or None."""
    found = set().union(*(m.resolved_impls for m in model.modules() if isinstance(m, BoundedConvMixer)))
    return sorted(found) or None

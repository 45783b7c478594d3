"""How the symmetric 'same' conv1d of the bounded-kernel layer runs: its implementations and ``auto``.

``impl`` picks how the convolution runs under bf16 autocast on GPU. cuDNN's bf16 conv1d backward
with large kernels is slow (10 vs 145 TFLOP/s for TF32 on an H200, kernel 61, 128->256 channels,
length 2000): its bf16 *input-gradient* kernel is the trap, while its bf16 forward runs at about
300 TFLOP/s. ``bf16_flip_tf32w`` therefore computes the input gradient as a bf16 forward
convolution of the flipped, transposed kernel (217 TFLOP/s for the whole layer;
``repro/ops/split_precision.py``). ``toeplitz`` runs the convolution as one batched matrix product
per group over blocks of positions (``repro/ops/toeplitz.py``), for grouped convolutions, where
cuDNN's grouped kernels are slow (Pathfinder's groups 32). ``fft`` is the FFT over the whole row,
``fft_blocks`` and ``fft_blocks_bf16`` the FFT over short overlapping blocks (overlap-save, the
channels mixed in complex64 or in bf16; ``repro/ops/fft.py``). ``auto`` (the default) picks per
shape the fastest implementation that ``experiments/check_fast.py conv`` measured
(paper/performance.md, "Bounded convolution").
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from .fft import FFT_BLOCK_IMPLS, conv1d_same_fft, conv1d_same_fft_blocks
from .split_precision import SPLIT_IMPLS, as_precision, conv1d_same_split
from .toeplitz import conv1d_same_toeplitz

# "tf32" is never auto's choice: it stays as the full-precision baseline check_fast.py conv measures the others against.
CONV_IMPLS = ("tf32", "bf16", "fft", "toeplitz", *SPLIT_IMPLS, *FFT_BLOCK_IMPLS)
IMPL_CHOICES = ("auto", *CONV_IMPLS)

AUTO_TABLE_ENV = "LRA_CONV_AUTO_TABLE"
TABLE_LENGTH_RATIO = 1.06


def conv1d_same(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int, impl: str
) -> torch.Tensor:
    """Symmetric 'same' convolution of ``x`` [B, C_in, L] by ``weight`` [C_out, C_in/groups, K]."""
    pad = weight.shape[-1] // 2
    if impl == "auto":
        impl = choose_impl(x, weight.shape[-1], groups)
    if impl == "tf32":
        # Leave autocast: float32 operands, which cuDNN runs on TF32 tensor cores
        # (torch.backends.cudnn.allow_tf32 is True by default).
        xf, wf = as_precision("tf32", x, weight)
        bf = None if bias is None else bias.to(xf.dtype)
        with torch.autocast(device_type=x.device.type, enabled=False):
            return F.conv1d(xf, wf, bf, padding=pad, groups=groups)
    if impl == "bf16":
        return F.conv1d(x, weight, bias, padding=pad, groups=groups)
    if impl == "fft":
        return conv1d_same_fft(x, weight, bias, groups)
    if impl == "toeplitz":
        return conv1d_same_toeplitz(x, weight, bias, groups)
    if impl in SPLIT_IMPLS:
        return conv1d_same_split(x, weight, bias, groups, impl)
    if impl in FFT_BLOCK_IMPLS:
        return conv1d_same_fft_blocks(x, weight, bias, groups, FFT_BLOCK_IMPLS[impl])
    raise ValueError(f"conv impl {impl!r}: choose one of {', '.join(CONV_IMPLS)}")


def conv1d_same_windows(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int, impl: str, width: int
) -> torch.Tensor:
    """``conv1d_same`` of ``x`` [N, C_in, S], computed on windows of ``width`` outputs each.

    Each window holds its ``width`` inputs and the K // 2 on either side (zeros past the ends), so its
    middle ``width`` outputs are the whole row's; the windows run as one batch [N * ceil(S / width),
    C_in, width + K - 1]. A packed stream (``train.pack_sequences``) is one row tens of thousands of
    positions long, on which cuDNN may pick a slow generic kernel (paper/performance.md, "Packed
    sequences"); cut into windows as wide as the padded batch's rows, it has the padded batch's shape
    again. ``impl=auto`` chooses by the window's length (``conv1d_same`` decides on the windows)."""
    n, c_in, length = x.shape
    pad = weight.shape[-1] // 2
    rows = -(-length // width)
    padded = F.pad(x, (pad, rows * width - length + pad))
    windows = padded.unfold(-1, width + 2 * pad, width).transpose(1, 2).reshape(n * rows, c_in, width + 2 * pad)
    out = conv1d_same(windows, weight, bias, groups, impl)[..., pad : pad + width]
    return out.reshape(n, rows, -1, width).transpose(1, 2).reshape(n, -1, rows * width)[..., :length]


def ran_as(impl: str, x: torch.Tensor) -> str:
    """The name a run record gives ``impl`` applied to ``x``: ``bf16`` is the plain convolution in the
    operands' dtype, so without autocast it ran in float32 (``fp32`` on the CPU, ``tf32`` on CUDA, where
    training lets cuDNN use TF32)."""
    if impl != "bf16" or torch.is_autocast_enabled(x.device.type) or x.dtype == torch.bfloat16:
        return impl
    return "fp32" if x.device.type == "cpu" else "tf32"


def choose_impl(x: torch.Tensor, kernel_size: int, groups: int, length: int | None = None) -> str:
    """``impl=auto``: the fastest forward+backward measured by experiments/check_fast.py conv.

    Off CUDA or outside bf16 autocast: the plain convolution (``bf16`` names cuDNN's own
    kernels in the input's dtype). Otherwise, if the environment variable
    ``LRA_CONV_AUTO_TABLE`` names a bench_conv.json (check_fast.py conv) measured on this device, its fastest impl
    near this shape (``table_choice``), else the built-in rule (``builtin_choice``); decided
    once per shape. ``length``: the rows' length the convolution will run on, if not ``x``'s (windows).
    """
    if x.device.type != "cuda":
        return "bf16"
    if not (torch.is_autocast_enabled(x.device.type) and torch.get_autocast_dtype(x.device.type) == torch.bfloat16):
        return "bf16"  # full precision asked for (train.precision=fp32): the plain convolution, in fp32
    rows = x.shape[-1] if length is None else length
    return _cuda_choice(os.environ.get(AUTO_TABLE_ENV), x.device.index, kernel_size, rows, groups)


@functools.cache
def _cuda_choice(table_path: str | None, device_index: int | None, kernel_size: int, length: int, groups: int) -> str:
    """``choose_impl`` under bf16 autocast on CUDA, memoised: it runs in every layer's forward."""
    measured = table_choice(_auto_table(), torch.cuda.get_device_name(device_index), kernel_size, length, groups)
    return measured if measured is not None else builtin_choice(kernel_size, length, groups)


def builtin_choice(kernel_size: int, length: int, groups: int) -> str:
    """``auto`` without a bench table (H200, torch 2.11, 128->256 channels, batch 32).

    K <= 31: cuDNN bf16. Grouped K=61 (Pathfinder, Path-X: groups 32): ``toeplitz``, 1.54 ms
    against cuDNN bf16's 3.00 (fwd+bwd, batch 128, L=1,024, 128->256;
    results/bench/2026-11-26_nvidia-h200_conv_k61_toeplitz/bench_conv.json; its cost is linear in L like the
    direct sums', so Path-X's L=16,384 takes it too). Ungrouped K=61: the FFT up to L=1,088,
    ``bf16_flip_tf32w`` above (whatever the task: the image task's L=1,024 takes the FFT too).
    At L <= 1,024 cuDNN picks slow kernels for the flipped and weight-gradient convolutions
    (``bf16_flip_tf32w`` 3.8-7.4 ms at L=512-1,024 against the FFT's 1.8-2.4); from L=1,152 up
    the flipped path is faster (2.53 vs 2.74 ms at 1,152; 3.51 vs 3.86 at 2,000; 3.59 vs 6.99
    at 4,096, batch 16). Lengths 512-2,000 in steps of 128:
    results/bench/2026-11-26_nvidia-h200_conv_k61_lengths/bench_conv.json.
    """
    if kernel_size <= 31:
        return "bf16"
    if groups > 1:
        return "toeplitz"
    return "fft" if length <= 1088 else "bf16_flip_tf32w"


def table_choice(table: dict | None, device: str, kernel_size: int, length: int, groups: int) -> str | None:
    """The fastest impl a bench_conv.json record measured on this device for this kernel and groups at
    the measured length nearest ``length``, if that is within 6% (length-bucketed batches come in
    widths 128 apart, and cuDNN's kernel choice changes abruptly between them, see
    ``builtin_choice``); else None, and the built-in rule decides."""
    if not table or table.get("device") != device:
        return None
    rows = [
        r
        for r in table.get("rows", [])
        if (r["kernel"], r["groups"]) == (kernel_size, groups)
        and max(r["length"], length) <= TABLE_LENGTH_RATIO * min(r["length"], length)
    ]
    if not rows:
        return None
    nearest = min(rows, key=lambda r: abs(math.log(r["length"] / length)))["length"]
    return min((r for r in rows if r["length"] == nearest), key=lambda r: r["fwd_bwd_ms"])["impl"]


_TABLES: dict[str, dict] = {}


def auto_table_identity() -> dict | None:
    """The measured table ``LRA_CONV_AUTO_TABLE`` names, as a record states it: its path and the sha256 of
    its bytes (None when the variable is unset, and ``auto`` follows ``builtin_choice``)."""
    path = os.environ.get(AUTO_TABLE_ENV)
    if not path:
        return None
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as err:
        raise RuntimeError(f"{AUTO_TABLE_ENV}={path}: cannot be read ({err}); unset it or point it at a file") from err
    return {"path": path, "sha256": digest}


def _auto_table() -> dict | None:
    """The bench_conv.json record ``LRA_CONV_AUTO_TABLE`` names (read once), or None when it is unset."""
    path = os.environ.get(AUTO_TABLE_ENV)
    if not path:
        return None
    if path not in _TABLES:
        try:
            table = json.loads(Path(path).read_text())
            rows = table["rows"]
            unknown = sorted({r["impl"] for r in rows} - set(CONV_IMPLS))
            numeric = ("kernel", "length", "groups", "fwd_bwd_ms")
            numbers = all(isinstance(r[key], (int, float)) for r in rows for key in numeric)
            if not numbers or not isinstance(table["device"], str):
                raise TypeError("rows need numeric kernel, length, groups, fwd_bwd_ms and the record a device name")
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise RuntimeError(
                f"{AUTO_TABLE_ENV}={path}: not a readable experiments/check_fast.py conv record "
                f"({type(err).__name__}: {err}); unset it or point it at check_fast.py conv --out output"
            ) from err
        if unknown:
            raise RuntimeError(
                f"{AUTO_TABLE_ENV}={path} names conv impl(s) {unknown} that this version does not have "
                f"({', '.join(CONV_IMPLS)}); rerun experiments/check_fast.py conv with this version"
            )
        _TABLES[path] = table
    return _TABLES[path]

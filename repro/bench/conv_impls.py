"""``check_fast.py conv``: every bounded-convolution implementation per shape, and the bf16 peak (``CONV_DOC``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from ..ops.conv import CONV_IMPLS, conv1d_same
from .timing import matmul_peak_tflops, time_ms

CONV_DOC = """Measure the bounded-conv implementations and the bf16 matmul peak on this GPU.

``python experiments/check_fast.py conv --out bench_conv.json``: for each ``impl`` of
repro.ops.conv (``CONV_IMPLS``: cuDNN in TF32 and in bf16, the FFT, the Toeplitz product, the
split-precision paths) and each shape, the median time of forward and of forward+backward of one
convolution (CUDA events, warm-up excluded), the achieved TFLOP/s (2*MACs forward,
3x that for forward+backward), and the bf16 8192^3 matmul rate measured in the
same process as the ceiling. Prints a table and the fastest impl per shape.
"""


def bench_shape(
    batch: int, c_in: int, c_out: int, kernel: int, length: int, groups: int, impls=CONV_IMPLS
) -> list[dict]:
    rows = []
    macs = batch * length * c_out * (c_in // groups) * kernel
    for impl in impls:
        x = torch.randn(batch, c_in, length, device="cuda", requires_grad=True)
        w = (torch.randn(c_out, c_in // groups, kernel, device="cuda") / (c_in * kernel) ** 0.5).requires_grad_()
        bias = torch.zeros(c_out, device="cuda", requires_grad=True)

        def forward(x=x, w=w, bias=bias, impl=impl):  # this impl's tensors, bound now
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return conv1d_same(x, w, bias, groups, impl)

        def forward_backward(forward=forward):
            forward().float().sum().backward()

        with torch.no_grad():
            fwd_ms, fwd_spread = time_ms(forward)
        fb_ms, fb_spread = time_ms(forward_backward)
        rows.append(
            {
                "impl": impl,
                "batch": batch,
                "c_in": c_in,
                "c_out": c_out,
                "kernel": kernel,
                "length": length,
                "groups": groups,
                "fwd_ms": fwd_ms,
                "fwd_spread_ms": fwd_spread,
                "fwd_tflops": 2 * macs / (fwd_ms * 1e-3) / 1e12,
                "fwd_bwd_ms": fb_ms,
                "fwd_bwd_spread_ms": fb_spread,
                "fwd_bwd_tflops": 6 * macs / (fb_ms * 1e-3) / 1e12,
            }
        )
    return rows


def conv_main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="check_fast.py conv", description=CONV_DOC)
    parser.add_argument("--out", type=Path, default=Path("bench_conv.json"))
    parser.add_argument("--kernels", type=int, nargs="+", default=[5, 31, 61])
    parser.add_argument("--impls", nargs="+", default=list(CONV_IMPLS), choices=CONV_IMPLS, help="only these")
    parser.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=None,
        help="only ListOps-width shapes (batch 32, 128->256, groups 1) at these lengths, for each --kernels",
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("check_fast.py conv needs a CUDA GPU")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True  # as training sets both (repro/training/loop.py)
    torch.backends.cudnn.allow_tf32 = True
    peak = matmul_peak_tflops()
    rows = []
    if args.lengths:  # the widths of length-bucketed batches (repro/training/batching.py)
        shapes = [(32, 128, 256, k, n, 1) for k in args.kernels for n in args.lengths]
    else:
        shapes = [(32, 128, 256, k, 2000, 1) for k in args.kernels]  # ListOps, Table 7
        if 61 in args.kernels:  # the task shapes of the K=61 arm
            shapes += [(32, 128, 256, 61, 1024, 1)]  # ListOps batches trimmed by length bucketing
            shapes += [(128, 128, 256, 61, 1024, 32)]  # Pathfinder, groups 32
            shapes += [(16, 128, 256, 61, 4096, 1)]  # text
    for shape in shapes:
        rows += bench_shape(*shape, impls=args.impls)
    record = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "bf16_matmul_peak_tflops": peak,
        "rows": rows,
    }
    args.out.write_text(json.dumps(record, indent=2))
    print(f"device {record['device']}, bf16 matmul peak {peak:.0f} TFLOP/s")
    print(
        f"{'impl':15} {'B':>4} {'K':>3} {'L':>5} {'g':>3} {'fwd ms':>8} {'fwd TF/s':>9} {'f+b ms':>8} {'f+b TF/s':>9}"
    )
    for r in rows:
        print(
            f"{r['impl']:15} {r['batch']:4} {r['kernel']:3} {r['length']:5} {r['groups']:3} {r['fwd_ms']:8.3f} "
            f"{r['fwd_tflops']:9.1f} {r['fwd_bwd_ms']:8.3f} {r['fwd_bwd_tflops']:9.1f}"
        )
    for shape in shapes:
        same = [r for r in rows if (r["batch"], r["c_in"], r["c_out"], r["kernel"], r["length"], r["groups"]) == shape]
        best = min(same, key=lambda r: r["fwd_bwd_ms"])
        print(
            f"fastest for {shape}: {best['impl']} ({best['fwd_bwd_tflops']:.0f} TFLOP/s fwd+bwd, "
            f"{best['fwd_bwd_tflops'] / peak:.0%} of the bf16 matmul peak)"
        )
    return 0

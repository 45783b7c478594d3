"""Check and time the fast paths on a GPU, and measure the bounded-conv implementations; one command each::

    python experiments/check_fast.py paths      # the fast attention paths against their plain paths, per layer
    python experiments/check_fast.py sequence   # lra_reformer, s5 and mega: fast against plain, whole model
    python experiments/check_fast.py variants   # time every fast variant of the slow arms (fast_defaults.py)
    python experiments/check_fast.py conv --out bench_conv.json   # every conv impl per shape, the bf16 peak

``python experiments/check_fast.py COMMAND --help`` lists a command's options; each command's docstring
(``PATHS_DOC``, ``SEQUENCE_DOC``, ``VARIANTS_DOC``, ``CONV_DOC`` below) says what it checks and times.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from repro.bench.models import apply_model_changes, build, plan, resolve_arm, sequence_length  # noqa: E402
from repro.bench.timing import (  # noqa: E402
    GB,
    StepTimer,
    free_memory,
    is_out_of_memory,
    kernel_profile,
    matmul_peak_tflops,
    read_peak,
    reset_peak,
    time_ms,
)
from repro.cli import dispatch  # noqa: E402
from repro.followup.mega import MegaMixer  # noqa: E402
from repro.followup.rotary import RotarySelfAttention  # noqa: E402
from repro.followup.s5 import S5SSM, S5Mixer  # noqa: E402
from repro.ops.conv import CONV_IMPLS, conv1d_same  # noqa: E402
from repro.original.attention import ATTENTION, load_all  # noqa: E402
from repro.original.attention._common import FlexPatternMixin  # noqa: E402
from repro.original.attention._flex import (  # noqa: E402
    dense_dropout_reference,
    draw_dropout_keys,
    dropout_threshold,
    keep_mask,
    keep_probability,
)
from repro.original.attention.fast_defaults import FAST_DEFAULTS  # noqa: E402
from repro.original.attention.linformer import LinformerAttention  # noqa: E402
from repro.original.attention.reformer import ReformerAttention  # noqa: E402
from repro.original.attention.sinkhorn import SinkhornAttention  # noqa: E402

OUT_TOL, GRAD_TOL = 2e-2, 5e-2  # sequence and variants: relative error of the output, of the gradients
REFERENCE = "lra_transformer"  # sequence and variants: the whole-model timings' reference arm


# --------------------------------------------------------------------------- shared by sequence and variants


def run_mixer(mixer, x, mask, autocast: bool, seed: int):
    """(output, input gradient, {parameter: gradient}) in float32 for a fixed random linear loss."""
    for p in mixer.parameters():
        p.grad = None
    x = x.clone().requires_grad_(True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
        y = mixer(x, mask)
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed)).to(y.device)
    (y.float() * weights).sum().backward()
    grads = {n: p.grad.float().clone() for n, p in mixer.named_parameters() if p.grad is not None}
    return y.detach().float(), x.grad.float().clone(), grads


def relative_error(fast: torch.Tensor, plain: torch.Tensor) -> float:
    if not torch.isfinite(fast).all():
        return float("inf")
    return ((fast - plain).norm() / plain.norm().clamp_min(1e-30)).item()


def batch_of_ids(batch: int, length: int, device: torch.device):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 256, (batch, length), generator=g)
    return ids.to(device), torch.randint(0, 2, (batch,), generator=g).to(device)


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


# =====================================================================================================================
# paths
# =====================================================================================================================

PATHS_DOC = """Check the fast attention paths on this GPU before the benchmark: ``check_fast.py paths``.

Fast paths: BigBird, Longformer and Sparse through ``flex_attention`` and through one SDPA call with
the pattern as its mask (``*_dense``; against their blockwise backends), Synthesizer and Sinkhorn
through fused SDPA (against their materialised backends), and the rotary Transformer's fused
rotation (against rotary-embedding-torch's). Each one is a single mixer layer in its arm's LRA
text configuration (``task=text profile=paper``; ``--task image``: the image one, where the Sparse
Transformer's heads are 8 wide), the same weights on both paths.

1. ``bf16``: the fast path under bf16 autocast against the plain path in float32 (TF32 off),
   training mode with attention dropout 0, fresh random inputs with padding (one sample fully
   padded). Relative errors ``|fast - ref| / |ref|`` (2-norms) of the output, the input
   gradient and the parameter gradients; a check passes when each is at most ``--fwd-tol`` /
   ``--grad-tol``, or at most twice the plain path's own bf16 error (printed beside it). Before
   the fast run the CUDA caching allocator is filled with NaN, so anything a kernel leaves
   unwritten shows; outputs must be finite and exactly 0 at padded positions.
2. ``dropout`` (flex paths; the dense paths' dropout is SDPA's own, checked on the CPU by
   tests/test_attention_flex.py): training with the arm's attention dropout under bf16, against the
   float32 dense reference that applies the same hashed keep-mask (``repro/original/attention/
   _flex.py``), output and gradients, same tolerances.
3. ``auto``: the arm's own settings pick the fast path on this device (what the benchmark runs).
4. Timing: forward + backward of the layer in training (the arm's attention dropout, or
   ``--attention-dropout 0``), bf16 autocast, no padding, batch 32, lengths 1024 and 4096 (plus
   the CLS token where the arm has one): median of CUDA-event timings, plain and fast, and the
   peak memory of each.

Prints one compact table; exits 1 when a check fails (a plain path out of memory is reported,
not a failure); rows are printed as they finish. The first call of each flex_attention shape
compiles (tens of seconds each, untimed); ``--no-timing`` / ``--no-checks`` split the run in two
commands. ``--device cpu --lengths 64 --check-length 64`` runs the logic on CPU.
"""


@dataclass(frozen=True)
class FastPath:
    arm: str
    plain: dict  # constructor keywords of the plain path
    fast: dict  # and of the fast one
    params: dict = field(default_factory=dict)  # attention_params changed from the arm's
    flex: bool = False  # a flex_attention path: also the dropout check
    timed: bool = True


PATHS = {
    "lra_bigbird": FastPath("lra_bigbird", {"backend": "blockwise"}, {"backend": "flex"}, flex=True),
    "lra_longformer": FastPath("lra_longformer", {"backend": "blockwise"}, {"backend": "flex"}, flex=True),
    "lra_sparse": FastPath("lra_sparse", {"backend": "blockwise"}, {"backend": "flex"}, flex=True),
    # the dense backend (SDPA with the pattern as its mask; backend=auto's choice at short lengths)
    "lra_bigbird_dense": FastPath("lra_bigbird", {"backend": "blockwise"}, {"backend": "dense"}, timed=False),
    "lra_longformer_dense": FastPath("lra_longformer", {"backend": "blockwise"}, {"backend": "dense"}, timed=False),
    "lra_sparse_dense": FastPath("lra_sparse", {"backend": "blockwise"}, {"backend": "dense"}, timed=False),
    "lra_synthesizer": FastPath("lra_synthesizer", {"backend": "materialized"}, {"backend": "sdpa"}),
    "lra_synthesizer_factorized": FastPath(
        "lra_synthesizer",
        {"backend": "materialized"},
        {"backend": "sdpa"},
        {"variant": "factorized_random", "k": 32},
        timed=False,
    ),
    "lra_synthesizer_dense": FastPath(
        "lra_synthesizer",
        {"backend": "materialized"},
        {"backend": "sdpa"},
        {"variant": "dense", "dot_product": False},
        timed=False,
    ),
    # the paper's mechanism, whose paths these are (on ListOps and Pathfinder the arm runs the release's)
    "lra_sinkhorn": FastPath("lra_sinkhorn", {"backend": "materialized"}, {"backend": "sdpa"}, {"release": False}),
    "rotary_transformer": FastPath("rotary_transformer", {"impl": "library"}, {"impl": "fused"}),
}


# --------------------------------------------------------------------------- building


TASKS = ("text", "listops", "image", "pathfinder")  # --task: whose LRA configuration the checks build


def arm_model(arm: str, task: str) -> dict:
    resolved = resolve_arm(arm, task, "paper")
    if resolved is None:
        raise SystemExit(f"check_fast.py: {arm} has no {task} configuration; choose another --task")
    return resolved["model"]


def build_mixer(
    name: str, length: int, kind: str | None, dropout: float | None, device, task: str
) -> tuple[torch.nn.Module, int]:
    """The path's mixer for ``length`` tokens (``kind``: "plain", "fast" or None = the arm's own
    settings) and the number of states it sees (CLS included). Weights from seed 0."""
    path = PATHS[name]
    model = arm_model(path.arm, task)
    chosen = {"plain": path.plain, "fast": path.fast, None: {}}[kind]
    torch.manual_seed(0)
    if path.arm == "rotary_transformer":
        mixer = RotarySelfAttention(
            int(model["d_model"]),
            int(model["n_heads"]),
            length,
            base=float(model["rotary_base"]),
            disable_half=bool(model["rotary_disable_half"]),
            **chosen,
        )
        return mixer.to(device), length
    seq = length + (1 if model.get("cls_token") else 0)
    width = int(model.get("qkv_dim") or model["d_model"])
    params = {**model["attention_params"], **path.params, **chosen}
    p = float(model.get("attention_dropout", 0.0)) if dropout is None else dropout
    mixer = ATTENTION.get(model["attention"])(
        d_model=width, n_heads=int(model["n_heads"]), max_len=seq, dropout=p, **params
    )
    return mixer.to(device), seq


def width_of(mixer) -> int:
    return int(mixer.d_model)


def arm_dropout(name: str, task: str) -> float:
    return float(arm_model(PATHS[name].arm, task).get("attention_dropout", 0.0))


# --------------------------------------------------------------------------- one step


def autocast(device, enabled: bool):
    return torch.autocast(device.type, dtype=torch.bfloat16) if enabled else nullcontext()


def run_layer(mixer, x, mask, weight, bf16: bool) -> list[torch.Tensor]:
    """[output, input gradient, all parameter gradients flattened] of ``sum(weight * mixer(x))``, float32."""
    xg = x.clone().requires_grad_(True)
    with autocast(x.device, bf16):
        y = mixer(xg, mask)
    (y.float() * weight).sum().backward()
    grads = torch.cat([p.grad.float().flatten() for p in mixer.parameters() if p.grad is not None])
    mixer.zero_grad(set_to_none=True)
    return [y.detach().float(), xg.grad.float(), grads]


def relative_errors(got: list[torch.Tensor], ref: list[torch.Tensor]) -> list[float]:
    return [float((g - r).norm() / r.norm().clamp_min(1e-30)) for g, r in zip(got, ref, strict=True)]


def poison_allocator(device) -> None:
    """Fill what the CUDA caching allocator will hand out next with NaN (as float32 and as bf16)."""
    if device.type != "cuda":
        return
    free_memory(device)
    free, _ = torch.cuda.mem_get_info(device)
    nan_bits = 0x7FC07FC0  # a NaN as float32, and two NaNs as bfloat16
    big = torch.full((int(free * 0.6) // 4,), nan_bits, dtype=torch.int32, device=device)
    small = [torch.full((1 << 16,), nan_bits, dtype=torch.int32, device=device) for _ in range(256)]
    del big, small


def inputs(batch: int, seq: int, width: int, device, padded: bool):
    """x, mask (full, padded at random lengths, the last sample fully padded) and a loss weighting."""
    x = torch.randn(batch, seq, width, device=device)
    weight = torch.randn(batch, seq, width, device=device)
    lengths = torch.randint(seq // 4, seq, (batch,), device=device) if padded else torch.full((batch,), seq)
    if padded:
        lengths[0], lengths[-1] = seq, 0
    mask = torch.arange(seq, device=device)[None, :] < lengths.to(device)[:, None]
    return x, mask, weight


# --------------------------------------------------------------------------- checks


def verdict(errors: list[float], base: list[float] | None, args) -> bool:
    tols = [args.fwd_tol, args.grad_tol, args.grad_tol]
    base = base or [0.0] * 3
    return all(e <= t or e <= 2 * b for e, t, b in zip(errors, tols, base, strict=True))


def check_bf16(name: str, args, device) -> dict:
    plain, seq = build_mixer(name, args.check_length, "plain", 0.0, device, args.task)
    fast, _ = build_mixer(name, args.check_length, "fast", 0.0, device, args.task)
    fast.load_state_dict(plain.state_dict())
    plain.train(), fast.train()
    x, mask, weight = inputs(args.check_batch, seq, width_of(plain), device, padded=True)
    ref = run_layer(plain, x, mask, weight, bf16=False)
    base = relative_errors(run_layer(plain, x, mask, weight, bf16=True), ref)
    poison_allocator(device)
    got = run_layer(fast, x, mask, weight, bf16=True)
    errors = relative_errors(got, ref)
    finite = all(bool(torch.isfinite(t).all()) for t in got)
    zeros = bool((got[0][~mask] == 0).all())
    ok = finite and zeros and verdict(errors, base, args)
    note = "" if finite and zeros else ("non-finite values" if not finite else "padded outputs not 0")
    return {"path": name, "check": "bf16 vs fp32", "errors": errors, "base": base, "ok": ok, "note": note}


def dense_dropout_output(mixer, x, mask, keys, p: float) -> torch.Tensor:
    """The mixer's attention with the keep-mask of ``keys`` materialised (float32)."""
    q, k, v = mixer.project(x)
    seq = x.shape[1]
    pattern = mixer.dense_mask(seq, device=x.device)
    pattern = pattern[None] if pattern.dim() == 2 else pattern
    allowed = pattern[None] & mask[:, None, None, :]
    threshold = dropout_threshold(p)
    keep = keep_mask(keys[0][..., None], keys[1][None, None, None, :], threshold)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    ctx = dense_dropout_reference(scores, allowed, keep, keep_probability(threshold), v)
    return mixer.proj.output(ctx) * mask[..., None]


def check_dropout(name: str, args, device) -> dict:
    p = arm_dropout(name, args.task)
    fast, seq = build_mixer(name, args.check_length, "fast", p, device, args.task)
    fast.train()
    x, mask, weight = inputs(args.check_batch, seq, width_of(fast), device, padded=True)
    seed = int(torch.randint(0, 2**31 - 1, ()).item())  # fresh keys
    poison_allocator(device)
    torch.manual_seed(seed)
    got = run_layer(fast, x, mask, weight, bf16=True)
    torch.manual_seed(seed)
    keys = draw_dropout_keys(x.shape[0], fast.n_heads, seq, seq, device)
    xg = x.clone().requires_grad_(True)
    y = dense_dropout_output(fast, xg, mask, keys, p)
    (y * weight).sum().backward()
    grads = torch.cat([q.grad.flatten() for q in fast.parameters() if q.grad is not None])
    fast.zero_grad(set_to_none=True)
    errors = relative_errors(got, [y.detach(), xg.grad, grads])
    finite = all(bool(torch.isfinite(t).all()) for t in got)
    ok = finite and verdict(errors, None, args)
    return {
        "path": name,
        "check": f"dropout {p:g}",
        "errors": errors,
        "base": None,
        "ok": ok,
        "note": "" if finite else "non-finite values",
    }


def check_auto(name: str, args, device) -> dict:
    """The arm's own settings (the benchmark's) choose the fast path on this device."""
    mixer, _ = build_mixer(name, args.check_length, None, None, device, args.task)
    probe = torch.zeros(1, 1, args.check_length, 1, device=device)  # what the backend choice reads: device, length
    if hasattr(mixer, "pattern_backend"):
        fast = mixer.pattern_backend(probe) != "blockwise"
    elif hasattr(mixer, "fused"):
        fast = mixer.fused(probe)
    else:
        fast = mixer.backend == "sdpa" or (mixer.backend == "auto" and device.type == "cuda")
    ok = fast or device.type != "cuda"
    return {
        "path": name,
        "check": "auto = fast",
        "errors": None,
        "base": None,
        "ok": ok,
        "note": "" if fast else "the arm runs the plain path here",
    }


# --------------------------------------------------------------------------- timing


def time_path(name: str, length: int, kind: str, args, device) -> tuple[float | None, float | None, str]:
    """(median ms, peak GB, status) of forward + backward of one training step of the layer."""
    dropout = arm_dropout(name, args.task) if args.attention_dropout == "lra" else float(args.attention_dropout)
    free_memory(device)  # what the previous timing left
    try:
        mixer, seq = build_mixer(name, length, kind, dropout, device, args.task)
        mixer.train()
        x = torch.randn(args.batch, seq, width_of(mixer), device=device, requires_grad=True)
        grad = torch.randn(args.batch, seq, width_of(mixer), device=device)

        def step():
            with autocast(device, device.type == "cuda"):
                y = mixer(x, None)
            y.backward(grad.to(y.dtype))
            x.grad = None
            mixer.zero_grad(set_to_none=True)

        reset_peak(device)
        times = StepTimer(device).run(step, args.warmup, args.reps)
        peak, _ = read_peak(device)
        return sorted(times)[len(times) // 2], (None if peak is None else peak / GB), "ok"
    except Exception as err:  # noqa: BLE001 - one failing timing must not end the check
        status = "OOM" if is_out_of_memory(err) else f"error: {type(err).__name__}: {err}"[:300]
        return None, None, status


def timing_rows(name: str, args, device):
    """One row per length, as it is measured."""
    for length in args.lengths:
        plain = time_path(name, length, "plain", args, device)
        fast = time_path(name, length, "fast", args, device)
        ok = fast[2] == "ok"  # the plain path may run out of memory; the fast one must not fail
        yield {"path": name, "length": length, "plain": plain, "fast": fast, "ok": ok}


# --------------------------------------------------------------------------- report


def fmt_or_blank(value, digits: str = ".2e") -> str:
    return "" if value is None else format(value, digits)


CHECK_HEADER = (
    f"{'path':28} {'check':13} {'out':>9} {'d input':>9} {'d params':>9} {'plain bf16 (out/dx/dw)':>28}  result"
)
TIMING_HEADER = (
    f"{'path':28} {'L':>6} {'plain ms':>10} {'fast ms':>10} {'speedup':>8} {'plain GB':>9} {'fast GB':>9}  result"
)


def check_line(r: dict) -> str:
    errors = r["errors"] or [None] * 3
    base = "/".join(fmt_or_blank(b) for b in r["base"]) if r["base"] else ""
    result = ("ok" if r["ok"] else "FAIL") + (f" ({r['note']})" if r["note"] else "")
    return (
        f"{r['path']:28} {r['check']:13} {fmt_or_blank(errors[0]):>9} {fmt_or_blank(errors[1]):>9} "
        f"{fmt_or_blank(errors[2]):>9} {base:>28}  {result}"
    )


def timing_line(r: dict) -> str:
    (pm, pg, ps), (fm, fg, fs) = r["plain"], r["fast"]
    speedup = f"{pm / fm:.2f}x" if pm and fm else ""
    result = "ok" if r["ok"] else f"FAIL ({fs})"
    if ps != "ok":
        result += f"; plain: {ps}"
    return (
        f"{r['path']:28} {r['length']:>6} {fmt_or_blank(pm, '.2f'):>10} {fmt_or_blank(fm, '.2f'):>10} {speedup:>8} "
        f"{fmt_or_blank(pg, '.2f'):>9} {fmt_or_blank(fg, '.2f'):>9}  {result}"
    )


def heading(title: str, header: str) -> None:
    print(f"\n{title}\n{header}\n{'-' * len(header)}", flush=True)


def paths_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="check_fast.py paths", description=PATHS_DOC.split("\n\n")[0])
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--lengths", nargs="+", type=int, default=[1024, 4096], help="timed lengths (bytes)")
    parser.add_argument("--batch", type=int, default=32, help="timed batch (LRA Table 2: 32)")
    parser.add_argument("--check-length", type=int, default=1024)
    parser.add_argument("--check-batch", type=int, default=8)
    parser.add_argument("--fwd-tol", type=float, default=2e-2)
    parser.add_argument("--grad-tol", type=float, default=5e-2)
    parser.add_argument("--attention-dropout", default="lra", help="timing: lra (the arm's) or a probability")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--no-checks", action="store_true", help="timing only")
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--task", default="text", choices=TASKS, help="the arms' LRA configuration (image: 8-wide Sparse heads)"
    )
    return parser.parse_args(argv)


def attempt(fn, name: str, check: str) -> dict:
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - reported as a failed check
        return {
            "path": name,
            "check": check,
            "errors": None,
            "base": None,
            "ok": False,
            "note": f"{type(err).__name__}: {err}"[:300],
        }


def paths_main(argv: list[str] | None = None) -> int:
    args = paths_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("check_fast.py paths: no CUDA device (use --device cpu for a run of the logic on CPU)", file=sys.stderr)
        return 2
    load_all()
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 references in float32
    torch.backends.cudnn.allow_tf32 = False
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {name}, torch {torch.__version__}, paths: {', '.join(args.paths)}", flush=True)
    checks, timings = [], []
    if not args.no_checks:
        heading(
            f"checks (pass: error <= {args.fwd_tol:g} forward, <= {args.grad_tol:g} gradients, or <= 2x the "
            "plain path's own bf16 error)",
            CHECK_HEADER,
        )
        for path in args.paths:
            todo = [(check_bf16, "bf16 vs fp32")] + ([(check_dropout, "dropout")] if PATHS[path].flex else [])
            for check, label in todo + [(check_auto, "auto = fast")]:
                checks.append(attempt(lambda c=check, p=path: c(p, args, device), path, label))
                print(check_line(checks[-1]), flush=True)
            free_memory(device)
    if not args.no_timing:
        torch.backends.cuda.matmul.allow_tf32 = True  # as the training runs
        torch.backends.cudnn.allow_tf32 = True
        lra = args.attention_dropout == "lra"
        dropout = "the arm's attention dropout" if lra else f"attention dropout {args.attention_dropout}"
        heading(
            f"timing: forward + backward of one layer, training, {dropout}, bf16, batch {args.batch}, "
            f"median of {args.reps} (ms); peak GB",
            TIMING_HEADER,
        )
        for path in (p for p in args.paths if PATHS[p].timed):
            for row in timing_rows(path, args, device):
                timings.append(row)
                print(timing_line(row), flush=True)
    failed = [r for r in checks + timings if not r["ok"]]
    print(f"\n{len(failed)} failed of {len(checks)} checks and {len(timings)} timings")
    return 1 if failed else 0


# =====================================================================================================================
# sequence
# =====================================================================================================================

SEQUENCE_DOC = """GPU check of the fast paths of lra_reformer, s5 and mega: ``check_fast.py sequence``.

Each arm (``--arms``) is built in its LRA text configuration (``--task image``: the image one, where
the Reformer's heads are 4 wide), resolved as the runner and the benchmark do
(``repro.bench.models``: arm < arm.tasks.<task> < profile=paper), for each length (default 1024
and 4096 bytes; Reformer's CLS token adds one state) at batch 32. The fast path and the plain
one are the same module with its switch flipped (same parameters):

    lra_reformer  attention_params.backend   sdpa  vs materialized
    s5            model.ssm_impl             fft   vs scan
    mega          model.attention_impl       sdpa  vs materialized

1. Correctness, one mixer (the first layer's): the fast path under bf16 autocast against the
   plain path in float32 (TF32 off), dropout off (eval mode), on fresh random inputs with
   padding (half the batch full length, half shorter). Reported: the relative error
   |fast - plain| / |plain| (Frobenius norms) of the output, of the input gradient and of every
   parameter gradient (the worst one named), for a fixed random linear loss. Passes when every
   value is finite and the output error is below OUT_TOL, the gradient errors below GRAD_TOL:
   bf16 keeps 8 significant bits (unit roundoff 2^-8 = 3.9e-3), a few roundings deep. Before
   each fast run the CUDA caching allocator is filled with NaN, so memory a kernel leaves
   unwritten shows up as a non-finite output. Reformer: the plain path reuses the LSH buckets
   of the fast run (bf16 and float32 projections may hash a near-tie to different buckets,
   which is not an error of the fast path). Also reported: the scaled-dot-product kernels the
   fast path ran (``aten::_scaled_dot_product_*`` ops in a profile of one forward and backward).
2. Timing, whole model: forward and backward of a training step (bf16 autocast, TF32 matrix
   products as in training, dropout as the arm sets it, cross-entropy, no optimiser step),
   median over ``--reps`` steps timed with CUDA events after ``--warmup``, peak memory;
   ``lra_transformer`` at the same length is the reference (``x transformer`` = its time over
   the fast path's). An out-of-memory is a row, not a failure.

Exit status: 0 when every correctness check passes and no fast path raised while timed, 1
otherwise (2: no CUDA device); an error is a row of the tables with its message. A CPU dry
run of the logic: ``--device cpu --lengths 64 --batch 2``.
"""

# arm -> (class of the module whose switch is flipped, its attribute, fast value, plain value, class of the mixer)
SWITCHES = {
    "lra_reformer": (ReformerAttention, "backend", "sdpa", "materialized", ReformerAttention),
    "s5": (S5SSM, "impl", "fft", "scan", S5Mixer),
    "mega": (MegaMixer, "attention_impl", "sdpa", "materialized", MegaMixer),
}


def set_path(model: torch.nn.Module, arm: str, fast: bool) -> None:
    cls, attribute, fast_value, plain_value, _ = SWITCHES[arm]
    for module in model.modules():
        if isinstance(module, cls):
            setattr(module, attribute, fast_value if fast else plain_value)


def switched_mixer(model: torch.nn.Module, arm: str) -> torch.nn.Module:
    return next(m for m in model.modules() if isinstance(m, SWITCHES[arm][4]))


def mixer_width(mixer: torch.nn.Module) -> int:
    """The width of what the mixer reads: the residual stream's (``d_model``), which its input projections
    map to ``qkv_dim`` where the configuration has one (LRA's image and Pathfinder)."""
    if isinstance(mixer, S5Mixer):
        return mixer.ssm.D.shape[0]
    for name in ("q_proj", "v_proj"):
        layer = getattr(mixer, name, None)
        if isinstance(layer, torch.nn.Linear):
            return layer.in_features
    return mixer.d_model


def poison_cache(device: torch.device, fraction: float = 0.5) -> None:
    """Fill half the free GPU memory with NaN and hand it back to the caching allocator (not to the
    driver): later allocations reuse it, so whatever a kernel does not write reads as NaN."""
    if device.type != "cuda":
        return
    free, _ = torch.cuda.mem_get_info(device)
    block = torch.full((int(free * fraction) // 4,), float("nan"), device=device)
    del block


def fresh_inputs(batch: int, length: int, width: int, device: torch.device, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, width, generator=g)
    lengths = torch.randint(length // 4, length + 1, (batch,), generator=g)
    lengths[: batch // 2] = length
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return x.to(device), mask.to(device)


def sdpa_ops(mixer, x, mask) -> str:
    """The scaled-dot-product ops one fast forward and backward runs (profiled)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run_mixer(mixer, x, mask, autocast=True, seed=0)
    names = sorted(
        {
            e.key.removeprefix("aten::")
            for e in prof.key_averages()
            if e.key.startswith("aten::_scaled_dot_product") or "efficient_attention" in e.key
        }
    )
    return ",".join(names) or "-"


class RecordedBuckets:
    """Reformer's ``hash_buckets`` recorded on one call and replayed on the next."""

    def __init__(self, module: ReformerAttention):
        self.module, self.hash = module, module.hash_buckets
        self.buckets = None

    def __call__(self, *args, **kwargs):
        if self.buckets is None:
            self.buckets = self.hash(*args, **kwargs)
        return self.buckets


def check_correctness(arm: str, model, length: int, batch: int, device: torch.device) -> dict:
    """One arm's correctness row; an exception in either path is a failed row carrying its message."""
    try:
        return compare_paths(arm, model, length, batch, device)
    except Exception as err:  # noqa: BLE001 - report it in the table and go on with the other arms
        return {
            "arm": arm,
            "length": length,
            "out": float("nan"),
            "grad": float("nan"),
            "worst": f"{type(err).__name__}: {err}"[:300],
            "ops": "-",
            "ok": False,
        }


def compare_paths(arm: str, model, length: int, batch: int, device: torch.device) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = False  # the plain reference in full float32
    mixer = switched_mixer(model, arm).eval()
    x, mask = fresh_inputs(batch, length, mixer_width(mixer), device, seed=1000 + length)
    replay = None
    if isinstance(mixer, ReformerAttention):
        replay = mixer.hash_buckets = RecordedBuckets(mixer)
    try:
        set_path(mixer, arm, fast=True)
        ops = sdpa_ops(mixer, x, mask) if arm != "s5" else "-"
        if replay is not None:
            replay.buckets = None
        poison_cache(device)
        fast = run_mixer(mixer, x, mask, autocast=True, seed=7)
        set_path(mixer, arm, fast=False)
        plain = run_mixer(mixer, x, mask, autocast=False, seed=7)
    finally:
        if replay is not None:
            del mixer.hash_buckets
    grads = {"input": relative_error(fast[1], plain[1])}
    grads.update({name: relative_error(fast[2][name], plain[2][name]) for name in plain[2]})
    worst = max(grads, key=grads.get)
    out = relative_error(fast[0], plain[0])
    ok = out <= OUT_TOL and grads[worst] <= GRAD_TOL and set(fast[2]) == set(plain[2])
    return {"arm": arm, "length": length, "out": out, "grad": grads[worst], "worst": worst, "ops": ops, "ok": ok}


def time_train_step(model, ids, labels, warmup: int, reps: int, device: torch.device) -> tuple[float, float | None]:
    """Median ms of forward + backward (bf16 autocast, training mode) and the peak GB over the timed steps."""
    model.train()
    torch.backends.cuda.matmul.allow_tf32 = True  # as repro/training/ and experiments/bench.py

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(ids)
        F.cross_entropy(logits.float(), labels).backward()
        for p in model.parameters():
            p.grad = None

    for _ in range(warmup):
        step()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step()
            times.append(1e3 * (time.perf_counter() - t0))
    peak = torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None
    return statistics.median(times), peak


def timed(model, ids, labels, args, device) -> tuple[float | None, float | None, str]:
    try:
        ms, peak = time_train_step(model, ids, labels, args.warmup, args.reps, device)
        return ms, peak, "ok"
    except torch.cuda.OutOfMemoryError:
        return None, None, "OOM"
    except Exception as err:  # noqa: BLE001 - a row of the table, not a crash
        return None, None, f"error: {type(err).__name__}: {err}"[:300]
    finally:
        for p in model.parameters():
            p.grad = None
        if device.type == "cuda":
            torch.cuda.empty_cache()


def sequence_main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="check_fast.py sequence", description=SEQUENCE_DOC.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--task", default="text", choices=TASKS, help="the arms' LRA configuration")
    parser.add_argument("--arms", nargs="+", default=list(SWITCHES), choices=list(SWITCHES))
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("check_fast.py sequence: no CUDA device (a CPU dry run: --device cpu --lengths 64 --batch 2)")
        return 2
    specs = {s.name: s for s in plan([*args.arms, REFERENCE], variants={}, task=args.task)[0]}
    missing = [arm for arm in args.arms if arm not in specs]
    if missing:
        print(f"check_fast.py sequence: no {args.task} configuration for {', '.join(missing)}", file=sys.stderr)
        return 2
    checks, timings = [], []
    for length in args.lengths:
        ids, labels = batch_of_ids(args.batch, length, device)
        reference = build(specs[REFERENCE], length, device)
        ref_ms, ref_gb, ref_status = timed(reference, ids, labels, args, device)
        del reference
        timings.append({"arm": REFERENCE, "length": length, "fast": (ref_ms, ref_gb, ref_status)})
        for arm in args.arms:
            model = build(specs[arm], length, device)
            checks.append(check_correctness(arm, model, sequence_length(specs[arm], length), args.batch, device))
            set_path(model, arm, fast=False)
            plain = timed(model, ids, labels, args, device)
            set_path(model, arm, fast=True)
            fast = timed(model, ids, labels, args, device)
            del model
            timings.append({"arm": arm, "length": length, "plain": plain, "fast": fast, "reference_ms": ref_ms})
    print_tables(checks, timings, args)
    fast_errors = [t for t in timings if t["arm"] != REFERENCE and t["fast"][2].startswith("error")]
    return 0 if all(c["ok"] for c in checks) and not fast_errors else 1


def print_tables(checks: list[dict], timings: list[tuple], args) -> None:
    print(
        f"Correctness: bf16 fast vs float32 plain, one mixer, batch {args.batch}, dropout off; "
        f"tolerance {OUT_TOL:g} (output), {GRAD_TOL:g} (gradients)"
    )
    print("| arm | L | out rel err | worst grad rel err | worst grad | sdpa ops (fast) | check |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for c in checks:
        print(
            f"| {c['arm']} | {c['length']} | {c['out']:.2e} | {c['grad']:.2e} | {c['worst']} | {c['ops']} | "
            f"{'ok' if c['ok'] else 'FAILED'} |"
        )
    clock = "CUDA events" if args.device.startswith("cuda") else "wall clock"
    print(
        f"\nTiming: whole model, forward + backward, bf16 autocast, dropout on, batch {args.batch}, "
        f"median of {args.reps} ({clock})"
    )
    print("| arm | L | plain ms | fast ms | speed-up | plain GB | fast GB | x transformer | status |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for t in timings:
        fast_ms, fast_gb, fast_status = t["fast"]
        if t["arm"] == REFERENCE:
            print(
                f"| {t['arm']} | {t['length']} | - | {fmt(fast_ms, '.1f')} | - | - | {fmt(fast_gb, '.2f')} | 1.00 | "
                f"{fast_status} |"
            )
            continue
        plain_ms, plain_gb, plain_status = t["plain"]
        speedup = plain_ms / fast_ms if plain_ms and fast_ms else None
        vs_ref = t["reference_ms"] / fast_ms if t["reference_ms"] and fast_ms else None
        print(
            f"| {t['arm']} | {t['length']} | {fmt(plain_ms, '.1f')} | {fmt(fast_ms, '.1f')} | "
            f"{fmt(speedup, '.2f')} | {fmt(plain_gb, '.2f')} | {fmt(fast_gb, '.2f')} | {fmt(vs_ref, '.2f')} | "
            f"plain {plain_status}, fast {fast_status} |"
        )


# =====================================================================================================================
# variants
# =====================================================================================================================

VARIANTS_DOC = """Time every fast variant of the slow arms on one GPU: ``python experiments/check_fast.py variants``.

For each length (default 4096 bytes; the CLS token adds one state where the arm has one) and each
variant below, the arm is built in its LRA text configuration by the benchmark's own builder
(``repro.bench.models``: arm < arm.tasks.text < profile=paper) with the variant's model keys changed,
and timed as a whole-model training step: forward, backward and an AdamW step, bf16 autocast, TF32
matrix products, batch 32 of full-length random texts, the arm's own dropout (LRA's attention dropout
0.1 on the attention arms). Median of ``--reps`` steps timed with CUDA events after ``--warmup``
untimed steps (the first one compiles what the variant compiles: its time is reported as
``first_s``), peak GB (torch.cuda.max_memory_allocated over the timed steps), and both as ratios to
``lra_transformer`` timed in the same process at the same length and attention dropout.

Variants (``VARIANTS``), in this order: ``lra_transformer``; the current ``auto`` choice of each arm
(``repro/original/attention/fast_defaults.py``, marked ``*``; quick ones first, then the arms furthest
from the target); the flex arms' ``auto`` variants and ``lra_transformer`` again with attention
dropout 0 (the benchmark's ``attention_dropout=0``); the first round's fast path of each arm; the
other alternatives, those that decide a default first.

Correctness (``--checks default``: the ``auto`` variants; ``all``; ``none``): the arm's first mixer,
evaluation mode (no dropout), full-length inputs: the variant under bf16 autocast against the
mixer's plain path in float32 (TF32 off) on the same weights, relative errors ``|fast - plain| /
|plain|`` of the output, the input gradient and every parameter gradient for a fixed random linear
loss; passes at <= 2e-2 (output) and <= 5e-2 (gradients), the tolerances of
``check_fast.py paths``. Reformer's plain run reuses the fast run's LSH buckets.
``--profile``: the five CUDA kernels with the most time over two profiled steps, per variant.

Every row is printed when it finishes and the JSON (``--out``, default
``results/fast_variants/<device>-<time>.json``) is rewritten after each; a failing variant prints its
error and the others go on. ``--budget-s`` (default 440) starts a row only when its rough cost
(``estimated_s``: compiles included, 64-wide flex tiles autotune their backward) still fits before that
many seconds; the rest are listed as skipped, so the run ends within about 8 minutes on one H200.
``--only ARM ...`` / ``--variants NAME ...`` select rows (a second run for the skipped ones). A CPU
dry run of the logic: ``--device cpu --lengths 64 --batch 2 --reps 1 --warmup 1``.
"""


@dataclasses.dataclass(frozen=True)
class Variant:
    arm: str
    name: str
    changes: dict  # model keys merged into the arm's (attention_params merge key by key)
    group: int = 2  # 0: auto, 1: first round, 2: alternatives (the run order)


def _attn(**params) -> dict:
    """Attention-parameter changes (``lra_reformer``'s layout rows set ``release=False``: the layouts are
    those of the paper's mechanism; the arm's own ``auto`` row times the release's attention)."""
    return {"attention_params": params}


def _flex(block: int, rows: str, lse: str) -> dict:
    return _attn(flex_block=block, flex_global_rows=rows, flex_lse_pass=lse)


VARIANTS = [
    Variant("lra_bigbird", "flex128 rows-in lse-full", _flex(128, "flex", "full"), 1),
    Variant("lra_bigbird", "flex64 rows-dense lse-narrow", _flex(64, "dense", "narrow")),
    Variant("lra_bigbird", "flex128 rows-dense lse-narrow", _flex(128, "dense", "narrow")),
    Variant("lra_sparse", "flex128 rows-in lse-full", _flex(128, "flex", "full"), 1),
    Variant("lra_sparse", "flex64 rows-dense lse-narrow", _flex(64, "dense", "narrow")),
    Variant("lra_sparse", "flex128 rows-dense lse-narrow", _flex(128, "dense", "narrow")),
    Variant("lra_longformer", "flex128 lse-full", _flex(128, "flex", "full"), 1),
    Variant("lra_longformer", "flex128 lse-narrow", _flex(128, "flex", "narrow")),
    Variant("lra_longformer", "flex64 lse-narrow", _flex(64, "flex", "narrow")),
    Variant("lra_bigbird", "dense", _attn(backend="dense")),
    Variant("lra_sparse", "dense", _attn(backend="dense")),
    Variant("lra_longformer", "dense", _attn(backend="dense")),
    Variant("lra_reformer", "release", {}),  # the arm as it is: the release's attention
    Variant(
        "lra_reformer",
        "concat per_tensor",
        _attn(release=False, windows="concat", gather="per_tensor", sdpa_backends=None),
        1,
    ),
    Variant("lra_reformer", "unfold fused", _attn(release=False, windows="unfold", gather="fused", sdpa_backends=None)),
    Variant(
        "lra_reformer",
        "unfold fused cudnn",
        _attn(release=False, windows="unfold", gather="fused", sdpa_backends=["CUDNN_ATTENTION"]),
    ),
    Variant(
        "lra_reformer",
        "unfold fused efficient",
        _attn(release=False, windows="unfold", gather="fused", sdpa_backends=["EFFICIENT_ATTENTION"]),
    ),
    Variant(
        "lra_sinkhorn", "sdpa bias eager", _attn(sdpa_min_len=0, sdpa_mask="bias", balance="eager", attend="eager"), 1
    ),
    Variant(
        "lra_sinkhorn",
        "sdpa fold compiled eager attend",
        _attn(sdpa_min_len=0, sdpa_mask="fold", balance="compiled", attend="eager"),
    ),
    Variant(
        "lra_sinkhorn", "sdpa fold eager", _attn(sdpa_min_len=0, sdpa_mask="fold", balance="eager", attend="eager")
    ),
    Variant(
        "lra_sinkhorn",
        "sdpa fold compiled attend",
        _attn(sdpa_min_len=0, sdpa_mask="fold", balance="compiled", attend="compiled"),
    ),
    Variant("lra_sinkhorn", "materialized compiled", _attn(backend="materialized", balance="compiled", attend="eager")),
    Variant("lra_sinkhorn", "materialized eager", _attn(backend="materialized", balance="eager", attend="eager")),
    Variant("s5", "time_major float32", {"ssm_fft_layout": "time_major", "ssm_proj_dtype": "float32"}, 1),
    Variant("s5", "channels_last autocast", {"ssm_fft_layout": "channels_last", "ssm_proj_dtype": "autocast"}),
    Variant("s5", "channels_last float32", {"ssm_fft_layout": "channels_last", "ssm_proj_dtype": "float32"}),
    Variant("s5", "time_major autocast", {"ssm_fft_layout": "time_major", "ssm_proj_dtype": "autocast"}),
    Variant("mega", "sdpa", {"attention_impl": "sdpa"}, 1),
    Variant(
        "mega",
        "flex options split1",
        {
            "attention_impl": "flex",
            "flex_value_split": 1,
            "flex_kernel_options": FAST_DEFAULTS["mega"]["flex_kernel_options"],
        },
    ),
    Variant("mega", "flex split4", {"attention_impl": "flex", "flex_value_split": 4, "flex_kernel_options": None}),
    Variant("mega", "materialized", {"attention_impl": "materialized"}),
    Variant("lra_linformer", "auto", _attn()),  # by k (sdpa_min_k): the materialised path at the arm's k=16
    Variant("lra_linformer", "materialized", _attn(backend="materialized"), 1),
    Variant("lra_linformer", "sdpa", _attn(backend="sdpa")),
    Variant("lra_linformer", "eager attend", _attn(attend="eager")),
]
DROPOUT_ZERO_ARMS = ("lra_bigbird", "lra_longformer", "lra_sparse")
# the key of FAST_DEFAULTS and the model keys of each arm's variant settings
DEFAULTS_KEY = {
    "lra_bigbird": "bigbird",
    "lra_sparse": "sparse",
    "lra_longformer": "longformer",
    "lra_reformer": "reformer",
    "lra_sinkhorn": "sinkhorn",
    "s5": "s5",
    "mega": "mega",
    "lra_linformer": "linformer",
}
MODEL_KEY_OF = {"ssm_fft_layout": "fft_layout", "ssm_proj_dtype": "proj_dtype"}


def is_auto(variant: Variant) -> bool:
    """True when the variant's settings are what ``auto`` runs now (``FAST_DEFAULTS``); a setting the table
    does not hold (Sinkhorn's ``backend``) is at its default only as ``"auto"``."""
    defaults = FAST_DEFAULTS[DEFAULTS_KEY[variant.arm]]
    settings = dict(variant.changes.get("attention_params", {}))
    settings.update({MODEL_KEY_OF.get(k, k): v for k, v in variant.changes.items() if k != "attention_params"})
    return all(defaults.get(k, "auto") == v for k, v in settings.items())


def ordered_variants(args) -> list[Variant]:
    chosen = [
        v for v in VARIANTS if (not args.only or v.arm in args.only) and (not args.variants or v.name in args.variants)
    ]
    for v in chosen:
        if is_auto(v):
            chosen[chosen.index(v)] = dataclasses.replace(v, group=0)
    return sorted(chosen, key=lambda v: v.group)


# --------------------------------------------------------------------------- timing


def train_step(model, optimizer, ids, labels, device):
    with torch.autocast(device.type, dtype=torch.bfloat16):
        logits = model(ids)
    F.cross_entropy(logits.float(), labels).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def time_steps(model, ids, labels, args, device) -> dict:
    """Median step ms (CUDA events; wall clock on CPU), first-step seconds, peak GB."""
    model.train()
    torch.backends.cuda.matmul.allow_tf32 = True  # as repro/train.py and experiments/bench.py
    torch.backends.cudnn.allow_tf32 = True
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    t0 = time.perf_counter()
    train_step(model, optimizer, ids, labels, device)
    sync(device)
    first_s = time.perf_counter() - t0
    for _ in range(args.warmup - 1):
        train_step(model, optimizer, ids, labels, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(args.reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            train_step(model, optimizer, ids, labels, device)
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            train_step(model, optimizer, ids, labels, device)
            times.append(1e3 * (time.perf_counter() - t))
    peak = torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None
    kernels = top_kernels(model, optimizer, ids, labels, device) if args.profile else None
    return {"ms": statistics.median(times), "first_s": first_s, "peak_gb": peak, "kernels": kernels}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def top_kernels(model, optimizer, ids, labels, device) -> list[str]:
    """The kernels with the most time over two profiled training steps (``repro.bench.timing.kernel_profile``:
    'name ms a step xlaunches a step'), or why there are none."""
    found = kernel_profile(lambda: train_step(model, optimizer, ids, labels, device), 2, device)["top_kernels"]
    return found.split("; ") if found else []


# --------------------------------------------------------------------------- correctness


# mixer class -> (attribute holding the path, plain value, the module that is run)
PLAIN = [
    (FlexPatternMixin, "backend", "blockwise"),
    (ReformerAttention, "backend", "materialized"),
    (SinkhornAttention, "backend", "materialized"),
    (MegaMixer, "attention_impl", "materialized"),
    (LinformerAttention, "backend", "materialized"),
]


def first_fast_mixer(model):
    """The model's first mixer with a plain path to check against (``PLAIN``, or S5's scan)."""
    with_plain_path = (*(cls for cls, _, _ in PLAIN), S5Mixer)
    for module in model.modules():
        if isinstance(module, with_plain_path):
            return module
    raise LookupError("no mixer with a fast path in this model")


def set_plain(mixer, plain: bool, saved: dict) -> None:
    """Switch ``mixer`` to its plain path (``plain``) or back to what it was."""
    target = mixer.ssm if isinstance(mixer, S5Mixer) else mixer
    attribute, value = (
        ("impl", "scan")
        if isinstance(mixer, S5Mixer)
        else next((a, v) for cls, a, v in PLAIN if isinstance(mixer, cls))
    )
    if plain:
        saved[attribute] = getattr(target, attribute)
        setattr(target, attribute, value)
    else:
        setattr(target, attribute, saved[attribute])


def check_variant(model, batch: int, length: int, device: torch.device) -> dict:
    """bf16 variant vs float32 plain path of the first mixer (see the module docstring)."""
    mixer = first_fast_mixer(model).eval()
    width = mixer.ssm.D.shape[0] if isinstance(mixer, S5Mixer) else mixer.d_model
    x = torch.randn(batch, length, width, generator=torch.Generator().manual_seed(length)).to(device)
    saved, replay = {}, None
    if isinstance(mixer, ReformerAttention):
        original = mixer.hash_buckets
        recorded = {}

        def replay(*a, **kw):
            recorded.setdefault("buckets", original(*a, **kw))
            return recorded["buckets"]

        mixer.hash_buckets = replay
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        fast = run_mixer(mixer, x, None, autocast=True, seed=7)
        set_plain(mixer, True, saved)
        plain = run_mixer(mixer, x, None, autocast=False, seed=7)
    finally:
        if saved:
            set_plain(mixer, False, saved)
        if replay is not None:
            del mixer.hash_buckets
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    grads = {"input": relative_error(fast[1], plain[1])}
    grads.update({name: relative_error(fast[2][name], plain[2][name]) for name in plain[2]})
    worst = max(grads, key=grads.get)
    out = relative_error(fast[0], plain[0])
    ok = out <= OUT_TOL and grads[worst] <= GRAD_TOL and set(fast[2]) == set(plain[2])
    return {"out": out, "grad": grads[worst], "worst": worst, "ok": ok}


# --------------------------------------------------------------------------- rows


def measure(spec, length, args, device, reference: dict | None, do_check: bool) -> dict:
    """One row: timing (and the check); an exception is the row's status, not the run's end."""
    row = {"arm": spec.arm, "length": length, "status": "ok"}
    model = None
    try:
        model = build(spec, length, device)
        ids, labels = batch_of_ids(args.batch, length, device)
        row.update(time_steps(model, ids, labels, args, device))
        row["steps_per_s"] = 1e3 / row["ms"]
        if reference and reference.get("ms"):
            row["speed_x_transformer"] = reference["ms"] / row["ms"]
            if reference.get("peak_gb") and row.get("peak_gb"):
                row["memory_x_transformer"] = row["peak_gb"] / reference["peak_gb"]
        if do_check:
            row["check"] = check_variant(model, args.batch, sequence_length(spec, length), device)
    except Exception as err:  # noqa: BLE001 - a failing variant is a row with its error; the rest go on
        row["status"] = f"{type(err).__name__}: {err}"[:400]
    finally:
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return row


def print_row(row: dict) -> None:
    check = row.get("check")
    verdict = (
        "-"
        if not check
        else (f"{'ok' if check['ok'] else 'FAILED'} out {check['out']:.1e} grad {check['grad']:.1e} ({check['worst']})")
    )
    print(
        f"{row['arm']:15s} {row['variant'][:34]:34s} {row['length']:5d} p={row['attention_dropout']:<4} "
        f"{fmt(row.get('ms'), '8.1f')} ms {fmt(row.get('steps_per_s'), '6.2f')}/s "
        f"{fmt(row.get('speed_x_transformer'), '5.2f')}x {fmt(row.get('peak_gb'), '6.2f')} GB "
        f"{fmt(row.get('memory_x_transformer'), '5.2f')}x first {fmt(row.get('first_s'), '5.1f')} s  "
        f"check {verdict}  {row['status'] if row['status'] != 'ok' else ''}",
        flush=True,
    )
    for line in row.get("kernels") or []:
        print(f"      {line}", flush=True)


def spec_for(specs: dict, arm: str, changes: dict, dropout: float | None):
    spec = specs[arm]
    model = apply_model_changes(spec.model, copy.deepcopy(changes))
    if dropout is not None and "attention_dropout" in model:
        model["attention_dropout"] = float(dropout)
    return dataclasses.replace(spec, model=model)


# the order the auto variants run in: the quick ones first, then the arms furthest from the target
AUTO_ORDER = (
    "s5",
    "lra_linformer",
    "lra_reformer",
    "lra_sinkhorn",
    "lra_bigbird",
    "lra_sparse",
    "mega",
    "lra_longformer",
)
# the alternatives, most informative first: what decides a default, then the rest
ALTERNATIVE_ORDER = (
    "lra_linformer",
    "lra_longformer",
    "lra_bigbird",
    "lra_sparse",
    "mega",
    "lra_reformer",
    "lra_sinkhorn",
    "s5",
)


def estimated_s(arm: str, changes: dict, dropout: float | None = None) -> float:
    """A rough cost of one row on an H200, compiles included: what the time budget reserves for it (a
    dropout-0 row reuses the graphs its auto variant's check compiled)."""
    if dropout == 0.0:
        return 12.0
    params = changes.get("attention_params", {})
    key = DEFAULTS_KEY.get(arm)
    block = params.get("flex_block", FAST_DEFAULTS.get(key, {}).get("flex_block"))
    if arm in DROPOUT_ZERO_ARMS:
        return 100.0 if block == 64 else 40.0  # 64-wide tiles: max-autotune compiles of the backward
    if arm == "mega" and changes.get("attention_impl", "flex") == "flex":
        return 40.0
    if arm == "lra_sinkhorn" and params.get("attend", FAST_DEFAULTS["sinkhorn"]["attend"]) == "compiled":
        return 60.0  # the whole block attention compiled, forward and backward
    return 25.0 if params.get("balance", "compiled") == "compiled" and arm == "lra_sinkhorn" else 12.0


def planned_rows(args) -> list[tuple]:
    """(arm, variant name, changes, attention dropout or None = the arm's, check?) in run order: the
    reference, the auto variants, the dropout-0 rows, the first round's variants, the alternatives."""
    variants = ordered_variants(args)
    auto = sorted((v for v in variants if v.group == 0), key=lambda v: AUTO_ORDER.index(v.arm))
    rows = [(REFERENCE, "sdpa (reference)", {}, None, False)]
    rows += [(v.arm, v.name + " *", v.changes, None, args.checks != "none") for v in auto]
    zero = [v for v in auto if v.arm in DROPOUT_ZERO_ARMS]
    if zero and not args.no_dropout_zero:
        rows.append((REFERENCE, "sdpa (reference)", {}, 0.0, False))
        rows += [(v.arm, v.name + " *", v.changes, 0.0, False) for v in zero]
    rows += [(v.arm, v.name, v.changes, None, args.checks == "all") for v in variants if v.group == 1]
    alternatives = sorted((v for v in variants if v.group == 2), key=lambda v: ALTERNATIVE_ORDER.index(v.arm))
    rows += [(v.arm, v.name, v.changes, None, args.checks == "all") for v in alternatives]
    return rows


def variants_main(argv=None) -> int:
    args = variants_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("check_fast.py variants: no CUDA device (a CPU dry run: --device cpu --lengths 64 --batch 2 --reps 1)")
        return 2
    rows_plan = planned_rows(args)
    arms = sorted({arm for arm, *_ in rows_plan})
    specs = {s.name: s for s in plan(arms, variants={}, task="text")[0]}
    out_path = Path(args.out) if args.out else default_out(device)
    header = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "batch": args.batch,
        "reps": args.reps,
        "warmup": args.warmup,
        "fast_defaults": FAST_DEFAULTS,
    }
    print(
        f"# {header['device']}, torch {header['torch']}, batch {args.batch}, median of {args.reps} after "
        f"{args.warmup} warm-up steps; * = the auto variant (fast_defaults.py)",
        flush=True,
    )
    started, results = time.perf_counter(), []
    for length in args.lengths:
        references = {}
        for arm, name, changes, dropout, do_check in rows_plan:
            base = {"variant": name, "length": length, "attention_dropout": "lra" if dropout is None else dropout}
            if time.perf_counter() - started + estimated_s(arm, changes, dropout) > args.budget_s:
                results.append({**base, "arm": arm, "status": "skipped (time budget)"})
                print_row(results[-1])
                continue
            spec = spec_for(specs, arm, changes, dropout)
            row = {**base, **measure(spec, length, args, device, references.get(dropout), do_check)}
            if arm == REFERENCE:
                references[dropout] = row
            results.append(row)
            print_row(row)
            write_json(out_path, header, results, time.perf_counter() - started)
    print(f"# {time.perf_counter() - started:.0f} s; JSON: {out_path}", flush=True)
    failed = [r for r in results if r.get("check") and not r["check"]["ok"]]
    return 1 if failed else 0


def default_out(device: torch.device) -> Path:
    name = torch.cuda.get_device_name(device).replace(" ", "_") if device.type == "cuda" else "cpu"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(__file__).resolve().parents[1] / "results" / "fast_variants" / f"{name}-{stamp}.json"


def write_json(path: Path, header: dict, rows: list, seconds: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({**header, "seconds": seconds, "rows": rows}, indent=1, default=str))
    tmp.replace(path)  # never a half-written file


def variants_args(argv):
    parser = argparse.ArgumentParser(prog="check_fast.py variants", description=VARIANTS_DOC.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--checks", choices=("default", "all", "none"), default="default")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--only", nargs="+", default=None, help="arms to time (lra_transformer is always timed)")
    parser.add_argument("--variants", nargs="+", default=None, help="variant names to time")
    parser.add_argument("--no-dropout-zero", action="store_true", help="skip the attention-dropout-0 rows")
    parser.add_argument("--budget-s", type=float, default=440.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.reps < 1:
        parser.error("--warmup and --reps must be at least 1")
    unknown = sorted(set(args.only or []) - {v.arm for v in VARIANTS})
    if unknown:
        parser.error(f"--only: no variants for {', '.join(unknown)}; arms: {', '.join(sorted(DEFAULTS_KEY))}")
    return args


# =====================================================================================================================
# conv
# =====================================================================================================================

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
        f"{'impl':12} {'B':>4} {'K':>3} {'L':>5} {'g':>3} {'fwd ms':>8} {'fwd TF/s':>9} {'f+b ms':>8} {'f+b TF/s':>9}"
    )
    for r in rows:
        print(
            f"{r['impl']:12} {r['batch']:4} {r['kernel']:3} {r['length']:5} {r['groups']:3} {r['fwd_ms']:8.3f} "
            f"{r['fwd_tflops']:9.1f} {r['fwd_bwd_ms']:8.3f} {r['fwd_bwd_tflops']:9.1f}"
        )
    for shape in shapes:
        same = [r for r in rows if (r["batch"], r["c_in"], r["c_out"], r["kernel"], r["length"], r["groups"]) == shape]
        best = min(same, key=lambda r: r["fwd_bwd_ms"])
        print(
            f"fastest for {shape}: {best['impl']} ({best['fwd_bwd_tflops']:.0f} TFLOP/s fwd+bwd, "
            f"{best['fwd_bwd_tflops'] / peak:.0%} of the bf16 matmul peak)"
        )


# =====================================================================================================================


COMMANDS = {"paths": paths_main, "sequence": sequence_main, "variants": variants_main, "conv": conv_main}


def main(argv: list[str] | None = None) -> int:
    return dispatch("check_fast.py", __doc__, COMMANDS, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())

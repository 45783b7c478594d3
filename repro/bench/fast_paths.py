"""``check_fast.py paths``: the fast attention paths against their plain paths, one layer each (``PATHS_DOC``)."""

from __future__ import annotations

import argparse
import math
import sys
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from ..followup.rotary import RotarySelfAttention
from ..original.attention import (
    ATTENTION,
    dense_dropout_reference,
    draw_dropout_keys,
    dropout_threshold,
    keep_mask,
    keep_probability,
    load_all,
)
from .fast_common import TASKS
from .models import resolve_arm
from .timing import GB, StepTimer, free_memory, is_out_of_memory, read_peak, reset_peak

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

"""``check_fast.py sequence``: lra_reformer, s5 and mega, fast against plain, whole model (``SEQUENCE_DOC``)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from ..followup.mega import MegaMixer
from ..followup.s5 import S5SSM, S5Mixer
from ..original.attention.reformer import ReformerAttention
from .fast_common import GRAD_TOL, OUT_TOL, REFERENCE, TASKS, batch_of_ids, fmt, relative_error, run_mixer
from .models import build, plan, sequence_length

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

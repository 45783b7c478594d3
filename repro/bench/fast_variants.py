"""``check_fast.py variants``: every fast variant of the slow arms timed on one GPU (``VARIANTS_DOC``)."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ..followup.mega import MegaMixer
from ..followup.s5 import S5Mixer
from ..original.attention import FlexPatternMixin
from ..original.attention.fast_defaults import FAST_DEFAULTS
from ..original.attention.linformer import LinformerAttention
from ..original.attention.reformer import ReformerAttention
from ..original.attention.sinkhorn import SinkhornAttention
from .fast_common import GRAD_TOL, OUT_TOL, REFERENCE, batch_of_ids, fmt, relative_error, run_mixer
from .models import apply_model_changes, build, plan, sequence_length
from .timing import kernel_profile

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
    checkout = Path(__file__).resolve().parents[2]
    return checkout / "results" / "fast_variants" / f"{name}-{stamp}.json"


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

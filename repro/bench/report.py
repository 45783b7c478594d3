"""The benchmark's record and its views: bench.json, bench.csv, table.md (LRA Table 2), figure.png (LRA Figure 3,
drawn by ``repro.paper.plots``, the builder of the papers' figures, once the arms have accuracy records).

Everything is written into a hidden temporary folder next to the destination and
renamed into place at the end, so no half-written bundle is ever left under
``results/`` (ARCHITECTURE.md, "Fail loudly, lose nothing").

Table 2 of the LRA paper (Tay et al. 2021, section 3.4) gives training steps per second and
peak memory per TPU device at lengths 1K-4K, batch 32, on the byte-level text task. table.md
gives our numbers at every length run, each with its ratio to the vanilla Transformer (SDPA
backend) at the same length, then (text configuration) LRA Table 2 itself from the training
rows, built by ``repro.paper.efficiency.lra_table2`` as ``lra-paper`` builds it from a bundle.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import statistics
from pathlib import Path

from ..records import write_atomic, write_csv
from ..reference import LRA_MODEL_ARMS

REFERENCE_MODEL = "lra_transformer"  # relative speed and memory are to this row (SDPA backend)
ROW_FIELDS = [
    "model",
    "arm",
    "kind",
    "length",
    "seq_len",
    "mode",
    "batch",
    "layers",
    "status",
    "steps_per_s",
    "steps_per_s_min",
    "steps_per_s_max",
    "step_ms_median",
    "step_ms_iqr",
    "reps",
    "samples",
    "sync_every",
    "peak_mem_gb",
    "peak_mem_bytes",
    "peak_mem_reason",
    "flops_per_step",
    "flops_source",
    "tflops",
    "roofline_fraction",
    "conv_layer_tflops",
    "kernel_ms_per_step",
    "kernels_per_step",
    "top_kernels",
    "top_ops",
    "host_ms_per_step",
    "top_host_ops",
    "parameters",
    "note",
]
# Our row name -> the model's name in the LRA tables (repro.reference.LRA_MODEL_ARMS); Sparse Transformer and
# Longformer have no Table 2 row (not timed in the paper: implemented with masks), so no TPU cells.
PUBLISHED_NAMES = {
    **{arm: model for model, arm in LRA_MODEL_ARMS.items()},
    "lra_transformer_materialized": "transformer",
}
MODE_TITLES = {
    "train": "Training steps per second (forward, backward, AdamW step)",
    "infer": "Inference steps per second (forward pass, no gradients)",
}
ACCURACY_PROFILES = ("paper", "budget")  # preferred first; smoke runs are not accuracies
# Arms whose fair reference is not the SDPA Transformer: (reference row, why), for the per-arm section.
OWN_REFERENCES = {
    "lra_synthesizer": (
        "lra_transformer_materialized",
        "quadratic by design (a learned [H, L, L] logit matrix per "
        "layer), so it is set against the Transformer that holds its [L, L] attention matrix too",
    ),
    "rotary_transformer": (
        "learned_pe",
        "the follow-up Transformer rotating q and k, set against the same backbone "
        "with learned positions summed into the embeddings",
    ),
}


def dropout_label(setting: float | None):
    """The record's ``attention_dropout``: ``"lra"`` (each arm's own) or the probability every arm was set to."""
    return "lra" if setting is None else float(setting)


def timing_words(sync_every: int) -> str:
    """How the timed steps were synchronised (repro/bench/timing.py)."""
    if sync_every == 1:
        return ", each timed alone (synchronised after every step)"
    return f", in blocks of {sync_every} run back to back (the median of the blocks' mean step)"


def dropout_words(label) -> str:
    if label in (None, "lra"):
        return "each arm's own attention dropout (LRA's 0.1 on text)"
    return f"attention dropout {label:g} for every arm"


def complete_rows(rows: list[dict]) -> list[dict]:
    """Every row with every field of ROW_FIELDS (None where it does not apply)."""
    out = []
    for row in rows:
        extra = {k: v for k, v in row.items() if k not in ROW_FIELDS}
        full = {field: row.get(field) for field in ROW_FIELDS}
        if extra and full["note"] is None:
            full["note"] = "; ".join(f"{k}: {v}" for k, v in extra.items())
        out.append(full)
    return out


def length_label(length: int) -> str:
    """1024 -> '1K' (also 1000 -> '1K'); other lengths as they are."""
    for unit in (1024, 1000):
        if length % unit == 0:
            return f"{length // unit}K"
    return str(length)


def _index(rows: list[dict]) -> dict:
    return {(r["model"], r["length"], r["mode"]): r for r in rows}


def relative_speed(rows: list[dict], model: str, length: int, mode: str) -> float | None:
    """Our steps/s over the SDPA Transformer's at the same length and mode."""
    index = _index(rows)
    ours, ref = index.get((model, length, mode)), index.get((REFERENCE_MODEL, length, mode))
    if not ours or not ref or ours["status"] != "ok" or ref["status"] != "ok":
        return None
    return ours["steps_per_s"] / ref["steps_per_s"]


def _ours_cell(row: dict | None, key: str, ref: dict | None, digits: int) -> str:
    if row is None:
        return ""
    if row["status"] != "ok":
        return row["status"].split(":")[0]  # OOM | error | skipped
    value = row.get(key)
    if value is None:
        return "n/a"
    cell = f"{value:.{digits}f}"
    if ref is not None and ref["status"] == "ok" and ref.get(key):
        cell += f" ({value / ref[key]:.2f}x)"
    return cell


def _models_in_order(rows: list[dict]) -> list[str]:
    seen = []
    for row in rows:
        if row["model"] not in seen:
            seen.append(row["model"])
    return seen


def _markdown(header: list[str], body: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return lines


def efficiency_table(rows: list[dict], mode: str, key: str, digits: int) -> list[str]:
    """Ours at each length, with the ratio to the SDPA Transformer (the published numbers: ``lra_table2``)."""
    lengths = sorted({r["length"] for r in rows})
    index = _index(rows)
    header = ["model", *[f"ours {length_label(n)}" for n in lengths]]
    body = []
    for model in _models_in_order([r for r in rows if r["mode"] == mode]):
        cells = [model]
        for length in lengths:
            ref = index.get((REFERENCE_MODEL, length, mode))
            cells.append(_ours_cell(index.get((model, length, mode)), key, ref, digits))
        body.append(cells)
    return _markdown(header, body)


def lra_table2(meta: dict, rows: list[dict]) -> list[str]:
    """LRA Table 2 from this run's training rows, as ``lra-paper`` builds it (``repro.paper.efficiency``)."""
    import pandas as pd

    from ..paper.efficiency import lra_table2 as build
    from ..paper.efficiency import table2_frame

    source = "this run's training rows (median per cell; lengths 1K-4K only)"
    table = build(table2_frame([pd.DataFrame(rows)]), [meta["device"]], source)
    return ["## LRA Table 2 from this run", ""] + table.markdown().splitlines()[2:] + [""]


def roofline_table(rows: list[dict], peak: float | None) -> list[str]:
    """Achieved TFLOP/s and the fraction of the measured bf16 matmul peak, at the largest length."""
    longest = max(r["length"] for r in rows)
    index = _index(rows)
    modes = [m for m in ("train", "infer") if any(r["mode"] == m for r in rows)]
    header = ["model", "FLOPs source"]
    for mode in modes:
        header += [f"{mode} GFLOP/step", f"{mode} TFLOP/s", f"{mode} % of peak", f"{mode} conv-layer TFLOP/s"]
    body = []
    for model in _models_in_order(rows):
        first = next(r for r in rows if r["model"] == model)
        cells = [model, str(first.get("flops_source") or "")]
        for mode in modes:
            row = index.get((model, longest, mode))
            ok = row is not None and row["status"] == "ok"
            flops = row.get("flops_per_step") if row else None
            cells.append(f"{flops / 1e9:.4g}" if flops else "")
            failed = row["status"] if row and not ok else ""
            cells.append(f"{row['tflops']:.3g}" if ok and row.get("tflops") is not None else failed)
            fraction = row.get("roofline_fraction") if ok else None
            cells.append(f"{100 * fraction:.1f}" if fraction is not None else "")
            cells.append(f"{row['conv_layer_tflops']:.3g}" if ok and row.get("conv_layer_tflops") is not None else "")
        body.append(cells)
    return _markdown(header, body)


def memory_scaling(rows: list[dict]) -> list[str]:
    """Peak memory at the largest length over the smallest, per model and mode."""
    lengths = sorted({r["length"] for r in rows})
    short, long_ = lengths[0], lengths[-1]
    index = _index(rows)
    header = [
        "model",
        "mode",
        f"peak GB at {length_label(short)}",
        f"peak GB at {length_label(long_)}",
        f"ratio {length_label(long_)} / {length_label(short)}",
    ]
    body = []
    for model in _models_in_order(rows):
        for mode in ("train", "infer"):
            a, b = index.get((model, short, mode)), index.get((model, long_, mode))
            if a is None and b is None:
                continue
            va = a.get("peak_mem_gb") if a and a["status"] == "ok" else None
            vb = b.get("peak_mem_gb") if b and b["status"] == "ok" else None
            cell_a = f"{va:.3f}" if va is not None else (a["status"] if a and a["status"] != "ok" else "n/a")
            cell_b = f"{vb:.3f}" if vb is not None else (b["status"] if b and b["status"] != "ok" else "n/a")
            ratio = f"{vb / va:.2f}" if va and vb is not None else "n/a"
            body.append([model, mode, cell_a, cell_b, ratio])
    return _markdown(header, body)


def _value_cell(row: dict, key: str, digits: int) -> str:
    if row["status"] != "ok":
        return row["status"].split(":")[0]
    return f"{row[key]:.{digits}f}" if row.get(key) is not None else "n/a"


def peer_table(rows: list[dict], pairs: dict) -> list[str]:
    """Ours against each peer at the largest length: speed and memory ratios, and whether ours is
    at least as fast with no more memory."""
    longest = max(r["length"] for r in rows)
    index = _index(rows)
    header = [
        "peer",
        "ours",
        "mode",
        "ours steps/s",
        "peer steps/s",
        "speed ours / peer",
        "ours GB",
        "peer GB",
        "memory ours / peer",
        "ours as fast, no more memory",
    ]
    body = []
    for peer, ours_names in pairs.items():
        for ours_name in ours_names:
            for mode in ("train", "infer"):
                theirs, ours = index.get((peer, longest, mode)), index.get((ours_name, longest, mode))
                if theirs is None or ours is None:
                    continue
                ok = ours["status"] == "ok" and theirs["status"] == "ok"
                speed = ours["steps_per_s"] / theirs["steps_per_s"] if ok else None
                mem_known = ok and ours.get("peak_mem_gb") is not None and theirs.get("peak_mem_gb") is not None
                memory = ours["peak_mem_gb"] / theirs["peak_mem_gb"] if mem_known else None
                if ok and memory is not None:
                    verdict = "yes" if speed >= 1.0 and memory <= 1.0 else "no"
                elif ours["status"] == "ok" and theirs["status"] == "OOM":
                    verdict = "yes (peer OOM)"
                else:
                    verdict = "n/a"
                body.append(
                    [
                        peer,
                        ours_name,
                        mode,
                        _value_cell(ours, "steps_per_s", 2),
                        _value_cell(theirs, "steps_per_s", 2),
                        f"{speed:.2f}" if speed is not None else "n/a",
                        _value_cell(ours, "peak_mem_gb", 3),
                        _value_cell(theirs, "peak_mem_gb", 3),
                        f"{memory:.2f}" if memory is not None else "n/a",
                        verdict,
                    ]
                )
    return _markdown(header, body)


def kernel_table(rows: list[dict]) -> list[str]:
    """Per profiled row: wall ms a step, the kernels' ms a step, their share of the step (the GPU's busy
    share while kernels do not overlap), launches a step, and the kernels with most time."""
    header = ["model", "length", "mode", "step ms", "kernel ms", "GPU busy", "launches"]
    header += ["top kernels (ms a step)", "operators that launched most (ms a step)"]
    body = [
        [
            r["model"],
            length_label(r["length"]),
            r["mode"],
            f"{r['step_ms_median']:.2f}",
            f"{r['kernel_ms_per_step']:.2f}",
            f"{r['kernel_ms_per_step'] / r['step_ms_median']:.0%}",
            f"{r['kernels_per_step']:.0f}",
            r["top_kernels"].replace("|", "/"),
            (r.get("top_ops") or "").replace("|", "/"),
        ]
        for r in rows
        if r.get("kernel_ms_per_step") is not None
    ]
    return _markdown(header, body)


def kernel_section(meta: dict, rows: list[dict]) -> list[str]:
    """table.md's section on where the profiled steps' time went (none when no row was profiled)."""
    if not any(r.get("kernel_ms_per_step") is not None for r in rows):
        return []
    intro = (
        f"{meta.get('profile_steps')} more steps of each row under torch.profiler, after the timed ones: the "
        "kernels' time a step against the median step's wall time (the GPU's busy share; the rest is the "
        "host's, launching), kernel launches a step (device copies and fills included), the five "
        "kernels with most time, and the five operators whose own kernels took most."
    )
    return ["## Where the step's time goes", "", intro, ""] + kernel_table(rows) + [""]


def _ratio(row: dict | None, ref: dict | None, key: str) -> str:
    ok = row is not None and ref is not None and row["status"] == "ok" and ref["status"] == "ok"
    if not ok or row.get(key) is None or not ref.get(key):
        return "n/a"
    return f"{row[key] / ref[key]:.2f}"


def reference_table(rows: list[dict], mode: str) -> list[str]:
    """Each arm at the largest length against ``lra_transformer`` and against its own reference
    (``OWN_REFERENCES``; ``lra_transformer`` elsewhere): steps/s, peak GB and their ratios."""
    longest = max(r["length"] for r in rows)
    index = _index(rows)
    header = [
        "model",
        "steps/s",
        "peak GB",
        f"speed / {REFERENCE_MODEL}",
        f"memory / {REFERENCE_MODEL}",
        "reference",
        "speed / reference",
        "memory / reference",
    ]
    base = index.get((REFERENCE_MODEL, longest, mode))
    body = []
    for model in _models_in_order([r for r in rows if r["mode"] == mode and r.get("kind", "arm") == "arm"]):
        row = index.get((model, longest, mode))
        reference = OWN_REFERENCES.get(model, (REFERENCE_MODEL, ""))[0]
        ref = index.get((reference, longest, mode))
        if row is None:
            continue
        body.append(
            [
                model,
                _value_cell(row, "steps_per_s", 2),
                _value_cell(row, "peak_mem_gb", 3),
                _ratio(row, base, "steps_per_s"),
                _ratio(row, base, "peak_mem_gb"),
                reference,
                _ratio(row, ref, "steps_per_s"),
                _ratio(row, ref, "peak_mem_gb"),
            ]
        )
    return _markdown(header, body)


def reference_section(meta: dict, rows: list[dict]) -> list[str]:
    mode = "train" if any(r["mode"] == "train" for r in rows) else "infer"
    label = length_label(max(r["length"] for r in rows))
    lines = [
        f"## Each arm against {REFERENCE_MODEL} at {label} ({'training' if mode == 'train' else 'inference'}, "
        f"{dropout_words(meta.get('attention_dropout'))})",
        "",
        f"Every row of this run has the same attention dropout, {REFERENCE_MODEL} included. Ratios are speed "
        "(steps/s) and peak memory over the reference's.",
    ]
    lines += [""] + [f"- `{model}` is {why}: its reference is `{ref}`." for model, (ref, why) in OWN_REFERENCES.items()]
    return lines + [""] + reference_table(rows, mode) + [""]


def table_markdown(meta: dict, rows: list[dict], notes: dict, skipped: list[str], pairs: dict | None = None) -> str:
    peak = meta.get("matmul_peak_tflops")
    on_gpu = meta.get("cuda") is not None
    task = meta.get("task", "text")
    arithmetic = (
        f"dtype {meta['dtype']} (autocast: {meta['autocast']}), torch {meta['torch']}, CUDA {meta['cuda']}"
        if on_gpu
        else f"float32 on the CPU (dtype {meta['dtype']} autocasts on CUDA only), torch {meta['torch']}"
    )
    memory = (
        "Peak memory in GB (10^9 bytes): torch.cuda.max_memory_allocated over the measured steps, weights and "
        "optimiser state included."
        if on_gpu
        else "Peak memory: measured on CUDA only."
    )
    lines = [
        f"# Speed and memory, LRA {task} configuration ({meta['date']}, {meta['device']})",
        "",
        f"Batch {meta['batch']}, {arithmetic}; warm-up {meta['warmup']} steps, median of up to {meta['reps']} "
        f"timed steps{timing_words(meta.get('sync_every', 1))}. "
        f"Ratios in parentheses: to `{REFERENCE_MODEL}` (SDPA) at the same length"
        + (
            "; LRA Table 2 below sets ours beside the published (Tay et al. 2021, Table 2, 4x4 TPU v3). "
            if task == "text"
            else " (LRA published speeds for the text configuration only). "
        )
        + f"{memory} "
        f"Attention dropout: {dropout_words(meta.get('attention_dropout'))}.",
        "",
        f"{meta.get('matmul_dtype', 'bf16')} matmul peak measured in this run: {peak:.3g} TFLOP/s "
        f"({meta['matmul_n']}^3 product)."
        if peak
        else "matmul peak: not measured.",
        "",
    ]
    for mode in ("train", "infer"):
        if not any(r["mode"] == mode for r in rows):
            continue
        lines += [f"## {MODE_TITLES[mode]}", ""] + efficiency_table(rows, mode, "steps_per_s", 2) + [""]
        lines += [f"## Peak memory (GB), {'training' if mode == 'train' else 'inference'}", ""]
        lines += efficiency_table(rows, mode, "peak_mem_gb", 3) + [""]
    if task == "text" and any(r["mode"] == "train" for r in rows):
        lines += lra_table2(meta, rows)
    lines += reference_section(meta, rows)
    lines += [
        f"## Roofline at {length_label(max(r['length'] for r in rows))}",
        "",
        "Model FLOPs per step (matrix products; training = 3x forward; see repro/bench/flops.py) over the "
        "median step time, and that rate over the matmul peak above. Conv-layer TFLOP/s: one convolution "
        "layer alone, timed at the row's shape with the model's own implementation.",
        "",
    ]
    lines += roofline_table(rows, peak) + [""]
    if len({r["length"] for r in rows}) > 1:
        lines += [
            "## Memory scaling",
            "",
            "Peak memory at the largest length over the smallest (1 = flat; "
            "a fourfold length at quadratic memory gives up to 16).",
            "",
        ]
        lines += memory_scaling(rows) + [""]
    present = {r["model"] for r in rows}
    pairs = {peer: [o for o in ours if o in present] for peer, ours in (pairs or {}).items() if peer in present}
    if any(pairs.values()):
        lines += [
            f"## Ours against the peers at {length_label(max(r['length'] for r in rows))}",
            "",
            "Each peer (a public implementation inside our encoder) against our mechanism, measured in this run.",
            "",
        ]
        lines += peer_table(rows, pairs) + [""]
    lines += kernel_section(meta, rows)
    if notes:
        lines += ["## Rows that are variants or peers", ""]
        lines += [f"- `{name}`: {text}" for name, text in notes.items()] + [""]
    if skipped:
        lines += ["## Skipped", ""] + [f"- {line}" for line in skipped] + [""]
    return "\n".join(lines)


def read_accuracies(accuracy_dir: Path, arms: list[str], task: str = "text") -> dict:
    """{arm: (mean test accuracy, records, profile, sd over the records)} from complete run records, paper
    before budget."""
    found = {}
    for arm in arms:
        for profile in ACCURACY_PROFILES:
            values = []
            for path in sorted(Path(accuracy_dir).glob(f"{arm}/{task}/{profile}/seed*/metrics.json")):
                metrics = json.loads(path.read_text())
                if metrics.get("status") == "complete" and metrics.get("test_acc") is not None:
                    values.append(float(metrics["test_acc"]))
            if values:
                mean = sum(values) / len(values)
                sd = statistics.stdev(values) if len(values) > 1 else math.nan
                found[arm] = (mean, len(values), profile, sd)
                break
    return found


def figure3(points: list[dict], accuracies: dict, path: Path, meta: dict, mode: str, longest: int) -> None:
    """LRA Figure 3 from the benchmark's rows and the arms' test accuracy on its task, drawn by the papers'
    builder (``repro.paper.plots.tradeoff``): beside the published points when the rows measure what the
    published figure does (training steps/s at 4K on text), else ours alone."""
    from ..paper import plots
    from ..paper.figures import published_points

    task = meta.get("task", "text")
    ours = [
        {
            "name": PUBLISHED_NAMES.get(r["model"], r["model"]),
            "accuracy": 100 * accuracies[r["model"]][0],
            "accuracy_sd": 100 * accuracies[r["model"]][3] if len(accuracies[r["model"]]) > 3 else math.nan,
            "seeds": accuracies[r["model"]][1],
            "speed": r["steps_per_s"],
            "memory_gb": math.nan if r.get("peak_mem_gb") is None else r["peak_mem_gb"],
        }
        for r in points
        if r["model"] in accuracies
    ]
    same = mode == "train" and longest == 4096 and task == "text"
    axis = f"{mode} steps per second at {length_label(longest)} (batch {meta['batch']}, {meta['device']})"
    plots.tradeoff(published_points((task,)) if same else [], ours, axis, (task,), same, path)


def figure(rows: list[dict], accuracies: dict, path: Path, meta: dict) -> str:
    """LRA Figure 3 (``figure3``) when the arms have accuracy records; without them, the speed at the largest
    length against peak memory (or parameters where memory is not measured, on CPU). Returns what the y axis
    shows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mode = "train" if any(r["mode"] == "train" for r in rows) else "infer"
    longest = max(r["length"] for r in rows)
    points = [r for r in rows if r["mode"] == mode and r["length"] == longest and r["status"] == "ok"]
    with_memory = any(r.get("peak_mem_gb") is not None for r in points)
    if any(r["model"] in accuracies for r in points):
        figure3(points, accuracies, path, meta, mode, longest)
        return "accuracy"
    if with_memory:
        y = [r["peak_mem_gb"] for r in points]
        ylabel, shows = f"peak memory (GB) at {length_label(longest)}", "memory"
    else:
        y = [r["parameters"] / 1e6 for r in points]
        ylabel, shows = "parameters (millions); peak memory not measured on this device", "parameters"
    x = [r["steps_per_s"] for r in points]
    mem = [r.get("peak_mem_gb") for r in points]
    biggest = max([m for m in mem if m] or [1.0])
    sizes = [2000 * (m / biggest) if m else 300 for m in mem]
    fig, ax = plt.subplots(figsize=(9, 6))
    kinds = {"arm": "tab:blue", "variant": "tab:green", "peer": "tab:red"}
    for kind, colour in kinds.items():
        chosen = [i for i, r in enumerate(points) if r["kind"] == kind]
        if chosen:
            ax.scatter(
                [x[i] for i in chosen],
                [y[i] for i in chosen],
                s=[sizes[i] for i in chosen],
                c=colour,
                alpha=0.45,
                edgecolors="black",
                label={"arm": "arms", "variant": "variants", "peer": "peers"}[kind],
            )
    for xi, yi, r in zip(x, y, points, strict=True):
        ax.annotate(r["model"], (xi, yi), fontsize=7, ha="center", va="center")
    ax.set_xlabel(f"{mode} steps per second at {length_label(longest)} (batch {meta['batch']})")
    ax.set_ylabel(ylabel)
    if x and min(x) > 0 and max(x) / min(x) > 20:
        ax.set_xscale("log")
    circles = "circle area = peak memory" if with_memory else "peak memory not measured"
    ax.set_title(f"Speed vs {shows}; {circles} ({meta['device']}, {meta['date']})", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.margins(0.12)
    legend = ax.legend(loc="best", fontsize=8)
    for handle in getattr(legend, "legend_handles", None) or getattr(legend, "legendHandles", []):
        handle.set_sizes([60])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return shows


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def write_bundle(
    out_root: Path,
    meta: dict,
    rows: list[dict],
    notes: dict,
    skipped: list[str],
    accuracies: dict,
    pairs: dict | None = None,
) -> Path:
    """Write the four files into a temporary folder and rename it to ``<out_root>/<date>_<device>_<mode>``
    (with ``_attention-dropout-<p>`` and ``_sync-every-<k>`` where those differ from the defaults).

    An existing folder of that name is kept; the new one gets a ``-2``, ``-3``, ... suffix.
    """
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    name = f"{meta['date']}_{meta['device_slug']}_{meta['mode']}"
    if meta.get("attention_dropout", "lra") != "lra":
        name += f"_attention-dropout-{meta['attention_dropout']:g}"
    if meta.get("sync_every", 1) != 1:
        name += f"_sync-every-{meta['sync_every']}"
    final, n = out_root / name, 2
    while final.exists():
        final, n = out_root / f"{name}-{n}", n + 1
    tmp = out_root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        rows = complete_rows(rows)
        shows = figure(rows, accuracies, tmp / "figure.png", meta) if any(r["status"] == "ok" for r in rows) else None
        record = {
            **meta,
            "figure_y": shows,
            "accuracies": {k: {"test_acc": v[0], "records": v[1], "profile": v[2]} for k, v in accuracies.items()},
            "notes": notes,
            "peer_pairs": pairs or {},
            "skipped": skipped,
            "rows": rows,
        }
        (tmp / "bench.json").write_text(json.dumps(record, indent=2, default=_jsonable) + "\n")
        write_csv(tmp / "bench.csv", rows, ROW_FIELDS)
        (tmp / "table.md").write_text(table_markdown(meta, rows, notes, skipped, pairs) + "\n")
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def rerender(bundle: Path, accuracy_dir: Path | None = None) -> Path:
    """Rewrite table.md and figure.png of an existing bundle from its bench.json (e.g. once
    accuracy records exist on this machine: the figure then plots accuracy)."""
    bundle = Path(bundle)
    record = json.loads((bundle / "bench.json").read_text())
    rows = record["rows"]
    arms = sorted({r["model"] for r in rows if r.get("kind") == "arm"})
    accuracies = read_accuracies(accuracy_dir, arms, record.get("task", "text")) if accuracy_dir else {}
    if any(r["status"] == "ok" for r in rows):
        tmp_png = bundle / ".figure.tmp.png"
        record["figure_y"] = figure(rows, accuracies, tmp_png, record)
        os.replace(tmp_png, bundle / "figure.png")
    record["accuracies"] = {k: {"test_acc": v[0], "records": v[1], "profile": v[2]} for k, v in accuracies.items()}
    write_atomic(
        bundle / "table.md",
        table_markdown(record, rows, record.get("notes", {}), record.get("skipped", []), record.get("peer_pairs", {}))
        + "\n",
    )
    write_atomic(bundle / "bench.json", json.dumps(record, indent=2, default=_jsonable) + "\n")
    return bundle


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        description="Rewrite a benchmark bundle's table.md and figure.png from its bench.json."
    )
    parser.add_argument("bundle", type=Path, help="a folder written by experiments/bench.py")
    parser.add_argument(
        "--accuracy-dir",
        type=Path,
        default=Path("outputs/runs"),
        help="run records whose text test accuracy the figure plots (default outputs/runs)",
    )
    args = parser.parse_args(argv)
    if not (args.bundle / "bench.json").exists():
        raise SystemExit(f"{args.bundle}: no bench.json; pass a folder written by experiments/bench.py")
    print(f"rewrote {rerender(args.bundle, args.accuracy_dir)}")


if __name__ == "__main__":
    main()

"""The papers' figures from a bundle's numbers (used by ``repro.paper``); PNGs with stable bytes. Also the grids
of generated Pathfinder and Path-X samples (``lra-paper pathfinder-samples``, no bundle needed).

Each function takes plain numbers (``repro.paper.figures`` extracts them from the records) and writes
one PNG. A figure whose inputs were not run still gets written, saying so on the canvas,
so the set of figures never silently shrinks.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .accuracy import TASK_NAMES  # noqa: E402

PNG_METADATA = {"Software": None}  # no matplotlib version in the file: same input, same bytes
STYLE = {
    "font.size": 8,
    "axes.titlesize": 9,
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "path.simplify": False,
    "svg.hashsalt": "lra-repro",
}


def save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata=PNG_METADATA)
    plt.close(fig)
    return path


def _wrap(text: str, width: int = 80) -> str:
    return "\n".join(textwrap.wrap(text, width))


def _not_run(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes, color="0.35")
    ax.set_xticks([])
    ax.set_yticks([])


def _absent_note(points: list[dict], placed: list[dict]) -> str:
    """Which points are not drawn, and what each lacks."""
    no_accuracy = sorted(p["name"] for p in points if p not in placed and not math.isfinite(p["accuracy"]))
    no_speed = sorted(p["name"] for p in points if p not in placed and math.isfinite(p["accuracy"]))
    parts = [f"no accuracy: {', '.join(no_accuracy)}"] if no_accuracy else []
    parts += [f"no speed or memory: {', '.join(no_speed)}"] if no_speed else []
    return "not placed (" + "; ".join(parts) + ")" if parts else ""


def tradeoff(published: list[dict], ours: list[dict], ours_axis: str, shared: tuple[str, ...], path: Path) -> Path:
    """LRA Figure 3: mean accuracy (y) against speed (x), circle area proportional to peak memory within
    each panel, one colour per model in both panels.

    ``published`` / ``ours``: dicts with name, accuracy, speed, memory_gb (NaN where missing), the same
    models in the same order. ``shared``: the tasks both panels average, named in the titles; when empty,
    each of our arms averages its own tasks, ``own_tasks`` of them, marked on its point.
    """
    names = ", ".join(TASK_NAMES[t] for t in shared)
    palette = plt.get_cmap("tab20")
    colours = {p["name"]: palette((2 * i) % 20 + (2 * i) // 20) for i, p in enumerate(published)}
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
        panels = (
            (
                axes[0],
                published,
                f"Published (Tay et al. 2021, Tables 1-2), recomputed\nover {names or 'the five tasks'}",
                "training steps/s at 4K (TPU v3)",
            ),
            (axes[1], ours, f"Ours (seed means)\nover {names or 'the tasks run'}", ours_axis),
        )
        for ax, points, title, xlabel in panels:
            ax.set_title(title)
            placed = [p for p in points if all(math.isfinite(p[k]) for k in ("accuracy", "speed", "memory_gb"))]
            absent = _absent_note(points, placed)
            if not placed:
                _not_run(ax, absent or "no records")
                continue
            biggest = max(p["memory_gb"] for p in placed) or 1.0
            span_x = max(p["speed"] for p in placed) - min(p["speed"] for p in placed) or 1.0
            span_y = max(p["accuracy"] for p in placed) - min(p["accuracy"] for p in placed) or 1.0
            above: list[tuple[float, float]] = []  # the points whose labels sit above their centre
            for p in placed:
                partial = p.get("own_tasks") is not None and p["own_tasks"] < 5
                colour = colours.get(p["name"], "C0")
                ax.scatter(
                    p["speed"],
                    p["accuracy"],
                    s=40 + 1200 * p["memory_gb"] / biggest,
                    alpha=0.45,
                    facecolors="none" if partial else colour,
                    edgecolors=colour,
                )
                label = p["name"] + (f" ({p['own_tasks']}/5 tasks)" if partial else "")
                # just above the centre, or just below it where that would overlap a neighbour's label
                crowded = any(
                    abs(p["speed"] - x) < 0.12 * span_x and abs(p["accuracy"] - y) < 0.04 * span_y for x, y in above
                )
                if not crowded:
                    above.append((p["speed"], p["accuracy"]))
                ax.annotate(
                    label,
                    (p["speed"], p["accuracy"]),
                    xytext=(0, -2 if crowded else 2),
                    textcoords="offset points",
                    fontsize=7,
                    ha="center",
                    va="top" if crowded else "bottom",
                    annotation_clip=False,
                )
            ax.margins(x=0.12, y=0.08)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("mean test accuracy (%)")
            note = f"circle area: peak memory, largest {biggest:.1f} GB" + (f"\n{absent}" if absent else "")
            ax.text(0.01, 0.01, note, transform=ax.transAxes, fontsize=6, color="0.35", wrap=True)
        fig.tight_layout()
        return save(fig, path)


def accuracy_vs_kernel(tasks: list[str], kernels: list[int], published: dict, ours: dict, path: Path) -> Path:
    """The follow-up study's Table 1 as curves: accuracy per kernel size and task, ours (mean +/- sd) beside published.

    ``published[task][k]`` is a number; ``ours[task][k]`` a list of per-seed accuracies.
    """
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(tasks), figsize=(3 * len(tasks), 3), squeeze=False)
        for ax, task in zip(axes[0], tasks, strict=True):
            ax.plot(kernels, [published[task][k] for k in kernels], "s--", color="0.4", label="published")
            have = [k for k in kernels if ours[task].get(k)]
            if have:
                means = [sum(ours[task][k]) / len(ours[task][k]) for k in have]
                sds = [_sd(ours[task][k]) for k in have]
                ax.errorbar(have, means, yerr=sds, fmt="o-", color="C0", capsize=3, label="ours (mean ± sd)")
            missing = [k for k in kernels if k not in have]
            if missing:
                ax.text(
                    0.02,
                    0.02,
                    "not run: K=" + ", ".join(map(str, missing)),
                    transform=ax.transAxes,
                    fontsize=6,
                    color="0.35",
                )
            ax.set_xscale("log")
            ax.set_xticks(kernels)
            ax.set_xticklabels([str(k) for k in kernels])
            ax.minorticks_off()
            ax.set_title(task)
            ax.set_xlabel("kernel size K")
        axes[0][0].set_ylabel("test accuracy (%)")
        axes[0][0].legend(fontsize=6)
        fig.tight_layout()
        return save(fig, path)


def _sd(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def label_distribution(counts: dict | None, path: Path, note: str) -> Path:
    """The follow-up study's appendix B, Figure 1: test-label distribution per root (``counts[root][label]``)."""
    with plt.rc_context(STYLE):
        roots = sorted(counts) if counts else []
        fig, axes = plt.subplots(1, max(1, len(roots)), figsize=(2.6 * max(1, len(roots)), 2.8), squeeze=False)
        if not roots:
            _not_run(axes[0][0], f"not run: {note}")
        for ax, root in zip(axes[0], roots, strict=False):  # one empty panel when no roots
            values = counts[root]
            total = sum(values) or 1
            ax.bar(range(10), [v / total for v in values], color="C0")
            ax.set_title(f"root {root.lstrip('[')} (n={sum(values)})")
            ax.set_xticks(range(10))
            ax.set_xlabel("label")
        axes[0][0].set_ylabel("fraction of test examples")
        fig.suptitle(_wrap(note, 140), fontsize=7)
        fig.tight_layout()
        return save(fig, path)


def operator_accuracy(rows: list[dict], path: Path, note: str) -> Path:
    """The follow-up study's appendix B, Figure 2: per-root-operator accuracy of a model and of the root-operator
    baseline."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(5, 3))
        if not rows:
            _not_run(ax, f"not run: {note}")
        else:
            x = list(range(len(rows)))
            ax.bar(
                [i - 0.2 for i in x],
                [r["greedy"] for r in rows],
                width=0.4,
                color="0.6",
                label="baseline (most frequent training label per root)",
            )
            ax.bar(
                [i + 0.2 for i in x],
                [r["model"] for r in rows],
                width=0.4,
                yerr=[r["model_sd"] for r in rows],
                color="C0",
                capsize=3,
                label="model (mean ± sd over seeds)",
            )
            for i, r in enumerate(rows):
                ax.annotate(
                    f"{r['model'] - r['greedy']:+.1f}", (i + 0.2, r["model"]), ha="center", va="bottom", fontsize=7
                )
            ax.set_xticks(x)
            ax.set_xticklabels([r["root"].lstrip("[") for r in rows])
            ax.set_ylabel("test accuracy (%)")
            ax.legend(fontsize=6)
            ax.set_title(_wrap(note), fontsize=7)
        fig.tight_layout()
        return save(fig, path)


def pathfinder_samples(positives: list, negatives: list, title: str, path: Path) -> Path:
    """A 4x4 grid of generated Pathfinder images: top two rows positives, bottom two negatives, each titled with
    its label (uint8 pixels, nearest-neighbour upscaling)."""
    fig, axes = plt.subplots(4, 4, figsize=(8, 8.8))
    for ax, sample in zip(axes.ravel(), positives + negatives, strict=True):
        ax.imshow(sample.image, cmap="gray", vmin=0, vmax=255, interpolation="nearest")
        word = "positive (one contour)" if sample.label == 1 else "negative (two contours)"
        ax.set_title(f"label {sample.label}: {word}", fontsize=8, color="tab:green" if sample.label else "tab:red")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

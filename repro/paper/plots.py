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
import matplotlib.text
import matplotlib.transforms

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .accuracy import LRA_NAMES  # noqa: E402
from .names import task_title  # noqa: E402

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
    absent = [p for p in points if p not in placed]
    no_accuracy = sorted(_display_name(p["name"]) for p in absent if not math.isfinite(p["accuracy"]))
    no_speed = sorted(_display_name(p["name"]) for p in absent if math.isfinite(p["accuracy"]))
    parts = [f"no accuracy: {', '.join(no_accuracy)}"] if no_accuracy else []
    parts += [f"no speed or memory: {', '.join(no_speed)}"] if no_speed else []
    return "not placed (" + "; ".join(parts) + ")" if parts else ""


# Where a point's label may sit, tried in this order: (dx, dy) of unit length and the alignment that puts the
# text on that side of its anchor. The label goes to the first ring and side whose box is free (LABEL_TIERS).
LABEL_SIDES = (
    ((0.0, 1.0), "center", "bottom"),
    ((0.0, -1.0), "center", "top"),
    ((1.0, 0.0), "left", "center"),
    ((-1.0, 0.0), "right", "center"),
    ((0.71, 0.71), "left", "bottom"),
    ((-0.71, 0.71), "right", "bottom"),
    ((0.71, -0.71), "left", "top"),
    ((-0.71, -0.71), "right", "top"),
)
LABEL_GAP_PT = 2.0  # between a circle's edge and its label
LABEL_RING_PT = 7.0  # how much farther each further ring of candidate places lies
LABEL_RINGS = 40
LABEL_PAD_PX = 4.0  # boxes closer than this (display pixels) count as overlapping: a visible gap between labels
# Each tier, tried in turn: whether the label's box must (lie inside the axes, miss the other points' circles, miss
# the error bars, be nearer its own circle's edge than any other's).
LABEL_TIERS = (
    (True, True, True, True),
    (True, False, True, True),
    (True, True, True, False),
    (True, False, True, False),
    (True, False, False, False),
    (False, False, False, False),
)
MARKER_AREA = (40.0, 1200.0)  # a circle's area in pt^2: the smallest, plus this much at the largest memory


def _overlap(a, b, pad: float = LABEL_PAD_PX) -> bool:
    return a.x0 < b.x1 + pad and b.x0 < a.x1 + pad and a.y0 < b.y1 + pad and b.y0 < a.y1 + pad


def _inside(inner, outer) -> bool:
    return outer.x0 <= inner.x0 and inner.x1 <= outer.x1 and outer.y0 <= inner.y0 and inner.y1 <= outer.y1


def place_labels(ax, anchors: list[tuple[float, float, float]], texts: list[str], marks: list) -> list:
    """Annotate each anchor (x, y in data units, the radius in points of the circle drawn there) with its text,
    in order, each at the first place of ``LABEL_SIDES`` x ``LABEL_RINGS`` whose box, measured by the figure's
    renderer, overlaps no label placed before it; under ``LABEL_TIERS``, first also inside the axes and clear
    of the other circles and of ``marks`` (display boxes: the error bars), then of the marks alone. A label
    beyond the first ring gets a thin line to its circle. Deterministic: same anchors, same places. Call it
    once the axes' limits and the layout are final."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    to_px = fig.dpi / 72.0
    circles = []
    for x, y, radius in anchors:
        cx, cy = ax.transData.transform((x, y))
        r = radius * to_px
        circles.append(matplotlib.transforms.Bbox([[cx - r, cy - r], [cx + r, cy + r]]))
    placed, boxes = [], []
    for i, ((x, y, radius), text) in enumerate(zip(anchors, texts, strict=True)):
        probe = ax.annotate(text, (x, y), xytext=(0, 0), textcoords="offset points", fontsize=7, annotation_clip=False)
        for in_axes, miss_circles, miss_marks, nearest in LABEL_TIERS:
            others = [*boxes, *(c for j, c in enumerate(circles) if j != i and miss_circles)]
            others += marks if miss_marks else []
            owner = (i, circles) if nearest else None
            found = _first_free_place(probe, renderer, radius, others, frame if in_axes else None, owner)
            if found is not None:
                break
        else:  # every ring of every tier collides: cannot happen with finitely many boxes in the figure
            raise RuntimeError(f"no free place for the label {text!r}")
        probe.remove()
        ring, offset, ha, va = found
        leader = {"arrowstyle": "-", "color": "0.45", "lw": 0.5, "shrinkA": 1, "shrinkB": radius} if ring else None
        label = ax.annotate(
            text,
            (x, y),
            xytext=offset,
            textcoords="offset points",
            fontsize=7,
            ha=ha,
            va=va,
            annotation_clip=False,
            arrowprops=leader,
        )
        boxes.append(label_box(label, renderer))
        placed.append(label)
    return placed


def label_box(label, renderer):
    """A label's text box in display units (its leader line left out)."""
    label.update_positions(renderer)  # the text's place from its offset, as drawing sets it
    return matplotlib.text.Text.get_window_extent(label, renderer)


def _nearest_circle(box, circles: list) -> int:
    """The index of the circle whose edge is nearest the centre of ``box`` (all display units)."""
    x, y = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2

    def gap(c) -> float:
        return math.hypot(x - (c.x0 + c.x1) / 2, y - (c.y0 + c.y1) / 2) - c.width / 2

    return min(range(len(circles)), key=lambda j: gap(circles[j]))


def _first_free_place(probe, renderer, radius: float, others: list, frame, owner) -> tuple | None:
    """(ring, offset in points, ha, va) of the first free place for ``probe``'s text, or None; ``owner``: None,
    or (its index, every circle) when the place must lie nearer its own circle than any other."""
    for ring in range(LABEL_RINGS):
        distance = radius + LABEL_GAP_PT + ring * LABEL_RING_PT
        for (dx, dy), ha, va in LABEL_SIDES:
            probe.xyann = (dx * distance, dy * distance)
            probe.set_horizontalalignment(ha)
            probe.set_verticalalignment(va)
            box = label_box(probe, renderer)
            if frame is not None and not _inside(box, frame) or any(_overlap(box, o) for o in others):
                continue
            if owner is None or _nearest_circle(box, owner[1]) == owner[0]:
                return ring, (dx * distance, dy * distance), ha, va
    return None


def _display_name(name: str) -> str:
    return LRA_NAMES.get(name, name.capitalize())


def _tradeoff_panel(ax, points: list[dict], colours: dict, title: str, xlabel: str) -> tuple[list[tuple], list, str]:
    """One panel's circles and error bars; returns the label anchors (for ``place_labels``), the error bars and
    the panel's note."""
    ax.set_title(title)
    placed = [p for p in points if all(math.isfinite(p[k]) for k in ("accuracy", "speed", "memory_gb"))]
    absent = _absent_note(points, placed)
    if not placed:
        _not_run(ax, absent or "no records")
        return [], [], ""
    biggest = max(p["memory_gb"] for p in placed) or 1.0
    anchors, bars = [], []
    for p in placed:
        partial = p.get("own_tasks") is not None and p["own_tasks"] < 5
        colour = colours.get(p["name"], "C0")
        area = MARKER_AREA[0] + MARKER_AREA[1] * p["memory_gb"] / biggest
        ax.scatter(
            p["speed"],
            p["accuracy"],
            s=area,
            alpha=0.45,
            facecolors="none" if partial else colour,
            edgecolors=colour,
            zorder=2,
        )
        sd = p.get("accuracy_sd", math.nan)
        if math.isfinite(sd):
            bar = ax.errorbar(
                p["speed"], p["accuracy"], yerr=sd, fmt="none", ecolor="0.15", elinewidth=0.8, capsize=2.5, zorder=3
            )
            bars.append(bar)
        label = _display_name(p["name"]) + (f" ({p['own_tasks']}/5 tasks)" if partial else "")
        anchors.append((p["speed"], p["accuracy"], math.sqrt(area / math.pi), label))
    ax.margins(x=0.15, y=0.12)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean test accuracy (%)")
    note = f"circle area: peak memory (of the records the speed is from), largest {biggest:.1f} GB"
    note += f"; {absent}" if absent else ""
    return anchors, bars, note


def _seeds_words(points: list[dict]) -> str:
    counts = sorted({p["seeds"] for p in points if p.get("seeds", 0) > 1})
    if not counts:
        return ""
    return f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


def tradeoff_figure(published: list[dict], ours: list[dict], ours_axis: str, shared: tuple[str, ...], same_quantity):
    """LRA Figure 3 as a figure and its point labels (``tradeoff`` saves it): mean accuracy (y) against speed (x),
    circle area proportional to peak memory within each panel, one colour per model, ours with error bars of
    ± one sd over the seeds of each seed's mean accuracy over the tasks; labels placed by ``place_labels``.

    ``published`` / ``ours``: dicts with name, accuracy, speed, memory_gb (NaN where missing; ours also
    accuracy_sd and seeds), the same models in the same order. ``shared``: the tasks averaged, named in
    the titles; when empty, each of our arms averages its own tasks, ``own_tasks`` of them, marked on its point.
    ``same_quantity``: our x axis measures what the published one does (training steps/s at 4K), so the published
    points get a panel of their own, on their own axis; otherwise ours are drawn alone and the caption says why.
    """
    names = ", ".join(task_title(t) for t in shared)
    palette = plt.get_cmap("tab20")
    colours = {p["name"]: palette((2 * i) % 20 + (2 * i) // 20) for i, p in enumerate(published or ours)}
    seeds = _seeds_words(ours)
    bars = (
        f"bars: ± 1 sd over {seeds} seeds of each seed's mean test accuracy over the tasks"
        if seeds
        else "no error bars: under two seeds"
    )
    over = names or "each arm's own tasks"
    with plt.rc_context(STYLE):
        if same_quantity:
            fig, axes = plt.subplots(1, 2, figsize=(10, 4.8), dpi=STYLE["savefig.dpi"])
            panels = [
                (
                    axes[0],
                    published,
                    f"Published: Tay et al. 2021, Tables 1-2 (TPU v3)\nover {names or 'the five tasks'}",
                    "training steps/s at 4K, TPU v3",
                ),
                (axes[1], ours, f"Ours: seed means\nover {over}", ours_axis),
            ]
            caption = [f"Each panel on its own x scale (different hardware). Ours: {bars}."]
        else:
            fig, axes = plt.subplots(1, 1, figsize=(7.2, 5.4), dpi=STYLE["savefig.dpi"], squeeze=False)
            axes = axes[0]
            panels = [
                (axes[0], ours, f"LRA Figure 3 from our records: seed means over {over}", ours_axis),
            ]
            caption = [
                bars[0].upper() + bars[1:] + ".",
                "The published Figure 3 (Tay et al. 2021) plots training steps/s at 4K on TPU v3, which these "
                "records do not measure, so it is not drawn here; the published accuracies stand beside ours in "
                "LRA Table 1.",
            ]
        drawn = [(ax, *_tradeoff_panel(ax, points, colours, title, xlabel)) for ax, points, title, xlabel in panels]
        lines = caption + [
            (f"{'Left' if i == 0 else 'Right'} panel: {note}." if len(drawn) > 1 else note[0].upper() + note[1:] + ".")
            for i, (_, _, _, note) in enumerate(drawn)
            if note
        ]
        text = "\n".join(_wrap(line, 150 if same_quantity else 110) for line in lines)
        height = (text.count("\n") + 1) * 9.5 / 72 / fig.get_figheight() + 0.02  # 9.5 pt a line of 6.5 pt text
        fig.tight_layout(rect=(0, height, 1, 1))
        fig.text(0.01, 0.01, text, fontsize=6.5, color="0.3", va="bottom", ha="left")
        labels = []
        renderer = fig.canvas.get_renderer()
        for ax, anchors, bars, _ in drawn:
            ax.set_autoscale_on(False)  # the layout is final: the labels are placed in these limits
            # a bar's box: from its lower cap to its upper one (a LineCollection has no window extent of its own)
            marks = [
                matplotlib.transforms.Bbox.union([cap.get_window_extent(renderer) for cap in bar.lines[1]])
                for bar in bars
            ]
            labels += place_labels(ax, [a[:3] for a in anchors], [a[3] for a in anchors], marks)
    return fig, labels


def tradeoff(
    published: list[dict], ours: list[dict], ours_axis: str, shared: tuple[str, ...], same_quantity, path: Path
) -> Path:
    """LRA Figure 3 (``tradeoff_figure``) as a PNG at ``path``."""
    with plt.rc_context(STYLE):
        fig, _ = tradeoff_figure(published, ours, ours_axis, shared, same_quantity)
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

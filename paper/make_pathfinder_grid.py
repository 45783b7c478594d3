"""Sample grids of generated Pathfinder (32x32) and Path-X (128x128) images, 8 positive + 8 negative.

    python paper/make_pathfinder_grid.py [--seed 0] [--difficulty hard] [--render release] [--out paper/figures]

Writes ``pathfinder32_samples.png`` and ``pathx128_samples.png``. The images are
the generator's own, drawn by ``--render`` (``release``, the default of the task
configs: ``repro.tasks.pathfinder_release``; ``contour_v3``:
``repro.tasks.pathfinder_render``) exactly as the model sees them (uint8 pixels,
nearest-neighbour upscaling by matplotlib).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from repro.tasks import pathfinder as pf  # noqa: E402
from repro.tasks import pathfinder_render as render  # noqa: E402

FILES = {32: "pathfinder32_samples.png", 128: "pathx128_samples.png"}
TITLES = {32: "Pathfinder 32x32", 128: "Path-X 128x128"}


def pick_samples(resolution: int, difficulty: str, seed: int, render_name: str = pf.DEFAULT_RENDER, per_label: int = 8):
    """The first ``per_label`` positives and negatives of chunk 0 (the release flips a coin per label)."""
    spec = pf.generator_spec({"render": render_name}, resolution, difficulty)
    samples = pf.render_module(spec).chunk_samples(seed, difficulty, 0, 6 * per_label, spec)
    positives = [s for s in samples if s.label == 1][:per_label]
    negatives = [s for s in samples if s.label == 0][:per_label]
    if min(len(positives), len(negatives)) < per_label:
        raise RuntimeError(f"seed {seed}: under {per_label} images of a label in {6 * per_label}; try another --seed")
    return positives, negatives


def draw_grid(resolution: int, difficulty: str, seed: int, out: Path, render_name: str = pf.DEFAULT_RENDER) -> Path:
    """A 4x4 grid: top two rows positives, bottom two negatives, each titled with its label."""
    positives, negatives = pick_samples(resolution, difficulty, seed, render_name)
    fig, axes = plt.subplots(4, 4, figsize=(8, 8.8))
    for ax, sample in zip(axes.ravel(), positives + negatives, strict=True):
        ax.imshow(sample.image, cmap="gray", vmin=0, vmax=255, interpolation="nearest")
        word = "positive (one contour)" if sample.label == 1 else "negative (two contours)"
        ax.set_title(f"label {sample.label}: {word}", fontsize=8, color="tab:green" if sample.label else "tab:red")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(
        f"{TITLES[resolution]}, {difficulty} (contour length {render.CONTOUR_LENGTH[difficulty]}), "
        f"generated (render {render_name}), seed {seed}",
        fontsize=10,
    )
    fig.tight_layout()
    path = out / FILES[resolution]
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--difficulty", default="hard", choices=render.DIFFICULTIES)
    parser.add_argument("--render", default=pf.DEFAULT_RENDER, choices=sorted(pf.RENDERS))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "figures")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for resolution in (32, 128):
        print(draw_grid(resolution, args.difficulty, args.seed, args.out, args.render))


if __name__ == "__main__":
    main()

"""Studies of the generated Pathfinder data, one command each::

    python experiments/pathfinder.py stats ...     # statistics of Pathfinder images, against the LRA release's
    python experiments/pathfinder.py reach ...     # how much of an image one receptive field of a conv stack sees
    python experiments/pathfinder.py control ...   # a 2-D CNN control: is the label in the pixels at all?

``python experiments/pathfinder.py COMMAND --help`` lists a command's options; each command's docstring
(``STATS_DOC``, ``REACH_DOC``, ``CONTROL_DOC`` below) says what it measures. Needs the checkout installed
(``pip install -e .``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import yaml
from omegaconf import OmegaConf
from torch import nn
from tqdm import tqdm

try:
    from repro.cli import dispatch
    from repro.reference import published
    from repro.run.settings import CONF_DIR
    from repro.tasks import pathfinder as pf
    from repro.tasks.pathfinder import CHUNK, render
    from repro.tasks.pathfinder import stats as st
    from repro.tasks.pathfinder.reach import reach_rows
except ModuleNotFoundError as err:
    if err.name != "repro":
        raise
    print(
        "experiments/pathfinder.py: cannot import the repro package: run `pip install -e .` in this checkout",
        file=sys.stderr,
    )
    sys.exit(2)

TASK_CONFIG = CONF_DIR / "task" / "pathfinder.yaml"


# =====================================================================================================================
# stats
# =====================================================================================================================

STATS_DOC = """Statistics of Pathfinder images against the LRA release's (repro/tasks/pathfinder/stats.py).

    # a folder of PNGs (e.g. official images)
    python experiments/pathfinder.py stats --folder DIR [--json out.json]
    # the generator's own images, with the statistics that need its layers
    python experiments/pathfinder.py stats --generate 400 --size 32 --difficulty hard [--render release]
    # side by side with another summary (a JSON file of the same keys; --against-key picks an entry);
    # --set changes a generator setting (task.generate.KEY)
    python experiments/pathfinder.py stats --generate 400 --size 32 --against stats.json --against-key NAME \
        [--set rounding=half --set marker_peak=null]
    # do a folder's images fall within the generated 5th-95th percentiles?
    python experiments/pathfinder.py stats --generate 400 --size 128 --bracket DIR
    # generation speed only (the data pipeline's own path: chunks of 1,000 over worker processes)
    python experiments/pathfinder.py stats --generate 200000 --size 32 --difficulty hard --workers 16 --time-only
"""

STATS_CHUNK = 50  # images per statistics job (the statistics need the layers, which the data pipeline drops)


def parse_settings(pairs: list[str]) -> dict:
    """``["rounding=half", "marker_peak=null"]`` -> ``{"rounding": "half", "marker_peak": None}`` (YAML values)."""
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set {pair!r}: write KEY=VALUE, e.g. --set rounding=half")
        settings[key] = yaml.safe_load(value)
    return settings


def spec_for(args) -> object:
    settings = {"render": args.render, **parse_settings(args.set)}
    if args.distractor_budget is not None:
        settings["distractor_budget"] = args.distractor_budget
    return pf.generator_spec(settings, args.size, args.difficulty)


def _chunk_stats(job) -> tuple[list, list, list]:
    seed, difficulty, chunk, n, spec = job
    module = pf.render_module(spec)
    samples = module.chunk_samples(seed, difficulty, chunk, n, spec)
    return [st.image_stats(s.image) for s in samples], [st.layer_stats(s) for s in samples], [s.image for s in samples]


def generated_stats(args) -> tuple[list, list, list]:
    spec = spec_for(args)
    jobs = [
        (args.seed, args.difficulty, c, min(STATS_CHUNK, args.generate - c * STATS_CHUNK), spec)
        for c in range(-(-args.generate // STATS_CHUNK))
    ]
    per_image, layers, images = [], [], []
    for a, b, c in pf.ordered_map(_chunk_stats, jobs, args.workers):
        per_image += a
        layers += b
        images += c
    return per_image, layers, images


def time_only(args) -> None:
    spec = spec_for(args)
    start, cpu = time.perf_counter(), time.process_time()
    x, _ = pf.generate(args.generate, args.seed, args.difficulty, spec, workers=args.workers)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    rate = len(x) / seconds
    print(
        f"{len(x)} images {args.size}x{args.size} {args.difficulty} (render {args.render}) in {seconds:.1f} s "
        f"with {args.workers} worker(s): {rate:.1f} images/s, {rate / max(args.workers, 1):.1f} images/s per worker"
    )
    if args.workers <= 1:  # generated in this process: its CPU time excludes other programs sharing the core
        print(f"CPU time {cpu:.1f} s: {len(x) / cpu:.1f} images/s per core")


def print_bracket(reference_paths, rows) -> None:
    keys = list(rows[0])
    print("\nwithin the generated 5th-95th percentiles (value [p5, p95]):")
    for path, row in zip(reference_paths, rows, strict=True):
        inside = sum(v[3] for v in row.values())
        print(f"{path.name}: {inside}/{len(keys)} inside")
        for key in keys:
            value, low, high, ok = row[key]
            print(f"    {key:<20} {value:>8.4g}  [{low:.4g}, {high:.4g}]  {'ok' if ok else 'OUTSIDE'}")


def stats_main(argv=None) -> None:
    np.set_printoptions(precision=4)
    parser = argparse.ArgumentParser(prog="pathfinder.py stats", description=STATS_DOC.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--folder", type=Path, help="a folder of grayscale PNGs (searched recursively)")
    source.add_argument("--generate", type=int, help="number of images to generate")
    parser.add_argument("--size", type=int, default=32, choices=(32, 64, 128))
    parser.add_argument("--difficulty", default="hard", choices=pf.DIFFICULTIES)
    parser.add_argument("--render", default=pf.DEFAULT_RENDER, choices=sorted(pf.RENDERS))
    parser.add_argument("--distractor-budget", type=int, default=None, help="distractor contours = budget // length")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a generator setting (task.generate.KEY), e.g. --set rounding=half; repeatable",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--time-only", action="store_true", help="print the generation speed only")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--against", type=Path, help="a JSON summary to print beside this one")
    parser.add_argument("--against-key", help="the entry of --against to use (when it holds several)")
    parser.add_argument("--bracket", type=Path, help="a folder of PNGs to check against the generated percentiles")
    args = parser.parse_args(argv)
    if args.time_only:
        if args.generate is None:
            parser.error("--time-only needs --generate N")
        return time_only(args)
    if args.bracket and args.generate is None:
        parser.error("--bracket needs --generate N")
    if args.folder is not None:
        _, images = st.read_folder(args.folder)
        per_image, layers = [st.image_stats(i) for i in images], None
    else:
        per_image, layers, images = generated_stats(args)
    summary = st.summarise(per_image, images, layers)
    other = None
    if args.against:
        other = json.loads(args.against.read_text())
        if args.against_key:
            if args.against_key not in other:
                raise SystemExit(f"{args.against}: no entry {args.against_key!r}; it has: {', '.join(other)}")
            other = other[args.against_key]
    print(st.format_rows(st.compare(summary, other)))
    if args.bracket:
        paths, reference = st.read_folder(args.bracket)
        print_bracket(paths, st.bracket([st.image_stats(i) for i in reference], per_image))
    if args.json:
        args.json.write_text(json.dumps({**summary, "per_image": per_image}, indent=1, default=float))
        print(f"wrote {args.json}")


# =====================================================================================================================
# reach
# =====================================================================================================================

REACH_DOC = """How much of a generated Pathfinder image can one receptive field of a convolutional stack see?

``python experiments/pathfinder.py reach``  (all three difficulties, the follow-up study, Table 1's kernels, depth 6)
``python experiments/pathfinder.py reach --difficulty hard --kernels 61 --depths 6 12 24``

For each difficulty and (kernel, depth), prints the share of images whose label one window of
the model can decide (repro/tasks/pathfinder/reach.py) and the accuracy of deciding those and
guessing the rest. Reads the generator's geometry (the images a run trains on come from the same
generator and seed: chunks are seeded by (seed, difficulty, resolution, chunk)). Writes a JSON
record to ``--out``.
"""


def reach_main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="pathfinder.py reach", description=REACH_DOC.split("\n\n")[0])
    parser.add_argument("--difficulty", nargs="+", default=list(render.DIFFICULTIES), choices=render.DIFFICULTIES)
    parser.add_argument("--resolution", type=int, default=32, choices=(32, 128))
    table1_kernels = [
        int(k) for k in published("followup_table1_locality")["kernel_size"]
    ]  # the follow-up study, Table 1
    parser.add_argument("--kernels", type=int, nargs="+", default=table1_kernels)
    parser.add_argument("--depths", type=int, nargs="+", default=[6])
    parser.add_argument("--chunks", type=int, default=2, help="generator chunks of 1,000 images each (half positive)")
    parser.add_argument("--first-chunk", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0, help="the task's data_seed")
    parser.add_argument("--out", type=Path, default=Path("pathfinder_reach.json"))
    args = parser.parse_args(argv)
    record = {
        "resolution": args.resolution,
        "seed": args.seed,
        "chunks": [args.first_chunk, args.first_chunk + args.chunks],
        "rows": [],
    }
    print(
        "| difficulty | kernel | depth | reach (tokens each side) | decidable positives | decidable negatives "
        "| markers in one window | decide-or-guess accuracy |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for difficulty in args.difficulty:
        spec = render.lra_spec(args.resolution, difficulty)
        samples = []
        for chunk in tqdm(
            range(args.first_chunk, args.first_chunk + args.chunks), desc=f"{difficulty} geometry", leave=False
        ):
            samples += render.chunk_samples(args.seed, difficulty, chunk, 1000, spec)
        for depth in args.depths:
            for row in reach_rows(samples, args.resolution, args.kernels, depth):
                record["rows"].append(
                    {
                        "difficulty": difficulty,
                        "images": len(samples),
                        **asdict(row),
                        "decidable_share": row.decidable_share,
                        "window_accuracy": row.window_accuracy,
                    }
                )
                print(
                    f"| {difficulty} | {row.kernel_size} | {depth} | {row.reach} "
                    f"| {100 * row.decidable_positives:.1f}% | {100 * row.decidable_negatives:.1f}% "
                    f"| {100 * row.markers_in_one_window:.1f}% | {100 * row.window_accuracy:.1f}% |",
                    flush=True,
                )
    args.out.write_text(json.dumps(record, indent=1))
    print(f"record: {args.out}")


# =====================================================================================================================
# control
# =====================================================================================================================

CONTROL_DOC = """A 2-D CNN control on generated Pathfinder: is the label in the pixels at all?

``python experiments/pathfinder.py control --difficulty easy --images 20000 --minutes 20``
``python experiments/pathfinder.py control --difficulty hard --task-cache .cache/lra-repro --minutes 8``

The second form trains on the task's own cached split (160,000 training images, the 20,000
validation images held out: what ``task=pathfinder`` trains on when it generates its data;
official files under data_dir are not read here), generating it with ``--workers`` processes
on a miss, on the GPU when there is one.

The sequence models of the benchmark can sit at chance on Pathfinder for many epochs (seed
001 appendix A.3 trains 200 epochs). When one does, this control separates "the task needs
longer" from "the generated data carries no learnable label": a small dilated 2-D CNN
(receptive field covering the 32x32 image, no sequence flattening) trains on the same
generator's images on the CPU and prints its validation accuracy per epoch. Pathfinder is
known to be hard for CNNs too (Linsley et al. 2018), so expect a plateau at chance first.
Writes a JSON record (settings, per-epoch curve) to ``--out``.
"""


DILATIONS = (1, 1, 2, 2, 4, 4, 8, 1)  # receptive field 47 pixels: any two markers of a 32x32 image


def control_net(width: int = 32) -> nn.Sequential:
    """Dilated 3x3 convolutions with batch norm, global max pool, linear: a plain 2-D control."""
    layers, channels = [], 1
    for dilation in DILATIONS:
        layers += [nn.Conv2d(channels, width, 3, padding=dilation, dilation=dilation), nn.BatchNorm2d(width), nn.ReLU()]
        channels = width
    return nn.Sequential(*layers, nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(width, 2))


def generated_images(difficulty: str, n_images: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n_images`` (a multiple of the generator's chunk) images [N, 1, 32, 32] in [0, 1] and labels."""
    spec = render.lra_spec(32, difficulty)
    chunks = [
        render.generate_chunk(seed, difficulty, c, CHUNK, spec)
        for c in tqdm(range(n_images // CHUNK), desc="generating")
    ]
    pixels = np.concatenate([p for p, _ in chunks]).reshape(-1, 1, 32, 32)
    labels = np.concatenate([chunk_labels for _, chunk_labels in chunks])
    return torch.from_numpy(pixels).float().div_(255.0), torch.from_numpy(labels)


def task_split_images(difficulty: str, cache_dir: Path, workers: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The task's cached train + val split of ``difficulty`` (default task settings): images
    [N, 1, 32, 32] in [0, 1], labels, and the number of training rows (val follows them)."""
    cfg = OmegaConf.to_container(OmegaConf.load(TASK_CONFIG), resolve=True)
    arrays, _ = pf.load_difficulty(cfg, "generated", difficulty, Path("."), cache_dir, workers)
    pixels = np.concatenate([arrays["train_x"], arrays["val_x"]]).reshape(-1, 1, 32, 32)
    labels = np.concatenate([arrays["train_y"], arrays["val_y"]])
    return torch.from_numpy(pixels).float().div_(255.0), torch.from_numpy(labels), len(arrays["train_y"])


def control_main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="pathfinder.py control", description=CONTROL_DOC.split("\n\n")[0])
    parser.add_argument("--difficulty", default="easy", choices=render.DIFFICULTIES)
    parser.add_argument(
        "--images", type=int, default=20000, help=f"generated images (multiple of {CHUNK}); 10%% held out"
    )
    parser.add_argument("--minutes", type=float, default=20.0, help="stop after the epoch that passes this")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--task-cache",
        type=Path,
        default=None,
        help="train on the task's cached split in this cache_dir instead of --images fresh images",
    )
    parser.add_argument("--workers", type=int, default=1, help="generation processes on a cache miss")
    parser.add_argument("--out", type=Path, default=Path("pathfinder_control.json"))
    args = parser.parse_args(argv)
    if args.task_cache is None and (args.images < 2 * CHUNK or args.images % CHUNK):
        sys.exit(f"--images {args.images}: use a multiple of {CHUNK}, at least {2 * CHUNK}")
    torch.manual_seed(args.seed)
    start = time.monotonic()
    if args.task_cache is not None:
        images, labels, n_train = task_split_images(args.difficulty, args.task_cache, args.workers)
    else:
        images, labels = generated_images(args.difficulty, args.images, args.seed)
        n_train = int(0.9 * len(images))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images, labels = images.to(device), labels.to(device)
    net = control_net().to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    curve = []
    for epoch in range(10_000):
        net.train()
        order = torch.randperm(n_train, device=device)
        loss_sum = 0.0
        for i in tqdm(range(0, n_train, args.batch_size), desc=f"epoch {epoch}", leave=False):
            idx = order[i : i + args.batch_size]
            loss = nn.functional.cross_entropy(net(images[idx]), labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(idx)
        net.eval()
        with torch.no_grad():
            hits = sum(
                (net(images[i : i + 1000]).argmax(1) == labels[i : i + 1000]).sum().item()
                for i in range(n_train, len(images), 1000)
            )
            val_acc = hits / (len(images) - n_train)
        curve.append(
            {
                "epoch": epoch + 1,
                "train_loss": loss_sum / n_train,
                "val_acc": val_acc,
                "elapsed_s": time.monotonic() - start,
            }
        )
        print(
            f"{args.difficulty} epoch {epoch + 1}: train loss {loss_sum / n_train:.4f}, val acc {val_acc:.4f}",
            flush=True,
        )
        if time.monotonic() - start > 60.0 * args.minutes:
            break
    source = f"task cache {args.task_cache}" if args.task_cache is not None else "fresh"
    record = {
        "difficulty": args.difficulty,
        "source": source,
        "images": len(images),
        "held_out": len(images) - n_train,
        "seed": args.seed,
        "device": str(device),
        "batch_size": args.batch_size,
        "lr": args.lr,
        "dilations": DILATIONS,
        "curve": curve,
        "best_val_acc": max(c["val_acc"] for c in curve),
        "torch": torch.__version__,
    }
    args.out.write_text(json.dumps(record, indent=1))
    print(f"best val acc {record['best_val_acc']:.4f}; record {args.out}")


# =====================================================================================================================


COMMANDS = {"stats": stats_main, "reach": reach_main, "control": control_main}


def main(argv: list[str] | None = None) -> int:
    return dispatch("pathfinder.py", __doc__, COMMANDS, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())

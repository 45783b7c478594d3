"""Statistics of Pathfinder images, to compare a render with the LRA release (repro/tasks/pathfinder_stats.py).

    # a folder of PNGs (e.g. official images)
    python experiments/pathfinder_stats.py --folder DIR [--json out.json]
    # the generator's own images, with the statistics that need its layers
    python experiments/pathfinder_stats.py --generate 400 --size 32 --difficulty hard [--render release]
    # side by side with another summary (a JSON file of the same keys; --against-key picks an entry);
    # --set changes a generator setting (task.generate.KEY)
    python experiments/pathfinder_stats.py --generate 400 --size 32 --against stats.json --against-key NAME \
        [--set rounding=half --set marker_peak=null]
    # do a folder's images fall within the generated 5th-95th percentiles?
    python experiments/pathfinder_stats.py --generate 400 --size 128 --bracket DIR
    # generation speed only (the data pipeline's own path: chunks of 1,000 over worker processes)
    python experiments/pathfinder_stats.py --generate 200000 --size 32 --difficulty hard --workers 16 --time-only
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from repro.tasks import pathfinder as pf  # noqa: E402
from repro.tasks import pathfinder_stats as st  # noqa: E402

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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()

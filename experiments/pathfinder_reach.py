"""How much of a generated Pathfinder image can one receptive field of a convolutional stack see?

``python experiments/pathfinder_reach.py``  (all three difficulties, the follow-up study, Table 1's kernels, depth 6)
``python experiments/pathfinder_reach.py --difficulty hard --kernels 61 --depths 6 12 24``

For each difficulty and (kernel, depth), prints the share of images whose label one window of
the model can decide (repro/tasks/pathfinder_reach.py) and the accuracy of deciding those and
guessing the rest. Reads the generator's geometry (the images a run trains on come from the same
generator and seed: chunks are seeded by (seed, difficulty, resolution, chunk)). Writes a JSON
record to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repro.reference import published  # noqa: E402
from repro.tasks import pathfinder_render as render  # noqa: E402
from repro.tasks.pathfinder_reach import reach_rows  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()

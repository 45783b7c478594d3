"""A 2-D CNN control on generated Pathfinder: is the label in the pixels at all?

``python experiments/pathfinder_control.py --difficulty easy --images 20000 --minutes 20``
``python experiments/pathfinder_control.py --difficulty hard --task-cache .cache/lra-repro --minutes 8``

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

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omegaconf import OmegaConf  # noqa: E402

from repro.tasks import pathfinder  # noqa: E402
from repro.tasks import pathfinder_render as render  # noqa: E402
from repro.tasks.pathfinder import CHUNK  # noqa: E402

TASK_CONFIG = Path(__file__).resolve().parent / "conf" / "task" / "pathfinder.yaml"

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
    labels = np.concatenate([y for _, y in chunks])
    return torch.from_numpy(pixels).float().div_(255.0), torch.from_numpy(labels)


def task_split_images(difficulty: str, cache_dir: Path, workers: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The task's cached train + val split of ``difficulty`` (default task settings): images
    [N, 1, 32, 32] in [0, 1], labels, and the number of training rows (val follows them)."""
    cfg = OmegaConf.to_container(OmegaConf.load(TASK_CONFIG), resolve=True)
    arrays, _ = pathfinder.load_difficulty(cfg, "generated", difficulty, Path("."), cache_dir, workers)
    pixels = np.concatenate([arrays["train_x"], arrays["val_x"]]).reshape(-1, 1, 32, 32)
    labels = np.concatenate([arrays["train_y"], arrays["val_y"]])
    return torch.from_numpy(pixels).float().div_(255.0), torch.from_numpy(labels), len(arrays["train_y"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()

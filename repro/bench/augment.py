"""The follow-up's CIFAR-10 augmentation: per-image CPU chain against the batched one, on one batch.

    python -m repro.bench.augment --device cuda --batch 48 [--chain followup|cifar10] [--reps 20]

Both paths get the same RGB uint8 batch [B, 32, 32, 3] on ``--device`` and run as the training loop runs
them (repro/training/batches.py): the per-image follow-up chain copies it to the CPU, augments image by
image and copies it back (``--chain cifar10``, the policy alone, works image by image where the batch is);
the batched one stays on the device (repro/followup/techniques/cifar_augment_batch.py).
Prints one JSON line: each path's median ms a batch (``repro.bench.timing.StepTimer``: CUDA events on a
GPU), images/s, the ratio, and on CUDA whether the batched path ran without a host synchronisation
(``torch.cuda.set_sync_debug_mode("error")``), which would stall the step's kernel launches, and its
kernels a batch and their milliseconds under ``torch.profiler`` (against the wall time: how much of
it is the host launching them).
"""

from __future__ import annotations

import argparse
import json

import torch

from ..followup.techniques import StepDraws
from ..followup.techniques.cifar_augment import CifarFollowupAugment
from ..followup.techniques.cifar_augment_batch import AUTOAUGMENT_ONLY, FULL_CHAIN, BatchedCifarAugment
from ..followup.techniques.cifar_autoaugment import CifarAutoAugment
from .timing import StepTimer, kernel_profile


def _syncs(step) -> str | None:
    """None when ``step`` runs on CUDA without a host synchronisation, else the error that says where."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    except RuntimeError as err:
        return str(err).splitlines()[0][:300]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return None


def compare(device: str = "cuda", batch: int = 48, chain: str = "followup", warmup: int = 3, reps: int = 20) -> dict:
    """Median ms a batch of each path, on one batch of random images."""
    device = torch.device(device)
    if chain == "followup":
        per_image, batched = CifarFollowupAugment(), BatchedCifarAugment(FULL_CHAIN)
    else:  # the policy alone, which runs image by image wherever the batch is
        per_image, batched = CifarAutoAugment(), BatchedCifarAugment(AUTOAUGMENT_ONLY)
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch, 32, 32, 3), dtype=torch.uint8, generator=generator).to(device)
    timer = StepTimer(device)
    cpu_ms = timer.timing(lambda: per_image(images, StepDraws(0, 0)), warmup, reps).median_ms
    batched_ms = timer.timing(lambda: batched(images, StepDraws(0, 0)), warmup, reps).median_ms
    out = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "chain": chain,
        "batch": batch,
        "per_image_ms": round(cpu_ms, 3),
        "batched_ms": round(batched_ms, 3),
        "per_image_images_per_s": round(batch * 1e3 / cpu_ms, 1),
        "batched_images_per_s": round(batch * 1e3 / batched_ms, 1),
        "speedup": round(cpu_ms / batched_ms, 2),
    }
    if device.type == "cuda":
        out["batched_host_sync"] = _syncs(lambda: batched(images, StepDraws(0, 1)))
        kernels = kernel_profile(lambda: batched(images, StepDraws(0, 2)), reps, device)
        out["batched_kernels_per_batch"] = kernels["kernels_per_step"]
        out["batched_kernel_ms"] = round(kernels["kernel_ms_per_step"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=48)
    parser.add_argument("--chain", choices=("followup", "cifar10"), default="followup")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    print(json.dumps(compare(args.device, args.batch, args.chain, args.warmup, args.reps)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

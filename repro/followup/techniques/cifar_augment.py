"""The follow-up's CIFAR-10 training augmentation as its public code composes it, before LRA's grayscale.

github.com/pablomiralles22/long-transformers (branch lra-paper, commit 86c59f5),
src/data_loaders/cifar10.py, on each RGB training image in order:

1. a horizontal flip with probability 1/2;
2. AutoAugment with the CIFAR-10 policy (Cubuk et al.; torchvision's);
3. the photometric augmenter of src/utils/augmentation/cifar10_augmentation.py: nine operations
   in a fixed order, each applied on its own with its probability (``PHOTOMETRIC``), the
   magnitude drawn uniformly from its range (``MAGNITUDES``);
4. RandomAffine: rotation up to 10 degrees, translation up to 10% each way, scale 0.9-1.1, shear
   up to 10 degrees, bilinear, black fill;

then the task's grayscale (its ``prepare`` hook), as the code's ``Grayscale`` last. The code works on
PIL images; here torchvision.transforms.v2 works on uint8 tensors (the same operations; rounding may
differ by a grey level). A Posterize magnitude is truncated to whole bits (0-6, the code's ``int``); a
Solarize threshold above 255 inverts nothing (the code's range reaches 256).

cifar_augment_batch.py runs the same chain on a whole batch on its device (``task.augment_on``).

Randomness: torchvision draws from the global torch RNG, so a batch is augmented inside
``torch.random.fork_rng`` seeded from the step's generator: the result depends only on (seed,
step), and the global RNG is left as it was.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

# src/utils/augmentation/cifar10_augmentation.py: (operation, probability), applied in this order
PHOTOMETRIC = (
    ("Invert", 0.008),
    ("Contrast", 0.032),
    ("Sharpness", 0.112),
    ("AutoContrast", 0.2),
    ("Equalize", 0.188),
    ("Posterize", 0.012),
    ("Color", 0.116),
    ("Brightness", 0.092),
    ("Solarize", 0.076),
)
MAGNITUDES = {  # the same file: uniform ranges of the magnitudes
    "Brightness": (1.0, 1.9),
    "Color": (1.0, 1.9),
    "Contrast": (1.0, 1.9),
    "Sharpness": (1.0, 1.9),
    "Posterize": (0.0, 7.0),
    "Solarize": (0.0, 256.0),
}


def photometric_op(image: Tensor, name: str, magnitude: float | None) -> Tensor:
    """One operation of the photometric augmenter on a uint8 [3, H, W] image."""
    if name == "Invert":
        return TF.invert(image)
    if name == "Contrast":
        return TF.adjust_contrast(image, magnitude)
    if name == "Sharpness":
        return TF.adjust_sharpness(image, magnitude)
    if name == "AutoContrast":
        return TF.autocontrast(image)
    if name == "Equalize":
        return TF.equalize(image)
    if name == "Posterize":
        return TF.posterize(image, int(magnitude))
    if name == "Color":
        return TF.adjust_saturation(image, magnitude)
    if name == "Brightness":
        return TF.adjust_brightness(image, magnitude)
    if name == "Solarize":
        return image if magnitude > 255 else TF.solarize(image, magnitude)
    raise ValueError(f"unknown photometric operation {name!r}; known: {', '.join(n for n, _ in PHOTOMETRIC)}")


class PhotometricAugment(torch.nn.Module):
    """Each of ``PHOTOMETRIC``'s operations with its probability, in order, from the global torch RNG."""

    def forward(self, image: Tensor) -> Tensor:
        for name, probability in PHOTOMETRIC:
            if float(torch.rand(())) < probability:
                low, high = MAGNITUDES.get(name, (None, None))
                magnitude = None if low is None else low + (high - low) * float(torch.rand(()))
                image = photometric_op(image, name, magnitude)
        return image


def followup_pipeline() -> v2.Compose:
    """Steps 1-4 of the module's list on one uint8 [3, H, W] image."""
    return v2.Compose(
        [
            v2.RandomHorizontalFlip(),
            v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10),
            PhotometricAugment(),
            v2.RandomAffine(
                degrees=10,
                translate=(0.1, 0.1),
                scale=(0.9, 1.1),
                shear=10,
                fill=0,
                interpolation=v2.InterpolationMode.BILINEAR,
            ),  # fmt: skip
        ]
    )


class CifarFollowupAugment:
    """The training transform: RGB uint8 [B, 32, 32, 3] -> the same shape, each image augmented on the CPU."""

    def __init__(self):
        self.pipeline = followup_pipeline()

    def __call__(self, inputs: Tensor, draws) -> Tensor:
        if inputs.dim() != 4 or inputs.shape[-1] != 3 or inputs.dtype != torch.uint8:
            raise ValueError(
                f"the follow-up's CIFAR augmentation needs RGB uint8 images [B, H, W, 3], got {inputs.dtype} "
                f"{tuple(inputs.shape)}"
            )
        seed = int(torch.randint(0, 2**62, (1,), generator=draws.cpu_generator()))
        images = inputs.cpu().permute(0, 3, 1, 2)  # [B, 3, H, W], torchvision's layout
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = torch.stack([self.pipeline(image) for image in images])
        return out.permute(0, 2, 3, 1).contiguous().to(inputs.device)

    def __repr__(self) -> str:
        return "CifarFollowupAugment(flip, AutoAugment CIFAR10, photometric x9, RandomAffine; torchvision v2)"

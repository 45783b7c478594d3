"""CIFAR-10 AutoAugment on the RGB image, before LRA's grayscale conversion (the follow-up study, section 3).

torchvision's ``AutoAugment(AutoAugmentPolicy.CIFAR10)``: the CIFAR-10 policy of Cubuk et
al. (25 sub-policies of two operations). The follow-up applies "a strategy derived from
the one discovered in AutoAugment", in its source files (appendix A.3) that we do not
have: the stock torchvision policy here is our stand-in, and the arm configs say so.
Each image of a batch draws its own sub-policy; the grayscale ``prepare`` hook runs after.

torchvision draws from the global torch RNG, so the images are augmented inside
``torch.random.fork_rng`` seeded from the step's generator: the result depends only on
(seed, step) (resume-safe) and the global RNG is left as it was.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.transforms import AutoAugment, AutoAugmentPolicy


class CifarAutoAugment:
    """The training transform: RGB uint8 [B, 32, 32, 3] -> the same shape, each image augmented."""

    def __init__(self):
        self.policy = AutoAugment(AutoAugmentPolicy.CIFAR10)

    def __call__(self, inputs: Tensor, draws) -> Tensor:
        if inputs.dim() != 4 or inputs.shape[-1] != 3 or inputs.dtype != torch.uint8:
            raise ValueError(
                f"CIFAR AutoAugment needs RGB uint8 images [B, H, W, 3], got {inputs.dtype} {tuple(inputs.shape)}"
            )
        seed = int(torch.randint(0, 2**62, (1,), generator=draws.cpu_generator()))
        images = inputs.permute(0, 3, 1, 2)  # [B, 3, H, W], torchvision's layout
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = torch.stack([self.policy(image) for image in images])
        return out.permute(0, 2, 3, 1).contiguous()

    def __repr__(self) -> str:
        return "CifarAutoAugment(torchvision AutoAugmentPolicy.CIFAR10)"

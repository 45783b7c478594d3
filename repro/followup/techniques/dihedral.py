"""Pathfinder's optional D4 augmentation (the follow-up study, appendix C): rotations and reflections of the
square image.

"We recommend using a subset of the dihedral group D4 of reflections and rotations, as
they do not cause any distortion in the images due to low resolution." Element ``e`` of
0..7 is: transpose the image if ``e >= 4``, then rotate by ``e % 4`` quarter turns; 0 is
the identity. ``elements`` picks the subset drawn from (uniformly, per image, per step).
Off in the follow-up's own runs ("we try training on all three sets, without augmentation").
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

D4_ELEMENTS = tuple(range(8))


def d4_transform(images: Tensor, element: int) -> Tensor:
    """Element ``element`` of D4 applied to ``images`` [..., S, S]."""
    if element >= 4:
        images = images.transpose(-1, -2)
    return torch.rot90(images, element % 4, dims=(-2, -1))


class DihedralAugment:
    """The training transform: pixels [B, S*S] -> each image under a random element of ``elements``."""

    def __init__(self, elements=D4_ELEMENTS):
        elements = tuple(int(e) for e in elements)
        if not elements or any(e not in D4_ELEMENTS for e in elements):
            raise ValueError(
                f"techniques d4 elements {list(elements)}: a non-empty subset of 0..7 "
                "(transpose if >= 4, then e % 4 quarter turns)"
            )
        self.elements = elements

    def __call__(self, inputs: Tensor, draws) -> Tensor:
        batch, length = inputs.shape
        side = math.isqrt(length)
        if side * side != length:
            raise ValueError(f"D4 augmentation needs square images flattened to S*S pixels, got length {length}")
        images = inputs.view(batch, side, side)
        choice = torch.randint(
            0, len(self.elements), (batch,), device=inputs.device, generator=draws.device_generator(inputs.device)
        )
        variants = torch.stack([d4_transform(images, e) for e in self.elements])  # [E, B, S, S]
        return variants[choice, torch.arange(batch, device=inputs.device)].reshape(batch, length)

    def __repr__(self) -> str:
        return f"DihedralAugment(elements={list(self.elements)})"

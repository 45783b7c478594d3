"""Drawing primitives of the release render (``release``): dash and marker patches.

Facts taken from the published Pathfinder generator (Linsley et al. 2018; Kim et al. 2020;
drewlinsley/pathfinder ``snakes.py``, ``snakes2.py``); the code is our own.

* A dash is a line of width ``round(thickness * scale)`` drawn by PIL on a square canvas of
  ``2 * reach * scale + 1`` pixels, ``reach = length + ceil(thickness) + margin``, from the
  canvas centre to the whole pixel ``length * scale`` away along the heading (rounded up), then
  downsampled with Lanczos to ``2 * reach + 1`` pixels and placed with its centre on a whole
  pixel of the image. The dash's *mask* (occupancy) is the same line dilated by a disc of
  radius ``margin * scale``, as an 8-bit image, downsampled the same way.
* Markers are discs of radius ``marker_radius * scale`` on the whole image at ``scale`` times
  the size, centred on the (scaled) index of the tip pixel, downsampled with Lanczos.

Downsampling is PIL's ``Image.resize(..., Image.LANCZOS)``, the filter behind the
generator's ``scipy.misc.imresize(..., interp='lanczos')``, here on 32-bit float ('F')
images. The generator's 8-bit path clipped the filter's ringing away; the float filter keeps
the overshoot (marker rims at about 1.13) and the faint halo of small values around every
stroke that the official 64x64 and 128x128 images show (the release-style reconstruction).
The mask is an 8-bit image in the generator, so after the float filter it is stored as one:
clipped to 0-255 and rounded (occupancy stays in [0, 1]). Kept unclipped, the overshoot makes
some candidate weights (1 - mask) negative and at 32x32 about 3.9 of 5 distractors fit instead
of the reconstruction's 4.7 (clipped: 4.7).
Patches depend only on (length, thickness, margin, scale, heading) and headings come from a
finite set (whole degrees for seeds, lattice directions for extensions), so they are memoised.
"""

from __future__ import annotations

import math
from functools import cache, lru_cache

import numpy as np
from PIL import Image, ImageDraw
from scipy import ndimage

# A mask pixel is fully covered at 255 / 255: seed footprints keep such pixels (the generator
# casts the mask to integers); the half step guards against rounding.
FULL = 254.5 / 255.0


def lanczos(array: np.ndarray, size: int) -> np.ndarray:
    """``array`` resized to ``size x size`` with PIL's float Lanczos filter (overshoot kept), float64."""
    image = Image.fromarray(np.ascontiguousarray(array, dtype=np.float32), mode="F")
    return np.asarray(image.resize((size, size), Image.LANCZOS), dtype=np.float64)


def lanczos_bytes(array: np.ndarray, size: int) -> np.ndarray:
    """A 0/1 ``array`` as 0/255, float Lanczos to ``size``, stored as 8 bits (clipped, rounded), / 255."""
    return np.round(np.clip(lanczos(array, size) * 255.0, 0.0, 255.0)) / 255.0


def step(pixel: tuple, heading: float, distance: float) -> tuple:
    """The whole pixel ``distance`` along ``heading`` (radians, y down) from ``pixel``, rounded up."""
    return (math.ceil(pixel[0] + distance * math.sin(heading)), math.ceil(pixel[1] + distance * math.cos(heading)))


def reverse(heading: float) -> float:
    """``heading`` turned by pi, kept in [-pi, pi] as the generator does."""
    return heading + math.pi if heading < 0 else heading - math.pi


def disc(radius: float) -> np.ndarray:
    """Boolean disc ``x^2 + y^2 <= radius^2`` on a ``2 * floor(radius) + 1`` square."""
    r = int(math.floor(radius))
    y, x = np.ogrid[-r : r + 1, -r : r + 1]
    return x * x + y * y <= radius * radius


def patch_reach(length: int, thickness: float, margin: int) -> int:
    """Half the side of a dash patch, in image pixels (the patch is ``2 * reach + 1`` square)."""
    return int(length + math.ceil(thickness) + margin)


@cache
def dash_patches(
    length: int, thickness: float, margin: int, scale: int, heading: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(ink, mask)`` float patches of one dash starting at the patch centre along ``heading``.

    Ink is the downsampled line (float, peak below 1 for a 1-pixel line at twice the size); the
    mask is the line dilated by a disc of radius ``margin * scale``, downsampled and stored in 8 bits.
    Read-only arrays.
    """
    reach = patch_reach(length, thickness, margin)
    big = 2 * reach * scale + 1
    centre = reach * scale
    end = step((centre, centre), heading, length * scale)
    canvas = Image.new("F", (big, big), 0.0)
    ImageDraw.Draw(canvas).line([(centre, centre), (end[1], end[0])], fill=1.0, width=int(round(thickness * scale)))
    line = np.asarray(canvas) > 0
    grown = ndimage.binary_dilation(line, structure=disc(margin * scale))
    ink, mask = lanczos(line, 2 * reach + 1), lanczos_bytes(grown, 2 * reach + 1)
    ink.flags.writeable = False
    mask.flags.writeable = False
    return ink, mask


@cache
def grown_mask(length: int, thickness: float, margin: int, scale: int, heading: float) -> np.ndarray:
    """The dash's mask patch dilated (grey maximum) by the disc of radius ``margin``, ``margin`` wider
    each side: the generator weights candidate heads by 1 - the mask so dilated, and dilation
    commutes with the maximum that combines dashes."""
    _, mask = dash_patches(length, thickness, margin, scale, heading)
    padded = np.pad(mask, margin)
    grown = ndimage.grey_dilation(padded, footprint=disc(margin), mode="constant", cval=0.0)
    grown.flags.writeable = False
    return grown


@cache
def seed_footprint(length: int, thickness: float, margin: int, scale: int, degrees: int) -> np.ndarray:
    """Offsets ``[k, 2]`` (rows, cols) whose pixels must be free for a seed dash tail at offset 0.

    The generator dilates the occupancy mask with the seed dash's own mask, drawn from pixel
    ``(length + margin + 1)`` of a ``2 * (length + margin) + 1`` square (cut to that square) and
    cast to integers (fully covered pixels only); the dilation's anchor is the square's centre,
    so the footprint sits one pixel down and right of the tail. OpenCV's dilation takes the
    maximum of ``src(p + offset - anchor)`` over the kernel's set pixels, hence these offsets.
    """
    side = 2 * (length + margin) + 1
    head = length + margin + 1
    reach = patch_reach(length, thickness, margin)
    _, mask = dash_patches(length, thickness, margin, scale, degrees * math.pi / 180)
    rows = np.arange(head - reach, head + reach + 1)
    cols = rows
    inside_r, inside_c = (rows >= 0) & (rows < side), (cols >= 0) & (cols < side)
    covered = mask[np.ix_(inside_r, inside_c)] >= FULL
    set_r, set_c = np.nonzero(covered)
    anchor = length + margin
    offsets = np.stack([rows[inside_r][set_r] - anchor, cols[inside_c][set_c] - anchor], axis=1)
    offsets.flags.writeable = False
    return offsets


@cache
def candidate_offsets(radius: int) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets [k, 2], headings [k])`` of the pixels a new dash may end on around a pivot.

    As the generator: points one pixel of arc apart on the circle of ``radius`` (length +
    margin) around the whole-pixel pivot, truncated to whole pixels and deduplicated in
    row-major order; the heading is the direction from the pivot to that pixel. The pivot is a
    whole pixel, so the offsets do not depend on it (a large pivot stands in for any pivot).
    """
    angles = np.arange(0.0, 360.0, 360.0 / (2.0 * radius * np.pi)) * np.pi / 180.0
    base = 4096.0
    ys = (base + radius * np.sin(angles)).astype(np.int64) - int(base)
    xs = (base + radius * np.cos(angles)).astype(np.int64) - int(base)
    offsets = np.unique(np.stack([ys, xs], axis=1), axis=0)
    headings = np.arctan2(offsets[:, 0], offsets[:, 1]).astype(np.float64)
    offsets.flags.writeable = False
    headings.flags.writeable = False
    return offsets, headings


@lru_cache(maxsize=65536)
def continuity_weights(radius: int, continuity: float, heading: float) -> np.ndarray:
    """cos^2(min(continuity * turn, pi/2)) of each candidate of ``candidate_offsets(radius)``."""
    _, headings = candidate_offsets(radius)
    turn = np.abs(headings - heading)
    turn = np.minimum(turn, 2.0 * np.pi - turn)
    weights = np.maximum(np.cos(np.minimum(turn * continuity, 0.5 * np.pi)), 0.0) ** 2
    weights.flags.writeable = False
    return weights


@cache
def disc_offsets(radius: int) -> np.ndarray:
    """Offsets ``[m, 2]`` of the disc the generator dilates the mask with before weighting candidates."""
    r = int(radius)
    rows, cols = np.nonzero(disc(r))
    return np.stack([rows - r, cols - r], axis=1)


def marker_image(size: int, scale: int, tip: tuple, radius: float) -> np.ndarray:
    """One marker: a disc of ``radius * scale`` around pixel ``tip * scale`` of the scaled image, downsampled."""
    y, x = np.ogrid[: size * scale, : size * scale]
    big = (y - tip[0] * scale) ** 2 + (x - tip[1] * scale) ** 2 <= (radius * scale) ** 2
    return lanczos(big, size)


ROUNDING = {"floor": 0.0, "half": 0.5}  # offset added before flooring


def byte_scale(image: np.ndarray, rounding: str = "floor") -> tuple[float, float, float]:
    """``(low, span, offset)`` of the min-max scaling of ``image`` to 0-255 (``grey_levels``).

    ``rounding`` "half" adds half a unit before flooring (the published generator's PNG writer,
    scipy's ``bytescale``), "floor" truncates (the official 64x64 and 128x128 images:
    release.ReleaseSpec.rounding).
    """
    if rounding not in ROUNDING:
        raise ValueError(f"rounding={rounding!r}: use one of {sorted(ROUNDING)}")
    low, high = float(image.min()), float(image.max())
    return low, (high - low if high > low else 1.0), ROUNDING[rounding]


def grey_levels(values: np.ndarray, scale: tuple[float, float, float]) -> np.ndarray:
    """floor(clip((values - low) / span * 255, 0, 255) + offset) as uint8 (the image's maximum maps to 255)."""
    low, span, offset = scale
    return (np.clip((values - low) / span * 255.0, 0.0, 255.0) + offset).astype(np.uint8)


def to_bytes(image: np.ndarray, rounding: str = "floor") -> np.ndarray:
    """``image`` min-max scaled to uint8 (``byte_scale``)."""
    return grey_levels(image, byte_scale(image, rounding))

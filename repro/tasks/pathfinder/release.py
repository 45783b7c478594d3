"""Pathfinder images drawn as the LRA release drew them (render ``release``; Tay et al. 2021, section 2.2.5).

Written from the published generator's rules (Linsley et al. 2018, Kim et al. 2020:
drewlinsley/pathfinder ``snakes.py`` / ``snakes2.py``, run by LRA with the settings its
``lra_benchmarks/data/pathfinder.py`` lists); no generator code is reused. Drawing
primitives: ``release_draw``. One image:

1. label: a coin flip; paddle margin: one of ``paddle_margins``.
2. two target contours of ``contour_length`` dashes. The first seed's tail is a random free
   pixel at least ``2 * seed_distance`` from the border; the second's lies ``seed_distance``
   away in a whole-degree direction (rounded to a pixel, not checked for overlap). Seed
   headings are whole degrees. The contours then grow in turn, one dash each: the next pivot is
   ``length + 2 * margin`` along the last heading from the last pivot (whole pixels, rounded
   up); the new dash's head is a pixel one pixel of arc apart on the circle of radius
   ``length + margin`` around it, drawn with weight cos^2(min(continuity * turn, pi/2)) times
   (1 - the occupancy mask dilated by the margin) at that pixel, and the dash runs from the
   head back towards the pivot. A draw is kept when occupancy mask + the dash's mask stays
   below 1.8 everywhere (partial overlap allowed); 3 draws per extension. The mask learns a
   contour's previous dash only when the next is accepted; after the pair, only the second
   contour's last dash is added. Any failure restarts the pair from scratch.
3. ``num_distractors`` contours of ``distractor_length`` dashes, 5 tries each, left out when
   all fail: the seed tail is a random pixel that stays free when the mask (with a 1-pixel
   border) is dilated by the seed dash's own shape (3 seed headings tried; none when under 1%
   of the image is free), then extensions as above.
4. markers: discs of ``marker_radius`` at twice the size, downsampled (peak scaled to
   ``marker_peak``), at the first seed tail of one target and the last head of the same target
   (positive) or of the other (negative), combined with the image by maximum; no rule keeps
   them apart.
5. target dashes at ``paddle_contrast * snake_contrast``, distractors at ``snake_contrast``;
   the image is min-max scaled to 0-255 and truncated (``rounding``; the published
   generator's PNG writer added half a unit before flooring).

Fidelity. The 2019 generator resized with 8-bit Lanczos; this render keeps the float
filter's overshoot, as the official 64x64 and 128x128 images show. Three choices the published
code does not fix are settled by those 16 images: the markers are scaled to peak 1
(``marker_peak``), the final scaling truncates instead of adding half a unit (``rounding``: the
two rim pixels of a marker read 255 and 254, not 255 and 255), and with both, every pixel of
an isolated official dash is reproduced by LRA's documented contrast 0.8 at 64x64 but by 0.73
instead of 0.9 at 128x128 (``LRA_SETTINGS``). Path-X's distractor count is about twice the
documented one (``DISTRACTOR_BUDGET``). At 64x64 the paddle margin is drawn per image from {0, 1}
(LRA: 1), since half the official 64x64 images join consecutive dashes. No official 32x32 image is
public: Pathfinder uses LRA's 32x32 settings with the same drawing rules.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields, replace

import numpy as np
from scipy import ndimage

from . import release_draw as draw
from .render import CONTOUR_LENGTH, DIFFICULTIES, chunk_rng

RENDER_NAME = "release"
RENDER_VERSION = 1  # bump when the images a seed gives change; part of cache keys

# num_distractors = budget // distractor_length. 32 and 64: LRA's documented 20 and 22.
# 128: LRA documents 35 (8 hard distractors), but the official 128x128 images hold about twice
# as many contours (8-connected components at >= 64: official 76-96, mean 87; with 17 hard
# distractors the 5th-95th percentiles of 400 generated images are 76-95, mean 86; with 8, of 60
# images, 54-60), so the default is 70 (17 hard distractors), chosen by those statistics.
DISTRACTOR_BUDGET = {32: 20, 64: 22, 128: 70}

# LRA's settings per resolution (lra_benchmarks/data/pathfinder.py docstrings; generator defaults
# for what they leave out: paddle_length 5, paddle_contrast 1), with two exceptions the official
# images settle (the 128x128 dash contrast; the 64x64 paddle margin, below). Fitted to the 16
# official images (every dash pixel of an isolated dash, markers at peak 1, truncating
# quantisation), the dash contrast is 0.798-0.800 at 64x64 (LRA: 0.8) and 0.730-0.731 at 128x128,
# where LRA documents 0.9; Path-X therefore uses 0.73.
# 64: the paddle margin is 0 or 1 per image (the documented 1 alone almost never joins consecutive
# dashes, which half the official 64x64 images do: their median component of pixels >= 64 holds
# 25-35 pixels in four of eight, 8-14 in the rest; with 0 or 1, 400 generated images bracket 87 of
# the 88 per-image checks against those images, with 1 alone 81; paper/findings.md).
LRA_SETTINGS = {
    32: dict(
        padding=1,
        paddle_length=2,
        paddle_thickness=0.5,
        paddle_margins=(1,),
        marker_radius=1.5,
        continuity=1.0,
        snake_contrast=2.0,
        paddle_contrast=0.75,
        seed_distance=7,
        antialias_scale=2,
    ),
    64: dict(
        padding=1,
        paddle_length=5,
        paddle_thickness=1.0,
        paddle_margins=(0, 1),
        marker_radius=2.5,
        continuity=1.8,
        snake_contrast=0.8,
        paddle_contrast=1.0,
        seed_distance=12,
        antialias_scale=2,
    ),
    128: dict(
        padding=1,
        paddle_length=5,
        paddle_thickness=1.5,
        paddle_margins=(2, 3),
        marker_radius=3.0,
        continuity=1.8,
        snake_contrast=0.73,
        paddle_contrast=1.0,
        seed_distance=20,
        antialias_scale=2,
    ),
}
WHOLE = ("padding", "paddle_length", "seed_distance", "antialias_scale")


@dataclass(frozen=True)
class ReleaseSpec:
    """Settings of the release render for one resolution and difficulty (module docstring)."""

    size: int = 32
    padding: int = 1
    paddle_length: int = 2
    paddle_thickness: float = 0.5
    paddle_margins: tuple = (1,)
    marker_radius: float = 1.5
    contour_length: int = 14
    continuity: float = 1.0
    distractor_length: int = 4
    num_distractors: int = 5
    snake_contrast: float = 2.0
    paddle_contrast: float = 0.75
    seed_distance: int = 7
    antialias_scale: int = 2
    # The generator's retry budgets (max_paddle_retrial 2 -> 3 draws, max_distractor_contour_retrial 4 -> 5 tries).
    extend_draws: int = 3
    seed_tries: int = 3
    distractor_tries: int = 5
    # Settings the official 64x64 and 128x128 images settle (module docstring, "Fidelity").
    marker_peak: float | None = 1.0  # the marker layer scaled to this peak; None: the filter's own (~1.12-1.16)
    rounding: str = "floor"  # after min-max scaling: "floor" truncates, "half" adds 0.5 first
    stop_availability: float = 0.01  # distractor seeding stops when under 1% of the image is free
    overlap_limit: float = 1.8  # a dash is kept while mask + dash mask < this everywhere
    max_restarts: int = 1_000_000  # target pairs tried before giving up (the generator loops forever)


def _whole(name: str, value) -> int:
    if float(value) != int(value):
        raise ValueError(f"task.generate.{name}={value}: the release render needs a whole number of pixels")
    return int(value)


def _checked(settings: dict) -> dict:
    """Settings in the types the render needs; a one-line error naming the setting otherwise."""
    for name in WHOLE:
        settings[name] = _whole(name, settings[name])
    if settings["padding"] < 1:
        raise ValueError(f"task.generate.padding={settings['padding']}: the release render needs a border of 1 or more")
    settings["paddle_margins"] = tuple(_whole("paddle_margins", m) for m in settings["paddle_margins"])
    for name in ("paddle_thickness", "marker_radius", "continuity", "snake_contrast", "paddle_contrast"):
        settings[name] = float(settings[name])
    width = settings["paddle_thickness"] * settings["antialias_scale"]
    if width != round(width):
        raise ValueError("task.generate.paddle_thickness * antialias_scale must be whole (the dash width when drawn)")
    if settings.get("rounding", "floor") not in draw.ROUNDING:
        raise ValueError(f"task.generate.rounding={settings['rounding']!r}: use floor or half")
    if settings.get("marker_peak") is not None:
        settings["marker_peak"] = float(settings["marker_peak"])
    return settings


def release_spec(resolution: int, difficulty: str, distractor_budget: int | None = None, **overrides) -> ReleaseSpec:
    """LRA's settings for ``resolution`` (32, 64 or 128) at ``difficulty``, with ``overrides`` applied.

    distractor_length = contour_length // 3 (the release's Python 2 integer division) and
    num_distractors = budget // distractor_length (``DISTRACTOR_BUDGET``).
    """
    if difficulty not in CONTOUR_LENGTH:
        raise ValueError(f"difficulty {difficulty!r}: use one of {DIFFICULTIES}")
    if resolution not in LRA_SETTINGS:
        raise ValueError(f"resolution {resolution}: the release render knows LRA's 32, 64 and 128")
    known = {f.name for f in fields(ReleaseSpec)} - {"size", "contour_length", "distractor_length", "num_distractors"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"unknown setting(s) {unknown} for task.generate.render=release; known: "
            f"{sorted(known | {'distractor_budget'})}"
        )
    settings = _checked({**LRA_SETTINGS[resolution], **overrides})
    length = CONTOUR_LENGTH[difficulty]
    budget = int(distractor_budget if distractor_budget is not None else DISTRACTOR_BUDGET[resolution])
    return replace(
        ReleaseSpec(size=resolution, contour_length=length, distractor_length=max(1, length // 3)),
        num_distractors=budget // max(1, length // 3),
        **settings,
    )


@dataclass
class Contour:
    """A growing contour: owner id (0, 1 targets; 2.. distractors), its last pivot and heading,
    its seed tail and last head (marker tips), and its last dash's mask (added one step late)."""

    owner: int
    pivot: tuple
    heading: float
    tail: tuple
    head: tuple
    last_mask: tuple  # (start pixel, drawing heading) of its last dash


@dataclass
class ReleaseSample:
    """One image, its float layers before scaling, and the dashes it was drawn from."""

    image: np.ndarray  # uint8 [size, size]
    label: int
    layers: dict  # float [size, size] each: "targets", "distractors", "markers"
    dashes: np.ndarray  # float [n, 4]: row, col (the dash's start pixel), heading (radians), owner
    tips: np.ndarray  # int [2, 2]: marker pixels (origin, terminal)
    margin: int
    restarts: int = 0
    distractors: int = 0
    extra: dict = field(default_factory=dict)


class Canvas:
    """The occupancy mask and ink layers of one image, padded so dash patches need no clipping.

    The mask's padding is -inf (the generator's mask has no outside: its dilations and overlap
    test ignore it); ink layers are padded with 0 and cut at the end. ``reset`` clears it for
    the next target pair.
    """

    def __init__(self, spec: ReleaseSpec, margin: int):
        self.spec, self.margin, self.size = spec, margin, spec.size
        self.reach = draw.patch_reach(spec.paddle_length, spec.paddle_thickness, margin)
        self.pad = self.reach + spec.paddle_length + margin + 2
        self.side = side = self.size + 2 * self.pad
        self.blank = np.full((side, side), -np.inf)
        inner = self.inner(self.blank)
        inner[:] = 0.0
        if spec.padding > 0:
            p = spec.padding
            inner[:p, :], inner[-p:, :], inner[:, :p], inner[:, -p:] = 1.0, 1.0, 1.0, 1.0
        self.mask = self.blank.copy()
        # The mask dilated by the margin disc (the generator's candidate weights), kept up to date by learn().
        self.grown_blank = np.full((side, side), -np.inf)
        self.inner(self.grown_blank)[:] = ndimage.grey_dilation(
            self.inner(self.blank), footprint=draw.disc(margin), mode="constant", cval=0.0
        )
        self.grown = self.grown_blank.copy()
        self.ink = np.zeros((2, side, side))  # 0: target contours, 1: distractors
        self.dashes: list[tuple] = []
        self.radius = spec.paddle_length + margin
        offsets, _ = draw.candidate_offsets(self.radius)
        self.offsets_flat = offsets[:, 0] * side + offsets[:, 1]
        self.span = (-int(offsets.min()), self.size - int(offsets.max()))  # pivots whose candidates all lie inside
        self.scaled: dict = {}

    def reset(self) -> None:
        np.copyto(self.mask, self.blank)
        np.copyto(self.grown, self.grown_blank)
        self.ink[:] = 0.0
        self.dashes.clear()

    def inner(self, array: np.ndarray) -> np.ndarray:
        p = self.pad
        return array[..., p : p + self.size, p : p + self.size]

    def window(self, pixel: tuple) -> tuple[slice, slice]:
        r, c = pixel[0] + self.pad - self.reach, pixel[1] + self.pad - self.reach
        side = 2 * self.reach + 1
        return slice(r, r + side), slice(c, c + side)

    def inside(self, pixel: tuple) -> bool:
        return 0 <= pixel[0] < self.size and 0 <= pixel[1] < self.size

    def patches(self, heading: float) -> tuple[np.ndarray, np.ndarray]:
        s = self.spec
        return draw.dash_patches(s.paddle_length, s.paddle_thickness, self.margin, s.antialias_scale, heading)

    def fits(self, pixel: tuple, mask_patch: np.ndarray) -> bool:
        """The generator's overlap rule: mask + dash mask < overlap_limit at every image pixel."""
        return float((self.mask[self.window(pixel)] + mask_patch).max()) < self.spec.overlap_limit

    def paint(self, pixel: tuple, heading: float, owner: int, contrast: float) -> np.ndarray:
        """Draw one dash (ink layer by maximum); returns its mask patch."""
        key = (heading, contrast)
        if key not in self.scaled:
            ink, mask_patch = self.patches(heading)
            self.scaled[key] = (contrast * ink, mask_patch)
        ink, mask_patch = self.scaled[key]
        layer = self.ink[0 if owner < 2 else 1]
        rows, cols = self.window(pixel)
        np.maximum(layer[rows, cols], ink, out=layer[rows, cols])
        self.dashes.append((pixel[0], pixel[1], heading, owner))
        return mask_patch

    def learn(self, last_mask: tuple) -> None:
        """mask = max(mask, dash mask) on the image pixels (the padding stays -inf); same for ``grown``.

        Near the border ``grown`` may take a patch's dilated values from beyond the image, where
        the generator's dilation sees nothing; those pixels lie within ``padding + margin`` of the
        edge, already 1 from the dilated border (``padding`` >= 1), the most a mask value can be.
        """
        pixel, heading = last_mask
        _, patch = self.patches(heading)
        s = self.spec
        grown = draw.grown_mask(s.paddle_length, s.paddle_thickness, self.margin, s.antialias_scale, heading)
        self._max_into(self.mask, pixel, patch, self.reach)
        self._max_into(self.grown, pixel, grown, self.reach + self.margin)

    def _max_into(self, array: np.ndarray, pixel: tuple, patch: np.ndarray, reach: int) -> None:
        r0, c0 = pixel[0] - reach, pixel[1] - reach
        top, left = max(r0, 0), max(c0, 0)
        bottom, right = min(r0 + patch.shape[0], self.size), min(c0 + patch.shape[1], self.size)
        if bottom <= top or right <= left:
            return
        p = self.pad
        view = array[p + top : p + bottom, p + left : p + right]
        np.maximum(view, patch[top - r0 : bottom - r0, left - c0 : right - c0], out=view)

    def grown_at(self, heads: np.ndarray) -> np.ndarray:
        """The mask dilated by the margin disc at in-image pixels ``heads`` [k, 2], computed plainly
        from the mask (the generator's dilation; ``grown`` keeps the same values up to date)."""
        disc = draw.disc_offsets(self.margin)
        rows = self.pad + heads[:, None, 0] + disc[None, :, 0]
        cols = self.pad + heads[:, None, 1] + disc[None, :, 1]
        return self.mask[rows, cols].max(axis=1)

    def candidates(self, pivot: tuple, heading: float) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(heads [k, 2], headings [k], cumulative weights [k])`` of the next dash, or None (dead end).

        The dilated mask comes from ``grown`` (equal to ``grown_at``, the plain dilation:
        tests/test_pathfinder_release.py); away from the border every candidate lies inside and
        it is read with one flat ``take``.
        """
        offsets, headings = draw.candidate_offsets(self.radius)
        weights = draw.continuity_weights(self.radius, self.spec.continuity, heading)
        lo, hi = self.span
        if lo <= pivot[0] < hi and lo <= pivot[1] < hi:
            base = (self.pad + pivot[0]) * self.side + self.pad + pivot[1]
            grown = self.grown.ravel().take(self.offsets_flat + base)
            heads = offsets + np.asarray(pivot)
        else:
            heads = offsets + np.asarray(pivot)
            inside = ((heads >= 0) & (heads < self.size)).all(axis=1)
            if not inside.any():
                return None
            heads, headings, weights = heads[inside], headings[inside], weights[inside]
            grown = self.grown[self.pad + heads[:, 0], self.pad + heads[:, 1]]
        weights = (1.0 - grown) * weights
        total = weights.sum()
        if total < 1e-4:
            return None
        return heads, headings, np.cumsum(weights / total)

    def blocked(self, border: int) -> np.ndarray:
        """Padded boolean: pixels where the mask, with ``border`` pixels all round set to 1, exceeds 0.3.

        A seed tail is free where ``ceil(dilated mask - 0.3)`` is 0 (the generator's test).
        """
        blocked = self.mask > 0.3
        inner = self.inner(blocked)
        inner[:border, :], inner[-border:, :], inner[:, :border], inner[:, -border:] = True, True, True, True
        return blocked

    def free_pixels(self, blocked: np.ndarray, footprint: np.ndarray) -> np.ndarray:
        """Flat image indices of every pixel p with no blocked pixel at p + offset (plain enumeration)."""
        n, p = self.size, self.pad
        hit = np.zeros((n, n), dtype=bool)
        for dy, dx in footprint:
            hit |= blocked[p + dy : p + dy + n, p + dx : p + dx + n]
        return np.flatnonzero(~hit)

    def is_free(self, blocked_flat: np.ndarray, footprint_flat: np.ndarray, pixel: tuple) -> bool:
        """Whether ``pixel`` is among ``free_pixels`` (one footprint lookup)."""
        base = (self.pad + pixel[0]) * self.side + self.pad + pixel[1]
        return not blocked_flat.take(footprint_flat + base).any()

    def layers(self, tips: np.ndarray) -> dict:
        s = self.spec
        markers = np.maximum(*(draw.marker_image(s.size, s.antialias_scale, tuple(t), s.marker_radius) for t in tips))
        if s.marker_peak is not None:
            markers *= s.marker_peak / markers.max()
        targets, distractors = self.inner(self.ink)
        return {"targets": targets.copy(), "distractors": distractors.copy(), "markers": markers}


def extend(rng: random.Random, canvas: Canvas, contour: Contour, contrast: float) -> bool:
    """One more dash on ``contour`` (module docstring, step 2); False when no draw fits."""
    spec, margin = canvas.spec, canvas.margin
    pivot = draw.step(contour.pivot, contour.heading, spec.paddle_length + 2 * margin)
    found = canvas.candidates(pivot, contour.heading)
    if found is None:
        return False
    heads, headings, cumulative = found
    for _ in range(spec.extend_draws):
        i = int(np.argmax(cumulative > rng.random()))
        head = (int(heads[i, 0]), int(heads[i, 1]))
        flipped = draw.reverse(float(headings[i]))
        _, mask_patch = canvas.patches(flipped)
        if canvas.fits(head, mask_patch):
            canvas.paint(head, flipped, contour.owner, contrast)
            canvas.learn(contour.last_mask)
            contour.pivot, contour.heading, contour.head = pivot, float(headings[i]), head
            contour.last_mask = (head, flipped)
            return True
    return False


def _seed_geometry(spec: ReleaseSpec, margin: int, tail: tuple, degrees: int) -> tuple[float, tuple, tuple]:
    """(heading, head, pivot) of a seed dash from ``tail`` at whole ``degrees``."""
    heading = degrees * math.pi / 180
    head = draw.step(tail, heading, spec.paddle_length)
    return heading, head, draw.step(head, draw.reverse(heading), spec.paddle_length + margin)


REJECTION_TRIES = 64  # random pixels tried before enumerating the free ones


def _pick_tail(rng: random.Random, canvas: Canvas, blocked: np.ndarray, degrees: int, box: tuple) -> tuple | None:
    """A tail pixel drawn uniformly from the pixels free under the seed dash's footprint, or None.

    Uniform pixels of ``box`` (rows and columns ``[lo, hi)``, holding every free pixel) are
    tried first and the first free one is kept; after ``REJECTION_TRIES`` misses the free
    pixels are enumerated and one is drawn. Either way the tail is uniform over the free pixels,
    as the generator's draw from its list of available coordinates.
    """
    s = canvas.spec
    footprint = draw.seed_footprint(s.paddle_length, s.paddle_thickness, canvas.margin, s.antialias_scale, degrees)
    footprint_flat = footprint[:, 0] * canvas.side + footprint[:, 1]
    blocked_flat = blocked.ravel()
    lo, hi = box
    for _ in range(REJECTION_TRIES):
        pixel = (rng.randrange(lo, hi), rng.randrange(lo, hi))
        if canvas.is_free(blocked_flat, footprint_flat, pixel):
            return pixel
    free = canvas.free_pixels(blocked, footprint)
    if len(free) == 0:
        return None
    return divmod(int(free[rng.randrange(len(free))]), canvas.size)


def _first_target_seed(rng: random.Random, canvas: Canvas) -> tuple | None:
    """(tail, heading, pivot) of the first target seed, at least 2 * seed_distance from the border.

    Free tails lie within the footprint's reach (``length + margin + 1``) of the central square.
    """
    spec, far = canvas.spec, 2 * canvas.spec.seed_distance
    blocked = canvas.blocked(far)
    reach = spec.paddle_length + canvas.margin + 1
    box = (max(far - reach, 0), min(canvas.size - far + reach, canvas.size))
    for _ in range(spec.seed_tries):
        degrees = rng.randrange(-180, 180)
        tail = _pick_tail(rng, canvas, blocked, degrees, box)
        if tail is None:
            return None
        heading, head, pivot = _seed_geometry(spec, canvas.margin, tail, degrees)
        if canvas.inside(head) and canvas.inside(pivot):
            return tail, heading, pivot
    return None


def _second_target_seed(rng: random.Random, canvas: Canvas, first: tuple) -> tuple | None:
    """(tail, heading, pivot) of the second seed, seed_distance from the first tail (no overlap test)."""
    spec = canvas.spec
    for _ in range(spec.seed_tries):
        degrees = rng.randrange(-180, 180)
        direction = rng.randrange(0, 360) * math.pi / 180
        tail = (
            int(round(first[0] + spec.seed_distance * math.sin(direction))),
            int(round(first[1] + spec.seed_distance * math.cos(direction))),
        )
        heading, head, pivot = _seed_geometry(spec, canvas.margin, tail, degrees)
        if canvas.inside(head) and canvas.inside(pivot):
            return tail, heading, pivot
    return None


def seed_targets(rng: random.Random, canvas: Canvas) -> list[Contour] | None:
    """The two target seeds drawn (neither mask learned yet), or None."""
    spec = canvas.spec
    contrast = spec.snake_contrast * spec.paddle_contrast
    first = _first_target_seed(rng, canvas)
    if first is None:
        return None
    second = _second_target_seed(rng, canvas, first[0])
    if second is None:
        return None
    contours = []
    for owner, (tail, heading, pivot) in enumerate((first, second)):
        canvas.paint(tail, heading, owner, contrast)
        contours.append(Contour(owner, pivot, heading, tail, tail, (tail, heading)))
    return contours


def grow_targets(rng: random.Random, spec: ReleaseSpec, margin: int) -> tuple[Canvas, list[Contour], int]:
    """Two full target contours grown in turn; any failure starts a fresh image (step 2)."""
    contrast = spec.snake_contrast * spec.paddle_contrast
    canvas = Canvas(spec, margin)
    for restarts in range(spec.max_restarts):
        canvas.reset()
        pair = seed_targets(rng, canvas)
        ok = pair is not None
        for _ in range(spec.contour_length - 1):
            if not ok:
                break
            ok = extend(rng, canvas, pair[0], contrast) and extend(rng, canvas, pair[1], contrast)
        if ok:
            canvas.learn(pair[1].last_mask)  # only the second contour's last dash (module docstring)
            return canvas, pair, restarts
    raise RuntimeError(f"no two target contours of {spec.contour_length} dashes in {spec.max_restarts} tries: {spec}")


def seed_distractor(rng: random.Random, canvas: Canvas, owner: int) -> Contour | None:
    """A distractor's first dash at a free pixel of the mask with a 1-pixel border, or None."""
    spec = canvas.spec
    if np.count_nonzero(canvas.inner(canvas.mask) <= 0.3) < spec.stop_availability * canvas.size**2:
        return None
    blocked = canvas.blocked(1)
    for _ in range(spec.seed_tries):
        degrees = rng.randrange(-180, 180)
        tail = _pick_tail(rng, canvas, blocked, degrees, (0, canvas.size))
        if tail is None:
            return None
        heading, head, pivot = _seed_geometry(spec, canvas.margin, tail, degrees)
        if canvas.inside(head) and canvas.inside(pivot):
            canvas.paint(tail, heading, owner, spec.snake_contrast)
            return Contour(owner, pivot, heading, tail, tail, (tail, heading))
    return None


def add_distractors(rng: random.Random, canvas: Canvas) -> int:
    """Up to ``num_distractors`` contours, ``distractor_tries`` each; returns how many were placed."""
    spec = canvas.spec
    placed = 0
    for _ in range(spec.num_distractors):
        for _ in range(spec.distractor_tries):
            saved = (canvas.mask.copy(), canvas.grown.copy(), canvas.ink[1].copy(), len(canvas.dashes))
            contour = seed_distractor(rng, canvas, 2 + placed)
            ok = contour is not None and all(
                extend(rng, canvas, contour, spec.snake_contrast) for _ in range(spec.distractor_length - 1)
            )
            if ok:
                canvas.learn(contour.last_mask)
                placed += 1
                break
            np.copyto(canvas.mask, saved[0])
            np.copyto(canvas.grown, saved[1])
            canvas.ink[1] = saved[2]
            del canvas.dashes[saved[3] :]
    return placed


def make_sample(rng: random.Random, spec: ReleaseSpec) -> ReleaseSample:
    """One image (module docstring, steps 1-5) with its layers and geometry."""
    label = int(rng.random() < 0.5)
    margin = spec.paddle_margins[rng.randrange(len(spec.paddle_margins))]
    canvas, pair, restarts = grow_targets(rng, spec, margin)
    placed = add_distractors(rng, canvas)
    origin = rng.randrange(2)
    terminal = origin if label == 1 else 1 - origin
    tips = np.array([pair[origin].tail, pair[terminal].head], dtype=np.int64)
    layers = canvas.layers(tips)
    final = np.maximum(np.maximum(layers["targets"], layers["distractors"]), layers["markers"])
    return ReleaseSample(
        image=draw.to_bytes(final, spec.rounding),
        label=label,
        layers=layers,
        dashes=np.array(canvas.dashes, dtype=np.float64).reshape(-1, 4),
        tips=tips,
        margin=int(margin),
        restarts=restarts,
        distractors=placed,
        extra={"marked_contours": (origin, terminal), "byte_scale": draw.byte_scale(final, spec.rounding)},
    )


def generate_chunk(seed: int, difficulty: str, chunk: int, n: int, spec: ReleaseSpec) -> tuple[np.ndarray, np.ndarray]:
    """Images ``[n, size*size]`` uint8 (row-major pixels) and labels ``[n]`` of one chunk."""
    rng = chunk_rng(seed, difficulty, spec.size, chunk)
    pixels = np.empty((n, spec.size * spec.size), dtype=np.uint8)
    labels = np.empty(n, dtype=np.int64)
    for i in range(n):
        sample = make_sample(rng, spec)
        pixels[i], labels[i] = sample.image.reshape(-1), sample.label
    return pixels, labels


def chunk_samples(seed: int, difficulty: str, chunk: int, n: int, spec: ReleaseSpec) -> list[ReleaseSample]:
    """The same images as ``generate_chunk`` with their layers and geometry (tests, statistics, figures)."""
    rng = chunk_rng(seed, difficulty, spec.size, chunk)
    return [make_sample(rng, spec) for _ in range(n)]


def dash_segments(sample: ReleaseSample, spec: ReleaseSpec) -> np.ndarray:
    """Each dash as a segment ``[n, 4]`` (y0, x0, y1, x1) in pixel units, pixel centres at +0.5.

    The dash starts at its start pixel's centre; its end is the drawing's end pixel (whole
    pixels at ``antialias_scale``) mapped back through the patch's downsampling.
    """
    s = spec
    reach = draw.patch_reach(s.paddle_length, s.paddle_thickness, sample.margin)
    big_centre = reach * s.antialias_scale
    ratio = (2 * reach + 1) / (2 * big_centre + 1)
    out = np.empty((len(sample.dashes), 4))
    for k, (row, col, heading, _) in enumerate(sample.dashes):
        end = draw.step((big_centre, big_centre), heading, s.paddle_length * s.antialias_scale)
        y0, x0 = row + 0.5, col + 0.5
        out[k] = (y0, x0, y0 + (end[0] - big_centre) * ratio, x0 + (end[1] - big_centre) * ratio)
    return out

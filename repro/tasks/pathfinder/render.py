"""The retired contour renderer (``generate.render=contour_v3``) of Pathfinder images (Linsley et al. 2018; Tay
et al. 2021, section 2.2.5): contours of dashes and two markers.

Retired: ``release`` (``release.py``) is the default render. This one is kept because the frozen bundles
``results/v0.1-pathfinder-contour`` and ``results/v0.2-pathfinder-reference`` hold records trained on its
images, and because the other modules share its sample type, difficulties and chunk seeding.

Written from the published description and the LRA generator settings in the
LRA release's ``lra_benchmarks/data/pathfinder.py`` docstrings; no generator code is
reused. One image holds

* two *target* contours of ``contour_length`` dashes ("paddles"), grown from two
  seed dashes whose first ends lie ``seed_distance`` apart;
* distractor contours of ``distractor_length`` dashes, as many of
  ``num_distractors`` as fit;
* two circular markers. Positive: at the first and the last end of one target
  contour. Negative: at the first end of one target contour and the last end of
  the other (Linsley et al.: "markers on two different paths").

A contour grows dash by dash: the next dash turns by an angle ``delta`` drawn
with density ``cos^2(continuity * delta)`` on ``|delta| < pi / (2 continuity)``
(the generator's continuity weighting: 1.0 allows turns up to 90 degrees, 1.8 up
to 50), starting ``2 * margin`` past the end of the last dash, with the turn at
the middle of the gap. Dashes of different contours (and non-consecutive dashes
of one contour) keep centre lines ``thickness + 2 * margin`` apart: their
margin-dilated footprints may not overlap, so contours never touch and the gap
between two contours is always wider than the gap inside one. A contour that
cannot continue is abandoned: a target pair is grown again from new seeds, a
distractor is retried a few times and then left out.

Images are drawn at ``antialias_scale`` times the size (distance-to-segment
coverage on a local patch per dash, vectorised in numpy), box-downsampled,
min-max normalised to 0-255 (as the release's PNGs are) and stored as uint8.
As in the release, the target contours' dashes have contrast ``snake_contrast *
paddle_contrast`` and the distractors' ``snake_contrast`` (the release passes the
paddle contrast list to its target-pair grower only): at 32x32, 1.5 against 2, so
the two target contours are a quarter dimmer than the distractors (``dash_contrast``;
render versions before 3 drew every dash at the product).

By default positions and headings are real numbers (``lattice=False``). With
``lattice=True`` they lie on the pixel lattice as in the release: a contour
turns at whole-pixel pivots (rounded up), each dash ends on a pixel centre
picked among the whole pixels about one pixel of arc apart on the circle of
radius ``paddle_length + margin`` around the pivot (rounded down), its heading
the direction to that pixel; seeds start on pixel centres at whole-degree
headings. Every dash then looks like one of a few dozen patterns, as in the
release's images, where real-valued positions make every dash unique (a
sequence model with per-intensity embeddings can memorise those:
paper/findings.md, "Pathfinder on the project's earlier contour render"). Lattice gaps inside a contour vary
around 2 * margin; ours keep them under ``DashField.max_gap``, below the
clearance between contours (the release does not), at the cost of more restarts.

Where this differs from the release's generator (each choice keeps the label
well defined or the output reproducible):

* by default coordinates are real numbers, not whole pixels (see above); the
  clearance test uses the exact dash geometry; downsampling is a box filter (no
  Lanczos ringing);
* the clearance between contours is exactly ``thickness + 2 * margin``
  (the release compares antialiased masks, leaving about a pixel of slack), so a
  gap between contours is never narrower than a gap inside one;
* marker discs never touch (checked for all four end pairings, whatever the
  label, so contour shapes carry no label cue);
* labels are exactly balanced per chunk (the release flips a coin per image);
* no single-paddle filler (``use_single_paddles``) is drawn: the LRA table does
  not list it and the distractor contours already fill the window.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields, replace
from functools import cache, lru_cache

import numpy as np

DIFFICULTIES = ("easy", "intermediate", "hard")
# The release's folders: curv_baseline (6), curv_contour_length_9, curv_contour_length_14.
CONTOUR_LENGTH = {"easy": 6, "intermediate": 9, "hard": 14}
DIFFICULTY_CODE = {name: i for i, name in enumerate(DIFFICULTIES)}
RENDER_VERSION = 3  # bump when the images a seed gives change; part of cache keys
# Version 3: distractor contours at snake_contrast, target contours at snake_contrast *
# paddle_contrast, as the release (module docstring); version 2 drew every dash at the product
# (``uniform_contrast=True`` draws version 2's images).


@dataclass(frozen=True)
class PathSpec:
    """Generator settings for one resolution and difficulty (the LRA release's pathfinder.py)."""

    size: int = 32  # window_size (square)
    padding: float = 1.0  # empty border, pixels
    paddle_length: float = 2.0  # dash length, pixels
    paddle_thickness: float = 0.5
    paddle_margins: tuple = (1.0,)  # paddle_margin_list: one drawn per image
    marker_radius: float = 1.5
    contour_length: int = 14  # dashes per target contour
    continuity: float = 1.0
    distractor_length: int = 4  # dashes per distractor contour
    num_distractors: int = 5
    snake_contrast: float = 2.0  # snake_contrast_list [2]
    paddle_contrast: float = 0.75  # paddle_contrast_list [0.75]
    seed_distance: float = 7.0
    antialias_scale: int = 2
    lattice: bool = False  # True: whole-pixel pivots and dash ends, as the release (module docstring)
    uniform_contrast: bool = False  # True: every dash at snake * paddle contrast (render version 2)
    # Retry budgets (the generator's max_paddle_retrial / max_distractor_contour_retrial are
    # 2 and 4 on pre-filtered candidates; ours sample blindly, so allow more tries).
    turn_trials: int = 32
    seed_trials: int = 20
    distractor_retries: int = 5
    max_restarts: int = 100000


DISTRACTOR_BUDGET = {32: 20, 128: 35}  # num_distractor_snakes = budget / distractor_length


def lra_spec(resolution: int, difficulty: str, distractor_budget: int | None = None, **overrides) -> PathSpec:
    """The LRA settings for ``resolution`` 32 (Pathfinder) or 128 (Path-X) at ``difficulty``.

    LRA's pathfinder.py: distractor_length = contour_length // 3 and num_distractor_snakes =
    20 // distractor_length at 32; contour_length / 3 and 35 / distractor_length at 128
    (floored here: the generator needs whole numbers of dashes and contours). Path-X's
    paddle_length 5 and paddle_contrast 1 are the generator's defaults.
    """
    if difficulty not in CONTOUR_LENGTH:
        raise ValueError(f"difficulty {difficulty!r}: use one of {DIFFICULTIES}")
    length = CONTOUR_LENGTH[difficulty]
    distractor_length = max(1, length // 3)
    budget = int(distractor_budget if distractor_budget is not None else DISTRACTOR_BUDGET.get(resolution, 20))
    if resolution == 32:
        spec = PathSpec(
            contour_length=length, distractor_length=distractor_length, num_distractors=budget // distractor_length
        )
    elif resolution == 128:
        spec = PathSpec(
            size=128,
            padding=1.0,
            paddle_length=5.0,
            paddle_thickness=1.5,
            paddle_margins=(2.0, 3.0),
            marker_radius=3.0,
            contour_length=length,
            continuity=1.8,
            distractor_length=distractor_length,
            num_distractors=budget // distractor_length,
            snake_contrast=0.9,
            paddle_contrast=1.0,
            seed_distance=20.0,
            antialias_scale=2,
        )
    else:
        raise ValueError(f"resolution {resolution}: LRA has 32 (Pathfinder) and 128 (Path-X)")
    known = {f.name for f in fields(PathSpec)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown generator setting(s) {unknown}; known: {sorted(known)}")
    return replace(spec, **{k: _like(getattr(spec, k), v) for k, v in overrides.items()})


def _like(default, value):
    """``value`` in the type of ``default`` (so 2 and 2.0 give one spec and one cache key)."""
    if isinstance(default, tuple):
        return tuple(float(v) for v in value)
    if isinstance(default, bool):
        return bool(value)
    return type(default)(value)


@dataclass
class Sample:
    """One image and the geometry it was drawn from (for tests and figures)."""

    image: np.ndarray  # uint8 [size, size]
    label: int  # 1 = markers on one contour
    segments: np.ndarray  # float [n, 4]: y0, x0, y1, x1 of each dash, in pixels
    contour_ids: np.ndarray  # int [n]: 0 and 1 are the target contours, 2.. distractors
    markers: np.ndarray  # float [2, 2]: (y, x) centres of the two markers
    margin: float  # the paddle margin drawn for this image
    restarts: int = 0  # target pairs abandoned before this one grew
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------- geometry


def _point_segment_dist2(py, px, ay, ax, by, bx) -> float:
    """Squared distance from point p to segment ab."""
    dy, dx = by - ay, bx - ax
    den = dy * dy + dx * dx
    t = 0.0 if den == 0.0 else max(0.0, min(1.0, ((py - ay) * dy + (px - ax) * dx) / den))
    ey, ex = ay + t * dy - py, ax + t * dx - px
    return ey * ey + ex * ex


def _segments_cross(a, b) -> bool:
    """Whether segments a and b (y0, x0, y1, x1) properly intersect."""

    def side(oy, ox, py, px, qy, qx):
        return (py - oy) * (qx - ox) - (px - ox) * (qy - oy)

    d1 = side(a[0], a[1], a[2], a[3], b[0], b[1])
    d2 = side(a[0], a[1], a[2], a[3], b[2], b[3])
    d3 = side(b[0], b[1], b[2], b[3], a[0], a[1])
    d4 = side(b[0], b[1], b[2], b[3], a[2], a[3])
    return (d1 > 0) != (d2 > 0) and (d3 > 0) != (d4 > 0)


def segment_distance(a, b) -> float:
    """Distance between segments a and b (each y0, x0, y1, x1)."""
    if _segments_cross(a, b):
        return 0.0
    return math.sqrt(
        min(
            _point_segment_dist2(a[0], a[1], *b),
            _point_segment_dist2(a[2], a[3], *b),
            _point_segment_dist2(b[0], b[1], *a),
            _point_segment_dist2(b[2], b[3], *a),
        )
    )


class DashField:
    """Placed dashes with a spatial hash, answering "does a new dash keep its clearance?"."""

    def __init__(self, spec: PathSpec, margin: float):
        self.clearance = spec.paddle_thickness + 2.0 * margin
        # Widest gap between consecutive dashes of one contour (lattice dashes land off the
        # nominal 2 * margin): half a thickness short of the clearance between contours.
        self.max_gap = 2.0 * margin + spec.paddle_thickness / 2.0
        self.cell = self.clearance + spec.paddle_length + 1e-6
        lo = spec.padding + spec.paddle_thickness / 2
        self.lo, self.hi = lo, spec.size - lo
        self.dashes: list[tuple] = []
        self.owner: list[int] = []
        self.mids: list[tuple] = []
        self.grid: dict[tuple, list[int]] = {}

    def _key(self, dash) -> tuple:
        return (int((dash[0] + dash[2]) * 0.5 // self.cell), int((dash[1] + dash[3]) * 0.5 // self.cell))

    def inside(self, dash) -> bool:
        lo, hi = self.lo, self.hi
        return lo <= dash[0] <= hi and lo <= dash[1] <= hi and lo <= dash[2] <= hi and lo <= dash[3] <= hi

    def fits(self, dash, skip: int = -1) -> bool:
        """In bounds and at least ``clearance`` from every placed dash but number ``skip``.

        Dashes all have one length L, so midpoints further apart than clearance + L rule a
        pair out and midpoints closer than the clearance rule it in; only pairs in between
        need the exact segment distance.
        """
        if not self.inside(dash):
            return False
        my, mx = (dash[0] + dash[2]) * 0.5, (dash[1] + dash[3]) * 0.5
        ky, kx = int(my // self.cell), int(mx // self.cell)
        c = self.clearance
        near2, far2 = c * c, self.cell * self.cell
        mids, dashes, grid = self.mids, self.dashes, self.grid
        for gy in (ky - 1, ky, ky + 1):
            for gx in (kx - 1, kx, kx + 1):
                for i in grid.get((gy, gx), ()):
                    oy, ox = mids[i]
                    d2 = (oy - my) * (oy - my) + (ox - mx) * (ox - mx)
                    if d2 >= far2 or i == skip:
                        continue
                    if d2 < near2 or segment_distance(dash, dashes[i]) < c:
                        return False
        return True

    def add(self, dash, owner: int) -> int:
        index = len(self.dashes)
        self.dashes.append(dash)
        self.mids.append(((dash[0] + dash[2]) * 0.5, (dash[1] + dash[3]) * 0.5))
        self.owner.append(owner)
        self.grid.setdefault(self._key(dash), []).append(index)
        return index

    def remove_last(self, count: int) -> None:
        """Take back the ``count`` most recently added dashes."""
        for _ in range(count):
            dash = self.dashes.pop()
            self.mids.pop()
            self.owner.pop()
            self.grid[self._key(dash)].pop()


def _dash(y, x, angle, length) -> tuple:
    """The dash starting at (y, x) heading ``angle`` (radians; y grows downwards)."""
    return (y, x, y + length * math.sin(angle), x + length * math.cos(angle))


def turn_candidates(rng: random.Random, spec: PathSpec, margin: float) -> tuple[list[float], list[float]]:
    """Candidate turn angles and their weights cos^2(continuity * delta).

    As in the generator, candidates lie about one pixel of arc apart on the circle the new
    dash's far end can reach (radius paddle_length + margin) and only turns with
    |delta| < pi / (2 continuity) get weight; a random offset of the whole fan (under one
    step) keeps angles continuous instead of on a fixed lattice.
    """
    step = 1.0 / (spec.paddle_length + margin)
    half = math.pi / (2.0 * spec.continuity)
    offset = (rng.random() - 0.5) * step
    deltas = [i * step + offset for i in range(-int(half / step) - 1, int(half / step) + 2)]
    deltas = [d for d in deltas if -half < d < half]
    c = spec.continuity
    return deltas, [math.cos(c * d) ** 2 for d in deltas]


def pick(rng: random.Random, weights: list[float]) -> int:
    """An index drawn with probability proportional to ``weights`` (at least one positive)."""
    r = rng.random() * sum(weights)
    for i, w in enumerate(weights):
        r -= w
        if r < 0.0 and w > 0.0:
            return i
    return max(i for i, w in enumerate(weights) if w > 0.0)


def _heading_gap(a: float, b: float) -> float:
    """|a - b| on the circle, in [0, pi]."""
    d = abs(a - b) % (2.0 * math.pi)
    return min(d, 2.0 * math.pi - d)


@cache
def lattice_offsets(radius: float) -> tuple[tuple[float, int, int], ...]:
    """(heading, row offset, column offset) of the whole pixels a dash may end on around a pivot.

    As the release: points about one pixel of arc apart on the circle of ``radius``
    (paddle_length + margin), floored to pixels and deduplicated; the heading points from
    the pivot to the pixel. The pivot is a whole pixel, so the offsets do not depend on it.
    """
    pixels = sorted(
        {
            (math.floor(radius * math.sin(i / radius)), math.floor(radius * math.cos(i / radius)))
            for i in range(math.ceil(2.0 * math.pi * radius))
        }
        - {(0, 0)}
    )
    return tuple((math.atan2(dy, dx), dy, dx) for dy, dx in pixels)


@lru_cache(maxsize=4096)
def lattice_fan(radius: float, angle: float, continuity: float) -> tuple[tuple, tuple]:
    """The offsets of ``lattice_offsets`` a dash turning from heading ``angle`` may take, and
    their weights cos^2(min(continuity * turn, pi/2)); offsets of zero weight are left out.
    Headings come from a finite set (offsets, whole-degree seeds), so this is memoised."""
    fan, weights = [], []
    for heading, dy, dx in lattice_offsets(radius):
        w = math.cos(min(continuity * _heading_gap(heading, angle), math.pi / 2)) ** 2
        if w > 1e-12:
            fan.append((heading, dy, dx))
            weights.append(w)
    return tuple(fan), tuple(weights)


def lattice_candidates(pivot: tuple, angle: float, spec: PathSpec, margin: float) -> tuple[list[tuple], list[float]]:
    """``(heading, (row, col))`` of each pixel a new dash may end on around ``pivot``, and its weight."""
    fan, weights = lattice_fan(spec.paddle_length + margin, angle, spec.continuity)
    return [(heading, (pivot[0] + dy, pivot[1] + dx)) for heading, dy, dx in fan], list(weights)


def step_pixel(pixel: tuple, angle: float, distance: float) -> tuple:
    """The pixel ``distance`` along ``angle`` from ``pixel``, rounded up as the release does."""
    return (math.ceil(pixel[0] + distance * math.sin(angle)), math.ceil(pixel[1] + distance * math.cos(angle)))


def centre(pixel: tuple) -> tuple:
    """Pixel indices -> the pixel's centre in the continuous coordinates dashes use."""
    return pixel[0] + 0.5, pixel[1] + 0.5


class Contour:
    """A growing contour: its dash indices in the field, the heading of its last dash and
    (lattice) the pixel it last turned at."""

    def __init__(self, owner: int, dash_index: int, angle: float, pivot: tuple | None = None):
        self.owner = owner
        self.indices: list[int] = [dash_index]
        self.angle = angle
        self.pivot = pivot

    def extend(self, rng: random.Random, field_: DashField, spec: PathSpec, margin: float) -> bool:
        """Add one dash continuing the last: gap 2*margin, turned at the gap's middle (lattice:
        the release's pixel rounding moves both, within ``DashField.max_gap``).

        The turn is drawn from the continuity weights restricted to turns whose dash fits
        (the generator likewise zeroes the weight of occupied candidates): candidates are
        drawn without replacement until one fits, up to ``turn_trials``.
        """
        last = field_.dashes[self.indices[-1]]
        if spec.lattice:
            pivot = step_pixel(self.pivot, self.angle, spec.paddle_length + 2.0 * margin)
            pairs, weights = lattice_candidates(pivot, self.angle, spec, margin)
        else:
            pivot = None
            py = last[2] + margin * math.sin(self.angle)
            px = last[3] + margin * math.cos(self.angle)
            deltas, weights = turn_candidates(rng, spec, margin)
            pairs = [(self.angle + d, None) for d in deltas]
        for _ in range(min(spec.turn_trials, len(pairs))):
            i = pick(rng, weights)
            weights[i] = 0.0
            angle, head = pairs[i]
            if head is None:
                dash = _dash(py + margin * math.sin(angle), px + margin * math.cos(angle), angle, spec.paddle_length)
            else:  # the dash ends on the head pixel's centre, paddle_length back along the heading
                hy, hx = centre(head)
                dash = _dash(
                    hy - spec.paddle_length * math.sin(angle),
                    hx - spec.paddle_length * math.cos(angle),
                    angle,
                    spec.paddle_length,
                )
                if math.hypot(dash[0] - last[2], dash[1] - last[3]) > field_.max_gap:
                    continue
            if field_.fits(dash, skip=self.indices[-1]):
                self.indices.append(field_.add(dash, self.owner))
                self.angle, self.pivot = angle, pivot
                return True
        return False


def seed_dash(
    rng: random.Random, spec: PathSpec, margin: float, y: float, x: float
) -> tuple[tuple, float, tuple | None]:
    """A first dash from (y, x) at a random heading: (dash, heading, pivot).

    Lattice: (y, x) are pixel indices, the heading whole degrees (as the release), and the
    pivot the pixel paddle_length + margin back from the dash's far end.
    """
    if not spec.lattice:
        angle = rng.uniform(-math.pi, math.pi)
        return _dash(y, x, angle, spec.paddle_length), angle, None
    angle = math.radians(rng.randrange(-180, 180))
    head = step_pixel((y, x), angle, spec.paddle_length)
    pivot = step_pixel(head, angle + math.pi, spec.paddle_length + margin)
    return _dash(*centre((y, x)), angle, spec.paddle_length), angle, pivot


# ---------------------------------------------------------------- contours


def _seed_targets(rng: random.Random, field_: DashField, spec: PathSpec, margin: float) -> list[Contour] | None:
    """Two first dashes whose starts lie ``seed_distance`` apart, the first near the centre.

    The generator keeps the first seed 2 * seed_distance from the border (or at the centre
    when the window is too small for that) and puts the second at seed_distance in a
    random direction (lattice: whole degrees, rounded to a pixel).
    """
    lo = 2.0 * spec.seed_distance
    hi = spec.size - lo
    if hi <= lo:
        lo = hi = spec.size / 2.0
    first_pixel, last_pixel = int(lo), max(int(lo), int(hi) - 1)  # lattice: the pixel indices in [lo, hi)
    for _ in range(spec.seed_trials):
        if spec.lattice:
            y1, x1 = rng.randint(first_pixel, last_pixel), rng.randint(first_pixel, last_pixel)
        else:
            y1, x1 = rng.uniform(lo, hi), rng.uniform(lo, hi)
        first, a1, p1 = seed_dash(rng, spec, margin, y1, x1)
        if not field_.fits(first):
            continue
        if spec.lattice:
            phi = math.radians(rng.randrange(360))
            y2, x2 = round(y1 + spec.seed_distance * math.sin(phi)), round(x1 + spec.seed_distance * math.cos(phi))
        else:
            phi = rng.uniform(-math.pi, math.pi)
            y2, x2 = y1 + spec.seed_distance * math.sin(phi), x1 + spec.seed_distance * math.cos(phi)
        second, a2, p2 = seed_dash(rng, spec, margin, y2, x2)
        if not field_.fits(second) or segment_distance(first, second) < field_.clearance:
            continue
        return [Contour(0, field_.add(first, 0), a1, p1), Contour(1, field_.add(second, 1), a2, p2)]
    return None


def _markers_apart(field_: DashField, contours: list[Contour], spec: PathSpec, margin: float) -> bool:
    """Whether every possible marker pair (first end of one contour, last end of either) keeps apart.

    Touching marker discs would join a negative's contours and give a positive away, so the
    discs must not touch (2 * marker_radius + margin between centres). All four pairings are
    checked whatever the label, so the contours' shapes carry no label cue.
    """
    need = 2.0 * spec.marker_radius + margin
    for a, b in ((0, 1), (1, 0), (0, 0), (1, 1)):
        start = field_.dashes[contours[a].indices[0]]
        end = field_.dashes[contours[b].indices[-1]]
        if math.hypot(start[0] - end[2], start[1] - end[3]) < need:
            return False
    return True


def grow_targets(rng: random.Random, field_: DashField, spec: PathSpec, margin: float) -> tuple[list[Contour], int]:
    """Two full-length target contours, grown in turn dash by dash; restart when one is stuck."""
    for restarts in range(spec.max_restarts):
        contours = _seed_targets(rng, field_, spec, margin)
        ok = contours is not None
        for _ in range(spec.contour_length - 1):
            if not ok:
                break
            ok = contours[0].extend(rng, field_, spec, margin) and contours[1].extend(rng, field_, spec, margin)
        if ok and _markers_apart(field_, contours, spec, margin):
            return contours, restarts
        field_.remove_last(len(field_.dashes))
    raise RuntimeError(
        f"no two target contours of {spec.contour_length} dashes fit after {spec.max_restarts} tries: {spec}"
    )


def _seed_anywhere(rng: random.Random, field_: DashField, spec: PathSpec, margin: float, owner: int) -> Contour | None:
    """A first dash anywhere in the window (lattice: starting on a pixel centre)."""
    first, last = math.ceil(field_.lo - 0.5), math.floor(field_.hi - 0.5)
    for _ in range(spec.seed_trials):
        if spec.lattice:
            y, x = rng.randint(first, last), rng.randint(first, last)
        else:
            y, x = rng.uniform(field_.lo, field_.hi), rng.uniform(field_.lo, field_.hi)
        dash, angle, pivot = seed_dash(rng, spec, margin, y, x)
        if field_.fits(dash):
            return Contour(owner, field_.add(dash, owner), angle, pivot)
    return None


def add_distractors(rng: random.Random, field_: DashField, spec: PathSpec, margin: float) -> int:
    """Up to ``num_distractors`` contours of ``distractor_length`` dashes; returns how many fit."""
    placed = 0
    for _ in range(spec.num_distractors):
        owner = 2 + placed
        for _ in range(spec.distractor_retries):
            contour = _seed_anywhere(rng, field_, spec, margin, owner)
            if contour is None:
                break
            ok = all(contour.extend(rng, field_, spec, margin) for _ in range(spec.distractor_length - 1))
            if ok:
                placed += 1
                break
            field_.remove_last(len(contour.indices))
    return placed


# ---------------------------------------------------------------- rendering


def _splat(canvas: np.ndarray, top: np.ndarray, left: np.ndarray, patches: np.ndarray) -> None:
    """canvas = max(canvas, patch) for each [P, P] patch placed at (top, left); clips at edges."""
    n, p, _ = patches.shape
    s = canvas.shape[0]
    offs = np.arange(p)
    rows = top[:, None, None] + offs[None, :, None]
    cols = left[:, None, None] + offs[None, None, :]
    keep = (rows >= 0) & (rows < s) & (cols >= 0) & (cols < s) & (patches > 0)
    np.maximum.at(canvas.reshape(-1), (rows * s + cols)[keep], patches[keep])


def draw_dashes(canvas: np.ndarray, segments: np.ndarray, scale: int, thickness: float, peaks: np.ndarray) -> None:
    """Antialiased thick segments: coverage clip(w/2 + 1/2 - distance, 0, 1) on a patch per dash,
    times the dash's peak intensity (``peaks``, one per dash)."""
    if len(segments) == 0:
        return
    seg = segments * scale
    half = thickness * scale / 2.0
    reach = half + 1.0
    top = np.floor(np.minimum(seg[:, 0], seg[:, 2]) - reach).astype(np.int64)
    left = np.floor(np.minimum(seg[:, 1], seg[:, 3]) - reach).astype(np.int64)
    extent = np.maximum(np.abs(seg[:, 2] - seg[:, 0]), np.abs(seg[:, 3] - seg[:, 1])).max()
    p = int(math.ceil(extent + 2 * reach)) + 1
    centres = np.arange(p) + 0.5
    py = (top[:, None] + centres[None, :])[:, :, None]  # [n, P, 1]
    px = (left[:, None] + centres[None, :])[:, None, :]  # [n, 1, P]
    ay, ax, by, bx = (seg[:, k, None, None] for k in range(4))
    dy, dx = by - ay, bx - ax
    den = np.maximum(dy * dy + dx * dx, 1e-12)
    t = np.clip(((py - ay) * dy + (px - ax) * dx) / den, 0.0, 1.0)
    dist = np.hypot(ay + t * dy - py, ax + t * dx - px)
    _splat(canvas, top, left, np.clip(half + 0.5 - dist, 0.0, 1.0) * np.asarray(peaks)[:, None, None])


def draw_discs(canvas: np.ndarray, centres: np.ndarray, scale: int, radius: float, value: float) -> None:
    """Antialiased filled circles (the markers) of ``radius`` pixels."""
    c = centres * scale
    r = radius * scale
    top = np.floor(c[:, 0] - r - 1).astype(np.int64)
    left = np.floor(c[:, 1] - r - 1).astype(np.int64)
    p = int(math.ceil(2 * r + 2)) + 1
    grid = np.arange(p) + 0.5
    dy = top[:, None, None] + grid[None, :, None] - c[:, 0, None, None]
    dx = left[:, None, None] + grid[None, None, :] - c[:, 1, None, None]
    _splat(canvas, top, left, np.clip(r + 0.5 - np.hypot(dy, dx), 0.0, 1.0) * value)


def dash_contrast(spec: PathSpec, contour_ids: np.ndarray) -> np.ndarray:
    """Peak intensity of each dash before min-max scaling: the release's contrast rule.

    The release draws the two target contours (``two_snakes``) with each dash's contrast
    ``paddle_contrast * snake_contrast`` and the distractors (``make_many_snakes``, given
    only ``snake_contrast_list``) at ``snake_contrast``: at LRA's 32x32 settings 1.5 against 2,
    so the target contours are a quarter dimmer than the distractors.
    ``uniform_contrast`` draws every dash at the product (render version 2).
    """
    target = spec.snake_contrast * spec.paddle_contrast
    distractor = target if spec.uniform_contrast else spec.snake_contrast
    return np.where(np.asarray(contour_ids) < 2, target, distractor)


def render(spec: PathSpec, segments: np.ndarray, markers: np.ndarray, contour_ids: np.ndarray) -> np.ndarray:
    """Dashes and markers drawn at ``antialias_scale``, box-downsampled, min-max scaled to uint8.

    Dash intensity follows ``dash_contrast`` and marker intensity is 1 before the min-max
    scaling (the release's PNGs are min-max scaled).
    """
    a = spec.antialias_scale
    canvas = np.zeros((spec.size * a, spec.size * a), dtype=np.float32)
    draw_dashes(canvas, segments, a, spec.paddle_thickness, dash_contrast(spec, contour_ids))
    draw_discs(canvas, markers, a, spec.marker_radius, 1.0)
    image = canvas.reshape(spec.size, a, spec.size, a).mean(axis=(1, 3))
    low, high = float(image.min()), float(image.max())
    scaled = (image - low) * (255.0 / max(high - low, 1e-12))
    return np.rint(scaled).astype(np.uint8)


# ---------------------------------------------------------------- samples


def make_sample(rng: random.Random, spec: PathSpec, label: int) -> Sample:
    """One image with the given label, plus the geometry it was drawn from."""
    margin = spec.paddle_margins[rng.randrange(len(spec.paddle_margins))]
    field_ = DashField(spec, margin)
    targets, restarts = grow_targets(rng, field_, spec, margin)
    n_distractors = add_distractors(rng, field_, spec, margin)
    first = rng.randrange(2)
    other = first if label == 1 else 1 - first
    start = field_.dashes[targets[first].indices[0]]
    end = field_.dashes[targets[other].indices[-1]]
    markers = np.array([[start[0], start[1]], [end[2], end[3]]], dtype=np.float64)
    segments = np.array(field_.dashes, dtype=np.float64).reshape(-1, 4)
    contour_ids = np.array(field_.owner, dtype=np.int64)
    image = render(spec, segments, markers, contour_ids)
    return Sample(
        image=image,
        label=int(label),
        segments=segments,
        contour_ids=contour_ids,
        markers=markers,
        margin=float(margin),
        restarts=restarts,
        extra={"distractors": n_distractors, "marked_contours": (first, other)},
    )


def chunk_rng(seed: int, difficulty: str, resolution: int, chunk: int) -> random.Random:
    """The random stream of one chunk, from (seed, difficulty, resolution, chunk index)."""
    state = np.random.SeedSequence(
        [int(seed), DIFFICULTY_CODE[difficulty], int(resolution), int(chunk)]
    ).generate_state(4)
    return random.Random(int.from_bytes(state.astype(np.uint32).tobytes(), "little"))


def chunk_labels(rng: random.Random, n: int) -> list[int]:
    """Exactly n // 2 positives (and the rest negatives) in a random order."""
    labels = [1] * (n // 2) + [0] * (n - n // 2)
    rng.shuffle(labels)
    return labels


def generate_chunk(seed: int, difficulty: str, chunk: int, n: int, spec: PathSpec) -> tuple[np.ndarray, np.ndarray]:
    """Images ``[n, size*size]`` uint8 (row-major pixels) and labels ``[n]`` of one chunk."""
    rng = chunk_rng(seed, difficulty, spec.size, chunk)
    labels = chunk_labels(rng, n)
    pixels = np.empty((n, spec.size * spec.size), dtype=np.uint8)
    for i, label in enumerate(labels):
        pixels[i] = make_sample(rng, spec, label).image.reshape(-1)
    return pixels, np.asarray(labels, dtype=np.int64)


def chunk_samples(seed: int, difficulty: str, chunk: int, n: int, spec: PathSpec) -> list[Sample]:
    """The same images as ``generate_chunk`` with their geometry (for tests and figures)."""
    rng = chunk_rng(seed, difficulty, spec.size, chunk)
    return [make_sample(rng, spec, label) for label in chunk_labels(rng, n)]

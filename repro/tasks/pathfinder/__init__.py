"""Pathfinder (32x32) and Path-X (128x128): are the two markers on one dashed contour?
(Tay et al. 2021, sections 2.2.5-2.2.6).

Two sources give the same kind of arrays, uint8 pixels ``[N, H*W]`` flattened
row-major (1,024 tokens at 32x32, 16,384 at 128x128; the intensity 0-255 is the
token, and 0 is black, not padding):

* the official release, ``<data_dir>/<official_subdir>/<difficulty folder>/``
  with ``imgs/<k>/sample_<i>.png`` and ``metadata/<k>.npy`` (a text file of
  lines ``imgs/<k> sample_<i>.png <i> <label> ...``; the LRA release's ``lra_benchmarks/data/pathfinder.py``). All-black
  images (LRA filtered them) are dropped and counted.
* our seeded generator, in fixed-size chunks seeded by (seed, difficulty,
  resolution, chunk), so the images do not depend on how many processes make
  them. ``generate.render`` picks how it draws: ``release`` (``release``:
  as the LRA release drew its images) or ``contour_v3`` (``render``,
  render version 3: the earlier renderer, real-valued geometry and exact clearances).

Each difficulty is split 80/10/10 into train/val/test in a seeded shuffled
order (LRA splits each difficulty 80/10/10). ``difficulty=hard``
uses hard only; ``difficulty=all`` is the follow-up's technique (the follow-up study
section 3 and appendix C): train on easy + intermediate + hard with equal-size
parts, three times the hard training set, and validate and test on hard only.

This package is the task: this module reads, generates and splits its data and registers it in ``TASKS``;
``release.py`` (with ``release_draw.py``, its drawing primitives) and ``render.py`` (the retired renderer)
draw the images; ``stats.py`` (image statistics against the release) and ``reach.py`` (what a receptive
field can decide) analyse them (``experiments/pathfinder.py``).
"""

from __future__ import annotations

import multiprocessing as mp
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError
from tqdm import tqdm

from .. import TASKS
from ..base import DataError, DataMissing, Split, TaskData, TaskEntry, empty_task
from ..cache import cached_arrays
from . import release, render

NUM_CLASSES = 2
VOCAB_SIZE = 256  # pixel intensities
SPLITS = ("train", "val", "test")
DIFFICULTIES = render.DIFFICULTIES
# The release's three folders per resolution (lra_benchmarks/data/pathfinder.py).
OFFICIAL_FOLDERS = {"easy": "curv_baseline", "intermediate": "curv_contour_length_9", "hard": "curv_contour_length_14"}
CHUNK = 1000  # images per generation chunk (even: exactly half positive); part of the cache key
READER_VERSION = 1
# generate.render -> the module that draws: each has RENDER_VERSION, generate_chunk, chunk_samples.
RENDERS = {"release": release, "contour_v3": render}
DEFAULT_RENDER = "release"

# ---------------------------------------------------------------- official files


def ordered_map(fn: Callable, jobs: list, workers: int) -> Iterator:
    """``fn`` over ``jobs``, results in job order; ``workers > 1`` uses spawned processes.

    A process pool executor, not ``multiprocessing.Pool``: a worker that dies (out of
    memory, killed) raises ``BrokenProcessPool`` instead of hanging the build.
    """
    if workers <= 1 or len(jobs) <= 1:
        yield from map(fn, jobs)
        return
    pool = ProcessPoolExecutor(min(workers, len(jobs)), mp_context=mp.get_context("spawn"))
    try:
        yield from pool.map(fn, jobs)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # on an error, skip the jobs not started


def _numeric_key(path: Path) -> tuple:
    """Sort ``metadata/10.npy`` after ``metadata/9.npy``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path.stem))


def metadata_files(folder: Path) -> list[Path]:
    """The ``metadata/<k>.npy`` files of one difficulty folder, in numeric order."""
    return sorted((folder / "metadata").glob("*.npy"), key=_numeric_key)


def _metadata_lines(path: Path) -> list[list[str]]:
    """The space-separated fields of each line (the release writes text despite the .npy name).

    A genuine numpy file (as the generator's own ``np.save`` writes) is read as rows of fields.
    """
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise DataError(f"{path}: cannot read metadata ({err})") from None
    if raw.startswith(b"\x93NUMPY"):
        try:
            rows = np.load(path, allow_pickle=False)
        except Exception as err:  # noqa: BLE001 - any failure is a malformed file
            raise DataError(f"{path}: unreadable numpy metadata ({err})") from None
        return [[str(v) for v in np.atleast_1d(row)] for row in np.atleast_2d(rows)]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: metadata is neither text nor a numpy file ({err})") from None
    return [line.split() for line in text.splitlines()]


def read_metadata(path: Path) -> list[tuple[str, int, int]]:
    """``(image path relative to the difficulty folder, label, line number)`` for each line.

    Field 0 is the sub-folder, field 1 the file name, field 3 the label (as LRA's input pipeline reads them).
    """
    entries = []
    for line_no, fields in enumerate(_metadata_lines(path), start=1):
        if not fields:
            continue
        if len(fields) < 4:
            raise DataError(
                f"{path}:{line_no}: expected at least 4 space-separated fields "
                f"(sub-folder, file name, index, label), found {len(fields)}: {' '.join(fields)!r}"
            )
        try:
            label = int(fields[3])
        except ValueError:
            raise DataError(f"{path}:{line_no}: label (field 4) {fields[3]!r} is not 0 or 1") from None
        if label not in (0, 1):
            raise DataError(f"{path}:{line_no}: label (field 4) {label} is not 0 or 1")
        entries.append((f"{fields[0]}/{fields[1]}", label, line_no))
    return entries


def read_image(path: Path, size: int, where: str) -> np.ndarray:
    """One grayscale PNG as uint8 ``[size*size]``; ``where`` names the metadata line listing it."""
    try:
        with Image.open(path) as img:
            img.load()
            mode, (width, height) = img.mode, img.size
            pixels = np.asarray(img)
    except (OSError, UnidentifiedImageError, ValueError) as err:
        raise DataError(f"{path} (listed at {where}): cannot read the image ({err})") from None
    if (width, height) != (size, size):
        raise DataError(
            f"{path} (listed at {where}): image is {width}x{height}, expected {size}x{size} (task.resolution)"
        )
    if mode != "L":
        raise DataError(f"{path} (listed at {where}): image mode {mode!r}, expected 8-bit grayscale 'L'")
    return pixels.reshape(-1).astype(np.uint8, copy=False)


def _read_metadata_file(args) -> tuple[np.ndarray, np.ndarray, list[str], int]:
    """Pixels, labels and ids of the images one metadata file lists; all-black images dropped."""
    folder, meta_path, size = args
    rows, labels, ids, empty = [], [], [], 0
    for rel, label, line_no in read_metadata(meta_path):
        pixels = read_image(folder / rel, size, f"{meta_path}:{line_no}")
        if not pixels.any():
            empty += 1
            continue
        rows.append(pixels)
        labels.append(label)
        ids.append(rel)
    x = np.stack(rows) if rows else np.zeros((0, size * size), dtype=np.uint8)
    return x, np.asarray(labels, dtype=np.int64), ids, empty


def read_official_difficulty(
    folder: Path, size: int, workers: int = 1
) -> tuple[np.ndarray, np.ndarray, list[str], int]:
    """All images of one difficulty folder: ``(pixels [N, size*size], labels [N], ids [N], empty dropped)``.

    Order: metadata files in numeric order, lines in file order. ``ids`` are the image
    paths relative to ``folder`` (``imgs/<k>/sample_<i>.png``).
    """
    files = metadata_files(folder)
    if not files:
        raise DataMissing(f"no metadata files in {folder / 'metadata'}")
    jobs = [(folder, path, size) for path in files]
    results = ordered_map(_read_metadata_file, jobs, workers)
    parts = list(tqdm(results, total=len(jobs), desc=f"reading {folder.name}", unit="file", leave=False))
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    ids = [i for p in parts for i in p[2]]
    refuse_conflicting_labels(folder, ids, y)
    return x, y, ids, sum(p[3] for p in parts)


def refuse_conflicting_labels(folder: Path, ids: list[str], labels: np.ndarray) -> None:
    """DataError naming the first image the metadata lists with two labels (it cannot be both)."""
    seen: dict[str, int] = {}
    for image_id, label in zip(ids, labels.tolist(), strict=True):
        if seen.setdefault(image_id, label) != label:
            raise DataError(
                f"{folder / image_id} is listed in {folder / 'metadata'} with label {seen[image_id]} and with "
                f"label {label}: an image has one label; remove the wrong line"
            )


def official_folder(data_dir: Path, subdir: str, difficulty: str) -> Path:
    return Path(data_dir) / subdir / OFFICIAL_FOLDERS[difficulty]


def official_present(data_dir: Path, subdir: str, difficulties) -> bool:
    return all((official_folder(data_dir, subdir, d) / "metadata").is_dir() for d in difficulties)


def missing_message(data_dir: Path, subdir: str, difficulties) -> str:
    wanted = [official_folder(data_dir, subdir, d) for d in difficulties]
    absent = [str(f) for f in wanted if not (f / "metadata").is_dir()]
    return (
        f"Pathfinder official files not found: {', '.join(absent)}. Each difficulty folder must hold "
        "metadata/<k>.npy (text lines 'imgs/<k> sample_<i>.png <i> <label> ...') and "
        "imgs/<k>/sample_<i>.png. Get them from the LRA release (lra_release/"
        f"{subdir}/{OFFICIAL_FOLDERS['hard']}/ and its siblings) and point data_dir at the folder "
        f"holding '{subdir}/', or set task.source=generated to generate the images instead."
    )


# ---------------------------------------------------------------- splits


def split_sizes(n: int) -> dict[str, int]:
    """80/10/10: val and test get n // 10 each, train the rest."""
    tenth = n // 10
    return {"train": n - 2 * tenth, "val": tenth, "test": tenth}


def split_order(n: int, seed: int, difficulty: str) -> dict[str, np.ndarray]:
    """Indices of each split: a permutation seeded by (seed, difficulty), cut 80/10/10."""
    perm = np.random.default_rng([int(seed), render.DIFFICULTY_CODE[difficulty]]).permutation(n)
    sizes = split_sizes(n)
    cuts = np.cumsum([0, sizes["train"], sizes["val"], sizes["test"]])
    return {s: perm[cuts[i] : cuts[i + 1]] for i, s in enumerate(SPLITS)}


def split_arrays(
    x: np.ndarray, y: np.ndarray, seed: int, difficulty: str, ids: list[str] | None = None
) -> dict[str, np.ndarray]:
    """``{split}_x``, ``{split}_y`` (and ``{split}_ids``) of one difficulty in split order."""
    arrays = {}
    for split, index in split_order(len(y), seed, difficulty).items():
        arrays[f"{split}_x"] = x[index]
        arrays[f"{split}_y"] = y[index]
        if ids is not None:
            arrays[f"{split}_ids"] = np.asarray([ids[i] for i in index], dtype=str).reshape(-1)
    return arrays


def load_official(
    data_dir: Path, subdir: str, difficulty: str, size: int, seed: int, workers: int
) -> tuple[dict, dict]:
    """One official difficulty, split; meta counts the all-black images dropped."""
    folder = official_folder(data_dir, subdir, difficulty)
    if not (folder / "metadata").is_dir():
        raise DataMissing(missing_message(data_dir, subdir, [difficulty]))
    x, y, ids, empty = read_official_difficulty(folder, size, workers)
    meta = {"source": "official", "folder": str(folder), "images": int(len(y)) + empty, "empty_dropped": empty}
    return split_arrays(x, y, seed, difficulty, ids), meta


# ---------------------------------------------------------------- generator


def render_name(spec) -> str:
    """The ``generate.render`` name of a spec (``release.ReleaseSpec`` or ``render.PathSpec``)."""
    return "release" if isinstance(spec, release.ReleaseSpec) else "contour_v3"


def render_module(spec):
    return RENDERS[render_name(spec)]


def _generate_chunk(args) -> tuple[np.ndarray, np.ndarray]:
    seed, difficulty, chunk, n, spec = args
    return render_module(spec).generate_chunk(seed, difficulty, chunk, n, spec)


def generate(n: int, seed: int, difficulty: str, spec, workers: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images of one difficulty in chunk order, the same whatever ``workers`` is."""
    jobs = [(seed, difficulty, c, min(CHUNK, n - c * CHUNK), spec) for c in range(-(-n // CHUNK))]
    x = np.empty((n, spec.size * spec.size), dtype=np.uint8)
    y = np.empty(n, dtype=np.int64)
    bar = tqdm(total=n, desc=f"generating Pathfinder {spec.size}x{spec.size} {difficulty}", unit="img", leave=False)
    try:
        start = 0
        for pixels, labels in ordered_map(_generate_chunk, jobs, workers):
            x[start : start + len(labels)] = pixels
            y[start : start + len(labels)] = labels
            start += len(labels)
            bar.update(len(labels))
    finally:
        bar.close()
    return x, y


def generator_spec(cfg_generate: dict, resolution: int, difficulty: str):
    """The LRA settings for the resolution, with the config's ``generate`` settings applied,
    for the render ``generate.render`` names (a ``release.ReleaseSpec`` or ``render.PathSpec``)."""
    # A null setting means the render's own default (pathx.yaml: release and contour_v3 differ there).
    overrides = {
        k: v for k, v in dict(cfg_generate).items() if k not in ("n_per_difficulty", "render") and v is not None
    }
    name = dict(cfg_generate).get("render")
    if name not in RENDERS:
        raise ValueError(
            f"task.generate.render={name!r}: use release (drawn as the LRA release) or contour_v3 "
            "(the earlier renderer, render version 3)"
        )
    if name == "release":
        only_v3 = sorted(
            set(overrides) & {"lattice", "uniform_contrast", "turn_trials", "seed_trials", "distractor_retries"}
        )
        if only_v3:
            raise ValueError(
                f"task.generate.{only_v3[0]} is a setting of render contour_v3, not release: "
                "drop it or set task.generate.render=contour_v3"
            )
        return release.release_spec(resolution, difficulty, **overrides)
    return render.lra_spec(resolution, difficulty, **overrides)


def load_generated(n: int, seed: int, difficulty: str, spec, workers: int) -> tuple[dict, dict]:
    x, y = generate(n, seed, difficulty, spec, workers)
    meta = {
        "source": "generated",
        "render": render_name(spec),
        "images": n,
        "empty_dropped": 0,
        "positives": int(y.sum()),
    }
    return split_arrays(x, y, seed, difficulty), meta


# ---------------------------------------------------------------- task entry


def official_files_missing(cfg, data_dir: Path) -> str | None:
    """The difficulty folders ``data_dir`` lacks (``task.source=auto`` generates images then), or None."""
    difficulty = cfg.get("difficulty", "hard")
    difficulties = DIFFICULTIES if difficulty == "all" else (difficulty,)
    wanted = [official_folder(data_dir, cfg["official_subdir"], d) for d in difficulties if d in OFFICIAL_FOLDERS]
    absent = [f"{folder}/metadata" for folder in wanted if not (folder / "metadata").is_dir()]
    return ("no " + ", ".join(absent)) if absent else None


def resolve_source(cfg, data_dir: Path, difficulties) -> str:
    source = cfg["source"]
    if source not in ("auto", "official", "generated"):
        raise ValueError(f"task.source={source!r}: use auto, official or generated")
    if source == "auto":
        return "official" if official_present(data_dir, cfg["official_subdir"], difficulties) else "generated"
    if source == "official" and not official_present(data_dir, cfg["official_subdir"], difficulties):
        raise DataMissing(missing_message(data_dir, cfg["official_subdir"], difficulties))
    return source


def load_difficulty(
    cfg, source: str, difficulty: str, data_dir: Path, cache_dir: Path, workers: int
) -> tuple[dict, dict]:
    """One difficulty's split arrays from the cache, reading or generating them on a miss."""
    resolution = int(cfg["resolution"])
    seed = int(cfg["data_seed"])
    if source == "official":
        folder = official_folder(data_dir, cfg["official_subdir"], difficulty)
        params = {
            "source": "official",
            "folder": str(folder.resolve()),
            "resolution": resolution,
            "difficulty": difficulty,
            "seed": seed,
            "reader": READER_VERSION,
        }
        make = lambda: load_official(data_dir, cfg["official_subdir"], difficulty, resolution, seed, workers)  # noqa: E731
    else:
        gen = cfg["generate"]
        spec = generator_spec(gen, resolution, difficulty)
        n = int(gen["n_per_difficulty"])
        params = {
            "source": "generated",
            "n": n,
            "seed": seed,
            "difficulty": difficulty,
            "chunk": CHUNK,
            "render": render_name(spec),
            "render_version": render_module(spec).RENDER_VERSION,
            **asdict(spec),
        }
        make = lambda: load_generated(n, seed, difficulty, spec, workers)  # noqa: E731
    sources = [official_folder(data_dir, cfg["official_subdir"], difficulty)] if source == "official" else None
    return cached_arrays(cache_dir, f"pathfinder{resolution}", params, make, sources=sources)


def compose_all(pools: dict[str, dict]) -> tuple[dict[str, Split], dict]:
    """Train: equal parts of easy, intermediate and hard (3x hard's train); val/test: hard.

    The follow-up study, appendix C: subsets of easy and intermediate the size of hard's training set,
    "to have exactly three times the number of training samples". Easy and intermediate
    contribute their first rows in split order (train, then val, then test: their
    val/test are not used otherwise).
    """
    hard = pools["hard"]
    k = len(hard["train_y"])
    parts_x, parts_y, counts = [], [], {}
    for difficulty in DIFFICULTIES:
        pool = pools[difficulty]
        if difficulty == "hard":
            x, y = pool["train_x"], pool["train_y"]
        elif len(pool["train_y"]) >= k:
            x, y = pool["train_x"][:k], pool["train_y"][:k]
        else:
            x = np.concatenate([pool[f"{s}_x"] for s in SPLITS])[:k]
            y = np.concatenate([pool[f"{s}_y"] for s in SPLITS])[:k]
        parts_x.append(x)
        parts_y.append(y)
        counts[difficulty] = int(len(y))
    splits = {
        "train": Split(np.concatenate(parts_x), np.concatenate(parts_y)),
        "val": Split(hard["val_x"], hard["val_y"]),
        "test": Split(hard["test_x"], hard["test_y"]),
    }
    return splits, {"train_per_difficulty": counts, "train_is_3x_hard": all(c == k for c in counts.values())}


def build(cfg, data_dir: Path, cache_dir: Path, workers: int = 1) -> TaskData:
    """Pathfinder or Path-X from ``cfg`` (see experiments/conf/task/pathfinder.yaml, pathx.yaml)."""
    resolution = int(cfg["resolution"])
    max_len = int(cfg["max_len"])
    if max_len != resolution * resolution:
        raise ValueError(f"task.max_len={max_len} must be resolution^2 = {resolution * resolution}")
    difficulty = cfg.get("difficulty", "hard")
    if difficulty not in (*DIFFICULTIES, "all"):
        raise ValueError(f"task.difficulty={difficulty!r}: use hard (LRA's usual), easy, intermediate or all")
    difficulties = DIFFICULTIES if difficulty == "all" else (difficulty,)
    source = resolve_source(cfg, data_dir, difficulties)

    pools, metas = {}, {}
    for d in difficulties:
        pools[d], metas[d] = load_difficulty(cfg, source, d, data_dir, cache_dir, workers)
    if difficulty == "all":
        splits, extra = compose_all(pools)
    else:
        pool = pools[difficulty]
        splits = {s: Split(pool[f"{s}_x"], pool[f"{s}_y"]) for s in SPLITS}
        extra = {"train_per_difficulty": {difficulty: len(splits["train"])}}
    info = {
        "source": source,
        "generated": source == "generated",
        "difficulty": difficulty,
        "resolution": resolution,
        "sizes": {s: len(v) for s, v in splits.items()},
        "empty_dropped": {d: int(m.get("empty_dropped", 0)) for d, m in metas.items()},
        "per_difficulty": {d: {k: v for k, v in m.items() if k != "cache_entry"} for d, m in metas.items()},
        **extra,
    }
    return TaskData(
        name=cfg.get("name", "pathfinder"),
        num_classes=NUM_CLASSES,
        vocab_size=VOCAB_SIZE,
        max_len=max_len,
        pad_id=None,
        info=info,
        **splits,
    )


def shape(cfg) -> TaskData:
    """The Pathfinder (or Path-X) task of ``cfg`` without examples."""
    return empty_task(cfg, (int(cfg["max_len"]),), NUM_CLASSES, VOCAB_SIZE, pad_id=None)


TASKS.register("pathfinder")(
    TaskEntry(
        build,
        shape,
        titles={"pathfinder": "Pathfinder", "pathx": "Path-X"},
        official_files_missing=official_files_missing,
    )
)

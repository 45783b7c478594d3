"""Image (Tay et al. 2021, section 2.2.4, appendix A.2): grayscale CIFAR-10 as 1024 tokens of 8-bit intensity.

Readers:
- ``official``: torchvision's ``cifar-10-batches-py/`` (``data_batch_1..5``, ``test_batch``
  pickles; rows of 3072 bytes, the R, G and B planes of a 32x32 image).
- ``bundle``: ``cifar10_jpeg/cifar10_jpeg_{rgb,gray}.tar.xz`` (``train_x``, ``train_y``,
  ``test_x``, ``test_y`` .npy members). **A lossy JPEG (q75) proxy of CIFAR-10**: results on
  it are not comparable with published numbers, and ``info`` says so.

While RGB is available the inputs stay RGB (``uint8 [N, 32, 32, 3]``) so the follow-up's
AutoAugment can act on colour, and ``TaskData.prepare`` (``lra_grayscale``) turns each batch
into LRA's grayscale ids ``[B, 1024]`` on the batch's device. ``augment_on`` (kept in ``info``) says
where that augmentation runs: per image on the CPU, or batched on the batch's device. With only
the gray bundle the inputs are the stored gray ids ``[N, 1024]`` and ``prepare`` is None.

The grayscale is LRA's ``tf.cast(tf.image.rgb_to_grayscale(image), tf.int32)`` bit for bit
(tests/test_image.py checks its corner values): in float32, ``f = rgb * (1/255)``,
``g = (f_r * 0.2989 + f_g * 0.5870) + f_b * 0.1140``, gray = ``trunc(g * 255.5)``:
truncation, not rounding (pure green 255 gives 149, not 150).

Splits: 45K/5K/10K; the 5K validation set is a seeded class-stratified draw from train,
never a contiguous slice (the bundle is sorted by class). LRA used ``train[90%:]`` of
TFDS's order, which cannot be reproduced from either source here.
"""

from __future__ import annotations

import io
import lzma
import pickle
import tarfile
from pathlib import Path

import numpy as np
import torch

from . import TASKS
from .base import DataError, DataMissing, Split, TaskData, TaskEntry, empty_task
from .byte_text import class_counts, config_value, index_digest, stratified_holdout
from .cache import cached_arrays

NUM_CLASSES = 10
VOCAB_SIZE = 256
SIDE = 32
MAX_LEN = SIDE * SIDE
CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
LRA_GRAY_WEIGHTS = (0.2989, 0.5870, 0.1140)
OFFICIAL_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
OFFICIAL_TEST = ("test_batch",)
BUNDLE_FILES = {"rgb": "cifar10_jpeg_rgb.tar.xz", "gray": "cifar10_jpeg_gray.tar.xz"}
BUNDLE_MEMBERS = ("train_x", "train_y", "test_x", "test_y")
READER_VERSION = 1  # part of the cache key
AUGMENT_ON = ("auto", "cpu", "gpu")  # task.augment_on (experiments/conf/task/image.yaml)
PROXY_NOTE = (
    "LOSSY PROXY: data from the cifar10_jpeg bundle, CIFAR-10 decoded from a JPEG (quality 75, 4:2:0) "
    "third-party copy (gray PSNR about 33.6 dB against lossless pixels). Accuracies on it are NOT "
    "directly comparable with published CIFAR-10 / LRA Image results; label every number from this run "
    "as measured on the JPEG proxy."
)
OFFICIAL_HINT = (
    "torchvision's CIFAR-10 (torchvision.datasets.CIFAR10(root=data_dir, download=True) creates it, or "
    "extract cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html into data_dir)"
)


# ---------------------------------------------------------------- grayscale


def _gray_float32(f_r, f_g, f_b, w):
    return (f_r * w[0] + f_g * w[1]) + f_b * w[2]


def lra_grayscale(batch: torch.Tensor) -> torch.Tensor:
    """RGB uint8 ``[B, 32, 32, 3]`` (or ``[B, 3, 32, 32]``) -> LRA grayscale ids ``[B, 1024]`` int64,
    on the batch's device. Deterministic: separate float32 multiplies and adds, then truncation."""
    if batch.dim() != 4:
        raise ValueError(f"expected an RGB batch [B, 32, 32, 3], got shape {tuple(batch.shape)}")
    if batch.shape[-1] == 3:
        channels = batch.unbind(-1)
    elif batch.shape[1] == 3:
        channels = batch.unbind(1)
    else:
        raise ValueError(f"expected an RGB batch [B, 32, 32, 3], got shape {tuple(batch.shape)}")
    kw = {"dtype": torch.float32, "device": batch.device}
    scale = torch.tensor(1.0 / 255.0, **kw)
    weights = [torch.tensor(w, **kw) for w in LRA_GRAY_WEIGHTS]
    f_r, f_g, f_b = (c.to(torch.float32) * scale for c in channels)
    gray = _gray_float32(f_r, f_g, f_b, weights) * torch.tensor(255.5, **kw)
    return torch.trunc(gray).to(torch.int64).reshape(batch.shape[0], -1)


def lra_grayscale_numpy(rgb: np.ndarray) -> np.ndarray:
    """The same grayscale on a NumPy ``uint8 [..., 3]`` array -> ``uint8 [...]``."""
    f = rgb.astype(np.float32) * np.float32(1.0 / 255.0)
    w = [np.float32(v) for v in LRA_GRAY_WEIGHTS]
    gray = _gray_float32(f[..., 0], f[..., 1], f[..., 2], w) * np.float32(255.5)
    return np.trunc(gray).astype(np.uint8)


# ---------------------------------------------------------------- official pickles


class _ArrayUnpickler(pickle.Unpickler):
    """Loads the CIFAR batch pickles while refusing anything but NumPy arrays and plain data."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),  # protocol-5 pickles
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # bytes in protocol-2 pickles written by Python 3
    }

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _check_labels(where: str, labels: np.ndarray) -> None:
    bad = np.flatnonzero((labels < 0) | (labels >= NUM_CLASSES))
    if bad.size:
        i = int(bad[0])
        raise DataError(f"{where}: label {int(labels[i])} of image {i} is outside 0-{NUM_CLASSES - 1}")


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One ``cifar-10-batches-py`` pickle -> RGB ``uint8 [N, 32, 32, 3]`` and labels ``int64 [N]``."""
    try:
        with open(path, "rb") as handle:
            batch = _ArrayUnpickler(handle, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
        raise DataError(f"{path}: not a CIFAR-10 python batch ({err})") from None
    if not isinstance(batch, dict):
        raise DataError(f"{path}: not a CIFAR-10 python batch (a {type(batch).__name__}, not a dict)")
    batch = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in batch.items()}
    if "data" not in batch or "labels" not in batch:
        raise DataError(f"{path}: CIFAR-10 batch lacks 'data' or 'labels' (found {sorted(batch)})")
    data = batch["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8:
        raise DataError(f"{path}: 'data' is not a uint8 array")
    if data.ndim != 2 or data.shape[1] != 3 * MAX_LEN:
        raise DataError(
            f"{path}: images of the wrong size: 'data' has shape {data.shape}, expected [N, 3072] (3 x 32 x 32)"
        )
    labels = np.asarray(batch["labels"], dtype=np.int64)
    if labels.shape != (len(data),):
        raise DataError(f"{path}: {len(data)} images but labels of shape {labels.shape}")
    _check_labels(str(path), labels)
    rgb = data.reshape(-1, 3, SIDE, SIDE).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(rgb), labels


def load_official(folder: Path) -> tuple[dict[str, np.ndarray], dict]:
    arrays: dict[str, np.ndarray] = {}
    for split, names in (("train", OFFICIAL_TRAIN), ("test", OFFICIAL_TEST)):
        parts = [read_batch(folder / name) for name in names]
        arrays[f"{split}_x"] = np.concatenate([p[0] for p in parts])
        arrays[f"{split}_y"] = np.concatenate([p[1] for p in parts])
    meta = {"source": "official", "folder": str(folder), "channels": "rgb", "proxy": False}
    return arrays, meta


# ---------------------------------------------------------------- JPEG-proxy bundle


def load_bundle(path: Path, variant: str) -> tuple[dict[str, np.ndarray], dict]:
    """A ``cifar10_jpeg_{rgb,gray}.tar.xz`` -> RGB ``[N, 32, 32, 3]`` or gray ids ``[N, 1024]``."""
    found: dict[str, np.ndarray] = {}
    try:
        with tarfile.open(path, "r:xz") as tar:
            for member in tar.getmembers():
                name = member.name.rsplit("/", 1)[-1]
                if not member.isfile() or not name.endswith(".npy") or name[:-4] not in BUNDLE_MEMBERS:
                    continue
                found[name[:-4]] = np.load(io.BytesIO(tar.extractfile(member).read()), allow_pickle=False)
    except (tarfile.TarError, EOFError, OSError, ValueError, lzma.LZMAError) as err:
        raise DataError(f"{path}: cannot read the bundle ({type(err).__name__}: {err})") from None
    missing = [f"{m}.npy" for m in BUNDLE_MEMBERS if m not in found]
    if missing:
        raise DataError(f"{path}: missing member(s) {missing}")
    image_shape = (SIDE, SIDE, 3) if variant == "rgb" else (SIDE, SIDE)
    arrays: dict[str, np.ndarray] = {}
    for split in ("train", "test"):
        x, y = found[f"{split}_x"], found[f"{split}_y"]
        where = f"{path} ({split}_x.npy)"
        if x.dtype != np.uint8 or x.ndim != 1 + len(image_shape) or x.shape[1:] != image_shape:
            raise DataError(
                f"{where}: images of the wrong size or type: {x.dtype} {x.shape}, expected uint8 [N, "
                + ", ".join(map(str, image_shape))
                + "]"
            )
        if y.shape != (len(x),):
            raise DataError(f"{path} ({split}_y.npy): {len(x)} images but labels of shape {y.shape}")
        y = y.astype(np.int64)
        _check_labels(f"{path} ({split}_y.npy)", y)
        arrays[f"{split}_x"] = x if variant == "rgb" else x.reshape(len(x), MAX_LEN)
        arrays[f"{split}_y"] = y
    meta = {"source": "bundle", "file": str(path), "channels": variant, "proxy": True}
    return arrays, meta


# ---------------------------------------------------------------- locating the data


def resolve_source(cfg, data_dir: Path) -> tuple[str, Path, str]:
    """Pick ``(source, path, channels)``; raise DataMissing saying what is expected where."""
    source = config_value(cfg, "source", "auto")
    variant = config_value(cfg, "variant", "auto")
    if source not in ("auto", "official", "bundle"):
        raise ValueError(f"task.source={source!r}: use auto, official or bundle")
    if variant not in ("auto", "rgb", "gray"):
        raise ValueError(f"task.variant={variant!r}: use auto, rgb or gray")
    official = Path(data_dir) / config_value(cfg, "official_subdir", "cifar-10-batches-py")
    bundle = Path(data_dir) / config_value(cfg, "bundle_subdir", "cifar10_jpeg")
    official_names = OFFICIAL_TRAIN + OFFICIAL_TEST
    official_ok = all((official / n).is_file() for n in official_names)
    variants = ("rgb", "gray") if variant == "auto" else (variant,)
    bundle_pick = next((v for v in variants if (bundle / BUNDLE_FILES[v]).is_file()), None)
    official_help = f"{official}/{{{','.join(official_names)}}} from {OFFICIAL_HINT}"
    bundle_help = f"the JPEG-proxy bundle {' or '.join(str(bundle / BUNDLE_FILES[v]) for v in variants)}"

    if source == "auto":
        if official.is_dir():
            source = "official"
        elif bundle_pick:
            source = "bundle"
        else:
            raise DataMissing(f"CIFAR-10 data not found. Expected either {official_help}, or {bundle_help}.")
    if source == "official":
        if not official_ok:
            missing = [str(official / n) for n in official_names if not (official / n).is_file()]
            raise DataMissing("CIFAR-10 batches not found: " + ", ".join(missing) + f". Expected {official_help}.")
        return "official", official, "rgb"
    if bundle_pick is None:
        raise DataMissing(
            f"CIFAR-10 bundle not found: expected {bundle_help}; or set task.source=official and provide "
            f"{official_help}."
        )
    return "bundle", bundle / BUNDLE_FILES[bundle_pick], bundle_pick


# ---------------------------------------------------------------- task entry


def build(cfg, data_dir: Path, cache_dir: Path, workers: int = 1) -> TaskData:
    """The Image task from ``cfg`` (see experiments/conf/task/image.yaml). ``workers`` is unused."""
    max_len = int(config_value(cfg, "max_len", MAX_LEN))
    if max_len != MAX_LEN:
        raise ValueError(f"task.max_len={max_len}: CIFAR-10 images are {MAX_LEN} pixels")
    augment_on = config_value(cfg, "augment_on", "auto")
    if augment_on not in AUGMENT_ON:
        raise ValueError(
            f"task.augment_on={augment_on!r}: choose auto (the batched chain when training on CUDA, else per "
            "image), cpu (per image) or gpu (batched, on the batch's device)"
        )
    source, path, channels = resolve_source(cfg, Path(data_dir))
    params = {"source": source, "path": str(path.resolve()), "channels": channels, "reader": READER_VERSION}
    if source == "bundle":
        params["bytes"] = path.stat().st_size
        make = lambda: load_bundle(path, channels)  # noqa: E731
    else:
        make = lambda: load_official(path)  # noqa: E731
    arrays, meta = cached_arrays(cache_dir, "image", params, make, sources=[path])

    seed = int(cfg["data_seed"])
    fraction = float(config_value(cfg, "val_fraction", 0.1))
    train_x, train_y = arrays["train_x"], arrays["train_y"]
    keep, held = stratified_holdout(train_y, seed=seed, fraction=fraction)
    splits = {
        "train": Split(train_x[keep], train_y[keep]),
        "val": Split(train_x[held], train_y[held]),
        "test": Split(arrays["test_x"], arrays["test_y"]),
    }
    info = {
        **meta,
        "inputs": (
            "RGB uint8 [N, 32, 32, 3]; prepare = lra_grayscale -> LRA grayscale ids [B, 1024] after augmentation"
            if channels == "rgb"
            else "LRA grayscale ids uint8 [N, 1024] stored (only the gray bundle is present); prepare is None, "
            "so RGB augmentation is not possible"
        ),
        "grayscale": "tf.image.rgb_to_grayscale weights (0.2989, 0.5870, 0.1140), float32, truncated (LRA-exact)",
        "validation": {
            "kind": "train_holdout",
            "note": "seeded class-stratified draw from train (LRA's train[90%:] slice is not reproducible here)",
            "data_seed": seed,
            "val_fraction": fraction,
            "val_index_digest": index_digest(held),
        },
        "augment_on": augment_on,  # where RGB training augmentation runs (repro/followup/techniques)
        "sizes": {s: len(v) for s, v in splits.items()},
        "class_counts": {s: class_counts(v.labels) for s, v in splits.items()},
    }
    if meta.get("proxy"):
        info["note"] = PROXY_NOTE
    return TaskData(
        name="image",
        num_classes=NUM_CLASSES,
        vocab_size=VOCAB_SIZE,
        max_len=MAX_LEN,
        pad_id=None,
        prepare=lra_grayscale if channels == "rgb" else None,
        info=info,
        **splits,
    )


def shape(cfg) -> TaskData:
    """The image task of ``cfg`` without examples (stored as RGB, as its official files and RGB bundle give it)."""
    max_len = int(cfg.get("max_len", MAX_LEN))
    return empty_task(
        cfg, (SIDE, SIDE, 3), NUM_CLASSES, VOCAB_SIZE, max_len=max_len, pad_id=None, prepare=lra_grayscale
    )


TASKS.register("image")(TaskEntry(build, shape, titles={"image": "Image"}))

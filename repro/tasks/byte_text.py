"""Helpers shared by the byte-level tasks (text, retrieval) and the seeded holdout splits.

Byte-level ids follow LRA's ``tfds.deprecated.text.ByteTextEncoder``: byte ``b``
becomes id ``b + 1`` and 0 is padding, so the vocabulary has 257 ids. Arrays are
stored as ``uint8`` while no 0xFF byte occurs (valid UTF-8 and ASCII never hold
one, so ids stay <= 245) and switch to ``uint16`` the moment one does.

``stratified_holdout`` draws validation sets from a keyed hash of
``(seed, index)`` rather than from a NumPy generator, so the same seed gives the
same split on every NumPy version.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

PAD_ID = 0
BYTE_OFFSET = 1  # byte b -> id b + 1
BYTE_VOCAB_SIZE = 256 + BYTE_OFFSET  # 257 including padding


def encode_bytes(data: bytes) -> np.ndarray:
    """Bytes -> unpadded ids ``b + 1`` (uint16)."""
    return np.frombuffer(data, dtype=np.uint8).astype(np.uint16) + BYTE_OFFSET


class ByteIdMatrix:
    """A zero-padded id array of ``shape`` (last axis = max length) filled one document at a time.

    Starts as ``uint8`` and becomes ``uint16`` when a 0xFF byte (id 256) has to be stored.
    """

    def __init__(self, shape: tuple[int, ...]):
        self.array = np.zeros(shape, dtype=np.uint8)
        self.max_len = int(shape[-1])

    def put(self, index, data: bytes) -> bool:
        """Write ``data``'s ids at ``index`` (all axes but the last); returns whether it was truncated."""
        n = min(len(data), self.max_len)
        raw = np.frombuffer(data, dtype=np.uint8, count=n)
        if n and self.array.dtype == np.uint8 and raw.max() == 255:
            self.array = self.array.astype(np.uint16)
        row = self.array[index]
        np.add(raw, BYTE_OFFSET, out=row[:n], dtype=row.dtype)
        return len(data) > self.max_len


def config_value(cfg: Any, key: str, default: Any = None) -> Any:
    """``cfg[key]`` for dicts and OmegaConf configs, ``default`` when absent."""
    try:
        return cfg[key]
    except (KeyError, AttributeError):
        return default


# ---------------------------------------------------------------- seeded splits


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def seeded_keys(n: int, seed: int) -> np.ndarray:
    """One pseudo-random uint64 key per index ``0..n-1``, fixed by ``seed`` on any platform."""
    if seed < 0:
        raise ValueError(f"data_seed must be >= 0, got {seed}")
    salt = _splitmix64(np.array([seed], dtype=np.uint64))[0]
    return _splitmix64(np.arange(n, dtype=np.uint64) ^ salt)


def stratified_holdout(
    labels: np.ndarray, seed: int, fraction: float | None = None, count: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Split indices into ``(kept, held_out)``, both sorted, holding out ``count`` (or
    ``round(fraction * N)``) items with each class represented in proportion (largest
    remainder), chosen by a keyed hash of ``(seed, index)``: never a contiguous slice."""
    labels = np.asarray(labels)
    n = len(labels)
    if count is None:
        if fraction is None or not 0.0 < float(fraction) < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {fraction}")
        count = int(np.floor(n * float(fraction) + 0.5))
    if not 0 < count < n:
        raise ValueError(f"cannot hold out {count} of {n} items")
    classes, sizes = np.unique(labels, return_counts=True)
    quota = sizes * (count / n)
    take = np.floor(quota).astype(np.int64)
    order = np.argsort(-(quota - take), kind="stable")
    take[order[: count - int(take.sum())]] += 1
    keys = seeded_keys(n, int(seed))
    held = []
    for cls, k in zip(classes, take, strict=True):
        members = np.flatnonzero(labels == cls)
        held.append(members[np.argsort(keys[members], kind="stable")[:k]])
    held_idx = np.sort(np.concatenate(held))
    mask = np.ones(n, dtype=bool)
    mask[held_idx] = False
    return np.flatnonzero(mask), held_idx


def index_digest(indices: np.ndarray) -> str:
    """A short hash of an index array, for run records (same split <=> same digest)."""
    return hashlib.sha256(np.asarray(indices, dtype=np.int64).tobytes()).hexdigest()[:16]


def class_counts(labels: np.ndarray) -> dict[str, int]:
    classes, sizes = np.unique(np.asarray(labels), return_counts=True)
    return {str(int(c)): int(s) for c, s in zip(classes, sizes, strict=True)}


def length_stats(lengths: np.ndarray) -> dict[str, float]:
    lengths = np.asarray(lengths)
    if lengths.size == 0:
        return {}
    return {
        "min": int(lengths.min()),
        "median": float(np.median(lengths)),
        "mean": round(float(lengths.mean()), 1),
        "max": int(lengths.max()),
    }

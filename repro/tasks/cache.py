"""On-disk cache of tokenised arrays, keyed by the parameters that made them.

An entry is a folder ``<cache_dir>/<task>/<key>/`` of ``.npy`` files plus
``meta.json``; it is written under a temporary name and renamed into place, so
a crashed build never leaves a half-written entry. Arrays load memory-mapped.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

CACHE_FORMAT = 1


def cache_key(params: dict) -> str:
    """A short stable hash of JSON-serialisable parameters."""
    text = json.dumps({"format": CACHE_FORMAT, **params}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_arrays(
    cache_dir: str | os.PathLike,
    task: str,
    params: dict,
    build: Callable[[], tuple[dict[str, np.ndarray], dict]],
) -> tuple[dict[str, np.ndarray], dict]:
    """Load the arrays for ``params`` from the cache, building and storing them on a miss.

    ``build`` returns ``(arrays, meta)``; ``meta`` must be JSON-serialisable.
    Returns ``(arrays, meta)`` with ``meta["cache_hit"]`` telling which happened.
    """
    entry = Path(cache_dir) / task / cache_key(params)
    meta_file = entry / "meta.json"
    if meta_file.exists():
        meta = json.loads(meta_file.read_text())
        arrays = {name: np.load(entry / f"{name}.npy", mmap_mode="r") for name in meta["arrays"]}
        return arrays, {**meta["meta"], "cache_hit": True, "cache_entry": str(entry)}

    arrays, meta = build()
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        for name, array in arrays.items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(array))
        record = {"params": params, "arrays": sorted(arrays), "meta": meta}
        (tmp / "meta.json").write_text(json.dumps(record, indent=1, sort_keys=True, default=str))
        try:
            os.replace(tmp, entry)
        except OSError:
            # Another process filled the entry first: keep theirs.
            if not meta_file.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return arrays, {**meta, "cache_hit": False, "cache_entry": str(entry)}

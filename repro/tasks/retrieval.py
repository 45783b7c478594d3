"""Retrieval (Tay et al. 2021, section 2.2.3, appendix A.1.3): AAN byte-level document matching.

Reads the LRA release's ``tsv_data/new_aan_pairs.{train,eval,test}.tsv``: headerless,
tab-separated ``label, id1, id2, text1, text2`` per line, no quoting (the LRA pipeline
reads them with ``use_quote_delim=False``). The label is parsed as a number (LRA reads
it as float32 and casts to int) and must be 0 or 1. The text fields are tokenised
byte for byte as they stand in the file (LRA does not decode them): byte ``b`` -> id
``b + 1``, 0 is padding, each document cut or padded to ``max_len`` (4000). Inputs are
``[N, 2, max_len]`` for the two-tower model; ``eval`` is the validation split.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import TASKS
from .base import DataError, DataMissing, Split, TaskData, TaskEntry, empty_task, report_truncated, too_long
from .byte_text import BYTE_VOCAB_SIZE, ByteIdMatrix, class_counts, config_value, length_stats
from .cache import cached_arrays

NUM_CLASSES = 2
SPLITS = ("train", "val", "test")
OFFICIAL_FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv", "test": "new_aan_pairs.test.tsv"}
FIELDS = ("label", "id1", "id2", "text1", "text2")
READER_VERSION = 1  # bump when tokenisation changes; part of the cache key


def _count_lines(path: Path) -> int:
    """An upper bound on the rows of ``path``: its newline count, plus one for a last unterminated line."""
    count, last = 0, b"\n"
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def parse_label(path: Path, line_no: int, field: bytes) -> int:
    text = field.decode("ascii", errors="replace").strip()
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{path}:{line_no}: label {text!r} is not a number (expected 0 or 1)") from None
    if value not in (0.0, 1.0):
        raise DataError(f"{path}:{line_no}: label {text!r} is not 0 or 1")
    return int(value)


def read_tsv(path: Path, max_len: int, truncate: bool = True) -> tuple[dict[str, np.ndarray], dict]:
    """One split file -> ``x [N, 2, max_len]``, ``y [N]``, byte lengths ``[N, 2]`` and counts. A document longer
    than ``max_len`` bytes is cut and counted, as the LRA release cuts it; without ``truncate`` it is refused,
    naming its line."""
    upper = _count_lines(path)
    ids = ByteIdMatrix((upper, 2, max_len))
    labels = np.empty(upper, dtype=np.int64)
    lengths = np.empty((upper, 2), dtype=np.int64)
    truncated = [0, 0]
    blank = crlf = 0
    n = 0
    with open(path, "rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            line = line[:-1] if line.endswith(b"\n") else line
            if line.endswith(b"\r"):
                line = line[:-1]
                crlf += 1
            if not line.strip():
                blank += 1
                continue
            fields = line.split(b"\t")
            if len(fields) != len(FIELDS):
                raise DataError(
                    f"{path}:{line_no}: expected {len(FIELDS)} tab-separated fields "
                    f"({', '.join(FIELDS)}), found {len(fields)}"
                )
            labels[n] = parse_label(path, line_no, fields[0])
            for tower, text in enumerate(fields[3:]):
                if not truncate and len(text) > max_len:
                    why = "task.truncate=false; the LRA release cuts documents by design"
                    raise too_long(f"{path}:{line_no}: {FIELDS[3 + tower]}", len(text), "bytes", max_len, why)
                truncated[tower] += ids.put((n, tower), text)
                lengths[n, tower] = len(text)
            n += 1
    if n == 0:
        raise DataError(f"{path}: no rows in this file")
    x = ids.array[:n]
    meta = {
        "rows": n,
        "truncated_docs": truncated[0] + truncated[1],
        "truncated_text1": truncated[0],
        "truncated_text2": truncated[1],
        "truncated_pairs": int(((lengths[:n] > max_len).any(axis=1)).sum()),
        "blank_lines_skipped": blank,
        "crlf_lines": crlf,
        "lengths": length_stats(lengths[:n]),
    }
    return {"x": x, "y": labels[:n], "len": lengths[:n]}, meta


def official_dir(data_dir: Path, subdir: str) -> Path:
    return Path(data_dir) / subdir


def load_official(folder: Path, max_len: int, truncate: bool = True) -> tuple[dict[str, np.ndarray], dict]:
    arrays: dict[str, np.ndarray] = {}
    meta: dict = {"source": "official", "folder": str(folder), "splits": {}, "truncated": {}}
    for split, name in OFFICIAL_FILES.items():
        part, part_meta = read_tsv(folder / name, max_len, truncate)
        for key, value in part.items():
            arrays[f"{split}_{key}"] = value
        meta["splits"][split] = {"file": name, **part_meta}
        meta["truncated"][split] = part_meta["truncated_docs"]
    dtypes = {str(arrays[f"{s}_x"].dtype) for s in SPLITS}
    if len(dtypes) > 1:  # one split met a 0xFF byte: store all alike
        arrays.update({f"{s}_x": arrays[f"{s}_x"].astype(np.uint16) for s in SPLITS})
    meta["dtype"] = str(arrays["train_x"].dtype)
    return arrays, meta


def build(cfg, data_dir: Path, cache_dir: Path, workers: int = 1) -> TaskData:
    """The Retrieval task from ``cfg`` (see experiments/conf/task/retrieval.yaml). ``workers`` is unused."""
    source = config_value(cfg, "source", "auto")
    if source not in ("auto", "official"):
        raise ValueError(f"task.source={source!r}: use auto or official (AAN has no other source)")
    max_len = int(cfg["max_len"])
    if max_len < 1:
        raise ValueError(f"task.max_len={max_len} must be positive")
    subdir = config_value(cfg, "official_subdir", "tsv_data")
    folder = official_dir(Path(data_dir), subdir)
    missing = [str(folder / n) for n in OFFICIAL_FILES.values() if not (folder / n).is_file()]
    if missing:
        raise DataMissing(
            "AAN retrieval files not found: "
            + ", ".join(missing)
            + ". Expected "
            + ", ".join(OFFICIAL_FILES.values())
            + f" in {folder}. They come from the LRA release "
            "(lra_release.gz from https://github.com/google-research/long-range-arena, folder "
            f"lra_release/tsv_data/): point data_dir at the folder holding '{subdir}/'."
        )
    truncate = bool(config_value(cfg, "truncate", True))
    params = {"source": "official", "folder": str(folder.resolve()), "max_len": max_len, "reader": READER_VERSION}
    params.update({} if truncate else {"truncate": False})  # the default's entries keep their key
    arrays, meta = cached_arrays(
        cache_dir,
        "retrieval",
        params,
        lambda: load_official(folder, max_len, truncate),
        sources=[folder / name for name in OFFICIAL_FILES.values()],
    )
    report_truncated("retrieval", meta["truncated"], max_len, "documents")

    splits = {s: Split(arrays[f"{s}_x"], arrays[f"{s}_y"]) for s in SPLITS}
    info = {
        **meta,
        "validation": {"kind": "official_eval", "note": "val is the release's new_aan_pairs.eval.tsv"},
        "sizes": {s: len(v) for s, v in splits.items()},
        "class_counts": {s: class_counts(v.labels) for s, v in splits.items()},
    }
    return TaskData(
        name="retrieval",
        num_classes=NUM_CLASSES,
        vocab_size=BYTE_VOCAB_SIZE,
        max_len=max_len,
        two_tower=True,
        pad_id=0,
        info=info,
        **splits,
    )


def shape(cfg) -> TaskData:
    """The retrieval task of ``cfg`` without examples (two documents an example)."""
    return empty_task(cfg, (2, int(cfg["max_len"])), NUM_CLASSES, BYTE_VOCAB_SIZE, two_tower=True)


TASKS.register("retrieval")(TaskEntry(build, shape, titles={"retrieval": "Retrieval"}))

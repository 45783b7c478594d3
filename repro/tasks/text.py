"""Text (Tay et al. 2021, section 2.2.2, appendix A.1.2): IMDb byte-level binary classification.

Two readers give the same ids: the official ``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt``
folders (aclImdb_v1.tar.gz) and the JSONL bundle ``imdb/imdb_{train,test}.jsonl.xz``
(one ``{"id", "rating", "label", "text", ...}`` object per line). Reviews are ordered
neg then pos, each by numeric id, so row numbers are the same from either source.

Tokenisation is LRA's: TFDS ``imdb_reviews`` strips surrounding whitespace from each
file (``strip``), ``ByteTextEncoder`` maps UTF-8 byte ``b`` to id ``b + 1`` (0 is
padding, vocabulary 257), and reviews are cut or zero-padded to ``max_len`` bytes
(LRA swept 1K-4K; the follow-up uses 4096). Cut reviews are counted in ``info``.

Validation: LRA's code validated on test. We hold out a seeded, class-stratified
``val_fraction`` of train instead (``validation: train_holdout``); ``validation: test``
restores LRA's behaviour and says so in ``info``.
"""

from __future__ import annotations

import json
import lzma
import re
from pathlib import Path

import numpy as np

from . import TASKS
from .base import DataError, DataMissing, Split, TaskData, TaskEntry, empty_task, report_truncated, too_long
from .byte_text import (
    BYTE_VOCAB_SIZE,
    ByteIdMatrix,
    class_counts,
    config_value,
    index_digest,
    length_stats,
    stratified_holdout,
)
from .cache import cached_arrays

NUM_CLASSES = 2
LABELS = {"neg": 0, "pos": 1}
FILE_SPLITS = ("train", "test")
FILE_NAME = re.compile(r"^(\d+)_(\d+)\.txt$")
READER_VERSION = 1  # bump when tokenisation changes; part of the cache key
DOWNLOAD_HINT = (
    "download aclImdb_v1.tar.gz from https://ai.stanford.edu/~amaas/data/sentiment/ and extract it into data_dir"
)


def bundle_files(folder: Path) -> dict[str, Path]:
    return {s: Path(folder) / f"imdb_{s}.jsonl.xz" for s in FILE_SPLITS}


def official_class_dirs(folder: Path) -> list[Path]:
    return [Path(folder) / s / c for s in FILE_SPLITS for c in LABELS]


# ---------------------------------------------------------------- readers


def read_official_split(folder: Path, split: str) -> list[tuple[int, int, bytes]]:
    """``(label, id, raw bytes)`` of ``aclImdb/<split>/{neg,pos}/*.txt``, sorted by (label, id)."""
    docs = []
    for class_name, label in LABELS.items():
        class_dir = Path(folder) / split / class_name
        seen: dict[int, Path] = {}
        for path in class_dir.iterdir():
            if path.suffix != ".txt":
                continue
            match = FILE_NAME.match(path.name)
            if not match:
                raise DataError(f"{path}: review file name is not <id>_<rating>.txt")
            doc_id = int(match.group(1))
            if doc_id in seen:
                raise DataError(f"{path}: review id {doc_id} also used by {seen[doc_id].name}")
            seen[doc_id] = path
        if not seen:
            raise DataError(f"{class_dir}: no <id>_<rating>.txt reviews in this folder")
        for doc_id in sorted(seen):
            docs.append((label, doc_id, read_review(seen[doc_id])))
    return docs


def read_review(path: Path) -> bytes:
    """One review file's bytes; DataError naming it when it is no review text (a folder, empty, binary, not
    UTF-8): the official reviews are all non-empty UTF-8 text."""
    if not path.is_file():
        raise DataError(f"{path}: not a file; a review is a text file <id>_<rating>.txt")
    data = path.read_bytes()
    if not data.strip():
        raise DataError(f"{path}: empty review; restore its text or remove the file")
    if b"\x00" in data:
        raise DataError(f"{path}: binary data (a NUL byte at byte {data.index(0)}), not a review; restore the file")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); restore the file") from None
    return data


def read_bundle_split(path: Path) -> list[tuple[int, int, bytes]]:
    """``(label, id, UTF-8 bytes)`` of one JSONL bundle file, sorted by (label, id)."""
    docs = []
    seen: set[tuple[int, int]] = set()
    line_no = 0
    try:
        with lzma.open(path, "rt", encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, start=1):
                _read_bundle_line(path, line_no, line, seen, docs)
    except (EOFError, lzma.LZMAError, UnicodeDecodeError, OSError) as err:
        # A truncated (EOFError) or invalid (LZMAError) xz stream, or bytes that are not UTF-8.
        problem = f"{type(err).__name__}: {err}"
        raise DataError(f"{path}: cannot read the xz-compressed JSONL past line {line_no} ({problem})") from None
    if not docs:
        raise DataError(f"{path}: no reviews in this file")
    docs.sort(key=lambda d: (d[0], d[1]))
    return docs


def _read_bundle_line(path: Path, line_no: int, line: str, seen: set, docs: list) -> None:
    """Check one line of a JSONL bundle file and append its review to ``docs``."""
    if not line.strip():
        return
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{line_no}: not a JSON object ({err.msg})") from None
    if not isinstance(record, dict):
        raise DataError(f"{path}:{line_no}: expected a JSON object, found {type(record).__name__}")
    missing = [k for k in ("id", "label", "text") if k not in record]
    if missing:
        raise DataError(f"{path}:{line_no}: missing key(s) {missing}")
    label, doc_id, text = record["label"], record["id"], record["text"]
    if isinstance(label, bool) or label not in (0, 1):
        raise DataError(f"{path}:{line_no}: label {label!r} is not 0 (neg) or 1 (pos)")
    if isinstance(doc_id, bool) or not isinstance(doc_id, int):
        raise DataError(f"{path}:{line_no}: id {doc_id!r} is not an integer")
    if not isinstance(text, str):
        raise DataError(f"{path}:{line_no}: text is not a string")
    if not text.strip():
        raise DataError(f"{path}:{line_no}: empty review text")
    if (label, doc_id) in seen:
        raise DataError(f"{path}:{line_no}: duplicate review (label {label}, id {doc_id})")
    seen.add((label, doc_id))
    docs.append((int(label), doc_id, text.encode("utf-8")))


def tokenise(docs: list[tuple[int, int, bytes]], max_len: int, strip: bool):
    """Docs -> (ids [N, max_len], labels [N], byte lengths [N], number truncated)."""
    ids = ByteIdMatrix((len(docs), max_len))
    labels = np.empty(len(docs), dtype=np.int64)
    lengths = np.empty(len(docs), dtype=np.int32)
    truncated = 0
    for i, (label, _, data) in enumerate(docs):
        if strip:
            data = data.strip()
        truncated += ids.put(i, data)
        labels[i] = label
        lengths[i] = len(data)
    return ids.array, labels, lengths, truncated


def load(
    source: str, folder: Path, max_len: int, strip: bool, truncate: bool = True
) -> tuple[dict[str, np.ndarray], dict]:
    """Tokenised train/test arrays from one source (``official`` or ``bundle``). A review longer than ``max_len``
    bytes is cut and counted, as the LRA release cuts it; without ``truncate`` it is refused, named."""
    arrays: dict[str, np.ndarray] = {}
    meta: dict = {"source": source, "folder": str(folder), "strip": strip, "truncated": {}, "lengths": {}}
    for split in FILE_SPLITS:
        if source == "official":
            docs = read_official_split(folder, split)
        else:
            docs = read_bundle_split(bundle_files(folder)[split])
        x, y, lengths, truncated = tokenise(docs, max_len, strip)
        if truncated and not truncate:
            label, doc_id, _ = docs[int(np.argmax(lengths > max_len))]
            where = (
                str(next((folder / split / [c for c, v in LABELS.items() if v == label][0]).glob(f"{doc_id}_*.txt")))
                if source == "official"
                else f"{bundle_files(folder)[split]}: the review of id {doc_id}, label {label}"
            )
            why = "task.truncate=false; the LRA release cuts reviews by design"
            raise too_long(where, int(lengths[lengths > max_len][0]), "bytes", max_len, why)
        arrays[f"{split}_x"], arrays[f"{split}_y"], arrays[f"{split}_len"] = x, y, lengths
        meta["truncated"][split] = truncated
        meta["lengths"][split] = length_stats(lengths)
    meta["dtype"] = str(arrays["train_x"].dtype)
    return arrays, meta


# ---------------------------------------------------------------- locating the data


def resolve_source(source: str, data_dir: Path, official_subdir: str, bundle_subdir: str) -> tuple[str, Path]:
    """Pick the reader and its folder; raise DataMissing saying what is expected where."""
    if source not in ("auto", "official", "bundle"):
        raise ValueError(f"task.source={source!r}: use auto, official or bundle")
    official = Path(data_dir) / official_subdir
    bundle = Path(data_dir) / bundle_subdir
    official_help = f"the official folders {official}/{{train,test}}/{{pos,neg}}/<id>_<rating>.txt ({DOWNLOAD_HINT})"
    bundle_help = f"the JSONL bundle {bundle}/imdb_train.jsonl.xz and imdb_test.jsonl.xz"
    if source == "auto":
        if official.is_dir():
            source = "official"
        elif all(p.is_file() for p in bundle_files(bundle).values()):
            source = "bundle"
        else:
            raise DataMissing(f"IMDb data not found. Expected either {official_help}, or {bundle_help}.")
    if source == "official":
        missing = [str(d) for d in official_class_dirs(official) if not d.is_dir()]
        if missing:
            raise DataMissing(
                "IMDb official folders not found: "
                + ", ".join(missing)
                + f". Expected {official_help}; or set task.source=bundle to read {bundle_help}."
            )
        return source, official
    missing = [str(p) for p in bundle_files(bundle).values() if not p.is_file()]
    if missing:
        raise DataMissing(
            "IMDb bundle not found: "
            + ", ".join(missing)
            + f". Expected {bundle_help}; or set task.source=official to read {official_help}."
        )
    return source, bundle


# ---------------------------------------------------------------- task entry


def build(cfg, data_dir: Path, cache_dir: Path, workers: int = 1) -> TaskData:
    """The Text task from ``cfg`` (see experiments/conf/task/text.yaml). ``workers`` is unused."""
    max_len = int(cfg["max_len"])
    if max_len < 1:
        raise ValueError(f"task.max_len={max_len} must be positive")
    strip = bool(config_value(cfg, "strip", True))
    truncate = bool(config_value(cfg, "truncate", True))
    validation = config_value(cfg, "validation", "train_holdout")
    if validation not in ("train_holdout", "test"):
        raise ValueError(f"task.validation={validation!r}: use train_holdout or test")
    source, folder = resolve_source(
        config_value(cfg, "source", "auto"),
        Path(data_dir),
        config_value(cfg, "official_subdir", "aclImdb"),
        config_value(cfg, "bundle_subdir", "imdb"),
    )
    params = {
        "source": source,
        "folder": str(folder.resolve()),
        "max_len": max_len,
        "strip": strip,
        "reader": READER_VERSION,
        **({} if truncate else {"truncate": False}),  # the default's entries keep their key
    }
    arrays, meta = cached_arrays(
        cache_dir, "text", params, lambda: load(source, folder, max_len, strip, truncate), sources=[folder]
    )

    train_x, train_y, train_len = arrays["train_x"], arrays["train_y"], arrays["train_len"]
    test = Split(arrays["test_x"], arrays["test_y"])
    info = dict(meta)
    # ``truncated`` counts per task split (train/val/test); the reader's counts per file split stay
    # under ``truncated_by_file_split``.
    info["truncated_by_file_split"] = info.pop("truncated")
    test_truncated = info["truncated_by_file_split"]["test"]
    if validation == "train_holdout":
        seed = int(cfg["data_seed"])
        fraction = float(config_value(cfg, "val_fraction", 0.1))
        keep, held = stratified_holdout(train_y, seed=seed, fraction=fraction)
        train = Split(train_x[keep], train_y[keep])
        val = Split(train_x[held], train_y[held])
        info["validation"] = {
            "kind": "train_holdout",
            "note": "seeded class-stratified holdout of the official train split; test is never used for selection",
            "data_seed": seed,
            "val_fraction": fraction,
            "val_index_digest": index_digest(held),
        }
        info["truncated"] = {
            "train": int((train_len[keep] > max_len).sum()),
            "val": int((train_len[held] > max_len).sum()),
            "test": test_truncated,
        }
    else:
        train = Split(train_x, train_y)
        val = test
        info["validation"] = {
            "kind": "test",
            "note": "val is the test split (the LRA code's behaviour): selecting on it tunes on test",
        }
        info["truncated"] = {
            "train": int((train_len > max_len).sum()),
            "val": test_truncated,
            "test": test_truncated,
        }
    report_truncated("text", info["truncated"], max_len, "reviews")
    splits = {"train": train, "val": val, "test": test}
    info["sizes"] = {s: len(v) for s, v in splits.items()}
    info["class_counts"] = {s: class_counts(v.labels) for s, v in splits.items()}
    return TaskData(
        name="text",
        num_classes=NUM_CLASSES,
        vocab_size=BYTE_VOCAB_SIZE,
        max_len=max_len,
        pad_id=0,
        info=info,
        **splits,
    )


def shape(cfg) -> TaskData:
    """The text task of ``cfg`` without examples."""
    return empty_task(cfg, (int(cfg["max_len"]),), NUM_CLASSES, BYTE_VOCAB_SIZE)


TASKS.register("text")(TaskEntry(build, shape, titles={"text": "Text"}))

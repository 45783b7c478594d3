"""ListOps (Tay et al. 2021, section 2.2.1): 10-way classification of nested list operations.

Two sources give the same token ids: the official release files
``listops-1000/basic_{train,val,test}.tsv`` and our seeded generator
(``listops_trees``). Tokenisation is the LRA pipeline's (after its March 2021
fix): parentheses dropped, ``]`` its own token, whitespace split, padded with
0 to 2000.

Generating the 100,000 trees of the full task takes minutes on a CPU. The chunks of trees are
kept as they are drawn (``<cache_dir>/listops/.<key>.parts/``, one file each, written under a
temporary name and renamed), so an interrupted generation resumes from the chunks it kept and
ends with the arrays an uninterrupted one gives; the folder goes once the cache entry is stored.
"""

from __future__ import annotations

import csv
import multiprocessing as mp
import os
import secrets
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

from . import TASKS
from . import listops_trees as trees
from .base import DataError, DataMissing, Split, TaskData, TaskEntry, empty_task, report_truncated, too_long
from .cache import cached_arrays, parts_path

# 0 is padding; digits, operators and the closing bracket follow.
VOCAB = ["<pad>"] + [str(v) for v in trees.VALUES] + list(trees.OPERATORS) + [trees.CLOSE]
TOKEN_ID = {tok: i for i, tok in enumerate(VOCAB)}
NUM_CLASSES = 10
SPLITS = ("train", "val", "test")
OFFICIAL_FILES = {s: f"basic_{s}.tsv" for s in SPLITS}
CHUNK = 1000  # trees per generation chunk; part of the cache key


def encode(token_list: list[str]) -> np.ndarray:
    """Token strings -> uint8 ids (no padding)."""
    return np.fromiter((TOKEN_ID[t] for t in token_list), dtype=np.uint8, count=len(token_list))


def source_tokens(source: str) -> list[str]:
    """The model's tokens of a release ``Source`` text: whitespace split, parentheses dropped."""
    return [t for t in source.split() if t not in ("(", ")")]


def pad(rows: list[np.ndarray], max_len: int) -> tuple[np.ndarray, int]:
    """Stack id rows into ``[N, max_len]`` zero-padded; returns the array and how many were truncated."""
    out = np.zeros((len(rows), max_len), dtype=np.uint8)
    truncated = 0
    for i, row in enumerate(rows):
        if len(row) > max_len:
            truncated += 1
            row = row[:max_len]
        out[i, : len(row)] = row
    return out, truncated


# ---------------------------------------------------------------- official files


def read_official_tsv(path: Path) -> tuple[list[np.ndarray], np.ndarray]:
    """Read one release TSV (header ``Source\\tTarget``); a bad row fails naming file and line."""
    rows: list[np.ndarray] = []
    labels: list[int] = []
    line_no = 1
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
            header = next(reader, None)
            if header != ["Source", "Target"]:
                raise DataError(f"{path}:1: expected the header 'Source<TAB>Target', found {header!r}")
            for line_no, fields in enumerate(reader, start=2):
                row, label = _official_row(path, line_no, fields)
                rows.append(row)
                labels.append(label)
    except (UnicodeDecodeError, csv.Error) as err:  # bytes that are not text, a NUL byte
        raise DataError(f"{path}: cannot read past line {line_no} ({type(err).__name__}: {err})") from None
    return rows, np.asarray(labels, dtype=np.int64)


def _official_row(path: Path, line_no: int, fields: list[str]) -> tuple[np.ndarray, int]:
    """The ids and label of one release TSV row; a malformed row fails naming file and line."""
    if len(fields) != 2:
        raise DataError(f"{path}:{line_no}: expected 2 tab-separated fields (Source, Target), found {len(fields)}")
    source, target = fields
    try:
        label = int(target)
    except ValueError:
        raise DataError(f"{path}:{line_no}: Target {target!r} is not an integer") from None
    if not 0 <= label < NUM_CLASSES:
        raise DataError(f"{path}:{line_no}: Target {label} is outside 0-9")
    toks = source_tokens(source)
    unknown = sorted({t for t in toks if t not in TOKEN_ID or t == "<pad>"})
    if unknown:
        raise DataError(f"{path}:{line_no}: unknown token(s) {unknown} in Source")
    if not toks:
        raise DataError(f"{path}:{line_no}: empty Source")
    try:
        value = expression_value(source)
    except ValueError as err:
        raise DataError(
            f"{path}:{line_no}: {err} in Source; the release's rows are well formed: fix or remove the row"
        ) from None
    if value != label:
        raise DataError(
            f"{path}:{line_no}: Target {label} is not the value of its Source ({value}); in the release's files "
            "every Target is: fix or remove the row"
        )
    return encode(toks), label


def expression_value(source: str) -> int:
    """The value of a release ``Source`` text, read token by token; ValueError says where it is malformed
    (a parenthesis or a bracket that does not close or closes nothing, an operator without an argument,
    a value outside every operator)."""
    depth, stack, value = 0, [], None
    for position, token in enumerate(source.split(), start=1):
        if token in ("(", ")"):
            depth += 1 if token == "(" else -1
            if depth < 0:
                raise ValueError(f"')' at token {position} closes no '('")
            continue
        if token in trees.OPERATORS:
            stack.append((token, []))
            continue
        if token == trees.CLOSE:
            if not stack:
                raise ValueError(f"']' at token {position} closes no operator")
            operator, args = stack.pop()
            if not args:
                raise ValueError(f"{operator} closed at token {position} has no argument")
            number = trees.evaluate((operator, args))
        else:
            number = int(token)
        if stack:
            stack[-1][1].append(number)
        elif value is None:
            value = number
        else:
            raise ValueError(f"token {position} ({token!r}) lies outside the expression")
    if stack:
        raise ValueError(f"{len(stack)} operator(s) not closed by ']'")
    if depth:
        raise ValueError(f"{depth} '(' not closed")
    return value


def official_dir(data_dir: Path, subdir: str) -> Path:
    return Path(data_dir) / subdir


def official_present(data_dir: Path, subdir: str) -> bool:
    folder = official_dir(data_dir, subdir)
    return all((folder / name).is_file() for name in OFFICIAL_FILES.values())


def official_files_missing(cfg, data_dir: Path) -> str | None:
    """The release files ``data_dir`` lacks (``task.source=auto`` generates ListOps then), or None."""
    folder = official_dir(data_dir, cfg["official_subdir"])
    missing = [str(folder / n) for n in OFFICIAL_FILES.values() if not (folder / n).is_file()]
    return ("no " + ", ".join(missing)) if missing else None


def load_official(
    data_dir: Path, subdir: str, max_len: int, truncate: bool = False
) -> tuple[dict[str, np.ndarray], dict]:
    """The release's three TSVs as id arrays ``[N, max_len]``. A row longer than ``max_len`` tokens is refused,
    naming its file and line (the release's rows are shorter than 2,000 by construction), unless ``truncate``:
    then it is cut and counted."""
    folder = official_dir(data_dir, subdir)
    if not official_present(data_dir, subdir):
        missing = [str(folder / n) for n in OFFICIAL_FILES.values() if not (folder / n).is_file()]
        raise DataMissing(
            "ListOps official files not found: " + ", ".join(missing) + ". Get them from the LRA "
            "release (lra_release/listops-1000/) and point data_dir at the folder holding "
            f"'{subdir}/', or set task.source=generated to generate ListOps instead."
        )
    arrays: dict[str, np.ndarray] = {}
    meta: dict = {"source": "official", "folder": str(folder), "truncated": {}}
    for split, name in OFFICIAL_FILES.items():
        rows, labels = read_official_tsv(folder / name)
        if not truncate and (long := next((i for i, row in enumerate(rows) if len(row) > max_len), None)) is not None:
            why = "the release's rows are shorter than 2000 tokens"
            raise too_long(f"{folder / name}:{long + 2}", len(rows[long]), "tokens", max_len, why)  # line 1: header
        arrays[f"{split}_x"], meta["truncated"][split] = pad(rows, max_len)
        arrays[f"{split}_y"] = labels
    return arrays, meta


# ---------------------------------------------------------------- generator


def _chunk_ids(args) -> tuple[list[np.ndarray], list[int]]:
    seed, chunk, spec = args
    ids, labels = [], []
    for tree in trees.generate_chunk(seed, chunk, CHUNK, spec):
        ids.append(encode(trees.tokens(tree)))
        labels.append(trees.evaluate(tree))
    return ids, labels


def _chunk_file(parts: Path, chunk: int) -> Path:
    return parts / f"chunk{chunk:06d}.npz"


def _save_chunk(parts: Path, chunk: int, ids: list[np.ndarray], labels: list[int]) -> None:
    """One chunk's token ids and labels, written under a temporary name and renamed into place."""
    parts.mkdir(parents=True, exist_ok=True)
    tmp = parts / f".chunk{chunk:06d}.{secrets.token_hex(4)}.npz"
    try:
        with open(tmp, "wb") as handle:
            tokens = np.concatenate(ids) if ids else np.zeros(0, dtype=np.uint8)
            lengths = np.asarray([len(row) for row in ids], dtype=np.int64)
            np.savez(handle, tokens=tokens, lengths=lengths, labels=np.asarray(labels, dtype=np.int64))
        os.replace(tmp, _chunk_file(parts, chunk))
    finally:
        tmp.unlink(missing_ok=True)


def _load_chunk(parts: Path, chunk: int) -> tuple[list[np.ndarray], list[int]] | None:
    """A kept chunk, or None when it is damaged (then removed, with a warning, to be drawn again)."""
    path = _chunk_file(parts, chunk)
    try:
        with np.load(path, allow_pickle=False) as stored:  # a zip: each array's CRC-32 is checked on reading
            tokens, lengths, labels = stored["tokens"], stored["lengths"], stored["labels"]
        if len(lengths) != len(labels) or int(lengths.sum()) != len(tokens):
            raise ValueError("its lengths do not add up to its tokens")
    except (OSError, ValueError, KeyError, EOFError, SyntaxError, zipfile.BadZipFile) as err:  # npy header: SyntaxError
        print(f"warning: {path} is damaged ({type(err).__name__}: {err}); drawing it again", file=sys.stderr)
        path.unlink(missing_ok=True)
        return None
    return np.split(tokens, np.cumsum(lengths)[:-1]), labels.tolist()


def _chunk_results(
    seed: int, spec: trees.TreeSpec, chunks: range, pool, parts: Path | None
) -> Iterator[tuple[list[np.ndarray], list[int]]]:
    """The chunks' (ids, labels) in order: kept ones read from ``parts``, the others drawn (by ``pool``
    when given) and kept there."""
    kept = {c for c in chunks if parts is not None and _chunk_file(parts, c).exists()}
    jobs = [(seed, c, spec) for c in chunks if c not in kept]
    drawn = pool.imap(_chunk_ids, jobs) if pool else map(_chunk_ids, jobs)
    for c in chunks:
        found = _load_chunk(parts, c) if c in kept else None
        if found is None:
            found = _chunk_ids((seed, c, spec)) if c in kept else next(drawn)  # kept but damaged: drawn here
            if parts is not None:
                _save_chunk(parts, c, *found)
        yield found


def generate(
    n_train: int,
    n_val: int,
    n_test: int,
    seed: int,
    spec: trees.TreeSpec,
    workers: int = 1,
    parts: Path | None = None,
) -> tuple[dict[str, np.ndarray], dict]:
    """Distinct trees split train/val/test, reproducible by ``seed`` whatever ``workers`` is. ``parts``: a
    folder keeping each chunk as it is drawn, from which an interrupted generation resumes (module docstring)."""
    total = n_train + n_val + n_test
    seen: set[bytes] = set()
    rows: list[np.ndarray] = []
    labels: list[int] = []
    duplicates = 0
    chunk = 0
    kept = len(list(parts.glob("chunk*.npz"))) if parts is not None and parts.is_dir() else 0
    if kept:
        print(f"ListOps generation: resuming from the {kept} chunk(s) of {CHUNK:,} trees kept in {parts}", flush=True)
    bar = tqdm(total=total, desc="generating ListOps", unit="tree", leave=False)
    pool = mp.get_context("spawn").Pool(workers) if workers > 1 else None
    try:
        while len(rows) < total:
            need_chunks = max(1, -(-(total - len(rows)) // CHUNK))
            batch = range(chunk, chunk + need_chunks)
            chunk += need_chunks
            for ids, labs in _chunk_results(seed, spec, batch, pool, parts):
                before = len(rows)
                for row, label in zip(ids, labs, strict=True):
                    if len(rows) == total:
                        break
                    key = row.tobytes()
                    if key in seen:
                        duplicates += 1
                        continue
                    seen.add(key)
                    rows.append(row)
                    labels.append(label)
                bar.update(len(rows) - before)  # a chunk at a time, so the rate shown is the chunks' rate
    finally:
        bar.close()
        if pool:
            pool.terminate()
    x, truncated = pad(rows, spec.max_len)
    assert truncated == 0, "generated lengths are below max_len by construction"
    y = np.asarray(labels, dtype=np.int64)
    cuts = np.cumsum([0, n_train, n_val, n_test])
    arrays = {}
    for i, split in enumerate(SPLITS):
        arrays[f"{split}_x"] = x[cuts[i] : cuts[i + 1]]
        arrays[f"{split}_y"] = y[cuts[i] : cuts[i + 1]]
    meta = {
        "source": "generated",
        "seed": seed,
        "duplicates_dropped": duplicates,
        "truncated": {s: 0 for s in SPLITS},
    }
    return arrays, meta


def write_tsv(path: Path, sources_and_labels: list[tuple[str, int]]) -> None:
    """Write trees in the release's TSV layout (for exports and reader tests)."""
    with open(path, "w", newline="") as handle:
        handle.write("Source\tTarget\n")
        for source, label in sources_and_labels:
            handle.write(f"{source}\t{label}\n")


# ---------------------------------------------------------------- task entry


def build(cfg, data_dir: Path, cache_dir: Path, workers: int = 1) -> TaskData:
    """The ListOps task from ``cfg`` (see experiments/conf/task/listops.yaml)."""
    source = cfg["source"]
    max_len = int(cfg["max_len"])
    truncate = bool(cfg.get("truncate", False))
    if source not in ("auto", "official", "generated"):
        raise ValueError(f"task.source={source!r}: use auto, official or generated")
    if source == "auto":
        source = "official" if official_present(data_dir, cfg["official_subdir"]) else "generated"

    if source == "official":
        params = {
            "source": "official",
            "folder": str(official_dir(data_dir, cfg["official_subdir"]).resolve()),
            "max_len": max_len,
            **({"truncate": True} if truncate else {}),  # the default's entries keep their key
        }
        folder = official_dir(data_dir, cfg["official_subdir"])
        arrays, meta = cached_arrays(
            cache_dir,
            "listops",
            params,
            lambda: load_official(data_dir, cfg["official_subdir"], max_len, truncate),
            sources=[folder / name for name in OFFICIAL_FILES.values()],
        )
        report_truncated("listops", meta["truncated"], max_len, "rows")
    else:
        gen = cfg["generate"]
        spec = trees.TreeSpec(
            max_depth=int(gen["max_depth"]),
            max_args=int(gen["max_args"]),
            min_len=int(gen["min_len"]),
            max_len=int(gen["max_len"]),
        )
        if spec.max_len > max_len:
            raise ValueError(f"task.generate.max_len={spec.max_len} exceeds task.max_len={max_len}")
        sizes = {k: int(gen[k]) for k in ("n_train", "n_val", "n_test")}
        seed = int(cfg["data_seed"])
        params = {"source": "generated", "seed": seed, "chunk": CHUNK, **sizes, **asdict(spec)}

        def make():
            parts = parts_path(cache_dir, "listops", params)
            arrays, meta = generate(seed=seed, spec=spec, workers=workers, parts=parts, **sizes)
            if spec.max_len < max_len:
                arrays = {
                    k: (np.pad(v, ((0, 0), (0, max_len - spec.max_len))) if k.endswith("_x") else v)
                    for k, v in arrays.items()
                }
            return arrays, meta

        arrays, meta = cached_arrays(cache_dir, "listops", params, make)

    splits = {s: Split(arrays[f"{s}_x"], arrays[f"{s}_y"]) for s in SPLITS}
    return TaskData(
        name="listops",
        num_classes=NUM_CLASSES,
        vocab_size=len(VOCAB),
        max_len=max_len,
        info={**meta, "sizes": {s: len(v) for s, v in splits.items()}},
        **splits,
    )


def shape(cfg) -> TaskData:
    """The ListOps task of ``cfg`` without examples."""
    return empty_task(cfg, (int(cfg["max_len"]),), NUM_CLASSES, len(VOCAB))


TASKS.register("listops")(
    TaskEntry(build, shape, titles={"listops": "ListOps"}, official_files_missing=official_files_missing)
)

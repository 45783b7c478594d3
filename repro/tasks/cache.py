"""On-disk cache of tokenised arrays, keyed by the parameters that made them and the bytes they were read from.

An entry built from files (the official data) is keyed by the sha256 of their contents too
(``source_sha256``), so a changed file is a new entry, never the old arrays under its name. The
digest of each file is remembered with its size and modification time
(``<cache_dir>/<task>/.sources/``) and computed again only when they change.

An entry is a folder ``<cache_dir>/<task>/<key>/`` of ``.npy`` files plus
``meta.json`` (which holds each file's sha256); it is written under a temporary name and
renamed into place, so a crashed build never leaves a half-written entry. Arrays load
memory-mapped, after their checksums are checked: a damaged entry (an edited, truncated or
missing file) is named in a warning and built again. Entries written before checksums were
kept are checked by loading only (a truncated file is caught, an edited one is not).

One process builds an entry at a time: a builder holds ``<cache_dir>/<task>/.<key>.lock``
(``flock``), and another process asking for the same entry waits, then loads what the first
stored. Without it, grid cells started together on generated data each drew the whole set (four
Pathfinder cells on one host: four builds of 200,000 images sharing its cores). The kernel drops
the lock when its holder exits, so a crashed build leaves none behind. Where ``fcntl`` is missing
(not POSIX) there is no lock: concurrent builders each build and the first to store wins.

A builder may keep pieces of an entry in progress in ``<cache_dir>/<task>/.<key>.parts/``
(``parts_path``), so that a build interrupted resumes from them (ListOps' chunks of trees); the
folder is removed once the entry is stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..records import digest_json, file_sha256

try:
    import fcntl
except ImportError:  # not POSIX: no build lock (module docstring)
    fcntl = None

CACHE_FORMAT = 1


def cache_key(params: dict) -> str:
    """A short stable hash of JSON-serialisable parameters."""
    return digest_json({"format": CACHE_FORMAT, **params})[:16]


def parts_path(cache_dir: str | os.PathLike, task: str, params: dict) -> Path:
    """The folder where the build of ``params``' entry may keep its pieces (module docstring)."""
    return Path(cache_dir) / task / f".{cache_key(params)}.parts"


def source_files(sources: list[Path]) -> list[tuple[str, Path]]:
    """``(name, path)`` of every file the ``sources`` (files or folders) hold, in a fixed order; a name is
    the source's index and the path below it, so that the digest does not depend on where the data lies."""
    found = []
    for i, source in enumerate(map(Path, sources)):
        if source.is_dir():
            files = sorted(p for p in source.rglob("*") if p.is_file())
            found += [(f"{i}/{p.relative_to(source).as_posix()}", p) for p in files]
        elif source.exists():
            found.append((f"{i}", source))
        else:
            found.append((f"{i} (missing)", source))
    return found


def source_digest(sources: list[Path], memo_dir: Path) -> str:
    """sha256 of the contents of ``sources`` (each file's name and sha256). A file's digest is taken from
    the memo under ``memo_dir`` when its size and modification time are those it had when it was hashed."""
    files = source_files(sources)
    where = hashlib.sha256(json.dumps([str(Path(s).resolve()) for s in sources]).encode()).hexdigest()[:16]
    memo_path = memo_dir / f"{where}.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    fresh, listing = {}, []
    for name, path in files:
        if not path.exists():
            listing.append([name, None])
            continue
        stat = path.stat()
        key = str(path.resolve())
        seen = memo.get(key) if isinstance(memo, dict) else None
        stamp = [stat.st_size, stat.st_mtime_ns]
        digest = seen[2] if isinstance(seen, list) and len(seen) == 3 and seen[:2] == stamp else file_sha256(path)
        fresh[key] = [*stamp, digest]
        listing.append([name, digest])
    if fresh != memo:
        memo_dir.mkdir(parents=True, exist_ok=True)
        tmp = memo_dir / f".{memo_path.name}.{secrets.token_hex(6)}"
        try:
            tmp.write_text(json.dumps(fresh, sort_keys=True))
            os.replace(tmp, memo_path)
        finally:
            tmp.unlink(missing_ok=True)
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


def cached_arrays(
    cache_dir: str | os.PathLike,
    task: str,
    params: dict,
    build: Callable[[], tuple[dict[str, np.ndarray], dict]],
    sources: list[Path] | None = None,
) -> tuple[dict[str, np.ndarray], dict]:
    """Load the arrays for ``params`` from the cache, building and storing them on a miss.

    ``build`` returns ``(arrays, meta)``; ``meta`` must be JSON-serialisable. ``sources``: the files or
    folders ``build`` reads; their contents' digest joins the key (``source_digest``).
    Returns ``(arrays, meta)`` with ``meta["cache_hit"]`` telling which happened.
    """
    if sources:
        params = {**params, "source_sha256": source_digest(sources, Path(cache_dir) / task / ".sources")}
    entry = Path(cache_dir) / task / cache_key(params)
    found = load_whole(entry)
    if found is not None:
        return found
    with build_lock(entry):
        found = load_whole(entry)  # another process may have built it while this one waited
        if found is not None:
            return found
        for stale in entry.parent.glob(f".{entry.name}.*"):  # a killed build's temporary folder (the lock is ours)
            if stale.is_dir() and stale.suffix != ".parts":  # a build's kept pieces stay (parts_path)
                shutil.rmtree(stale, ignore_errors=True)
        stored = store(entry, params, *build())
        shutil.rmtree(parts_path(cache_dir, task, params), ignore_errors=True)  # the entry holds them now
        return stored


def load_whole(entry: Path) -> tuple[dict[str, np.ndarray], dict] | None:
    """The entry's arrays and meta, or None when it is missing or damaged (then removed, with a warning)."""
    if not entry.exists():  # entries appear whole (a rename): one without its files is damaged
        return None
    try:
        return load_entry(entry)
    except DamagedEntry as err:
        print(f"warning: cache entry {entry} is damaged ({err}); building it again", file=sys.stderr, flush=True)
        shutil.rmtree(entry, ignore_errors=True)
        return None


@contextmanager
def build_lock(entry: Path) -> Iterator[None]:
    """Hold the entry's lock file exclusively for the block; say so when another process holds it."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield
        return
    with open(entry.parent / f".{entry.name}.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process to build cache entry {entry}", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def store(entry: Path, params: dict, arrays: dict[str, np.ndarray], meta: dict) -> tuple[dict[str, np.ndarray], dict]:
    """Write the arrays and meta.json under a temporary name, then rename it into place as ``entry``."""
    meta_file = entry / "meta.json"
    tmp = entry.parent / f".{entry.name}.{secrets.token_hex(6)}"
    tmp.mkdir()  # the umask's permissions, as the entry's files get
    try:
        for name, array in arrays.items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(array))
        digests = {name: file_sha256(tmp / f"{name}.npy") for name in arrays}
        record = {"params": params, "arrays": sorted(arrays), "sha256": digests, "meta": meta}
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


class DamagedEntry(Exception):
    """A cache entry's files do not match its ``meta.json`` or cannot be read."""


def load_entry(entry: Path) -> tuple[dict[str, np.ndarray], dict]:
    """The arrays and meta of a cache entry, memory-mapped, after checking each file's sha256."""
    try:
        record = json.loads((entry / "meta.json").read_text())
        names, digests, meta = record["arrays"], record.get("sha256", {}), record["meta"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise DamagedEntry(f"meta.json: {type(err).__name__}: {err}") from None
    arrays = {}
    for name in names:
        path = entry / f"{name}.npy"
        try:
            if name in digests and file_sha256(path) != digests[name]:
                raise DamagedEntry(f"{path.name}: sha256 differs from meta.json")
            arrays[name] = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as err:
            raise DamagedEntry(f"{path.name}: {type(err).__name__}: {err}") from None
    return arrays, {**meta, "cache_hit": True, "cache_entry": str(entry)}

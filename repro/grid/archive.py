"""A slot's results into at most K ``tar.gz`` files of at most M MiB each plus a manifest; and back (``--resume-from``).

What is carried, in this order of priority (an item that fits nowhere is left out whole, named
on stderr and in the manifest's ``left_out``, and the grid command exits 1):

1. every complete record under ``runs/`` (``config.yaml``, ``history.csv``, ``predictions.csv``,
   ``metrics.json``; never its ``checkpoints/``), then ``grid_log.csv``;
2. each unfinished run's ``config.yaml`` with ``checkpoints/last.pt`` and ``best.pt`` (and their
   ``.sha256``), the most trained first (``elapsed_s`` of ``last.pt``). ``best.pt`` is carried
   too: the resumed run scores the test set with it at the end;
3. the cells' logs (``grid_logs/*.log``).

Each file is cut into pieces of at most 4 MiB (``<path>.partNNN`` when cut), and each piece is
a tar member compressed as its own gzip member: a ``.tar.gz`` of concatenated gzip members is
read by ``tar xzf`` and Python's ``tarfile`` alike, and its size is known exactly before it is
written, so the limits hold to the byte. ``grid-manifest.json`` lists every archive's size and
sha256 and every file's size, sha256 and pieces.

Unpacking checks every sha256 first, then writes each record with ``metrics.json`` last, never
over a different complete record (an error names it); a checkpoint replaces a local one only
when it has trained more steps, and is skipped when the run's record is complete here;
``grid_log.csv`` and the logs keep the local lines and add the archive's lines they lack.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import records
from .cells import GridError
from .runs import checkpoint_state, complete_metrics
from .schedule import utc_now

MANIFEST = "grid-manifest.json"
PIECE_BYTES = 4 * 2**20
CHECKPOINT_FILES = (
    "checkpoints/best.pt",
    "checkpoints/best.pt.sha256",
    "checkpoints/last.pt",
    "checkpoints/last.pt.sha256",
)
_END = gzip.compress(b"\0" * 1024, compresslevel=6, mtime=0)  # tar's end: two zero blocks


def archive_name(index: int) -> str:
    return f"grid-{index + 1:02d}.tar.gz"


@dataclass
class Unit:
    """Files that travel together or not at all; ``folder``: a run's folder (records, checkpoints)."""

    kind: str  # record | checkpoint | log
    label: str
    files: list[str]
    folder: str = ""


def collect_units(root: Path) -> list[Unit]:
    """What ``root`` (an output folder) holds to carry, in order of priority."""
    root = Path(root)
    done, unfinished = [], []
    for config in sorted(root.glob("runs/**/config.yaml")):
        folder = config.parent
        rel = folder.relative_to(root).as_posix()
        if complete_metrics(folder) is not None:
            names = [n for n in records.RECORD_FILES if (folder / n).exists()]
            done.append(Unit("record", f"record {rel}", [f"{rel}/{n}" for n in names], rel))
        elif (folder / "checkpoints" / "last.pt").exists():
            names = ["config.yaml", *[n for n in CHECKPOINT_FILES if (folder / n).exists()]]
            state = checkpoint_state(folder) or {"elapsed_s": 0.0}
            unfinished.append(
                (-state["elapsed_s"], rel, Unit("checkpoint", f"checkpoint {rel}", [f"{rel}/{n}" for n in names], rel))
            )
    units = done + ([Unit("log", "grid_log.csv", ["grid_log.csv"])] if (root / "grid_log.csv").exists() else [])
    units += [unit for *_, unit in sorted(unfinished, key=lambda item: item[:2])]
    logs = sorted(p.relative_to(root).as_posix() for p in root.glob("grid_logs/*.log"))
    return units + [Unit("log", f"log {name}", [name]) for name in logs]


def _member(name: str, data: bytes) -> bytes:
    """One tar member (PAX header, data, padding) as its own gzip member."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    block = info.tobuf(format=tarfile.PAX_FORMAT) + data + b"\0" * (-len(data) % 512)
    return gzip.compress(block, compresslevel=6, mtime=0)


@dataclass
class _Packer:
    max_archives: int
    limit: int
    piece_bytes: int = PIECE_BYTES
    archives: list = field(default_factory=list)  # per archive: list of compressed members
    sizes: list = field(default_factory=list)

    def _place(self, size: int) -> int | None:
        for i, used in enumerate(self.sizes):
            if used + size + len(_END) <= self.limit:
                return i
        if len(self.sizes) < self.max_archives and size + len(_END) <= self.limit:
            self.archives.append([])
            self.sizes.append(0)
            return len(self.sizes) - 1
        return None

    def add(self, root: Path, unit: Unit) -> list[dict] | None:
        """Place every piece of ``unit``; None (and nothing placed) when one does not fit."""
        mark = ([len(a) for a in self.archives], list(self.sizes))
        entries = []
        for path in unit.files:
            data = (root / path).read_bytes()
            pieces = []
            for number, offset in enumerate(range(0, max(len(data), 1), self.piece_bytes)):
                chunk = data[offset : offset + self.piece_bytes]
                member = path if len(data) <= self.piece_bytes else f"{path}.part{number:03d}"
                blob = _member(member, chunk)
                index = self._place(len(blob))
                if index is None:
                    # back to the mark: drop the archives this unit opened, trim the others
                    opened = len(mark[0])
                    self.archives = [a[:n] for a, n in zip(self.archives[:opened], mark[0], strict=True)]
                    self.sizes = mark[1]
                    return None
                self.archives[index].append(blob)
                self.sizes[index] += len(blob)
                pieces.append({"archive": archive_name(index), "member": member, "offset": offset, "bytes": len(chunk)})
            digest = hashlib.sha256(data).hexdigest()
            entries.append({"path": path, "bytes": len(data), "sha256": digest, "pieces": pieces})
        return entries


def pack(root: Path, out: Path, max_files: int = 8, max_mib: float = 16.0, piece_bytes: int = PIECE_BYTES) -> dict:
    """Write ``root``'s results into ``out`` (archives and ``grid-manifest.json``); returns the manifest.

    ``max_files`` counts the manifest. What did not fit is named on stderr and in ``left_out``.
    """
    if max_files < 2:
        raise GridError(f"--archive-files {max_files}: needs at least 2 (one archive and the manifest)")
    root, out, limit = Path(root), Path(out), int(max_mib * 2**20)
    packer, units, left_out = _Packer(max_files - 1, limit, piece_bytes), [], []
    for unit in collect_units(root):
        entries = packer.add(root, unit)
        size = sum((root / p).stat().st_size for p in unit.files)
        if entries is None:
            left_out.append({"unit": unit.label, "kind": unit.kind, "bytes": size})
            continue
        units.append({"kind": unit.kind, "label": unit.label, "folder": unit.folder, "files": entries})
    out.mkdir(parents=True, exist_ok=True)
    archives = []
    for index, blobs in enumerate(packer.archives):
        data = b"".join(blobs) + _END
        records.write_atomic(out / archive_name(index), data)
        archives.append({"name": archive_name(index), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    for stale in out.glob("grid-[0-9][0-9].tar.gz"):
        if stale.name not in {a["name"] for a in archives}:
            stale.unlink()
    limits = {"files": max_files, "mib": max_mib}
    manifest = {
        "format": 1,
        "written_utc": utc_now(),
        "source": str(root),
        "limits": limits,
        "archives": archives,
        "units": units,
        "left_out": left_out,
    }
    records.write_atomic(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return manifest


def _safe(path: str, where: Path) -> str:
    parts = Path(path).parts
    if not path or Path(path).is_absolute() or ".." in parts:
        raise GridError(f"{where}: unsafe path {path!r} in the archive; it must stay inside the output folder")
    return path


def read_archives(folder: Path) -> tuple[dict, dict[str, bytes]]:
    """The manifest of ``folder`` and every file's bytes, each sha256 checked."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as err:
        raise GridError(f"{folder / MANIFEST}: cannot read it ({err}); pass a folder --archive-to wrote") from err
    for unit in manifest["units"]:
        for entry in unit["files"]:
            _safe(entry["path"], folder / MANIFEST)
        if unit["folder"]:
            _safe(unit["folder"], folder / MANIFEST)
    wanted = {
        (piece["archive"], piece["member"]): (entry, piece)
        for unit in manifest["units"]
        for entry in unit["files"]
        for piece in entry["pieces"]
    }
    contents = {entry["path"]: bytearray(entry["bytes"]) for unit in manifest["units"] for entry in unit["files"]}
    for archive in manifest["archives"]:
        path = folder / archive["name"]
        data = path.read_bytes() if path.exists() else b""
        if hashlib.sha256(data).hexdigest() != archive["sha256"]:
            raise GridError(f"{path}: missing or its sha256 differs from {MANIFEST}; copy the slot's files again")
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar:
                entry, piece = wanted.get((archive["name"], member.name), (None, None))
                if entry is None or not member.isfile() or member.size != piece["bytes"]:
                    raise GridError(f"{path}: member {member.name!r} is not in {MANIFEST} as a file of that size")
                start = piece["offset"]
                contents[entry["path"]][start : start + piece["bytes"]] = tar.extractfile(member).read()
    for unit in manifest["units"]:
        for entry in unit["files"]:
            if hashlib.sha256(contents[entry["path"]]).hexdigest() != entry["sha256"]:
                raise GridError(f"{folder}: {entry['path']} reassembled differs from its sha256 in {MANIFEST}")
    return manifest, {path: bytes(data) for path, data in contents.items()}

"""A slot's results into numbered ``tar.gz`` parts of at most M MiB each plus a manifest, grouped into
transfers; and back (``--resume-from``, through ``parts``).

What is carried, in this order of priority (an item that fits nowhere is left out whole, named
on stderr and in the manifest's ``left_out``, and the grid command exits 1):

1. every complete record under ``runs/`` (``config.yaml``, ``history.csv``, ``predictions.csv``,
   ``metrics.json``; never its ``checkpoints/``), then ``grid_log.csv``;
2. each unfinished run's ``config.yaml`` with ``checkpoints/last.pt`` and ``best.pt`` (and their
   ``.sha256``), the most trained first (``elapsed_s`` of ``last.pt``). ``best.pt`` is carried
   too: the resumed run scores the test set with it at the end;
3. the cells' logs (``grid_logs/*.log``).

Each file is cut into pieces of at most 4 MiB, less when a part is smaller (``<path>.partNNN``
when cut), and each piece is a tar member compressed as its own gzip member: a ``.tar.gz`` of
concatenated gzip members is read by ``tar xzf`` and Python's ``tarfile`` alike, and its size
is known exactly before it is written, so the limits hold to the byte. ``grid-manifest.json``
lists every archive (a *part*) with its size, sha256 and transfer, and every file's size,
sha256 and pieces.

A *transfer* is what one call to a lent machine brings back: at most K files (the manifest
counted) of at most T MiB together. With one transfer (the default) the parts and the manifest
lie in the output folder itself; with several, each transfer is a folder ``transfer-NN/``
holding its parts and a copy of the manifest, so that a checkpoint larger than one transfer
comes back over several calls. ``parts`` reads them back from a folder holding the manifest
or from folders of such folders (the transfers, or the inbound copies ``stage`` writes), and
refuses, in one line naming it, a part that is missing or damaged.

Unpacking checks every sha256 first, then writes each record with ``metrics.json`` last, never
over a different complete record (an error names it); a checkpoint replaces a local one only
when it has trained more steps, and is skipped when the run's record is complete here;
``grid_log.csv`` and the logs keep the local lines and add the archive's lines they lack.
"""

from __future__ import annotations

import gzip
import hashlib
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
MANIFEST_RESERVE = 256 * 1024  # bytes each transfer keeps for its copy of the manifest
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


def transfer_name(number: int) -> str:
    """The folder of transfer ``number`` (1, 2, ...) when a slot's parts span several."""
    return f"transfer-{number:02d}"


@dataclass
class _Packer:
    """First fit of compressed members into parts; a part belongs to one transfer, opened in turn."""

    per_transfer: int  # parts in a transfer (its files less the manifest)
    max_transfers: int
    limit: int  # bytes of a part
    transfer_limit: int  # bytes of a transfer's parts
    piece_bytes: int = PIECE_BYTES
    archives: list = field(default_factory=list)  # per part: list of compressed members
    sizes: list = field(default_factory=list)
    transfer_of: list = field(default_factory=list)  # per part: its transfer, from 0

    def _transfer_bytes(self, transfer: int) -> int:
        return sum(size + len(_END) for size, t in zip(self.sizes, self.transfer_of, strict=True) if t == transfer)

    def _place(self, size: int) -> int | None:
        for i, used in enumerate(self.sizes):
            fits_part = used + size + len(_END) <= self.limit
            if fits_part and self._transfer_bytes(self.transfer_of[i]) + size <= self.transfer_limit:
                return i
        if size + len(_END) > min(self.limit, self.transfer_limit):
            return None
        transfer = self.transfer_of[-1] if self.transfer_of else 0
        full = self.transfer_of.count(transfer) >= self.per_transfer
        if self.transfer_of and (full or self._transfer_bytes(transfer) + size + len(_END) > self.transfer_limit):
            transfer += 1
        if transfer >= self.max_transfers:
            return None
        self.archives.append([])
        self.sizes.append(0)
        self.transfer_of.append(transfer)
        return len(self.sizes) - 1

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
                    # back to the mark: drop the parts this unit opened, trim the others
                    opened = len(mark[0])
                    self.archives = [a[:n] for a, n in zip(self.archives[:opened], mark[0], strict=True)]
                    self.sizes, self.transfer_of = mark[1], self.transfer_of[:opened]
                    return None
                self.archives[index].append(blob)
                self.sizes[index] += len(blob)
                pieces.append({"archive": archive_name(index), "member": member, "offset": offset, "bytes": len(chunk)})
            digest = hashlib.sha256(data).hexdigest()
            entries.append({"path": path, "bytes": len(data), "sha256": digest, "pieces": pieces})
        return entries


def _clear(out: Path, keep: set[Path]) -> None:
    """Remove the parts, manifests and transfer folders of an earlier pack into ``out`` that ``keep`` lacks."""
    for folder in [out, *sorted(out.glob("transfer-[0-9][0-9]"))]:
        for stale in [*folder.glob("grid-[0-9][0-9]*.tar.gz"), folder / MANIFEST]:
            if stale.is_file() and stale not in keep:
                stale.unlink()
        if folder != out and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _limits(max_files: int, max_mib: float, transfer_mib: float) -> tuple[int, int, int]:
    """(parts a transfer holds, bytes a part holds, bytes a transfer's parts hold): a transfer's files less
    its manifest, and its MiB less the room kept for the manifest's copy."""
    return max_files - 1, int(max_mib * 2**20), int(transfer_mib * 2**20) - MANIFEST_RESERVE


def room_bytes(max_files: int = 8, max_mib: float = 16.0, transfers: int = 1, transfer_mib: float = 64.0) -> int:
    """The most bytes ``pack`` can hold with these limits (before compression and the parts' framing)."""
    parts, limit, transfer_limit = _limits(max_files, max_mib, transfer_mib)
    return transfers * max(0, min(parts * limit, transfer_limit))


def pack(
    root: Path,
    out: Path,
    max_files: int = 8,
    max_mib: float = 16.0,
    piece_bytes: int = PIECE_BYTES,
    transfers: int = 1,
    transfer_mib: float = 64.0,
) -> dict:
    """Write ``root``'s results into ``out`` (parts and ``grid-manifest.json``); returns the manifest.

    Each of at most ``transfers`` transfers holds at most ``max_files`` files, its copy of the
    manifest counted, of at most ``transfer_mib`` MiB together. What did not fit is named in
    ``left_out``.
    """
    if max_files < 2:
        raise GridError(f"--archive-files {max_files}: needs at least 2 (one archive and the manifest)")
    if transfers < 1:
        raise GridError(f"--archive-transfers {transfers}: give 1 or more")
    if transfer_mib * 2**20 <= MANIFEST_RESERVE:
        raise GridError(f"--archive-transfer-mib {transfer_mib:g}: give more than {MANIFEST_RESERVE // 1024} KiB")
    root, out = Path(root), Path(out)
    per_transfer, limit, transfer_limit = _limits(max_files, max_mib, transfer_mib)
    # a piece fits an empty part: room for its tar header and gzip's framing (incompressible data grows 0.03%)
    piece_bytes = max(512, min(piece_bytes, (min(limit, transfer_limit) - 8192) * 9 // 10))
    packer = _Packer(per_transfer, transfers, limit, transfer_limit, piece_bytes)
    units, left_out = [], []
    for unit in collect_units(root):
        entries = packer.add(root, unit)
        size = sum((root / p).stat().st_size for p in unit.files)
        if entries is None:
            left_out.append({"unit": unit.label, "kind": unit.kind, "bytes": size})
            continue
        units.append({"kind": unit.kind, "label": unit.label, "folder": unit.folder, "files": entries})
    used = sorted(set(packer.transfer_of)) or [0]
    folder_of = {t: out if transfers == 1 else out / transfer_name(t + 1) for t in used}
    archives, written = [], set()
    for index, blobs in enumerate(packer.archives):
        data = b"".join(blobs) + _END
        transfer = packer.transfer_of[index]
        path = folder_of[transfer] / archive_name(index)
        path.parent.mkdir(parents=True, exist_ok=True)
        records.write_atomic(path, data)
        written.add(path)
        archives.append(
            {
                "name": archive_name(index),
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "transfer": transfer + 1,
            }
        )
    limits = {"files": max_files, "mib": max_mib, "transfers": transfers, "transfer_mib": transfer_mib}
    manifest = {
        "format": 2,
        "written_utc": utc_now(),
        "source": str(root),
        "limits": limits,
        "transfers": len(used),
        "archives": archives,
        "units": units,
        "left_out": left_out,
    }
    text = json.dumps(manifest, indent=1) + "\n"
    if len(text.encode()) > MANIFEST_RESERVE:
        raise GridError(
            f"{out / MANIFEST}: {len(text.encode())} bytes, more than the {MANIFEST_RESERVE} each transfer keeps for "
            "it; pack with a larger --archive-mib"
        )
    for folder in folder_of.values():
        folder.mkdir(parents=True, exist_ok=True)
        records.write_atomic(folder / MANIFEST, text)
        written.add(folder / MANIFEST)
    _clear(out, written)
    return manifest


def _safe(path: str, where: Path) -> str:
    parts = Path(path).parts
    if not path or Path(path).is_absolute() or ".." in parts:
        raise GridError(f"{where}: unsafe path {path!r} in the archive; it must stay inside the output folder")
    return path

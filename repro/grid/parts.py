"""A slot's parts (``archive.pack``) read back, staged for a fresh machine and assembled there.

A slot's parts may come back over several calls (``transfer-NN/`` folders) and go to the next
machine over several calls too, each carrying the checkout (and the first the data) beside
them: ``stage`` says which parts go in which inbound transfer and can copy them into
``inbound-NN/`` folders, each with a copy of the manifest; ``assemble``, on the machine, checks
every part's sha256 and writes the complete set into one folder, which ``--resume-from`` takes.

Wherever parts are read, a folder is either one holding ``grid-manifest.json`` or one whose
subfolders hold it; every copy of the manifest found must be the same. A part missing or
damaged is refused in one line that names it and its transfer, before anything is written.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

from .. import records
from .archive import MANIFEST, _safe
from .cells import GridError

INBOUND = "inbound-{:02d}"


def manifest_folders(folders: list[Path]) -> list[Path]:
    """Each folder holding a manifest: a given folder itself, or its subfolders when it holds none."""
    found = []
    for folder in map(Path, folders):
        if (folder / MANIFEST).is_file():
            found.append(folder)
        elif folder.is_dir():
            found += sorted(sub for sub in folder.iterdir() if (sub / MANIFEST).is_file())
    if not found:
        raise GridError(
            f"{', '.join(map(str, folders))}: no {MANIFEST} there nor in a subfolder; pass the folder that "
            "--archive-to, lra-grid stage or lra-grid assemble wrote"
        )
    return found


def read_manifest(folders: list[Path]) -> tuple[dict, list[Path]]:
    """The manifest the folders hold (every copy the same) and the folders holding a copy."""
    where = manifest_folders(folders)
    texts = []
    for folder in where:
        try:
            texts.append(json.loads((folder / MANIFEST).read_text()))
        except (OSError, ValueError) as err:
            raise GridError(f"{folder / MANIFEST}: cannot read it ({err}); copy that transfer again") from err
    for folder, other in zip(where[1:], texts[1:], strict=True):
        if other != texts[0]:
            raise GridError(
                f"{folder / MANIFEST}: differs from {where[0] / MANIFEST}; give the transfers of one slot only"
            )
    return texts[0], where


def _label(manifest: dict, index: int) -> str:
    archive = manifest["archives"][index]
    return f"part {index + 1} of {len(manifest['archives'])}, in transfer {archive.get('transfer', 1)}"


def verified_parts(folders: list[Path]) -> tuple[dict, dict[str, bytes]]:
    """The manifest and every part's bytes, each part's sha256 checked; a missing or damaged part refused by name.
    Parts are looked for in the folders and their subfolders (a transfer's folder that lost its manifest too)."""
    manifest, _ = read_manifest(folders)
    search = [p for f in map(Path, folders) for p in [f, *sorted(s for s in f.iterdir() if s.is_dir())]]
    parts = {}
    for index, archive in enumerate(manifest["archives"]):
        copies = [folder / archive["name"] for folder in search if (folder / archive["name"]).is_file()]
        if not copies:
            raise GridError(
                f"{', '.join(map(str, folders))}: {archive['name']} ({_label(manifest, index)}) is missing; "
                "copy that transfer again"
            )
        for path in copies:
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() == archive["sha256"]:
                parts[archive["name"]] = data
                break
        else:
            raise GridError(
                f"{copies[0]}: damaged, its sha256 differs from {MANIFEST}'s ({_label(manifest, index)}); "
                "copy that transfer again"
            )
    return manifest, parts


def _reassemble(manifest: dict, parts: dict[str, bytes], where: Path) -> dict[str, bytes]:
    """Every file's bytes from the checked parts, each file's sha256 checked."""
    for unit in manifest["units"]:
        for entry in unit["files"]:
            _safe(entry["path"], where)
        if unit["folder"]:
            _safe(unit["folder"], where)
    wanted = {
        (piece["archive"], piece["member"]): (entry, piece)
        for unit in manifest["units"]
        for entry in unit["files"]
        for piece in entry["pieces"]
    }
    contents = {entry["path"]: bytearray(entry["bytes"]) for unit in manifest["units"] for entry in unit["files"]}
    for name, data in parts.items():
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar:
                entry, piece = wanted.get((name, member.name), (None, None))
                if entry is None or not member.isfile() or member.size != piece["bytes"]:
                    raise GridError(f"{name}: member {member.name!r} is not in {MANIFEST} as a file of that size")
                start = piece["offset"]
                contents[entry["path"]][start : start + piece["bytes"]] = tar.extractfile(member).read()
    for unit in manifest["units"]:
        for entry in unit["files"]:
            if hashlib.sha256(contents[entry["path"]]).hexdigest() != entry["sha256"]:
                raise GridError(f"{where.parent}: {entry['path']} reassembled differs from its sha256 in {MANIFEST}")
    return {path: bytes(data) for path, data in contents.items()}


def read_archives(folder: Path | list[Path]) -> tuple[dict, dict[str, bytes]]:
    """The manifest of ``folder`` (or folders) and every file's bytes, every part's and file's sha256 checked."""
    folders = [folder] if isinstance(folder, (str, Path)) else list(folder)
    manifest, parts = verified_parts(folders)
    return manifest, _reassemble(manifest, parts, Path(folders[0]) / MANIFEST)


def stage_plan(
    manifest: dict, manifest_bytes: int, budget_mib: float, checkout_mib: float, data_mib: float = 0.0
) -> list[list[str]]:
    """The parts of each inbound transfer, in order, within ``budget_mib`` beside what every call carries too: the
    checkout, a copy of the manifest and, in the first call only, the data (which may leave that call no part)."""

    def room(first: bool) -> int:
        return int((budget_mib - checkout_mib - (data_mib if first else 0.0)) * 2**20) - manifest_bytes

    if room(True) < 0:
        raise GridError(
            f"--budget-mib {budget_mib:g}: less than the first call's checkout, data and manifest "
            f"({checkout_mib + data_mib + manifest_bytes / 2**20:.2f} MiB); give the budget a call has"
        )
    groups: list[list[str]] = [[]]
    left = room(True)
    for archive in manifest["archives"]:
        if archive["bytes"] > left:
            if archive["bytes"] > room(False):
                raise GridError(
                    f"{archive['name']}: {archive['bytes'] / 2**20:.2f} MiB does not fit an inbound transfer of "
                    f"--budget-mib {budget_mib:g} beside {budget_mib - room(False) / 2**20:.2f} MiB (the checkout "
                    "and the manifest); pack with a smaller --archive-mib"
                )
            groups.append([])
            left = room(False)
        groups[-1].append(archive["name"])
        left -= archive["bytes"]
    return groups


def stage(
    folders: list[Path], budget_mib: float, checkout_mib: float, data_mib: float = 0.0, to: Path | None = None
) -> list[str]:
    """One line per inbound transfer; with ``to``, each transfer's parts and manifest copied into ``to/inbound-NN``
    (the parts checked first)."""
    manifest, where = read_manifest(folders)
    text = (where[0] / MANIFEST).read_bytes()
    groups = stage_plan(manifest, len(text), budget_mib, checkout_mib, data_mib)
    if to is not None:
        if Path(to).exists() and any(Path(to).iterdir()):
            raise GridError(f"--to {to}: not empty; give a new folder to stage into")
        _, parts = verified_parts(folders)
        for number, names in enumerate(groups, 1):
            folder = Path(to) / INBOUND.format(number)
            folder.mkdir(parents=True, exist_ok=True)
            for name in names:
                records.write_atomic(folder / name, parts[name])
            records.write_atomic(folder / MANIFEST, text)
    sizes = {a["name"]: a["bytes"] for a in manifest["archives"]}
    lines = []
    for number, names in enumerate(groups, 1):
        carried = (sum(sizes[n] for n in names) + len(text)) / 2**20
        beside = checkout_mib + (data_mib if number == 1 else 0)
        target = f" into {Path(to) / INBOUND.format(number)}" if to is not None else ""
        lines.append(
            f"inbound {number} of {len(groups)}{target}: {' '.join(names) or 'no part'} ({carried:.2f} MiB with "
            f"the manifest, "
            f"{carried + beside:.2f} MiB with the checkout{' and data' if number == 1 and data_mib else ''})"
        )
    return lines


def assemble(folders: list[Path], into: Path) -> str:
    """Check every part the folders hold against the manifest and write the complete set into ``into``; a set with
    a part missing or damaged writes nothing. ``into`` appears whole (written beside it, then renamed)."""
    into = Path(into)
    if into.exists():
        raise GridError(f"{into}: already there; give a new folder to assemble into")
    manifest, parts = verified_parts(folders)
    _reassemble(manifest, parts, Path(folders[0]) / MANIFEST)  # every file reassembles to its sha256 too
    text = (manifest_folders(folders)[0] / MANIFEST).read_bytes()
    building = into.with_name(f".{into.name}.assembling-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    for name, data in parts.items():
        (building / name).write_bytes(data)
    (building / MANIFEST).write_bytes(text)
    building.rename(into)
    total = sum(len(d) for d in parts.values()) / 2**20
    return f"assembled {len(parts)} part(s), {total:.2f} MiB, each sha256 checked, into {into}"

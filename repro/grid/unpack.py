"""``--resume-from FOLDER``: put a slot's archives (``archive.pack``) back into an output folder.

FOLDER holds the manifest and every part, or subfolders that do (a slot's ``transfer-NN/``, the
``inbound-NN/`` copies of ``parts.stage``); a part missing or damaged stops it before anything is
written. Every file's sha256 is checked and every conflict found before anything is written: a complete
record here that differs from the archive's stops the unpacking (an error names it); the same
record is skipped. A checkpoint is skipped when the run's record is complete here, or when the
local ``last.pt`` has trained as many steps or more; otherwise it replaces the local one (and
the local ``last.prev.pt`` of the older lineage goes). Record files are written with
``metrics.json`` last, each through a temporary file, so no half record is ever complete.
"""

from __future__ import annotations

import io
from pathlib import Path

from .. import records
from .cells import GridError
from .parts import read_archives
from .runs import checkpoint_state, complete_metrics


def merge_lines(local: str, incoming: str) -> str:
    """An append-only file (grid_log.csv, a cell's log) from two copies: the local lines, then the archive's others."""
    if incoming.startswith(local):
        return incoming
    if local.startswith(incoming):
        return local
    have = set(local.splitlines())
    extra = "".join(line + "\n" for line in incoming.splitlines() if line not in have)
    return local + ("" if not local or local.endswith("\n") else "\n") + extra


def _archived_step(data: bytes) -> int:
    import torch

    return int(torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)["state"]["step"])


def _decide(unit: dict, contents: dict[str, bytes], root: Path) -> str:
    """``write``, or why the unit is skipped; raises GridError for a complete record that differs."""
    if unit["kind"] == "log":
        return "write"
    local = root / unit["folder"]
    if unit["kind"] == "record":
        if complete_metrics(local) is None:
            return "write"
        differ = [
            e["path"]
            for e in unit["files"]
            if not (root / e["path"]).exists() or (root / e["path"]).read_bytes() != contents[e["path"]]
        ]
        if differ:
            raise GridError(
                f"{root / differ[0]}: a complete record here differs from the archive's; move one of them "
                f"away (e.g. to another output_dir) and unpack again"
            )
        return "the same record is here"
    if complete_metrics(local) is not None:
        return "its record is complete here"
    last = f"{unit['folder']}/checkpoints/last.pt"
    state = checkpoint_state(local)
    if state is not None and last in contents and state["step"] >= _archived_step(contents[last]):
        return f"the checkpoint here has trained {state['step']} steps, as many or more"
    return "write"


def _write_unit(unit: dict, contents: dict[str, bytes], root: Path) -> None:
    paths = [e["path"] for e in unit["files"]]
    if unit["kind"] == "log":
        for path in paths:
            target = root / path
            local = target.read_text() if target.exists() else ""
            records.write_atomic(target, merge_lines(local, contents[path].decode()))
        return
    # metrics.json (marks a record complete) and last.pt (marks a run resumable) last
    ordered = sorted(paths, key=lambda p: (p.endswith("metrics.json"), p.endswith(("last.pt", "last.pt.sha256"))))
    for path in ordered:
        records.write_atomic(root / path, contents[path])
    if unit["kind"] == "checkpoint":
        for stale in ("last.prev.pt", "last.prev.pt.sha256"):
            (root / unit["folder"] / "checkpoints" / stale).unlink(missing_ok=True)


def unpack(folder: Path | list[Path], root: Path) -> list[str]:
    """Unpack the parts in ``folder`` (or folders: ``parts.read_archives``) into the output folder ``root``;
    returns one line per unit."""
    manifest, contents = read_archives(folder)
    root = Path(root)
    decisions = [(unit, _decide(unit, contents, root)) for unit in manifest["units"]]
    lines = []
    for unit, decision in decisions:
        if decision == "write":
            _write_unit(unit, contents, root)
            lines.append(f"unpacked {unit['label']}")
        else:
            lines.append(f"skipped {unit['label']}: {decision}")
    if manifest.get("left_out"):
        lines += [f"not in the archives (left out when packed): {item['unit']}" for item in manifest["left_out"]]
    return lines

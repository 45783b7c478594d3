"""Checkpoint files: written atomically with a sha256 beside them, read back with a fallback.

Writing a new ``last.pt`` keeps the one before as ``last.prev.pt``, each with its
``<name>.sha256``; a latest checkpoint that fails its checksum or cannot be unpickled
(truncated by a full disk, a kill mid-copy) falls back to the previous one. What a
checkpoint holds is the training loop's business (repro/training/loop.py); this module
only stores and finds the files.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
from pathlib import Path

import torch

from ..records import describe_fingerprint, write_atomic
from .distributed import DistContext, broadcast_object

# The layout of ``last.pt`` (repro/training/loop.py: model, optimizer, controller, state, rng, rng_ranks).
CHECKPOINT_FORMAT = 1


class CorruptCheckpoint(RuntimeError):
    """A checkpoint file fails its checksum or cannot be loaded."""


def checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def previous_path(path: Path) -> Path:
    """``last.pt`` -> ``last.prev.pt``: the checkpoint before the latest."""
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def save_checkpoint(path: Path, state: dict, keep_previous: bool = False) -> None:
    """Write ``state`` atomically, then its sha256 beside it (``<name>.sha256``).

    ``keep_previous``: first move the current file (and its sha256) to ``previous_path``,
    the fallback when the new one turns out unreadable.
    """
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    if keep_previous and path.exists():
        previous = previous_path(path)
        checksum_path(previous).unlink(missing_ok=True)
        os.replace(path, previous)
        if checksum_path(path).exists():
            os.replace(checksum_path(path), checksum_path(previous))
    write_atomic(path, data)
    write_atomic(checksum_path(path), hashlib.sha256(data).hexdigest() + "\n")


def load_checkpoint(path: Path, device: torch.device) -> dict:
    """Load a checkpoint, checking its sha256 when one was written; CorruptCheckpoint names the file."""
    path = Path(path)
    data = path.read_bytes()
    digest_file = checksum_path(path)
    if digest_file.exists():
        expected = digest_file.read_text().strip()
        if hashlib.sha256(data).hexdigest() != expected:
            raise CorruptCheckpoint(
                f"{path}: sha256 differs from {digest_file.name} (corrupt or truncated, {len(data)} bytes)"
            )
    try:
        return torch.load(io.BytesIO(data), map_location=device, weights_only=False)
    except Exception as err:  # truncated zip, unpickling errors: all mean the file is unusable
        first_line = str(err).splitlines()[0] if str(err) else ""
        raise CorruptCheckpoint(f"{path}: cannot be loaded ({type(err).__name__}: {first_line})") from err


def other_format_problem(last_path: Path, other_format: list[str]) -> str:
    """The one line refusing a folder whose every readable checkpoint is in another layout (``other_format``:
    ``"<name> has format <f>"`` each): starting over would discard them."""
    return (
        f"{last_path.parent}: no checkpoint in format {CHECKPOINT_FORMAT} ({', '.join(other_format)}: written "
        "by another version of repro); delete the folder's checkpoints or pass force=true to start this run over"
    )


def pick_resume_checkpoint(last_path: Path, device: torch.device):
    """``(ckpt, path, passed_over, other_format)``, printing nothing: the newest readable of ``last.pt`` and
    ``last.prev.pt`` in this version's layout (``CHECKPOINT_FORMAT``; ``(None, None)`` when none is), the
    files passed over on the way as ``(unreadable, warning line)``, and ``"<name> has format <f>"`` for each
    one that read but is in another layout. ``load_resume_checkpoint`` and the runner's check before it
    writes (``repro.training.resume.resume_conflict``) decide from it."""
    candidates = [p for p in (last_path, previous_path(last_path)) if p.exists()]
    passed_over: list[tuple[bool, str]] = []
    other_format: list[str] = []
    for i, path in enumerate(candidates):
        try:
            ckpt = load_checkpoint(path, device)
        except CorruptCheckpoint as err:
            problem, unreadable = str(err), True
        else:
            if isinstance(ckpt, dict) and ckpt.get("format") == CHECKPOINT_FORMAT:
                return ckpt, path, passed_over, other_format
            found = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
            other_format.append(f"{path.name} has format {found}")
            problem, unreadable = f"{path}: checkpoint format {found} is not {CHECKPOINT_FORMAT}", False
        later = i + 1 < len(candidates)
        then = f"falling back to {candidates[i + 1]}" if later else "no earlier checkpoint is readable"
        passed_over.append((unreadable, f"warning: checkpoint {problem}; {then}"))
    return None, None, passed_over, other_format


def load_resume_checkpoint(last_path: Path, device: torch.device) -> tuple[dict | None, Path | None]:
    """The checkpoint ``pick_resume_checkpoint`` picks, warning (on stderr) about each one passed over. When
    every one reads but none is in this layout (written by another version of repro), CorruptCheckpoint says
    so in one line (``other_format_problem``), with a warning only for a file that could not be read at all."""
    ckpt, path, passed_over, other_format = pick_resume_checkpoint(last_path, device)
    refused = ckpt is None and bool(other_format)
    for unreadable, line in passed_over:
        if unreadable or not refused:
            print(line, file=sys.stderr, flush=True)
    if refused:
        raise CorruptCheckpoint(other_format_problem(last_path, other_format))
    if ckpt is None and passed_over:
        names = [p.name for p in (last_path, previous_path(last_path)) if p.exists()]
        print(
            f"warning: no readable checkpoint among {', '.join(names)} in {last_path.parent}; "
            f"starting this run from step 0",
            file=sys.stderr,
            flush=True,
        )
    return ckpt, path


def load_on_rank_0(ctx: DistContext, load, path: Path, device: torch.device):
    """``load(path, device)`` in one process. With several, rank 0 loads onto the CPU and sends
    the result to every rank: checkpoints are rank 0's, and the others need not see its disk."""
    if not ctx.active:
        return load(path, device)
    return broadcast_object(ctx, load(path, torch.device("cpu")) if ctx.is_main else None)


def copy_path(path: Path) -> Path:
    """``best.pt`` -> ``best.copy.pt``: a second copy of the same checkpoint."""
    return path.with_name(f"{path.stem}.copy{path.suffix}")


def save_best_checkpoint(path: Path, state: dict) -> None:
    """``best.pt`` and an identical ``best.copy.pt``, each with its sha256. Unlike ``last.pt``, whose
    fallback ``last.prev.pt`` is an earlier step the run can go on from, the best weights have no
    older equivalent: the test set is scored with exactly these, so the fallback is a copy."""
    save_checkpoint(path, state)
    save_checkpoint(copy_path(path), state)


def load_best_checkpoint(path: Path, device: torch.device, step: int, fingerprint: dict | None = None) -> dict:
    """The first readable of ``best.pt`` and ``best.copy.pt`` that holds the run's best step ``step`` (and,
    given the run's ``fingerprint``, is this run's), warning (on stderr) about each damaged one and rewriting
    it from the good one."""
    problems = []
    for candidate in (path, copy_path(path)):
        try:
            best = load_checkpoint(candidate, device) if candidate.exists() else None
        except CorruptCheckpoint as err:
            problems.append(str(err))
            continue
        if best is None or best.get("step") != step:
            problems.append(f"{candidate}: " + ("missing" if best is None else f"holds step {best.get('step')}"))
            continue
        if fingerprint is not None and best.get("fingerprint") != fingerprint:
            problems.append(f"{candidate}: another run's weights ({describe_fingerprint(best.get('fingerprint'))})")
            continue
        for damaged in problems:
            print(
                f"warning: checkpoint {damaged}; using {candidate.name} (the same step {step}) and writing it again",
                file=sys.stderr,
                flush=True,
            )
        if problems:
            save_best_checkpoint(path, best)
        return best
    raise CorruptCheckpoint(
        f"no usable best-validation checkpoint (step {step}): {'; '.join(problems)}; the weights "
        "to test are lost: rerun with force=true to train this run again"
    )


def remove_checkpoint(path: Path) -> None:
    for p in (path, checksum_path(path)):
        p.unlink(missing_ok=True)

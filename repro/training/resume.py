"""What ``last.pt`` holds and how a run starts over or continues from it.

``last.pt`` holds everything the next step depends on (weights, optimiser, schedule, the
run's state, every rank's RNG states), so a run interrupted by SIGTERM/SIGINT/SIGUSR1 and
restarted ends with the same metrics as one never stopped. Files, checksums and the
fallback to ``last.prev.pt`` are repro/training/checkpoints.py's.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..records import RunFolderConflict, foreign_checkpoint
from .batching import check_resume_batching, checkpoint_batching
from .checkpoints import (
    CHECKPOINT_FORMAT,
    load_on_rank_0,
    load_resume_checkpoint,
    other_format_problem,
    pick_resume_checkpoint,
    previous_path,
    remove_checkpoint,
    save_checkpoint,
)
from .distributed import DistContext, gather_objects
from .schedule import LRController
from .settings import TrainSettings
from .state import RunState, rng_state, seed_everything, set_rng_state


def resume_conflict(last_path: Path, fingerprint: dict) -> str | None:
    """Why a resumed run may not continue from the folder's checkpoints, in one line (None: it may, or there
    is none to read): the checkpoint ``load_resume_checkpoint`` would choose is another run's, or every
    readable one is in another layout. Picked quietly on the CPU (``pick_resume_checkpoint``), so that the
    runner refuses before it writes anything into the folder."""
    ckpt, path, _, other_format = pick_resume_checkpoint(last_path, torch.device("cpu"))
    if ckpt is not None:
        return foreign_checkpoint(path, ckpt.get("fingerprint"), fingerprint)
    return other_format_problem(last_path, other_format) if other_format else None


class LastCheckpoint:
    """Writes ``<run_dir>/checkpoints/last.pt`` (rank 0, every rank's RNG state gathered) and starts a run from it."""

    def __init__(
        self,
        run_dir: Path,
        ctx: DistContext,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        controller: LRController,
        average=None,
        fingerprint: dict | None = None,
    ):
        self.run_dir, self.path = run_dir, run_dir / "checkpoints" / "last.pt"
        self.ctx, self.model, self.optimizer, self.controller = ctx, model, optimizer, controller
        self.average = average  # a swa.WeightAverage, or None
        self.fingerprint = fingerprint  # records.run_fingerprint: whose run the checkpoint is

    def save(self, state: RunState) -> None:
        """All ranks call it (their RNG states are gathered); rank 0 writes ``last.pt``, keeping the one before."""
        rngs = gather_objects(self.ctx, rng_state()) if self.ctx.active else None
        if not self.ctx.is_main:
            return
        payload = {
            "format": CHECKPOINT_FORMAT,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "controller": self.controller.state_dict(),
            "state": state.as_checkpoint(),
            "rng": rngs[0] if rngs else rng_state(),
        }
        if rngs:
            payload["rng_ranks"] = rngs
        if self.average is not None:
            payload["average"] = self.average.state_dict()
        if self.fingerprint is not None:
            payload["fingerprint"] = self.fingerprint
        save_checkpoint(self.path, payload, keep_previous=True)

    def start(self, resume: bool, seed: int, settings: TrainSettings, batching: dict, device: torch.device) -> RunState:
        """The state to train from: the newest readable checkpoint's (``resume``), else a fresh one.

        A fresh start without ``resume`` removes the checkpoints an earlier run left. Every rank
        built the same model from ``seed``; on a fresh start each rank above 0 then reseeds, so
        its dropout draws differ from rank 0's.
        """
        ckpt, source = load_on_rank_0(self.ctx, load_resume_checkpoint, self.path, device) if resume else (None, None)
        if ckpt is None:
            if not resume and self.ctx.is_main:
                remove_checkpoint(self.path)
                remove_checkpoint(previous_path(self.path))
            if self.ctx.rank > 0:
                seed_everything(seed + 1_000_003 * self.ctx.rank)
            return RunState(batching=batching)
        if self.fingerprint is not None and (
            foreign := foreign_checkpoint(source, ckpt.get("fingerprint"), self.fingerprint)
        ):
            raise RunFolderConflict(foreign)  # before any of its weights or state is taken
        check_resume_batching(
            checkpoint_batching(ckpt["state"], settings.bucket_pool_batches),
            batching,
            settings.length_bucketing,
            source,
        )
        state = RunState.from_checkpoint(ckpt["state"], batching, source)
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.controller.load_state_dict(ckpt["controller"])
        if self.average is not None and "average" in ckpt:
            self.average.load_state_dict(ckpt["average"])
        rank_rngs = ckpt.get("rng_ranks")
        use_rank_rng = self.ctx.active and rank_rngs and len(rank_rngs) == self.ctx.world
        set_rng_state(rank_rngs[self.ctx.rank] if use_rank_rng else ckpt["rng"])
        if self.ctx.is_main:
            print(
                f"resuming {self.run_dir} from step {state.step}"
                + ("" if source == self.path else f" (from {source.name})")
            )
        return state

"""From a composed config to a run record: resolve one (arm, task, profile, seed), train it, write it.

The settings are resolved by ``repro.run.settings`` (their precedence is stated there); this module decides
what the record folder allows, trains, and writes the record, ``metrics.json`` last.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import sys
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from .. import records
from ..followup.rotary_settings import ROTARY_DEFAULTS
from ..followup.techniques import build_train_augment
from ..models.model import build_model, collect_record_info
from ..models.settings import encoder_defaults
from ..tasks import DataMissing, Split, TaskData, get_task_builder
from ..training import NonFiniteLoss, RunInterrupted, TrainSettings, distributed, seed_everything, train
from ..training.checkpoints import previous_path
from ..training.console import LOG_FILE, run_console
from ..training.resume import resume_conflict
from . import validate
from .budget import apply_example_budget
from .settings import command_line_task_keys, resolve


def take_subset(task: TaskData, sizes: dict, seed: int) -> TaskData:
    """A seeded random subset of each split (smoke profile); the record's data info says so."""
    rng = np.random.default_rng(seed)
    chosen = {}
    for name, split in task.splits().items():
        n = min(int(sizes.get(name, len(split))), len(split))
        index = np.sort(rng.permutation(len(split))[:n])
        chosen[name] = Split(np.asarray(split.inputs[index]), np.asarray(split.labels[index]))
    info = {**task.info, "subset": {name: len(split) for name, split in chosen.items()}}
    return dataclasses.replace(task, info=info, **cast(dict[str, Any], chosen))


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"device={name}: CUDA is not available on this machine; use device=cpu, or device=auto (a GPU when "
            "there is one)"
        )
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ValueError(f"device={name}: not a device the runner trains on; use device=cpu, cuda, cuda:<k> or auto")
    return device


# Errors of the machine rather than of the code: the run cannot write (a read-only folder, a full disk, a
# file-size or disk quota limit). One line naming the file, exit status 2, like refused input.
ENVIRONMENT_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EFBIG, errno.EDQUOT})


def folder_problem(key: str, folder: Path) -> str | None:
    """Why ``folder`` (the setting ``key``) cannot hold folders: it, or a folder above it, is a file."""
    for path in (folder, *folder.parents):
        if path.exists() and not path.is_dir():
            return f"{key}={folder}: {path} is a file, not a folder; point {key} at a folder"
    return None


def run_dir_for(cfg: DictConfig, run: dict) -> Path:
    arm_folder = records.record_arm(run["arm"], run.get("techniques"))
    return Path(cfg.output_dir) / "runs" / arm_folder / run["task"]["name"] / run["profile"] / f"seed{run['seed']}"


# Settings an unfinished run may change while it keeps its record folder: a resumed run may get
# a longer budget or another stop step, other evaluation or checkpoint intervals, the data kept
# elsewhere, or another way of computing the same function (compiled, packed). Once a record is
# complete, its budget and step caps are part of what it measured.
FREE_TRAIN_KEYS = frozenset(
    {
        "budget_minutes",
        "max_steps",
        "stop_at_step",
        "eval_every_steps",
        "eval_every_seconds",
        "eval_batch_size",
        "checkpoint_every_steps",
        "checkpoint_every_seconds",
        "log_every",
        "data_on_device",
        "compile",
        "compile_mode",
        "compile_transforms",
        "pack_sequences",
        "pack_capacity",
    }
)
FREE_UNTIL_COMPLETE = frozenset({"budget_minutes", "max_steps", "stop_at_step"})
# Keys records written before the key existed lack, with the value those records had: a model key
# the encoder or the rotary backbone reads takes its default there (``EncoderSettings``,
# ``ROTARY_DEFAULTS``), a training key TrainSettings' default.
_IMPLICIT_MODEL_KEYS = ("norm", "token_encoding", "cls_token", "positional_base", "two_tower_combine",
                        "release_masking", "final_norm", "single_logit")  # fmt: skip
IMPLICIT_SETTINGS = {
    **{f"model.{key}": encoder_defaults()[key] for key in _IMPLICIT_MODEL_KEYS},
    **{f"model.{key}": ROTARY_DEFAULTS[key] for key in ("rotary_layout", "rotary_disable")},
    # Records from before it augmented image by image; auto keeps them resumable (repro/tasks/image.py).
    "task.augment_on": "auto",
}
# Task keys whose value those records had depends on the task: every reader cut rows longer than
# task.max_len before task.truncate existed, and ListOps never met one (its files and generator hold none).
IMPLICIT_TASK_SETTINGS = {"task.truncate": {"listops": False, "text": True, "retrieval": True}}


def implicit_settings(task: str) -> dict:
    """``IMPLICIT_SETTINGS`` with the values ``IMPLICIT_TASK_SETTINGS`` gives for ``task``."""
    return {**IMPLICIT_SETTINGS, **{k: v[task] for k, v in IMPLICIT_TASK_SETTINGS.items() if task in v}}


# Of those, the keys added after run fingerprints were: at their implicit value they leave a run's
# fingerprint as it was, so a checkpoint written before the key existed still resumes.
FINGERPRINT_NEUTRAL_KEYS = ("task.augment_on", "task.truncate")


def fingerprint_neutral(task: str) -> dict:
    """``{key: value}`` of ``FINGERPRINT_NEUTRAL_KEYS`` at their implicit value for ``task``."""
    return {k: v for k, v in implicit_settings(task).items() if k in FINGERPRINT_NEUTRAL_KEYS}


_ABSENT = "(absent)"


def _leaves(tree: dict, prefix: str) -> dict:
    out: dict = {}
    for key, value in tree.items():
        path = f"{prefix}.{key}"
        out.update(_leaves(value, path) if isinstance(value, dict) and value else {path: value})
    return out


def _train_defaults() -> dict:
    return {
        f"train.{f.name}": (list(f.default) if isinstance(f.default, tuple) else f.default)
        for f in dataclasses.fields(TrainSettings)
        if f.default is not dataclasses.MISSING
    }


def settings_differences(previous: dict, run: dict, complete: bool = False) -> list[str]:
    """``key: old -> new`` for each setting that shapes training and differs between two resolved runs.

    A key only one side holds counts with its implicit value (``IMPLICIT_SETTINGS``, the
    training defaults), else as ``(absent)``. ``complete``: the previous run finished, so its
    budget and step cap count too.
    """
    free = FREE_TRAIN_KEYS - FREE_UNTIL_COMPLETE if complete else FREE_TRAIN_KEYS
    implicit = {**_train_defaults(), **implicit_settings((run.get("task") or {}).get("name", ""))}
    found = []
    for block in ("model", "task", "train", "techniques", "subset"):
        if block == "techniques":  # each technique's settings compared whole: {} and {d4: true} differ
            old, new = ({f"{block}.{k}": v for k, v in (side.get(block) or {}).items()} for side in (previous, run))
        else:
            old, new = _leaves(previous.get(block) or {}, block), _leaves(run.get(block) or {}, block)
        for key in sorted(set(old) | set(new)):
            if block == "train" and key.split(".", 1)[1] in free:
                continue
            before, after = old.get(key, implicit.get(key, _ABSENT)), new.get(key, implicit.get(key, _ABSENT))
            if before != after:
                found.append(f"{key}: {before!r} -> {after!r}")
    return found


def _has_progress(run_dir: Path) -> bool:
    """Whether a folder holds anything a run would continue or skip for (a checkpoint, a record)."""
    last = run_dir / "checkpoints" / "last.pt"
    return any(path.exists() for path in (run_dir / "metrics.json", last, previous_path(last)))


def _record_decision(cfg: DictConfig, run: dict, run_dir: Path) -> tuple[int | None, bool]:
    """What the record folder allows: (an exit status to stop with, or None to train; resume or not).

    Prints why when it stops or starts over.
    """
    task_name = run["task"]["name"]
    resume = bool(cfg.resume)
    if _has_progress(run_dir) and not (run_dir / "config.yaml").exists():
        if not cfg.force:
            raise records.RunFolderConflict(
                f"{run_dir} holds checkpoints or a record but no config.yaml: whose run they are is unknown, "
                "so they are not continued; pass force=true to start this run over in its place, or "
                "output_dir=<another folder>"
            )
        print(f"[{run['arm']}/{task_name}] force=true: starting over in {run_dir} (it holds no config.yaml)")
        return None, False
    # A run that died before its first checkpoint left nothing to protect.
    guarded = _has_progress(run_dir)
    try:
        previous = records.read_config(run_dir / "config.yaml") if guarded else None
    except records.DamagedRecord:
        if not cfg.force:
            raise  # one line naming the file and force=true (validate.refusing_bad_input)
        print(f"[{run['arm']}/{task_name}] force=true: starting over in {run_dir} (its config.yaml is unreadable)")
        return None, False
    metrics, problem = records.record_problem(run_dir)
    complete = problem is None
    differences = settings_differences(previous, run, complete) if previous is not None else []
    if differences and not cfg.force:  # refused in one line, before any warning about what it would rewrite
        print(
            f"error: {run_dir} holds a run with other settings ({'; '.join(differences)}); "
            "its record and checkpoints belong to those. Pass output_dir=<another folder> to keep both, "
            "or force=true to start this run over in its place",
            file=sys.stderr,
        )
        return validate.EXIT_STATUS, resume
    if problem is not None and (run_dir / "metrics.json").exists():  # one definition of a complete record
        damaged = problem.removeprefix("unreadable metrics.json: ")
        warning = (
            f"{run_dir / 'metrics.json'} is damaged ({damaged}); the record counts as incomplete"
            if damaged != problem
            else f"{run_dir} holds no complete record ({problem})"
        )
        print(f"warning: {warning} and this run writes it again", file=sys.stderr, flush=True)
    if differences:
        print(
            f"[{run['arm']}/{task_name}] force=true: starting over in {run_dir} "
            f"(settings differ: {'; '.join(differences)})"
        )
        resume = False
    elif complete and not cfg.force:
        print(f"[{run['arm']}/{task_name}] record complete in {run_dir}; skipping (force=true reruns it)")
        return 0, resume
    elif complete:  # a complete run's last.pt is its final step: resuming it would train nothing
        print(f"[{run['arm']}/{task_name}] force=true: rerunning the complete record in {run_dir} from step 0")
        resume = False
    return None, resume


def _refuse_batch_norm(run: dict, world: int) -> int:
    """Exit status 2, with the reason on rank 0: batch norm under data parallelism is not the one-process model."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(
            f"[{run['arm']}/{run['task']['name']}] model.norm=batch under {world} processes: each would normalise "
            "its own part of the batch and keep its own running statistics; run it in one process, or use "
            "model.norm=layer",
            file=sys.stderr,
        )
    return 2


def _start_record(
    run: dict, run_dir: Path, task: TaskData, n_params: int, dist, resume: bool, fingerprint: dict
) -> None:
    """Announce the run, clear what an earlier run left that this one does not continue, write config.yaml."""
    where = f"{dist.device} x{dist.world} processes" if dist.active else f"{dist.device}"
    print(
        f"[{run['arm']}/{run['task']['name']}] {run['profile']} seed {run['seed']} on {where}: "
        f"{n_params:,} parameters, {len(task.train)}/{len(task.val)}/{len(task.test)} examples -> {run_dir}"
    )
    # A record in progress is never complete: an earlier run's metrics (force=true) go first.
    stale = ["metrics.json", records.PROGRESS_FILE] + ([] if resume else ["history.csv", "predictions.csv"])
    for name in stale:
        (run_dir / name).unlink(missing_ok=True)
    config = {**run, "fingerprint": fingerprint}
    records.write_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(config)))


def cpu_budget_warning(run: dict) -> str:
    """The one line a ``profile=budget`` run on a CPU starts with: what it will cost."""
    train = run["train"]
    by_examples = train.get("budget_fraction") is not None or train.get("budget_examples") is not None
    minutes = None if by_examples else train.get("budget_minutes")
    budget = f"the {minutes:g} min budget" if minutes else "the budget"
    return (
        f"[{run['arm']}/{run['task']['name']}] warning: profile=budget on a CPU trains the full data and model: "
        f"a step takes seconds to minutes, generated data (ListOps, Pathfinder) is drawn first (minutes, once), "
        f"and {budget} counts training only: scoring the validation and test sets after it takes tens of "
        "minutes on a few cores; profile=smoke is the profile for a CPU"
    )


@validate.refusing_bad_input
def execute(cfg: DictConfig, run: dict | None = None) -> int:
    """Train the run ``cfg`` describes and write its record; returns a process exit status. ``run``: ``cfg``
    resolved with the command line's ``task.<key>`` settings, as ``validate.check`` resolved it."""
    run = resolve(cfg, command_line_task_keys()) if run is None else run
    task_name = run["task"]["name"]
    if problem := records.commit_variable_problem():  # the record names its commit: refuse a bad one first
        print(f"[{run['arm']}/{task_name}] refused: {problem}", file=sys.stderr)
        return 2
    run_dir = run_dir_for(cfg, run)
    for key in ("output_dir", "cache_dir"):
        if problem := folder_problem(key, Path(cfg[key])):
            raise ValueError(problem)
    workers = cfg.workers or min(16, os.cpu_count() or 1)
    world = distributed.world_from_env()
    if world > 1 and run["model"].get("norm") == "batch":
        return _refuse_batch_norm(run, world)
    # Under torchrun: join the process group. Rank 0's view of the record folder decides for every
    # rank (the others may run on machines that do not share its disk), and rank 0 builds (and
    # caches) the data first.
    dist = distributed.setup(pick_device(run["device"]))
    lock = records.RunFolderLock(run_dir)  # one owner per run folder: rank 0, while it lives
    try:
        if dist.is_main:
            lock.acquire()
        return _execute_in_folder(cfg, run, run_dir, dist, workers)
    except OSError as err:
        if err.errno not in ENVIRONMENT_ERRNOS or cfg.debug.get("traceback"):
            raise
        if dist.is_main:
            where = err.filename or run_dir
            print(
                f"error: cannot write {where}: {err.strerror}; free space, lift the limit or give write "
                "permission there, or pass output_dir=<another folder> (cache_dir=<another folder> for the data cache)",
                file=sys.stderr,
            )
        return validate.EXIT_STATUS
    finally:
        lock.release()


def _execute_in_folder(cfg: DictConfig, run: dict, run_dir: Path, dist, workers: int) -> int:
    """``execute``, once rank 0 holds the run folder's lock."""
    stop, resume = distributed.broadcast_object(dist, _record_decision(cfg, run, run_dir) if dist.is_main else None)
    if stop is not None:
        return stop
    if dist.is_main and run["profile"] == "budget" and dist.device.type == "cpu":
        print(cpu_budget_warning(run), file=sys.stderr, flush=True)
    task = _build_task(cfg, run, dist, workers)
    if task is None:
        return 3
    if run["subset"]:
        task = take_subset(task, run["subset"], run["task"].get("data_seed", 0))
    data_digests = records.split_digests({name: (s.inputs, s.labels) for name, s in task.splits().items()})
    fingerprint = records.run_fingerprint(run, data_digests, FREE_TRAIN_KEYS, fingerprint_neutral(run["task"]["name"]))
    settings = TrainSettings.from_dict(apply_example_budget(run, task))  # config.yaml keeps the budget as typed
    augment = build_train_augment(run["techniques"], task)
    seed_everything(run["seed"])
    model = build_model(run["model"], augment.model_task(task) if augment else task)
    if augment is not None:
        augment.attach(model)
    n_params = sum(p.numel() for p in model.parameters())
    resume = _checkpoints_to_resume(cfg, run, run_dir, fingerprint, resume, dist)
    first_start = not (run_dir / "config.yaml").exists()
    try:
        # What the run prints from here on also goes to its log.txt (training/console.py; appended on resume).
        with run_console(run_dir / LOG_FILE if dist.is_main else None, fresh=not resume):
            if dist.is_main:
                _start_record(run, run_dir, task, n_params, dist, resume, fingerprint)
            result = _train(cfg, run, run_dir, model, task, settings, augment, dist, resume, fingerprint)
            if isinstance(result, int):
                return result
            identity = {"fingerprint": fingerprint, "data_digests": data_digests}
            status = 0
            if dist.is_main:
                status = _write_run_record(run, run_dir, result, model, task, augment, n_params, identity)
    except (OSError, *validate.USER_ERRORS):
        # Refused, or stopped by the machine (a full disk, a file-size limit), before any checkpoint was written:
        # a first start leaves nothing behind, so the folder is as it was.
        if dist.is_main and first_start and not _wrote_weights(run_dir):
            for name in ("config.yaml", records.PROGRESS_FILE, LOG_FILE):
                (run_dir / name).unlink(missing_ok=True)
        raise
    # The ranks leave together, once rank 0 has written the record: a rank that exited while the other
    # still ran sometimes aborted in gloo's teardown ("terminate called without an active exception").
    distributed.barrier(dist)
    return status


def _checkpoints_to_resume(cfg: DictConfig, run: dict, run_dir: Path, fingerprint: dict, resume: bool, dist) -> bool:
    """Whether the run resumes, once its fingerprint says whose checkpoint it may continue: another run's, or
    checkpoints of another layout, are refused before config.yaml or log.txt is touched (rank 0 reads; every
    rank raises), unless ``force=true`` starts this run over from step 0 in their place."""
    problem = resume_conflict(run_dir / "checkpoints" / "last.pt", fingerprint) if resume and dist.is_main else None
    if not (problem := distributed.broadcast_object(dist, problem)):
        return resume
    if not cfg.force:
        raise records.RunFolderConflict(problem)
    if dist.is_main:
        print(f"[{run['arm']}/{run['task']['name']}] force=true: starting over in {run_dir} (its checkpoints "
              "are not this run's to continue)")  # fmt: skip
    return False


def _wrote_weights(run_dir: Path) -> bool:
    """Whether the run wrote any checkpoint (``best.pt`` at a validation comes before the first ``last.pt``)."""
    return _has_progress(run_dir) or any((run_dir / "checkpoints").glob("*.pt"))


def _build_task(cfg: DictConfig, run: dict, dist, workers: int) -> TaskData | None:
    """The run's data, built (and cached) by rank 0 first; None (the run is skipped) when it is missing."""
    if not dist.is_main:
        distributed.barrier(dist)
    try:
        return get_task_builder(run["task"].get("builder", run["task"]["name"]))(
            run["task"], Path(cfg.data_dir), Path(cfg.cache_dir), workers
        )
    except DataMissing as err:
        if dist.is_main:
            print(f"[{run['arm']}/{run['task']['name']}] skipped: data missing: {err}")
        return None
    finally:
        if dist.is_main:
            distributed.barrier(dist)


def _train(cfg, run, run_dir, model, task, settings, augment, dist, resume, fingerprint) -> dict | int:
    """:func:`repro.training.train`'s result, or the exit status of a run that stopped without one."""
    task_name = run["task"]["name"]
    try:
        return train(model, task, settings, run["seed"], run_dir, dist.device, resume=resume,
                     sigterm_at_step=cfg.debug.sigterm_at_step, progress=cfg.progress, augment=augment,
                     pause_at_step=cfg.debug.get("pause_at_step"), dist=dist,
                     logger=cfg.get("logger", "none"), fingerprint=fingerprint)  # fmt: skip
    except RunInterrupted as err:
        if dist.is_main:
            print(f"[{run['arm']}/{task_name}] {err}", file=sys.stderr)
        err.pass_on()  # e.g. a cluster launcher's requeue handler, now that the checkpoint is written
        return 128 + err.signum
    except NonFiniteLoss as err:
        if dist.is_main:
            print(f"[{run['arm']}/{task_name}] stopped: {err}", file=sys.stderr)
        return 1


def _write_run_record(
    run: dict, run_dir: Path, result: dict, model, task: TaskData, augment, n_params: int, identity: dict
) -> int:
    """The record of a finished run: what :func:`repro.training.train` returned, with what was run and where,
    and whose run it is (``identity``: the run's fingerprint and its splits' digests). Returns the exit
    status: 1, with no record, when the run is not a result (``records.record_problems``)."""
    metrics = {
        "status": "complete",
        "arm": run["arm"],
        "task": run["task"]["name"],
        "seed": run["seed"],
        "profile": run["profile"],
        "parameters": n_params,
        "parameters_trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "techniques": {**run["techniques"], "built": augment.describe() if augment else None},
        **result["metrics"],
        **collect_record_info(model),  # e.g. conv_impls: the convolution implementations that ran
        "versions": records.versions(),
        "git_commit": records.git_commit(),
        "tree_changes": records.tree_changes(),  # what +dirty stands for
        "data": task.info,
        **identity,
    }
    problems = records.record_problems(metrics)
    if problems:  # not a result: the history stays for a look, nothing is marked complete
        records.write_csv(run_dir / "history.csv", result["history"], HISTORY_COLUMNS)
        print(
            f"[{run['arm']}/{metrics['task']}] error: not a result, no record written ({'; '.join(problems)}); "
            f"the history is in {run_dir / 'history.csv'}",
            file=sys.stderr,
        )
        return 1
    write_record(run_dir, result["history"], result["predictions"], metrics)
    print(
        f"[{run['arm']}/{metrics['task']}] best val {metrics['best_val_acc']:.4f} at step "
        f"{metrics['best_val_step']}, test {metrics['test_acc']:.4f}, "
        f"{metrics['train_examples_per_s']:.1f} examples/s"
    )
    return 0


HISTORY_COLUMNS = ["step", "epoch", "lr", "train_loss", "val_loss", "val_acc", "elapsed_s"]


def write_record(run_dir: Path, history: list[dict], predictions: list[dict], metrics: dict) -> None:
    """History and predictions first, metrics last: metrics.json marks the record complete and lists the
    sha256 of the other files (``records.HASHED_FILES``)."""
    records.write_csv(run_dir / "history.csv", history, HISTORY_COLUMNS)
    records.write_csv(run_dir / "predictions.csv", predictions, ["index", "prediction", "label"])
    files = {name: records.file_sha256(run_dir / name) for name in records.HASHED_FILES}
    records.write_json(run_dir / "metrics.json", {**metrics, "files": files})

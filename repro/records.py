"""Run records (ARCHITECTURE.md, "Records are the interface"), written atomically.

A run folder holds ``config.yaml`` (the resolved config), ``history.csv`` (one
row per logged step or evaluation), ``predictions.csv`` (per test example: index,
predicted and true label, for paired tests) and, written last, ``metrics.json``, which lists the
sha256 of the other three and carries the run's fingerprint (``run_fingerprint``: whose run it is)
and the digests of the data it saw (``split_digests``). Whether a folder holds a complete record
has one definition, ``record_problem``, which the runner, ``bundle freeze``, ``bundle verify`` and
the tables share; a run that trained no step or whose metrics hold NaN or infinity is never
written as complete (``record_problems``). ``run.lock`` is held by the process writing the folder
(``RunFolderLock``) and removed when it is done; ``progress.json`` holds the step and elapsed seconds
of the run's last validation (what a grid projects a running cell from). Neither is part of the
record, and no bundle takes them. Every file goes to a temporary name first and is
renamed into place, with the permissions the umask gives (as ``open`` would).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import platform
import re
import secrets
import socket
import subprocess
from pathlib import Path

import numpy as np

try:
    import fcntl
except ImportError:  # not POSIX: run folders are not locked (hold_run_folder)
    fcntl = None

RECORD_FILES = ("config.yaml", "history.csv", "predictions.csv", "metrics.json")
PROGRESS_FILE = "progress.json"  # {"step", "elapsed_s"} at the last validation of a run in progress
METRIC_FIELDS = (
    "status",
    "arm",
    "task",
    "seed",
    "profile",
    "best_val_acc",
    "best_val_step",
    "test_acc",
    "steps",
    "epochs",
    "wall_time_s",
    "train_time_s",
    "train_examples_per_s",
    "peak_gpu_mem_bytes",
    "device",
    "versions",
    "git_commit",
    "data",
)


class DamagedRecord(Exception):
    """A record file cannot be read; the message names it and the command that recovers the run."""


class RunFolderConflict(DamagedRecord):
    """A run folder is not this run's to write: another process holds it, or it holds another run's files."""


# ---------------------------------------------------------------- one owner per run folder

LOCK_FILE = "run.lock"  # held (flock) by the process writing the folder, names its PID and host; removed after


class RunFolderLock:
    """The exclusive lock of one run folder, held by the live process that trains in it.

    ``flock`` on ``<run_dir>/run.lock``: the kernel drops it when its holder exits, however it
    exits, so a killed run never leaves the folder locked. A second process asking for a held
    folder is refused at once (RunFolderConflict, naming the holder's PID and host); it never
    waits, so two runs can never take turns on one folder's checkpoints. Where ``fcntl`` is
    missing (not POSIX) nothing is locked.
    """

    def __init__(self, run_dir: Path):
        self.run_dir, self.path, self.handle = Path(run_dir), Path(run_dir) / LOCK_FILE, None
        self.made = [f for f in (self.run_dir, *self.run_dir.parents) if not f.exists()]  # what acquire creates

    def acquire(self) -> RunFolderLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            return self
        while True:
            handle = open(self.path, "a+")  # noqa: SIM115 -- held open while the run lasts
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                handle.close()
                raise RunFolderConflict(
                    f"{self.run_dir} is in use by {holder}: a run folder is written by one run at a time; wait "
                    "for that run to end (or stop it), or pass output_dir=<another folder>"
                ) from None
            try:  # the holder before may have removed the file after this process opened it: lock the new one
                same = os.fstat(handle.fileno()).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            handle.close()
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on host {socket.gethostname()}\n")
        handle.flush()
        self.handle = handle
        return self

    def release(self) -> None:
        """Drop the lock and its file, and the folders this lock created if nothing else was written in them
        (a refused run leaves nothing behind). The file goes while still held: a process that opened it
        before is refused or, locking it after, finds it unlinked and takes a new one (``acquire``)."""
        if self.handle is None:
            return
        self.path.unlink(missing_ok=True)
        for folder in self.made:  # the run folder first, then each parent it made, while they are empty
            try:
                folder.rmdir()
            except OSError:
                break
        self.handle.close()
        self.handle = None

    def __enter__(self) -> RunFolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


# ---------------------------------------------------------------- whose run a file belongs to

FINGERPRINT_KEYS = ("arm", "task", "profile", "seed", "settings", "data")


def digest_json(obj) -> str:
    """sha256 of ``obj`` as canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def array_sha256(array) -> str:
    """sha256 of an array's dtype, shape and bytes (C order)."""
    array = np.ascontiguousarray(array)
    digest = hashlib.sha256(f"{array.dtype.str} {list(array.shape)}\n".encode())
    digest.update(array.reshape(-1).view(np.uint8))
    return digest.hexdigest()


def split_digests(splits: dict) -> dict:
    """``{split: {"inputs": sha256, "labels": sha256}}`` of ``{split: (inputs, labels)}``: the data a run saw."""
    return {name: {"inputs": array_sha256(x), "labels": array_sha256(y)} for name, (x, y) in splits.items()}


def run_fingerprint(run: dict, data_digests: dict, free_train_keys=frozenset(), neutral=None) -> dict:
    """Which run a folder, checkpoint or record belongs to: arm, task, profile, seed, the digest of the
    resolved settings that shape training (``free_train_keys``, which a resumed run may change, left out) and
    the digest of the data (``split_digests``). config.yaml, every checkpoint and metrics.json carry it.

    ``neutral``: ``{"block.key": value}`` of settings added after fingerprints were, at the value that
    reproduces the runs before them; at that value a key is left out, so those runs' checkpoints resume."""
    settings = {block: run.get(block) for block in ("model", "task", "techniques", "subset")}
    for dotted, value in (neutral or {}).items():
        block, key = dotted.split(".", 1)
        if isinstance(settings.get(block), dict) and key in settings[block] and settings[block][key] == value:
            settings[block] = {k: v for k, v in settings[block].items() if k != key}
    settings["train"] = {k: v for k, v in (run.get("train") or {}).items() if k not in free_train_keys}
    return {
        "arm": run["arm"],
        "task": run["task"]["name"],
        "profile": run["profile"],
        "seed": run["seed"],
        "settings": digest_json(settings)[:16],
        "data": digest_json(data_digests)[:16],
    }


def describe_fingerprint(fingerprint: dict | None) -> str:
    """``arm/task/profile/seedK, settings <digest>, data <digest>`` (or that there is none)."""
    if not isinstance(fingerprint, dict):
        return "no run fingerprint (written by an older version)"
    f = {key: fingerprint.get(key) for key in FINGERPRINT_KEYS}
    return f"{f['arm']}/{f['task']}/{f['profile']}/seed{f['seed']}, settings {f['settings']}, data {f['data']}"


def foreign_checkpoint(path: Path, theirs, ours: dict) -> str | None:
    """Why checkpoint ``path`` (fingerprint ``theirs``) is not the run ``ours``'s (None: it is), one line."""
    if theirs == ours:
        return None
    return (
        f"{path} is another run's checkpoint ({describe_fingerprint(theirs)}), not this run's "
        f"({describe_fingerprint(ours)}): delete the folder's checkpoints/ or pass force=true to train this run "
        "from step 0, or output_dir=<another folder>"
    )


def record_arm(arm: str, techniques: dict | None) -> str:
    """The arm's folder name: ``<arm>`` with the arm's own techniques, ``<arm>+<techniques>`` otherwise.

    So ``arm=s4`` and ``arm=s4 techniques=followup`` write two records instead of the second
    being skipped as already complete (arms name their default in ``techniques_default``,
    kept in the record as ``techniques.arm_default``).
    """
    techniques = techniques or {}
    name, default = techniques.get("name", "none"), techniques.get("arm_default", "none")
    return arm if name == default else f"{arm}+{name}"


def record_arm_names(metrics: dict) -> set[str]:
    """The arm folder names a record with these ``metrics.json`` contents may sit under.

    One name (``record_arm``) when the record keeps ``techniques.arm_default``; records
    written before that key existed may sit under ``<arm>`` or ``<arm>+<techniques>``.
    """
    arm, techniques = str(metrics.get("arm")), metrics.get("techniques") or {}
    if "arm_default" in techniques or "name" not in techniques:
        return {record_arm(arm, techniques)}
    return {arm, f"{arm}+{techniques['name']}"}


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    The file gets the permissions the umask gives (``open``'s 0o666 & ~umask), not
    ``tempfile.mkstemp``'s 0o600: records and checkpoints are read by others sharing the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def non_finite(obj, prefix: str = "") -> list[str]:
    """``key=value`` for every NaN or infinite number in ``obj`` (nested dicts and lists; keys dotted)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return [f"{prefix or 'value'}={obj}"]
    if isinstance(obj, dict):
        return [bad for key, value in obj.items() for bad in non_finite(value, f"{prefix}.{key}".lstrip("."))]
    if isinstance(obj, (list, tuple)):
        return [bad for i, value in enumerate(obj) for bad in non_finite(value, f"{prefix}[{i}]")]
    return []


def write_json(path: Path, obj) -> None:
    """``obj`` as JSON; NaN and infinity are refused (they are not JSON), naming the key."""
    bad = non_finite(obj)
    if bad:
        raise ValueError(f"{path}: not written: {', '.join(bad)} (JSON holds no NaN or infinity)")
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable, allow_nan=False) + "\n")


def record_problems(metrics: dict) -> list[str]:
    """Why ``metrics`` are not a result: no training step, or a NaN or infinite number (empty: none)."""
    problems = []
    steps = metrics.get("steps")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        problems.append(f"trained {steps} steps")
    problems += [f"{bad} is not a number" for bad in non_finite(metrics)]
    return problems


# The settings an example budget (budget.fraction or budget.examples) turns into a step cap when the run
# starts (repro/run/budget.py): config.yaml keeps them as typed, metrics.json holds what they became.
EXAMPLE_BUDGET_DERIVED = frozenset({"max_steps", "budget_minutes", "budget_examples", "epochs"})


def config_disagreements(config: dict | None, metrics: dict) -> list[str]:
    """Where a record's ``config.yaml`` (its ``train`` block) and its ``metrics.json`` (``train_settings``,
    what the run trained with) disagree, one ``train.KEY: ...`` line per setting; empty: they agree."""
    said, ran = (config or {}).get("train") or {}, metrics.get("train_settings") or {}
    derived = EXAMPLE_BUDGET_DERIVED if said.get("budget_fraction") is not None or said.get("budget_examples") else ()
    return [
        f"train.{key}: config.yaml {said[key]!r}, metrics.json {ran[key]!r}"
        for key in sorted(said)
        if key in ran and key not in derived and said[key] != ran[key]
    ]


def predictions_disagreement(run_dir: Path, metrics: dict) -> str | None:
    """How a record's ``predictions.csv`` contradicts the ``test_acc`` of its ``metrics.json`` (the share of
    its rows whose prediction is the label must be that accuracy), or None when it does not."""
    with open(Path(run_dir) / "predictions.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or not {"prediction", "label"} <= set(rows[0]):
        return "predictions.csv holds no prediction and label columns"
    acc = sum(row["prediction"] == row["label"] for row in rows) / len(rows)
    test_acc = metrics.get("test_acc")
    if not isinstance(test_acc, (int, float)) or abs(acc - test_acc) > 1e-9:
        return f"predictions.csv scores {acc:.6g} over {len(rows)} examples, metrics.json's test_acc is {test_acc!r}"
    return None


# The record files metrics.json lists with their sha256 (``files``), so that a file changed after the run
# wrote it is caught; records written before the list existed are checked without it (``record_problem``).
HASHED_FILES = ("config.yaml", "history.csv", "predictions.csv")


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read 1 MiB at a time (records, bundles and the data cache use it)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_metrics_file(path: Path) -> dict:
    """metrics.json as a dict; ValueError saying why it is not one (not UTF-8, not JSON, not an object)."""
    try:
        metrics = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 ({err.reason} at byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err})") from None
    if not isinstance(metrics, dict):
        raise ValueError(f"a JSON {type(metrics).__name__}, not an object")
    return metrics


def record_problem(run_dir: Path) -> tuple[dict | None, str | None]:
    """The one definition of a complete record, shared by the runner, ``bundle freeze``, ``bundle verify``
    and the tables (through verify): ``(metrics, None)`` when the folder holds one, else
    ``(metrics or None, why not)``.

    Complete: every file of ``RECORD_FILES`` present as a plain file (no symlink); ``metrics.json`` a JSON
    object with status ``complete``, at least one training step and no NaN or infinity; a ``config.yaml``
    that reads and whose training settings are those the run trained with; a ``history.csv`` of at least
    one row; a ``predictions.csv`` that scores ``test_acc``. A record that lists its files' sha256
    (``files``) must match each, and its config.yaml's fingerprint must be its metrics.json's. Never
    raises for a bad file: the reason names it.
    """
    run_dir = Path(run_dir)
    links = [name for name in RECORD_FILES if (run_dir / name).is_symlink()]
    if links:
        return None, f"not a record: {', '.join(links)} is a symlink (a record holds its own files)"
    metrics_path = run_dir / "metrics.json"
    if not metrics_path.exists():
        return None, "incomplete: no metrics.json (run in progress or interrupted)"
    try:
        metrics = _read_metrics_file(metrics_path)
    except (OSError, ValueError) as err:
        return None, f"unreadable metrics.json: {err}"
    if metrics.get("status") != "complete":
        return metrics, f"incomplete: status {metrics.get('status')!r}"
    missing = [name for name in RECORD_FILES if not (run_dir / name).is_file()]
    if missing:
        return metrics, f"incomplete: missing {', '.join(missing)}"
    problems = record_problems(metrics)
    if problems:  # marked complete by an older runner: still not a result
        return metrics, f"not a result: {'; '.join(problems)}"
    try:
        config = read_config(run_dir / "config.yaml")
    except DamagedRecord as err:
        return metrics, f"unreadable config.yaml: {err}"
    return metrics, _contents_problem(run_dir, config, metrics) or _hashes_problem(run_dir, config, metrics)


def _contents_problem(run_dir: Path, config: dict, metrics: dict) -> str | None:
    """``record_problem`` once metrics.json and config.yaml read: the config is this run's, the CSV files
    read, the history holds a row and the predictions score ``test_acc``."""
    disagreements = config_disagreements(config, metrics)
    if disagreements:
        return f"inconsistent: {'; '.join(disagreements)} (a config.yaml not this run's)"
    for name in ("history.csv", "predictions.csv"):
        try:
            (run_dir / name).read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            return f"unreadable {name}: {err}"
    with open(run_dir / "history.csv", newline="") as handle:
        rows = csv.reader(handle)
        if next(rows, None) is None or next(rows, None) is None:  # the header, then a first row
            return "incomplete: history.csv holds no row"
    try:
        contradiction = predictions_disagreement(run_dir, metrics)
    except csv.Error as err:
        return f"unreadable predictions.csv: {err}"
    return f"inconsistent: {contradiction}" if contradiction else None


def _hashes_problem(run_dir: Path, config: dict, metrics: dict) -> str | None:
    """``record_problem``'s last checks: the files' sha256 are those metrics.json lists (when it lists them),
    and config.yaml's fingerprint is metrics.json's."""
    listed = metrics.get("files")
    if listed is None:  # written before records listed their files
        return None
    if not isinstance(listed, dict) or set(listed) != set(HASHED_FILES):
        return f"inconsistent: metrics.json's files lists {listed!r}, not {', '.join(HASHED_FILES)}"
    changed = [name for name in HASHED_FILES if file_sha256(run_dir / name) != listed[name]]
    if changed:
        return (
            f"inconsistent: {', '.join(changed)} changed after the run wrote it (sha256 differs from "
            "metrics.json's files)"
        )
    if config.get("fingerprint") != metrics.get("fingerprint"):
        return (
            f"inconsistent: config.yaml is run {describe_fingerprint(config.get('fingerprint'))}, metrics.json "
            f"run {describe_fingerprint(metrics.get('fingerprint'))}"
        )
    return None


def complete_metrics(run_dir: Path) -> dict | None:
    """The metrics of a complete record (``record_problem``), or None."""
    metrics, problem = record_problem(run_dir)
    return metrics if problem is None else None


def _jsonable(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


def write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="raise", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: row.get(c, "") for c in columns})
    write_atomic(path, buffer.getvalue())


def read_config(path: Path) -> dict:
    """A record's resolved ``config.yaml`` (written by the run when it started) as plain dicts."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=True) or {}
    except Exception as err:  # noqa: BLE001 -- YAML and OmegaConf errors alike mean an unreadable file
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DamagedRecord(
            f"{path} cannot be read ({first}): the run's settings are unknown; rerun with force=true "
            "to start it over in its folder, or pass output_dir=<another folder>"
        ) from err


def commit_variable_problem() -> str | None:
    """What is wrong with ``LRA_REPRO_GIT_COMMIT`` (a full commit, optionally ``+dirty``), or None.
    A run checks it before training, so that a bad value stops it before the GPU time is spent."""
    value = os.environ.get("LRA_REPRO_GIT_COMMIT")
    if not value or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", value):
        return None
    return (
        f"LRA_REPRO_GIT_COMMIT={value!r} is not a full commit: set it to `git rev-parse HEAD` "
        "(40 hex digits), with +dirty when the tree differs from it, or unset it"
    )


def git_commit(cwd: Path | None = None) -> str:
    """HEAD's commit, with ``+dirty`` when tracked files differ.

    The environment variable ``LRA_REPRO_GIT_COMMIT``, when set, wins: a tree copied to a
    cluster or GPU node may carry no git metadata, or stale metadata (seen on 2026-11-26:
    a copy whose .git still named an older HEAD). Outside a checkout and without the
    variable: ``unknown``.
    """
    where = str(cwd or Path(__file__).resolve().parent)
    if os.environ.get("LRA_REPRO_GIT_COMMIT"):
        if problem := commit_variable_problem():
            raise ValueError(problem)
        return os.environ["LRA_REPRO_GIT_COMMIT"]
    fallback = "unknown"
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return fallback
    if head.returncode != 0:
        return fallback
    return head.stdout.strip() + ("+dirty" if tracked_status(where) else "")


def tracked_status(where: str) -> list[tuple[str, str]] | None:
    """``git status`` of the tracked files under ``where``: each changed path as (``XY`` code, path), renames
    as a deletion and an addition; None when git cannot say (no checkout, no git)."""
    try:
        status = subprocess.run(
            ["git", "status", "--porcelain", "-z", "--untracked-files=no", "--no-renames"],
            cwd=where,
            capture_output=True,
            text=True,
            errors="replace",  # a file name that is not UTF-8 is counted, not a crash after training
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if status.returncode != 0:
        return None
    return [(entry[:2], entry[3:]) for entry in status.stdout.split("\0") if entry]  # -z: "XY path", unquoted


def change_kind(code: str) -> str:
    """The word for a porcelain status code ``XY`` (index, work tree): unmerged first (``U`` on either side,
    ``AA``, ``DD``), then added, deleted, copied, else modified."""
    if "U" in code or code in ("AA", "DD"):
        return "unmerged"
    for letter, word in (("A", "added"), ("D", "deleted"), ("C", "copied")):
        if letter in code:
            return word
    return "modified"


def tree_changes(cwd: Path | None = None) -> list[str] | None:
    """Where the tracked files differ from HEAD, the ``+dirty`` of ``git_commit`` spelled out: one entry per
    top-level folder (``name/``) or file, with how many paths changed how, e.g. ``results/: 12 deleted``.
    ``[]`` for a clean tree; None outside a checkout, or when ``LRA_REPRO_GIT_COMMIT`` stands in for git
    (the tree's own metadata is then not trusted)."""
    if os.environ.get("LRA_REPRO_GIT_COMMIT"):
        return None
    changed = tracked_status(str(cwd or Path(__file__).resolve().parent))
    if changed is None:
        return None
    counts: dict[str, dict[str, int]] = {}
    for code, path in changed:
        kind = change_kind(code)
        top, sep, _ = path.partition("/")
        per_kind = counts.setdefault(top + ("/" if sep else ""), {})
        per_kind[kind] = per_kind.get(kind, 0) + 1
    return [
        f"{top}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(per_kind.items()))
        for top, per_kind in sorted(counts.items())
    ]


def versions() -> dict:
    import torch

    import repro

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "numpy": np.__version__,
        "repro": repro.__version__,
    }

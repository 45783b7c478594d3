"""Bundles: frozen, versioned, checksummed sets of run and benchmark records (the thing a paper cites).

Commands (``python -m repro.bundle <command> --help`` lists every option)::

    python -m repro.bundle freeze --version v1 [--runs outputs/runs] [--arm 'lra_*' ...]
                                  [--task listops ...] [--profile budget ...] [--seed 0 ...]
                                  [--bench outputs/bench ...] [--extra FILE_OR_FOLDER ...]
                                  [--notes NOTES.md] [--no-analysis]
    python -m repro.bundle freeze --version v1 --runs LABEL=DIR --runs LABEL2=DIR2 ...
    python -m repro.bundle freeze --version v1 --from-bundle results/a --from-bundle results/b ...
    python -m repro.bundle verify results/v1
    python -m repro.bundle cite results/v1
    python -m repro.bundle ls

``freeze`` copies the chosen **complete** records (``metrics.json`` with status
``complete``, every file of ``records.RECORD_FILES``, at least one training step and no NaN
or infinity among its metrics, a ``config.yaml`` whose training settings are those the run
trained with, a ``predictions.csv`` that scores its ``test_acc``; checkpoints never) into
``results/<version>/runs/<arm>/<task>/<profile>/seed<k>/``, benchmark files given with
``--bench`` into ``bench/``, other files that back a finding (``--extra``: a probe's output,
a record whose predictions were not kept) into ``extra/`` (a source inside a bundle under that
bundle's version and its path there; two sources on one path are refused), and writes
``CITATION.cff``, ``MANIFEST.json`` (sha256 and size of every file,
the git commit of the freezing checkout and of each record,
package versions, devices, creation date, the profile of each run, and each record
left out with the reason) and ``MANIFEST.sha256`` (the manifest's own hash, in
``sha256sum -c`` format). The bundle's hash is the sha256 of ``MANIFEST.json``.
Everything is written into a hidden temporary folder under ``results/`` and renamed into
place at the end, so an interrupted freeze leaves no half bundle; an existing version
is never overwritten. Incomplete or inconsistent records are named on stderr and in the
manifest's ``left_out`` list, never copied. Several roots given as ``--runs LABEL=DIR`` (records
of one arm, task, profile and seed under other settings, e.g. the variants of one finding) go
to ``runs/<LABEL>/<arm>/<task>/<profile>/seed<k>/``; the manifest names each record's label.
``--from-bundle`` (repeatable) merges earlier bundles into the new one (a campaign frozen slot by
slot, then as one): each is verified first, their complete records are pooled (a record in two of
them is refused), everything else of theirs but the citation -- their manifests, notes, extra and
benchmark files, their analysis unless the new bundle runs its own -- is kept under
``sources/<version>/``, and the manifest's ``sources`` names each with its manifest hash, so a
citation of a merged bundle can still be checked. The merged bundles then leave the tree (the
records are not kept twice); the tables read the new bundle's own ``bench/`` and ``analysis/``.

Analysis at freeze time (``repro.analysis.listops_roots``): for ListOps records the task's
test set is rebuilt from the record's config (``--data-dir`` / ``--cache-dir``; generated
ListOps comes from the cache or is regenerated), checked label by label against
``predictions.csv``, and its root operators are written to ``analysis/listops_roots/<key>.csv``
(with the training set's label counts and most frequent label per root operator in
``<key>.json``) for the follow-up study's appendix B and the root-operator baseline. When the
data cannot be rebuilt the analysis is named as missing in the manifest; the tables and
figures then say "not run".

``verify`` recomputes every checksum and fails (exit 1) naming each changed, missing or
extra file; ``cite`` prints a BibTeX entry and a one-line citation with the version and
the manifest's hash (after verifying).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: freezes are not serialised (_one_freeze_at_a_time)
    fcntl = None

from . import records
from .analysis import listops_roots
from .grid.cells import GridError, superseded_records, superseded_source
from .invocation import invoked_as

FORMAT = "lra-repro-bundle/1"
MANIFEST = "MANIFEST.json"
MANIFEST_HASH = "MANIFEST.sha256"
CITATION = "CITATION.cff"
NOTES = "NOTES.md"
VERSION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors", ".bin")
ROOTS_DIR = listops_roots.ROOTS_DIR
LEFT_OUT_BY_REQUEST = "left out by --leave-out"
listops_roots_key = listops_roots.roots_key  # the key of a record's test set (kept under its old name)


class BundleError(Exception):
    """A bundle cannot be frozen, read or cited; the message says why and what to do."""


# ---------------------------------------------------------------- hashing


sha256_file = records.file_sha256  # one definition (repro/records.py)


def bundle_files(root: Path) -> list[str]:
    """Every file under ``root`` except the manifest and its hash, as sorted POSIX paths."""
    root = Path(root)
    found = []
    for path in root.rglob("*"):
        if path.is_file() or path.is_symlink():
            rel = path.relative_to(root).as_posix()
            if rel not in (MANIFEST, MANIFEST_HASH):
                found.append(rel)
    return sorted(found)


def manifest_hash(bundle: Path) -> str:
    """The bundle's hash: sha256 of its MANIFEST.json bytes."""
    path = Path(bundle) / MANIFEST
    if not path.exists():
        raise BundleError(
            f"{path} does not exist: {bundle} is not a bundle (freeze one with `python -m repro.bundle freeze`)"
        )
    return sha256_file(path)


# ---------------------------------------------------------------- choosing records


@dataclass(frozen=True)
class Candidate:
    """One record folder under the runs root and whether it may be frozen."""

    path: Path
    rel: str  # <arm>/<task>/<profile>/seed<k>
    metrics: dict | None
    problem: str | None
    label: str | None = None  # the runs root's label (``--runs LABEL=DIR``): the bundle keeps it as a folder

    @property
    def dest(self) -> str:
        """Where the record goes in a bundle: ``runs/[<label>/]<arm>/<task>/<profile>/seed<k>``."""
        return f"runs/{self.label}/{self.rel}" if self.label else f"runs/{self.rel}"


def _check_record(path: Path, rel: str) -> Candidate:
    """Whether the record folder ``path`` (at ``rel`` under its root) may be frozen: complete by the one
    definition (``records.record_problem``) and under the folder its metrics.json names."""
    metrics, problem = records.record_problem(path)
    if problem is not None:
        return Candidate(path, rel, metrics, problem)
    rest = f"{metrics.get('task')}/{metrics.get('profile')}/seed{metrics.get('seed')}"
    said = sorted(f"{name}/{rest}" for name in records.record_arm_names(metrics))
    if rel not in said:
        return Candidate(path, rel, metrics, f"inconsistent: metrics.json says {' or '.join(said)}")
    return Candidate(path, rel, metrics, None)


def test_set_disagreements(chosen: list[Candidate]) -> list[str]:
    """One line per task (and runs root label and profile) whose records saw different test sets: the
    sha256 of the test inputs and labels in their metrics.json (``data_digests``) differ. Records written
    before the digests were kept are not compared."""
    seen: dict[tuple, dict[str, list[str]]] = {}
    for cand in chosen:
        test = (cand.metrics.get("data_digests") or {}).get("test")
        if test is None:
            continue
        key = (cand.label, cand.metrics.get("task"), cand.metrics.get("profile"))
        seen.setdefault(key, {}).setdefault(records.digest_json(test)[:16], []).append(cand.dest)
    lines = []
    for (label, task, profile), groups in sorted(seen.items(), key=lambda item: str(item[0])):
        if len(groups) > 1:
            sides = "; ".join(f"{digest}: {', '.join(sorted(paths))}" for digest, paths in sorted(groups.items()))
            where = f"{label}/" if label else ""
            lines.append(f"{where}{task} ({profile}) records saw {len(groups)} different test sets ({sides})")
    return lines


def _matches(value: str, patterns: list[str] | None) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(value, p) for p in patterns)


def find_records(runs_root: Path, arms=None, tasks=None, profiles=None, seeds=None) -> list[Candidate]:
    """Record folders ``<arm>/<task>/<profile>/seed<k>`` under ``runs_root`` that match the filters."""
    runs_root = Path(runs_root)
    if not runs_root.is_dir():
        raise BundleError(f"{runs_root} is not a folder of run records (the runner writes outputs/runs; pass --runs)")
    found = []
    for path in sorted(runs_root.glob("*/*/*/seed*")):
        if not path.is_dir():
            continue
        rel = path.relative_to(runs_root).as_posix()
        arm, task, profile, seed_dir = rel.split("/")
        if not (
            _matches(arm, arms)
            and _matches(task, tasks)
            and _matches(profile, profiles)
            and _matches(seed_dir.removeprefix("seed"), seeds)
        ):
            continue
        found.append(_check_record(path, rel))
    return found


# ---------------------------------------------------------------- freezing


def _copy_name(source: Path) -> Path:
    """Where a ``--bench``/``--extra`` source goes under its folder: a file or folder inside a bundle keeps
    the bundle's version and its path there (``v0.2-lra-slot01/runs/lra_local/listops/paper/seed0``), so that
    the same record folder of two bundles stays two folders; anything else keeps its own name."""
    resolved = source.resolve()
    for parent in resolved.parents:
        if (parent / MANIFEST).is_file():
            return Path(parent.name, resolved.relative_to(parent))
    return Path(source.name)


def _copy_files(sources: list[Path], dest: Path, folder: str) -> list[str]:
    """Copy files and folders (``--bench``, ``--extra``) into ``dest/folder``; returns the bundle paths.
    Two sources that would land on one path are refused, naming both."""
    copied: dict[str, Path] = {}
    for source in sources:
        source = Path(source)
        if not source.exists():
            raise BundleError(f"--{folder} {source}: no such file or folder")
        files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
        name = _copy_name(source)
        for path in files:
            rel_inside = name.as_posix() if source.is_file() else (name / path.relative_to(source)).as_posix()
            if path.suffix in CHECKPOINT_SUFFIXES or "checkpoints" in Path(rel_inside).parts:
                print(f"left out {path}: checkpoints never go into a bundle", file=sys.stderr)
                continue
            key = f"{folder}/{rel_inside}"
            if key in copied:
                raise BundleError(
                    f"--{folder} {path} and {copied[key]} would both be {key}: "
                    "copy one into a folder of another name first"
                )
            copied[key] = path
            target = dest / folder / rel_inside
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return list(copied)


def _counted(n: int, noun: str) -> str:
    """``1 run record``, ``2 run records``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _citation(version: str, created: datetime, commit: str, authors: list[str], title: str, n_runs: int) -> str:
    what = _counted(n_runs, "run record") if n_runs else "Files backing a finding (no run records)"
    abstract = f"{what} of LRA-repro (Long Range Arena and its follow-up), checksummed in MANIFEST.json."
    lines = [
        "cff-version: 1.2.0",
        'message: "If you use these results, please cite them as below; verify with `python -m repro.bundle verify`."',
        "type: dataset",
        f"title: {json.dumps(title)}",
        f"version: {json.dumps(version)}",
        f"date-released: {json.dumps(created.date().isoformat())}",
        f"commit: {json.dumps(commit)}",
        "authors:",
        *[f"  - name: {json.dumps(a)}" for a in authors],
        f"abstract: {json.dumps(abstract)}",
        "keywords:",
        '  - "Long Range Arena"',
        '  - "reproduction"',
    ]
    return "\n".join(lines) + "\n"


def parse_runs_roots(values: list[str | Path]) -> dict[str | None, Path]:
    """``--runs`` values: one ``DIR``, or several ``LABEL=DIR`` (records of other settings that share
    arm, task, profile and seed, e.g. the variants of one finding, each kept under its label)."""
    roots: dict[str | None, Path] = {}
    for value in values:
        label, sep, folder = str(value).partition("=")
        label, folder = (label, folder) if sep else (None, label)
        if label is not None and not VERSION_PATTERN.match(label):
            raise BundleError(f"--runs {value}: a label is letters, digits, '.', '_' or '-'")
        if label in roots:
            raise BundleError(f"--runs {value}: {'unlabelled root' if label is None else f'label {label}'} given twice")
        roots[label] = Path(folder)
    if None in roots and len(roots) > 1:
        raise BundleError("--runs: several roots need a label each (LABEL=DIR), so their records cannot collide")
    return roots


def _stage_runs(chosen: list[Candidate], staging: Path) -> list[dict]:
    """Copy the chosen records into ``staging`` and describe each for the manifest."""
    runs = []
    for cand in chosen:
        target = staging / cand.dest
        target.mkdir(parents=True)
        for name in records.RECORD_FILES:
            shutil.copyfile(cand.path / name, target / name)
        m = cand.metrics
        runs.append(
            {
                "path": cand.dest,
                **({"label": cand.label} if cand.label else {}),
                "arm": m["arm"],
                "task": m["task"],
                "profile": m["profile"],
                "seed": m["seed"],
                "test_acc": m.get("test_acc"),
                "device": m.get("device"),
                "budget_minutes": m.get("budget_minutes"),
                "git_commit": m.get("git_commit"),
                "versions": m.get("versions"),
            }
        )
    return runs


def _manifest(
    version: str,
    title: str,
    authors: list[str],
    created: datetime,
    commit: str,
    runs: list[dict],
    staging: Path,
    **parts,
) -> dict:
    """MANIFEST.json's content: what the bundle holds, where it came from, every file's sha256."""
    files = [
        {"path": rel, "sha256": sha256_file(staging / rel), "size": (staging / rel).stat().st_size}
        for rel in bundle_files(staging)
    ]
    return {
        "format": FORMAT,
        "version": version,
        "title": title,
        "authors": authors,
        "created": created.isoformat(),
        "git_commit": commit,
        "record_git_commits": sorted({str(r["git_commit"]) for r in runs}),
        "package_versions": [
            json.loads(v) for v in sorted({json.dumps(r["versions"], sort_keys=True) for r in runs if r["versions"]})
        ],
        "devices": sorted({str(r["device"]) for r in runs}),
        "profiles": sorted({r["profile"] for r in runs}),
        "budget_minutes": sorted({r["budget_minutes"] for r in runs if r["budget_minutes"] is not None}),
        "runs": [{k: v for k, v in r.items() if k != "versions"} for r in runs],
        **parts,
        "files": files,
    }


def _choose(roots: dict, arms, tasks, profiles, seeds, log) -> tuple[list, list[dict]]:
    """The complete records under ``roots`` that match the filters, and the incomplete ones left out (logged)."""
    candidates = [
        replace(c, label=label)
        for label, root in roots.items()
        for c in find_records(root, arms, tasks, profiles, seeds)
    ]
    chosen = [c for c in candidates if c.problem is None]
    left_out = [{"path": c.dest.removeprefix("runs/"), "reason": c.problem} for c in candidates if c.problem]
    for item in left_out:
        log(f"left out {item['path']}: {item['reason']}", file=sys.stderr)
    return chosen, left_out


def _from_bundles(
    bundles: list[Path], arms, tasks, profiles, seeds, log, leave_out: list[Path] | None = None
) -> tuple[list, list[dict], list[dict]]:
    """The matching complete records of earlier bundles (each verified first), the ones left out (logged, as
    ``_choose`` does; ``leave_out``: record folders of those bundles not to take, each of which must be one),
    and one ``sources`` entry per bundle that gave a record."""
    chosen, left_out, sources, versions = [], [], [], {}
    unmatched = {Path(p).resolve(): Path(p) for p in leave_out or []}
    for folder in map(Path, bundles):
        manifest = require_intact(folder)
        version = manifest["version"]
        if version in versions:
            raise BundleError(f"--from-bundle {folder}: version {version} is also {versions[version]}; give each once")
        versions[version] = folder
        if any(run.get("label") for run in manifest["runs"]):
            raise BundleError(
                f"--from-bundle {folder}: its records are kept under labels (runs/LABEL/...); "
                "merge only bundles of unlabelled records"
            )
        found = find_records(folder / "runs", arms, tasks, profiles, seeds) if manifest["runs"] else []
        marked = [unmatched.pop(Path(c.path).resolve(), None) is not None and c.problem is None for c in found]
        found = [replace(c, problem=LEFT_OUT_BY_REQUEST) if m else c for c, m in zip(found, marked, strict=True)]
        for cand in (c for c in found if c.problem):
            left_out.append({"path": f"{version}/{cand.rel}", "reason": cand.problem})
            log(f"left out {version}/{cand.rel}: {cand.problem}", file=sys.stderr)
        good = [c for c in found if c.problem is None]
        if not good and (arms or tasks or profiles or seeds):
            log(f"{folder}: no record matches the filters; not merged")
            continue
        chosen += good
        sources.append(
            {"version": version, "manifest_sha256": manifest_hash(folder), "runs": len(good), "path": folder}
        )
    if unmatched:
        first = next(iter(unmatched.values()))
        raise BundleError(f"--leave-out {first}: not a record of the --from-bundle bundles that the filters keep")
    return chosen, left_out, sources


def _no_collision(chosen: list[Candidate]) -> list[Candidate]:
    """``chosen``, refusing two records that would go to the same place in the bundle."""
    seen: dict[str, Path] = {}
    for cand in chosen:
        if cand.dest in seen:
            raise BundleError(
                f"{cand.dest} would come from both {seen[cand.dest]} and {cand.path}: "
                "leave one of them out (--from-bundle, --runs or the filters)"
            )
        seen[cand.dest] = cand.path
    return chosen


def _copy_sources(sources: list[dict], staging: Path, analysis: bool) -> dict:
    """Everything of each merged bundle but its records and citation (taken over, written anew) copied under
    ``sources/<version>/``: its manifest (the hash ``sources`` names can still be checked), notes, extra and
    benchmark files, its own sources, and its analysis unless this bundle computes its own. Returns the
    manifest's ``sources`` (version, manifest hash, records taken) and ``source_files`` ({} with no source)."""
    copied = []
    for source in sources:
        folder, target = Path(source["path"]), staging / "sources" / source["version"]
        for rel in [MANIFEST, MANIFEST_HASH, *bundle_files(folder)]:
            top = rel.split("/")[0]
            if top in ("runs", CITATION) or (analysis and top == "analysis"):
                continue
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(folder / rel, target / rel)
            copied.append(f"sources/{source['version']}/{rel}")
    if not sources:
        return {}
    return {"sources": [{k: v for k, v in src.items() if k != "path"} for src in sources], "source_files": copied}


def _publish(staging: Path, final: Path) -> None:
    """Move the staged bundle into place in one rename, never over an existing one."""
    os.chmod(staging, 0o777 & ~_umask())  # mkdtemp made it 0700: a bundle is shared like any folder
    try:
        os.rename(staging, final)
    except OSError:
        raise BundleError(
            f"{final} appeared while freezing: bundles are never overwritten; choose another --version"
        ) from None


def freeze(
    version: str,
    runs_root: Path | list = Path("outputs/runs"),
    results_root: Path = Path("results"),
    arms=None,
    tasks=None,
    profiles=None,
    seeds=None,
    bench: list[Path] | None = None,
    analysis: bool = True,
    data_dir: Path = Path("data"),
    cache_dir: Path = Path(".cache/lra-repro"),
    workers: int = 1,
    authors: list[str] | None = None,
    title: str | None = None,
    notes: Path | None = None,
    extra: list[Path] | None = None,
    log=print,
    from_bundles: list[Path] | None = None,
    leave_out: list[Path] | None = None,
    strict: bool = False,
) -> Path:
    """Freeze the chosen complete records into ``results_root/version``; returns the bundle folder.

    ``extra``: files or folders that back a finding but are no run record or benchmark (a probe's
    output, a record whose predictions were not kept), copied under ``extra/`` and checksummed.
    ``runs_root``: a folder of records, or a list of ``--runs`` values (:func:`parse_runs_roots`), or None
    with ``from_bundles`` (earlier bundles whose records, notes and files the new one takes over, but
    the records in ``leave_out``, which the manifest's ``left_out`` names).
    ``strict``: refuse to freeze when any matching record is not complete (instead of leaving it out).
    Records of one task that saw different test sets are always refused (``test_set_disagreements``).
    ``notes``: a Markdown file (how the grid was run, its budget, what is missing), copied as NOTES.md."""
    if not VERSION_PATTERN.match(version):
        raise BundleError(f"version {version!r}: use letters, digits, '.', '_' or '-' (e.g. v1 or 2026-11-26.1)")
    results_root = Path(results_root)
    final = results_root / version
    if final.exists():
        raise BundleError(f"{final} already exists: bundles are never overwritten; choose another --version")
    roots = {} if runs_root is None else parse_runs_roots(runs_root if isinstance(runs_root, list) else [runs_root])
    chosen, left_out = _choose(roots, arms, tasks, profiles, seeds, log)
    earlier = _from_bundles(list(from_bundles or []), arms, tasks, profiles, seeds, log, leave_out)
    chosen, left_out, sources = _no_collision(chosen + earlier[0]), left_out + earlier[1], earlier[2]
    refused = [item for item in left_out if item["reason"] != LEFT_OUT_BY_REQUEST]
    if strict and refused:
        raise BundleError(
            f"--strict: {_counted(len(refused), 'record')} not complete: "
            + "; ".join(f"{item['path']}: {item['reason']}" for item in refused)
            + " (rerun or remove them, or freeze without --strict to leave them out)"
        )
    if disagreements := test_set_disagreements(chosen):
        raise BundleError(
            "; ".join(disagreements) + ": an arm compared on a task must see its test set; freeze the records "
            "of each test set apart, or rerun the odd ones on the others' data"
        )
    if notes is not None and not Path(notes).is_file():
        raise BundleError(f"--notes {notes}: no such file; give a Markdown file to copy into the bundle as {NOTES}")
    searched = [*roots.values(), *(from_bundles or [])]
    if not chosen and not bench and not extra:
        raise BundleError(
            f"nothing to freeze: no complete record under {', '.join(map(str, searched))} "
            "matches the filters" + (f" ({len(left_out)} incomplete left out)" if left_out else "")
        )
    results_root.mkdir(parents=True, exist_ok=True)
    with _one_freeze_at_a_time(results_root):  # a freeze killed before this one left its staging folder
        staging = Path(tempfile.mkdtemp(prefix=f".{version}.partial-", dir=results_root))
        try:
            runs = _stage_runs(chosen, staging)
            bench_files = _copy_files(list(bench or []), staging, "bench")
            extra_files = _copy_files(list(extra or []), staging, "extra")
            merged_parts = _copy_sources(sources, staging, analysis)
            analysed, analysis_missing = [], []
            if analysis:
                analysed, analysis_missing = listops_roots.analyse_records(
                    chosen, staging, data_dir, cache_dir, workers, log
                )
            created = datetime.now(timezone.utc).replace(microsecond=0)
            commit = records.git_commit()
            title = title or f"LRA-repro results, bundle {version}"
            authors = authors or ["LRA-repro contributors"]
            records.write_atomic(staging / CITATION, _citation(version, created, commit, authors, title, len(runs)))
            if notes is not None:
                shutil.copyfile(notes, staging / NOTES)
            manifest = _manifest(version, title, authors, created, commit, runs, staging, bench=bench_files,
                                 extra=extra_files, analysis=analysed, analysis_missing=analysis_missing,
                                 left_out=left_out, **merged_parts)  # fmt: skip
            records.write_json(staging / MANIFEST, manifest)
            records.write_atomic(staging / MANIFEST_HASH, f"{sha256_file(staging / MANIFEST)}  {MANIFEST}\n")
            _publish(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        log(
            f"froze {len(runs)} record(s), {len(bench_files)} benchmark file(s) into {final} "
            f"({len(left_out)} left out); manifest sha256 {manifest_hash(final)}"
        )
        return final


def _one_freeze_at_a_time(results_root: Path):
    """Hold ``results_root`` (an flock on the folder itself, so nothing is written there) while freezing, and
    remove the hidden ``.<version>.partial-*`` folders a killed freeze left: no other freeze is running."""
    if fcntl is None:  # no lock, and no other freeze's staging folder can be told from a stale one
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def held():
        fd = os.open(results_root, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            for stale in results_root.glob(".*.partial-*"):
                if stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
            yield
        finally:
            os.close(fd)

    return held()


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


# ---------------------------------------------------------------- verifying, reading, citing


def load_manifest(bundle: Path) -> dict:
    path = Path(bundle) / MANIFEST
    if not path.exists():
        raise BundleError(
            f"{path} does not exist: {bundle} is not a bundle (freeze one with `python -m repro.bundle freeze`)"
        )
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise BundleError(f"{path}: not valid JSON ({err})") from None
    if manifest.get("format") != FORMAT:
        raise BundleError(f"{path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


def verify(bundle: Path) -> list[str]:
    """Every problem found (empty when the bundle is intact): changed, missing or extra files."""
    bundle = Path(bundle)
    problems = _manifest_hash_problems(bundle)
    try:
        manifest = load_manifest(bundle)
    except BundleError as err:
        return problems + [str(err)]
    entries = manifest.get("files") if isinstance(manifest.get("files"), list) else None
    if entries is None:
        return problems + [f"{MANIFEST}: no list of files (key 'files'); freeze the bundle again"]
    listed, named = {}, set()  # the entries to check; every path the manifest names (an entry lacking a key too)
    for i, entry in enumerate(entries):
        lacking = [k for k in ("path", "sha256", "size") if not isinstance(entry, dict) or k not in entry]
        if isinstance(entry, dict) and "path" in entry:
            named.add(str(entry["path"]))
        if lacking:
            problems.append(f"{MANIFEST}: files[{i}] lacks {', '.join(lacking)}; freeze the bundle again")
        else:
            listed[str(entry["path"])] = entry
    problems += _file_problems(bundle, listed, named)
    for run in [] if problems else manifest.get("runs", []):  # intact files: each record complete, as the runner says
        rel = str(run.get("path"))
        if _outside(bundle, rel) is None and (bundle / rel).is_dir():
            _, problem = records.record_problem(bundle / rel)
            if problem is not None:
                problems.append(f"record {rel}: {problem}")
    return problems


def _manifest_hash_problems(bundle: Path) -> list[str]:
    """``verify``: the manifest's own sha256 file present and matching."""
    hash_path = bundle / MANIFEST_HASH
    if not hash_path.exists():
        return [f"missing: {MANIFEST_HASH}"]
    if (bundle / MANIFEST).exists():
        recorded = hash_path.read_text().split()[0] if hash_path.read_text().split() else ""
        if recorded != sha256_file(bundle / MANIFEST):
            return [f"changed: {MANIFEST} (its sha256 differs from {MANIFEST_HASH})"]
    return []


def _file_problems(bundle: Path, listed: dict, named: set[str]) -> list[str]:
    """``verify``: each file the manifest lists (``listed``: path -> entry) present and unchanged, none extra
    (a file is extra when no entry names it: ``named``)."""
    problems = []
    for rel, entry in sorted(listed.items()):
        path = bundle / rel
        if outside := _outside(bundle, rel):
            problems.append(f"{outside}: {rel}")
        elif not path.is_file():
            problems.append(f"missing: {rel}")
        elif path.stat().st_size != entry["size"] or sha256_file(path) != entry["sha256"]:
            problems.append(f"changed: {rel}")
    return problems + [f"extra: {rel}" for rel in bundle_files(bundle) if rel not in named]


def _outside(bundle: Path, rel: str) -> str | None:
    """Why the manifest path ``rel`` does not name a plain file of the bundle's own (None: it does): a
    symlink (on the way or at the end), or a path that leaves the bundle."""
    parts = Path(rel).parts
    if Path(rel).is_absolute() or ".." in parts or not parts:
        return "outside the bundle"
    for depth in range(1, len(parts) + 1):
        if (Path(bundle).joinpath(*parts[:depth])).is_symlink():
            return "a symlink"
    return None


def require_intact(bundle: Path) -> dict:
    """The manifest of an intact bundle, else BundleError listing the problems."""
    problems = verify(bundle)
    if problems:
        raise BundleError(f"{bundle} fails verification:\n  " + "\n  ".join(problems))
    return load_manifest(bundle)


def citation(bundle: Path) -> tuple[str, str]:
    """(one-line citation, BibTeX entry) of a bundle, with its version and manifest hash."""
    manifest = load_manifest(bundle)
    digest = manifest_hash(bundle)
    version, year = manifest["version"], manifest["created"][:4]
    authors = manifest.get("authors") or ["LRA-repro contributors"]
    title = manifest.get("title") or f"LRA-repro results, bundle {version}"
    line = (
        f"{', '.join(authors)} ({year}). {title}. Version {version}, MANIFEST.json sha256 {digest}, "
        f"git commit {manifest['git_commit']}. {len(manifest['runs'])} run records."
    )
    key = "lrarepro_" + re.sub(r"[^A-Za-z0-9]", "_", version)
    bibtex = "\n".join(
        [
            f"@misc{{{key},",
            f"  title = {{{title}}},",
            f"  author = {{{' and '.join('{' + a + '}' for a in authors)}}},",
            f"  year = {{{year}}},",
            f"  version = {{{version}}},",
            f"  note = {{Bundle version {version}; MANIFEST.json sha256 {digest}; "
            f"git commit {manifest['git_commit']}}},",
            "}",
        ]
    )
    return line, bibtex


# ---------------------------------------------------------------- command line


EXAMPLES = """\
Examples:
  {prog} freeze --version v1 --runs outputs/runs --profile budget --notes NOTES.md
  {prog} freeze --version v1-all --from-bundle results/v1a --from-bundle results/v1b
  {prog} verify results/v0.2-lra
  {prog} cite results/v0.2-lra
  {prog} ls

'{prog} COMMAND --help': the options of a command."""


def _parser() -> argparse.ArgumentParser:
    prog = invoked_as("lra-bundle")
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Bundles: frozen, versioned, checksummed sets of run and benchmark records under results/\n"
        "(the thing a paper cites): freeze records into one, verify its checksums, cite it, list them.",
        epilog=EXAMPLES.format(prog=prog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, title="commands")
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument(
        "--debug", action="store_true", help="on refused input, show the traceback instead of the one-line error"
    )
    fr = sub.add_parser("freeze", help="copy complete records into results/<version> with a manifest", parents=[debug])
    fr.add_argument("--version", required=True, help="bundle version, e.g. v1")
    fr.add_argument(
        "--runs",
        action="append",
        help="run records root (default outputs/runs); repeat as LABEL=DIR to "
        "keep records of several roots apart under their labels",
    )
    fr.add_argument("--results", type=Path, default=Path("results"), help="bundles root (default results)")
    for name in ("arm", "task", "profile", "seed"):
        fr.add_argument(f"--{name}", action="append", help=f"only these {name}s (glob; repeatable)")
    fr.add_argument(
        "--bench", type=Path, action="append", help="benchmark record file or folder to include (repeatable)"
    )
    fr.add_argument("--no-analysis", action="store_true", help="skip the ListOps root-operator analysis")
    fr.add_argument("--data-dir", type=Path, default=Path(os.environ.get("LRA_DATA_DIR", "data")))
    fr.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("LRA_CACHE_DIR", ".cache/lra-repro")))
    fr.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    fr.add_argument("--author", action="append", help="author for CITATION.cff (repeatable)")
    fr.add_argument("--title", help="title for CITATION.cff")
    fr.add_argument(
        "--extra",
        type=Path,
        action="append",
        help="file or folder backing a finding that is no run record or benchmark (repeatable)",
    )
    fr.add_argument(
        "--notes", type=Path, help=f"Markdown file copied into the bundle as {NOTES} (budget, how it was run)"
    )
    fr.add_argument(
        "--from-bundle",
        type=Path,
        action="append",
        help="an earlier bundle whose records, notes and files the new one takes over (repeatable; then no "
        "--runs default)",
    )
    fr.add_argument(
        "--leave-out",
        type=Path,
        action="append",
        help="a record folder of a --from-bundle bundle not to take (repeatable; the manifest names it)",
    )
    fr.add_argument(
        "--leave-out-from",
        type=Path,
        action="append",
        default=[],
        help="a grid file whose 'superseded' records are not taken either, each a record of the --from-bundle "
        "bundles, its path relative to the working directory (run from the repository root; repeatable)",
    )
    fr.add_argument("--strict", action="store_true", help="refuse to freeze when a matching record is not complete")
    for name, text in (("verify", "recompute every checksum"), ("cite", "print BibTeX and a one-line citation")):
        p = sub.add_parser(name, help=text, parents=[debug])
        p.add_argument("bundle", type=Path)
    ls = sub.add_parser("ls", help="list the bundles under --results (default results)", parents=[debug])
    ls.add_argument("--results", type=Path, default=Path("results"))
    return parser


def main(argv: list[str] | None = None) -> int:
    """``lra-bundle``: refused input (a bundle that cannot be frozen, read or cited, one that fails ``verify``) is
    answered with exit status 2, as the runner answers it (``validate.refused``; ``--debug``: the traceback); exit
    status 1 is left to bugs."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "freeze":

            def log(message, file=sys.stdout):
                print(message, file=file)

            freeze(
                args.version,
                args.runs or (None if args.from_bundle else [Path("outputs/runs")]),
                args.results,
                args.arm,
                args.task,
                args.profile,
                args.seed,
                args.bench,
                analysis=not args.no_analysis,
                data_dir=args.data_dir,
                cache_dir=args.cache_dir,
                workers=args.workers,
                authors=args.author,
                title=args.title,
                notes=args.notes,
                extra=args.extra,
                log=log,
                from_bundles=args.from_bundle,
                leave_out=[*(args.leave_out or []), *superseded_records(args.leave_out_from, args.from_bundle or [])],
                strict=args.strict,
            )
        elif args.command == "verify":
            problems = verify(args.bundle)
            if problems:
                print(f"{args.bundle}: FAILED", file=sys.stderr)
                for problem in problems:
                    print(f"  {problem}", file=sys.stderr)
                from .run.validate import EXIT_STATUS  # torch and the runner's checks load only on refused input

                return EXIT_STATUS
            manifest = load_manifest(args.bundle)
            print(f"{args.bundle}: OK, {len(manifest['files'])} files, manifest sha256 {manifest_hash(args.bundle)}")
        elif args.command == "cite":
            require_intact(args.bundle)
            line, bibtex = citation(args.bundle)
            print(line)
            print()
            print(bibtex)
        elif args.command == "ls":
            bundles = sorted(p for p in Path(args.results).glob("*") if (p / MANIFEST).exists())
            if not bundles:
                print(f"no bundles under {args.results}")
            for path in bundles:
                m = load_manifest(path)
                print(
                    f"{m['version']}\t{m['created']}\t{_counted(len(m['runs']), 'run')}\t{', '.join(m['profiles'])}\t"
                    f"sha256 {manifest_hash(path)[:16]}"
                )
    except (BundleError, GridError) as err:
        from .run.validate import refused

        return refused(err, args.debug, superseded_source(str(err), getattr(args, "leave_out_from", [])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

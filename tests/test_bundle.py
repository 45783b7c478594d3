"""Bundles: freeze, verify, cite."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_records import SMOKE_LISTOPS, fixed_labels, make_record

from repro import bundle
from repro.bundle import BundleError

ROOT = Path(__file__).resolve().parents[1]


def quiet(*args, **kwargs):
    pass


@pytest.fixture()
def runs(tmp_path) -> Path:
    root = tmp_path / "outputs" / "runs"
    labels = fixed_labels("text", 50)
    for arm, acc in (("locality_k5", 0.80), ("locality_k61", 0.70)):
        for seed in (0, 1):
            make_record(root, arm, "text", seed, labels=labels, accuracy=acc + 0.02 * seed)
    make_record(
        root, "lra_transformer", "text", 0, labels=labels, accuracy=0.6, profile="smoke", device="cpu", peak_mem=None
    )
    make_record(root, "lra_transformer", "text", 1, labels=labels, accuracy=0.6, write_metrics=False)
    make_record(root, "lra_performer", "text", 0, labels=labels, accuracy=0.6, status="running")
    return root


def freeze(runs: Path, version: str = "v1", **kwargs) -> Path:
    return bundle.freeze(version, runs, runs.parents[1] / "results", analysis=False, log=quiet, **kwargs)


def kept_and_left_out(runs: Path) -> tuple[list[str], list[dict]]:
    """Freeze ``runs``: the bundle paths of the records taken, and the manifest's records left out."""
    manifest = bundle.load_manifest(freeze(runs))
    return [r["path"] for r in manifest["runs"]], manifest["left_out"]


def test_freeze_copies_complete_records_only_and_verify_passes(runs):
    out = freeze(runs)
    assert bundle.verify(out) == []
    manifest = bundle.load_manifest(out)
    assert [r["path"] for r in manifest["runs"]] == [
        "runs/locality_k5/text/budget/seed0",
        "runs/locality_k5/text/budget/seed1",
        "runs/locality_k61/text/budget/seed0",
        "runs/locality_k61/text/budget/seed1",
        "runs/lra_transformer/text/smoke/seed0",
    ]
    assert manifest["left_out"] == [
        {"path": "lra_performer/text/budget/seed0", "reason": "incomplete: status 'running'"},
        {
            "path": "lra_transformer/text/budget/seed1",
            "reason": "incomplete: no metrics.json (run in progress or interrupted)",
        },
    ]
    assert manifest["devices"] == ["NVIDIA H200", "cpu"] and manifest["profiles"] == ["budget", "smoke"]
    assert manifest["budget_minutes"] == [3.0] and manifest["runs"][0]["budget_minutes"] == 3.0
    assert manifest["version"] == "v1" and manifest["created"] and manifest["git_commit"]
    assert manifest["package_versions"][0]["torch"] == "2.11.0+cu130"
    # no checkpoints, every file listed with its real hash and size, nothing left behind in results/
    assert not list(out.rglob("*.pt")) and not list(out.rglob("checkpoints"))
    for entry in manifest["files"]:
        data = (out / entry["path"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["size"] == len(data)
    assert {e["path"] for e in manifest["files"]} == set(bundle.bundle_files(out))
    assert "CITATION.cff" in {e["path"] for e in manifest["files"]}
    assert sorted(p.name for p in out.parent.iterdir()) == ["v1"]
    assert (
        out / "MANIFEST.sha256"
    ).read_text() == f"{hashlib.sha256((out / 'MANIFEST.json').read_bytes()).hexdigest()}  MANIFEST.json\n"
    # the copies are byte-identical to the records
    for name in ("config.yaml", "history.csv", "predictions.csv", "metrics.json"):
        assert (out / "runs/locality_k5/text/budget/seed0" / name).read_bytes() == (
            runs / "locality_k5/text/budget/seed0" / name
        ).read_bytes()


def test_filters_choose_records(runs):
    out = freeze(runs, arms=["locality_*"], seeds=["1"])
    assert [r["path"] for r in bundle.load_manifest(out)["runs"]] == [
        "runs/locality_k5/text/budget/seed1",
        "runs/locality_k61/text/budget/seed1",
    ]


def test_editing_one_byte_fails_verify_naming_the_file(runs):
    out = freeze(runs)
    target = out / "runs/locality_k61/text/budget/seed1/predictions.csv"
    data = bytearray(target.read_bytes())
    data[-2] = ord("1") if data[-2] != ord("1") else ord("0")
    target.write_bytes(bytes(data))
    assert bundle.verify(out) == ["changed: runs/locality_k61/text/budget/seed1/predictions.csv"]


def test_deleting_or_adding_a_file_fails_verify_naming_it(runs):
    out = freeze(runs)
    (out / "runs/locality_k5/text/budget/seed0/history.csv").unlink()
    (out / "runs/locality_k5/text/budget/seed0/notes.txt").write_text("added\n")
    assert bundle.verify(out) == [
        "missing: runs/locality_k5/text/budget/seed0/history.csv",
        "extra: runs/locality_k5/text/budget/seed0/notes.txt",
    ]


def test_editing_the_manifest_itself_fails_verify(runs):
    out = freeze(runs)
    manifest = json.loads((out / "MANIFEST.json").read_text())
    manifest["created"] = "1999-01-01T00:00:00+00:00"
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2))
    assert bundle.verify(out) == ["changed: MANIFEST.json (its sha256 differs from MANIFEST.sha256)"]


def test_freezing_an_existing_version_fails_and_changes_nothing(runs):
    out = freeze(runs)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(
        BundleError, match=r"results/v1 already exists: bundles are never overwritten; choose another --version"
    ):
        freeze(runs)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["v1"]


def test_a_failed_freeze_leaves_nothing_in_results(runs, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(bundle, "_citation", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        freeze(runs)
    assert list((runs.parents[1] / "results").iterdir()) == []


def test_nothing_to_freeze_and_bad_versions_are_refused(runs):
    with pytest.raises(BundleError, match="nothing to freeze: no complete record .* matches the filters"):
        freeze(runs, arms=["no_such_arm"])
    with pytest.raises(BundleError, match="version '../x': use letters"):
        freeze(runs, version="../x")


def test_cite_contains_version_and_manifest_hash(runs):
    out = freeze(runs, version="2026-11-26.1")
    digest = hashlib.sha256((out / "MANIFEST.json").read_bytes()).hexdigest()
    line, bibtex = bundle.citation(out)
    assert "2026-11-26.1" in line and digest in line
    assert (
        bibtex.startswith("@misc{lrarepro_2026_11_26_1,") and "version = {2026-11-26.1}" in bibtex and digest in bibtex
    )
    cff = (out / "CITATION.cff").read_text()
    assert 'version: "2026-11-26.1"' in cff and "cff-version: 1.2.0" in cff
    n_runs = len(bundle.load_manifest(out)["runs"])
    assert f'abstract: "{n_runs} run records of LRA-repro' in cff
    single = freeze(runs, version="one", arms=["lra_transformer"])
    assert 'abstract: "1 run record of LRA-repro' in (single / "CITATION.cff").read_text()
    table = runs.parents[1] / "statistics.json"
    table.write_text('{"n": 400}\n')
    files_only = freeze(runs, version="files", arms=["no_such_arm"], extra=[table])  # a bundle of evidence alone
    assert bundle.verify(files_only) == [] and bundle.load_manifest(files_only)["runs"] == []
    cff = (files_only / "CITATION.cff").read_text()
    assert 'abstract: "Files backing a finding (no run records) of LRA-repro' in cff


def test_bench_files_are_frozen_without_checkpoints(runs, tmp_path):
    bench = tmp_path / "bench_out"
    bench.mkdir()
    (bench / "bench.csv").write_text("model,length,mode,steps_per_s,peak_mem_bytes,status\n")
    (bench / "model.pt").write_bytes(b"x")
    out = freeze(runs, bench=[bench])
    assert bundle.load_manifest(out)["bench"] == ["bench/bench_out/bench.csv"]
    assert bundle.verify(out) == []


def test_listops_root_operators_are_rebuilt_and_checked_against_the_record(tmp_path):
    from repro.tasks import get_task_builder
    from repro.tasks.listops import VOCAB

    cache = tmp_path / "cache"
    task = get_task_builder("listops")(SMOKE_LISTOPS, tmp_path / "nodata", cache, 1)
    root = tmp_path / "outputs" / "runs"
    make_record(
        root,
        "locality_k61",
        "listops",
        0,
        labels=task.test.labels,
        accuracy=0.4,
        num_classes=10,
        task_cfg=SMOKE_LISTOPS,
    )
    wrong = dict(SMOKE_LISTOPS, data_seed=5)  # claims another test set than its labels
    make_record(
        root, "locality_k5", "listops", 0, labels=task.test.labels, accuracy=0.4, num_classes=10, task_cfg=wrong
    )
    out = bundle.freeze("v1", root, tmp_path / "results", data_dir=tmp_path / "nodata", cache_dir=cache, log=quiet)
    manifest = bundle.load_manifest(out)
    key = bundle.listops_roots_key({"task": SMOKE_LISTOPS, "subset": None})
    assert manifest["analysis"] == [f"analysis/listops_roots/{key}"]
    [missing] = manifest["analysis_missing"]
    assert (
        missing["record"] == "locality_k5/listops/budget/seed0"
        and "does not match the record's predictions.csv labels" in missing["reason"]
    )
    lines = (out / f"analysis/listops_roots/{key}.csv").read_text().splitlines()
    assert lines[0] == "index,root,label" and len(lines) == 65
    assert [line.split(",")[1] for line in lines[1:]] == [VOCAB[int(t)] for t in task.test.inputs[:, 0]]
    summary = json.loads((out / f"analysis/listops_roots/{key}.json").read_text())
    assert sum(sum(v["label_counts"]) for v in summary["train"].values()) == 128
    assert bundle.verify(out) == []


def test_command_line_freeze_verify_cite_ls(runs, tmp_path):
    def cli(*args):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        return subprocess.run(
            [sys.executable, "-m", "repro.bundle", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = cli("freeze", "--version", "v2", "--runs", str(runs), "--no-analysis")
    assert done.returncode == 0, done.stderr
    assert "left out lra_transformer/text/budget/seed1: incomplete: no metrics.json" in done.stderr
    assert "froze 5 record(s)" in done.stdout
    assert cli("verify", "results/v2").stdout.startswith("results/v2: OK")
    again = cli("freeze", "--version", "v2", "--runs", str(runs), "--no-analysis")
    assert again.returncode == 2 and "results/v2 already exists" in again.stderr
    digest = hashlib.sha256((tmp_path / "results/v2/MANIFEST.json").read_bytes()).hexdigest()
    cited = cli("cite", "results/v2")
    assert cited.returncode == 0 and "v2" in cited.stdout and digest in cited.stdout
    assert cli("ls").stdout.startswith("v2\t") and "\t5 runs\t" in cli("ls").stdout
    (tmp_path / "results/v2/CITATION.cff").write_text("edited\n")
    failed = cli("verify", "results/v2")
    assert failed.returncode == 2 and "changed: CITATION.cff" in failed.stderr
    assert cli("cite", "results/v2").returncode == 2


def test_a_record_under_arm_plus_techniques_is_consistent_only_with_those_techniques(tmp_path):
    """records.record_arm writes ``<arm>+<techniques>/`` when the techniques are not the arm's own
    (``techniques.arm_default``); records from before that key may sit under either name."""
    runs_root = tmp_path / "outputs" / "runs"
    cases = (
        ("s4+followup", {"name": "followup", "arm_default": "none"}),  # consistent
        ("gmlp+followup", {"name": "followup"}),  # older record: either name
        ("s5+none", {"name": "followup"}),  # older record, wrong techniques
        ("mega", {"name": "followup", "arm_default": "none"}),
    )  # not the arm's own: needs mega+followup
    for folder, techniques in cases:
        arm = folder.partition("+")[0]
        made = make_record(
            runs_root, arm, "text", 0, techniques=techniques["name"], labels=fixed_labels("text", 40), accuracy=0.7
        )
        metrics = json.loads((made / "metrics.json").read_text())
        metrics["techniques"] = techniques
        (made / "metrics.json").write_text(json.dumps(metrics))
        target = runs_root / folder / "text" / "budget" / "seed0"
        if target != made:
            target.parent.mkdir(parents=True)
            made.rename(target)
    kept_paths, left_out = kept_and_left_out(runs_root)
    assert kept_paths == [
        "runs/gmlp+followup/text/budget/seed0",
        "runs/s4+followup/text/budget/seed0",
    ]
    assert left_out == [
        {"path": "mega/text/budget/seed0", "reason": "inconsistent: metrics.json says mega+followup/text/budget/seed0"},
        {
            "path": "s5+none/text/budget/seed0",
            "reason": "inconsistent: metrics.json says s5+followup/text/budget/seed0 or s5/text/budget/seed0",
        },
    ]


def test_a_record_whose_config_is_not_its_own_is_left_out(tmp_path):
    """config.yaml's training settings must be the ones metrics.json says the run trained with: a
    config.yaml copied from another run (another budget) makes the record inconsistent, not a result."""
    runs_root = tmp_path / "outputs" / "runs"
    kept, other, share = (
        make_record(runs_root, "lra_transformer", "text", seed, labels=fixed_labels("text", 40), accuracy=0.7)
        for seed in (0, 1, 2)
    )
    # share: an example budget, which config.yaml keeps as typed and metrics.json as the step cap it became
    for folder, typed, ran in (
        (kept, "", {"lr": 0.001, "batch_size": 32}),
        (other, "budget_minutes: 3", {"lr": 0.001, "budget_minutes": 10}),
        (share, "budget_fraction: 0.1\n  max_steps: null", {"lr": 0.001, "budget_fraction": 0.1, "max_steps": 70}),
    ):
        config = (folder / "config.yaml").read_text()
        (folder / "config.yaml").write_text(config.replace("lr: 0.001", f"lr: 0.001\n  {typed}") if typed else config)
        metrics = json.loads((folder / "metrics.json").read_text())
        metrics["train_settings"] = ran
        metrics["files"]["config.yaml"] = bundle.sha256_file(folder / "config.yaml")  # as the runner lists it
        (folder / "metrics.json").write_text(json.dumps(metrics))
    kept_paths, left_out = kept_and_left_out(runs_root)
    assert kept_paths == [
        "runs/lra_transformer/text/budget/seed0",
        "runs/lra_transformer/text/budget/seed2",
    ]
    assert left_out == [
        {
            "path": "lra_transformer/text/budget/seed1",
            "reason": "inconsistent: train.budget_minutes: config.yaml 3, metrics.json 10 "
            "(a config.yaml not this run's)",
        }
    ]


def test_a_record_whose_predictions_do_not_score_its_accuracy_is_left_out(tmp_path):
    runs_root = tmp_path / "outputs" / "runs"
    labels = fixed_labels("text", 40)
    kept, edited = (
        make_record(runs_root, "lra_transformer", "text", seed, labels=labels, accuracy=0.5) for seed in (0, 1)
    )
    lines = (edited / "predictions.csv").read_text().splitlines()
    index, prediction, label = lines[1].split(",")
    lines[1] = ",".join([index, label if prediction != label else str(1 - int(label)), label])  # one answer changed
    (edited / "predictions.csv").write_text("\n".join(lines) + "\n")
    kept_paths, left_out = kept_and_left_out(runs_root)
    assert kept_paths == ["runs/lra_transformer/text/budget/seed0"]
    flipped = 0.525 if prediction != label else 0.475
    assert left_out == [
        {
            "path": "lra_transformer/text/budget/seed1",
            "reason": f"inconsistent: predictions.csv scores {flipped:.6g} over 40 examples, metrics.json's "
            "test_acc is 0.5",
        }
    ]


def test_notes_are_frozen_and_checksummed(runs, tmp_path):
    notes = tmp_path / "grid_notes.md"
    notes.write_text("# How this grid ran\n3 minutes per run.\n")
    out = freeze(runs, notes=notes)
    assert (out / "NOTES.md").read_text() == notes.read_text()
    assert "NOTES.md" in {e["path"] for e in bundle.load_manifest(out)["files"]} and bundle.verify(out) == []
    with pytest.raises(
        BundleError,
        match=r"--notes .*missing\.md: no such file; give a Markdown file to copy into the bundle as NOTES\.md",
    ):
        freeze(runs, "v2", notes=tmp_path / "missing.md")
    assert not (out.parent / "v2").exists()


def test_labelled_roots_keep_records_of_the_same_cell_apart(tmp_path):
    labels = fixed_labels("text", 20)
    roots = {}
    for label, acc in (("layer_norm", 0.55), ("batch_norm", 0.65)):
        roots[label] = tmp_path / label / "runs"
        make_record(roots[label], "locality_k61", "text", 0, labels=labels, accuracy=acc)
    made = bundle.freeze(
        "v1", [f"{label}={root}" for label, root in roots.items()], tmp_path / "results", analysis=False, log=quiet
    )
    manifest = bundle.load_manifest(made)
    assert sorted((r["label"], r["path"]) for r in manifest["runs"]) == [
        ("batch_norm", "runs/batch_norm/locality_k61/text/budget/seed0"),
        ("layer_norm", "runs/layer_norm/locality_k61/text/budget/seed0"),
    ]
    for label, root in roots.items():  # each copy is its own record, byte for byte
        src = root / "locality_k61" / "text" / "budget" / "seed0" / "metrics.json"
        assert (made / "runs" / label / "locality_k61/text/budget/seed0/metrics.json").read_bytes() == src.read_bytes()
    assert bundle.verify(made) == []


@pytest.mark.parametrize(
    "values, message",
    [
        (["a={x}", "{x}"], "--runs: several roots need a label each (LABEL=DIR), so their records cannot collide"),
        (["a={x}", "a={x}"], "--runs a={x}: label a given twice"),
        (["a/b={x}"], "--runs a/b={x}: a label is letters, digits, '.', '_' or '-'"),
    ],
)
def test_runs_roots_that_could_collide_are_refused(tmp_path, values, message):
    values = [v.format(x=tmp_path) for v in values]
    with pytest.raises(BundleError) as err:
        bundle.freeze("v1", values, tmp_path / "results", analysis=False, log=quiet)
    assert str(err.value) == message.format(x=tmp_path)


def test_extra_files_are_copied_checksummed_and_listed(tmp_path):
    probe = tmp_path / "probes"
    (probe / "inner").mkdir(parents=True)
    (probe / "control.json").write_text('{"val_acc": 0.99}\n')
    (probe / "inner" / "note.txt").write_text("logit spread 2e-5\n")
    (tmp_path / "runs").mkdir()
    made = bundle.freeze("v1", tmp_path / "runs", tmp_path / "results", extra=[probe], analysis=False, log=quiet)
    manifest = bundle.load_manifest(made)
    assert manifest["extra"] == ["extra/probes/control.json", "extra/probes/inner/note.txt"] and manifest["runs"] == []
    assert (made / "extra/probes/inner/note.txt").read_text() == "logit spread 2e-5\n"
    assert bundle.verify(made) == []
    (made / "extra/probes/control.json").write_text('{"val_acc": 1.0}\n')
    assert bundle.verify(made) == ["changed: extra/probes/control.json"]


def test_extra_folders_of_one_name_stay_apart_inside_bundles_and_are_refused_outside(tmp_path):
    (tmp_path / "runs").mkdir()
    records = []
    for version in ("slot1", "slot2"):  # the same record path in two bundles
        record = tmp_path / "results" / version / "runs" / "lra_local" / "listops" / "paper" / "seed0"
        record.mkdir(parents=True)
        (record / "metrics.json").write_text(f'{{"from": "{version}"}}\n')
        (tmp_path / "results" / version / "MANIFEST.json").write_text("{}\n")
        records.append(record)
    made = bundle.freeze("v1", tmp_path / "runs", tmp_path / "out", extra=records, analysis=False, log=quiet)
    assert bundle.load_manifest(made)["extra"] == [
        "extra/slot1/runs/lra_local/listops/paper/seed0/metrics.json",
        "extra/slot2/runs/lra_local/listops/paper/seed0/metrics.json",
    ]
    assert (made / "extra/slot2/runs/lra_local/listops/paper/seed0/metrics.json").read_text() == '{"from": "slot2"}\n'
    loose = []
    for parent in ("a", "b"):  # two folders named seed0 outside any bundle
        (tmp_path / parent / "seed0").mkdir(parents=True)
        (tmp_path / parent / "seed0" / "metrics.json").write_text("{}\n")
        loose.append(tmp_path / parent / "seed0")
    with pytest.raises(BundleError) as err:
        bundle.freeze("v2", tmp_path / "runs", tmp_path / "out", extra=loose, analysis=False, log=quiet)
    assert str(err.value) == (
        f"--extra {loose[1] / 'metrics.json'} and {loose[0] / 'metrics.json'} would both be extra/seed0/metrics.json: "
        "copy one into a folder of another name first"
    )
    assert not (tmp_path / "out" / "v2").exists()  # nothing half-written


def slot_bundles(tmp_path) -> tuple[Path, Path]:
    """Two bundles frozen slot by slot: locality_k5 seeds 0-1 (with notes and an extra file), locality_k61 seed 0."""
    labels, results = fixed_labels("text", 30), tmp_path / "results"
    made = []
    for name, arm, seeds in (("slot1", "locality_k5", (0, 1)), ("slot2", "locality_k61", (0,))):
        root = tmp_path / name / "runs"
        for seed in seeds:
            make_record(root, arm, "text", seed, labels=labels, accuracy=0.7 + 0.01 * seed)
        notes, log = tmp_path / name / "notes.md", tmp_path / name / "grid_log.csv"
        notes.write_text(f"# {name}\n")
        log.write_text(f"arm,exit\n{arm},0\n")
        made.append(bundle.freeze(name, root, results, analysis=False, log=quiet, notes=notes, extra=[log]))
    return made[0], made[1]


def test_earlier_bundles_merge_into_one_that_names_them(tmp_path):
    """Every record of both, byte for byte; their notes and extra files under sources/<version>/; the manifest
    names each merged bundle with its manifest hash; the merged bundle verifies."""
    slot1, slot2 = slot_bundles(tmp_path)
    merged = bundle.freeze("all", None, tmp_path / "results", analysis=False, log=quiet, from_bundles=[slot1, slot2])
    manifest = bundle.load_manifest(merged)
    assert bundle.verify(merged) == []
    assert [r["path"] for r in manifest["runs"]] == [
        "runs/locality_k5/text/budget/seed0",
        "runs/locality_k5/text/budget/seed1",
        "runs/locality_k61/text/budget/seed0",
    ]
    assert manifest["sources"] == [
        {"version": "slot1", "manifest_sha256": bundle.manifest_hash(slot1), "runs": 2},
        {"version": "slot2", "manifest_sha256": bundle.manifest_hash(slot2), "runs": 1},
    ]
    kept = ("MANIFEST.json", "MANIFEST.sha256", "NOTES.md", "extra/grid_log.csv")  # not runs/ nor CITATION.cff
    assert manifest["source_files"] == [f"sources/{v}/{rel}" for v in ("slot1", "slot2") for rel in kept]
    for source in manifest["sources"]:  # the hash a citation of a slot names can still be checked here
        copy = merged / "sources" / source["version"] / "MANIFEST.json"
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == source["manifest_sha256"]
    for source in (slot1, slot2):
        for entry in bundle.load_manifest(source)["files"]:
            rel = entry["path"]
            if rel.startswith("runs/"):
                assert (merged / rel).read_bytes() == (source / rel).read_bytes()
            elif rel == "NOTES.md" or rel.startswith("extra/"):
                assert (merged / "sources" / source.name / rel).read_bytes() == (source / rel).read_bytes()
    argv = ["freeze", "--version", "all-cli", "--results", str(tmp_path / "results"), "--no-analysis"]
    assert bundle.main([*argv, "--from-bundle", str(slot1), "--from-bundle", str(slot2)]) == 0  # no --runs default
    assert bundle.load_manifest(tmp_path / "results" / "all-cli")["runs"] == manifest["runs"]


def test_a_merge_leaves_out_the_records_it_is_told_to_and_names_them(tmp_path):
    """--leave-out (a record run before its arm's settings were corrected): not taken, named in the manifest's
    left_out with the reason; a folder that is no record of the merged bundles is refused."""
    slot1, slot2 = slot_bundles(tmp_path)
    results, gone = tmp_path / "results", slot1 / "runs/locality_k5/text/budget/seed1"
    merged = bundle.freeze(
        "all", None, results, analysis=False, log=quiet, from_bundles=[slot1, slot2], leave_out=[gone]
    )
    manifest = bundle.load_manifest(merged)
    assert [r["path"] for r in manifest["runs"]] == [
        "runs/locality_k5/text/budget/seed0",
        "runs/locality_k61/text/budget/seed0",
    ]
    reason = "left out by --leave-out"
    assert manifest["left_out"] == [{"path": "slot1/locality_k5/text/budget/seed1", "reason": reason}]
    assert bundle.verify(merged) == []
    with pytest.raises(BundleError) as unknown:
        bundle.freeze("x", None, results, analysis=False, log=quiet, from_bundles=[slot2], leave_out=[gone])
    assert str(unknown.value) == f"--leave-out {gone}: not a record of the --from-bundle bundles that the filters keep"


def test_a_merge_refuses_a_record_twice_and_a_changed_bundle(tmp_path):
    slot1, slot2 = slot_bundles(tmp_path)
    results = tmp_path / "results"
    with pytest.raises(BundleError) as twice:  # a slot's records also given as a records folder
        bundle.freeze("all", [slot1 / "runs"], results, analysis=False, log=quiet, from_bundles=[slot1, slot2])
    record = "runs/locality_k5/text/budget/seed0"
    assert str(twice.value) == (
        f"{record} would come from both {slot1 / record} and {slot1 / record}: "
        "leave one of them out (--from-bundle, --runs or the filters)"
    )
    with pytest.raises(BundleError) as again:
        bundle.freeze("all", None, results, analysis=False, log=quiet, from_bundles=[slot1, slot2, slot2])
    assert str(again.value) == f"--from-bundle {slot2}: version slot2 is also {slot2}; give each once"
    (slot2 / "NOTES.md").write_text("edited\n")
    with pytest.raises(BundleError, match=r"slot2 fails verification:\n  .*NOTES\.md"):
        bundle.freeze("all", None, results, analysis=False, log=quiet, from_bundles=[slot1, slot2])
    assert sorted(p.name for p in results.iterdir()) == ["slot1", "slot2"]  # nothing half-written

"""Every task end to end on the smoke profile, from fixtures in the official layouts."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import read_json, run_cli
from test_image import make_official as make_cifar

TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")


def random_text(rng: random.Random, n_words: int) -> str:
    return " ".join("".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 8))) for _ in range(n_words))


def make_acl_imdb(root: Path, per_class: dict[str, int], rng: random.Random) -> None:
    for split, n in per_class.items():
        for label in ("pos", "neg"):
            folder = root / "aclImdb" / split / label
            folder.mkdir(parents=True)
            for i in range(n):
                (folder / f"{i}_{rng.randint(1, 10)}.txt").write_text(random_text(rng, rng.randint(5, 300)))


def make_aan(root: Path, rows: dict[str, int], rng: random.Random) -> None:
    folder = root / "tsv_data"
    folder.mkdir(parents=True)
    for split, n in rows.items():
        lines = [f"{i % 2}\tA{i}\tB{i}\tb'{random_text(rng, 40)}'\tb'{random_text(rng, 900)}'" for i in range(n)]
        (folder / f"new_aan_pairs.{split}.tsv").write_text("".join(line + "\n" for line in lines))


@pytest.mark.slow
def test_locality_arm_runs_every_task_from_official_layouts(tmp_path):
    data = tmp_path / "data"
    rng = random.Random(0)
    make_acl_imdb(data, {"train": 40, "test": 10}, rng)
    make_aan(data, {"train": 40, "eval": 10, "test": 10}, rng)
    make_cifar(data)
    generated = [f"++profile.tasks.{task}.source=generated" for task in ("listops", "pathfinder", "pathx")]
    done = run_cli(
        "arm=locality_k61",
        "profile=smoke",
        f"data_dir={data}",
        *generated,
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={tmp_path / 'cache'}",
        "progress=false",
        "workers=2",
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "arm locality_k61: 6 task(s) done" in done.stdout, done.stdout[-2000:]
    for task in TASKS:
        metrics = read_json(tmp_path / "out" / "runs" / "locality_k61" / task / "smoke" / "seed0" / "metrics.json")
        assert metrics["status"] == "complete" and metrics["task"] == task
        assert 0.0 <= metrics["test_acc"] <= 1.0
    retrieval = read_json(tmp_path / "out" / "runs" / "locality_k61" / "retrieval" / "smoke" / "seed0" / "metrics.json")
    assert retrieval["data"]["truncated"]["train"] > 0  # 900-word documents exceed 4000 bytes and are counted
    pathx = read_json(tmp_path / "out" / "runs" / "locality_k61" / "pathx" / "smoke" / "seed0" / "metrics.json")
    assert pathx["data"]["resolution"] == 128

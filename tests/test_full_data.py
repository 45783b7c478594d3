"""The full IMDb JSONL and CIFAR-10 JPEG files (docs/data.md), in the folder ``$LRA_TEST_DATA_DIR`` names
(laid out as a run's ``data_dir``: ``imdb/``, ``cifar10_jpeg/``).

Each bundle is decompressed and tokenised once into a module-wide temporary cache;
later builds read the cache. Skipped when the variable is unset or the folders are absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from test_image import cfg as image_cfg

from repro.tasks import image, text
from repro.tasks.byte_text import index_digest, stratified_holdout

DATA_DIR = Path(os.environ.get("LRA_TEST_DATA_DIR", "<LRA_TEST_DATA_DIR unset>"))
IMDB = DATA_DIR / "imdb"
CIFAR = DATA_DIR / "cifar10_jpeg"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("shared_cache")


def _text_cfg(**over):
    return {
        "name": "text",
        "source": "bundle",
        "max_len": 4096,
        "strip": True,
        "validation": "train_holdout",
        "val_fraction": 0.1,
        "data_seed": 0,
        "official_subdir": "aclImdb",
        "bundle_subdir": "imdb",
        **over,
    }


def _per_class(labels):
    return np.bincount(np.asarray(labels), minlength=10).tolist()


def test_imdb_bundle(cache):
    if not all((IMDB / f"imdb_{s}.jsonl.xz").is_file() for s in ("train", "test")):
        pytest.skip(f"IMDb bundle not present at {IMDB} (set LRA_TEST_DATA_DIR to its parent folder)")
    task = text.build(_text_cfg(), DATA_DIR, cache)
    assert task.info["cache_hit"] is False and task.info["source"] == "bundle"
    assert (len(task.train), len(task.val), len(task.test)) == (22_500, 2_500, 25_000)
    assert _per_class(np.concatenate([task.train.labels, task.val.labels]))[:2] == [12_500, 12_500]
    assert _per_class(task.val.labels)[:2] == [1_250, 1_250]
    assert _per_class(task.test.labels)[:2] == [12_500, 12_500]
    assert task.train.inputs.shape == (22_500, 4096) and task.train.inputs.dtype == np.uint8
    assert int(task.test.inputs.max()) <= 0xF4 + 1  # UTF-8 never holds a byte above 0xF4
    # reviews over 4096 bytes (PROVENANCE: max 13,704 train / 12,988 test; about 3% exceed 4000)
    truncated = task.info["truncated"]
    assert truncated["train"] + truncated["val"] == task.info["truncated_by_file_split"]["train"] == 727
    assert truncated["test"] == 668
    assert task.info["lengths"]["train"]["max"] == 13_704 and task.info["lengths"]["test"]["max"] == 12_988

    # validating on test reuses the same tokenised cache entry
    lra_style = text.build(_text_cfg(validation="test"), DATA_DIR, cache)
    assert lra_style.info["cache_hit"] is True and lra_style.val is lra_style.test
    first = b"Story of a man who has unnatural feelings for a pig."  # aclImdb/train/neg/0_3.txt
    assert lra_style.train.inputs[0, : len(first)].tolist() == [b + 1 for b in first]
    assert lra_style.train.labels[0] == 0 and lra_style.train.labels[-1] == 1


@pytest.mark.slow
def test_cifar_bundle(cache):
    present = [v for v in ("rgb", "gray") if (CIFAR / image.BUNDLE_FILES[v]).is_file()]
    if not present:
        pytest.skip(f"CIFAR-10 JPEG bundle not present at {CIFAR} (set LRA_TEST_DATA_DIR to its parent folder)")
    tasks = {v: image.build(image_cfg(source="bundle", variant=v), DATA_DIR, cache) for v in present}
    for variant, task in tasks.items():
        assert task.info["proxy"] is True and "LOSSY PROXY" in task.info["note"]
        assert (len(task.train), len(task.val), len(task.test)) == (45_000, 5_000, 10_000)
        assert _per_class(np.concatenate([task.train.labels, task.val.labels])) == [5_000] * 10
        assert _per_class(task.val.labels) == [500] * 10
        assert _per_class(task.test.labels) == [1_000] * 10
        assert (task.prepare is not None) == (variant == "rgb")
        # the bundle is class-sorted (index = 5000 * label + n): the 500 validation images of each
        # class are drawn from all over that class's run, not a contiguous block
        _, held = stratified_holdout(np.repeat(np.arange(10), 5_000), seed=0, fraction=0.1)
        assert index_digest(held) == task.info["validation"]["val_index_digest"]
        spans = held.reshape(10, 500)
        assert ((spans[:, -1] - spans[:, 0]) > 4_000).all() and (np.diff(spans, axis=1) > 1).any(axis=1).all()
    if len(tasks) == 2:
        rgb, gray = tasks["rgb"], tasks["gray"]
        assert rgb.info["validation"]["val_index_digest"] == gray.info["validation"]["val_index_digest"]
        # prepare on the RGB bundle reproduces the stored LRA-exact grayscale bit for bit
        for split in ("train", "val", "test"):
            rgb_x, gray_x = getattr(rgb, split).inputs, getattr(gray, split).inputs
            for start in range(0, len(rgb_x), 10_000):
                ids = rgb.prepare(torch.from_numpy(np.asarray(rgb_x[start : start + 10_000])))
                np.testing.assert_array_equal(ids.numpy(), np.asarray(gray_x[start : start + 10_000], dtype=np.int64))

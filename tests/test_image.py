"""Image task: cifar-10-batches-py and JPEG-proxy bundle readers, LRA grayscale, splits, errors."""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from repro.tasks import image
from repro.tasks.base import DataError, DataMissing

PER_CLASS_PER_BATCH = 2  # 5 batches x 20 images -> 100 train images, 10 per class
TEST_PER_CLASS = 1


def cfg(**over):
    base = {
        "name": "image",
        "source": "auto",
        "variant": "auto",
        "max_len": 1024,
        "val_fraction": 0.1,
        "data_seed": 0,
        "official_subdir": "cifar-10-batches-py",
        "bundle_subdir": "cifar10_jpeg",
    }
    return {**base, **over}


def planar_batch(rng, n_per_class):
    labels = np.tile(np.arange(10), n_per_class)
    rng.shuffle(labels)
    data = rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)
    return data, labels


def write_batch(path, data, labels, protocol=2, bytes_keys=True):
    batch = {
        "batch_label": "training batch",
        "labels": [int(v) for v in labels],
        "data": data,
        "filenames": [f"img_{i}.png" for i in range(len(labels))],
    }
    if bytes_keys:  # how Python 2's str keys look to Python 3
        batch = {k.encode(): (v.encode() if isinstance(v, str) else v) for k, v in batch.items()}
    path.write_bytes(pickle.dumps(batch, protocol=protocol))


def make_official(root, seed=0):
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = {}
    for i in range(1, 6):
        batches[f"data_batch_{i}"] = planar_batch(rng, PER_CLASS_PER_BATCH)
    batches["test_batch"] = planar_batch(rng, TEST_PER_CLASS)
    for j, (name, (data, labels)) in enumerate(batches.items()):
        # mix the pickle flavours: Python-2-style bytes keys (protocol 2) and str keys (protocol 5)
        write_batch(folder / name, data, labels, protocol=2 if j % 2 == 0 else 5, bytes_keys=j % 2 == 0)
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": list(image.CLASS_NAMES)}))
    return root, batches


def write_npy_tar(path, arrays):
    with tarfile.open(path, "w:xz") as tar:
        for name, array in arrays.items():
            buf = io.BytesIO()
            np.save(buf, array, allow_pickle=False)
            info = tarfile.TarInfo(f"{name}.npy")
            info.size = buf.tell()
            buf.seek(0)
            tar.addfile(info, buf)


def make_bundle(root, variants=("rgb", "gray"), n_per_class=10, seed=1):
    """Class-sorted arrays, like the real bundle (index = n_per_class * label + n)."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar10_jpeg"
    folder.mkdir(parents=True, exist_ok=True)
    rgb = {}
    for split, n in (("train", n_per_class), ("test", 2)):
        rgb[f"{split}_x"] = rng.integers(0, 256, size=(10 * n, 32, 32, 3), dtype=np.uint8)
        rgb[f"{split}_y"] = np.repeat(np.arange(10, dtype=np.uint8), n)
    if "rgb" in variants:
        write_npy_tar(folder / "cifar10_jpeg_rgb.tar.xz", rgb)
    gray = {k: (image.lra_grayscale_numpy(v) if k.endswith("_x") else v) for k, v in rgb.items()}
    if "gray" in variants:
        write_npy_tar(folder / "cifar10_jpeg_gray.tar.xz", gray)
    return root, rgb, gray


# ---------------------------------------------------------------- grayscale


def test_lra_grayscale_truncates_like_tensorflow():
    pixels = torch.tensor(
        [[0, 0, 0], [255, 255, 255], [0, 255, 0], [255, 0, 0], [0, 0, 255], [128, 128, 128]], dtype=torch.uint8
    )
    batch = torch.zeros(1, 32, 32, 3, dtype=torch.uint8)
    batch[0, 0, : len(pixels)] = pixels
    gray = image.lra_grayscale(batch)
    assert gray.shape == (1, 1024) and gray.dtype == torch.int64
    # green 255: 0.5870 * 255.5 = 149.97 -> 149 (rounding 0.5870 * 255 = 149.7 would give 150)
    assert gray[0, :6].tolist() == [0, 255, 149, 76, 29, 128]
    assert gray[0, 6:].eq(0).all()


def test_lra_grayscale_torch_numpy_and_layouts_agree():
    rng = np.random.default_rng(3)
    rgb = rng.integers(0, 256, size=(64, 32, 32, 3), dtype=np.uint8)
    expected = image.lra_grayscale_numpy(rgb).reshape(64, 1024).astype(np.int64)
    hwc = torch.from_numpy(rgb)
    np.testing.assert_array_equal(image.lra_grayscale(hwc).numpy(), expected)
    np.testing.assert_array_equal(image.lra_grayscale(hwc.permute(0, 3, 1, 2)).numpy(), expected)
    # the rounded variant differs on a fair share of pixels, always by +1
    rounded = np.clip(np.rint(rgb.astype(np.float64) @ [0.2989, 0.5870, 0.1140]), 0, 255).reshape(64, 1024)
    diff = rounded - expected
    assert set(np.unique(diff)) <= {0, 1} and 0.05 < diff.mean() < 0.4
    with pytest.raises(ValueError):
        image.lra_grayscale(torch.zeros(2, 1024, dtype=torch.uint8))


# ---------------------------------------------------------------- official batches


def test_official_reader_pixels_labels_and_splits(tmp_path):
    root, batches = make_official(tmp_path / "data")
    task = image.build(cfg(), root, tmp_path / "cache")
    assert task.info["source"] == "official" and task.info["proxy"] is False and "note" not in task.info
    assert (task.num_classes, task.vocab_size, task.max_len, task.pad_id, task.two_tower) == (
        10,
        256,
        1024,
        None,
        False,
    )
    assert task.prepare is image.lra_grayscale
    assert (len(task.train), len(task.val), len(task.test)) == (90, 10, 10)
    assert task.train.inputs.shape == (90, 32, 32, 3) and task.train.inputs.dtype == np.uint8
    # the full train set: batches in order, planar R/G/B -> HWC; train keeps the rest in order
    data = np.concatenate([batches[f"data_batch_{i}"][0] for i in range(1, 6)])
    labels = np.concatenate([batches[f"data_batch_{i}"][1] for i in range(1, 6)])
    hwc = _hwc(data)
    held = np.sort(_val_idx(task, data))
    keep = np.setdiff1d(np.arange(100), held)
    np.testing.assert_array_equal(task.train.inputs.reshape(90, -1), hwc[keep])
    np.testing.assert_array_equal(task.val.inputs.reshape(10, -1), hwc[held])
    np.testing.assert_array_equal(task.train.labels, labels[keep])
    np.testing.assert_array_equal(task.val.labels, labels[held])
    i, r, c = 7, 5, 9  # one pixel by hand: channel ch of (r, c) is byte ch*1024 + r*32 + c
    assert [int(data[i, ch * 1024 + r * 32 + c]) for ch in range(3)] == hwc[i].reshape(32, 32, 3)[r, c].tolist()
    # validation: one image per class (stratified), test untouched
    assert sorted(task.val.labels.tolist()) == list(range(10))
    np.testing.assert_array_equal(task.test.labels, batches["test_batch"][1])
    np.testing.assert_array_equal(task.test.inputs.reshape(10, -1), _hwc(batches["test_batch"][0]))
    gray = task.prepare(torch.from_numpy(np.asarray(task.test.inputs)))
    np.testing.assert_array_equal(gray.numpy(), image.lra_grayscale_numpy(np.asarray(task.test.inputs)).reshape(10, -1))


def _hwc(planar):
    return planar.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).reshape(len(planar), -1)


def _val_idx(task, data):
    """Positions in the original train order of the validation images (matched by pixels)."""
    lookup = {row.tobytes(): i for i, row in enumerate(_hwc(data))}
    return np.array([lookup[v.reshape(-1).tobytes()] for v in np.asarray(task.val.inputs)])


def test_split_is_seeded(tmp_path):
    root, _ = make_official(tmp_path / "data")
    a = image.build(cfg(), root, tmp_path / "cache")
    b = image.build(cfg(), root, tmp_path / "cache")
    c = image.build(cfg(data_seed=1), root, tmp_path / "cache")
    assert b.info["cache_hit"] is True
    np.testing.assert_array_equal(a.val.inputs, b.val.inputs)
    assert a.info["validation"]["val_index_digest"] == b.info["validation"]["val_index_digest"]
    assert a.info["validation"]["val_index_digest"] != c.info["validation"]["val_index_digest"]


def test_missing_data(tmp_path):
    with pytest.raises(DataMissing) as err:
        image.build(cfg(), tmp_path, tmp_path / "cache")
    msg = str(err.value)
    assert str(tmp_path / "cifar-10-batches-py") in msg and "data_batch_1" in msg and "test_batch" in msg
    assert "torchvision" in msg and "cifar10_jpeg_rgb.tar.xz" in msg
    root, _ = make_official(tmp_path / "d")
    (root / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(DataMissing, match=r"cifar-10-batches-py/test_batch"):
        image.build(cfg(), root, tmp_path / "cache")
    with pytest.raises(DataMissing, match=r"cifar10_jpeg_gray\.tar\.xz"):
        image.build(cfg(source="bundle", variant="gray"), root, tmp_path / "cache")


def test_wrong_image_size_names_the_file(tmp_path):
    root, batches = make_official(tmp_path / "data")
    data, labels = batches["data_batch_3"]
    write_batch(root / "cifar-10-batches-py" / "data_batch_3", data[:, :3000], labels)
    with pytest.raises(DataError, match=r"data_batch_3: images of the wrong size.*\[N, 3072\]"):
        image.build(cfg(), root, tmp_path / "cache")


def test_label_out_of_range_names_the_file(tmp_path):
    root, batches = make_official(tmp_path / "data")
    data, labels = batches["test_batch"]
    labels = labels.copy()
    labels[4] = 10
    write_batch(root / "cifar-10-batches-py" / "test_batch", data, labels)
    with pytest.raises(DataError, match=r"test_batch: label 10 of image 4 is outside 0-9"):
        image.build(cfg(), root, tmp_path / "cache")


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo should-not-run",))


def test_foreign_pickle_is_refused(tmp_path):
    root, _ = make_official(tmp_path / "data")
    (root / "cifar-10-batches-py" / "data_batch_2").write_bytes(pickle.dumps(_Evil()))
    with pytest.raises(DataError, match=r"data_batch_2: not a CIFAR-10 python batch"):
        image.build(cfg(), root, tmp_path / "cache")


# ---------------------------------------------------------------- JPEG-proxy bundle


def test_bundle_rgb_keeps_rgb_and_labels_proxy(tmp_path):
    root, rgb, _ = make_bundle(tmp_path / "data")
    task = image.build(cfg(), root, tmp_path / "cache")
    assert task.info["source"] == "bundle" and task.info["channels"] == "rgb" and task.info["proxy"] is True
    assert "LOSSY PROXY" in task.info["note"] and "JPEG" in task.info["note"]
    assert task.prepare is image.lra_grayscale
    assert task.train.inputs.shape == (90, 32, 32, 3)
    # class-sorted source: the validation draw still takes one per class, not a slice
    assert sorted(task.val.labels.tolist()) == list(range(10))
    np.testing.assert_array_equal(task.test.inputs, rgb["test_x"])
    np.testing.assert_array_equal(task.test.labels, rgb["test_y"].astype(np.int64))


def test_bundle_gray_stores_gray_ids(tmp_path):
    root, rgb, gray = make_bundle(tmp_path / "data")
    task = image.build(cfg(variant="gray"), root, tmp_path / "cache")
    assert task.info["channels"] == "gray" and task.prepare is None
    assert "prepare is None" in task.info["inputs"] and "LOSSY PROXY" in task.info["note"]
    assert task.test.inputs.shape == (20, 1024) and task.test.inputs.dtype == np.uint8
    np.testing.assert_array_equal(task.test.inputs, gray["test_x"].reshape(20, 1024))
    # the same images through the RGB path and prepare give the same ids
    rgb_task = image.build(cfg(variant="rgb"), root, tmp_path / "cache")
    np.testing.assert_array_equal(
        rgb_task.prepare(torch.from_numpy(np.asarray(rgb_task.val.inputs))).numpy(),
        np.asarray(task.val.inputs, dtype=np.int64),
    )
    # auto falls back to gray when only the gray bundle exists (the GPU machine's case)
    only_gray, _, _ = make_bundle(tmp_path / "g", variants=("gray",))
    assert image.build(cfg(), only_gray, tmp_path / "cache").info["channels"] == "gray"


def test_bundle_wrong_image_size_names_file_and_member(tmp_path):
    folder = tmp_path / "cifar10_jpeg"
    folder.mkdir()
    arrays = {
        "train_x": np.zeros((20, 28, 28, 3), np.uint8),
        "train_y": np.zeros(20, np.uint8),
        "test_x": np.zeros((2, 32, 32, 3), np.uint8),
        "test_y": np.zeros(2, np.uint8),
    }
    write_npy_tar(folder / "cifar10_jpeg_rgb.tar.xz", arrays)
    with pytest.raises(DataError, match=r"cifar10_jpeg_rgb\.tar\.xz \(train_x\.npy\): images of the wrong size"):
        image.build(cfg(), tmp_path, tmp_path / "cache")
    arrays["train_x"] = np.zeros((20, 32, 32, 3), np.uint8)
    arrays["test_y"] = np.array([0, 12], np.uint8)
    write_npy_tar(folder / "cifar10_jpeg_rgb.tar.xz", arrays)
    with pytest.raises(DataError, match=r"\(test_y\.npy\): label 12 of image 1"):
        image.build(cfg(), tmp_path, tmp_path / "cache2")


def test_yaml_config_builds(tmp_path):
    yaml = pytest.importorskip("yaml")
    conf = yaml.safe_load((Path(__file__).resolve().parents[1] / "experiments/conf/task/image.yaml").read_text())
    root, _ = make_official(tmp_path / "data")
    task = image.build(conf, root, tmp_path / "cache")
    assert (len(task.train), len(task.val), len(task.test)) == (90, 10, 10) and task.prepare is image.lra_grayscale

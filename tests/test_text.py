"""Text task: aclImdb folder and JSONL-bundle readers, byte ids, truncation, splits, errors."""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import numpy as np
import pytest

from repro.tasks import text
from repro.tasks.base import DataError, DataMissing
from repro.tasks.byte_text import encode_bytes

# (split, class, id, rating, raw file bytes)
REVIEWS = [
    ("train", "pos", 0, 9, b"Great film."),
    ("train", "pos", 10, 7, b"  Fine <br />\n"),  # surrounding whitespace is stripped
    ("train", "pos", 2, 8, "Caf\u00e9 scene!".encode()),  # multi-byte UTF-8
    ("train", "pos", 3, 10, b"Loved it"),
    ("train", "neg", 1, 1, b"Bad."),
    ("train", "neg", 0, 3, b"A rather long and dull review"),  # 29 bytes: cut at max_len 16
    ("train", "neg", 5, 2, b"Meh"),
    ("train", "neg", 4, 4, b"No"),
    ("test", "pos", 0, 8, b"Wonderful, moving and long enough"),  # 33 bytes: cut
    ("test", "neg", 0, 2, b"Awful"),
]
MAX_LEN = 16


def make_acl(root):
    for split, cls, doc_id, rating, data in REVIEWS:
        folder = root / "aclImdb" / split / cls
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{doc_id}_{rating}.txt").write_bytes(data)
    # torchtext-style extras next to the reviews are ignored
    (root / "aclImdb" / "train" / "urls_pos.csv").write_text("x")
    (root / "aclImdb" / "imdb.vocab").write_text("x")
    return root


def make_bundle(root, rows_by_split=None):
    folder = root / "imdb"
    folder.mkdir(parents=True, exist_ok=True)
    if rows_by_split is None:
        rows_by_split = {"train": [], "test": []}
        for split, cls, doc_id, rating, data in REVIEWS:
            rows_by_split[split].append(
                json.dumps(
                    {
                        "id": doc_id,
                        "rating": rating,
                        "label": int(cls == "pos"),
                        "text": data.decode(),
                        "orig_path": f"aclImdb/{split}/{cls}/{doc_id}_{rating}.txt",
                    }
                )
            )
    for split, rows in rows_by_split.items():
        with lzma.open(folder / f"imdb_{split}.jsonl.xz", "wt", encoding="utf-8") as handle:
            handle.write("".join(r + "\n" for r in rows))
    return root


def cfg(**over):
    base = {
        "name": "text",
        "source": "auto",
        "max_len": MAX_LEN,
        "strip": True,
        "validation": "test",
        "val_fraction": 0.25,
        "data_seed": 0,
        "official_subdir": "aclImdb",
        "bundle_subdir": "imdb",
    }
    return {**base, **over}


def expected_row(data: bytes) -> np.ndarray:
    ids = encode_bytes(data.strip())[:MAX_LEN]
    return np.pad(ids, (0, MAX_LEN - len(ids)))


def test_official_reader_ids_labels_order(tmp_path):
    task = text.build(cfg(), make_acl(tmp_path / "data"), tmp_path / "cache")
    assert task.info["source"] == "official"
    assert (task.num_classes, task.vocab_size, task.max_len, task.pad_id, task.two_tower) == (2, 257, 16, 0, False)
    # neg first, then pos; numeric id order (2 before 10)
    order = [("neg", 0), ("neg", 1), ("neg", 4), ("neg", 5), ("pos", 0), ("pos", 2), ("pos", 3), ("pos", 10)]
    by_key = {(c, i): d for s, c, i, _, d in REVIEWS if s == "train"}
    assert task.train.inputs.shape == (8, MAX_LEN)
    assert task.train.inputs.dtype == np.uint8
    np.testing.assert_array_equal(task.train.labels, [0, 0, 0, 0, 1, 1, 1, 1])
    for row, key in zip(task.train.inputs, order, strict=True):
        np.testing.assert_array_equal(row, expected_row(by_key[key]))
    # spot-check the mapping by hand: b -> b + 1, 0 padding, UTF-8 bytes of e-acute
    cafe = task.train.inputs[5]
    assert list(cafe[:6]) == [ord("C") + 1, ord("a") + 1, ord("f") + 1, 0xC3 + 1, 0xA9 + 1, ord(" ") + 1]
    assert list(task.train.inputs[2][:3]) == [ord("N") + 1, ord("o") + 1, 0]
    assert list(task.train.inputs[7][:5]) == [ord(c) + 1 for c in "Fine "]  # leading spaces stripped
    np.testing.assert_array_equal(task.test.labels, [0, 1])
    # truncation: one train review (29 bytes) and one test review (33 bytes) exceed 16
    assert task.info["truncated"] == {"train": 1, "val": 1, "test": 1}
    assert task.info["truncated_by_file_split"] == {"train": 1, "test": 1}
    assert task.info["validation"]["kind"] == "test"
    assert task.val is task.test


def test_bundle_matches_official(tmp_path):
    official = text.build(cfg(source="official"), make_acl(tmp_path / "a"), tmp_path / "cache")
    bundle = text.build(cfg(source="bundle"), make_bundle(tmp_path / "b"), tmp_path / "cache")
    assert bundle.info["source"] == "bundle"
    for name in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(bundle, name).inputs, getattr(official, name).inputs)
        np.testing.assert_array_equal(getattr(bundle, name).labels, getattr(official, name).labels)
    # auto picks the bundle when there is no aclImdb folder
    assert text.build(cfg(), tmp_path / "b", tmp_path / "cache").info["source"] == "bundle"


def test_no_strip_and_long_max_len(tmp_path):
    task = text.build(cfg(strip=False, max_len=64), make_acl(tmp_path / "data"), tmp_path / "cache")
    fine = task.train.inputs[7]
    assert list(fine[:3]) == [ord(" ") + 1, ord(" ") + 1, ord("F") + 1]
    assert fine[13] == ord("\n") + 1 and fine[14] == 0
    assert task.info["truncated"] == {"train": 0, "val": 0, "test": 0}


def test_train_holdout_is_seeded_and_stratified(tmp_path):
    data = make_acl(tmp_path / "data")
    a = text.build(cfg(validation="train_holdout"), data, tmp_path / "cache")
    b = text.build(cfg(validation="train_holdout"), data, tmp_path / "cache")
    assert b.info["cache_hit"] is True
    assert (len(a.train), len(a.val), len(a.test)) == (6, 2, 2)
    assert sorted(a.val.labels.tolist()) == [0, 1]  # one per class
    np.testing.assert_array_equal(a.val.inputs, b.val.inputs)
    assert a.info["validation"]["val_index_digest"] == b.info["validation"]["val_index_digest"]
    # train and val are disjoint and together are the whole train split
    rows = {r.tobytes() for r in a.train.inputs} | {r.tobytes() for r in a.val.inputs}
    assert len(rows) == 8
    assert a.info["truncated"]["train"] + a.info["truncated"]["val"] == 1
    digests = {
        text.build(cfg(validation="train_holdout", data_seed=s), data, tmp_path / "cache").info["validation"][
            "val_index_digest"
        ]
        for s in range(6)
    }
    assert len(digests) > 1


def test_cache_means_no_text_is_read(tmp_path, monkeypatch):
    data = make_acl(tmp_path / "data")
    first = text.build(cfg(), data, tmp_path / "cache")
    assert first.info["cache_hit"] is False

    def no_reading(*args):
        raise AssertionError("a review was read")

    monkeypatch.setattr(text, "read_official_split", no_reading)
    again = text.build(cfg(), data, tmp_path / "cache")
    assert again.info["cache_hit"] is True
    np.testing.assert_array_equal(again.train.inputs, first.train.inputs)


def test_missing_data_says_what_and_where(tmp_path):
    with pytest.raises(DataMissing) as err:
        text.build(cfg(), tmp_path, tmp_path / "cache")
    msg = str(err.value)
    assert str(tmp_path / "aclImdb") in msg and "imdb_train.jsonl.xz" in msg and "aclImdb_v1.tar.gz" in msg
    data = make_acl(tmp_path / "d")
    shutil.rmtree(data / "aclImdb" / "test" / "neg")
    with pytest.raises(DataMissing, match=r"aclImdb/test/neg"):
        text.build(cfg(), data, tmp_path / "cache")
    with pytest.raises(DataMissing, match=r"imdb_test\.jsonl\.xz"):
        (tmp_path / "e" / "imdb").mkdir(parents=True)
        make_bundle(tmp_path / "e", {"train": ['{"id": 0, "label": 0, "text": "x"}']})
        text.build(cfg(source="bundle"), tmp_path / "e", tmp_path / "cache")


def test_bad_file_name_names_the_file(tmp_path):
    data = make_acl(tmp_path / "data")
    (data / "aclImdb" / "train" / "pos" / "review.txt").write_bytes(b"x")
    with pytest.raises(DataError, match=r"train/pos/review\.txt.*<id>_<rating>\.txt"):
        text.build(cfg(), data, tmp_path / "cache")


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("{not json", r"imdb_train\.jsonl\.xz:2: not a JSON object"),
        ('{"id": 7, "label": 2, "text": "x"}', r"imdb_train\.jsonl\.xz:2: label 2 is not 0"),
        ('{"id": 7, "label": 1}', r"imdb_train\.jsonl\.xz:2: missing key\(s\) \['text'\]"),
        ('{"id": "7", "label": 1, "text": "x"}', r"imdb_train\.jsonl\.xz:2: id '7' is not an integer"),
    ],
)
def test_bad_bundle_row_names_file_and_line(tmp_path, bad_line, message):
    good = '{"id": 0, "label": 0, "text": "fine"}'
    make_bundle(tmp_path, {"train": [good, bad_line, good.replace("0,", "1,", 1)], "test": [good]})
    with pytest.raises(DataError, match=message):
        text.build(cfg(source="bundle"), tmp_path, tmp_path / "cache")


def test_yaml_config_builds(tmp_path):
    yaml = pytest.importorskip("yaml")
    conf = yaml.safe_load((Path(__file__).resolve().parents[1] / "experiments/conf/task/text.yaml").read_text())
    assert (conf["max_len"], conf["validation"], conf["source"]) == (4096, "train_holdout", "auto")
    task = text.build({**conf, "val_fraction": 0.25}, make_acl(tmp_path / "data"), tmp_path / "cache")
    assert task.train.inputs.shape == (6, 4096) and task.info["truncated"] == {"train": 0, "val": 0, "test": 0}

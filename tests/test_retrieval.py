"""Retrieval task: the AAN TSV reader, two-tower ids, per-split truncation, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repro.tasks import retrieval
from repro.tasks.base import DataError, DataMissing

MAX_LEN = 16
# label, id1, id2, text1, text2 -- the release stores texts as Python bytes literals
TRAIN = [
    "1\tP01-1001\tP02-2002\tb'Parsing with CCG'\tb'Statistical parsing models'",  # 19 and 29 bytes: both cut
    "0\tP01-1001\tW03-0301\tb'Short'\tb'Also short'",
    "1.0\tA00-0001\tB00-0002\tb'Entity linking\\n'\tb''",  # float label; text1 20 bytes: cut
    "0.0\tX\tY\t\tb'x'",  # empty field
    "0\tC\tD\tb'A fairly long abstract'\tb'ok'",  # text1 25 bytes: cut
]
EVAL = ["1\ta\tb\tb'same'\tb'same'", "0\tc\td\tb'one'\tb'two'"]
TEST = ["0\te\tf\tb'doc'\tb'other doc text'"]  # text2 17 bytes: cut


def write_release(root, train=TRAIN, eval_=EVAL, test=TEST, newline="\n"):
    folder = root / "tsv_data"
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("eval", eval_), ("test", test)):
        (folder / f"new_aan_pairs.{name}.tsv").write_bytes("".join(r + newline for r in rows).encode("utf-8"))
    return root


def cfg(**over):
    return {"name": "retrieval", "source": "auto", "official_subdir": "tsv_data", "max_len": MAX_LEN, **over}


def ids(text: str) -> list[int]:
    raw = text.encode("utf-8")[:MAX_LEN]
    return [b + 1 for b in raw] + [0] * (MAX_LEN - len(raw))


def test_reader_ids_labels_shapes(tmp_path):
    task = retrieval.build(cfg(), write_release(tmp_path), tmp_path / "cache")
    assert (task.num_classes, task.vocab_size, task.max_len, task.two_tower, task.pad_id) == (2, 257, MAX_LEN, True, 0)
    assert task.train.inputs.shape == (5, 2, MAX_LEN)
    assert task.val.inputs.shape == (2, 2, MAX_LEN) and task.test.inputs.shape == (1, 2, MAX_LEN)
    assert task.train.inputs.dtype == np.uint8
    np.testing.assert_array_equal(task.train.labels, [1, 0, 1, 0, 0])
    np.testing.assert_array_equal(task.val.labels, [1, 0])
    np.testing.assert_array_equal(task.test.labels, [0])
    for row, line in zip(task.train.inputs, TRAIN, strict=True):
        _, _, _, t1, t2 = line.split("\t")
        assert row[0].tolist() == ids(t1)
        assert row[1].tolist() == ids(t2)
    # the fields are tokenised as they stand: b, quote, backslash-n are separate bytes
    assert task.train.inputs[2, 0, :3].tolist() == [ord("b") + 1, ord("'") + 1, ord("E") + 1]
    assert task.train.inputs[3, 0].tolist() == [0] * MAX_LEN
    assert task.train.inputs[2, 1, :4].tolist() == [ord("b") + 1, ord("'") + 1, ord("'") + 1, 0]


def test_truncation_counted_per_split(tmp_path):
    task = retrieval.build(cfg(), write_release(tmp_path), tmp_path / "cache")
    assert task.info["truncated"] == {"train": 4, "val": 0, "test": 1}
    train = task.info["splits"]["train"]
    assert (train["truncated_text1"], train["truncated_text2"], train["truncated_pairs"]) == (3, 1, 3)
    assert task.info["splits"]["test"]["truncated_text2"] == 1
    wide = retrieval.build(cfg(max_len=4000), tmp_path, tmp_path / "cache")
    assert wide.info["truncated"] == {"train": 0, "val": 0, "test": 0}
    assert wide.train.inputs.shape == (5, 2, 4000)


def test_crlf_blank_lines_and_ff_byte(tmp_path):
    rows = TRAIN[:2] + [""] + ["1\tq\tr\tb'\\xff'\tok"]
    write_release(tmp_path, train=rows, newline="\r\n")
    task = retrieval.build(cfg(), tmp_path, tmp_path / "cache")
    assert len(task.train) == 3 and task.info["splits"]["train"]["blank_lines_skipped"] == 1
    assert task.train.inputs[1, 1].tolist() == ids("b'Also short'")  # no trailing \r id
    # a raw 0xFF byte needs id 256: all splits switch to uint16
    (tmp_path / "tsv_data" / "new_aan_pairs.test.tsv").write_bytes(b"1\te\tf\t\xff\xfe\tx\n")
    task = retrieval.build(cfg(), tmp_path, tmp_path / "cache2")
    assert task.test.inputs.dtype == np.uint16 and task.train.inputs.dtype == np.uint16
    assert task.test.inputs[0, 0, :3].tolist() == [256, 255, 0]


def test_cache_is_reused(tmp_path, monkeypatch):
    write_release(tmp_path)
    first = retrieval.build(cfg(), tmp_path, tmp_path / "cache")

    def no_reading(*args):
        raise AssertionError("the release files were read")

    monkeypatch.setattr(retrieval, "load_official", no_reading)
    again = retrieval.build(cfg(), tmp_path, tmp_path / "cache")
    assert (first.info["cache_hit"], again.info["cache_hit"]) == (False, True)
    np.testing.assert_array_equal(again.train.inputs, first.train.inputs)


def test_missing_folder(tmp_path):
    with pytest.raises(DataMissing) as err:
        retrieval.build(cfg(), tmp_path, tmp_path / "cache")
    msg = str(err.value)
    for name in ("new_aan_pairs.train.tsv", "new_aan_pairs.eval.tsv", "new_aan_pairs.test.tsv"):
        assert str(tmp_path / "tsv_data" / name) in msg
    assert "LRA release" in msg and "lra_release/tsv_data/" in msg


def test_one_missing_file(tmp_path):
    write_release(tmp_path)
    (tmp_path / "tsv_data" / "new_aan_pairs.eval.tsv").unlink()
    with pytest.raises(DataMissing, match=r"new_aan_pairs\.eval\.tsv"):
        retrieval.build(cfg(), tmp_path, tmp_path / "cache")


@pytest.mark.parametrize(
    "bad, message",
    [
        ("1\tx\ty\tonly four", r"new_aan_pairs\.train\.tsv:3: expected 5 tab-separated fields .* found 4"),
        ("1\tx\ty\ta\tb\tc", r"new_aan_pairs\.train\.tsv:3: expected 5 tab-separated fields .* found 6"),
        ("2\tx\ty\ta\tb", r"new_aan_pairs\.train\.tsv:3: label '2' is not 0 or 1"),
        ("0.5\tx\ty\ta\tb", r"new_aan_pairs\.train\.tsv:3: label '0.5' is not 0 or 1"),
        ("yes\tx\ty\ta\tb", r"new_aan_pairs\.train\.tsv:3: label 'yes' is not a number"),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path, bad, message):
    write_release(tmp_path, train=TRAIN[:2] + [bad] + TRAIN[2:])
    with pytest.raises(DataError, match=message):
        retrieval.build(cfg(), tmp_path, tmp_path / "cache")


def test_source_must_be_official(tmp_path):
    with pytest.raises(ValueError, match="auto or official"):
        retrieval.build(cfg(source="bundle"), write_release(tmp_path), tmp_path / "cache")


def test_yaml_config_builds(tmp_path):
    yaml = pytest.importorskip("yaml")
    conf = yaml.safe_load((Path(__file__).resolve().parents[1] / "experiments/conf/task/retrieval.yaml").read_text())
    task = retrieval.build(conf, write_release(tmp_path), tmp_path / "cache")
    assert task.train.inputs.shape == (5, 2, 4000) and task.max_len == 4000

"""ListOps generator and reader."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from repro.tasks import DataError, DataMissing, listops
from repro.tasks import listops_trees as trees

SPEC = trees.TreeSpec()


def independent_eval(tokens: list[str]) -> int:
    """Evaluate a prefix token sequence with an explicit stack (no recursion, no shared code)."""
    stack: list[list] = []
    result = None
    for tok in tokens:
        if tok.startswith("["):
            stack.append([tok])
        elif tok == "]":
            op, *args = stack.pop()
            if op == "[MIN":
                value = min(args)
            elif op == "[MAX":
                value = max(args)
            elif op == "[SM":
                value = sum(args) % 10
            elif op == "[MED":
                value = int(np.floor(np.median(args)))
            else:
                raise AssertionError(op)
            if stack:
                stack[-1].append(value)
            else:
                result = value
        else:
            if stack:
                stack[-1].append(int(tok))
            else:
                result = int(tok)
    assert not stack
    return result


def decode(row: np.ndarray) -> list[str]:
    return [listops.VOCAB[i] for i in row if i != 0]


@pytest.fixture(scope="module")
def big_set():
    """10,000 generated trees (train split), shared by the statistics tests."""
    arrays, meta = listops.generate(n_train=10_000, n_val=0, n_test=0, seed=123, spec=SPEC, workers=2)
    return arrays, meta


def test_trees_evaluate_to_their_labels_by_an_independent_evaluator(big_set):
    arrays, _ = big_set
    x, y = arrays["train_x"], arrays["train_y"]
    for row, label in zip(x[:3000], y[:3000], strict=True):
        assert independent_eval(decode(row)) == label


def test_every_length_strictly_between_500_and_2000(big_set):
    arrays, _ = big_set
    lengths = (arrays["train_x"] != 0).sum(1)
    assert lengths.min() > 500 and lengths.max() < 2000
    assert arrays["train_x"].shape[1] == 2000


def test_trees_are_distinct(big_set):
    arrays, _ = big_set
    rows = {r.tobytes() for r in arrays["train_x"]}
    assert len(rows) == len(arrays["train_x"])


def test_label_baselines_match_the_follow_up_appendix_b(big_set):
    """Majority label per root operator scores 33-40%; the single most common label 15-20%."""
    arrays, _ = big_set
    x, y = arrays["train_x"], arrays["train_y"]
    roots = [listops.VOCAB[r[0]] for r in x]
    assert set(roots) <= set(trees.OPERATORS), "every kept tree has an operator at its root"
    by_root: dict[str, Counter] = {}
    for root, label in zip(roots, y, strict=True):
        by_root.setdefault(root, Counter())[int(label)] += 1
    per_root_majority = sum(c.most_common(1)[0][1] for c in by_root.values()) / len(y)
    single_majority = Counter(y.tolist()).most_common(1)[0][1] / len(y)
    assert 0.33 <= per_root_majority <= 0.40, per_root_majority
    assert 0.15 <= single_majority <= 0.20, single_majority


def test_same_seed_same_data_other_seed_other_data_any_workers():
    a, _ = listops.generate(n_train=300, n_val=50, n_test=50, seed=7, spec=SPEC, workers=1)
    b, _ = listops.generate(n_train=300, n_val=50, n_test=50, seed=7, spec=SPEC, workers=2)
    c, _ = listops.generate(n_train=300, n_val=50, n_test=50, seed=8, spec=SPEC, workers=1)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["train_x"], c["train_x"])


def test_official_reader_and_generator_give_identical_ids(tmp_path: Path):
    generated = trees.generate_chunk(seed=3, chunk=0, size=20, spec=SPEC)
    listops.write_tsv(tmp_path / "basic_train.tsv", [(trees.to_source(t), trees.evaluate(t)) for t in generated])
    rows, labels = listops.read_official_tsv(tmp_path / "basic_train.tsv")
    for tree, row, label in zip(generated, rows, labels, strict=True):
        np.testing.assert_array_equal(row, listops.encode(trees.tokens(tree)))
        assert label == trees.evaluate(tree)


def test_release_source_format_example():
    tree = ("[MAX", [2, 9])
    assert trees.to_source(tree) == "( ( ( [MAX 2 ) 9 ) ] )"
    assert listops.source_tokens(trees.to_source(tree)) == ["[MAX", "2", "9", "]"]


def write_official(folder: Path, rows_per_split: dict[str, list[str]]) -> None:
    folder.mkdir(parents=True)
    for split, rows in rows_per_split.items():
        (folder / f"basic_{split}.tsv").write_text("Source\tTarget\n" + "".join(r + "\n" for r in rows))


GOOD_ROW = "( ( ( [MAX 2 ) 9 ) ] )\t9"


def test_malformed_row_fails_naming_file_and_line(tmp_path: Path):
    folder = tmp_path / "listops-1000"
    write_official(folder, {"train": [GOOD_ROW, GOOD_ROW, "( [MIN 3 ] )"], "val": [GOOD_ROW], "test": [GOOD_ROW]})
    with pytest.raises(DataError) as err:
        listops.load_official(tmp_path, "listops-1000", 2000)
    assert str(err.value).startswith(f"{folder / 'basic_train.tsv'}:4: expected 2 tab-separated fields")


@pytest.mark.parametrize(
    "row, message",
    [
        ("( [MIN 3 ] )\t12", "Target 12 is outside 0-9"),
        ("( [MIN 3 ] )\tx", "Target 'x' is not an integer"),
        ("( [AVG 3 ] )\t3", "unknown token(s) ['[AVG'] in Source"),
    ],
)
def test_bad_values_name_the_line(tmp_path: Path, row: str, message: str):
    folder = tmp_path / "listops-1000"
    write_official(folder, {"train": [GOOD_ROW], "val": [GOOD_ROW, row], "test": [GOOD_ROW]})
    with pytest.raises(DataError, match=r"basic_val\.tsv:3: ") as err:
        listops.load_official(tmp_path, "listops-1000", 2000)
    assert message in str(err.value)


def test_official_files_read_and_padded(tmp_path: Path):
    write_official(
        tmp_path / "listops-1000", {"train": [GOOD_ROW] * 3, "val": [GOOD_ROW], "test": ["( ( [SM 4 ) 7 ] )\t1"]}
    )
    arrays, meta = listops.load_official(tmp_path, "listops-1000", 2000)
    assert arrays["train_x"].shape == (3, 2000)
    ids = listops.TOKEN_ID
    assert arrays["test_x"][0, :5].tolist() == [ids["[SM"], ids["4"], ids["7"], ids["]"], 0]
    assert arrays["test_y"].tolist() == [1]
    assert meta["truncated"] == {"train": 0, "val": 0, "test": 0}


def test_missing_official_files_say_where_and_how(tmp_path: Path):
    with pytest.raises(DataMissing) as err:
        listops.load_official(tmp_path, "listops-1000", 2000)
    text = str(err.value)
    assert str(tmp_path / "listops-1000" / "basic_train.tsv") in text
    assert "lra_release/listops-1000" in text and "task.source=generated" in text


def test_generated_data_is_cached(tmp_path: Path):
    cfg = {
        "source": "generated",
        "max_len": 2000,
        "data_seed": 1,
        "official_subdir": "listops-1000",
        "generate": {
            "n_train": 40,
            "n_val": 5,
            "n_test": 5,
            "max_depth": 10,
            "max_args": 10,
            "min_len": 500,
            "max_len": 2000,
        },
    }
    first = listops.build(cfg, tmp_path / "none", tmp_path / "cache", workers=1)
    second = listops.build(cfg, tmp_path / "none", tmp_path / "cache", workers=1)
    assert first.info["cache_hit"] is False and second.info["cache_hit"] is True
    np.testing.assert_array_equal(first.train.inputs, second.train.inputs)
    assert (len(first.train), len(first.val), len(first.test)) == (40, 5, 5)


def test_median_is_numpy_median_floored():
    rng = random.Random(0)
    for _ in range(200):
        args = [rng.randrange(10) for _ in range(rng.randint(2, 10))]
        assert trees.evaluate(("[MED", args)) == int(np.median(args))

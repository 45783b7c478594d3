"""ListOps generation keeps its chunks as drawn: an interrupted generation resumes to the uninterrupted arrays."""

from __future__ import annotations

import numpy as np
import pytest

from repro.tasks import cache, listops
from repro.tasks import listops_trees as trees

SPEC = trees.TreeSpec(min_len=20, max_len=120)
SIZES = {"n_train": 250, "n_val": 50, "n_test": 50}  # 350 trees: four chunks of 100


class Interrupted(Exception):
    pass


@pytest.fixture
def drawn_chunks(monkeypatch):
    """Chunks of 100 trees; the list of chunks drawn (not read back) is returned, and drawing chunk
    ``stop_at[0]`` raises Interrupted."""
    monkeypatch.setattr(listops, "CHUNK", 100)
    real = listops._chunk_ids
    drawn, stop_at = [], []

    def counting(args):
        if stop_at and args[1] == stop_at[0]:
            raise Interrupted
        drawn.append(args[1])
        return real(args)

    monkeypatch.setattr(listops, "_chunk_ids", counting)
    return drawn, stop_at


def same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_an_interrupted_generation_resumes_from_its_kept_chunks_to_the_same_arrays(tmp_path, drawn_chunks, capsys):
    drawn, stop_at = drawn_chunks
    whole, _ = listops.generate(seed=3, spec=SPEC, **SIZES)
    assert drawn == [0, 1, 2, 3]
    drawn.clear()

    parts = tmp_path / "parts"
    stop_at.append(2)
    with pytest.raises(Interrupted):
        listops.generate(seed=3, spec=SPEC, parts=parts, **SIZES)
    assert sorted(p.name for p in parts.iterdir()) == ["chunk000000.npz", "chunk000001.npz"]  # no temporary files
    stop_at.clear()
    drawn.clear()

    resumed, _ = listops.generate(seed=3, spec=SPEC, parts=parts, **SIZES)
    assert drawn == [2, 3]  # chunks 0 and 1 were read back, not drawn again
    same(resumed, whole)
    assert "resuming from the 2 chunk(s) of 100 trees kept in" in capsys.readouterr().out


def test_a_damaged_kept_chunk_is_named_and_drawn_again(tmp_path, drawn_chunks, capsys):
    drawn, _ = drawn_chunks
    parts = tmp_path / "parts"
    whole, _ = listops.generate(seed=5, spec=SPEC, parts=parts, **SIZES)
    path = parts / "chunk000001.npz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside an array: the zip's CRC-32 no longer matches
    path.write_bytes(bytes(data))
    drawn.clear()
    again, _ = listops.generate(seed=5, spec=SPEC, parts=parts, **SIZES)
    assert drawn == [1]
    same(again, whole)
    assert f"warning: {path} is damaged (" in capsys.readouterr().err


def test_the_kept_chunks_go_once_the_cache_entry_is_stored(tmp_path, drawn_chunks):
    cfg = {
        "source": "generated",
        "max_len": 120,
        "official_subdir": "listops-1000",
        "data_seed": 4,
        "generate": {**SIZES, "max_depth": SPEC.max_depth, "max_args": SPEC.max_args, "min_len": 20, "max_len": 120},
    }
    task = listops.build(cfg, tmp_path / "no_data", tmp_path / "cache")
    assert len(task.train) == 250 and len(task.val) == 50 and len(task.test) == 50
    left = [p.name for p in (tmp_path / "cache" / "listops").iterdir() if not p.name.endswith(".lock")]
    assert len(left) == 1 and not left[0].startswith(".")  # the entry; no .<key>.parts folder
    params = {"source": "generated", "seed": 4, "chunk": 100, **SIZES, **vars(SPEC)}
    assert left == [cache.cache_key(params)]
    assert not cache.parts_path(tmp_path / "cache", "listops", params).exists()

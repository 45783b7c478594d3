"""Length bucketing (repro/training/batching.py): same examples, similar lengths, trimmed = padded."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from repro.models.model import SequenceClassifier
from repro.tasks.base import Split, TaskData
from repro.training import RunInterrupted, TrainSettings, epoch_permutation, evaluate, train
from repro.training.batching import batch_widths, bucketed_order, resolve_bucketing, sequence_lengths, trimmed_width
from repro.training.checkpoints import load_checkpoint, save_checkpoint

CONV_CFG = dict(backbone="conv", d_model=8, d_hidden=12, kernel_size=5, depth=2)
LRA_CFG = dict(
    backbone="lra_transformer", d_model=8, d_ff=16, n_heads=2, depth=1, attention="linformer", positional="learned"
)


def padded_rows(rng: np.random.Generator, n: int, width: int, pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded rows of random lengths 1..width; a pad id may also occur inside a sequence."""
    lengths = rng.integers(1, width + 1, n)
    rows = rng.integers(0, 7, (n, width)).astype(np.uint8)  # 0 inside a sequence too
    rows[np.arange(width) >= lengths[:, None]] = pad_id
    rows[np.arange(n), lengths - 1] = 5  # the last real token is never the pad id
    return rows, lengths


def padded_task(seed: int, n_train: int, width: int = 48) -> TaskData:
    """Right-padded random sequences in each split (labels random)."""
    rng = np.random.default_rng(seed)

    def split(m):
        rows, _ = padded_rows(rng, m, width)
        return Split(rows, rng.integers(0, 2, m))

    return TaskData("padded", split(n_train), split(16), split(16), num_classes=2, vocab_size=8, max_len=width)


def bucketing_settings(mode: str) -> TrainSettings:
    return TrainSettings(
        lr=1e-3,
        weight_decay=0.0,
        batch_size=8,
        epochs=2,
        checkpoint_every_seconds=None,
        length_bucketing=mode,
        bucket_pool_batches=4,
        trim_multiple=8,
    )


def test_sequence_lengths_is_one_past_the_last_real_token():
    rng = np.random.default_rng(0)
    rows, lengths = padded_rows(rng, 50, 40)
    np.testing.assert_array_equal(sequence_lengths(rows, 0, chunk_rows=7), lengths)
    pairs = np.stack([rows[:25], rows[25:]], axis=1)  # two towers: the longer document counts
    np.testing.assert_array_equal(sequence_lengths(pairs, 0), np.maximum(lengths[:25], lengths[25:]))
    assert sequence_lengths(np.zeros((2, 9), np.uint8), 0).tolist() == [0, 0]


def test_bucketed_order_keeps_every_example_and_groups_similar_lengths():
    rng = np.random.default_rng(1)
    lengths = torch.from_numpy(rng.integers(1, 2000, 960))
    order = torch.randperm(960, generator=torch.Generator().manual_seed(0))
    out = bucketed_order(order, lengths, batch_size=8, pool_batches=10, generator=torch.Generator().manual_seed(5))
    assert sorted(out.tolist()) == sorted(order.tolist())
    # Each batch comes from one pool of 80 consecutive indices of ``order``, sorted within it.
    pool_of = {int(i): p // 80 for p, i in enumerate(order)}
    for batch in out.view(-1, 8):
        assert len({pool_of[int(i)] for i in batch}) == 1
        pool = order[pool_of[int(batch[0])] * 80 :][:80]
        ranks = torch.argsort(torch.argsort(lengths[pool], stable=True))
        position = {int(i): int(r) for i, r in zip(pool, ranks, strict=True)}
        places = sorted(position[int(i)] for i in batch)
        assert places == list(range(places[0], places[0] + 8)) and places[0] % 8 == 0
    spread = (lengths[out].view(-1, 8).amax(1) - lengths[out].view(-1, 8).amin(1)).float().mean()
    random_spread = (lengths[order].view(-1, 8).amax(1) - lengths[order].view(-1, 8).amin(1)).float().mean()
    assert spread < random_spread / 5
    again = bucketed_order(order, lengths, 8, 10, torch.Generator().manual_seed(5))
    assert torch.equal(out, again)
    with pytest.raises(ValueError, match="961 indices are not a whole number of batches of 8"):
        bucketed_order(torch.arange(961), torch.ones(961, dtype=torch.long), 8, 10, torch.Generator())


def test_trimmed_widths_round_up_and_stay_within_the_padded_length():
    assert [trimmed_width(n, 128, 2000) for n in (1, 128, 129, 1999, 2000)] == [128, 128, 256, 2000, 2000]
    lengths = torch.tensor([3, 130, 7, 9])
    assert batch_widths(torch.tensor([0, 1, 2, 3]), lengths, 2, 64, 200) == [192, 64]


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"cls_token": True, "positional": "learned", "pooling": "cls"},
        {"positional": "sinusoidal", "pooling": "max", "kernel_size": 7},
        {"prenorm": False, "groups": 4},
    ],
)
def test_trimmed_batch_gives_the_padded_batch_logits(extra):
    torch.manual_seed(0)
    cfg = {**CONV_CFG, **extra}
    model = SequenceClassifier(cfg, vocab_size=8, max_len=96, num_classes=3, pad_id=0, two_tower=False).double().eval()
    rows, lengths = padded_rows(np.random.default_rng(2), 6, 96)
    rows[:, 60:] = 0
    ids = torch.from_numpy(rows).long()
    width = trimmed_width(int(lengths.clip(max=60).max()), 16, 96)
    torch.testing.assert_close(model(ids[:, :width]), model(ids), rtol=1e-12, atol=1e-12)
    towers = SequenceClassifier(cfg, vocab_size=8, max_len=96, num_classes=2, pad_id=0, two_tower=True).double().eval()
    pairs = ids.view(3, 2, 96)
    torch.testing.assert_close(towers(pairs[..., :width]), towers(pairs), rtol=1e-12, atol=1e-12)


def test_auto_skips_and_on_refuses_what_cannot_be_trimmed():
    conv = SequenceClassifier(CONV_CFG, vocab_size=8, max_len=32, num_classes=2, pad_id=0, two_tower=False)
    lra = SequenceClassifier(LRA_CFG, vocab_size=8, max_len=32, num_classes=2, pad_id=0, two_tower=False)
    assert resolve_bucketing("auto", conv, 0, False) == (True, "length-flexible model on a padded task")
    assert resolve_bucketing(False, conv, 0, False) == (False, "off")  # YAML reads `off` as false
    used, why = resolve_bucketing("auto", conv, None, False)
    assert not used and why == "auto: the task has no padding (every sequence is full length)"
    with pytest.raises(ValueError) as err:
        resolve_bucketing("on", lra, 0, True)
    assert str(err.value) == (
        "train.length_bucketing=on, but the model's mixers do not declare length_flexible or its pooling averages "
        "padding (mean_all) (its output may depend on the padded length); training techniques transform the padded "
        "batch; use train.length_bucketing=auto or off"
    )
    averaging = SequenceClassifier(
        {**CONV_CFG, "pooling": "mean_all"}, vocab_size=8, max_len=32, num_classes=2, pad_id=0, two_tower=False
    )
    assert not resolve_bucketing("auto", averaging, 0, False)[0]  # padding reaches its pooled vector
    with pytest.raises(ValueError, match="train.length_bucketing='sometimes': use off, auto or on"):
        resolve_bucketing("sometimes", conv, 0, False)


def test_length_sorted_evaluation_equals_padded_evaluation():
    torch.manual_seed(0)
    model = SequenceClassifier(CONV_CFG, vocab_size=8, max_len=64, num_classes=3, pad_id=0, two_tower=False).double()
    rows, lengths = padded_rows(np.random.default_rng(3), 37, 64)
    split = {"x": torch.from_numpy(rows), "y": torch.from_numpy(np.random.default_rng(4).integers(0, 3, 37))}
    plain = evaluate(model, split, 8, None)
    sorted_ = evaluate(model, split, 8, None, lengths=torch.from_numpy(lengths), trim_multiple=16)
    np.testing.assert_array_equal(plain["predictions"], sorted_["predictions"])
    np.testing.assert_array_equal(plain["labels"], sorted_["labels"])
    assert (
        abs(plain["loss"] - sorted_["loss"]) < 1e-6 and plain["acc"] == sorted_["acc"]
    )  # losses are summed in float32


def test_bucketed_training_sees_each_example_once_per_epoch(tmp_path):
    task = padded_task(5, 100)
    seen = []

    class Spy(SequenceClassifier):
        def forward(self, ids):
            if self.training:
                seen.append(ids.clone())
            return super().forward(ids)

    torch.manual_seed(0)
    model = Spy(CONV_CFG, vocab_size=8, max_len=48, num_classes=2, pad_id=0, two_tower=False)
    result = train(
        model, task, bucketing_settings("on"), seed=1, run_dir=tmp_path, device=torch.device("cpu"), progress=False
    )
    assert len(seen) == 24 and result["metrics"]["length_bucketing"]["used"]

    def content(row) -> bytes:
        row = np.asarray(row, dtype=np.uint8)
        return bytes(row[: int(np.nonzero(row)[0].max()) + 1])

    # Epoch 0 trains exactly the 96 examples the unbucketed run would (its permutation's first 12 batches).
    first_epoch = Counter(content(row) for b in seen[:12] for row in b.numpy())
    kept = epoch_permutation(1, 0, 100)[:96].numpy()
    assert first_epoch == Counter(content(task.train.inputs[i]) for i in kept)
    widths = [b.shape[1] for b in seen]
    assert all(w % 8 == 0 or w == 48 for w in widths) and min(widths) < 48
    assert result["metrics"]["length_bucketing"]["mean_train_width"] == pytest.approx(sum(widths) / 24)


def test_a_run_cannot_resume_under_another_bucketing_setting(tmp_path):
    task = padded_task(6, 96)
    settings = bucketing_settings

    def model():
        torch.manual_seed(0)
        return SequenceClassifier(CONV_CFG, vocab_size=8, max_len=48, num_classes=2, pad_id=0, two_tower=False)

    with pytest.raises(RunInterrupted):
        train(
            model(),
            task,
            settings("off"),
            seed=1,
            run_dir=tmp_path,
            device=torch.device("cpu"),
            progress=False,
            sigterm_at_step=6,
        )
    last = tmp_path / "checkpoints" / "last.pt"
    with pytest.raises(RuntimeError) as err:
        train(model(), task, settings("on"), seed=1, run_dir=tmp_path, device=torch.device("cpu"), progress=False)
    assert str(err.value) == (
        f"{last} was trained with length bucketing off and this run would train with it on (pools of 4 batches) "
        "(train.length_bucketing=on): add ++train.length_bucketing=off to continue it, or resume=false to start over"
    )
    resumed = train(
        model(), task, settings("off"), seed=1, run_dir=tmp_path, device=torch.device("cpu"), progress=False
    )
    assert resumed["metrics"]["steps"] == 24 and not resumed["metrics"]["length_bucketing"]["used"]


def test_a_bucketed_checkpoint_from_before_the_setting_was_stored_resumes(tmp_path):
    """Checkpoints of de69093-b5af6f1 lack state['batching']; a width_sum marks those that bucketed."""
    task = padded_task(7, 96)

    def model():
        torch.manual_seed(0)
        return SequenceClassifier(CONV_CFG, vocab_size=8, max_len=48, num_classes=2, pad_id=0, two_tower=False)

    whole = train(
        model(),
        task,
        bucketing_settings("on"),
        seed=1,
        run_dir=tmp_path / "whole",
        device=torch.device("cpu"),
        progress=False,
    )
    cut = tmp_path / "cut"
    with pytest.raises(RunInterrupted):
        train(
            model(),
            task,
            bucketing_settings("on"),
            seed=1,
            run_dir=cut,
            device=torch.device("cpu"),
            progress=False,
            sigterm_at_step=7,
        )
    last = cut / "checkpoints" / "last.pt"
    old = load_checkpoint(last, torch.device("cpu"))
    del old["state"]["batching"]  # what the older version wrote
    save_checkpoint(last, old)
    resumed = train(
        model(), task, bucketing_settings("on"), seed=1, run_dir=cut, device=torch.device("cpu"), progress=False
    )
    assert resumed["predictions"] == whole["predictions"]
    assert resumed["metrics"]["length_bucketing"] == whole["metrics"]["length_bucketing"]
    with pytest.raises(
        RuntimeError,
        match=r"was trained with length bucketing on \(pools of 4 batches\) and this run "
        r"would train with it off \(train.length_bucketing=off\): add "
        r"\+\+train.length_bucketing=on \+\+train.bucket_pool_batches=4 to continue it",
    ):
        save_checkpoint(last, old)
        train(model(), task, bucketing_settings(False), seed=1, run_dir=cut, device=torch.device("cpu"), progress=False)

"""The follow-up's training techniques and the techniques config group."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import composed
from test_listops import independent_eval

from repro.followup.techniques import StepDraws, build_train_augment
from repro.followup.techniques.cifar_autoaugment import CifarAutoAugment
from repro.followup.techniques.dihedral import DihedralAugment, d4_transform
from repro.followup.techniques.listops_permute import permute_operands, tree_level_count
from repro.followup.techniques.mlm import corrupt_tokens
from repro.models.model import SequenceClassifier
from repro.run.settings import resolve
from repro.tasks import listops_trees as trees
from repro.tasks.base import Split, TaskData
from repro.tasks.listops import VOCAB, encode
from repro.tasks.pathfinder import build as build_pathfinder

# ------------------------------------------------------------------ ListOps operand permutation


evaluate_tokens = independent_eval  # the stack evaluator written in tests/test_listops.py (not listops_trees)


def canonical(tokens: list[str]) -> str:
    """The tree with every node's operands sorted: equal iff one is an operand permutation of the other."""

    def parse(i):
        tok = tokens[i]
        if not tok.startswith("["):
            return tok, i + 1
        children, i = [], i + 1
        while tokens[i] != "]":
            child, i = parse(i)
            children.append(child)
        return f"{tok}({','.join(sorted(children))})", i + 1

    tree, end = parse(0)
    assert end == len(tokens)
    return tree


def random_trees(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    spec = trees.TreeSpec(max_depth=6, max_args=5, min_len=4, max_len=150)
    out = []
    while len(out) < n:
        tree = trees.random_tree(rng, spec)
        if tree is not None and not isinstance(tree, int):
            out.append(tree)
    return out


def to_batch(rows: list[np.ndarray], extra_padding: int = 5) -> torch.Tensor:
    width = max(len(r) for r in rows) + extra_padding
    x = np.zeros((len(rows), width), dtype=np.uint8)
    for i, row in enumerate(rows):
        x[i, : len(row)] = row
    return torch.from_numpy(x)


def decode(row: torch.Tensor) -> list[str]:
    return [VOCAB[i] for i in row.tolist() if i != 0]


def test_permuted_listops_keeps_label_and_tokens_over_1000_trees():
    tree_list = random_trees(1000)
    x = to_batch([encode(trees.tokens(t)) for t in tree_list])
    out = permute_operands(x, torch.Generator().manual_seed(0))
    assert out.dtype == x.dtype and out.shape == x.shape
    changed = 0
    for tree, before, after in zip(tree_list, x, out, strict=True):
        original, permuted = decode(before), decode(after)
        assert evaluate_tokens(original) == trees.evaluate(tree)  # the test's evaluator agrees with the generator's
        assert evaluate_tokens(permuted) == trees.evaluate(tree)
        assert Counter(before.tolist()) == Counter(after.tolist())  # token multiset, padding included
        assert (after[len(original) :] == 0).all()  # padding stays at the end
        assert canonical(permuted) == canonical(original)  # only operand orders changed, at any depth
        changed += permuted != original
    assert changed > 900, changed  # almost every tree is reordered somewhere


def test_every_operand_order_is_drawn_and_draws_are_fresh_per_step():
    x = torch.from_numpy(encode(["[SM", "1", "2", "3", "]"]))[None].repeat(600, 1)
    out = permute_operands(x, torch.Generator().manual_seed(1))
    orders = Counter(tuple(row[1:4].tolist()) for row in out)
    assert len(orders) == 6 and min(orders.values()) > 60  # all 3! orders, roughly uniform
    augment = build_train_augment({"name": "t", "augment": {"listops_permute": True}}, listops_like_task())
    batch = to_batch([encode(trees.tokens(t)) for t in random_trees(20, seed=3)])
    a = augment.transform(batch, augment.draws(seed=0, step=5))
    assert torch.equal(a, augment.transform(batch, augment.draws(seed=0, step=5)))  # (seed, step) fixes the draw
    assert not torch.equal(a, augment.transform(batch, augment.draws(seed=0, step=6)))  # a new step, a new draw


def test_a_level_bound_from_the_training_set_permutes_as_the_batch_s_own_depth_does():
    """The transform sorts the training set's level count (no host read of each batch's depth): the same
    draws give the same trees, a bound above a batch's depth included."""
    x = to_batch([encode(trees.tokens(t)) for t in random_trees(300, seed=4)])
    levels = tree_level_count(x)
    assert levels == tree_level_count(x, rows_per_chunk=7) and levels > 2
    shallow = x[:40]
    assert tree_level_count(shallow) <= levels
    for batch in (x, shallow):
        plain = permute_operands(batch, torch.Generator().manual_seed(2))
        for bound in (tree_level_count(batch), levels, levels + 3):
            assert torch.equal(permute_operands(batch, torch.Generator().manual_seed(2), bound), plain)
    task = listops_like_task(x.numpy())
    augment = build_train_augment({"name": "t", "augment": {"listops_permute": True}}, task)
    (transform,) = augment.transforms
    assert transform.levels == levels
    expected = permute_operands(x, augment.draws(seed=0, step=5).device_generator(x.device))
    assert torch.equal(augment.transform(x, augment.draws(seed=0, step=5)), expected)


def test_the_compiled_permutation_is_the_same_to_the_bit(monkeypatch):
    """``train.compile_transforms``: the sorting traced as one graph (dynamo and AOT autograd here) orders
    the tokens as the plain one does: integer operations only."""
    import functools

    from repro.followup.techniques import listops_permute

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    monkeypatch.setattr(listops_permute, "_COMPILED_ORDER", [])
    torch._dynamo.reset()
    x = to_batch([encode(trees.tokens(t)) for t in random_trees(64, seed=5)])
    levels = tree_level_count(x)
    for seed in range(3):
        plain = permute_operands(x, torch.Generator().manual_seed(seed), levels)
        assert torch.equal(permute_operands(x, torch.Generator().manual_seed(seed), levels, compiled=True), plain)
    augment = build_train_augment({"name": "t", "augment": {"listops_permute": True}}, listops_like_task(x.numpy()))
    augment.compile_transforms(True)
    assert augment.transforms[0].compiled and repr(augment.transforms[0]).endswith(", compiled)")


def listops_like_task(x: np.ndarray | None = None) -> TaskData:
    x = np.zeros((4, 10), dtype=np.uint8) if x is None else x
    split = Split(x, np.zeros(len(x), dtype=np.int64))
    return TaskData("listops", split, split, split, num_classes=10, vocab_size=len(VOCAB), max_len=x.shape[1])


# ------------------------------------------------------------------ CIFAR AutoAugment


def test_autoaugment_keeps_shape_and_dtype_and_changes_images():
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.integers(0, 256, (32, 32, 32, 3), dtype=np.uint8))
    augment = CifarAutoAugment()
    rng_before = torch.get_rng_state()
    out = augment(images, StepDraws(0, 0))
    assert torch.equal(torch.get_rng_state(), rng_before)  # the global RNG is left alone
    assert out.shape == images.shape and out.dtype == torch.uint8
    differs = [not torch.equal(a, b) for a, b in zip(out, images, strict=True)]
    assert sum(differs) >= len(differs) // 2  # most policy draws change the image
    assert torch.equal(out, augment(images, StepDraws(0, 0)))  # deterministic by (seed, step)
    assert not torch.equal(out, augment(images, StepDraws(0, 1)))
    with pytest.raises(ValueError, match="RGB uint8"):
        augment(images[..., 0], StepDraws(0, 0))


def test_autoaugment_runs_before_grayscale_and_needs_rgb_inputs():
    from repro.tasks.image import lra_grayscale

    rgb = np.zeros((4, 32, 32, 3), dtype=np.uint8)
    split = Split(rgb, np.zeros(4, dtype=np.int64))
    task = TaskData("image", split, split, split, 10, 256, 1024, pad_id=None, prepare=lra_grayscale)
    augment = build_train_augment({"name": "followup", "augment": {"autoaugment": "cifar10"}}, task)
    assert augment.transform(torch.from_numpy(rgb), augment.draws(0, 0)).shape == (4, 32, 32, 3)
    gray = Split(np.zeros((4, 1024), dtype=np.uint8), np.zeros(4, dtype=np.int64))
    gray_task = TaskData("image", gray, gray, gray, 10, 256, 1024, pad_id=None, info={"inputs": "gray ids"})
    with pytest.raises(ValueError, match="techniques.tasks.image.augment.autoaugment: needs RGB"):
        build_train_augment({"name": "followup", "augment": {"autoaugment": "cifar10"}}, gray_task)


# ------------------------------------------------------------------ multitask MLM


def test_mlm_masking_rates_over_100000_tokens():
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 257, (64, 2500), generator=gen)
    lengths = torch.randint(1000, 2500, (64,), generator=gen)
    ids[torch.arange(2500)[None, :] >= lengths[:, None]] = 0
    real = ids != 0
    assert int(real.sum()) >= 100_000
    corrupted, selected = corrupt_tokens(
        ids,
        pad_id=0,
        vocab_size=257,
        mask_id=257,
        rate=0.3,
        random_fraction=1 / 3,
        generator=torch.Generator().manual_seed(1),
    )
    assert not selected[~real].any() and torch.equal(corrupted[~real], ids[~real])  # padding never masked
    assert torch.equal(corrupted[~selected], ids[~selected])  # unselected tokens untouched
    rate = selected.sum() / real.sum()
    assert abs(float(rate) - 0.3) <= 0.01, float(rate)
    masked = selected & (corrupted == 257)
    randomised = selected & (corrupted != 257)
    assert abs(float(masked.sum() / selected.sum()) - 2 / 3) <= 0.02
    assert abs(float(randomised.sum() / selected.sum()) - 1 / 3) <= 0.02
    assert int(corrupted[randomised].min()) >= 1 and int(corrupted[randomised].max()) <= 256  # real tokens only
    again, _ = corrupt_tokens(ids, 0, 257, 257, 0.3, 1 / 3, torch.Generator().manual_seed(2))
    assert not torch.equal(again, corrupted)  # fresh masks for a fresh draw


@pytest.mark.parametrize("two_tower", [False, True])
def test_mlm_loss_is_task_loss_plus_denoising_loss_and_eval_is_unmasked(two_tower):
    torch.manual_seed(0)
    shape = (6, 2, 30) if two_tower else (6, 30)
    x = torch.randint(1, 50, shape)
    x[..., 25:] = 0
    split = Split(x.numpy(), np.zeros(6, dtype=np.int64))
    task = TaskData("retrieval" if two_tower else "text", split, split, split, 2, 50, 30, two_tower=two_tower)
    augment = build_train_augment(
        {"name": "followup", "augment": {"mlm": {"rate": 0.3, "random_fraction": 1 / 3}}}, task
    )
    cfg = dict(backbone="rotary_transformer", d_model=16, n_heads=2, depth=1, d_ff=16, pooling="mean")
    model_task = augment.model_task(task)
    assert model_task.vocab_size == 51 and augment.objective.mask_id == 50
    model = SequenceClassifier(cfg, model_task.vocab_size, 30, 2, 0, two_tower)
    augment.attach(model)
    model.double()
    assert model.mlm_head.out_features == 50 and any(p is model.mlm_head.weight for p in model.parameters())
    labels = torch.tensor([0, 1, 0, 1, 1, 0])
    loss = augment.loss(model, x, labels, augment.draws(0, 3))
    corrupted, selected = augment.objective.corrupt(x, augment.draws(0, 3).cpu_generator())
    states = model.encoder(corrupted.reshape(-1, 30), corrupted.reshape(-1, 30) != 0)
    expected = F.cross_entropy(model(corrupted), labels) + F.cross_entropy(
        model.mlm_head(states[selected.reshape(-1, 30)]), x.reshape(-1, 30)[selected.reshape(-1, 30)]
    )
    torch.testing.assert_close(loss, expected.float())  # the engine scores losses in float32
    assert (corrupted == 50).any()
    # evaluation calls model(ids) on clean inputs: nothing in the model masks
    torch.testing.assert_close(model(x), model(x))


def test_mlm_needs_a_padded_token_task():
    split = Split(np.zeros((2, 16), dtype=np.uint8), np.zeros(2, dtype=np.int64))
    pixels = TaskData("pathfinder", split, split, split, 2, 256, 16, pad_id=None)
    with pytest.raises(ValueError, match="augment.mlm: needs a token task"):
        build_train_augment({"augment": {"mlm": {}}}, pixels)
    with pytest.raises(ValueError, match="unknown technique 'cutmix'"):
        build_train_augment({"augment": {"cutmix": True}}, pixels)


# ------------------------------------------------------------------ Pathfinder


@pytest.fixture(scope="module")
def pathfinder_tasks(tmp_path_factory):
    cache = tmp_path_factory.mktemp("pf_cache")
    base = {
        "name": "pathfinder",
        "source": "generated",
        "resolution": 32,
        "official_subdir": "pathfinder32",
        "data_seed": 0,
        "max_len": 1024,
        "generate": {"render": "release", "n_per_difficulty": 60},
    }
    return {
        d: build_pathfinder({**base, "difficulty": d}, Path("/nonexistent"), cache, workers=1)
        for d in ("easy", "intermediate", "hard", "all")
    }


def test_pathfinder_all_trains_on_three_difficulties_and_validates_on_hard(pathfinder_tasks):
    easy, inter, hard, both = (pathfinder_tasks[d] for d in ("easy", "intermediate", "hard", "all"))
    k = len(hard.train)
    assert len(both.train) == 3 * k
    parts = [easy.train.inputs[:k], inter.train.inputs[:k], hard.train.inputs]
    np.testing.assert_array_equal(both.train.inputs, np.concatenate(parts))
    np.testing.assert_array_equal(
        both.train.labels, np.concatenate([easy.train.labels[:k], inter.train.labels[:k], hard.train.labels])
    )
    for split in ("val", "test"):
        np.testing.assert_array_equal(getattr(both, split).inputs, getattr(hard, split).inputs)
        np.testing.assert_array_equal(getattr(both, split).labels, getattr(hard, split).labels)
    # the three training parts are different images (different difficulties), none from hard's val/test
    rows = {r.tobytes() for r in both.train.inputs}
    assert not rows & {r.tobytes() for r in hard.val.inputs} and not rows & {r.tobytes() for r in hard.test.inputs}
    assert both.info["train_per_difficulty"] == {"easy": k, "intermediate": k, "hard": k}


def test_followup_techniques_select_all_difficulties_and_67_epochs_for_pathfinder():
    run = resolve(composed("arm=rotary_transformer", "task=pathfinder", "profile=paper"))
    assert run["task"]["difficulty"] == "all" and run["train"]["epochs"] == 67
    off = resolve(composed("arm=rotary_transformer", "task=pathfinder", "profile=paper", "techniques=none"))
    assert off["task"]["difficulty"] == "hard" and off["train"]["epochs"] == 200  # Table 5: 67/200


def test_d4_augmentation_applies_one_group_element_per_image():
    images = torch.randint(0, 256, (400, 8 * 8), dtype=torch.uint8)
    out = DihedralAugment()(images, StepDraws(0, 0))
    square = images.view(-1, 8, 8)
    used = Counter()
    for before, after in zip(square, out.view(-1, 8, 8), strict=True):
        matches = [e for e in range(8) if torch.equal(d4_transform(before, e), after)]
        assert matches, "each output is a rotation/reflection of its input"
        used[matches[0]] += 1
    assert len(used) == 8  # all eight elements drawn
    assert len({d4_transform(square[0], e).flatten().tolist().__repr__() for e in range(8)}) == 8  # 8 distinct maps
    assert torch.equal(DihedralAugment([0])(images, StepDraws(0, 0)), images)  # the identity subset
    with pytest.raises(ValueError, match="subset of 0..7"):
        DihedralAugment([9])


# ------------------------------------------------------------------ the techniques config group


def test_arms_choose_default_techniques_and_the_command_line_wins():
    def techniques(*overrides):
        return resolve(composed(*overrides))["techniques"]

    assert techniques("arm=rotary_transformer", "task=listops") == {
        "name": "followup",
        "augment": {"listops_permute": True},
        "arm_default": "followup",
    }
    assert techniques("arm=rotary_transformer", "task=listops", "techniques=none") == {
        "name": "none",
        "augment": {},
        "arm_default": "followup",
    }
    assert techniques("arm=rotary_transformer_notech", "task=text")["name"] == "none"
    assert techniques("arm=learned_pe", "task=text")["augment"]["mlm"]["rate"] == 0.3
    assert techniques("arm=sinusoidal_pe", "task=image")["augment"] == {"autoaugment": "followup"}
    assert techniques("arm=locality_k61", "task=listops") == {
        "name": "followup_data",
        "augment": {"listops_permute": True},
        "arm_default": "followup_data",
    }
    # any arm: the LRA arms default to none, and take the follow-up's techniques on request
    assert techniques("arm=lra_local", "task=listops") == {"name": "none", "augment": {}, "arm_default": "none"}
    assert techniques("arm=lra_transformer", "task=retrieval", "techniques=followup")["augment"]["mlm"]["weight"] == 1.0


def test_no_technique_builds_no_augment():
    assert build_train_augment({"name": "none", "augment": {}}, listops_like_task()) is None
    assert build_train_augment({"name": "followup", "augment": {"d4": False}}, listops_like_task()) is None

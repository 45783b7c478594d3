"""The follow-up study's protocol where its paper is silent, as its public code sets it, and the mechanisms
that carry it out (github.com/pablomiralles22/long-transformers, branch lra-paper, commit 86c59f5; the
files are named by their path there; experiments/conf/base/followup_training.yaml cites each)."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from conftest import composed, read_json
from torch import nn

from repro.followup.rotary import RotarySelfAttention, rotary_embedding
from repro.followup.techniques.mlm import MaskedTokenObjective
from repro.models.model import SequenceClassifier
from repro.run.settings import arm_tasks, resolve
from repro.training.loop import StepLoop
from repro.training.schedule import LRController
from repro.training.settings import TrainSettings
from repro.training.state import RunState
from repro.training.step import make_optimizer, undecayed
from repro.training.swa import WeightAverage, swa_start_epoch

TRANSFORMER_ARMS = ("rotary_transformer", "rotary_transformer_notech", "learned_pe", "sinusoidal_pe")
CODE_MODEL_ARMS = (*TRANSFORMER_ARMS, "gmlp", *(f"locality_k{k}" for k in (5, 7, 11, 21, 31, 61)))
FOLLOWUP_ARMS = (*CODE_MODEL_ARMS, "s4", "s5", "mega")


def paper_runs():
    """(arm, task, resolved run at profile=paper) for every follow-up arm and every task it defines."""
    for arm in FOLLOWUP_ARMS:
        for task in arm_tasks(composed(f"arm={arm}", "task=listops")):
            run = resolve(composed(f"arm={arm}", f"task={task}", "profile=paper"))
        run["train"] = asdict(TrainSettings.from_dict(run["train"]))  # what trains: the unset keys' defaults too
        yield arm, task, run


@pytest.fixture(scope="module")
def runs():
    return list(paper_runs())


# ------------------------------------------------------------------ resolved settings against the code


def test_every_follow_up_arm_takes_the_code_s_optimiser_and_plateau_rule(runs):
    assert {arm for arm, _, _ in runs} == set(FOLLOWUP_ARMS)
    for arm, task, run in runs:
        t = run["train"]
        assert t["schedule"] == "followup", (arm, task)
        assert list(t["betas"]) == [0.9, 0.98] and t["eps"] == 1e-8, (arm, task)  # configs/optimizer/adamw.yaml
        assert t["no_decay"] == "bias_norm_embedding" and not t["decay_1d_params"], (arm, task)
        # configs/scheduler/train_plateau.yaml; torch.optim.lr_scheduler.ReduceLROnPlateau's default threshold
        plateau = (t["plateau_factor"], t["plateau_patience"], t["plateau_threshold"], t["plateau_min_lr"])
        assert plateau == (0.2, 3, 1e-4, 1e-7), (arm, task)
        assert t["precision"] == "bf16", (arm, task)  # the stated difference: the code trains in fp16 mixed


def test_the_last_tenth_is_a_x01_step_but_on_text_which_averages_weights(runs):
    for arm, task, run in runs:
        t = run["train"]
        if task == "text":  # text_classification/base.yaml, stochastic_weight_averaging.yaml, *_denoise.yaml
            assert t["final_fraction"] == 0.0 and (t["swa_start"], t["swa_lr"], t["swa_anneal_epochs"]) == (
                0.75,
                0.01,
                4,
            ), arm
        else:  # configs/scheduler/constant_w_cooldown.yaml
            assert (t["final_phase"], t["final_factor"], t["final_fraction"], t["swa_start"]) == (
                "step",
                0.1,
                0.1,
                None,
            ), (arm, task)


def test_early_stopping_patience_is_20_epochs_and_100_on_cifar(runs):
    for arm, task, run in runs:  # configs/experiment/lra/<task>/base.yaml, callback early_stopping
        assert run["train"]["early_stop_patience"] == (100 if task == "image" else 20), (arm, task)


def test_the_code_s_head_and_encoder_in_the_arms_whose_models_it_holds(runs):
    for arm, task, run in runs:
        m = run["model"]
        if arm not in CODE_MODEL_ARMS:  # S4, S5, MEGA: their own papers' heads
            assert m.get("final_norm", True) and not m.get("single_logit", False), arm
            continue
        assert m["final_norm"] is False and m["single_logit"] is True, (arm, task)  # layered_model.py
        assert m["pooling"] == "mean", (arm, task)  # configs/dataset/*.yaml: reduction_method mean
        if task == "retrieval":  # text_retrieval/base.yaml: ff_dim 512, one hidden layer; concat_consecutive
            assert (m["two_tower_combine"], m["head_hidden"]) == ("concat", 512), arm
        else:  # configs/task/classification.yaml: no hidden layer
            assert m["head_hidden"] is None, (arm, task)


def test_rotary_is_full_width_and_disable_half_zeroes_every_other_frequency(runs):
    for arm, _task, run in runs:
        if arm in TRANSFORMER_ARMS:  # rotary_multihead_attention.py, rotary_embedding.py
            assert (run["model"]["rotary_layout"], run["model"]["rotary_disable"]) == ("full_width", "alternate")


def test_the_denoising_loss_covers_every_non_padding_token():
    for arm in TRANSFORMER_ARMS[:1] + ("gmlp",):
        for task in ("text", "retrieval"):  # src/tasks/denoise_task.py, configs/task/denoise.yaml
            run = resolve(composed(f"arm={arm}", f"task={task}", "profile=paper", "techniques=followup"))
            mlm = run["techniques"]["augment"]["mlm"]
            assert (mlm["rate"], round(mlm["random_fraction"], 3), mlm["loss_on"]) == (0.3, 0.333, "all"), (arm, task)


def test_previous_choices_stay_selectable_by_name():
    run = resolve(
        composed(
            "arm=rotary_transformer",
            "task=text",
            "profile=paper",
            "++train.betas=[0.9,0.999]",
            "++train.no_decay=1d",
            "++train.swa_start=null",
            "++train.early_stop_patience=null",
            "++model.rotary_layout=per_head",
            "++model.rotary_disable=lower_half",
            "++model.final_norm=true",
        )
    )
    t, m = run["train"], run["model"]
    assert list(t["betas"]) == [0.9, 0.999] and t["no_decay"] == "1d" and t["swa_start"] is None
    assert t["early_stop_patience"] is None and m["final_norm"] is True
    assert (m["rotary_layout"], m["rotary_disable"]) == ("per_head", "lower_half")


# ------------------------------------------------------------------ the mechanisms


def _optimizer(lr: float = 1e-3):
    return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)


def test_plateau_rule_equals_torch_reduce_lr_on_plateau():
    losses = [1.0, 0.9, 0.9, 0.89995, 0.9, 0.95, 0.7, 0.7, 0.7, 0.7, 0.7] + [0.7] * 40
    opt = _optimizer()
    torch_rule = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.2, patience=3, min_lr=1e-7)
    ours = LRController(1e-3, "followup", final_fraction=0.0, plateau_factor=0.2, plateau_patience=3,
                        plateau_threshold=1e-4, plateau_min_lr=1e-7)  # fmt: skip
    cuts = 0
    for loss in losses:
        torch_rule.step(loss)
        cuts += ours.end_epoch(loss)
        assert math.isclose(ours.lr(0, 0.5), opt.param_groups[0]["lr"], rel_tol=1e-12), loss
    assert cuts >= 5 and ours.lr(0, 0.5) == pytest.approx(1e-7)  # down to min_lr


def test_final_step_multiplies_the_rate_over_the_last_tenth():
    c = LRController(1e-3, "followup", final_fraction=0.1, final_phase="step", final_factor=0.1)
    assert c.lr(10, 0.9) == 1e-3 and c.lr(11, 0.9001) == pytest.approx(1e-4) and c.lr(12, 1.0) == pytest.approx(1e-4)
    linear = LRController(1e-3, "followup", final_fraction=0.1)
    assert linear.lr(11, 0.95) == pytest.approx(5e-4)


def test_swa_rate_equals_torch_swalr_from_the_start_epoch():
    from torch.optim.swa_utils import SWALR

    epochs, start = 20, swa_start_epoch(0.75, 20)
    assert start == 15
    c = LRController(1e-3, "followup", final_fraction=0.0, swa_start_epoch=start, swa_lr=1e-2, swa_anneal_epochs=4)
    rates = []
    for epoch in range(epochs):
        rates.append(c.lr(0, epoch / epochs))
        c.end_epoch(1.0 - epoch / 100)  # improving: no plateau cut
    assert rates[:start] == [1e-3] * start
    opt = _optimizer(1e-3)
    swalr = SWALR(opt, swa_lr=1e-2, anneal_epochs=4, anneal_strategy="cos")
    for epoch in range(start, epochs):
        assert math.isclose(rates[epoch], opt.param_groups[0]["lr"], rel_tol=1e-12), epoch
        swalr.step()
    assert rates[-1] == pytest.approx(1e-2)


def test_weight_average_is_the_mean_of_the_averaged_epochs_ends():
    model = nn.Linear(2, 1)
    average = WeightAverage(model, start_epoch=2)
    ends = []
    for epoch in range(5):
        with torch.no_grad():
            model.weight.fill_(float(epoch + 1))
        ends.append(epoch + 1)
        average.end_epoch(model, epochs_done=epoch + 1)
    assert average.count == 3 and average.apply(model)
    assert torch.allclose(model.weight, torch.full((1, 2), sum(ends[2:]) / 3))


def _loop(patience, steps_per_epoch=10):
    return SimpleNamespace(
        settings=SimpleNamespace(early_stop_patience=patience), data=SimpleNamespace(steps_per_epoch=steps_per_epoch)
    )


def test_early_stopping_stops_after_patience_epochs_without_a_better_validation():
    accuracies = [0.5, 0.6, 0.6, 0.55, 0.65, 0.59, 0.7, 0.69, 0.7, 0.1, 0.7, 0.2]
    state, stopped_at = RunState(), None
    for epoch, acc in enumerate(accuracies, start=1):
        state.step = epoch * 10
        if acc > state.best_val_acc:  # evaluate.validate's rule: strictly better
            state.best_val_acc, state.best_val_step = acc, state.step
        if StepLoop.early_stopped(_loop(3), state):
            stopped_at = epoch
            break
    assert stopped_at == 10  # best at epoch 7 (0.7); 8, 9 (as good, not better), 10 no better
    state.step = 105  # inside an epoch: only epoch ends stop
    assert not StepLoop.early_stopped(_loop(3), state)
    assert not StepLoop.early_stopped(_loop(None), SimpleNamespace(step=1000, best_val_step=10))


def _plain_rotation(x: torch.Tensor, base: float, disable_alternate: bool) -> torch.Tensor:
    """Channel pair (2i, 2i+1) of a full-width [B, L, D] tensor turned by position * base^(-2i/D)."""
    out = x.clone()
    B, L, D = x.shape
    for i in range(D // 2):
        theta = 0.0 if (disable_alternate and i % 2 == 0) else base ** (-2.0 * i / D)
        for p in range(L):
            c, s = math.cos(p * theta), math.sin(p * theta)
            a, b = x[:, p, 2 * i], x[:, p, 2 * i + 1]
            out[:, p, 2 * i], out[:, p, 2 * i + 1] = a * c - b * s, b * c + a * s
    return out


@pytest.mark.parametrize("impl", ["library", "fused"])
@pytest.mark.parametrize("disable_half", [False, True])
def test_full_width_rotary_equals_a_float64_reference(impl, disable_half):
    torch.manual_seed(0)
    d_model, heads, length = 16, 2, 7
    mixer = RotarySelfAttention(d_model, heads, length, base=100.0, disable_half=disable_half, impl=impl,
                                layout="full_width", disable="alternate").double()  # fmt: skip
    x = torch.randn(3, length, d_model, dtype=torch.float64)
    q, k, _ = mixer.project(x)
    plain_q, plain_k, _ = (mixer.proj.qkv(x)).split(d_model, dim=-1)
    for got, raw in ((q, plain_q), (k, plain_k)):
        expected = _plain_rotation(raw, 100.0, disable_half).unflatten(-1, (heads, -1)).transpose(1, 2)
        # the library computes its frequency table in float32 (then stored as float64): a relative 1e-5
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_alternate_disable_zeroes_even_frequencies_and_keeps_the_others():
    freqs = rotary_embedding(16, 10000.0, True, "alternate").freqs
    expected = torch.tensor([0.0 if i % 2 == 0 else 10000.0 ** (-2 * i / 16) for i in range(8)])
    torch.testing.assert_close(freqs.double(), expected.double(), rtol=1e-6, atol=0)


def _model(**extra):
    cfg = dict(backbone="rotary_transformer", d_model=16, n_heads=2, depth=1, d_ff=24, activation="relu",
               dropout=0.0, pooling="mean", rotary=True, positional="none")  # fmt: skip
    return {**cfg, **extra}


def test_final_norm_false_leaves_the_stack_output_unnormalised():
    torch.manual_seed(0)
    with_norm = SequenceClassifier(_model(), 10, 12, 3, pad_id=0, two_tower=False)
    without = SequenceClassifier(_model(final_norm=False), 10, 12, 3, pad_id=0, two_tower=False)
    without.load_state_dict({k: v for k, v in with_norm.state_dict().items() if "final_norm" not in k})
    ids = torch.randint(1, 10, (2, 12))
    states = without.forward_with_states(ids)[1]
    torch.testing.assert_close(with_norm.forward_with_states(ids)[1], with_norm.encoder.final_norm(states))
    assert isinstance(without.encoder.final_norm, nn.Identity)


def test_single_logit_cross_entropy_is_binary_cross_entropy_and_the_retrieval_head_is_the_code_s():
    torch.manual_seed(0)
    model = SequenceClassifier(_model(single_logit=True, head_hidden=512), 10, 12, 2, pad_id=0, two_tower=True,
                               combine="concat")  # fmt: skip
    layers = [m for m in model.head.classify if not isinstance(m, nn.ReLU)]
    assert [(m.in_features, m.out_features) for m in layers] == [(2 * 16, 512), (512, 1)]  # [e1, e2]
    assert isinstance(model.head.classify[1], nn.ReLU)
    logits = model(torch.randint(1, 10, (4, 2, 12)))
    labels = torch.tensor([0, 1, 1, 0])
    assert torch.equal(logits[:, 0], torch.zeros(4))
    bce = F.binary_cross_entropy_with_logits(logits[:, 1], labels.double().float())
    torch.testing.assert_close(F.cross_entropy(logits, labels), bce)
    ten = SequenceClassifier(_model(single_logit=True), 10, 12, 10, pad_id=0, two_tower=False)
    assert ten.head.classify.out_features == 10  # more than two classes: one logit per class


def test_denoising_loss_on_all_tokens_is_the_cross_entropy_over_every_non_padding_token():
    torch.manual_seed(0)
    model = SequenceClassifier(_model(), 11, 8, 2, pad_id=0, two_tower=False)
    objective = MaskedTokenObjective(10, pad_id=0, loss_on="all")
    objective.attach(model)
    ids = torch.randint(1, 10, (3, 8))
    ids[0, 5:] = 0
    labels = torch.tensor([0, 1, 0])
    generator = torch.Generator().manual_seed(3)
    loss = objective.loss(model, ids, labels, generator)
    corrupted, _ = objective.corrupt(ids, torch.Generator().manual_seed(3))
    logits, states = model.forward_with_states(corrupted)
    real = ids != 0
    expected = F.cross_entropy(logits, labels) + F.cross_entropy(model.mlm_head(states[real]), ids[real])
    torch.testing.assert_close(loss, expected)
    with pytest.raises(ValueError, match=r"techniques mlm.loss_on='some': choose one of all, corrupted"):
        MaskedTokenObjective(10, pad_id=0, loss_on="some")


def test_no_decay_on_biases_norms_and_embeddings_and_decay_on_every_other_weight():
    model = SequenceClassifier(_model(positional="learned", rotary=False), 10, 12, 3, pad_id=0, two_tower=False)
    exempt = undecayed(model, "bias_norm_embedding")
    names = {name for name, p in model.named_parameters() if id(p) in exempt}
    for name, _ in model.named_parameters():
        module = model.get_submodule(name.rsplit(".", 1)[0])
        kept = name.endswith("bias") or isinstance(module, (nn.LayerNorm, nn.Embedding))
        assert (name in names) == (kept or "weight" not in name), name
    assert any(isinstance(m, nn.Embedding) for m in model.modules())
    settings = TrainSettings(lr=1e-3, weight_decay=0.1, batch_size=2, epochs=1, no_decay="bias_norm_embedding")
    decayed, free = make_optimizer(model, settings, torch.device("cpu")).param_groups[:2]
    assert {id(p) for p in free["params"]} == exempt and decayed["weight_decay"] == 0.1
    embedding = next(m for m in model.modules() if isinstance(m, nn.Embedding)).weight
    assert id(embedding) in exempt and id(embedding) not in undecayed(model, "1d")


# ------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_resumed_run_with_weight_averaging_and_early_stopping_matches_the_uninterrupted_one(tmp_path, shared_cache):
    """ListOps at smoke scale, 4 epochs of 8 steps, averaging from epoch 1 (0-based), early stopping after 2
    epochs without a better validation; stopped at step 20 (one epoch averaged) and resumed: the same
    weights, average and scores as a run never stopped."""
    from test_rotary import short_listops_cli

    args = ["arm=rotary_transformer", "++profile.tasks.listops.generate.n_train=64", "++train.epochs=4",
            "++train.swa_start=0.25", "++train.early_stop_patience=2"]  # fmt: skip
    whole = short_listops_cli(tmp_path / "whole", shared_cache, *args)
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed = short_listops_cli(tmp_path / "cut", shared_cache, *args, "debug.sigterm_at_step=20")
    assert killed.returncode == 128 + 15, killed.stderr[-3000:]
    resumed = short_listops_cli(tmp_path / "cut", shared_cache, *args)
    assert resumed.returncode == 0 and "from step 20" in resumed.stdout, resumed.stderr[-3000:]
    folder = Path("out") / "runs" / "rotary_transformer" / "listops" / "smoke" / "seed0"
    a, b = (read_json(tmp_path / run / folder / "metrics.json") for run in ("whole", "cut"))
    assert a["steps_per_epoch"] == 8 and a["swa_epochs_averaged"] == a["epochs"] - 1 >= 2
    # every parameter counted; rotary's frequency tables (d_model / 2 = 16 per layer, 2 layers) do not train
    assert a["parameters"] - a["parameters_trainable"] == 2 * 16 and a["parameters_trainable"] > 10_000
    for key in ("best_val_acc", "best_val_step", "test_acc", "test_acc_last", "test_loss_last", "steps", "stopped_by"):
        assert a[key] == b[key], (key, a[key], b[key])


# ------------------------------------------------------------------ CIFAR-10 augmentation


def test_cifar_pipeline_is_the_code_s_chain_with_its_parameters():
    from torchvision.transforms import v2

    from repro.followup.techniques.cifar_augment import MAGNITUDES, PHOTOMETRIC, PhotometricAugment, followup_pipeline

    flip, auto, photometric, affine = followup_pipeline().transforms  # src/data_loaders/cifar10.py, in order
    assert isinstance(flip, v2.RandomHorizontalFlip) and flip.p == 0.5
    assert isinstance(auto, v2.AutoAugment) and auto.policy == v2.AutoAugmentPolicy.CIFAR10
    assert isinstance(photometric, PhotometricAugment)
    assert isinstance(affine, v2.RandomAffine)
    assert (list(affine.degrees), affine.translate, affine.scale, list(affine.shear)) == (
        [-10.0, 10.0],
        (0.1, 0.1),
        (0.9, 1.1),
        [-10.0, 10.0],
    )
    assert affine.fill == 0
    assert affine.interpolation == v2.InterpolationMode.BILINEAR
    # src/utils/augmentation/cifar10_augmentation.py
    assert PHOTOMETRIC == (("Invert", 0.008), ("Contrast", 0.032), ("Sharpness", 0.112), ("AutoContrast", 0.2),
                           ("Equalize", 0.188), ("Posterize", 0.012), ("Color", 0.116), ("Brightness", 0.092),
                           ("Solarize", 0.076))  # fmt: skip
    assert MAGNITUDES == {"Brightness": (1.0, 1.9), "Color": (1.0, 1.9), "Contrast": (1.0, 1.9),
                          "Sharpness": (1.0, 1.9), "Posterize": (0.0, 7.0), "Solarize": (0.0, 256.0)}  # fmt: skip


def test_each_photometric_operation_fires_at_its_probability_with_magnitudes_in_range(monkeypatch):
    from repro.followup.techniques import cifar_augment

    calls = []
    monkeypatch.setattr(cifar_augment, "photometric_op", lambda image, name, m: calls.append((name, m)) or image)
    torch.manual_seed(0)
    n = 8000
    augment, image = cifar_augment.PhotometricAugment(), torch.zeros(3, 2, 2, dtype=torch.uint8)
    for _ in range(n):
        augment(image)
    for name, p in cifar_augment.PHOTOMETRIC:
        magnitudes = [m for op, m in calls if op == name]
        assert abs(len(magnitudes) / n - p) < 4 * math.sqrt(p * (1 - p) / n), name
        low, high = cifar_augment.MAGNITUDES.get(name, (None, None))
        assert all(m is None for m in magnitudes) if low is None else all(low <= m < high for m in magnitudes)


def test_photometric_operations_match_their_definitions_on_an_image():
    from repro.followup.techniques.cifar_augment import photometric_op

    image = torch.arange(0, 256, dtype=torch.int64).reshape(1, 16, 16).repeat(3, 1, 1).to(torch.uint8)
    assert torch.equal(photometric_op(image, "Invert", None), 255 - image)
    assert torch.equal(photometric_op(image, "Posterize", 2.9), image & 0b11000000)  # int(2.9) = 2 bits
    assert torch.equal(photometric_op(image, "Solarize", 128.0), torch.where(image >= 128, 255 - image, image))
    assert torch.equal(photometric_op(image, "Solarize", 255.5), image)  # above 255: nothing inverted
    with pytest.raises(ValueError, match="unknown photometric operation 'Blur'"):
        photometric_op(image, "Blur", None)


def test_cifar_pipeline_is_deterministic_by_seed_and_step_and_leaves_the_global_rng_alone():
    from repro.followup.techniques import StepDraws
    from repro.followup.techniques.cifar_augment import CifarFollowupAugment

    images = torch.randint(0, 256, (8, 32, 32, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    augment, before = CifarFollowupAugment(), torch.get_rng_state()
    out = augment(images, StepDraws(0, 0))
    assert torch.equal(torch.get_rng_state(), before)
    assert out.shape == images.shape and out.dtype == torch.uint8
    assert torch.equal(out, augment(images, StepDraws(0, 0))) and not torch.equal(out, augment(images, StepDraws(0, 1)))
    assert sum(not torch.equal(a, b) for a, b in zip(out, images, strict=True)) >= 6  # the affine moves most images
    with pytest.raises(ValueError, match="needs RGB uint8 images"):
        augment(images[..., 0], StepDraws(0, 0))


# ------------------------------------------------------------------ defaults that match the published rows


def test_locality_arms_default_to_the_data_techniques_and_pathfinder_on_the_three_sets():
    for k in (5, 7, 11, 21, 31, 61):
        arm = f"locality_k{k}"
        path = resolve(composed(f"arm={arm}", "task=pathfinder", "profile=paper"))
        assert path["task"]["difficulty"] == "all" and path["train"]["epochs"] == 67, (
            arm
        )  # Table 7 with Table 5's caption
        techniques = {
            t: resolve(composed(f"arm={arm}", f"task={t}"))["techniques"] for t in ("listops", "image", "text")
        }
        assert {t: v["name"] for t, v in techniques.items()} == dict.fromkeys(techniques, "followup_data"), arm
        assert techniques["listops"]["augment"] == {"listops_permute": True}
        assert techniques["image"]["augment"] == {"autoaugment": "followup"}
        assert techniques["text"]["augment"] == {}  # no denoising: the code adds it per experiment
        hard = resolve(composed(f"arm={arm}", "task=pathfinder", "profile=paper", "techniques=none"))
        assert hard["task"]["difficulty"] == "hard", arm


def test_gmlp_defaults_to_the_techniques_of_every_published_gmlp_row():
    run = resolve(composed("arm=gmlp", "task=text", "profile=paper"))
    assert run["techniques"]["name"] == "followup" and run["techniques"]["augment"]["mlm"]["loss_on"] == "all"
    assert resolve(composed("arm=gmlp", "task=pathfinder", "profile=paper"))["task"]["difficulty"] == "all"


def test_each_follow_up_arm_file_names_the_published_row_its_default_reproduces():
    from conftest import CONF

    for arm in FOLLOWUP_ARMS:
        text = " ".join((CONF / "arm" / f"{arm}.yaml").read_text().split())
        assert "Its default reproduces Table" in text or "Its default (no techniques) stands beside Table" in text, arm

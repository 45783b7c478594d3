"""The LRA Transformer encoder backbone and the eleven lra_* arms (LRA release settings)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from conftest import ROOT, SHORT_LISTOPS_OVERRIDES, composed, read_json, run_cli

from repro.models.heads import TwoTowerHead, pool
from repro.models.model import ResidualSublayer, SequenceClassifier
from repro.original.attention import load_all
from repro.original.encoder import FeedForward, build_lra_layers
from repro.run.runner import execute, implicit_settings
from repro.run.settings import arm_tasks, resolve, typed_task_paths
from repro.run.validate import out_of_range
from repro.training.schedule import LRController

ARMS = (
    "transformer",
    "local",
    "sparse",
    "longformer",
    "linformer",
    "reformer",
    "sinkhorn",
    "synthesizer",
    "bigbird",
    "linear",
    "performer",
)
TASKS = {"listops", "text", "retrieval", "image", "pathfinder", "pathx"}
MECHANISMS = {
    "transformer": "vanilla",
    "local": "local",
    "sparse": "sparse",
    "longformer": "longformer",
    "linformer": "linformer",
    "reformer": "reformer",
    "sinkhorn": "sinkhorn",
    "synthesizer": "synthesizer",
    "bigbird": "bigbird",
    "linear": "linear",
    "performer": "performer",
}


def small_cfg(attention: str, **extra) -> dict:
    cfg = dict(
        backbone="lra_transformer",
        attention=attention,
        attention_params={},
        d_model=16,
        qkv_dim=16,
        n_heads=2,
        depth=2,
        d_ff=24,
        activation="gelu_tanh",
        dropout=0.1,
        attention_dropout=0.1,
        positional="learned",
        cls_token=True,
        pooling="cls",
        head_hidden="lra",
    )
    cfg.update(extra)
    return cfg


# Small blocks so that a 40-token sequence spans several of them.
SMALL_PARAMS = {
    "vanilla": {},
    "local": {"block_size": 8},
    "sparse": {"stride": 8, "c": 2, "n_global": 1},
    "longformer": {"window": 6, "n_global": 1},
    "linformer": {"k": 8},
    "reformer": {"n_buckets": 4},
    "sinkhorn": {"block_size": 8},
    "synthesizer": {"variant": "random"},
    "bigbird": {"block_size": 8, "n_random": 1},
    "linear": {},
    "performer": {"nb_features": 16},
}


# ------------------------------------------------------------------ the encoder


def test_backbone_builds_attention_and_ffn_sublayers_per_layer():
    torch.manual_seed(0)
    model = SequenceClassifier(
        small_cfg("vanilla", depth=3), vocab_size=20, max_len=40, num_classes=3, pad_id=0, two_tower=False
    )
    sublayers = model.encoder.sublayers
    assert len(sublayers) == 6 and all(isinstance(s, ResidualSublayer) and s.prenorm for s in sublayers)
    kinds = [type(s.mixer).__name__ for s in sublayers]
    assert kinds == ["VanillaAttention", "FeedForward"] * 3
    ffn = sublayers[1].mixer
    assert (ffn.fc1.in_features, ffn.fc1.out_features, ffn.fc2.out_features) == (16, 24, 16)
    assert isinstance(ffn.act, torch.nn.GELU) and ffn.act.approximate == "tanh"
    assert isinstance(model.encoder.final_norm, torch.nn.LayerNorm)
    # CLS: the positional table and the mixers cover max_len + 1 positions
    assert model.encoder.embed.positions.shape == (41, 16) and sublayers[0].mixer.max_len == 41
    assert model.encoder(torch.randint(1, 20, (2, 40)), None).shape == (2, 41, 16)
    # LRA's classifier: Dense(d_ff)-ReLU-Dense; two towers add Dense(d_ff // 2)-ReLU
    assert [m.out_features for m in model.head.classify if isinstance(m, torch.nn.Linear)] == [24, 3]
    two = SequenceClassifier(
        small_cfg("vanilla", two_tower_combine="concat"),
        vocab_size=20,
        max_len=40,
        num_classes=2,
        pad_id=0,
        two_tower=True,
        combine="concat",
    )
    assert isinstance(two.head, TwoTowerHead)
    assert [(m.in_features, m.out_features) for m in two.head.classify if isinstance(m, torch.nn.Linear)] == [
        (32, 24),
        (24, 12),
        (12, 2),
    ]


@pytest.mark.parametrize("backend", ["sdpa", "materialized"])
@pytest.mark.parametrize("cls_token", [True, False])
def test_vanilla_encoder_output_unchanged_by_appended_padding(backend, cls_token):
    torch.manual_seed(0)
    cfg = small_cfg(
        "vanilla", attention_params={"backend": backend}, cls_token=cls_token, pooling="cls" if cls_token else "mean"
    )
    model = SequenceClassifier(cfg, vocab_size=20, max_len=64, num_classes=3, pad_id=0, two_tower=False).double().eval()
    ids = torch.randint(1, 20, (3, 30))
    ids[1, 22:] = 0  # a shorter sequence in the batch
    padded = torch.cat([ids, torch.zeros(3, 25, dtype=torch.long)], dim=1)
    short = model.encoder(ids, ids != 0)
    long = model.encoder(padded, padded != 0)
    n = short.shape[1]
    real = model.encoder.state_mask(ids != 0)
    torch.testing.assert_close(long[:, :n][real], short[real], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(model(padded), model(ids), rtol=1e-10, atol=1e-10)


def test_mean_all_pools_every_position_padding_included_as_the_release_s_jnp_mean():
    states = torch.randn(2, 5, 3, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    torch.testing.assert_close(pool(states, mask, "mean_all"), states.sum(1) / 5, rtol=0, atol=1e-15)
    torch.testing.assert_close(pool(states, mask, "mean")[1], states[1, :2].mean(0), rtol=0, atol=1e-15)


def _pixels(seed: int = 0) -> torch.Tensor:
    """Pixel ids with black (0) pixels, the first pixel of each sample lit (so CLS is real)."""
    ids = torch.randint(1, 20, (3, 30), generator=torch.Generator().manual_seed(seed))
    ids[torch.rand(3, 30, generator=torch.Generator().manual_seed(seed + 1)) < 0.4] = 0
    ids[:, 0] = 7
    return ids


def test_black_pixel_mask_leaves_the_real_pixels_states_as_padding_would():
    """model.release_masking on a pixel task (no pad id): a real pixel sees only real pixels in every
    layer, so its states equal those of the same weights with black pixels as padding; a black pixel's
    state differs (it attends uniformly to every pixel, where padding gives it no attention output)."""
    torch.manual_seed(0)
    cfg = small_cfg("vanilla", attention_params={"backend": "materialized"}, pooling="mean")
    release = SequenceClassifier({**cfg, "release_masking": True}, 20, 64, 3, pad_id=None, two_tower=False)
    padding = SequenceClassifier(cfg, 20, 64, 3, pad_id=0, two_tower=False)
    padding.load_state_dict(release.state_dict())
    release, padding = release.double().eval(), padding.double().eval()
    ids = _pixels()
    real = release.encoder.state_mask(ids != 0)
    states, padded = release.forward_with_states(ids)[1], padding.forward_with_states(ids)[1]
    torch.testing.assert_close(states[real], padded[real], rtol=1e-10, atol=1e-10)
    assert (states[~real] - padded[~real]).abs().amax(dim=-1).min() > 1e-3
    plain = SequenceClassifier(cfg, 20, 64, 3, pad_id=None, two_tower=False).double().eval()
    plain.load_state_dict(release.state_dict())
    assert not torch.allclose(plain(ids), release(ids))  # the mask changes the model's function


@pytest.mark.parametrize(
    "name, params",
    [
        ("bigbird", {**SMALL_PARAMS["bigbird"], "backend": "blockwise"}),
        ("local", {"block_size": 10, "release": True}),
        ("sinkhorn", {"block_size": 10, "release": True}),
    ],
)
def test_black_pixel_mask_is_the_padding_mask_of_bigbird_and_the_release_paths(name, params):
    """The release's BigBird masks black keys and zeroes black positions' attention output, as padding
    does here; the release paths of local attention and Sinkhorn take the (inputs > 0) mask as their
    padding mask: every state equals that of the same weights with black pixels as padding."""
    torch.manual_seed(0)
    cfg = small_cfg(name, attention_params=params, pooling="mean", cls_token=False, attention_dropout=0.0)
    release = SequenceClassifier({**cfg, "release_masking": True}, 20, 64, 3, pad_id=None, two_tower=False)
    padding = SequenceClassifier(cfg, 20, 64, 3, pad_id=0, two_tower=False)
    padding.load_state_dict(release.state_dict())
    ids = _pixels()
    states = release.double().eval().forward_with_states(ids)[1]
    torch.testing.assert_close(states, padding.double().eval().forward_with_states(ids)[1], rtol=1e-10, atol=1e-10)
    plain = SequenceClassifier(cfg, 20, 64, 3, pad_id=None, two_tower=False)
    plain.load_state_dict(release.state_dict())
    assert not torch.allclose(plain.double().eval().forward_with_states(ids)[1], states)  # the mask did reach it


@pytest.mark.parametrize("name", ["linformer", "reformer", "linear", "performer"])
def test_black_pixel_mask_changes_nothing_where_the_release_ignored_it(name):
    torch.manual_seed(0)
    cfg = small_cfg(name, attention_params=SMALL_PARAMS[name], pooling="mean")
    release = SequenceClassifier({**cfg, "release_masking": True}, 20, 64, 3, pad_id=None, two_tower=False)
    plain = SequenceClassifier(cfg, 20, 64, 3, pad_id=None, two_tower=False)
    plain.load_state_dict(release.state_dict())
    ids = _pixels()
    torch.manual_seed(1)  # Performer's features are redrawn per call in training; eval draws none
    torch.testing.assert_close(release.double().eval()(ids), plain.double().eval()(ids), rtol=0, atol=0)


@pytest.mark.parametrize("name, attended", [("vanilla", False), ("linear", True), ("performer", True)])
def test_release_masking_on_text_lets_padding_reach_the_mechanisms_whose_release_code_ignored_it(name, attended):
    """On a padded task (CLS pooling): the release's Linformer, linear attention and Performer attend to the
    padding (their logits equal a model that sees no padding mask); vanilla attention still leaves it out."""
    torch.manual_seed(0)
    cfg = small_cfg(name, attention_params=SMALL_PARAMS[name])
    release = SequenceClassifier({**cfg, "release_masking": True}, 20, 64, 3, pad_id=0, two_tower=False)
    padded = SequenceClassifier(cfg, 20, 64, 3, pad_id=0, two_tower=False)
    unmasked = SequenceClassifier(cfg, 20, 64, 3, pad_id=None, two_tower=False)
    for model in (padded, unmasked):
        model.load_state_dict(release.state_dict())
    ids = torch.randint(1, 20, (3, 30), generator=torch.Generator().manual_seed(2))
    ids[1, 18:], ids[2, 9:] = 0, 0
    out = release.double().eval()(ids)
    torch.testing.assert_close(out, (unmasked if attended else padded).double().eval()(ids), rtol=1e-10, atol=1e-10)
    assert not torch.allclose(out, (padded if attended else unmasked).double().eval()(ids))


def test_release_masking_is_refused_where_it_is_not_implemented_and_must_be_a_boolean():
    cfg = {**small_cfg("local", attention_params=SMALL_PARAMS["local"]), "release_masking": True}
    with pytest.raises(ValueError, match=re.escape("model.release_masking=true: LocalAttention does not implement")):
        SequenceClassifier(cfg, 20, 64, 3, pad_id=None, two_tower=False)
    assert out_of_range({"model": {"release_masking": "maybe"}}) == [
        "model.release_masking='maybe': must be true or false"
    ]


@pytest.mark.parametrize("name", sorted(SMALL_PARAMS))
def test_every_mechanism_with_qkv_dim_below_d_model_is_padding_invariant(name):
    """qkv_dim != d_model (LRA's image / Pathfinder configs): projections d_model <-> qkv_dim."""
    torch.manual_seed(0)
    cfg = small_cfg(name, attention_params=SMALL_PARAMS[name], qkv_dim=8)
    model = SequenceClassifier(cfg, vocab_size=20, max_len=64, num_classes=3, pad_id=0, two_tower=False).double().eval()
    mixer = model.encoder.sublayers[0].mixer
    weights = [p for n, p in mixer.named_parameters() if p.dim() == 2 and 16 in p.shape]
    assert weights and all(p.shape in ((8, 16), (24, 16), (16, 8)) for p in weights), [tuple(p.shape) for p in weights]
    ids = torch.randint(1, 20, (2, 40))
    padded = torch.cat([ids, torch.zeros(2, 24, dtype=torch.long)], dim=1)
    out = model(ids)
    assert out.shape == (2, 3) and torch.isfinite(out).all()
    torch.testing.assert_close(model(padded), out, rtol=1e-9, atol=1e-9)
    model.train()
    model(padded).sum().backward()  # gradients flow through the refitted projections
    assert all(p.grad is not None for p in weights)


def test_longformer_global_and_synthesizer_dense_projections_are_refitted():
    torch.manual_seed(0)
    for name, params in (("longformer", {"window": 6, "n_global": 1}), ("synthesizer", {"variant": "dense"})):
        layers = build_lra_layers(small_cfg(name, attention_params=params, qkv_dim=8), max_len=41)
        mixer = layers[0]
        extra = mixer.global_proj.qkv if name == "longformer" else mixer.dense_hidden
        assert extra.in_features == 16 and extra.out_features in (8, 24)
        assert mixer(torch.randn(2, 41, 16), None).shape == (2, 41, 16)


def test_bigbird_layers_get_the_layer_index_as_seed():
    layers = build_lra_layers(
        small_cfg("bigbird", attention_params={"block_size": 8, "n_random": 2}, depth=3), max_len=96
    )
    attention = layers[0::2]
    assert [m.seed for m in attention] == [0, 1, 2]
    assert not torch.equal(attention[0].rand_blocks, attention[1].rand_blocks)
    shifted = build_lra_layers(
        small_cfg("bigbird", attention_params={"block_size": 8, "n_random": 2, "seed": 5}), max_len=96
    )
    assert [m.seed for m in shifted[0::2]] == [5, 6]
    assert all(isinstance(m, FeedForward) for m in layers[1::2])


def test_lra_cosine_schedule():
    c = LRController(1e-3, "lra_cosine", warmup_steps=100)
    assert math.isclose(c.lr(49, 0.0), 1e-3 * 0.5)
    assert math.isclose(c.lr(99, 0.001), 1e-3 * 0.5 * (1 + math.cos(math.pi * 0.001)))
    assert math.isclose(c.lr(5000, 0.5), 1e-3 * 0.5) and c.lr(9999, 1.0) == 0.0


# ------------------------------------------------------------------ the arms' settings


def test_every_arm_defines_all_six_tasks_and_its_mechanism():
    assert set(MECHANISMS.values()) == set(load_all().names())
    for arm, mechanism in MECHANISMS.items():
        cfg = composed(f"arm=lra_{arm}", "task=listops")
        assert set(arm_tasks(cfg)) == TASKS, arm
        assert cfg.arm.name == f"lra_{arm}" and cfg.arm.model.attention == mechanism and cfg.arm.source


def test_lra_transformer_listops_resolves_to_the_release_settings():
    """lra_benchmarks/listops/configs/base_listops_config.py and listops/train.py (the LRA release)."""
    run = resolve(composed("arm=lra_transformer", "task=listops", "profile=paper"))
    m, t = run["model"], run["train"]
    # emb_dim 512, num_heads 8, num_layers 6, qkv_dim 512, mlp_dim 2048 (also paper A.1.1)
    assert (m["d_model"], m["n_heads"], m["depth"], m["qkv_dim"], m["d_ff"]) == (512, 8, 6, 512, 2048)
    assert (m["dropout"], m["attention_dropout"]) == (0.1, 0.1)  # TransformerEncoder defaults
    assert (
        m["backbone"] == "lra_transformer"
        and m["attention"] == "vanilla"
        and m["attention_params"] == {"backend": "sdpa"}
    )
    assert m["cls_token"] and m["pooling"] == "cls" and m["positional"] == "sinusoidal" and m["prenorm"]
    # learning_rate 0.05, 'constant * linear_warmup * rsqrt_decay', warmup 1000, weight_decay 0.1,
    # batch_size 32, num_train_steps 5000; Adam(0.9, 0.98, eps 1e-9)
    assert (t["schedule"], t["lr"], t["warmup_steps"], t["weight_decay"]) == ("lra", 0.05, 1000, 0.1)
    assert (t["batch_size"], t["max_steps"], t["epochs"]) == (32, 5000, 2)
    assert list(t["betas"]) == [0.9, 0.98] and t["eps"] == 1e-9 and t["decay_1d_params"]
    assert run["task"]["max_len"] == 2000


WIDTHS = ("d_model", "qkv_dim", "n_heads", "depth", "d_ff")


def test_other_tasks_resolve_to_the_release_settings():
    text = resolve(composed("arm=lra_transformer", "task=text", "profile=paper"))
    assert text["task"]["max_len"] == 1000 and text["model"]["d_model"] == 256 and text["model"]["depth"] == 4
    assert text["train"]["max_steps"] == 20000 and text["train"]["warmup_steps"] == 8000
    retrieval = resolve(composed("arm=lra_transformer", "task=retrieval", "profile=paper"))
    assert retrieval["model"]["pooling"] == "first" and not retrieval["model"]["cls_token"]
    assert retrieval["model"]["two_tower_combine"] == "concat" and retrieval["train"]["lr"] == 0.05
    image = resolve(composed("arm=lra_transformer", "task=image", "profile=paper"))
    assert image["train"]["schedule"] == "lra_cosine" and image["train"]["max_steps"] == 35000
    assert image["model"]["positional"] == "learned" and (
        image["model"]["dropout"],
        image["model"]["attention_dropout"],
    ) == (0.3, 0.2)
    # image/configs/cifar10/transformer_base.py since commit ee6649e: 1 layer, emb 128, 8 heads, qkv 64, mlp 128
    assert [image["model"][k] for k in WIDTHS] == [128, 64, 8, 1, 128]
    assert image["model"]["cls_token"] and image["model"]["pooling"] == "cls"
    # image/configs/pathfinder32/transformer_base.py since commit ee6649e: 4 layers, emb 32, 4 heads, qkv 16, mlp 32
    path = resolve(composed("arm=lra_transformer", "task=pathfinder", "profile=paper"))
    assert [path["model"][k] for k in WIDTHS] == [32, 16, 4, 4, 32] and path["model"]["dropout"] == 0.2
    # an arm whose per-model config sets no widths keeps base_cifar10_config.py's
    sink = resolve(composed("arm=lra_sinkhorn", "task=image", "profile=paper"))
    assert [sink["model"][k] for k in WIDTHS] == [32, 32, 1, 1, 64]
    assert (
        path["model"]["pooling"] == "mean"
        and path["train"]["batch_size"] == 512
        and path["train"]["max_steps"] == 62400
    )
    pathx = resolve(composed("arm=lra_transformer", "task=pathx", "profile=paper"))
    assert pathx["train"]["grad_clip"] == 1.0 and pathx["train"]["max_steps"] == 500000
    # per-arm deltas: Performer on ListOps, Sparse on Pathfinder, Sinkhorn on image
    perf = resolve(composed("arm=lra_performer", "task=listops", "profile=paper"))["model"]["attention_params"]
    assert perf == {"kernel": "softmax", "nb_features": 2}
    sparse = resolve(composed("arm=lra_sparse", "task=pathfinder", "profile=paper"))["model"]
    assert sparse["attention_params"] == {"stride": 50, "c": 10, "n_global": 0} and sparse["n_heads"] == 8
    sink = resolve(composed("arm=lra_sinkhorn", "task=image", "profile=paper"))
    assert sink["train"]["weight_decay"] == 0.7 and sink["model"]["attention_params"] == {"block_size": 64}


def test_lra_reformer_is_the_release_attention_at_the_residual_width():
    """The release's ReformerAttention sets its width from its input: image's qkv_dim 32 never reaches
    it, so its 8 heads are 8 wide at width 64; no output projection, no attention dropout."""
    run = resolve(composed("arm=lra_reformer", "task=image", "profile=paper"))
    assert run["model"]["qkv_dim"] == 32 and run["model"]["attention_params"]["release"] is True
    mixer = build_lra_layers(run["model"], max_len=1025)[0]
    assert mixer.release and mixer.head_dim == 8 and mixer.q_proj.weight.shape == (64, 64)
    assert mixer.out_proj is None and mixer.k_proj is None and mixer.attn_dropout.p == 0.0


def test_vanilla_backend_can_be_overridden_from_the_command_line():
    run = resolve(composed("arm=lra_transformer", "task=listops", "+model.attention_params.backend=materialized"))
    assert run["model"]["attention_params"] == {"backend": "materialized"}
    assert run["model"]["d_model"] == 32 and run["model"]["qkv_dim"] == 16  # smoke shrinks the widths


# ------------------------------------------------------------------ every arm trains


@pytest.mark.parametrize("arm", ARMS)
def test_arm_trains_on_listops_and_generated_pathfinder(arm, tmp_path, shared_cache):
    """profile=smoke, cut to 4 steps; ListOps shortened to 50-300 tokens, the smoke profile's Pathfinder.

    (Full-length smoke ListOps takes 6-36 s an arm here; test_cli_runs_an_lra_arm_on_the_smoke_profile
    runs one arm on it unchanged.)
    """
    common = [
        f"arm=lra_{arm}",
        "profile=smoke",
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={shared_cache}",
        f"data_dir={tmp_path / 'no_data'}",
        "progress=false",
        "workers=2",
        "+train.max_steps=4",
    ]
    listops = ["task=listops", *SHORT_LISTOPS_OVERRIDES]
    for task, extra in (("listops", listops), ("pathfinder", ["task=pathfinder"])):
        cfg = composed(*common, *extra)
        assert execute(cfg) == 0, (arm, task)
        metrics = read_json(tmp_path / "out" / "runs" / f"lra_{arm}" / task / "smoke" / "seed0" / "metrics.json")
        assert metrics["status"] == "complete" and metrics["steps"] == 4 and 0.0 <= metrics["test_acc"] <= 1.0


@pytest.mark.slow
def test_cli_runs_an_lra_arm_on_the_smoke_profile(tmp_path, shared_cache):
    done = run_cli(
        "arm=lra_performer",
        "task=listops",
        "profile=smoke",
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={shared_cache}",
        f"data_dir={tmp_path / 'no_data'}",
        "task.source=generated",
        "progress=false",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = read_json(tmp_path / "out" / "runs" / "lra_performer" / "listops" / "smoke" / "seed0" / "metrics.json")
    assert metrics["status"] == "complete" and metrics["steps"] == 32


def test_two_tower_arm_trains_on_retrieval_fixture(tmp_path, shared_cache):
    """Retrieval: no CLS token, first-position pooling, LRA's two-layer dual head (AAN rows in the official layout)."""
    import random

    from test_tasks_smoke import make_aan

    make_aan(tmp_path / "data", {"train": 24, "eval": 8, "test": 8}, random.Random(0))
    cfg = composed(
        "arm=lra_linear",
        "task=retrieval",
        "profile=smoke",
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={shared_cache}",
        f"data_dir={tmp_path / 'data'}",
        "progress=false",
        "+train.max_steps=2",
    )
    assert execute(cfg) == 0
    metrics = read_json(tmp_path / "out" / "runs" / "lra_linear" / "retrieval" / "smoke" / "seed0" / "metrics.json")
    assert metrics["status"] == "complete" and metrics["steps"] == 2


@pytest.mark.parametrize("task", ["listops", "text", "retrieval", "image", "pathfinder", "pathx"])
def test_learned_positions_arm_is_lra_transformer_but_for_its_positions(task):
    """lra_transformer_learned_pe differs from lra_transformer only in positional (learned) and its name."""
    plain = resolve(composed("arm=lra_transformer", f"task={task}", "profile=paper"))
    learned = resolve(composed("arm=lra_transformer_learned_pe", f"task={task}", "profile=paper"))
    assert learned["model"]["positional"] == "learned"
    assert {**learned["model"], "positional": None} == {**plain["model"], "positional": None}
    assert learned["train"] == plain["train"] and learned["task"] == plain["task"]


RESULTS = Path(__file__).resolve().parents[1] / "results"
# The merged campaign bundles, if present (not the repeats' bundle), each with the grid file that ran it last:
# v0.2.1-lra is v0.2-lra with the image Transformer run again at the release's current configuration.
CAMPAIGN_GRIDS = {"v0.2-lra": "v0.2-lra.yaml", "v0.2.1-lra": "v0.2.1-lra.yaml"}
CAMPAIGN_BUNDLES = [RESULTS / version for version in CAMPAIGN_GRIDS if (RESULTS / version).is_dir()]


def _manifest_runs(bundle_dir: Path) -> list[dict]:
    return json.loads((bundle_dir / "MANIFEST.json").read_text())["runs"]


def _campaign_records():
    """Every record the campaign's bundles list as runs, then each superseded record the grid file names that
    is not among them (a merged bundle keeps those under ``extra/``), each once."""
    seen = set()
    for bundle_dir in CAMPAIGN_BUNDLES:
        for run in _manifest_runs(bundle_dir):
            seen.add(bundle_dir / run["path"])
            yield bundle_dir / run["path"]
    for folder in _superseded():
        if ROOT / folder not in seen:
            yield ROOT / folder


def _superseded(version: str | None = None) -> set[str]:
    """The ``superseded`` record folders of one campaign bundle's grid file (None: of all of them)."""
    from repro.grid.cells import load_grid

    versions = [version] if version else list(CAMPAIGN_GRIDS)
    return {p for v in versions for p in load_grid(ROOT / "experiments" / "grids" / CAMPAIGN_GRIDS[v]).superseded}


def test_sinkhorn_s_head_and_synthesizer_s_q_k_term_are_the_release_s():
    """lra_benchmarks/models/sinkhorn_transformer/sinkhorn_transformer.py: no CLS token, jnp.mean over every
    position, one Dense (ListOps, Pathfinder; Path-X as Pathfinder); text and image keep the shared head
    (their released configs pool CLS, which that encoder refuses)."""
    for task, head in [("listops", (False, "mean_all", None)), ("pathfinder", (False, "mean_all", None)),
                       ("pathx", (False, "mean_all", None)), ("text", (True, "cls", "lra")),
                       ("image", (True, "cls", "lra"))]:  # fmt: skip
        m = resolve(composed("arm=lra_sinkhorn", f"task={task}", "profile=paper"))["model"]
        assert (m["cls_token"], m["pooling"], m["head_hidden"]) == head, task
        # synthesizer.py's SynthesizerBlock: ignore_dot_product=False, which no config reaching the model changes
        synthesizer = resolve(composed("arm=lra_synthesizer", f"task={task}", "profile=paper"))["model"]
        assert synthesizer["attention_params"]["dot_product"] is True, task
        # bigbird_attention.py: sparse_dot_product_attention takes no dropout
        assert resolve(composed("arm=lra_bigbird", f"task={task}", "profile=paper"))["model"]["attention_dropout"] == 0


# Settings of an (arm, task) corrected after some of its campaign records ran, each to what the release's
# code computes (the arms' YAML files): those records differ from the cell's settings in these keys only,
# the ledger no longer counts them (the cell is run again), the campaign's grid file lists them as
# `superseded`, and both the README's Table 1 command and the grid README's final freeze leave those out.
CORRECTED = {
    ("lra_sinkhorn", "listops"): {"cls_token", "pooling", "head_hidden", "attention_params"},
    ("lra_synthesizer", "listops"): {"attention_params"},  # the release's q.k term (dot_product), found later
    ("lra_synthesizer", "text"): {"attention_params"},
    ("lra_bigbird", "listops"): {"attention_dropout"},  # the release's BigBird applies no attention dropout
    ("lra_bigbird", "text"): {"attention_dropout"},
    ("lra_reformer", "listops"): {"attention_params", "attention_dropout"},  # the release's computation
    ("lra_reformer", "text"): {"attention_params", "attention_dropout"},
    ("lra_local", "listops"): {"attention_params"},  # the release's strided groups
    ("lra_local", "text"): {"attention_params"},
    ("lra_local", "image"): {"attention_params"},
}

# Cells whose release configuration changed after the campaign's records of them ran: the records of
# results/v0.2-lra hold the release's earlier configuration (these values) and stay valid as what they
# were; a later bundle's records must hold the current one. lra_benchmarks/image/configs/cifar10/
# transformer_base.py before commit ee6649e set no widths, so base_cifar10_config.py's applied.
EARLIER_RELEASE = {
    ("lra_transformer", "image"): ("v0.2-lra", {"d_model": 32, "qkv_dim": 32, "n_heads": 1, "depth": 1, "d_ff": 64}),
}


@pytest.mark.skipif(not CAMPAIGN_BUNDLES, reason="no v0.2-lra bundle in this checkout")
def test_the_campaign_records_trained_at_the_release_settings_of_their_cell():
    """Every record frozen for the LRA campaign (results/v0.2-lra*): profile paper on an H100 or H200, its
    data source and commit named, and its model, training and task settings those this package resolves
    for its (arm, task) at profile=paper -- the release's (the tests above check those against the release)
    -- or, for a cell whose settings were corrected since (``CORRECTED``), differing in those keys only
    and listed as superseded by the grid file, which the merged bundle keeps apart from its runs (under
    ``extra/``, which Table 1 does not read) and the final freeze leaves out; every superseded entry is such
    a record."""
    from repro.records import read_config

    records = list(_campaign_records())
    assert records
    superseded = _superseded("v0.2-lra")  # the records of corrected cells
    leave_out = "--leave-out-from experiments/grids/v0.2-lra.yaml"  # the final freeze's
    assert leave_out in " ".join((ROOT / "experiments/grids/v0.2-lra/README.md").read_text().split())
    for bundle_dir in CAMPAIGN_BUNDLES:  # no record its grid supersedes among a bundle's runs, which Table 1 reads
        runs = {run["path"]: bundle_dir / run["path"] for run in _manifest_runs(bundle_dir)}
        for folder in _superseded(bundle_dir.name):
            old = ROOT / folder
            same_place = runs.get(Path(*old.relative_to(RESULTS).parts[1:]).as_posix())  # its path in its bundle
            assert old.is_dir() and old not in runs.values(), (bundle_dir, folder)
            if same_place is not None:  # a later bundle's record of that cell: run again, not taken over
                assert (same_place / "metrics.json").read_bytes() != (old / "metrics.json").read_bytes(), folder
    # v0.2.1-lra's grid supersedes exactly v0.2-lra's records of the cells whose release configuration changed
    earlier = {
        f"results/v0.2-lra/runs/{arm}/{task}/paper/seed{seed}" for arm, task in EARLIER_RELEASE for seed in range(3)
    }
    assert _superseded("v0.2.1-lra") == earlier
    left_out = set()
    for record in records:
        metrics = json.loads((record / "metrics.json").read_text())
        config = read_config(record / "config.yaml")
        arm, task = metrics["arm"], metrics["task"]
        assert metrics["status"] == "complete" and metrics["profile"] == "paper", record
        assert re.fullmatch(r"NVIDIA H(100|200).*", metrics["device"]), record
        assert metrics["data"]["source"] and re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", metrics["git_commit"]), record
        overrides = ["task.source=generated"] if config["task"]["source"] == "generated" else []
        cfg = composed(f"arm={arm}", f"task={task}", "profile=paper", *overrides)
        expected = resolve(cfg, typed_task_paths(overrides))
        for key, value in implicit_settings(task).items():  # keys added after the record, at the value it ran with
            block, name = key.split(".", 1)
            if name in expected[block]:
                config[block].setdefault(name, value)
        bundle, earlier = EARLIER_RELEASE.get((arm, task), (None, {}))
        if earlier and record.relative_to(RESULTS).parts[0] == bundle:
            assert {k: config["model"][k] for k in earlier} == earlier, record
            config["model"].update({k: expected["model"][k] for k in earlier})
        corrected = CORRECTED.get((arm, task), set())
        changed = {
            k
            for k in set(config["model"]) | set(expected["model"])
            if config["model"].get(k, "?") != expected["model"].get(k, "?")
        }
        if changed and changed <= corrected:
            assert record.relative_to(ROOT).as_posix() in superseded, record
            left_out.add(record.relative_to(ROOT).as_posix())
            config["model"] = expected["model"]
        for block in ("model", "train", "task"):
            assert config[block] == expected[block], (record, block)
        assert metrics["train_settings"]["batch_size"] == expected["train"]["batch_size"], record
    assert left_out == superseded  # nothing listed that is not such a record

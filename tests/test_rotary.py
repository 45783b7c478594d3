"""The follow-up study's rotary Transformer backbone: rotary equal to its reference, the arm end to end."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from rotary_embedding_torch import RotaryEmbedding

from repro.followup.rotary import RotarySelfAttention, build_rotary_transformer_layers, rotary_embedding
from repro.models.model import SequenceClassifier
from repro.original.encoder import FeedForward


def small_cfg(**extra) -> dict:
    cfg = dict(
        backbone="rotary_transformer",
        d_model=32,
        n_heads=2,
        depth=2,
        d_ff=48,
        activation="relu",
        dropout=0.0,
        pooling="mean",
        rotary=True,
        rotary_base=10000,
        rotary_disable_half=False,
        positional="none",
    )
    cfg.update(extra)
    return cfg


def manual_rotation(t: torch.Tensor, positions: torch.Tensor, base: float, zero_lower_half: bool) -> torch.Tensor:
    """RoFormer's rotation written out: channel pair (2i, 2i+1) turned by p * base^(-2i/d)."""
    d = t.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    if zero_lower_half:
        inv_freq[d // 2 - d // 4 :] = 0.0
    angle = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # [L, d/2]
    cos, sin = angle.cos(), angle.sin()
    even, odd = t[..., 0::2], t[..., 1::2]
    out = torch.empty_like(t)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = odd * cos + even * sin
    return out


@pytest.mark.parametrize("disable_half", [False, True])
def test_rotation_is_the_library_roformer_rotation_with_base_10000(disable_half):
    mixer = RotarySelfAttention(32, 2, 64, rotary=True, base=10000, disable_half=disable_half).double()
    assert isinstance(mixer.rotary, RotaryEmbedding)
    t = torch.randn(3, 2, 50, 16, dtype=torch.float64)
    expected = manual_rotation(t, torch.arange(50), 10000.0, disable_half)
    # the library's frequency table is computed in float32: agreement to float32 precision
    torch.testing.assert_close(mixer.rotate(t), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("disable_half", [False, True])
@pytest.mark.parametrize("shift", [1, 37, 1000])
def test_scores_depend_only_on_relative_position(disable_half, shift):
    torch.manual_seed(0)
    mixer = RotarySelfAttention(64, 4, 2048, rotary=True, disable_half=disable_half).double()
    x = torch.randn(2, 40, 64, dtype=torch.float64)
    q, k, _ = mixer.proj.project(x)
    scores = mixer.rotate(q) @ mixer.rotate(k).transpose(-1, -2)
    shifted = mixer.rotate(q, offset=shift) @ mixer.rotate(k, offset=shift).transpose(-1, -2)
    assert (shifted - scores).abs().max() < 1e-5
    # not vacuous: moving the keys alone (a change of relative position) changes the scores
    moved = mixer.rotate(q) @ mixer.rotate(k, offset=shift).transpose(-1, -2)
    assert (moved - scores).abs().max() > 1e-2


@pytest.mark.parametrize("head_dim", [16, 32, 64])
def test_disable_half_leaves_exactly_half_the_channels_position_independent(head_dim):
    torch.manual_seed(0)
    one = torch.randn(head_dim, dtype=torch.float64)
    same_everywhere = one.expand(1, 1, 300, head_dim).clone()  # one vector at positions 0..299
    for disable_half, expected in ((True, head_dim // 2), (False, 0)):
        rotary = rotary_embedding(head_dim, 10000.0, disable_half).double()
        out = rotary.rotate_queries_or_keys(same_everywhere)[0, 0]  # [300, head_dim]
        constant = (out == out[:1]).all(dim=0)  # bit-identical at every position
        assert int(constant.sum()) == expected, (disable_half, constant)
        if disable_half:
            assert torch.equal(out[:, constant][0], one[constant])  # untouched, not merely constant
    freqs = rotary_embedding(head_dim, 10000.0, True).freqs
    assert int((freqs == 0).sum()) == head_dim // 4 and (freqs[: head_dim // 4] > 0).all()


def test_backbone_layout_and_summed_position_variants():
    torch.manual_seed(0)
    model = SequenceClassifier(small_cfg(), vocab_size=20, max_len=64, num_classes=3, pad_id=0, two_tower=False)
    sublayers = model.encoder.sublayers
    assert [type(s.mixer).__name__ for s in sublayers] == ["RotarySelfAttention", "FeedForward"] * 2
    assert all(s.prenorm for s in sublayers) and isinstance(model.encoder.final_norm, torch.nn.LayerNorm)
    ffn = sublayers[1].mixer
    assert isinstance(ffn, FeedForward) and isinstance(ffn.act, torch.nn.ReLU) and ffn.fc1.out_features == 48
    assert sublayers[0].mixer.rotary is not None and model.encoder.embed.positional == "none"
    assert model.head.pooling == "mean" and not any(isinstance(m, torch.nn.Dropout) and m.p for m in model.modules())
    for positional in ("learned", "sinusoidal"):
        summed = SequenceClassifier(
            small_cfg(rotary=False, positional=positional),
            vocab_size=20,
            max_len=64,
            num_classes=3,
            pad_id=0,
            two_tower=False,
        )
        assert summed.encoder.sublayers[0].mixer.rotary is None and summed.encoder.embed.positional == positional
    with pytest.raises(ValueError, match="choose one positional"):
        build_rotary_transformer_layers(small_cfg(positional="learned"), max_len=64)
    with pytest.raises(ValueError, match="no dropout"):
        build_rotary_transformer_layers(small_cfg(dropout=0.1), max_len=64)


def test_attention_matches_an_explicit_softmax_reference():
    torch.manual_seed(0)
    mixer = RotarySelfAttention(32, 2, 64, rotary=True, disable_half=True).double()
    x = torch.randn(2, 30, 32, dtype=torch.float64)
    mask = torch.ones(2, 30, dtype=torch.bool)
    mask[1, 20:] = False
    q, k, v = mixer.proj.project(x)
    q, k = mixer.rotate(q), mixer.rotate(k)  # the rotation itself: test_rotation_is_the_library_roformer_rotation
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(16)
    scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    ctx = torch.softmax(scores, dim=-1) @ v
    expected = mixer.proj.output(ctx) * mask[..., None]
    torch.testing.assert_close(mixer(x, mask), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "variant", [dict(), dict(rotary_disable_half=True), dict(rotary=False, positional="sinusoidal")]
)
def test_outputs_unchanged_by_appended_padding(variant):
    torch.manual_seed(0)
    model = (
        SequenceClassifier(small_cfg(**variant), vocab_size=20, max_len=96, num_classes=3, pad_id=0, two_tower=False)
        .double()
        .eval()
    )
    ids = torch.randint(1, 20, (3, 40))
    ids[1, 25:] = 0
    padded = torch.cat([ids, torch.zeros(3, 30, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded), model(ids), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("disable_half", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_rotation_equals_the_library_path_forward_and_gradients(disable_half, dtype):
    torch.manual_seed(0)
    library = RotarySelfAttention(64, 4, 300, disable_half=disable_half, impl="library").to(dtype)
    fused = RotarySelfAttention(64, 4, 300, disable_half=disable_half, impl="fused").to(dtype)
    fused.load_state_dict(library.state_dict())
    x = torch.randn(3, 257, 64, dtype=dtype)
    mask = torch.arange(257)[None, :] < torch.tensor([257, 100, 0])[:, None]
    for a, b in zip(library.project(x), fused.project(x), strict=True):  # q, k, v
        torch.testing.assert_close(b, a, rtol=0, atol=1e-12)
    results = []
    for mixer in (library, fused):
        xg = x.clone().requires_grad_(True)
        y = mixer(xg, mask)
        (y.square().sum() + y.sum()).backward()
        results.append([y.detach(), xg.grad] + [p.grad for p in mixer.proj.parameters()])
        mixer.zero_grad(set_to_none=True)
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-12 if dtype == torch.float64 else 1e-6)


def test_fused_rotation_tables_follow_the_frequencies():
    mixer = RotarySelfAttention(32, 2, 64, impl="fused").double()
    x = torch.randn(2, 40, 32, dtype=torch.float64)
    before = mixer.project(x)[0]
    with torch.no_grad():
        mixer.rotary.freqs[4:] = 0.0  # a change in place: the cached cos/sin must not be reused
        mixer.rotary.cached_freqs_seq_len = 0  # (the library's own cache of angles)
    after = mixer.project(x)[0]
    library = RotarySelfAttention(32, 2, 64, impl="library").double()
    library.load_state_dict(mixer.state_dict())
    torch.testing.assert_close(after, library.project(x)[0], rtol=0, atol=1e-12)
    assert (after - before).abs().max() > 1e-3


def test_rotary_impl_is_checked_and_passed_by_the_builder():
    with pytest.raises(ValueError, match="model.rotary_impl='fast': choose one of auto, fused, library"):
        RotarySelfAttention(32, 2, 64, impl="fast")
    layers = build_rotary_transformer_layers(small_cfg(rotary_impl="library"), max_len=64)
    assert layers[0].impl == "library"
    auto = build_rotary_transformer_layers(small_cfg(), max_len=64)[0]
    assert auto.impl == "auto" and not auto.fused(torch.zeros(1))  # auto: fused on CUDA only


def test_head_width_must_allow_a_rotary_table():
    with pytest.raises(ValueError, match="divisible by 4"):
        RotarySelfAttention(12, 2, 10)


# ------------------------------------------------------------------ the arms (acceptance 2)

import random  # noqa: E402

from conftest import SHORT_LISTOPS_OVERRIDES, composed, read_json, run_cli  # noqa: E402
from test_image import make_official as make_cifar  # noqa: E402
from test_tasks_smoke import make_aan, make_acl_imdb  # noqa: E402

from repro.run.runner import execute  # noqa: E402
from repro.run.settings import resolve  # noqa: E402

TABLE4_ARMS = ("rotary_transformer", "rotary_transformer_notech", "learned_pe", "sinusoidal_pe")
TABLE4_TASKS = ("listops", "image", "pathfinder", "text", "retrieval")
# ListOps shortened to 50-300 tokens and text/retrieval cut to 256 bytes: the smoke profile's
# widths and data otherwise, two steps (full-length ListOps runs in test_cli_* below and by hand).
SHORT = {
    "listops": SHORT_LISTOPS_OVERRIDES,
    "text": ["task.max_len=256"],
    "retrieval": ["task.max_len=256"],
    "image": [],
    "pathfinder": [],
}


def test_arms_resolve_to_table_5():
    table5 = {  # task: (d_model, depth, heads, d_ff, disable half, lr, batch, weight decay, epochs)
        "listops": (256, 6, 4, 512, False, 0.0001, 64, 0.05, 120),
        "image": (160, 10, 4, 320, True, 0.001, 48, 0.05, 200),
        "pathfinder": (128, 6, 4, 256, False, 0.001, 128, 0.05, 67),
        "text": (256, 8, 4, 512, True, 0.001, 16, 0.01, 80),
        "retrieval": (128, 6, 4, 256, True, 0.001, 64, 0.01, 60),
    }
    for task, row in table5.items():
        run = resolve(composed("arm=rotary_transformer", f"task={task}", "profile=paper"))
        m, t = run["model"], run["train"]
        got = (
            m["d_model"],
            m["depth"],
            m["n_heads"],
            m["d_ff"],
            m["rotary_disable_half"],
            t["lr"],
            t["batch_size"],
            t["weight_decay"],
            t["epochs"],
        )
        assert got == row, (task, got)
        assert (m["activation"], m["norm"], m["prenorm"], m["dropout"], m["pooling"]) == (
            "relu",
            "layer",
            True,
            0.0,
            "mean",
        )
        assert m["rotary"] and m["rotary_base"] == 10000 and m["positional"] == "none" and t["schedule"] == "followup"
    for arm, positional in (("learned_pe", "learned"), ("sinusoidal_pe", "sinusoidal")):
        m = resolve(composed(f"arm={arm}", "task=text", "profile=paper"))["model"]
        assert (
            not m["rotary"] and m["positional"] == positional and m["positional_base"] == 10000 and m["d_model"] == 256
        )


@pytest.fixture(scope="module")
def fixture_data(tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    rng = random.Random(0)
    make_acl_imdb(data, {"train": 40, "test": 10}, rng)
    make_aan(data, {"train": 40, "eval": 10, "test": 10}, rng)
    make_cifar(data)
    return data


@pytest.mark.parametrize("task", TABLE4_TASKS)
@pytest.mark.parametrize("arm", TABLE4_ARMS)
def test_every_table4_arm_runs_on_every_task_at_smoke_scale(arm, task, tmp_path, shared_cache, fixture_data):
    cfg = composed(
        f"arm={arm}",
        f"task={task}",
        "profile=smoke",
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={shared_cache}",
        f"data_dir={fixture_data}",
        "progress=false",
        "workers=2",
        "+train.max_steps=2",
        *SHORT[task],
    )
    assert execute(cfg) == 0, (arm, task)
    metrics = read_json(tmp_path / "out" / "runs" / arm / task / "smoke" / "seed0" / "metrics.json")
    assert metrics["status"] == "complete" and metrics["steps"] == 2 and 0.0 <= metrics["test_acc"] <= 1.0
    with_techniques = arm != "rotary_transformer_notech"
    assert metrics["techniques"]["name"] == ("followup" if with_techniques else "none")
    built = metrics["techniques"]["built"]
    expected = {
        "listops": "ListOpsOperandPermutation",
        "image": "CifarFollowupAugment",
        "text": "MaskedTokenObjective",
        "retrieval": "MaskedTokenObjective",
        "pathfinder": None,
    }[task]
    if with_techniques and expected:
        assert expected in str(built), built
    else:
        assert built is None
    if task == "pathfinder":
        assert metrics["data"]["difficulty"] == ("all" if with_techniques else "hard")


def short_listops_cli(tmp_path, shared_cache, *extra):
    return run_cli(
        "task=listops",
        "profile=smoke",
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={shared_cache}",
        f"data_dir={tmp_path / 'no_data'}",
        "task.source=generated",
        "progress=false",
        *SHORT["listops"],
        *extra,
    )


@pytest.mark.slow
def test_cli_runs_rotary_transformer_with_and_without_techniques(tmp_path, shared_cache):
    on = short_listops_cli(tmp_path, shared_cache, "arm=rotary_transformer")
    assert on.returncode == 0, on.stderr[-3000:]
    off = short_listops_cli(tmp_path / "off", shared_cache, "arm=rotary_transformer", "techniques=none")
    assert off.returncode == 0, off.stderr[-3000:]
    a = read_json(tmp_path / "out" / "runs" / "rotary_transformer" / "listops" / "smoke" / "seed0" / "metrics.json")
    # not the arm's own techniques: recorded under rotary_transformer+none (repro/records.py: record_arm)
    b = read_json(
        tmp_path / "off" / "out" / "runs" / "rotary_transformer+none" / "listops" / "smoke" / "seed0" / "metrics.json"
    )
    assert a["techniques"]["augment"] == {"listops_permute": True} and b["techniques"]["augment"] == {}
    assert a["steps"] == b["steps"] == 8  # 32 examples, batch 8, 2 epochs
    assert a["test_loss"] != b["test_loss"]  # the permutation changed training


@pytest.mark.slow
def test_resumed_run_with_techniques_matches_the_uninterrupted_one(tmp_path, shared_cache):
    args = ["arm=rotary_transformer", "++profile.tasks.listops.generate.n_train=64"]
    whole = short_listops_cli(tmp_path / "whole", shared_cache, *args)
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed = short_listops_cli(tmp_path / "cut", shared_cache, *args, "debug.sigterm_at_step=11")
    assert killed.returncode == 128 + 15, killed.stderr[-3000:]
    resumed = short_listops_cli(tmp_path / "cut", shared_cache, *args)
    assert resumed.returncode == 0 and "from step 11" in resumed.stdout, resumed.stderr[-3000:]
    folder = Path("out") / "runs" / "rotary_transformer" / "listops" / "smoke" / "seed0"
    a, b = (
        read_json(tmp_path / "whole" / folder / "metrics.json"),
        read_json(tmp_path / "cut" / folder / "metrics.json"),
    )
    for key in ("best_val_acc", "best_val_step", "test_acc", "test_loss", "steps"):
        assert a[key] == b[key], (key, a[key], b[key])
    assert (tmp_path / "whole" / folder / "predictions.csv").read_text() == (
        tmp_path / "cut" / folder / "predictions.csv"
    ).read_text()

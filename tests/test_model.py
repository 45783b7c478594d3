"""Bounded-conv layer, shared encoder and heads, schedules, optimizer groups (make_optimizer: per-parameter rate
hints of the S4D/S5 state-space parameters, the decay rule), NaN stop."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from repro.followup.conv import BoundedConvMixer
from repro.models.model import SequenceClassifier, sinusoidal_table
from repro.ops.conv import IMPL_CHOICES, conv1d_same, conv1d_same_windows
from repro.ops.fft import block_fft_size, conv1d_same_fft_blocks
from repro.ops.toeplitz import conv1d_same_toeplitz
from repro.tasks.base import Split, TaskData
from repro.training import NonFiniteLoss, TrainSettings, make_optimizer, train
from repro.training.schedule import LRController

CONV_CFG = dict(backbone="conv", d_model=8, d_hidden=12, kernel_size=5, depth=2)


def reference_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, groups: int) -> np.ndarray:
    """Direct 'same' convolution by sums over taps, in float64: x [B,C,L], w [O,C/g,K]."""
    batch, channels, length = x.shape
    out_ch, per_group, k = w.shape
    pad = k // 2
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad)))
    y = np.zeros((batch, out_ch, length))
    outs_per_group = out_ch // groups
    for o in range(out_ch):
        g = o // outs_per_group
        for c in range(per_group):
            for t in range(k):
                y[:, o] += w[o, c, t] * xp[:, g * per_group + c, t : t + length]
        y[:, o] += b[o]
    return y


@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("impl", IMPL_CHOICES)
def test_conv_equals_direct_convolution(groups, impl):
    torch.manual_seed(0)
    x = torch.randn(2, 8, 23, dtype=torch.float64)
    w = torch.randn(12, 8 // groups, 7, dtype=torch.float64)
    b = torch.randn(12, dtype=torch.float64)
    got = conv1d_same(x, w, b, groups, impl)
    want = reference_conv(x.numpy(), w.numpy(), b.numpy(), groups)
    # the tf32 path computes in float32 by design
    tol = 1e-5 if impl == "tf32" else 1e-10
    np.testing.assert_allclose(got.double().numpy(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize(("kernel", "width", "groups"), [(7, 10, 1), (7, 37, 4), (61, 16, 1), (61, 200, 2)])
def test_conv_in_windows_is_the_whole_row_s_conv_with_its_gradients(kernel, width, groups):
    """Windows narrower than the kernel, a last window cut short, and one window longer than the row."""
    torch.manual_seed(2)
    x = torch.randn(2, 8, 157, dtype=torch.float64, requires_grad=True)
    w = torch.randn(12, 8 // groups, kernel, dtype=torch.float64, requires_grad=True)
    b = torch.randn(12, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 12, 157, dtype=torch.float64)
    whole = conv1d_same(x, w, b, groups, "bf16")
    windows = conv1d_same_windows(x, w, b, groups, "auto", width)
    assert windows.shape == whole.shape
    torch.testing.assert_close(windows, whole, rtol=0, atol=1e-12)
    want = torch.autograd.grad((whole * upstream).sum(), [x, w, b])
    got = torch.autograd.grad((windows * upstream).sum(), [x, w, b])
    for name, g, ref in zip("xwb", got, want, strict=True):
        torch.testing.assert_close(g, ref, rtol=0, atol=1e-10, msg=name)


@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("impl", IMPL_CHOICES)
def test_conv_gradients_equal_autograd_of_the_plain_convolution(groups, impl):
    """The split-precision implementations' hand-written backward is the true gradient (float64)."""
    torch.manual_seed(1)
    x = torch.randn(2, 8, 19, dtype=torch.float64, requires_grad=True)
    w = torch.randn(12, 8 // groups, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(12, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 12, 19, dtype=torch.float64)
    want = torch.autograd.grad(
        (torch.nn.functional.conv1d(x, w, b, padding=2, groups=groups) * upstream).sum(), [x, w, b]
    )
    got = torch.autograd.grad((conv1d_same(x, w, b, groups, impl) * upstream).sum(), [x, w, b])
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("length,block", [(37, 8), (40, 8), (5, 16)])
def test_toeplitz_conv_over_several_blocks_equals_direct_convolution_and_its_gradients(length, block):
    """Blocks that split the sequence (a ragged last one, an exact fit, one block longer than it)."""
    torch.manual_seed(2)
    groups = 4
    x = torch.randn(3, 8, length, dtype=torch.float64, requires_grad=True)
    w = torch.randn(12, 8 // groups, 9, dtype=torch.float64, requires_grad=True)
    b = torch.randn(12, dtype=torch.float64, requires_grad=True)
    got = conv1d_same_toeplitz(x, w, b, groups, block=block)
    np.testing.assert_allclose(
        got.detach().numpy(),
        reference_conv(x.detach().numpy(), w.detach().numpy(), b.detach().numpy(), groups),
        rtol=1e-10,
        atol=1e-10,
    )
    upstream = torch.randn(3, 12, length, dtype=torch.float64)
    want = torch.autograd.grad(
        (torch.nn.functional.conv1d(x, w, b, padding=4, groups=groups) * upstream).sum(), [x, w, b]
    )
    for g, r in zip(torch.autograd.grad((got * upstream).sum(), [x, w, b]), want, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


def test_toeplitz_conv_under_autocast_computes_in_bf16_close_to_float64():
    torch.manual_seed(3)
    x = torch.randn(2, 64, 100)
    w = torch.randn(128, 2, 61) / (2 * 61) ** 0.5
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = conv1d_same_toeplitz(x, w, None, 32, block=16)
    assert got.dtype == torch.bfloat16
    want = reference_conv(x.double().numpy(), w.double().numpy(), np.zeros(128), 32)
    error = np.abs(got.double().numpy() - want).max() / np.abs(want).max()
    assert error < 2e-2, error


@pytest.mark.parametrize("mix", ["complex64", "bf16"])
@pytest.mark.parametrize(
    ("length", "kernel", "n", "groups"), [(157, 61, None, 2), (300, 61, 64, 1), (36, 5, 16, 4), (5, 3, None, 1)]
)
def test_block_fft_conv_equals_direct_convolution_and_its_gradients(mix, length, kernel, n, groups):
    """Overlap-save over several blocks (a ragged last one, an exact fit of 36 = 3 x 12, one block longer
    than the row); float64 runs the bf16 mix's real product in float64."""
    torch.manual_seed(4)
    x = torch.randn(2, 8, length, dtype=torch.float64, requires_grad=True)
    w = torch.randn(12, 8 // groups, kernel, dtype=torch.float64, requires_grad=True)
    b = torch.randn(12, dtype=torch.float64, requires_grad=True)
    got = conv1d_same_fft_blocks(x, w, b, groups, mix, n)
    want = reference_conv(x.detach().numpy(), w.detach().numpy(), b.detach().numpy(), groups)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-10, atol=1e-10)
    upstream = torch.randn(2, 12, length, dtype=torch.float64)
    plain = torch.nn.functional.conv1d(x, w, b, padding=kernel // 2, groups=groups)
    want_grads = torch.autograd.grad((plain * upstream).sum(), [x, w, b])
    for name, g, r in zip("xwb", torch.autograd.grad((got * upstream).sum(), [x, w, b]), want_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10, msg=name)


def test_block_fft_conv_in_float32_is_as_close_to_float64_as_its_mix_dtype_allows():
    """complex64 mixing: float32's rounding; bf16 mixing: within a bf16 convolution's own error."""
    torch.manual_seed(5)
    x = torch.randn(2, 64, 700)
    w = torch.randn(96, 64, 61) / (64 * 61) ** 0.5
    want = torch.nn.functional.conv1d(x.double(), w.double(), padding=30)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain_bf16 = torch.nn.functional.conv1d(x, w, padding=30)

    def error(y):
        return ((y.double() - want).abs().max() / want.abs().max()).item()

    assert error(conv1d_same_fft_blocks(x, w, None, 1, "complex64")) < 1e-5
    assert error(conv1d_same_fft_blocks(x, w, None, 1, "bf16")) < error(plain_bf16)
    assert block_fft_size(61) == 256 and block_fft_size(5) == 16 and block_fft_size(1) == 16


def test_block_fft_conv_refuses_an_unknown_mix_and_a_block_below_the_kernel():
    x, w = torch.randn(1, 2, 9), torch.randn(2, 2, 5)
    with pytest.raises(ValueError) as info:
        conv1d_same_fft_blocks(x, w, None, 1, "fp8")
    assert str(info.value) == "mix='fp8': choose one of complex64, bf16"
    with pytest.raises(ValueError) as info:
        conv1d_same_fft_blocks(x, w, None, 1, "complex64", n=4)
    assert str(info.value) == "FFT size 4 is below the kernel's 5 taps"


def test_receptive_field_is_k_over_2_per_side():
    torch.manual_seed(0)
    mixer = BoundedConvMixer(4, 4, kernel_size=7).double()
    x = torch.randn(1, 40, 4, dtype=torch.float64)
    x2 = x.clone()
    x2[0, 20] += 1.0
    changed = (mixer(x2, None) - mixer(x, None)).abs().sum(-1)[0] > 0
    assert changed.nonzero().flatten().tolist() == list(range(17, 24))


def test_even_kernel_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="kernel_size=4: use an odd kernel"):
        BoundedConvMixer(4, 4, kernel_size=4)


def test_padding_does_not_change_a_sequence_output():
    torch.manual_seed(0)
    model = SequenceClassifier(CONV_CFG, vocab_size=16, max_len=64, num_classes=10, pad_id=0, two_tower=False).double()
    ids = torch.randint(1, 16, (1, 30))
    padded = torch.cat([ids, torch.zeros(1, 25, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(ids), model(padded), rtol=1e-10, atol=1e-10)


def test_two_tower_documents_do_not_see_each_other():
    torch.manual_seed(0)
    model = SequenceClassifier(CONV_CFG, vocab_size=16, max_len=64, num_classes=2, pad_id=0, two_tower=True)
    pair = torch.randint(1, 16, (3, 2, 40))
    other = pair.clone()
    other[:, 1] = torch.randint(1, 16, (3, 40))
    other[:, 1, 30:] = 0

    def embeddings(ids):
        docs = ids.flatten(0, 1)
        mask = docs != 0
        return model.head.embed(model.encoder(docs, mask), mask).unflatten(0, (ids.shape[0], 2))

    a, b = embeddings(pair), embeddings(other)
    assert torch.equal(a[:, 0], b[:, 0])
    assert not torch.equal(a[:, 1], b[:, 1])


def test_intensity_encoding_is_one_linear_map_of_the_scaled_pixel():
    torch.manual_seed(0)
    cfg = {**CONV_CFG, "token_encoding": "intensity"}
    model = SequenceClassifier(cfg, vocab_size=256, max_len=64, num_classes=2, pad_id=None, two_tower=False)
    layer = model.encoder.embed.tokens
    ids = torch.tensor([[0, 1, 128, 255]])
    expected = ids.unsqueeze(-1).float() / 255.0 * layer.weight[:, 0] + layer.bias
    torch.testing.assert_close(model.encoder.embed(ids), expected)
    assert model(torch.randint(0, 256, (2, 64))).shape == (2, 2)


@pytest.mark.parametrize(
    "key, value, refusal, choices",
    [
        (
            "token_encoding",
            "intensity",
            "model.token_encoding=intensity reads token ids as pixel intensities, but this task "
            "pads with id 0 (a vocabulary of symbols, not pixels): use model.token_encoding=embedding",
            "embedding, intensity",
        ),
        (
            "norm",
            "batch",
            "model.norm=batch takes its statistics over every position, but this task pads with id 0: "
            "padding would enter them; use model.norm=layer",
            "layer, batch",
        ),
    ],
)
def test_pixel_only_settings_are_refused_for_a_padded_task_and_unknown_values_are_named(key, value, refusal, choices):
    def build(setting, pad_id):
        return SequenceClassifier(
            {**CONV_CFG, key: setting}, vocab_size=16, max_len=64, num_classes=2, pad_id=pad_id, two_tower=False
        )

    with pytest.raises(ValueError) as err:
        build(value, pad_id=0)
    assert str(err.value) == refusal
    with pytest.raises(ValueError) as err:
        build("bogus", pad_id=None)
    assert str(err.value) == f"model.{key}='bogus': choose one of {choices}"


def test_batch_norm_normalises_each_channel_over_batch_and_positions():
    torch.manual_seed(0)
    model = SequenceClassifier(
        {**CONV_CFG, "norm": "batch"}, vocab_size=256, max_len=64, num_classes=2, pad_id=None, two_tower=False
    )
    norm = model.encoder.sublayers[0].norm
    x = torch.randn(3, 20, 8) * 4 + 2
    mean = x.mean(dim=(0, 1))
    var = x.var(dim=(0, 1), unbiased=False)
    torch.testing.assert_close(norm(x), (x - mean) / torch.sqrt(var + 1e-5), rtol=1e-5, atol=1e-5)
    # running statistics (momentum 0.1 from 0 and 1) serve evaluation and travel in the state dict
    torch.testing.assert_close(norm.bn.running_mean, 0.1 * mean)
    assert "encoder.final_norm.bn.running_var" in model.state_dict()
    model.eval()
    torch.testing.assert_close(norm(x), (x - norm.bn.running_mean) / torch.sqrt(norm.bn.running_var + 1e-5))


def test_sinusoidal_table_matches_the_formula():
    table = sinusoidal_table(50, 8)
    pos, i = 13, 2
    assert math.isclose(float(table[pos, 2 * i]), math.sin(pos / 10000 ** (2 * i / 8)), rel_tol=1e-6)
    assert math.isclose(float(table[pos, 2 * i + 1]), math.cos(pos / 10000 ** (2 * i / 8)), rel_tol=1e-6)


def test_followup_schedule_plateau_and_final_decay():
    c = LRController(1.0, "followup", plateau_factor=0.5, plateau_patience=2)
    assert c.lr(0, 0.0) == 1.0 and c.lr(0, 0.9) == 1.0
    assert math.isclose(c.lr(0, 0.95), 0.5) and c.lr(0, 1.0) == 0.0
    for loss in (1.0, 1.0, 1.0):  # first sets the best, then two bad epochs: within patience
        assert not c.end_epoch(loss)
    assert c.end_epoch(1.0) and c.lr(0, 0.0) == 0.5


def test_lra_schedule_is_warmup_times_rsqrt():
    c = LRController(0.05, "lra", warmup_steps=1000)
    assert math.isclose(c.lr(499, 0), 0.05 * 0.5 / math.sqrt(1000))
    assert math.isclose(c.lr(3999, 0), 0.05 / math.sqrt(4000))


def _settings(**kw):
    base = dict(lr=0.01, weight_decay=0.05, batch_size=4, epochs=1, schedule="constant")
    base.update(kw)
    return TrainSettings.from_dict(base)


def test_hinted_parameters_get_their_own_rate_and_decay():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    ssm = torch.nn.Parameter(torch.zeros(4, 4))
    ssm._optim = {"lr": 0.001, "weight_decay": 0.0}
    model.register_parameter("ssm", ssm)
    opt = make_optimizer(model, _settings(), torch.device("cpu"))
    by_param = {id(p): g for g in opt.param_groups for p in g["params"]}
    assert by_param[id(ssm)]["lr"] == 0.001 and by_param[id(ssm)]["weight_decay"] == 0.0
    assert by_param[id(ssm)]["lr_scale"] == 0.001 / 0.01
    assert by_param[id(model[0].weight)]["weight_decay"] == 0.05
    assert by_param[id(model[0].bias)]["weight_decay"] == 0.0  # 1-D: no decay by default
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(model.parameters()))


def test_schedule_scales_every_group_by_its_ratio():
    """One training step with the engine's loop: the hinted group's rate is the schedule's times its ratio."""
    model = torch.nn.Linear(2, 2)
    model.weight._optim = {"lr": 0.002}
    opt = make_optimizer(model, _settings(), torch.device("cpu"))
    for group in opt.param_groups:  # what repro/training/step.py does each step
        group["lr"] = 0.5 * group.get("lr_scale", 1.0)
    rates = sorted(g["lr"] for g in opt.param_groups if g["params"])
    assert rates == [0.5 * 0.2, 0.5]


class _NaNAfter(torch.nn.Module):
    """A model whose logits become NaN from its ``n``-th training call."""

    def __init__(self, n: int):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.calls, self.n = 0, n

    def forward(self, ids):
        if self.training:
            self.calls += 1
        out = self.linear(ids[:, :4].float())
        return out * float("nan") if self.training and self.calls >= self.n else out


def tiny_task(n: int = 64) -> TaskData:
    rng = np.random.default_rng(0)

    def split(m):
        return Split(rng.integers(1, 5, (m, 8)).astype(np.uint8), rng.integers(0, 2, m))

    return TaskData("tiny", split(n), split(16), split(16), num_classes=2, vocab_size=5, max_len=8)


def test_nan_loss_stops_naming_the_step(tmp_path):
    settings = TrainSettings(
        lr=1e-3,
        weight_decay=0.0,
        batch_size=8,
        epochs=3,
        log_every=4,
        checkpoint_every_steps=2,
        checkpoint_every_seconds=None,
    )
    with pytest.raises(NonFiniteLoss, match=r"training loss is nan at step 7; last good checkpoint: .*last\.pt"):
        train(_NaNAfter(7), tiny_task(), settings, seed=0, run_dir=tmp_path, device=torch.device("cpu"), progress=False)


def test_unknown_train_key_is_named():
    with pytest.raises(ValueError, match="unknown key\\(s\\) under train: learning_rate"):
        TrainSettings.from_dict({"lr": 1, "weight_decay": 0, "batch_size": 1, "epochs": 1, "learning_rate": 3})


def test_same_seed_same_numbers_on_cpu(tmp_path):
    def once(folder):
        torch.manual_seed(0)
        model = SequenceClassifier(CONV_CFG, vocab_size=5, max_len=8, num_classes=2, pad_id=0, two_tower=False)
        settings = TrainSettings(lr=1e-2, weight_decay=0.1, batch_size=8, epochs=2, checkpoint_every_seconds=None)
        return train(model, tiny_task(), settings, seed=3, run_dir=folder, device=torch.device("cpu"), progress=False)

    a, b = once(tmp_path / "a"), once(tmp_path / "b")
    assert a["predictions"] == b["predictions"]
    assert [r.get("train_loss") for r in a["history"]] == [r.get("train_loss") for r in b["history"]]


def test_auto_table_picks_the_fastest_measured_impl_for_the_device_and_shape():
    from repro.ops.conv import table_choice

    table = {
        "device": "GPU X",
        "rows": [
            {"impl": "fft", "kernel": 61, "length": 2000, "groups": 1, "fwd_bwd_ms": 3.9},
            {"impl": "bf16_flip_tf32w", "kernel": 61, "length": 2000, "groups": 1, "fwd_bwd_ms": 3.1},
            {"impl": "bf16", "kernel": 61, "length": 1024, "groups": 32, "fwd_bwd_ms": 3.0},
            {"impl": "bf16_flip", "kernel": 61, "length": 1000, "groups": 1, "fwd_bwd_ms": 1.2},
            {"impl": "fft", "kernel": 61, "length": 1000, "groups": 1, "fwd_bwd_ms": 1.9},
        ],
    }
    assert table_choice(table, "GPU X", 61, 2000, 1) == "bf16_flip_tf32w"
    assert table_choice(table, "GPU X", 61, 1024, 32) == "bf16"
    # A length within 6% of a measured one takes that length's fastest (bucketed widths) ...
    assert table_choice(table, "GPU X", 61, 1920, 1) == "bf16_flip_tf32w"
    assert table_choice(table, "GPU X", 61, 1050, 1) == "bf16_flip"
    # ... and one farther from every measured length is left to the built-in rule.
    assert table_choice(table, "GPU X", 61, 1100, 1) is None
    assert table_choice(table, "GPU X", 61, 1792, 1) is None
    assert table_choice(table, "GPU X", 61, 512, 1) is None
    assert table_choice(table, "GPU X", 61, 4096, 1) is None  # unmeasured shape: built-in rule
    assert table_choice(table, "GPU Y", 61, 2000, 1) is None  # measured on another card
    assert table_choice(None, "GPU X", 61, 2000, 1) is None


def test_a_record_names_the_measured_table_auto_follows_by_path_and_hash(tmp_path, monkeypatch):
    import hashlib

    from repro.ops.conv import AUTO_TABLE_ENV, auto_table_identity

    monkeypatch.delenv(AUTO_TABLE_ENV, raising=False)
    assert auto_table_identity() is None
    table = tmp_path / "bench_conv.json"
    table.write_text('{"device": "GPU X", "rows": []}')
    monkeypatch.setenv(AUTO_TABLE_ENV, str(table))
    assert auto_table_identity() == {"path": str(table), "sha256": hashlib.sha256(table.read_bytes()).hexdigest()}
    monkeypatch.setenv(AUTO_TABLE_ENV, str(tmp_path / "gone.json"))
    with pytest.raises(RuntimeError) as info:
        auto_table_identity()
    assert str(info.value).startswith(f"LRA_CONV_AUTO_TABLE={tmp_path / 'gone.json'}: cannot be read (")
    assert str(info.value).endswith("); unset it or point it at a file")


def test_builtin_auto_rule_follows_the_measured_shapes():
    from repro.ops.conv import builtin_choice

    assert [builtin_choice(61, n, 1) for n in (512, 1024, 1088, 1152, 1536, 2000, 4096)] == [
        "fft",
        "fft",
        "fft",
        "bf16_flip_tf32w",
        "bf16_flip_tf32w",
        "bf16_flip_tf32w",
        "bf16_flip_tf32w",
    ]
    assert builtin_choice(61, 1024, 32) == "toeplitz" and builtin_choice(61, 16384, 32) == "toeplitz"
    assert builtin_choice(31, 1024, 32) == "bf16" and builtin_choice(31, 2000, 1) == "bf16"


def test_a_model_reports_the_conv_impl_it_ran():
    from repro.models.model import collect_record_info

    def resolved_impls(model):  # what the run record gets
        return collect_record_info(model)["conv_impls"]

    model = SequenceClassifier(CONV_CFG, vocab_size=10, max_len=16, num_classes=2, pad_id=0, two_tower=False)
    assert resolved_impls(model) is None  # nothing ran yet
    model(torch.randint(1, 10, (2, 16)))
    assert resolved_impls(model) == ["fp32"]  # 'auto' off CUDA: the plain convolution, here in float32
    for layer in model.modules():
        if isinstance(layer, BoundedConvMixer):
            layer.impl = "fft"
    model(torch.randint(1, 10, (2, 16)))
    assert resolved_impls(model) == ["fft", "fp32"]  # every impl that ran, not only the last


def test_a_bad_auto_table_is_refused_naming_the_file(tmp_path, monkeypatch):
    import json as _json

    from repro.ops import conv

    bad = tmp_path / "table.json"
    bad.write_text(
        _json.dumps(
            {
                "device": "GPU X",
                "rows": [{"impl": "warp_drive", "kernel": 61, "length": 2000, "groups": 1, "fwd_bwd_ms": 1.0}],
            }
        )
    )
    monkeypatch.setenv(conv.AUTO_TABLE_ENV, str(bad))
    with pytest.raises(
        RuntimeError, match=r"table.json names conv impl\(s\) \['warp_drive'\] that this version does not have"
    ):
        conv._auto_table()
    broken = tmp_path / "broken.json"
    broken.write_text(_json.dumps({"device": "GPU X"}))
    monkeypatch.setenv(conv.AUTO_TABLE_ENV, str(broken))
    with pytest.raises(RuntimeError, match="broken.json: not a readable experiments/check_fast.py conv record"):
        conv._auto_table()


def test_intensity_encoding_stays_float32_under_bf16_autocast():
    model = SequenceClassifier(
        {**CONV_CFG, "token_encoding": "intensity"},
        vocab_size=256,
        max_len=64,
        num_classes=2,
        pad_id=None,
        two_tower=False,
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.encoder.embed(torch.randint(0, 256, (2, 10))).dtype == torch.float32


def test_a_retired_conv_impl_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError) as info:
        BoundedConvMixer(4, 4, kernel_size=3, impl="conv2d_bf16")
    assert str(info.value) == (
        "model.conv_impl='conv2d_bf16': choose one of auto, tf32, bf16, fft, toeplitz, bf16_flip_tf32w, bf16_flip_mmw, "
        "fft_blocks, fft_blocks_bf16"
    )


def test_every_backbone_builder_takes_max_len_and_the_model_config_may_not():
    import inspect
    import re

    from repro.models.model import load_backbones
    from repro.run.settings import CONF_DIR

    backbones = load_backbones()
    named = {m for f in CONF_DIR.rglob("*.yaml") for m in re.findall(r"^\s*backbone: (\w+)", f.read_text(), re.M)}
    assert named and named <= set(backbones.names())  # every backbone a configuration names registered itself
    for name in backbones.names():
        assert "max_len" in inspect.signature(backbones.get(name)).parameters, name
    with pytest.raises(
        ValueError,
        match=r"^model.max_len=64: the sequence length comes from the task; remove it from "
        r"the model config and set task.max_len$",
    ):
        SequenceClassifier(
            {**CONV_CFG, "max_len": 64}, vocab_size=16, max_len=64, num_classes=2, pad_id=0, two_tower=False
        )


@pytest.mark.parametrize("two_tower", [False, True])
def test_an_omitted_encoder_key_means_its_default_and_a_set_one_is_read(two_tower):
    """A model config that omits every shared key builds the model one that sets each to its
    ``EncoderSettings`` default builds (same parameters, same outputs); setting a key changes it."""
    from repro.models.settings import EncoderSettings, encoder_defaults

    explicit = {**encoder_defaults(), **CONV_CFG}
    ids = torch.randint(1, 16, (3, 2, 20) if two_tower else (3, 20))

    def built(cfg):
        torch.manual_seed(0)
        model = SequenceClassifier(cfg, vocab_size=16, max_len=20, num_classes=3, pad_id=0, two_tower=two_tower)
        return model.double().eval()

    plain, spelt = built(CONV_CFG), built(explicit)
    assert {k: v.shape for k, v in plain.state_dict().items()} == {k: v.shape for k, v in spelt.state_dict().items()}
    torch.testing.assert_close(plain(ids), spelt(ids), rtol=0, atol=0)
    assert EncoderSettings.from_model_config(CONV_CFG) == EncoderSettings.from_model_config(explicit)
    changed = built({**CONV_CFG, "cls_token": True, "final_norm": False})
    assert changed.encoder.cls is not None and isinstance(changed.encoder.final_norm, torch.nn.Identity)
    with pytest.raises(ValueError, match=r"^model.d_model is not set: every model config names its width$"):
        EncoderSettings.from_model_config({"backbone": "conv"})

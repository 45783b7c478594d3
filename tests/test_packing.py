"""Padded batches packed end to end (train.pack_sequences): the layout's invariants, the document block mask's
tiles, and the packed rotary Transformer equal to the padded one (float64, logits and every gradient)."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from repro.models.model import SequenceClassifier
from repro.models.packing import capacity_for, pack, plan_packing, unpack
from repro.original.attention._flex import document_block_mask

LENGTHS = [300, 1, 128, 129, 263, 0, 77]  # full, one token, on a tile boundary, one past it, no real token


def lengths_mask(lengths: list[int], width: int = 300) -> torch.Tensor:
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


def test_the_layout_puts_each_example_on_its_own_tiles_and_back():
    """Each example starts on a tile boundary after the previous one's tiles, its tokens in order at positions
    0, 1, ...; unpacking returns every real token's state and 0 at padded positions; empty slots hold 0."""
    mask = lengths_mask(LENGTHS)
    packed = plan_packing(mask, capacity_for(len(LENGTHS), 300, 1.0))
    spans = [-(-n // 128) * 128 for n in LENGTHS]
    assert packed.starts.tolist() == [sum(spans[:b]) for b in range(len(LENGTHS))]
    for b, n in enumerate(LENGTHS):
        slots = packed.starts[b] + torch.arange(n)
        assert torch.equal(packed.doc[slots], torch.full((n,), b))
        assert torch.equal(packed.positions[slots], torch.arange(n))
    assert int(packed.real.sum()) == sum(LENGTHS) == int((packed.doc >= 0).sum())
    x = torch.randn(len(LENGTHS), 300, 5, dtype=torch.float64)
    stream = pack(x, packed)
    assert stream.shape == (1, packed.capacity, 5)
    assert torch.equal(stream[0][~packed.real[0]], torch.zeros(packed.capacity - sum(LENGTHS), 5, dtype=x.dtype))
    back = unpack(stream, packed)
    assert torch.equal(back[mask], x[mask])
    assert torch.equal(back[~mask], torch.zeros(int((~mask).sum()), 5, dtype=x.dtype))


def test_a_batch_over_the_capacity_is_not_packed_and_a_bad_mask_is_refused():
    mask = lengths_mask(LENGTHS)
    needed = sum(-(-n // 128) * 128 for n in LENGTHS)
    assert plan_packing(mask, needed) is not None
    assert plan_packing(mask, needed - 128) is None
    assert capacity_for(4, 300, 0.01) == 384  # never less than one whole example
    mask[0, 10] = False
    with pytest.raises(ValueError, match="^plan_packing: padding must come after every real token of an example$"):
        plan_packing(mask, needed)
    with pytest.raises(ValueError, match="^packing capacity 100 is not a multiple of the tile side 128$"):
        plan_packing(mask, 100)


@pytest.mark.parametrize("gap", [0, 30])
def test_lengths_given_from_the_host_make_the_same_layout_and_the_same_decision(gap):
    """The loader's lengths (train.pack_sequences) replace reading them from the mask: every field of the layout
    is the same, and a batch over the capacity is refused the same way, on 200 random batches."""
    generator = torch.Generator().manual_seed(3)
    fields = ("source", "target", "doc", "positions", "real", "lengths", "starts")
    for _ in range(200):
        B = int(torch.randint(1, 9, (1,), generator=generator))
        lengths = torch.randint(0, 301, (B,), generator=generator)
        lengths[torch.rand(B, generator=generator) < 0.2] = 0
        mask = lengths_mask(lengths.tolist())
        capacity = capacity_for(B, 300, float(torch.rand(1, generator=generator)) * 0.9 + 0.1, gap=gap)
        read, given = plan_packing(mask, capacity, gap=gap), plan_packing(mask, capacity, gap=gap, lengths=lengths)
        assert (read is None) == (given is None), (lengths, capacity)
        if read is not None:
            for name in fields:
                assert torch.equal(getattr(given, name), getattr(read, name)), name


def test_lengths_that_are_not_the_batch_s_are_refused():
    mask = lengths_mask(LENGTHS)
    wrong = torch.tensor(LENGTHS)
    wrong[2] += 1
    with pytest.raises(
        ValueError,
        match="^plan_packing: the lengths given are not the batch's: its padding must follow exactly that many tokens$",
    ):
        plan_packing(mask, capacity_for(len(LENGTHS), 300, 1.0), lengths=wrong)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "plan_packing: lengths of shape (6,) on cpu for a batch of 7: give one length per example, on the host"
        ),
    ):
        plan_packing(mask, capacity_for(len(LENGTHS), 300, 1.0), lengths=wrong[:6])
    wrong = torch.tensor(LENGTHS)
    wrong[0] = 301  # a full row looks the same to the mask for any length >= 300
    with pytest.raises(
        ValueError,
        match=re.escape("plan_packing: lengths from 0 to 301 for a batch 300 wide: each must be in [0, 300]"),
    ):
        plan_packing(mask, capacity_for(len(LENGTHS), 300, 1.0), lengths=wrong)


def test_the_document_block_mask_classifies_every_tile_exactly():
    """Each (query tile, key tile) of the stream: absent unless both hold tokens of one example, full when every
    pair is allowed, partial otherwise; the mask function allows exactly the same-example pairs."""
    mask = lengths_mask(LENGTHS)
    packed = plan_packing(mask, capacity_for(len(LENGTHS), 300, 1.0) + 256)  # two empty tiles at the end
    block = document_block_mask(packed.doc, packed.lengths, packed.starts, 128)
    doc = packed.doc
    pairs = (doc[:, None] == doc[None, :]) & (doc[:, None] >= 0)
    n = packed.capacity // 128
    tiles = pairs.view(n, 128, n, 128).transpose(1, 2).flatten(2)
    want_full, want_some = tiles.all(-1), tiles.any(-1)
    for i in range(n):
        full = set(block.full_kv_indices[0, 0, i, : block.full_kv_num_blocks[0, 0, i]].tolist())
        part = set(block.kv_indices[0, 0, i, : block.kv_num_blocks[0, 0, i]].tolist())
        assert full == {j for j in range(n) if want_full[i, j]}, i
        assert part == {j for j in range(n) if want_some[i, j] and not want_full[i, j]}, i
    q, kv = torch.arange(packed.capacity)[:, None], torch.arange(packed.capacity)[None, :]
    zero = torch.zeros((), dtype=torch.long)
    assert torch.equal(block.mask_mod(zero, zero, q, kv), pairs)


def classifier(seed: int = 5, **extra) -> SequenceClassifier:
    torch.manual_seed(seed)
    cfg = dict(backbone="rotary_transformer", d_model=32, n_heads=2, depth=2, d_ff=48, pooling="mean")
    cfg.update(extra)
    return SequenceClassifier(cfg, vocab_size=20, max_len=300, num_classes=5, pad_id=0, two_tower=False).double()


def padded_ids(lengths: list[int] = LENGTHS) -> torch.Tensor:
    ids = torch.randint(1, 20, (len(lengths), 300), generator=torch.Generator().manual_seed(6))
    return ids.masked_fill(~lengths_mask(lengths), 0)


def logits_states_grads(model: SequenceClassifier, ids: torch.Tensor):
    model.zero_grad()
    logits, states = model.forward_with_states(ids)
    mask = ids != 0
    # a loss on the logits and on every real token's state (the multitask MLM reads them)
    (logits.square().sum() + states[mask].sin().sum()).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), states.detach()[mask], grads


@pytest.mark.parametrize(
    "extra",
    [
        {},  # the follow-up's defaults but the layout: per-head rotation
        {"rotary_layout": "full_width", "rotary_disable_half": True, "rotary_disable": "alternate"},  # its code's
        {"rotary": False, "positional": "sinusoidal"},
        {"rotary": False, "positional": "learned", "pooling": "max", "final_norm": True},
    ],
)
def test_the_packed_model_computes_the_padded_one_s_function(extra):
    """Logits, every real token's state and every gradient equal, float64 (only summation order differs)."""
    model, ids = classifier(**extra), padded_ids()
    padded = logits_states_grads(model, ids)
    model.use_packing(1.0)
    streams = []
    original = model.encoder.forward_stream
    model.encoder.forward_stream = lambda x, packed: streams.append(packed.capacity) or original(x, packed)
    packed = logits_states_grads(model, ids)
    assert streams == [capacity_for(len(LENGTHS), 300, 1.0)]  # it did run packed
    torch.testing.assert_close(packed[0], padded[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(packed[1], padded[1], rtol=0, atol=1e-12)
    assert packed[2].keys() == padded[2].keys()
    for name, grad in padded[2].items():
        torch.testing.assert_close(packed[2][name], grad, rtol=0, atol=1e-11, msg=name)


@pytest.mark.parametrize("kernel_size", [5, 61, 257])
def test_the_packed_bounded_convolution_computes_the_padded_one_s_function(kernel_size):
    """The follow-up's convolution (locality arms): each example followed by at least K // 2 empty slots, so
    no output sees another example's token; examples of 128 and 300 tokens test the gap past a whole tile."""
    torch.manual_seed(4)
    cfg = dict(backbone="conv", d_model=16, d_hidden=24, kernel_size=kernel_size, depth=2, pooling="mean")
    model = SequenceClassifier(cfg, vocab_size=20, max_len=300, num_classes=5, pad_id=0, two_tower=False).double()
    ids = padded_ids()
    padded = logits_states_grads(model, ids)
    model.use_packing(1.0)
    packed = logits_states_grads(model, ids)
    assert model.encoder.pack_counts == {"packed": 1, "padded": 0}
    for got, want in zip(packed[:2], padded[:2], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    for name, grad in padded[2].items():
        torch.testing.assert_close(packed[2][name], grad, rtol=0, atol=1e-11, msg=name)


def test_a_gap_keeps_empty_slots_after_every_example():
    mask = lengths_mask(LENGTHS)
    packed = plan_packing(mask, capacity_for(len(LENGTHS), 300, 1.0, gap=30), gap=30)
    spans = [(int(s), int(n)) for s, n in zip(packed.starts, packed.lengths, strict=True) if n > 0]
    assert all(nxt - (start + n) >= 30 for (start, n), (nxt, _) in zip(spans, spans[1:], strict=False))
    assert packed.starts.tolist()[:4] == [0, 384, 512, 768]  # 300 + 30 -> 384; 1 + 30 -> 128; 128 + 30 -> 256


def test_the_model_plans_its_next_pass_from_the_lengths_it_is_given_then_forgets_them():
    """SequenceClassifier.expect_lengths (what the training step passes from the loader): the next packed pass
    uses those lengths (wrong ones are refused there, so they were read) and the same result as without; the
    pass after it reads them from the mask again."""
    model, ids = classifier(), padded_ids()
    model.use_packing(1.0)
    expected = model(ids).detach()
    model.expect_lengths(torch.tensor(LENGTHS))
    torch.testing.assert_close(model(ids).detach(), expected, rtol=0, atol=0)
    assert model.encoder.pack_expected["lengths"] is None
    wrong = torch.tensor(LENGTHS)
    wrong[0] -= 1
    model.expect_lengths(wrong)
    with pytest.raises(ValueError, match="^plan_packing: the lengths given are not the batch's"):
        model(ids)
    torch.testing.assert_close(model(ids).detach(), expected, rtol=0, atol=0)
    model.use_packing(None)
    model.expect_lengths(wrong)  # ignored: the model runs padded
    torch.testing.assert_close(model(ids).detach(), expected, rtol=0, atol=1e-12)


def test_the_training_loader_gives_each_batch_its_lengths_from_the_host():
    """TrainBatches with pack_lengths: every batch's Batch.lengths are its inputs' real tokens, on the host,
    through epochs (a new order each) and for each rank's slice of the global batch."""
    from repro.training.batches import TrainBatches
    from repro.training.batching import sequence_lengths
    from repro.training.distributed import DistContext

    generator = torch.Generator().manual_seed(8)
    lengths = torch.randint(0, 41, (24,), generator=generator)
    x = torch.randint(1, 9, (24, 40), generator=generator).masked_fill(torch.arange(40)[None, :] >= lengths[:, None], 0)
    split = {"x": x, "y": torch.zeros(24, dtype=torch.long)}
    host = torch.from_numpy(sequence_lengths(x.numpy(), 0))
    assert torch.equal(host, lengths)
    for ctx in (DistContext(device=torch.device("cpu")), DistContext(rank=1, world=2, device=torch.device("cpu"))):
        batches = TrainBatches(split, 4, 8, 3, torch.device("cpu"), ctx, pack_lengths=host)
        for step in range(7):
            batch = batches.fetch(step)
            assert batch.lengths.device.type == "cpu"
            assert torch.equal(batch.lengths, (batch.inputs != 0).sum(-1)), (ctx.rank, step)


def test_a_batch_that_does_not_fit_runs_padded_with_the_same_result():
    model, ids = classifier(), padded_ids()
    expected = model(ids).detach()
    model.use_packing(0.1)  # 7 x 300 x 0.1 -> 256 slots: the examples need 1,280
    model.encoder.forward_stream = None  # would fail if called
    torch.testing.assert_close(model(ids).detach(), expected, rtol=0, atol=0)


def test_two_towers_pack_their_documents_too():
    torch.manual_seed(2)
    cfg = dict(backbone="rotary_transformer", d_model=32, n_heads=2, depth=1, d_ff=48, pooling="mean")
    model = SequenceClassifier(cfg, vocab_size=20, max_len=300, num_classes=2, pad_id=0, two_tower=True).double()
    ids = torch.stack([padded_ids(), padded_ids([5, 299, 130, 1, 2, 40, 300])], dim=1)  # [7, 2, 300]
    expected = model(ids).detach()
    model.use_packing(1.0)
    torch.testing.assert_close(model(ids).detach(), expected, rtol=0, atol=1e-12)


def test_packing_a_model_whose_function_it_would_change_is_refused():
    from repro.original.encoder import FeedForward

    def refused(model, why, fraction=0.7):
        message = f"train.pack_sequences=true: {why}; set train.pack_sequences=false"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            model.use_packing(fraction)

    padded = dict(vocab_size=20, max_len=300, num_classes=5, two_tower=False)
    cfg = dict(backbone="lra_transformer", attention="vanilla", d_model=32, n_heads=2, depth=1, d_ff=48)
    refused(
        SequenceClassifier(cfg, pad_id=0, **padded),
        "VanillaAttention do not run on packed sequences (TokenMixer.packable)",
    )
    position_wise = dict(d_model=32, dropout=0.1, pooling="mean")
    model = SequenceClassifier(position_wise, pad_id=0, backbone=lambda cfg, max_len: [FeedForward(32, 48)], **padded)
    dropout = "model.dropout > 0 would draw other dropout masks on the packed layout than on the padded one"
    refused(model, dropout)
    position_wise["dropout"] = 0.0  # a mixer's own dropout
    own = SequenceClassifier(
        position_wise, pad_id=0, backbone=lambda c, max_len: [FeedForward(32, 48, dropout=0.2)], **padded
    )
    refused(own, dropout)

    class Shifted(FeedForward):  # computes something else: does not inherit FeedForward's packable
        def forward(self, x, mask=None):
            return super().forward(x.roll(1, dims=1))

    refused(
        SequenceClassifier(position_wise, pad_id=0, backbone=lambda c, max_len: [Shifted(32, 48)], **padded),
        "Shifted do not run on packed sequences (TokenMixer.packable)",
    )
    for pooling in ("mean_all", "first"):
        refused(
            classifier(pooling=pooling),
            f"model.pooling={pooling} reads padded positions (an example without tokens, or every position), "
            "which a packed run leaves at 0; packing takes mean or max pooling",
        )
    rotary = dict(backbone="rotary_transformer", d_model=32, n_heads=2, depth=1, d_ff=48)
    refused(
        classifier(cls_token=True),
        "model.cls_token=true prepends one vector to the padded batch, not to each packed example",
    )
    pixels = SequenceClassifier(rotary, vocab_size=256, max_len=64, num_classes=10, pad_id=None, two_tower=False)
    refused(pixels, "the task has no padding (every sequence is full length): there is nothing to pack")
    with pytest.raises(
        ValueError, match=r"^train.pack_capacity=1.5: give the stream's share of a padded batch, in \(0, 1\]$"
    ):
        classifier().use_packing(1.5)


def test_flex_attention_over_the_stream_is_sdpa_within_each_example():
    """The packed attention of one layer against SDPA run on each example alone (no mask at all)."""
    from repro.followup.rotary import RotarySelfAttention, packed_block_mask

    torch.manual_seed(1)
    mixer = RotarySelfAttention(32, 2, 300, layout="full_width").double()
    mask = lengths_mask(LENGTHS)
    packed = plan_packing(mask, capacity_for(len(LENGTHS), 300, 1.0))
    packed.shared["document_block_mask"] = packed_block_mask(packed)
    x = torch.randn(len(LENGTHS), 300, 32, dtype=torch.float64)
    out = unpack(mixer.forward_packed(pack(x, packed), packed), packed)
    for b, n in enumerate(LENGTHS):
        if n:
            q, k, v = mixer.project(x[b : b + 1, :n])
            alone = mixer.proj.output(F.scaled_dot_product_attention(q, k, v))
            torch.testing.assert_close(out[b : b + 1, :n], alone, rtol=0, atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="flex_attention's fused kernel under the document mask")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "cfg",
    [
        dict(backbone="rotary_transformer", d_model=64, n_heads=4, depth=2, d_ff=128, rotary_layout="full_width"),
        dict(backbone="conv", d_model=64, d_hidden=128, kernel_size=61, depth=2),
    ],
    ids=["rotary", "conv61"],
)
def test_on_cuda_the_packed_model_is_as_close_to_the_float64_function_as_the_padded_one(dtype, cfg):
    """On the GPU the packed and the padded model run other kernels (the document mask's tiles, not the padding
    mask's; a convolution of another shape): each is compared with the float64 function (the model on the
    CPU), and the packed one may be off by at most twice the padded one's error plus a float32 rounding."""
    torch.manual_seed(5)
    cfg = {**cfg, "pooling": "mean"}
    model = SequenceClassifier(cfg, vocab_size=20, max_len=600, num_classes=10, pad_id=0, two_tower=False)
    lengths = [600, 1, 128, 129, 263, 17, 77, 512, 300, 400, 599, 2, 130, 255, 256, 33]
    ids = torch.randint(1, 20, (len(lengths), 600), generator=torch.Generator().manual_seed(6))
    ids = ids.masked_fill(~(torch.arange(600)[None, :] < torch.tensor(lengths)[:, None]), 0)
    with torch.no_grad():
        exact = model.double()(ids).float()
        gpu, on_gpu = model.float().cuda(), ids.cuda()
        errors = []
        for fraction in (None, 0.7):
            gpu.use_packing(fraction)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
                errors.append(float((gpu(on_gpu).float().cpu() - exact).abs().max()))
    padded, packed = errors
    assert gpu.encoder.pack_counts == {"packed": 1, "padded": 0}
    assert packed <= 2 * padded + 1e-5, errors


@pytest.mark.skipif(not torch.cuda.is_available(), reason="host synchronisations exist on CUDA only")
@pytest.mark.parametrize(
    "cfg",
    [
        dict(backbone="rotary_transformer", d_model=64, n_heads=4, depth=2, d_ff=128),
        dict(backbone="conv", d_model=64, d_hidden=128, kernel_size=61, depth=2),
    ],
    ids=["rotary", "conv61"],
)
def test_on_cuda_a_packed_pass_given_its_lengths_never_waits_for_the_device(cfg):
    """With the loader's lengths (SequenceClassifier.expect_lengths) a packed forward and backward pass queue
    their work without a host synchronisation, so the host runs ahead of the GPU as on the padded path."""
    torch.manual_seed(5)
    model = SequenceClassifier({**cfg, "pooling": "mean"}, vocab_size=20, max_len=600, num_classes=10, pad_id=0,
                               two_tower=False).cuda()  # fmt: skip
    model.use_packing(0.7)
    lengths = torch.tensor([600, 1, 128, 129, 263, 17, 77, 512, 300, 400, 599, 2, 130, 255, 256, 33])
    ids = torch.randint(1, 20, (len(lengths), 600), generator=torch.Generator().manual_seed(6))
    ids = ids.masked_fill(~(torch.arange(600)[None, :] < lengths[:, None]), 0).cuda()

    def packed_pass():
        model.expect_lengths(lengths)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            model(ids).float().square().sum().backward()

    packed_pass()  # the first pass builds what is built once (kernels, tables)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        packed_pass()
        packed_pass()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert model.encoder.pack_counts == {"packed": 3, "padded": 0}

"""Attention over padded batches through flex_attention (the follow-up Transformer's fast path): the padding
block mask classifies every tile exactly, and the attention equals SDPA under the boolean key mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from repro.followup.rotary import RotarySelfAttention, build_rotary_transformer_layers
from repro.original.attention._flex import eager_padding_block_mask, padded_flex_attention, padding_block_mask


def padding(length: int) -> torch.Tensor:
    """Padding at the end: none, mid-tile, on a tile boundary, one real token, no real token."""
    ends = torch.tensor([length, length - 37, 128, 1, 0])
    return torch.arange(length)[None, :] < ends[:, None]


@pytest.mark.parametrize("length", [300, 256])
def test_padding_block_mask_classifies_every_tile_exactly(length):
    """Each (sample, query tile, key tile): absent when the queries or the keys hold no real token, full when
    every pair is allowed, partial otherwise; the mask function allows exactly the real-real pairs."""
    mask = padding(length)
    block = padding_block_mask(mask, block=128)
    n = -(-length // 128)
    padded = F.pad(mask, (0, n * 128 - length)).view(len(mask), n, 128)
    pairs = padded[:, :, None, :, None] & padded[:, None, :, None, :]  # [B, nq, nk, 128, 128]
    want_full, want_some = pairs.flatten(3).all(-1), pairs.flatten(3).any(-1)
    for b in range(len(mask)):
        for i in range(n):
            full = set(block.full_kv_indices[b, 0, i, : block.full_kv_num_blocks[b, 0, i]].tolist())
            part = set(block.kv_indices[b, 0, i, : block.kv_num_blocks[b, 0, i]].tolist())
            assert full == {j for j in range(n) if want_full[b, i, j]}
            assert part == {j for j in range(n) if want_some[b, i, j] and not want_full[b, i, j]}
    b, q, kv = torch.arange(len(mask))[:, None, None], torch.arange(length)[None, :, None], torch.arange(length)
    allowed = block.mask_mod(b, torch.zeros((), dtype=torch.long), q, kv)
    assert torch.equal(allowed, mask[:, :, None] & mask[:, None, :])


def test_padding_before_a_real_token_is_refused():
    mask = padding(300)
    mask[0, 10] = False
    with pytest.raises(ValueError, match="^padding_block_mask: padding must come after every real token of a sample$"):
        padding_block_mask(mask)


def test_padded_flex_attention_equals_sdpa_under_the_key_mask_forward_and_gradients():
    """float64: on real queries the same outputs and gradients as SDPA with the boolean key mask; padded
    queries exactly 0 (and no gradient through them)."""
    torch.manual_seed(1)
    mask = padding(300)
    q, k, v = (torch.randn(len(mask), 2, 300, 16, dtype=torch.float64, requires_grad=True) for _ in range(3))
    real = mask[:, None, :, None]
    weights = torch.randn(len(mask), 2, 300, 16, dtype=torch.float64) * real  # loss on real queries alone
    flex = padded_flex_attention(q, k, v, mask)
    assert torch.equal(flex * ~real, torch.zeros_like(flex))
    flex_grads = torch.autograd.grad((flex * weights).sum(), (q, k, v))
    open_rows = mask | ~mask.any(-1, keepdim=True)  # SDPA needs a key in every row
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=open_rows[:, None, None, :])
    sdpa_grads = torch.autograd.grad((sdpa * weights).sum(), (q, k, v))
    torch.testing.assert_close(flex * real, sdpa * real, rtol=0, atol=1e-12)
    for a, b in zip(flex_grads, sdpa_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_the_rotary_mixer_s_flex_backend_equals_its_sdpa_backend():
    torch.manual_seed(2)
    sdpa = RotarySelfAttention(64, 4, 300, attention_backend="sdpa").double()
    flex = RotarySelfAttention(64, 4, 300, attention_backend="flex").double()
    flex.load_state_dict(sdpa.state_dict())
    x = torch.randn(3, 300, 64, dtype=torch.float64)
    mask = torch.arange(300)[None, :] < torch.tensor([300, 170, 0])[:, None]
    results = []
    for mixer in (sdpa, flex):
        xg = x.clone().requires_grad_(True)
        y = mixer(xg, mask)
        (y.square().sum() + y.sum()).backward()
        results.append([y.detach(), xg.grad] + [p.grad for p in mixer.proj.parameters()])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-10)


def test_the_attention_backend_is_checked_and_passed_by_the_builder():
    with pytest.raises(ValueError, match="model.attention_backend='fast': choose one of auto, flex, sdpa"):
        RotarySelfAttention(32, 2, 64, attention_backend="fast")
    cfg = dict(backbone="rotary_transformer", d_model=32, n_heads=2, depth=1, d_ff=48, attention_backend="sdpa")
    assert build_rotary_transformer_layers(cfg, max_len=64)[0].attention_backend == "sdpa"


def _train(compiled: bool, steps: int = 3) -> tuple[list[float], dict]:
    from repro.models.model import SequenceClassifier
    from repro.training.batches import Batch
    from repro.training.distributed import DistContext
    from repro.training.schedule import LRController
    from repro.training.settings import TrainSettings
    from repro.training.step import TrainStep, make_optimizer

    torch.manual_seed(0)
    cfg = dict(
        backbone="rotary_transformer", d_model=32, n_heads=2, depth=1, d_ff=48, pooling="mean", attention_backend="flex"
    )
    model = SequenceClassifier(cfg, vocab_size=20, max_len=150, num_classes=5, pad_id=0, two_tower=False).double()
    settings = TrainSettings(lr=1e-3, weight_decay=0.01, batch_size=4, epochs=1, compile=compiled, grad_clip=1.0)
    device = torch.device("cpu")
    optimizer = make_optimizer(model, settings, device)
    step = TrainStep(model, optimizer, LRController(1e-3, kind="constant"), settings, device, DistContext())
    generator = torch.Generator().manual_seed(3)
    losses = []
    for i in range(steps):
        ids = torch.randint(1, 20, (4, 150), generator=generator)
        ids[1, 90:], ids[2, 7:] = 0, 0
        labels = torch.randint(0, 5, (4,), generator=generator)
        loss, _ = step(Batch(ids, labels, None, None), i, i / steps)
        losses.append(float(loss))
    return losses, {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.mark.slow  # inductor compiles the forward and backward for the CPU: 1-4 minutes on two cores
def test_a_compiled_training_step_equals_the_eager_one():
    """train.compile: the whole model through torch.compile (here on the CPU, float64, the flex path's dense
    reference inside): the same losses and weights after three steps as the eager model."""
    eager_losses, eager_weights = _train(compiled=False)
    compiled_losses, compiled_weights = _train(compiled=True)
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-10)
    for name, weight in eager_weights.items():
        torch.testing.assert_close(compiled_weights[name], weight, rtol=0, atol=1e-10, msg=name)


@pytest.mark.parametrize("backend", ["sdpa", "flex"])
def test_without_a_mask_the_rotary_mixer_equals_its_all_real_mask(backend):
    """A task without padding passes no mask (pixels): the unmasked call computes what an all-True mask does."""
    torch.manual_seed(3)
    mixer = RotarySelfAttention(64, 4, 256, attention_backend=backend).double()
    x = torch.randn(2, 256, 64, dtype=torch.float64)
    everything = torch.ones(2, 256, dtype=torch.bool)
    torch.testing.assert_close(mixer(x), mixer(x, everything), rtol=0, atol=1e-12)


def test_a_compiled_model_builds_the_padding_block_mask_outside_its_graph():
    """Traced into a graph, the mask's tables were fused into flex_attention's kernel, which read out of
    bounds on CUDA (repro/original/attention/_flex.py); the compiled caller must get them built eagerly."""
    from torch._dynamo.testing import EagerAndRecordGraphs

    torch._dynamo.reset()
    mask = padding(300)
    graphs = EagerAndRecordGraphs()
    compiled = torch.compile(lambda m: eager_padding_block_mask(m).kv_num_blocks + 1, backend=graphs)
    assert torch.equal(compiled(mask), padding_block_mask(mask).kv_num_blocks + 1)
    traced = [str(node.target) for graph in graphs.graphs for node in graph.graph.nodes]
    assert not any(name in op for op in traced for name in ("sort", "arange", "floor_divide", "clamp"))


def _rotary_classifier(depth: int):
    from repro.models.model import SequenceClassifier

    torch.manual_seed(5)
    cfg = dict(backbone="rotary_transformer", d_model=32, n_heads=2, depth=depth, d_ff=48, pooling="mean",
               attention_backend="flex")  # fmt: skip
    return SequenceClassifier(cfg, vocab_size=20, max_len=300, num_classes=5, pad_id=0, two_tower=False).double()


def _padded_ids() -> torch.Tensor:
    ids = torch.randint(1, 20, (3, 300), generator=torch.Generator().manual_seed(6))
    ids[1, 170:], ids[2, 1:] = 0, 0
    return ids


def test_the_encoder_builds_the_padding_block_mask_once_for_every_layer(monkeypatch):
    """Three flex layers share one block mask a forward pass, and compute what a mask built in each layer does
    (logits and every gradient)."""
    import repro.original.attention._flex as flex

    model, ids = _rotary_classifier(depth=3), _padded_ids()
    built = []
    monkeypatch.setattr(
        flex, "padding_block_mask", lambda m, block=128: built.append(1) or padding_block_mask(m, block)
    )
    results = []
    for shared in (True, False):
        if not shared:  # each layer builds its own, as before the encoder shared it
            monkeypatch.setattr(RotarySelfAttention, "shared_padding", lambda self, mask: None)
        built.clear()
        model.zero_grad()
        logits = model(ids)
        logits.square().sum().backward()
        results.append((len(built), logits.detach(), [p.grad for p in model.parameters() if p.grad is not None]))
    (once, shared_logits, shared_grads), (per_layer, own_logits, own_grads) = results
    assert (once, per_layer) == (1, 3)
    torch.testing.assert_close(shared_logits, own_logits, rtol=0, atol=0)
    for a, b in zip(shared_grads, own_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_compiled_encoder_breaks_its_graph_for_the_padding_mask_once_not_once_a_layer(monkeypatch):
    """The eager block mask breaks a compiled graph where it is built: once a pass, before the layers, so a
    deeper model runs no more graphs a pass; a mask built in each layer broke the graph in each."""

    def graphs_a_pass(depth: int) -> int:
        torch._dynamo.reset()
        calls = [0]

        def backend(gm, inputs):  # runs each captured graph as is, counting its calls
            def run(*args):
                calls[0] += 1
                return gm.forward(*args)

            return run

        model, ids = _rotary_classifier(depth), _padded_ids()
        compiled = torch.compile(model, backend=backend)
        compiled(ids)
        calls[0] = 0
        torch.testing.assert_close(compiled(ids), model(ids), rtol=0, atol=1e-12)
        torch._dynamo.reset()
        return calls[0]

    shallow, deep = graphs_a_pass(1), graphs_a_pass(4)
    monkeypatch.setattr(RotarySelfAttention, "shared_padding", lambda self, mask: None)
    assert shallow == deep < graphs_a_pass(4)

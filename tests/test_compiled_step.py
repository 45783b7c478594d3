"""``train.compile``: a follow-up arm's training step through ``torch.compile`` equals the plain step.

On the CPU the compiled step is traced by dynamo and AOT autograd (``backend="aot_eager"``): the graph
the GPU's inductor build starts from, forward and backward, without its C++ code generation (minutes
here). Each follow-up arm of the benchmark's protocol, on ListOps and on text (with its masked-token loss),
and the Transformer arms on image and Pathfinder (whose defaults compile for CUDA graphs:
``train.compile_mode=reduce-overhead``, the step's graph-replay branch), trains three steps from the
same initialisation on the same padded batches, in float64, compiled and plain; losses and every
parameter after the steps agree to rounding.
"""

from __future__ import annotations

import csv
import functools
import json

import pytest
import torch
from torch._dynamo.eval_frame import OptimizedModule
from torch._dynamo.utils import counters

from repro.bench import followup
from repro.bench.models import hydra_context

ARMS = [arm for arm, _ in followup.PROTOCOL_ARMS]
SMALL = ["task.max_len=96", "++train.batch_size=4"]  # every task's small padded batches
GRAPH_TASKS = ("image", "pathfinder", "text")  # the Transformer's defaults there: compile_mode reduce-overhead
TRANSFORMERS = ("rotary_transformer", "rotary_transformer_notech")


def prepare_arm(arm: str, techniques: str | None, task_name: str, compiled: bool, device: str = "cpu"):
    """The arm's training step (``followup.prepare``) at the smoke profile's settings on small padded batches;
    on the CPU in float64."""
    spec = followup.RowSpec(arm, task_name, techniques)
    with hydra_context():
        run = followup.resolve_row(spec, "smoke", SMALL)
    facts = followup.shape_facts(task_name)
    task = followup.stand_in(task_name, int(run["task"]["max_len"]), facts, 16, seed=0, text_lengths=True)
    # the text techniques' masked-token loss runs through the compiled model; ListOps' operand permutation
    # runs in the loader, outside it (and random tokens are no trees)
    augment = followup.build_train_augment(run["techniques"], task) if task_name == "text" else None
    prepared = followup.prepare(run, task, augment, torch.device(device), compile_model=compiled)
    if device == "cpu":
        prepared.step.model.double()  # float64: the two paths' rounding apart, nothing else
    assert prepared.step.technique_loss == (augment is not None and augment.has_loss)
    assert isinstance(prepared.step.forward, OptimizedModule) == compiled
    return prepared


def train_steps(arm: str, techniques: str | None, task_name: str, compiled: bool, steps: int = 3, device: str = "cpu"):
    prepared = prepare_arm(arm, techniques, task_name, compiled, device)
    losses = []
    for i in range(steps):
        loss, _ = prepared.step(prepared.batches.fetch(i), i, i / steps)
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in prepared.step.model.state_dict().items()}


def short_rotary_listops_run(tmp_path, name: str, *overrides: str):
    """A short smoke run of the rotary Transformer on generated ListOps in ``tmp_path / name`` (the data cached
    in ``tmp_path / "cache"``), with ``overrides``; its run folder."""
    from conftest import SHORT_LISTOPS_OVERRIDES, composed

    from repro.run.runner import execute

    out = tmp_path / name
    cfg = composed(
        "arm=rotary_transformer", "task=listops", "profile=smoke", f"output_dir={out}",
        f"cache_dir={tmp_path / 'cache'}", "progress=false", "++train.log_every=1", *overrides,
        *SHORT_LISTOPS_OVERRIDES,
    )  # fmt: skip
    assert execute(cfg) == 0
    return out / "runs" / "rotary_transformer" / "listops" / "smoke" / "seed0"


# text: the masked-token loss where the arm has it
CASES = [(arm, task) for task in ("listops", "text") for arm in ARMS]
CASES += [(arm, task) for task in ("image", "pathfinder") for arm in TRANSFORMERS]


@pytest.mark.parametrize("arm, task_name", CASES)
def test_the_compiled_training_step_equals_the_plain_one(arm, task_name, monkeypatch):
    techniques = dict(followup.PROTOCOL_ARMS)[arm]
    plain_losses, plain = train_steps(arm, techniques, task_name, compiled=False)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    torch._dynamo.reset()
    counters.clear()
    losses, state = train_steps(arm, techniques, task_name, compiled=True)
    graphs = task_name in GRAPH_TASKS and arm in TRANSFORMERS
    assert prepare_arm(arm, techniques, task_name, compiled=True).step.graphs == graphs
    assert counters["stats"]["unique_graphs"] >= 1  # dynamo traced the model (no silent fallback to eager)
    assert losses == pytest.approx(plain_losses, rel=1e-10, abs=1e-12)
    assert plain.keys() == state.keys()
    for name, value in plain.items():
        torch.testing.assert_close(state[name], value, rtol=1e-9, atol=1e-11, msg=name)


def test_an_unknown_compile_mode_is_refused_naming_the_modes():
    from repro.training.settings import TrainSettings

    with hydra_context():
        train = followup.resolve_row(followup.RowSpec("locality_k5", "listops"), "smoke")["train"]
    assert TrainSettings.from_dict({**train, "compile_mode": "reduce-overhead"}).compile_mode == "reduce-overhead"
    with pytest.raises(ValueError) as caught:
        TrainSettings.from_dict({**train, "compile_mode": "fast"})
    assert caught.value.args[0] == (
        "train.compile_mode='fast': use one of default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs "
        "(torch.compile's modes; reduce-overhead: CUDA graphs)"
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="inductor's CUDA kernels under bf16 autocast")
@pytest.mark.parametrize("task_name", ["listops", *GRAPH_TASKS])
def test_on_cuda_the_compiled_bf16_step_stays_within_bf16_rounding_of_the_plain_one(task_name):
    """Inductor fuses and reorders bf16 arithmetic: after three steps the losses agree to 2% and every
    parameter to bf16's resolution at the learning rate's scale, but the key projection's bias. A bias added
    to every key adds q.b to each of a query's scores alike, which the softmax cancels (rotary rotates b by
    position, so only nearly), so its gradient is rounding noise, and Adam's normalised step turns noise of
    either sign into a step of the learning rate: on one H200 it moved up to 2.7e-3 apart in three steps,
    where the query and value biases stayed within 6e-5."""
    arm = "rotary_transformer"  # image, Pathfinder and text: its defaults replay the compiled step as CUDA graphs
    techniques = dict(followup.PROTOCOL_ARMS)[arm]
    plain_losses, plain = train_steps(arm, techniques, task_name, compiled=False, device="cuda")
    torch._dynamo.reset()
    losses, state = train_steps(arm, techniques, task_name, compiled=True, device="cuda")
    assert losses == pytest.approx(plain_losses, rel=2e-2)
    for name, value in plain.items():
        compiled, value = state[name].float(), value.float()
        if name.endswith("qkv.bias"):  # [q | k | v]: leave out k's third
            third = value.numel() // 3
            compiled, value = (torch.cat([t[:third], t[2 * third :]]) for t in (compiled, value))
        torch.testing.assert_close(compiled, value, rtol=2e-2, atol=2e-3, msg=name)


def test_a_run_with_compiled_transforms_writes_the_plain_run_s_history(tmp_path, monkeypatch):
    """``train.compile_transforms``: the rotary Transformer on ListOps with the operand permutation traced
    as one graph trains the same steps as the plain run: the same losses at every logged step (and the
    same validation), the wall clock aside."""
    from repro.followup.techniques import listops_permute

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    monkeypatch.setattr(listops_permute, "_COMPILED_ORDER", [])
    torch._dynamo.reset()
    histories = []
    for compiled in (False, True):
        run = short_rotary_listops_run(
            tmp_path, f"out-{compiled}", "+train.max_steps=6", f"++train.compile_transforms={str(compiled).lower()}"
        )
        rows = list(csv.DictReader(open(run / "history.csv")))
        histories.append([{k: v for k, v in row.items() if k != "elapsed_s"} for row in rows])  # all but time
        built = (run / "metrics.json").read_text()
        assert ("ListOpsOperandPermutation(levels=" in built) and (("compiled)" in built) == compiled)
    assert len(histories[0]) >= 6 and histories[0] == histories[1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="host synchronisations exist on CUDA only")
@pytest.mark.parametrize("arm", ARMS)
def test_on_cuda_a_training_step_never_waits_for_the_host(arm):
    """Every follow-up arm's eager training step on ListOps runs without one host synchronisation once its
    first step has made its one-off copies (a tensor built from Python numbers on the device, ``.item()``
    or ``bool(tensor)`` in a forward would each stall the host every step)."""
    prepared = prepare_arm(arm, dict(followup.PROTOCOL_ARMS)[arm], "listops", compiled=False, device="cuda")
    batch = prepared.batches.fetch(0)
    prepared.step(batch, 0, 0.0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for i in range(1, 4):
            prepared.step(batch, i, i / 4)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("arm, task_name", [(arm, "listops") for arm in ARMS] + [("rotary_transformer", "text")])
def test_the_compiled_evaluation_scores_as_the_plain_one_with_the_model_s_weights(arm, task_name, monkeypatch):
    """``train.compile`` scores validation and test through ``compiled_forward``: the same logits as the model
    in float64 (equal predictions, the loss to rounding), and after new weights are loaded into the model (the
    best checkpoint before the test), those weights', with no stale copy."""
    from repro.training.evaluate import compiled_forward, evaluate

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    torch._dynamo.reset()
    counters.clear()
    model = prepare_arm(arm, dict(followup.PROTOCOL_ARMS)[arm], task_name, compiled=False).step.model
    generator = torch.Generator().manual_seed(1)
    x = torch.randint(1, 8, (10, 96), generator=generator)
    if task_name == "listops":
        x[::2, 60:] = 0  # padding at the end of some rows
    split = {"x": x, "y": torch.randint(0, 2, (10,), generator=generator)}
    forward = compiled_forward(model, True)
    assert compiled_forward(model, False) is None
    for _ in range(2):  # 10 examples in batches of 4: the last batch of 2 is filled to 4 for the compiled forward
        plain, compiled = evaluate(model, split, 4, None), evaluate(model, split, 4, None, forward=forward)
        assert counters["stats"]["unique_graphs"] >= 1  # dynamo traced the model (no silent fallback to eager)
        assert (compiled["predictions"] == plain["predictions"]).all()
        assert compiled["loss"] == pytest.approx(plain["loss"], rel=1e-10)
        assert model.training  # evaluate leaves the model in training mode, as it found it
        with torch.no_grad():  # new weights, as loading best.pt gives: scored by the compiled forward too
            model.load_state_dict({k: v * 1.5 if v.is_floating_point() else v for k, v in model.state_dict().items()})
    assert evaluate(model, split, 4, None, forward=forward)["loss"] != pytest.approx(plain["loss"], rel=1e-6)


def test_a_compiled_run_scores_through_the_compiled_forward_as_the_plain_run_scores(tmp_path, monkeypatch):
    """``train.compile=true`` on a whole (short) run: its validations and its test go through the compiled
    forward, and give the plain run's accuracies; the losses agree to float32 rounding."""
    from repro.training import loop

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    calls = []

    def counted(model, compile_model):
        forward = loop_compiled_forward(model, compile_model)
        if forward is None:
            return None
        return lambda inputs: (calls.append(len(inputs)), forward(inputs))[1]

    loop_compiled_forward = loop.compiled_forward
    monkeypatch.setattr(loop, "compiled_forward", counted)
    torch._dynamo.reset()
    results = []
    for compiled in (False, True):
        run = short_rotary_listops_run(
            tmp_path, f"out-{compiled}", "+train.max_steps=4", "++train.eval_every_steps=2",
            f"++train.compile={str(compiled).lower()}",
        )  # fmt: skip
        assert bool(calls) == compiled
        history = list(csv.DictReader(open(run / "history.csv")))
        results.append((history, json.loads((run / "metrics.json").read_text())))
    (plain_rows, plain), (rows, metrics) = results
    assert len(rows) == len(plain_rows) >= 4 and sum(bool(row.get("val_acc")) for row in rows) >= 2
    for row, plain_row in zip(rows, plain_rows, strict=True):
        assert row.get("val_acc") == plain_row.get("val_acc")
        for key in ("train_loss", "val_loss"):  # losses tell weights apart where 16 examples' accuracies may not
            if row.get(key):
                assert float(row[key]) == pytest.approx(float(plain_row[key]), rel=1e-4), key
    assert (metrics["test_acc"], metrics["best_val_acc"]) == (plain["test_acc"], plain["best_val_acc"])
    assert metrics["test_loss"] == pytest.approx(plain["test_loss"], rel=1e-4)  # the best weights, loaded and scored


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs and inductor's CUDA kernels")
def test_on_cuda_scoring_after_cuda_graph_steps_sees_the_weights_the_steps_left():
    """Image's defaults: training steps replayed as CUDA graphs, then scoring through ``compiled_forward``
    (inductor, default mode), in float32: the plain model's loss, after each further step too."""
    from repro.training.evaluate import compiled_forward, evaluate

    torch._dynamo.reset()
    prepared = prepare_arm("rotary_transformer", None, "image", compiled=True, device="cuda")
    assert prepared.step.graphs
    model, forward = prepared.step.model, compiled_forward(prepared.step.model, True)
    generator = torch.Generator().manual_seed(2)
    split = {"x": torch.randint(1, 200, (10, 96), generator=generator).cuda(),
             "y": torch.randint(0, 2, (10,), generator=generator).cuda()}  # fmt: skip
    for i in range(3):
        prepared.step(prepared.batches.fetch(i), i, i / 3)
        plain, compiled = evaluate(model, split, 4, None), evaluate(model, split, 4, None, forward=forward)
        assert compiled["loss"] == pytest.approx(plain["loss"], rel=1e-3), i


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_the_compiled_rotary_encoder_is_one_graph_at_any_depth(packed):
    """The GPU's path (the fused rotation, flex attention) compiled: the one graph break a pass (the shared
    padding mask, or the packed layout, built outside the graph) and the same graphs whatever the depth.
    A break inside the loop over the layers (the rotation tables' cache once read the frequencies' storage
    address there) makes dynamo run the loop eagerly and compile each layer apart."""
    from repro.models.model import SequenceClassifier

    def graphs(depth: int) -> tuple[int, list[str]]:
        torch.manual_seed(0)
        cfg = dict(backbone="rotary_transformer", d_model=16, n_heads=2, depth=depth, d_ff=32, pooling="mean",
                   rotary_layout="full_width", rotary_impl="fused", attention_backend="flex")  # fmt: skip
        model = SequenceClassifier(cfg, vocab_size=12, max_len=200, num_classes=3, pad_id=0, two_tower=False)
        lengths = torch.tensor([200, 37, 120, 5])
        ids = torch.randint(1, 12, (4, 200), generator=torch.Generator().manual_seed(1))
        ids = ids.masked_fill(~(torch.arange(200)[None, :] < lengths[:, None]), 0)
        if packed:
            model.use_packing(0.9)
            model.expect_lengths(lengths)
        torch._dynamo.reset()
        counters.clear()
        torch.compile(model, backend="aot_eager")(ids).sum().backward()
        assert model.encoder.pack_counts == {"packed": int(packed), "padded": 0}
        return counters["stats"]["unique_graphs"], [str(reason).splitlines()[0] for reason in counters["unimplemented"]]

    (shallow, shallow_fallbacks), (deep, deep_fallbacks) = graphs(1), graphs(3)
    assert shallow_fallbacks == [] and deep_fallbacks == []
    assert deep == shallow

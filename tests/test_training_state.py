"""Checkpoints written by earlier versions of the training loop resume to the uninterrupted result."""

from __future__ import annotations

import pytest
import torch
from test_batching import CONV_CFG, bucketing_settings, padded_task

from repro.models.model import SequenceClassifier
from repro.training import RunInterrupted, RunState, train
from repro.training.checkpoints import load_checkpoint, save_checkpoint

CPU = torch.device("cpu")


def model() -> SequenceClassifier:
    torch.manual_seed(0)
    return SequenceClassifier(CONV_CFG, vocab_size=8, max_len=48, num_classes=2, pad_id=0, two_tower=False)


def rewrite_state(last, change) -> None:
    """Rewrite ``last.pt`` with ``change(state)`` applied, as an older version would have written it."""
    ckpt = load_checkpoint(last, CPU)
    change(ckpt["state"])
    save_checkpoint(last, ckpt)


@pytest.mark.parametrize("mode", ["off", "on"])
def test_a_checkpoint_from_before_batching_was_stored_resumes_twice(tmp_path, mode):
    """Before ``batching`` was stored, an unbucketed run kept no ``width_sum`` and a bucketed one kept
    ``bucketed_steps``: both resume, and the checkpoint written after resuming says how the run draws
    its batches, so resuming it again continues the same run."""
    task, settings, cut = padded_task(8, 96), bucketing_settings(mode), tmp_path / "cut"
    whole = train(model(), task, settings, seed=1, run_dir=tmp_path / "whole", device=CPU, progress=False)
    with pytest.raises(RunInterrupted):
        train(model(), task, settings, seed=1, run_dir=cut, device=CPU, progress=False, sigterm_at_step=5)

    def older(state):
        del state["batching"]
        if mode == "off":
            del state["width_sum"]
        else:
            state["bucketed_steps"] = state["step"]

    rewrite_state(cut / "checkpoints" / "last.pt", older)
    with pytest.raises(RunInterrupted):
        train(model(), task, settings, seed=1, run_dir=cut, device=CPU, progress=False, sigterm_at_step=9)
    state = load_checkpoint(cut / "checkpoints" / "last.pt", CPU)["state"]
    assert state["batching"] == {"bucketing": mode == "on", "pool_batches": 4 if mode == "on" else None}
    assert "bucketed_steps" not in state
    resumed = train(model(), task, settings, seed=1, run_dir=cut, device=CPU, progress=False)
    assert resumed["predictions"] == whole["predictions"]
    assert resumed["metrics"]["length_bucketing"] == whole["metrics"]["length_bucketing"]
    for key in ("best_val_acc", "best_val_step", "test_acc", "test_loss", "test_acc_last", "steps"):
        assert resumed["metrics"][key] == whole["metrics"][key], key


def test_the_test_split_is_also_scored_with_the_last_weights(tmp_path):
    """test_acc: the best-validation weights; test_acc_last: the final ones (last.pt), as the LRA release
    tested, recomputed here from the checkpoint."""
    task, settings = padded_task(3, 96), bucketing_settings("off")
    result = train(model(), task, settings, seed=2, run_dir=tmp_path, device=CPU, progress=False)
    final = model()
    final.load_state_dict(load_checkpoint(tmp_path / "checkpoints" / "last.pt", CPU)["model"])
    ids, labels = torch.as_tensor(task.test.inputs).long(), torch.as_tensor(task.test.labels)
    with torch.no_grad():
        accuracy = (final.eval()(ids).argmax(-1) == labels).double().mean().item()
    assert result["metrics"]["test_acc_last"] == pytest.approx(accuracy, abs=1e-12)
    best = model()
    best.load_state_dict(load_checkpoint(tmp_path / "checkpoints" / "best.pt", CPU)["model"])
    with torch.no_grad():
        best_accuracy = (best.eval()(ids).argmax(-1) == labels).double().mean().item()
    assert result["metrics"]["test_acc"] == pytest.approx(best_accuracy, abs=1e-12)


def test_a_checkpoint_state_with_an_unknown_key_is_refused_naming_the_file(tmp_path):
    with pytest.raises(RuntimeError) as err:
        RunState.from_checkpoint(
            {"step": 3, "momentum": 0.9}, {"bucketing": False, "pool_batches": None}, tmp_path / "last.pt"
        )
    assert str(err.value) == (
        f"{tmp_path / 'last.pt'}: the checkpoint's state holds unknown key(s) momentum "
        "(written by another version of repro); delete it, or pass resume=false, to start over"
    )
    state = RunState.from_checkpoint(
        {"step": 3, "bucketed_steps": 3}, {"bucketing": True, "pool_batches": 4}, tmp_path / "last.pt"
    )
    assert (state.step, state.width_sum, state.batching) == (3, 0, {"bucketing": True, "pool_batches": 4})


def test_data_wait_probe_times_the_fetch_of_every_nth_step_against_the_whole_step():
    from repro.training.clock import DataWaitProbe

    ticks = iter([0.0, 0.3, 1.0, 10.0, 10.1, 11.0])  # two sampled steps: fetch 0.3 of 1.0, then 0.1 of 1.0
    state = RunState()
    timed = []  # the step each clock reading is taken at
    probe = DataWaitProbe(torch.device("cpu"), every=3, clock=lambda: timed.append(state.step) or next(ticks))
    assert DataWaitProbe.share(state) is None
    calls = []
    for step in range(6):
        state.step = step
        batch, result = probe.run(
            state, lambda s=step: calls.append(("fetch", s)) or s, lambda b: calls.append(("compute", b)) or b * 10
        )
        assert (batch, result) == (step, step * 10)
    assert calls == [(kind, s) for s in range(6) for kind in ("fetch", "compute")]  # every step once, in order
    assert state.data_wait_steps == 2 and timed == [2, 2, 2, 5, 5, 5]  # counted from the process's third step
    assert state.data_wait_s == pytest.approx(0.4) and state.data_wait_step_s == pytest.approx(2.0)
    assert DataWaitProbe.share(state) == pytest.approx(0.2)


class _OnAnotherDevice:
    """A generator state as ``torch.load(map_location=<a CUDA device>)`` returns it: only ``.cpu()`` gives the
    byte tensor back (``torch.set_rng_state`` refuses anything else)."""

    def __init__(self, state: torch.Tensor):
        self._state = state

    def cpu(self) -> torch.Tensor:
        return self._state


def test_generator_states_loaded_onto_another_device_restore_the_same_draws():
    from repro.training.state import rng_state, set_rng_state

    torch.manual_seed(3)
    saved = rng_state()
    expected = torch.rand(4)
    saved["torch"] = _OnAnotherDevice(saved["torch"])
    torch.manual_seed(99)
    set_rng_state(saved)
    assert torch.equal(torch.rand(4), expected)

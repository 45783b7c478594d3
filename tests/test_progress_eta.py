"""The training bar's time left follows the cap that stops the run: the steps, or a wall-clock budget."""

from __future__ import annotations

import io

import pytest

from repro.training.clock import RunClock
from repro.training.progress import RunBar, eta_seconds
from repro.training.state import RunState


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_eta_is_the_steps_left_at_the_pace_or_the_budget_left_whichever_ends_first():
    assert eta_seconds(10, 110, steps_per_s=2.0, budget_left_s=None) == 50.0
    assert eta_seconds(10, 110, steps_per_s=2.0, budget_left_s=20.0) == 20.0  # the budget stops it first
    assert eta_seconds(10, 110, steps_per_s=2.0, budget_left_s=80.0) == 50.0  # the steps end first
    assert eta_seconds(0, 110, steps_per_s=None, budget_left_s=None) is None  # no pace yet, no budget
    assert eta_seconds(0, 110, steps_per_s=None, budget_left_s=45.0) == 45.0
    assert eta_seconds(3, 110, steps_per_s=2.0, budget_left_s=-4.0) == 0.0  # spent: stops after this step
    assert eta_seconds(110, 110, steps_per_s=None, budget_left_s=None) == 0.0  # done


def test_the_clock_gives_the_budget_left_across_resumes():
    fake = FakeClock()
    clock = RunClock(budget_minutes=1, eval_every_seconds=None, checkpoint_every_seconds=None, now=fake)
    state = RunState(elapsed_s=12.0)  # a resumed run: 12 s spent before this process
    fake.now += 8.0
    assert clock.budget_left(state) == pytest.approx(40.0)
    clock.end_step(state)
    fake.now += 50.0
    assert clock.budget_left(state) == pytest.approx(-10.0) and clock.over_budget(clock.elapsed(state))
    assert RunClock(None, None, None, now=fake).budget_left(state) is None


@pytest.mark.parametrize(
    ("budget_left", "shown"),
    [
        (None, "<5555:33:20,"),  # 2,000,000 steps left at 10 s a step: 5,556 hours
        (45.0, "<00:45,"),  # a 1-minute budget with 45 s left: the run stops then
    ],
)
def test_the_bar_shows_the_time_to_the_cap_that_stops_the_run(monkeypatch, budget_left, shown):
    fake = FakeClock()
    monkeypatch.setattr("tqdm.std.time", fake)  # the clock tqdm's bars read
    bar = RunBar(total=2_000_010, file=io.StringIO(), mininterval=0, smoothing=1.0, budget_left=lambda: budget_left)
    for _ in range(10):
        fake.now += 10.0
        bar.update(1)
    assert shown in str(bar), str(bar)
    bar.close()

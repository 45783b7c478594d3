"""The training progress bar, whose time left is the time to whichever cap stops the run first.

A run stops at its last step (the protocol's steps, ``train.max_steps`` or an example budget's
step cap, ``train.stop_at_step``) or when its wall-clock budget (``train.budget_minutes``) is
spent, whichever comes first (loop.py). tqdm's own estimate knows only the steps; under a
budget of minutes on a slow machine it reads thousands of hours for a run that stops in one
minute. :func:`eta_seconds` takes both caps.
"""

from __future__ import annotations

from collections.abc import Callable

from tqdm import tqdm

# tqdm's default layout, with ``{remaining}`` spelled out so that RunBar can supply it.
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


def eta_seconds(step: int, last_step: int, steps_per_s: float | None, budget_left_s: float | None) -> float | None:
    """Seconds until training stops: the steps left at ``steps_per_s``, or the budget's seconds left
    (``budget_left_s``, None: no wall-clock budget) when the budget ends first. None: not known yet
    (no pace measured and no budget)."""
    if step >= last_step:
        return 0.0
    by_steps = (last_step - step) / steps_per_s if steps_per_s else None
    if budget_left_s is None:
        return by_steps
    budget_left = max(budget_left_s, 0.0)
    return budget_left if by_steps is None else min(by_steps, budget_left)


class RunBar(tqdm):
    """tqdm over the run's steps up to its last; the time left is :func:`eta_seconds` of the bar's pace
    and ``budget_left`` (a function giving the budget's seconds left, or None without a budget)."""

    def __init__(self, *args, budget_left: Callable[[], float | None] = lambda: None, **kwargs):
        self.budget_left = budget_left  # before tqdm's __init__, which may draw the bar
        super().__init__(*args, bar_format=BAR_FORMAT, **kwargs)

    @property
    def format_dict(self):
        values = super().format_dict
        eta = eta_seconds(self.n, self.total or 0, values.get("rate"), self.budget_left())
        values["remaining"] = "?" if eta is None else self.format_interval(eta)
        return values

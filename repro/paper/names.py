"""How the tables name and order the tasks: the LRA paper's columns (Tay et al. 2021, Table 1), the follow-up
study's, and every other registered task after them; a task's title is its module's (``repro.tasks``)."""

from __future__ import annotations

from ..tasks import task_titles

LRA_TABLE1_TASKS = [
    ("listops", "listops"),
    ("text", "text"),
    ("retrieval", "retrieval"),
    ("image", "image"),
    ("pathfinder", "pathfinder"),
    ("path_x", "pathx"),
]  # (published column, our task)
LRA_AVG_TASKS = ("listops", "text", "retrieval", "image", "pathfinder")  # LRA's average leaves Path-X out
FOLLOWUP_TASKS = ("image", "pathfinder", "text", "retrieval", "listops")  # the follow-up's column order


def task_names() -> tuple[str, ...]:
    """Every registered task: LRA Table 1's, in its column order, then the others by name."""
    lra = [task for _, task in LRA_TABLE1_TASKS]
    return (*lra, *sorted(set(task_titles()) - set(lra)))


def task_title(task: str) -> str:
    """A task's name in the tables (its module's title; the task's own name when none registers it)."""
    return task_titles().get(task, task)

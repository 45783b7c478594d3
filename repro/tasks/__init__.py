"""LRA tasks: each module reads (or generates) one task's data and registers itself in ``TASKS``.

``TASKS.get(builder).build(cfg, data_dir, cache_dir, workers) -> TaskData``, where ``builder`` is a task
config's ``builder`` key (``experiments/conf/task/<task>.yaml``). A task module ends with::

    TASKS.register("listops")(TaskEntry(build, shape, titles={"listops": "ListOps"}, official_files_missing=...))

``load_all`` imports every module of this package, so a new task is its module here and its YAML; the
names the tables and the claims file use (``task_titles``) come from the entries, not from a list.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..registry import Registry
from .base import DataError, DataMissing, Split, TaskData, TaskEntry

TASKS: Registry[TaskEntry] = Registry("task")


def load_all() -> Registry[TaskEntry]:
    """Import every module of this package (each task module registers its entry) and return the table."""
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
    return TASKS


def get_task_builder(name: str):
    """The ``build`` function of the task module registered as ``name`` (a task config's ``builder``)."""
    return load_all().get(name).build


def task_names() -> list[str]:
    """The registered builders' names, sorted."""
    return load_all().names()


def task_titles() -> dict[str, str]:
    """{task config name: its name in tables} over every registered builder (``pathfinder`` serves ``pathx``
    too), sorted by task name."""
    table = load_all()
    titles = {task: title for name in table.names() for task, title in table.get(name).titles.items()}
    return dict(sorted(titles.items()))


def official_files_missing(builder: str, cfg, data_dir) -> str | None:
    """For a task that generates its data when the official files are absent (``task.source=auto``):
    which of them ``data_dir`` lacks, or None (all there, a task that never generates, or no such builder)."""
    table = load_all()
    if builder not in table or table.get(builder).official_files_missing is None:
        return None
    return table.get(builder).official_files_missing(cfg, data_dir)


__all__ = [
    "TASKS",
    "DataError",
    "DataMissing",
    "Split",
    "TaskData",
    "TaskEntry",
    "get_task_builder",
    "load_all",
    "official_files_missing",
    "task_names",
    "task_titles",
]

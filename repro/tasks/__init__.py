"""LRA tasks: each module reads (or generates) one task's data and registers a builder.

``TASKS.get(name)(cfg, data_dir, cache_dir, workers) -> TaskData``.
"""

from __future__ import annotations

import importlib

from ..registry import Registry
from .base import DataError, DataMissing, Split, TaskData

TASKS: Registry = Registry("task")

# builder name (a task config's ``builder``) -> module holding its ``build`` function
_MODULES = {
    "listops": "listops",
    "text": "text",
    "retrieval": "retrieval",
    "image": "image",
    "pathfinder": "pathfinder",  # also Path-X (task config pathx.yaml: resolution 128)
}


def _register_all() -> None:
    for name, module in _MODULES.items():
        if name not in TASKS:
            TASKS.register(name)(importlib.import_module(f"{__name__}.{module}").build)


def get_task_builder(name: str):
    _register_all()
    return TASKS.get(name)


def task_names() -> list[str]:
    return sorted(_MODULES)


def official_files_missing(builder: str, cfg, data_dir) -> str | None:
    """For a task that generates its data when the official files are absent (``task.source=auto``):
    which of them ``data_dir`` lacks, or None (all there, or a task that never generates)."""
    if builder not in _MODULES:
        return None
    module = importlib.import_module(f"{__name__}.{_MODULES[builder]}")
    missing = getattr(module, "official_files_missing", None)
    return missing(cfg, data_dir) if missing else None


__all__ = [
    "TASKS",
    "DataError",
    "DataMissing",
    "Split",
    "TaskData",
    "get_task_builder",
    "official_files_missing",
    "task_names",
]

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


__all__ = ["TASKS", "DataError", "DataMissing", "Split", "TaskData", "get_task_builder", "task_names"]

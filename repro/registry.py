"""Name -> builder tables (tasks, backbones, mixers, techniques).

Registering only fills a table: no import side effects beyond it (the style of
state-spaces/s4 ``src/utils/registry.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A table of named builders of one kind, with errors that list the names."""

    def __init__(self, kind: str):
        self.kind = kind
        self._table: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(builder: T) -> T:
            if name in self._table:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._table[name] = builder
            return builder

        return add

    def get(self, name: str) -> T:
        try:
            return self._table[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {name!r}; available: {', '.join(self.names())}") from None

    def names(self) -> list[str]:
        return sorted(self._table)

    def __contains__(self, name: str) -> bool:
        return name in self._table

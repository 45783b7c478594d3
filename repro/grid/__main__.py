"""``python -m repro.grid ...``: the ``lra-grid`` command without installing the package."""

from .cli import entry

entry()

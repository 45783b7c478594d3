"""Attention mechanisms of the LRA study (Tay et al. 2021, section 3.1), one module each.

Every mechanism is a token mixer with one interface::

    mixer = ATTENTION.get(name)(d_model=..., n_heads=..., max_len=..., **params)
    y = mixer(x, mask)   # x [B, L, D]; mask [B, L] bool, True = real token; y [B, L, D]

Modules in this package register themselves in ``ATTENTION``; ``load_all``
imports them, so the table is filled only when asked for. The building blocks other
packages reuse (the rotary Transformer, the LRA encoder, the benchmark's peers and fast-path checks) are
exported here; ``_common`` and ``_lowrank_common`` stay this package's own modules.
"""

from __future__ import annotations

import importlib
import pkgutil

from ...registry import Registry
from ._common import AttentionMixer, FlexPatternMixin, QKVOut, full_mask, sdpa_key_mask
from ._flex import dense_dropout_reference, draw_dropout_keys, dropout_threshold, keep_mask, keep_probability
from ._lowrank_common import HeadedMixer

__all__ = [
    "ATTENTION",
    "AttentionMixer",
    "FlexPatternMixin",
    "HeadedMixer",
    "QKVOut",
    "dense_dropout_reference",
    "draw_dropout_keys",
    "dropout_threshold",
    "full_mask",
    "keep_mask",
    "keep_probability",
    "load_all",
    "sdpa_key_mask",
]

ATTENTION: Registry = Registry("attention")


def load_all() -> Registry:
    """Import every mechanism module of this package and return the filled table."""
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
    return ATTENTION

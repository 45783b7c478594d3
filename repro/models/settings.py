"""The shared encoder's and head's model settings, typed, with their defaults in one place.

A model config (``model:`` of an arm, resolved) holds two kinds of keys: those of the shared encoder
and head (``repro/models/model.py``, ``heads.py``), which every backbone has, and those of its
backbone, which its builder reads (``repro/original/encoder.py``, ``repro/followup/*.py``).
``EncoderSettings`` is the first kind: its fields are the keys, their defaults the value a config that
omits the key gets, and ``repro.run.runner``'s implicit settings (what a record written before a key
existed ran with) are read from them. The second kind stays with its builder, the one reader of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class EncoderSettings:
    """The encoder's and head's keys of a model config (``model.<field>``)."""

    d_model: int
    """Width of the token states (LRA ``emb_dim``)."""
    backbone: str = ""
    """The name its mixers' builder registered under (``repro.models.mixer.BACKBONES``); empty when the
    caller passes the builder itself (the benchmark's peers)."""
    d_ff: int | None = None
    """Feed-forward width; ``head_hidden: lra`` sizes the head from it."""
    norm: str = "layer"
    """``layer`` or ``batch`` (``make_norm``), in every residual sublayer and the final norm."""
    prenorm: bool = True
    """Pre-norm residual sublayers (``x + f(norm(x))``); false: post-norm (``norm(x + f(x))``)."""
    final_norm: bool = True
    """A norm after the pre-norm stack; false leaves its output unnormalised (the follow-up's code)."""
    cls_token: bool = False
    """Prepend a learned, zero-initialised vector at position 0, as LRA's CLS pooling does."""
    positional: str = "none"
    """Summed positions: ``none``, ``learned`` or ``sinusoidal``."""
    positional_base: float = 10000.0
    """Base frequency of the sinusoidal table."""
    token_encoding: str = "embedding"
    """``embedding`` (a vector per token id) or ``intensity`` (pixel tasks: the id read as an intensity)."""
    dropout: float = 0.0
    """Dropout after the embedding and on each sublayer's output."""
    release_masking: bool = False
    """Give the mixers the LRA release's ``(inputs > 0)`` mask (``release_mask_use``)."""
    pooling: str = "mean"
    """How the head pools the token states (``heads.py``)."""
    head_hidden: str | list[int] | None = None
    """Hidden widths of the head's MLP; ``lra``: LRA's (``d_ff``, and ``d_ff // 2`` for two towers)."""
    single_logit: bool = False
    """One logit for a two-class task (binary cross-entropy) instead of two."""
    two_tower_combine: str = "concat_prod_diff"
    """How two towers' vectors are combined (``heads.COMBINES``)."""

    @classmethod
    def from_model_config(cls, cfg: Mapping[str, Any]) -> EncoderSettings:
        """The fields ``cfg`` sets, the defaults for the rest; the backbone's keys are left to its builder."""
        if "d_model" not in cfg:
            raise ValueError("model.d_model is not set: every model config names its width")
        return cls(**{f.name: cfg[f.name] for f in dataclasses.fields(cls) if f.name in cfg})


def encoder_defaults() -> dict[str, Any]:
    """``{key: default}`` of every ``EncoderSettings`` field that has one."""
    return {f.name: f.default for f in dataclasses.fields(EncoderSettings) if f.default is not dataclasses.MISSING}


def encoder_setting(cfg: Mapping[str, Any], key: str) -> Any:
    """``cfg[key]``, or its ``EncoderSettings`` default: how a backbone's builder reads a shared key
    (``dropout``, ``positional``) without a default of its own."""
    if key in cfg:
        return cfg[key]
    return encoder_defaults()[key]

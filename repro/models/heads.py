"""Pooling and classifier heads shared by every backbone.

One head for all models, as LRA's ``common_layers`` does: pool the encoder's
token states to one vector per sequence, then classify. Retrieval uses two
towers: one shared encoder embeds each document separately, and the head
combines the two vectors (Tay et al. 2021, section 2.2.3).
"""

from __future__ import annotations

import torch
from torch import nn

POOLINGS = ("mean", "cls", "first", "max", "mean_all")
COMBINES = ("concat", "concat_prod_diff")


def pool(states: torch.Tensor, mask: torch.Tensor | None, how: str) -> torch.Tensor:
    """[B, L, D] token states -> [B, D]; padding (mask False) is excluded, but by ``mean_all``: the mean
    over every position, padding included, as the LRA release's ``jnp.mean(encoded, axis=1)`` pools
    (``common_layers.classifier_head`` and the Sinkhorn encoder's own head)."""
    if how in ("cls", "first"):
        return states[:, 0]
    if how == "mean_all":
        return states.mean(1)
    if mask is None:
        return states.mean(1) if how == "mean" else states.amax(1)
    keep = mask.unsqueeze(-1)
    if how == "mean":
        total = states.masked_fill(~keep, 0.0).sum(1)
        return total / keep.sum(1).clamp_min(1).to(states.dtype)
    if how == "max":
        return states.masked_fill(~keep, torch.finfo(states.dtype).min).amax(1)
    raise ValueError(f"pooling {how!r}: choose one of {', '.join(POOLINGS)}")


def classifier(d_in: int, num_classes: int, hidden: int | list[int] | None) -> nn.Module:
    """Linear, or LRA's MLP (dense -> ReLU -> dense) when ``hidden`` is set.

    A list of widths stacks dense -> ReLU layers in order, as LRA's two-tower head
    (``classifier_head_dual``: ``mlp_dim`` then ``mlp_dim // 2``).
    """
    if not hidden:
        return nn.Linear(d_in, num_classes)
    widths = [int(hidden)] if isinstance(hidden, int) else [int(w) for w in hidden]
    layers: list[nn.Module] = []
    for width in widths:
        layers += [nn.Linear(d_in, width), nn.ReLU()]
        d_in = width
    return nn.Sequential(*layers, nn.Linear(d_in, num_classes))


def n_outputs(num_classes: int, single_logit: bool) -> int:
    """The classifier's outputs: one per class, or with ``single_logit`` on a task of two classes one logit
    ``z``, returned as the pair ``[0, z]`` (:func:`as_two_classes`), whose cross-entropy is the binary
    cross-entropy of ``z`` (the follow-up's code: BCEWithLogitsLoss on one logit for two classes)."""
    return 1 if single_logit and num_classes == 2 else num_classes


def as_two_classes(logits: torch.Tensor, single_logit: bool) -> torch.Tensor:
    return torch.cat([torch.zeros_like(logits), logits], dim=-1) if single_logit else logits


class OneTowerHead(nn.Module):
    def __init__(
        self,
        d_model: int,
        num_classes: int,
        pooling: str = "mean",
        hidden: int | None = None,
        single_logit: bool = False,
    ):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r}: choose one of {', '.join(POOLINGS)}")
        self.pooling = pooling
        outputs = n_outputs(num_classes, single_logit)
        self.single_logit = outputs == 1
        self.classify = classifier(d_model, outputs, hidden)

    def forward(self, states: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return as_two_classes(self.classify(pool(states, mask, self.pooling)), self.single_logit)


class TwoTowerHead(nn.Module):
    """Combine two document vectors and classify.

    ``combine='concat'``: ``[e1, e2]`` as LRA's released code; ``'concat_prod_diff'``:
    ``[e1, e2, e1*e2, e1-e2]`` as S4 and Nystromformer (the default, see task config).
    """

    def __init__(
        self,
        d_model: int,
        num_classes: int,
        pooling: str = "mean",
        hidden: int | None = None,
        combine: str = "concat_prod_diff",
        single_logit: bool = False,
    ):
        super().__init__()
        if combine not in COMBINES:
            raise ValueError(f"combine {combine!r}: choose one of {', '.join(COMBINES)}")
        self.pooling = pooling
        self.combine = combine
        outputs = n_outputs(num_classes, single_logit)
        self.single_logit = outputs == 1
        width = 2 * d_model if combine == "concat" else 4 * d_model
        self.classify = classifier(width, outputs, hidden)

    def embed(self, states: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return pool(states, mask, self.pooling)

    def forward(self, e1: torch.Tensor, e2: torch.Tensor) -> torch.Tensor:
        parts = [e1, e2] if self.combine == "concat" else [e1, e2, e1 * e2, e1 - e2]
        return as_two_classes(self.classify(torch.cat(parts, dim=-1)), self.single_logit)

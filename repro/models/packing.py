"""Padded batches packed end to end (``train.pack_sequences``): the same function on fewer positions.

A padded batch [B, L] of ListOps trees or IMDb reviews is mostly padding (ListOps' generated trees
average about half of their 2,000 positions, IMDb reviews about a third of 4,096). Every position-wise
layer (projections, feed-forward, norms) computes those positions and throws the results away. Packed,
the examples' real tokens are laid end to end in one stream of ``capacity`` slots, each example starting
on a tile boundary (``tile`` slots, the attention kernel's tile side) and followed by at least the empty
slots its mixers ask for (a convolution's half width), and the encoder runs on that stream
[1, capacity, D]: the position-wise layers see about the real tokens alone, and attention sees a
document mask (a token attends to the tokens of its own example only) whose tiles follow the examples'.

It computes each example's function exactly: no token of one example reaches another's (attention is
masked by example, a convolution's reach ends in the empty slots between examples, every other layer acts
on each position alone), positions restart at 0 with each
example (rotary angles and summed positional tables are the unpacked ones), and the states are put
back in the padded layout before pooling and the heads. Only the states at padded positions differ:
zero here, where the unpacked encoder leaves the position-wise layers' output on the padding token.
Mean and max pooling and the losses never read them; the other poolings can (``mean_all`` always,
``first`` on an example without tokens) and are refused.

A batch whose tile-rounded lengths exceed the capacity is run unpacked (the same function): the
capacity is fixed per batch shape (``capacity_for``), so a compiled model meets two shapes, the
packed stream and the padded batch. Deciding from the mask on the device costs one host
synchronisation a forward pass, which empties the GPU's queue; the training loader therefore gives
the batch's lengths from the host (``TrainBatches``, ``SequenceClassifier.expect_lengths``), the
decision and the examples' starts are made there, and the device only checks them against the mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

PACK_TILE = 128  # examples start on multiples of this (flex_attention's default tile side)


@dataclass
class PackedBatch:
    """Where each token of a padded batch [B, L] sits in the packed stream of ``capacity`` slots.

    ``source`` [capacity]: for each slot, the flat index ``b * L + l`` of the token it holds, ``B * L`` for a
    slot holding none; ``target`` [B * L]: each token's slot, ``capacity`` for a padded position; ``doc``
    [capacity]: the example a slot's token belongs to, -1 for an empty slot; ``positions`` [capacity]: the
    token's position in its example (0 in an empty slot); ``real`` [1, capacity]: the slot holds a token.
    ``lengths``, ``starts`` [B]: each example's real tokens and its first slot. ``shared``: what the mixers
    build once from it (``TokenMixer.shared_packing``), by name."""

    source: Tensor
    target: Tensor
    doc: Tensor
    positions: Tensor
    real: Tensor
    lengths: Tensor
    starts: Tensor
    batch: int
    length: int
    tile: int
    shared: dict = field(default_factory=dict)

    @property
    def capacity(self) -> int:
        return int(self.source.shape[0])


def capacity_for(batch: int, length: int, fraction: float, tile: int = PACK_TILE, gap: int = 0) -> int:
    """The stream's slots for batches of ``batch`` x ``length``: ``fraction`` of the padded positions,
    rounded up to whole tiles, and at least one example's span (so every single example fits)."""
    tiles = -(-(length + gap) // tile)
    return max(-(-int(batch * length * fraction) // tile), tiles) * tile


def tile_spans(lengths: Tensor, tile: int = PACK_TILE, gap: int = 0) -> Tensor:
    """Each example's span in the stream: its ``lengths`` real tokens and ``gap`` empty slots after them,
    rounded up to whole tiles (0 for an example without tokens)."""
    return torch.where(lengths > 0, -(-(lengths + gap) // tile) * tile, 0)


def plan_packing(
    mask: Tensor, capacity: int, tile: int = PACK_TILE, gap: int = 0, lengths: Tensor | None = None
) -> PackedBatch | None:
    """The packed layout of the padded batch whose real tokens ``mask`` [B, L] marks (every real token
    before every padded one), in ``capacity`` slots (a multiple of ``tile``), with at least ``gap`` empty
    slots after each example (``TokenMixer.packing_gap``); None when the examples' spans need more slots
    than that. ``lengths``: each example's real tokens, on the host (the loader's): the decision and the
    starts are made there, without waiting for the device, and the device checks them against ``mask``;
    without it they are read from ``mask`` (one host synchronisation)."""
    if capacity % tile:
        raise ValueError(f"packing capacity {capacity} is not a multiple of the tile side {tile}")
    B, L = mask.shape
    device = mask.device
    given = lengths is not None
    if lengths is None:
        lengths = mask.sum(dim=-1)
        problem = "plan_packing: padding must come after every real token of an example"
    else:
        if lengths.shape != (B,) or lengths.device.type != "cpu":
            raise ValueError(
                f"plan_packing: lengths of shape {tuple(lengths.shape)} on {lengths.device.type} for a batch of {B}: "
                "give one length per example, on the host"
            )
        lengths = lengths.long()
        if len(lengths) and not 0 <= int(lengths.min()) <= int(lengths.max()) <= L:  # host tensor: no sync
            raise ValueError(
                f"plan_packing: lengths from {int(lengths.min())} to {int(lengths.max())} for a batch {L} wide: "
                f"each must be in [0, {L}]"
            )
        problem = (
            "plan_packing: the lengths given are not the batch's: its padding must follow exactly that many tokens"
        )
    spans = tile_spans(lengths, tile, gap)
    ends = torch.cumsum(spans, dim=0)
    if int(ends[-1]) > capacity:  # on the host when the lengths were given; else it waits for the device
        return None
    if given:
        table = torch.stack([lengths, spans, ends])  # one copy to the device, queued behind its work
        table = table.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else table.to(device)
        lengths, spans, ends = table.unbind(0)
    columns = torch.arange(L, device=device)[None, :]
    suffix = columns < lengths[:, None]
    if device.type == "cuda":
        torch._assert_async((suffix == mask).all())
    elif not torch.equal(suffix, mask):
        raise ValueError(problem)
    starts = ends - spans
    slots = torch.arange(capacity, device=device)
    doc = torch.searchsorted(ends, slots, right=True)  # the example whose span holds the slot; B past the last
    inside = doc < B
    doc_safe = doc.clamp(max=B - 1)
    positions = slots - starts[doc_safe]
    real = inside & (positions < lengths[doc_safe])
    source = torch.where(real, doc_safe * L + positions, B * L)
    target = torch.where(suffix, starts[:, None] + columns, capacity).flatten()
    return PackedBatch(
        source=source,
        target=target,
        doc=torch.where(real, doc_safe, -1),
        positions=torch.where(real, positions, 0),
        real=real[None, :],
        lengths=lengths,
        starts=starts,
        batch=B,
        length=L,
        tile=tile,
    )


def pack(x: Tensor, packed: PackedBatch) -> Tensor:
    """Token states [B, L, D] -> the stream [1, capacity, D] (empty slots 0)."""
    flat = torch.cat([x.flatten(0, 1), x.new_zeros(1, x.shape[-1])])
    return flat.index_select(0, packed.source)[None]


def unpack(y: Tensor, packed: PackedBatch) -> Tensor:
    """The stream [1, capacity, D] -> token states [B, L, D] (padded positions 0)."""
    flat = torch.cat([y[0], y.new_zeros(1, y.shape[-1])])
    return flat.index_select(0, packed.target).unflatten(0, (packed.batch, packed.length))

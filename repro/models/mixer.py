"""The token-mixer interface: the base class every mixer of a backbone derives from.

A token mixer maps states and their padding mask to new states::

    y = mixer(x, mask)   # x [B, L, D]; mask [B, L] bool (True = real token) or None; y [B, L, D]

Besides its computation a mixer declares what the rest of the package may do with it, as the typed
fields below; their defaults here are the answer for a mixer that declares nothing. Readers use the
fields directly: the shared encoder (``repro/models/model.py``), the LRA encoder's builder
(``repro/original/encoder.py``), length bucketing (``repro/training/batching.py``) and FLOP counting
(``repro/bench/flops.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import ClassVar, Literal

from torch import Tensor, nn

from ..registry import Registry

ReleaseZeroMask = Literal["uniform_rows", "padding", "ignored"]


class TokenMixer(nn.Module):
    """Base of every token mixer; subclasses implement ``forward(x, mask)`` and override the fields they have."""

    RELEASE_ZERO_MASK: ReleaseZeroMask | None = None
    """What the LRA release's counterpart did with its ``(inputs > 0)`` mask, read under
    ``model.release_masking`` (``repro.models.model.release_mask_use``): ``"uniform_rows"`` (it used it;
    the mixer is switched to the release's semantics), ``"padding"`` (the release's masking is this
    package's padding convention: the mask is passed as padding), ``"ignored"`` (the release ignored it:
    no mask is passed); None: not implemented, and the setting is refused. A mixer may set it per instance
    when only some of its settings implement it."""

    RELEASE_WIDTH_IS_INPUT: ClassVar[bool] = False
    """Under ``attention_params.release``: the release built this mechanism at the model width ``d_model``,
    whatever ``qkv_dim`` says (Reformer; read by ``repro.original.encoder.build_lra_layers``)."""

    PLAIN_PATH: ClassVar[Mapping[str, object]] = {}
    """Attribute -> value that select the mixer's plain reference path instead of a fused or compiled one
    (flex_attention, fused SDPA, a compiled rotation): what FLOP counting runs (``repro/bench/flops.py``)."""

    length_flexible: ClassVar[bool] = False
    """Trimming trailing padding leaves every real position's output unchanged: no padded position reaches a
    real one and no weight is tied to the padded length (length bucketing, ``repro/training/batching.py``)."""

    packable: ClassVar[bool] = False
    """It runs on a packed stream (``train.pack_sequences``, ``repro/models/packing.py``) through
    ``forward_packed``, computing for each example what it computes on the padded batch."""

    def packing_gap(self) -> int:
        """Empty slots the mixer needs between two packed examples so that neither reaches the other (a
        convolution's half width); 0 for a mixer that keeps each example to itself by a mask or by acting on
        each position alone."""
        return 0

    def forward_packed(self, x: Tensor, packed) -> Tensor:
        """``x`` [1, C, D], the stream of a ``repro.models.packing.PackedBatch`` -> [1, C, D]; only a mixer
        that declares ``packable`` is called so. A position-wise mixer's is its forward without a mask."""
        raise NotImplementedError(f"{type(self).__name__} does not run on packed sequences")

    def shared_packing(self, device) -> tuple[str, Callable[[object], object]] | None:
        """``(name, build)`` where the mixer takes a structure built from the ``PackedBatch`` (a block mask)
        that every mixer naming ``name`` shares: the encoder stores ``build(packed)`` in ``packed.shared``
        once a forward pass, outside any compiled graph. None by default."""
        return None

    def shared_padding(self, mask: Tensor) -> tuple[str, Callable[[Tensor], object]] | None:
        """``(name, build)`` where the mixer takes a structure built from the padding mask ``mask`` [B, L] that
        every mixer naming the same ``name`` can share: the encoder builds ``build(mask)`` once a forward pass
        and calls ``mixer(x, mask, shared)`` (``repro.models.model.Encoder``). None by default: the mixer is
        called as ``mixer(x, mask)``."""
        return None

    def record_info(self) -> Mapping[str, Collection]:
        """Facts for the run record, name -> values (e.g. the convolution implementations that ran); merged
        over the model by ``repro.models.model.collect_record_info``. None by default."""
        return {}


BackboneBuilder = Callable[..., Sequence[TokenMixer]]  # builder(cfg, max_len=...) -> the mixers, in order
BACKBONES: Registry[BackboneBuilder] = Registry("backbone")
"""The backbones by name (a model config's ``backbone``): each builder module registers its own with
``@BACKBONES.register(name)``, as attention mechanisms and tasks do; ``repro.models.model.get_backbone``
imports the modules of the packages that hold them."""

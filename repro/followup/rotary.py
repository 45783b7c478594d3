"""The follow-up study's Transformer: rotary self-attention and ReLU feed-forward mixers (its section 4, Table 5).

Per layer two pre-norm residual sublayers (the shared ``repro.models.model`` block): multi-head
softmax self-attention, then a feed-forward network (Linear -> ReLU -> Linear); layer
norm, no dropout, mean pooling (Table 5). The same backbone serves the positional
ablation of Table 4: ``model.rotary: true`` rotates queries and keys (Su et al., through
the ``rotary-embedding-torch`` library); ``rotary: false`` with ``model.positional:
learned | sinusoidal`` sums positions into the embeddings instead (``repro.models.model.Embedding``;
sinusoidal base frequency = ``positional_base``, 10000 as rotary's, appendix A.2).

Rotary settings (model config keys):

* ``rotary_base`` (10000, Table 5 "Rotary base freq").
* ``rotary_layout``: ``full_width`` (the follow-up's code, src/models/modules/
  rotary_multihead_attention.py with src/utils/rotary_embedding.py) rotates the full-width
  queries and keys before the head split, with the frequencies ``base ** (-2i / d_model)``
  of channel pair ``i`` of ``d_model / 2``: each head has its own band of them, the first
  head the fastest. ``per_head`` rotates each head with the whole table
  ``base ** (-2i / head_dim)``, as the rotary-embedding-torch library does.
* ``rotary_disable_half`` (Table 5 "Rotary disable half": "half of the base frequencies are
  set to 0, disabling the rotation of those channels and making them independent of
  positional information"), and which half, ``rotary_disable``: ``alternate`` (the
  follow-up's code, src/utils/rotary_embedding.py: ``thetas[::2] = 0``, the frequencies of
  even index, the fastest among them) or ``lower_half`` (the slowest half of the table).

Rotation runs in float32 even under bf16 autocast: the library computes positions in the
dtype of the tensor it rotates, and bf16 cannot count past 256 exactly.

Two implementations of the same rotation (``model.rotary_impl``): ``"library"`` calls
``rotate_queries_or_keys`` on q and on k (per call: the cos/sin tables, a float32 copy,
``rotate_half``'s stack, two products, a sum, a concatenation and the cast back, each a
pass over [B, H, L, Dh], and as many again backward); ``"fused"`` takes the library's
angles once per (length, device), caches cos/sin, and turns each channel pair of q and k
together, straight from the q/k/v projection's output, in one ``torch.compile``d kernel on
CUDA (float32 arithmetic, the input dtype out). ``"auto"`` (default): fused on CUDA,
library elsewhere.

Two implementations of the attention over padded batches (``model.attention_backend``):
``"sdpa"`` calls ``torch.nn.functional.scaled_dot_product_attention`` with the key padding mask as
a boolean ``attn_mask`` (a masked call leaves the flash kernel for the memory-efficient one, and
the check for a batch without padding costs a host synchronisation per layer); ``"flex"`` calls
``flex_attention`` with a block mask built from the padding mask on the device
(``_flex.padding_block_mask``): it skips every tile of padding, so a batch of ListOps trees
(mean length about half the maximum) computes about a third of the score tiles, and nothing
waits for the host, so the model compiles as one graph (``train.compile``). ``"auto"``
(default): flex on CUDA, sdpa elsewhere. A task without padding (no mask) takes SDPA's flash kernel
on either backend. Both compute the same function (tested in float64);
padded queries output exactly 0 (``AttentionMixer``'s convention). Projections: q/k/v and output ``Linear`` with biases
(PyTorch's multi-head attention default), Xavier-uniform kernels.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from rotary_embedding_torch import RotaryEmbedding
from torch import Tensor

from ..models.mixer import BACKBONES, TokenMixer
from ..models.settings import encoder_setting
from ..original.attention._common import AttentionMixer, QKVOut, sdpa_key_mask, split_heads
from ..original.attention._flex import (
    dense_flex,
    document_block_mask,
    eager_padding_block_mask,
    flex_fn,
    padded_flex_attention,
)
from ..original.encoder import FeedForward
from .rotary_settings import ROTARY_DEFAULTS

ROTARY_IMPLS = ("auto", "fused", "library")
ATTENTION_BACKENDS = ("auto", "flex", "sdpa")
_COMPILED_ROTATION = None


ROTARY_LAYOUTS = ("full_width", "per_head")
ROTARY_DISABLES = ("alternate", "lower_half")


def rotary_embedding(
    dim: int, base: float = 10000.0, disable_half: bool = False, disable: str = "lower_half"
) -> RotaryEmbedding:
    """The library's rotary table for ``dim`` channels (``base ** (-2i / dim)`` for pair ``i``);
    ``disable_half`` zeroes half of the frequencies, which half ``disable`` says: ``lower_half`` (the
    slowest) or ``alternate`` (those of even index)."""
    if dim % 4:
        raise ValueError(f"rotary attention needs a rotated width divisible by 4, got {dim}")
    if disable not in ROTARY_DISABLES:
        raise ValueError(f"model.rotary_disable={disable!r}: choose one of {', '.join(ROTARY_DISABLES)}")
    rotary = RotaryEmbedding(dim=dim, theta=base)
    if disable_half:
        with torch.no_grad():
            n_freqs = rotary.freqs.shape[0]  # dim // 2, one per channel pair
            if disable == "alternate":
                rotary.freqs[::2] = 0.0
            else:
                rotary.freqs[n_freqs - n_freqs // 2 :] = 0.0
    return rotary


def rotate_pairs(t: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Turn each channel pair (2i, 2i+1) of ``t`` [..., L, n, Dh] by the angles whose cos/sin
    are ``[L, 1, Dh / 2]``: ``(x1 c - x2 s, x2 c + x1 s)``, the library's ``t cos +
    rotate_half(t) sin``. Arithmetic in the tables' dtype, result in ``t``'s."""
    pairs = t.to(cos.dtype).unflatten(-1, (-1, 2))
    x1, x2 = pairs[..., 0], pairs[..., 1]
    out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return out.flatten(-2).to(t.dtype)


def rotation_fn(device: torch.device):
    """``rotate_pairs``, compiled on CUDA (one fused pass forward and one backward), eager elsewhere."""
    global _COMPILED_ROTATION
    if device.type != "cuda":
        return rotate_pairs
    if _COMPILED_ROTATION is None:
        _COMPILED_ROTATION = torch.compile(rotate_pairs)
    return _COMPILED_ROTATION


class RotarySelfAttention(AttentionMixer):
    """Multi-head softmax self-attention whose queries and keys are rotated by position (``rotary=True``)."""

    PLAIN_PATH = {"impl": "library", "attention_backend": "sdpa"}  # what FLOP counting runs (repro/bench/flops.py)
    packable = True  # positions restart with each packed example; attention under the document mask

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        rotary: bool = True,
        base: float = 10000.0,
        disable_half: bool = False,
        impl: str = "auto",
        attention_backend: str = "auto",
        layout: str = "per_head",
        disable: str = "lower_half",
    ):
        super().__init__(d_model, n_heads, max_len, dropout=0.0)
        if impl not in ROTARY_IMPLS:
            raise ValueError(f"model.rotary_impl={impl!r}: choose one of {', '.join(ROTARY_IMPLS)}")
        if attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(
                f"model.attention_backend={attention_backend!r}: choose one of {', '.join(ATTENTION_BACKENDS)}"
            )
        self.attention_backend = attention_backend
        if layout not in ROTARY_LAYOUTS:
            raise ValueError(f"model.rotary_layout={layout!r}: choose one of {', '.join(ROTARY_LAYOUTS)}")
        self.proj = QKVOut(d_model, n_heads, bias=True)
        self.layout = layout
        width = d_model if layout == "full_width" else self.head_dim
        if rotary and self.head_dim % 2:
            raise ValueError(f"rotary attention needs an even head width (d_model / n_heads), got {self.head_dim}")
        self.rotary = rotary_embedding(width, base, disable_half, disable) if rotary else None
        self.disable_half = disable_half if rotary else None
        self.impl = impl
        self._tables: dict = {}

    def rotate(self, t: Tensor, offset: int = 0) -> Tensor:
        """Rotate queries or keys ``[B, H, L, Dh]`` by their positions ``offset, offset + 1, ...`` through the
        library (float32; float64 stays)."""
        if self.rotary is None:
            return t
        wide = t if t.dtype == torch.float64 else t.float()
        if self.layout == "full_width":  # heads side by side [B, L, D], rotated, split again
            merged = wide.transpose(1, 2).flatten(-2)
            return split_heads(self.rotary.rotate_queries_or_keys(merged, offset=offset), self.n_heads).to(t.dtype)
        return self.rotary.rotate_queries_or_keys(wide, offset=offset).to(t.dtype)

    def rotation_tables(self, length: int, device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos and sin ``[L, 1, Dh / 2]`` (full width: ``[L, 2H, Dh / 2]``) of the library's angles (positions
        0..L-1), in ``dtype``; cached per (length, device, dtype) and rebuilt when the frequencies change.

        Inside a compiled graph they are computed in the graph instead (a few fused element-wise kernels a
        layer): the cache's key reads the frequencies' storage address, which dynamo cannot specialise once a
        graph break (the shared mask, the packed layout) has passed, so the check broke the graph inside the
        loop over the layers and dynamo ran that loop eagerly, compiling each layer apart."""
        if torch.compiler.is_compiling():
            return self._build_tables(length, device, dtype)
        freqs = self.rotary.freqs
        key = (length, str(device), dtype, freqs.dtype, freqs._version, freqs.data_ptr())
        if key not in self._tables:
            with torch.no_grad():
                self._tables = {key: self._build_tables(length, device, dtype)}
        return self._tables[key]

    def _build_tables(self, length: int, device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        freqs = self.rotary.freqs.detach()
        positions = self.rotary.get_seq_pos(length, device=device, dtype=freqs.dtype)
        # one angle per channel pair: the library's forward is this outer product, each entry then repeated twice
        angles = positions[:, None] * freqs
        if self.layout == "full_width":  # [L, 2H, Dh / 2]: each head its band, for q's heads and k's
            angles = angles.unflatten(-1, (self.n_heads, -1)).repeat(1, 2, 1)
        else:
            angles = angles[:, None]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def fused(self, t: Tensor) -> bool:
        return self.impl == "fused" or (self.impl == "auto" and t.device.type == "cuda")

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if self.rotary is None or not self.fused(x):
            q, k, v = self.proj.project(x)
            return self.rotate(q), self.rotate(k), v
        return self.fused_project(x)

    def project_at(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``project`` for a packed stream ``x`` [1, C, D] whose slot ``c`` holds position ``positions[c]``
        of its example: the fused rotation by the library's angles at those positions."""
        return self.proj.project(x) if self.rotary is None else self.fused_project(x, positions)

    def fused_project(self, x: Tensor, positions: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v [B, H, L, Dh] with q and k turned together, straight from the projection (float32
        arithmetic; float64 stays), at positions 0..L-1, or at ``positions`` [L] (a packed stream)."""
        H, D = self.n_heads, self.d_model
        qk, v = self.proj.qkv(x).split((2 * D, D), dim=-1)  # q and k heads side by side (split: one cat backward)
        wide = torch.float64 if qk.dtype == torch.float64 else torch.float32
        cos, sin = self.rotation_tables(qk.shape[1] if positions is None else self.max_len, qk.device, wide)
        if positions is not None:
            cos, sin = cos[positions], sin[positions]
        qk = rotation_fn(qk.device)(qk.unflatten(-1, (2 * H, self.head_dim)), cos, sin)
        q, k = qk.transpose(1, 2).split(H, dim=1)  # [B, H, L, Dh] each
        return q, k, split_heads(v, H)

    def shared_packing(self, device) -> tuple[str, Callable[[object], object]]:
        return ("document_block_mask", packed_block_mask)

    def forward_packed(self, x: Tensor, packed) -> Tensor:
        """Self-attention within each example of the packed stream ``x`` [1, C, D] (``repro/models/packing.py``):
        flex_attention's fused kernel under the document block mask on CUDA whatever ``attention_backend``
        says (a dense mask of the stream would take C^2 entries), its dense reference elsewhere (for tests: it
        holds [H, C, C] scores); empty slots 0."""
        q, k, v = self.project_at(x, packed.positions)
        block_mask = packed.shared["document_block_mask"]
        if q.device.type == "cpu":
            ctx = dense_flex(q, k, v, None, block_mask, with_lse=False)[0]
        else:
            ctx = flex_fn(q.device)(q, k, v, block_mask=block_mask)
        y = self.proj.output(ctx)
        return torch.where(packed.real[..., None], y, torch.zeros((), dtype=y.dtype, device=y.device))

    def forward(self, x: Tensor, mask: Tensor | None = None, shared: object = None) -> Tensor:
        if mask is None:  # a task without padding (pixels): the flash kernel, with no mask to build or check
            return self.proj.output(F.scaled_dot_product_attention(*self.project(x)))
        return super().forward(x, mask, shared)

    def uses_flex(self, device: torch.device) -> bool:
        return self.attention_backend == "flex" or (self.attention_backend == "auto" and device.type == "cuda")

    def shared_padding(self, mask: Tensor) -> tuple[str, Callable[[Tensor], object]] | None:
        """On the flex path, the padding's block mask, built once a forward pass for every layer (outside a
        compiled graph: one graph break a pass, where a mask built in each layer broke the graph in each)."""
        return ("padding_block_mask", eager_padding_block_mask) if self.uses_flex(mask.device) else None

    def attend_shared(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, shared: object) -> Tensor:
        return padded_flex_attention(q, k, v, mask, block_mask=shared)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, x: Tensor) -> Tensor:
        if self.uses_flex(q.device):
            return padded_flex_attention(q, k, v, mask)
        # None when the batch has no padding (flash kernel); else fully padded samples opened
        return F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_key_mask(mask))

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", rotary={self.rotary is not None}, disable_half={self.disable_half}, "
            f"impl={self.impl!r}, layout={self.layout!r}, attention_backend={self.attention_backend!r}"
        )


def packed_block_mask(packed):
    """The document block mask of a ``PackedBatch`` (``_flex.document_block_mask``)."""
    return document_block_mask(packed.doc, packed.lengths, packed.starts, packed.tile)


@BACKBONES.register("rotary_transformer")
def build_rotary_transformer_layers(cfg: dict, max_len: int) -> list[TokenMixer]:
    """[attention, feed-forward] per layer, ``cfg['depth']`` layers (the follow-up study, Table 5)."""
    if encoder_setting(cfg, "dropout"):
        raise ValueError(
            f"model.dropout={cfg['dropout']}: the follow-up Transformer has no dropout (Table 5); set it to 0"
        )
    d_model, n_heads = int(cfg["d_model"]), int(cfg["n_heads"])
    if d_model % n_heads:
        raise ValueError(f"model.d_model={d_model} is not divisible by model.n_heads={n_heads}")
    rotary = bool(cfg.get("rotary", ROTARY_DEFAULTS["rotary"]))
    if rotary and encoder_setting(cfg, "positional") != "none":
        raise ValueError(
            f"model.rotary=true with model.positional={cfg['positional']!r}: choose one positional "
            "scheme (rotary, or rotary=false with summed learned/sinusoidal positions)"
        )
    layers: list[TokenMixer] = []
    for _ in range(int(cfg["depth"])):
        layers.append(
            RotarySelfAttention(
                d_model,
                n_heads,
                max_len,
                rotary=rotary,
                base=float(cfg.get("rotary_base", ROTARY_DEFAULTS["rotary_base"])),
                disable_half=bool(cfg.get("rotary_disable_half", ROTARY_DEFAULTS["rotary_disable_half"])),
                impl=str(cfg.get("rotary_impl", ROTARY_DEFAULTS["rotary_impl"])),
                attention_backend=str(cfg.get("attention_backend", ROTARY_DEFAULTS["attention_backend"])),
                layout=str(cfg.get("rotary_layout", ROTARY_DEFAULTS["rotary_layout"])),
                disable=str(cfg.get("rotary_disable", ROTARY_DEFAULTS["rotary_disable"])),
            )
        )
        layers.append(FeedForward(d_model, int(cfg["d_ff"]), cfg.get("activation", "relu")))
    return layers

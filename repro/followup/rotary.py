"""The follow-up's Transformer: rotary self-attention and ReLU feed-forward mixers (seed 003 section 4, Table 5).

Per layer two pre-norm residual sublayers (the shared ``repro.model`` block): multi-head
softmax self-attention, then a feed-forward network (Linear -> ReLU -> Linear); layer
norm, no dropout, mean pooling (Table 5). The same backbone serves the positional
ablation of Table 4: ``model.rotary: true`` rotates queries and keys (Su et al., through
the ``rotary-embedding-torch`` library); ``rotary: false`` with ``model.positional:
learned | sinusoidal`` sums positions into the embeddings instead (``repro.model.Embedding``;
sinusoidal base frequency = ``positional_base``, 10000 as rotary's, appendix A.2).

Rotary settings (model config keys):

* ``rotary_base`` (10000, Table 5 "Rotary base freq").
* ``rotary_disable_half`` (Table 5 "Rotary disable half": "half of the base frequencies are
  set to 0, disabling the rotation of those channels and making them independent of
  positional information"). The paper does not say which half; we zero the lower half
  (the slowest rotations, the last ``head_dim // 4`` frequencies of the library's
  ``theta ** (-2i / head_dim)`` table), so the channels that still rotate keep the full
  range of wavelengths from 2*pi tokens up. Our choice, recorded here.

Rotation runs in float32 even under bf16 autocast: the library computes positions in the
dtype of the tensor it rotates, and bf16 cannot count past 256 exactly.

Attention is ``torch.nn.functional.scaled_dot_product_attention`` with the key padding mask
as a boolean ``attn_mask`` (fused kernels on GPU); padded queries output exactly 0
(``AttentionMixer``'s convention). Projections: q/k/v and output ``Linear`` with biases
(PyTorch's multi-head attention default), Xavier-uniform kernels.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from rotary_embedding_torch import RotaryEmbedding
from torch import Tensor, nn

from ..original.attention._common import AttentionMixer, QKVOut, sdpa_key_mask
from ..original.encoder import FeedForward


def rotary_embedding(head_dim: int, base: float = 10000.0, disable_half: bool = False) -> RotaryEmbedding:
    """The library's rotary table for ``head_dim`` channels; ``disable_half`` zeroes the lower half of the frequencies."""
    if head_dim % 4:
        raise ValueError(f"rotary attention needs a head width divisible by 4 (d_model / n_heads), got {head_dim}")
    rotary = RotaryEmbedding(dim=head_dim, theta=base)
    if disable_half:
        with torch.no_grad():
            n_freqs = rotary.freqs.shape[0]  # head_dim // 2, one per channel pair
            rotary.freqs[n_freqs - n_freqs // 2 :] = 0.0
    return rotary


class RotarySelfAttention(AttentionMixer):
    """Multi-head softmax self-attention whose queries and keys are rotated by position (``rotary=True``)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        rotary: bool = True,
        base: float = 10000.0,
        disable_half: bool = False,
    ):
        super().__init__(d_model, n_heads, max_len, dropout=0.0)
        self.proj = QKVOut(d_model, n_heads, bias=True)
        self.rotary = rotary_embedding(self.head_dim, base, disable_half) if rotary else None
        self.disable_half = disable_half if rotary else None

    def rotate(self, t: Tensor, offset: int = 0) -> Tensor:
        """Rotate queries or keys ``[B, H, L, Dh]`` by their positions ``offset, offset + 1, ...`` (float32; float64 stays)."""
        if self.rotary is None:
            return t
        wide = t if t.dtype == torch.float64 else t.float()
        return self.rotary.rotate_queries_or_keys(wide, offset=offset).to(t.dtype)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self.proj.project(x)
        return self.rotate(q), self.rotate(k), v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, x: Tensor) -> Tensor:
        # None when the batch has no padding (flash kernel); else fully padded samples opened
        return F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_key_mask(mask))

    def extra_repr(self) -> str:
        return super().extra_repr() + f", rotary={self.rotary is not None}, disable_half={self.disable_half}"


def build_rotary_transformer_layers(cfg: dict, max_len: int) -> list[nn.Module]:
    """[attention, feed-forward] per layer, ``cfg['depth']`` layers (seed 003 Table 5)."""
    if cfg.get("dropout", 0.0):
        raise ValueError(f"model.dropout={cfg['dropout']}: the follow-up Transformer has no dropout (Table 5); set it to 0")
    d_model, n_heads = int(cfg["d_model"]), int(cfg["n_heads"])
    if d_model % n_heads:
        raise ValueError(f"model.d_model={d_model} is not divisible by model.n_heads={n_heads}")
    rotary = bool(cfg.get("rotary", True))
    if rotary and cfg.get("positional", "none") != "none":
        raise ValueError(f"model.rotary=true with model.positional={cfg['positional']!r}: choose one positional "
                         "scheme (rotary, or rotary=false with summed learned/sinusoidal positions)")
    layers: list[nn.Module] = []
    for _ in range(int(cfg["depth"])):
        layers.append(RotarySelfAttention(d_model, n_heads, max_len, rotary=rotary,
                                          base=float(cfg.get("rotary_base", 10000.0)),
                                          disable_half=bool(cfg.get("rotary_disable_half", False))))
        layers.append(FeedForward(d_model, int(cfg["d_ff"]), cfg.get("activation", "relu")))
    return layers

"""Public PyTorch implementations of four LRA mechanisms, wrapped as our token mixers (the benchmark's peer rows).

The packages (``pip install -e ".[peers]"``; never required by the package) are
lucidrains' ``performer-pytorch``, ``linformer``, ``reformer-pytorch`` and
``local-attention``. Each wrapper has our mixer interface
(``repro/original/attention/_common.py``)::

    mixer = Peer(d_model=..., n_heads=..., max_len=..., dropout=..., **params)
    y = mixer(x [B, L, D], mask [B, L] bool, True = real token) -> [B, L, D]

so it sits inside OUR encoder (embedding, residual sublayers, FFN, head) with the
LRA text configuration, and the benchmark compares mechanisms, not encoders. The
packages are imported when a wrapper is built, never at module import.

How each package takes the padding mask: Performer zeroes padded values
(``SelfAttention(mask=...)``); Reformer's ``LSHSelfAttention(input_mask=...)`` masks
padded keys; ``LocalAttention(mask=...)`` masks padded keys; ``LinformerSelfAttention``
has no mask argument (padded keys are mixed in, as in LRA's own Linformer). Outputs at
padded positions are set to 0, our convention.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.mixer import TokenMixer
from ..original.attention import QKVOut, full_mask
from ..original.encoder import build_lra_layers
from ..registry import Registry

PEERS: Registry[type[TokenMixer]] = Registry("peer attention")
PEER_PACKAGES = {  # row's attention name -> (import name, PyPI name)
    "peer_performer": ("performer_pytorch", "performer-pytorch"),
    "peer_linformer": ("linformer", "linformer"),
    "peer_reformer": ("reformer_pytorch", "reformer-pytorch"),
    "peer_local": ("local_attention", "local-attention"),
}


def _zero_padded(y: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask[..., None], y, torch.zeros((), dtype=y.dtype, device=y.device))


@PEERS.register("peer_performer")
class PeerPerformer(TokenMixer):
    """performer-pytorch ``SelfAttention``: FAVOR+ with ``nb_features`` random features.

    ``kernel="relu"`` is its ``generalized_attention`` with a ReLU kernel (our
    ``lra_performer`` text setting), ``"softmax"`` its positive softmax features.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        nb_features: int = 256,
        kernel: str = "relu",
    ):
        super().__init__()
        from performer_pytorch import SelfAttention

        if kernel not in ("relu", "softmax"):
            raise ValueError(f"peer_performer kernel {kernel!r}: choose relu or softmax")
        self.attn = SelfAttention(
            dim=d_model,
            heads=n_heads,
            dim_head=d_model // n_heads,
            nb_features=nb_features,
            generalized_attention=kernel == "relu",
            kernel_fn=nn.ReLU(),
            dropout=dropout,
            qkv_bias=False,
            attn_out_bias=False,
        )

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        mask = full_mask(x, mask)
        return _zero_padded(self.attn(x, mask=mask), mask)


@PEERS.register("peer_linformer")
class PeerLinformer(TokenMixer):
    """linformer ``LinformerSelfAttention``: keys and values projected along the sequence to ``k``."""

    def __init__(
        self, d_model: int, n_heads: int, max_len: int, dropout: float = 0.0, k: int = 256, share_kv: bool = False
    ):
        super().__init__()
        from linformer import LinformerSelfAttention

        self.attn = LinformerSelfAttention(
            dim=d_model, seq_len=max_len, k=k, heads=n_heads, share_kv=share_kv, dropout=dropout
        )

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        mask = full_mask(x, mask)
        return _zero_padded(self.attn(x), mask)


@PEERS.register("peer_reformer")
class PeerReformer(TokenMixer):
    """reformer-pytorch ``LSHSelfAttention`` with our arm's bucketing: ``n_buckets`` chunks of the sequence.

    The package hashes into ``seq_len / bucket_size`` buckets and needs the length to
    be a multiple of ``2 * bucket_size``; the wrapper takes ``bucket_size =
    ceil(max_len / n_buckets)`` (our ``lra_reformer``'s chunk length) and pads the
    sequence, masked, to that multiple.
    """

    def __init__(
        self, d_model: int, n_heads: int, max_len: int, dropout: float = 0.0, n_hashes: int = 1, n_buckets: int = 10
    ):
        super().__init__()
        from reformer_pytorch import LSHSelfAttention

        self.bucket_size = max(1, math.ceil(max_len / n_buckets))
        self.attn = LSHSelfAttention(
            dim=d_model, heads=n_heads, bucket_size=self.bucket_size, n_hashes=n_hashes, causal=False, dropout=dropout
        )

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        mask = full_mask(x, mask)
        length = x.shape[1]
        multiple = 2 * self.bucket_size
        padded = -(-length // multiple) * multiple
        xp = F.pad(x, (0, 0, 0, padded - length))
        mp = F.pad(mask, (0, padded - length), value=False)
        y = self.attn(xp, input_mask=mp)[:, :length]
        return _zero_padded(y, mask)


@PEERS.register("peer_local")
class PeerLocal(TokenMixer):
    """local-attention ``LocalAttention``: windows of ``window_size``, each seeing ``look_backward``
    windows before and ``look_forward`` after it; our q/k/v and output projections around it."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        window_size: int = 256,
        look_backward: int = 1,
        look_forward: int = 1,
    ):
        super().__init__()
        from local_attention import LocalAttention

        self.proj = QKVOut(d_model, n_heads)
        self.attn = LocalAttention(
            window_size=window_size,
            causal=False,
            look_backward=look_backward,
            look_forward=look_forward,
            dropout=dropout,
            autopad=True,
        )

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        mask = full_mask(x, mask)
        q, k, v = self.proj.project(x)
        ctx = self.attn(q, k, v, mask=mask)
        return _zero_padded(self.proj.output(ctx), mask)


def build_peer_layers(cfg: dict, max_len: int) -> Sequence[TokenMixer]:
    """The LRA encoder's layers with the peer ``cfg["attention"]`` as attention (``model.attention: peer_*``),
    found in this module's own table: the package's attention registry is left as it is."""
    return build_lra_layers(cfg, max_len, mechanisms=PEERS)

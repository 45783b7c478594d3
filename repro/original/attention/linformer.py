"""Linformer (Wang et al., 2020): keys and values projected along the sequence.

``K' = E K`` and ``V' = F V`` with learned ``E, F`` of shape ``[k, max_len]``
(sliced to ``[k, L]`` for a sequence of length L), then ordinary softmax
attention of the L queries over the k projected keys: cost O(L k).

Defaults (LRA release, ``lra_benchmarks/models/linformer/linformer_attention.py``;
neither the model nor the task configs override them):

* ``k = 16`` (``low_rank_features=16``).
* ``share_kv = True``: LRA uses one ``lr_kernel [max_len, k]`` for both keys
  and values, shared by all heads (the "key-value sharing" + "headwise
  sharing" option of the Linformer paper, section 4). ``share_kv=False`` gives
  separate E and F (the paper's basic form); both are shared across heads.

Padding. The projection mixes every position into each of the k slots, so a
padded key cannot be removed from the softmax by a mask. The documented
equivalent used here: padded keys and values are set to zero *after* their
linear projections and *before* the length projection, so they add nothing to
``E K`` or ``F V``. (LRA's release applies no mask at all here.) Consequences:

* Guaranteed: appending padding on the right leaves every output at a real
  position exactly unchanged, because ``E[:, :L] [K; 0] = E[:, :L_real] K``
  (E's columns are tied to absolute positions, and the real tokens keep theirs).
* Not guaranteed: invariance to left padding or any shift of the real tokens
  (other columns of E would apply); and the softmax still runs over all k
  slots, so "padded keys get no weight" holds only in the sense that they
  contribute nothing to any slot. In particular, with ``k = L`` and identity
  projections the zeroed padded keys become k-slots of logit 0, so that
  special case equals *unmasked-by-softmax* attention over zero keys, not
  masked softmax attention; the identity equivalence is exact only without
  padding.

Backends (``backend=``), the same function: ``"materialized"`` computes the ``[B, H, L, k]``
logits, softmax and attention dropout (``nn.Dropout`` on the probabilities) explicitly;
``"sdpa"`` hands q and the projected keys and values to ``scaled_dot_product_attention``, whose
dropout is the same unrenormalised dropout of the probabilities scaled by ``1 / (1 - p)`` (its own
random stream). ``"auto"`` (default): sdpa when the projected length ``k`` is at least
``sdpa_min_k``, materialized below it; ``sdpa_min_k`` defaults to ``"auto"``,
``FAST_DEFAULTS["linformer"]["sdpa_min_k"]``. Measured on an H200, the materialised path was
faster at LRA's ``k = 16``, SDPA faster and lighter at ``k = 256`` from 2K tokens on. The choice
depends on k alone, on any device: both paths compute the same function (only the dropout's random
stream differs).

``attend`` (``eager`` or ``compiled``): the whole attention after the input projections (the mask,
the length projection and the softmax attention) through ``torch.compile`` on CUDA, the same
function (under attention dropout its random stream differs); ``"auto"``:
``FAST_DEFAULTS["linformer"]["attend"]``. The compiled graph fuses the masking and the casts around
the products: fewer kernel launches and less kernel time a step (paper/performance.md).

Test hook: ``set_identity_projections()`` sets ``E = F = [I_k, 0]``, so that
with ``k = L`` the module is exactly full softmax attention.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from . import ATTENTION
from ._common import sdpa_aligned
from ._lowrank_common import HeadedMixer, on_device, xavier_bound
from .fast_defaults import check_at_least, check_choice, choose


@ATTENTION.register("linformer")
class LinformerAttention(HeadedMixer):
    # the LRA release drops the (inputs > 0) mask here:
    # linformer/linformer_attention.py: bias=None, padding_mask unused
    RELEASE_ZERO_MASK = "ignored"
    # what FLOP counting runs (repro/bench/flops.py; nothing compiled runs under its counter)
    PLAIN_PATH = {"backend": "materialized", "attend_mode": "eager"}

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        k: int = 16,
        share_kv: bool = True,
        bias: bool = False,
        backend: str = "auto",
        sdpa_min_k="auto",
        attend: str = "auto",
    ):
        super().__init__(d_model, n_heads, max_len, dropout, ("q", "k", "v"), bias)
        self.k = k
        self.share_kv = share_kv
        self.backend = check_choice("linformer", "backend", backend, "attention_params.backend")
        self.sdpa_min_k = check_at_least("linformer", "sdpa_min_k", sdpa_min_k, 1, "an int")
        self.attend_mode = check_choice("linformer", "attend", attend, "attention_params.attend")
        bound = xavier_bound(max_len, k)  # LRA: xavier-uniform kernel [max_len, k]
        self.E = nn.Parameter(torch.empty(k, max_len).uniform_(-bound, bound))
        self.F = None if share_kv else nn.Parameter(torch.empty(k, max_len).uniform_(-bound, bound))

    def projections(self):
        """(E, F) as used, F is E when ``share_kv``."""
        return self.E, (self.E if self.F is None else self.F)

    def resolved_backend(self) -> str:
        """``sdpa`` or ``materialized``: ``auto`` is sdpa when ``k >= sdpa_min_k``."""
        if self.backend != "auto":
            return self.backend
        return "sdpa" if self.k >= choose("linformer", "sdpa_min_k", self.sdpa_min_k) else "materialized"

    def attend(self, q, k, v, mask):
        """``attend_projected``, eager or compiled (``attend``)."""
        self._check_len(q.shape[-2])
        mode = choose("linformer", "attend", self.attend_mode)
        return on_device(LinformerAttention.attend_projected, q.device, mode)(self, q, k, v, mask)

    def attend_projected(self, q, k, v, mask):
        """Zero the padded keys and values, project them along the sequence, attend."""
        length = q.shape[-2]
        pad = ~mask[:, None, :, None]
        k = k.masked_fill(pad, 0.0)  # zero padded keys/values: they add nothing to E K, F V
        v = v.masked_fill(pad, 0.0)
        e, f = self.projections()
        k_low = torch.einsum("kl,bhld->bhkd", e[:, :length].to(k.dtype), k)
        v_low = torch.einsum("kl,bhld->bhkd", f[:, :length].to(v.dtype), v)
        if self.resolved_backend() == "sdpa":
            p = self.attn_dropout.p if self.training else 0.0
            return sdpa_aligned(q, k_low, v_low, dropout_p=p, scale=1.0 / math.sqrt(self.head_dim))
        logits = torch.matmul(q, k_low.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = self.attn_dropout(torch.softmax(logits, dim=-1))
        return torch.matmul(probs, v_low)

    @torch.no_grad()
    def set_identity_projections(self) -> None:
        """Test hook: ``E = F = [I_k, 0]`` (requires ``k <= max_len``); with a
        sequence of length ``L = k`` the module is then full softmax attention."""
        if self.k > self.max_len:
            raise ValueError("identity projections need k <= max_len")
        eye = torch.zeros_like(self.E)
        eye[:, : self.k] = torch.eye(self.k, dtype=eye.dtype, device=eye.device)
        self.E.copy_(eye)
        if self.F is not None:
            self.F.copy_(eye)

"""Linear Transformer attention (Katharopoulos et al., 2020), non-causal.

With the feature map ``phi(x) = elu(x) + 1``::

    out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j) + eps)

computed as ``phi(Q) (phi(K)^T V)`` in O(L d^2). There is no 1/sqrt(d) scale
(the paper's formulation; the LRA release's ``linear_attention.py`` uses the
same feature map).

Padding: exact. ``phi(k_j)`` is set to zero at padded positions, which removes
those keys from both the numerator and the normaliser, so appending padding
leaves the outputs at real positions unchanged. A sequence with no real token
gets a zero normaliser; ``eps`` (default 1e-6, as in the paper's code) plus a
guard keep it finite (output 0).

``dropout`` is accepted for the common interface but unused: the mechanism has
no attention matrix to drop (the LRA release does the same).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import ATTENTION
from ._lowrank_common import HeadedMixer


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1.0


@ATTENTION.register("linear")
class LinearAttention(HeadedMixer):
    # the LRA release drops the (inputs > 0) mask here:
    # linear_transformer/linear_attention.py: padding_mask unused
    RELEASE_ZERO_MASK = "ignored"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        dropout: float = 0.0,
        eps: float = 1e-6,
        bias: bool = False,
    ):
        super().__init__(d_model, n_heads, max_len, dropout, ("q", "k", "v"), bias)
        self.eps = eps

    feature_map = staticmethod(elu_feature_map)

    def attend(self, q, k, v, mask):
        phi_q = self.feature_map(q)
        phi_k = self.feature_map(k).masked_fill(~mask[:, None, :, None], 0.0)
        kv = torch.einsum("bhld,bhle->bhde", phi_k, v)
        num = torch.einsum("bhld,bhde->bhle", phi_q, kv)
        den = torch.einsum("bhld,bhd->bhl", phi_q, phi_k.sum(dim=2)) + self.eps
        den = torch.where(den > 0, den, torch.ones_like(den))
        return num / den.unsqueeze(-1)

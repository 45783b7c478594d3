"""A key padding mask folded into the queries and keys, so a fused attention kernel needs no per-sample mask.

``scaled_dot_product_attention`` takes one ``attn_mask`` broadcast to [N, heads, Lq, Lk]. A mechanism
with a structural bias shared by every sample (Reformer's self-mask within a chunk, MEGA's relative
position bias) plus a key padding mask per sample would have to materialise their sum, one
[Lq, Lk] matrix per sample and head. Folding the padding into one extra feature keeps the bias
broadcast: queries get a 1, keys get 0 (real) or ``-PAD_LOGIT / scale`` (padding), so

    scale * (q' . k') = scale * (q . k)              for a real key,
                      = scale * (q . k) - PAD_LOGIT  for a padded key,

whose softmax weight is exactly 0 next to any key within ``PAD_LOGIT`` of the row's maximum (it
underflows in float32 and float64). A row whose keys are all padding keeps its softmax over
``q . k + bias`` (the constant cancels): finite, no NaN. The feature dimension is zero-padded to a
multiple of 8, the alignment the fused CUDA kernels ask of bf16 inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

PAD_LOGIT = 1.0e6  # far below any score and below Reformer's self-mask value (-5e4), finite in bf16


def fold_key_mask(q: Tensor, k: Tensor, key_mask: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """``q`` [..., Lq, d], ``k`` [..., Lk, d], ``key_mask`` [..., Lk] (True = real key) -> (q', k') of width
    d' (the next multiple of 8 above d), to be used with ``scale`` (the caller's, not 1/sqrt(d'))."""
    width = q.shape[-1] + 1
    extra = -width % 8
    ones = q.new_ones(*q.shape[:-1], 1)
    key_feature = torch.where(key_mask, 0.0, -PAD_LOGIT / scale).to(k.dtype).unsqueeze(-1)
    q_folded = F.pad(torch.cat([q, ones], dim=-1), (0, extra))
    k_folded = F.pad(torch.cat([k, key_feature.expand(*k.shape[:-1], 1)], dim=-1), (0, extra))
    return q_folded, k_folded

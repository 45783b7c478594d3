"""Right-padding of one tensor axis (the block layouts and the flex tiles)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def pad_dim(t: Tensor, dim: int, new_size: int, value=0) -> Tensor:
    """Right-pad ``t`` along ``dim`` to ``new_size`` with ``value``."""
    extra = new_size - t.shape[dim]
    if extra == 0:
        return t
    if extra < 0:
        raise ValueError(f"cannot pad size {t.shape[dim]} down to {new_size}")
    dim = dim % t.dim()
    pad = [0, 0] * (t.dim() - 1 - dim) + [0, extra]
    if t.dtype == torch.bool:
        return F.pad(t.to(torch.uint8), pad, value=int(value)).bool()
    return F.pad(t, pad, value=value)

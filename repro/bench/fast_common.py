"""What the fast-path checks share: a mixer's output and gradients, relative errors, a batch of ids."""

from __future__ import annotations

import torch

OUT_TOL, GRAD_TOL = 2e-2, 5e-2  # sequence and variants: relative error of the output, of the gradients
TASKS = ("text", "listops", "image", "pathfinder")  # paths and sequence, --task: whose LRA configuration
REFERENCE = "lra_transformer"  # sequence and variants: the whole-model timings' reference arm


def run_mixer(mixer, x, mask, autocast: bool, seed: int):
    """(output, input gradient, {parameter: gradient}) in float32 for a fixed random linear loss."""
    for p in mixer.parameters():
        p.grad = None
    x = x.clone().requires_grad_(True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
        y = mixer(x, mask)
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed)).to(y.device)
    (y.float() * weights).sum().backward()
    grads = {n: p.grad.float().clone() for n, p in mixer.named_parameters() if p.grad is not None}
    return y.detach().float(), x.grad.float().clone(), grads


def relative_error(fast: torch.Tensor, plain: torch.Tensor) -> float:
    if not torch.isfinite(fast).all():
        return float("inf")
    return ((fast - plain).norm() / plain.norm().clamp_min(1e-30)).item()


def batch_of_ids(batch: int, length: int, device: torch.device):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 256, (batch, length), generator=g)
    return ids.to(device), torch.randint(0, 2, (batch,), generator=g).to(device)


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)

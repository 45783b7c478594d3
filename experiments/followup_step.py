"""GPU check of the follow-up rotary Transformer's padded flex attention: ``python experiments/followup_step.py``.

The padded flex attention (bf16, fused kernel) against SDPA in float64 under the key mask, forward and
gradients, at 2,000 and 4,096 tokens (head width 64) and 1,024 (width 40): relative errors, padded rows
exactly 0, gradients finite. Prints one JSON line and writes ``$OUT/check.json`` (or /tmp). Needs CUDA.

The training-step timings this script once made (the SDPA and flex backends, compiled or not, and a plain
reference of each shape) are rows of ``lra-bench mode=followup`` (docs/benchmark.md): the backends through
``followup.overrides`` (``+model.attention_backend=sdpa``, ``+train.compile=true``), the reference as the
mode's reference row (repro/bench/followup.py).
"""

import json
import os

import torch
import torch.nn.functional as F

OUT = os.environ.get("OUT", "/tmp")
dev = torch.device("cuda")


def rel(a, b) -> float:
    """||a - b|| / ||b||, in float64."""
    return float((a.detach().double() - b.detach()).norm() / b.detach().norm())


def check_flex_equal():
    """The package's padded flex attention (bf16, fused kernel) against SDPA in float64 under the key mask."""
    from repro.original.attention._flex import padded_flex_attention

    out = {}
    for L, D in ((2000, 64), (4096, 64), (1024, 40)):
        torch.manual_seed(0)
        B, H = 4, 4
        lens = torch.tensor([L, L // 2 + 3, 129, 128], device=dev)
        mask = torch.arange(L, device=dev)[None] < lens[:, None]
        base = [torch.randn(B, H, L, D, device=dev, dtype=torch.float64) for _ in range(3)]
        real = mask[:, None, :, None]
        w = torch.randn(B, H, L, D, device=dev, dtype=torch.float64) * real
        q64 = [t.clone().requires_grad_(True) for t in base]
        ref = F.scaled_dot_product_attention(*q64, attn_mask=mask[:, None, None, :])
        g64 = torch.autograd.grad((ref * w).sum(), q64)
        q16 = [t.to(torch.bfloat16).requires_grad_(True) for t in base]
        o = padded_flex_attention(*q16, mask)
        g16 = torch.autograd.grad((o.double() * w).sum(), q16)
        out[f"L{L}_D{D}"] = {
            "out": rel(o * real, ref * real),
            "grads": [rel(a, b) for a, b in zip(g16, g64, strict=True)],
            "padded_zero": bool((o * ~real == 0).all()),
            "finite": all(bool(torch.isfinite(g).all()) for g in g16),
        }
    return out


if __name__ == "__main__":
    result = {"check": check_flex_equal()}
    print(json.dumps(result), flush=True)
    with open(os.path.join(OUT, "check.json"), "w") as f:
        json.dump(result, f, indent=1)

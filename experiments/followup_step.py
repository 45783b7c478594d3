"""GPU timing of the follow-up rotary Transformer's training step at its protocols' shapes.

    python experiments/followup_step.py check listops:arm listops:flex listops:flex+compiled listops:ref ...

``check``: the padded flex attention (bf16, fused kernel) against SDPA in float64 under the key mask, forward
and gradients, at 2,000 and 4,096 tokens (head width 64) and 1,024 (width 40). Then each ``task:variant``:

* ``arm``: the mixer's SDPA backend with a boolean key mask (``model.attention_backend=sdpa``), eager;
* ``flex``: ``model.attention_backend=flex`` (the padding block mask), eager;
* ``flex+compiled``: the same under ``torch.compile`` of the whole model (``train.compile=true``);
* ``compiled``: the SDPA backend under ``torch.compile``;
* ``ref``: a plain reference of the same shape: full-length batches (no padding), SDPA without a mask (the
  flash kernel), the whole model compiled.

Every variant: the arm's resolved ``profile=paper`` model for the task, bf16 autocast, fused AdamW, 8 random
batches on the GPU (ListOps: lengths uniform in 500-1,560, mean 1,030 as the generated trees'; text: log-normal
lengths, median 950 bytes, as IMDb's; image: no padding), 8 warm-up steps, 40 timed steps between CUDA events.
Writes ``$OUT/probe.json`` (or /tmp) as it goes. Needs CUDA.
"""

import json
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from repro.bench.models import resolve_arm
from repro.followup import rotary as R
from repro.models.model import build_model
from repro.original.attention._flex import raise_recompile_limit

raise_recompile_limit()
OUT = os.environ.get("OUT", "/tmp")
dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


@dataclass
class Shape:
    max_len: int
    vocab_size: int
    num_classes: int
    pad_id: int | None
    two_tower: bool = False


def sdpa_nomask(self, q, k, v, mask, x):
    return F.scaled_dot_product_attention(q, k, v)


ORIG = R.RotarySelfAttention.attend


def lengths_for(task, B, L, g):
    if task == "listops":  # mean ~1030 of 2000
        return torch.randint(500, 1561, (B,), generator=g)
    if task == "text":  # IMDb bytes: lognormal median ~950, mean ~1300, cap 4096
        return torch.exp(torch.randn(B, generator=g) * 0.75 + math.log(950)).clamp(10, L).long()
    return torch.full((B,), L)


def batches(task, B, L, vocab, pad, classes, n, g, full=False):
    out = []
    for _ in range(n):
        lens = torch.full((B,), L) if (full or pad is None) else lengths_for(task, B, L, g)
        x = torch.randint(1, vocab, (B, L), generator=g)
        if pad is not None:
            x = torch.where(torch.arange(L)[None] < lens[:, None], x, pad)
        y = torch.randint(0, classes, (B,), generator=g)
        out.append((x.to(dev), y.to(dev)))
    return out


def make(task, variant):
    cfg = resolve_arm("rotary_transformer", task, "paper")
    m, t = cfg["model"], cfg["train"]
    m = {**m, "attention_backend": "sdpa" if variant in ("arm", "compiled", "ref") else "flex"}
    shapes = {"listops": Shape(2000, 18, 10, 0), "text": Shape(4096, 257, 2, 0), "image": Shape(1024, 256, 10, None)}
    shape = shapes[task]
    torch.manual_seed(0)
    model = build_model(m, shape).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    fwd = torch.compile(model) if "compiled" in variant or variant == "ref" else model
    return model, opt, fwd, shape, int(t["batch_size"]), m


def step_fn(model, opt, fwd):
    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(x)
        loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def run(task, variant, steps=40, warm=8):
    R.RotarySelfAttention.attend = {"ref": sdpa_nomask}.get(variant, ORIG)
    model, opt, fwd, shape, B, m = make(task, variant)
    g = torch.Generator().manual_seed(1)
    data = batches(
        task, B, shape.max_len, shape.vocab_size, shape.pad_id, shape.num_classes, 8, g, full=(variant == "ref")
    )
    step = step_fn(model, opt, fwd)
    t0 = time.time()
    for i in range(warm):
        step(*data[i % 8])
    torch.cuda.synchronize()
    compile_s = time.time() - t0
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for i in range(steps):
        loss = step(*data[i % 8])
    e.record()
    torch.cuda.synchronize()
    ms = s.elapsed_time(e) / steps
    mem = torch.cuda.max_memory_allocated() / 2**30
    top = None
    if os.environ.get("PROFILE") and variant in os.environ["PROFILE"].split(","):
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for i in range(3):
                step(*data[i % 8])
            torch.cuda.synchronize()
        ev = [e for e in prof.key_averages() if e.device_time_total > 0]
        ev.sort(key=lambda e: -e.self_device_time_total)
        top = [(e.key[:90], round(e.self_device_time_total / 3000, 2), e.count // 3) for e in ev[:14]]
        print(json.dumps({"task": task, "variant": variant, "top": top}), flush=True)
    R.RotarySelfAttention.attend = ORIG
    return {
        "task": task,
        "variant": variant,
        "B": B,
        "L": shape.max_len,
        "ms": round(ms, 2),
        "steps_s": round(1000 / ms, 2),
        "ex_s": round(1000 / ms * B, 1),
        "warm_s": round(compile_s, 1),
        "mem_gib": round(mem, 2),
        "loss": float(loss),
    }


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
    plan = [a.split(":") for a in sys.argv[1:]]
    results = []
    if plan and plan[0] == ["check"]:
        try:
            results.append({"check": check_flex_equal()})
        except Exception as err:
            results.append({"check_error": repr(err)[:500], "tb": traceback.format_exc()[-2500:]})
        print(json.dumps(results[-1]), flush=True)
        plan = plan[1:]
    for task, variant in plan:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        try:
            r = run(task, variant)
        except Exception as err:
            r = {"task": task, "variant": variant, "error": repr(err)[:800], "tb": traceback.format_exc()[-1500:]}
        results.append(r)
        print(json.dumps(r), flush=True)
        with open(os.path.join(OUT, "probe.json"), "w") as f:
            json.dump(results, f, indent=1)

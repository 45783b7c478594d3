"""Is a K=61 model sitting at ln 2 input-dependent at all? (eighth session, this CPU)

``python ln_collapse_check.py CHECKPOINT CONFIG``. Loads the checkpoint and 512 freshly generated hard images
(render version 3, seed 123, not the run's split: any hard images serve), and prints the spread of
the logit difference across images, the fraction of the pooled vector's variance that images
explain, and the gradient norm per parameter group on one batch.
"""
import sys
import numpy as np
import torch
from omegaconf import OmegaConf
from repro.model import build_model
from repro.tasks import pathfinder_render as render
from repro.tasks.pathfinder import VOCAB_SIZE

ck, cfg = sys.argv[1], sys.argv[2]
run = OmegaConf.to_container(OmegaConf.load(cfg), resolve=True)


class _Spec:  # what build_model reads from a task
    vocab_size, num_classes, max_len, pad_id, two_tower = VOCAB_SIZE, 2, 1024, None, False


spec = render.lra_spec(32, "hard")
samples = render.chunk_samples(123, "hard", 0, 512, spec)
x = torch.tensor(np.stack([s.image.reshape(-1) for s in samples]).astype(np.int64))
y = torch.tensor([s.label for s in samples])
trained = torch.load(ck, map_location="cpu", weights_only=False)
for label, state in (("init", None), (f"step {trained['state']['step']}", trained)):
    torch.manual_seed(0)
    model = build_model(run["model"], _Spec())
    if state is not None:
        model.load_state_dict(state["model"])
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(x[i:i + 128]) for i in range(0, len(x), 128)])
    diff = (logits[:, 1] - logits[:, 0]).numpy()
    acc = ((logits.argmax(-1) == y).float().mean()).item()
    print(f"{label}: logit difference mean {diff.mean():+.4f} std {diff.std():.5f} "
          f"(positives {diff[y.numpy() == 1].mean():+.5f}, negatives {diff[y.numpy() == 0].mean():+.5f}); acc {acc:.3f}")
    model.train()
    model.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x[:128]), y[:128])
    loss.backward()
    norms = {n: p.grad.norm().item() for n, p in model.named_parameters() if p.grad is not None}
    top = sorted(norms.items(), key=lambda kv: -kv[1])[:4]
    print(f"  loss {loss.item():.4f}; largest gradient norms: " + ", ".join(f"{n} {v:.2e}" for n, v in top))
    emb = [v for n, v in norms.items() if "embed" in n]
    print(f"  embedding grad norm {emb}")

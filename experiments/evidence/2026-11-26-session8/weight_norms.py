"""Norms of selected parameters: a fresh initialisation (seed 0) against a checkpoint (eighth session).

``python weight_norms.py CHECKPOINT CONFIG``
"""
import sys
import torch
from omegaconf import OmegaConf
from repro.model import build_model
from repro.tasks.pathfinder import VOCAB_SIZE

ck, cfg = sys.argv[1], sys.argv[2]
run = OmegaConf.to_container(OmegaConf.load(cfg), resolve=True)


class _Spec:  # what build_model reads from a task
    vocab_size, num_classes, max_len, pad_id, two_tower = VOCAB_SIZE, 2, 1024, None, False


torch.manual_seed(0)
model = build_model(run["model"], _Spec())
trained = torch.load(ck, map_location="cpu", weights_only=False)
names = ("encoder.embed.tokens.weight", "encoder.sublayers.0.mixer.conv.weight", "encoder.sublayers.0.norm.weight",
         "encoder.sublayers.5.mixer.out.weight", "encoder.final_norm.weight", "head.classify.weight")
params = dict(model.named_parameters())
for name in names:
    print(f"{name:40s} init {params[name].norm().item():9.4f}  step {trained['state']['step']} {trained['model'][name].norm().item():9.4f}")

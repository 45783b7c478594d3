import sys, torch, numpy as np
from pathlib import Path
from omegaconf import OmegaConf
from repro.model import build_model
from repro.tasks import get_task_builder
run = OmegaConf.to_container(OmegaConf.load("/tmp/prep_easy/runs/locality_k61/pathfinder/budget/seed0/config.yaml"), resolve=True)
import os
task = get_task_builder(run["task"].get("builder", "pathfinder"))(run["task"], Path(os.environ.get("LRA_DATA_DIR", "data")), Path(".cache/lra-repro"), 2)
model = build_model(run["model"], task)
for ck in sys.argv[1:]:
    st = torch.load(ck, map_location="cpu", weights_only=False)
    model.load_state_dict(st["model"]); model.eval()
    for name in ("train", "val"):
        sp = getattr(task, name)
        x = torch.from_numpy(np.asarray(sp.inputs[:2000]).astype(np.int64)); y = torch.from_numpy(np.asarray(sp.labels[:2000]))
        with torch.no_grad():
            p = torch.cat([model(x[i:i+250]).argmax(-1) for i in range(0, len(x), 250)])
        print(ck.split("/")[-1], name, "acc", (p == y).float().mean().item(), "pred mean", p.float().mean().item())

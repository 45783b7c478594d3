"""How often a 3x3 patch with ink repeats across 1,000 generated easy images, real-valued
geometry (render version 2, the default) against the pixel lattice (task.generate.lattice=true).
Run from the repository root: python experiments/evidence/2026-11-26-session7/patch_repetition.py"""
import numpy as np

from repro.tasks import pathfinder_render as render

for lattice in (False, True):
    x, _ = render.generate_chunk(3, "easy", 0, 1000, render.lra_spec(32, "easy", lattice=lattice))
    patches = np.lib.stride_tricks.sliding_window_view(x.reshape(-1, 32, 32), (3, 3), axis=(1, 2)).reshape(-1, 9)
    inked = patches[patches.max(axis=1) > 0]
    distinct = len(np.unique(inked, axis=0))
    print(f"lattice={lattice}: {len(inked):,} inked 3x3 patches, {distinct:,} distinct ({distinct / len(inked):.1%})")

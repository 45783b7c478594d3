"""Speed and memory benchmark of every arm in the LRA text-task configuration.

The LRA paper timed its models on the byte-level text task at lengths 1K-4K,
batch 32 (Tay et al. 2021, section 3.4, Table 2). ``experiments/bench.py`` reruns that
measurement on a GPU for every arm YAML (and optional public peer
implementations), training and inference, with peak memory and a FLOP count.

Modules: ``models`` (which rows exist and how each model is built, exactly as the
runner builds an arm for ``task=text``), ``timing`` (CUDA-event timing, peak
memory, out-of-memory handling), ``flops`` (analytic and counted FLOPs per step),
``peers`` (wrappers of the public PyTorch implementations, imported lazily),
``matrix`` (the measurement loop) and ``report`` (JSON/CSV record, Table 2 layout,
Figure 3 plot).
"""

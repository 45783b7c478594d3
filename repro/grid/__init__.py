"""Grids of (arm, task, seed) runs on GPU machines lent in short slots (``lra-grid``, ``python -m repro.grid``).

Modules, one job each:

- ``cells``: a grid file -> its cells in order, and each cell's ``experiments/run.py`` command;
- ``runs``: where a cell's record and checkpoints live, and what they say (resolved like the runner does);
- ``schedule``: runs commands N to a GPU before a deadline, passing stop signals on; per-GPU occupancy,
  packing limits and GPU-time accounting (``GpuSlots``);
- ``gridlog``: ``grid_log.csv``, one row per finished cell and one per GPU;
- ``plan``: GPU-minutes per cell from a timed probe or from records;
- ``archive``: records and checkpoints into size-capped ``tar.gz`` parts grouped into transfers;
- ``parts`` and ``unpack``: the parts checked, staged for the next machine, assembled there, and unpacked;
- ``ledger``: ``LEDGER.md``, cells done and left with their GPU-minutes;
- ``driver`` and ``cli``: the command line that ties them together.
"""

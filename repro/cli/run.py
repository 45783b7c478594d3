"""Train an arm on a task: ``lra-run arm=locality_k61 task=listops profile=smoke``
(or ``python experiments/run.py ...``, the same thing from a checkout).

With ``task`` omitted, the arm runs every task it defines in turn, one record
each, skipping (with one line) a task whose data is absent. Config groups live
in experiments/conf (arm/, task/, profile/); add your own arm with
``--config-dir my_conf`` (a folder holding ``arm/<name>.yaml``).

Scaling out:
- ``torchrun --nproc_per_node=N experiments/run.py ...`` (or ``torchrun ... -m repro.cli.run ...``):
  data-parallel over N processes (one GPU each; gloo on CPU), same global batch, one record
  written by rank 0.
- ``lra-run -m arm=locality_k5,locality_k61 task=listops seed=0,1``: a
  Hydra sweep, one record per member; rerunning it skips members whose record is complete.
  A member that fails is reported at the end and the others still run; an interrupted
  member (SIGTERM/SIGUSR1: checkpointed) stops the sweep with 128 + signum, and rerunning
  resumes it. On Slurm: ``hydra/launcher=...`` (experiments/conf/hydra/launcher/).
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from ..runner import arm_tasks, execute
from . import command_line_problem, config_dir, fail, require_same_checkout


class MemberFailed(RuntimeError):
    """A sweep member ended without a record; Hydra runs the other members, then reports it."""


def finish(status: int) -> None:
    """Exit with ``status`` (non-zero) in a single run; in a sweep, fail only this member unless interrupted."""
    if status == 0:
        return
    if status >= 128 or HydraConfig.get().mode != RunMode.MULTIRUN:
        sys.exit(status)  # interrupted (checkpointed): stop here so the job can be requeued and resumed
    raise MemberFailed(f"sweep member {' '.join(HydraConfig.get().overrides.task)} ended with status {status}")


def run_app(cfg: DictConfig) -> None:
    """One composed configuration: its task, or every task of its arm."""
    if cfg.get("task") is not None:
        finish(execute(cfg))
        return
    overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith("task=")]
    statuses = {}
    for name in arm_tasks(cfg):
        task_cfg = hydra.compose(config_name="config", overrides=overrides + [f"task={name}"])
        statuses[name] = execute(task_cfg)
        if statuses[name] >= 128:  # interrupted: stop the sequence, rerun resumes it
            sys.exit(statuses[name])
    failed = [t for t, s in statuses.items() if s not in (0, 3)]
    skipped = [t for t, s in statuses.items() if s == 3]
    print(
        f"arm {cfg.arm.name}: {len(statuses) - len(failed) - len(skipped)} task(s) done"
        + (f", skipped (no data): {', '.join(skipped)}" if skipped else "")
        + (f", failed: {', '.join(failed)}" if failed else "")
    )
    if failed:
        finish(1)


def main(script: str | None = None) -> None:
    """``lra-run``; experiments/run.py passes its own path as ``script`` (it must be this checkout's)."""
    if script is not None:
        require_same_checkout(script)
    prog = "experiments/run.py" if script else "lra-run"
    conf = config_dir(prog, "config")
    if mistake := command_line_problem(sys.argv[1:], Path(conf)):
        fail(f"{prog}: error: {mistake}")
    hydra.main(version_base="1.3", config_path=conf, config_name="config")(run_app)()


if __name__ == "__main__":
    main()

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
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..invocation import invoked_as
from ..run.settings import CONF_DIR
from . import command_line_problem, config_dir, fail, require_same_checkout
from .usage import RUN, page, wants_help

if TYPE_CHECKING:
    from omegaconf import DictConfig

# torch and Hydra are imported where a run needs them, so that --help answers before either loads.


class MemberFailed(RuntimeError):
    """A sweep member ended without a record; Hydra runs the other members, then reports it."""


def finish(status: int) -> None:
    """Exit with ``status`` (non-zero) in a single run; in a sweep, fail only this member unless interrupted."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if status == 0:
        return
    if status >= 128 or HydraConfig.get().mode != RunMode.MULTIRUN:
        sys.exit(status)  # interrupted (checkpointed): stop here so the job can be requeued and resumed
    raise MemberFailed(f"sweep member {' '.join(HydraConfig.get().overrides.task)} ended with status {status}")


def each_task(cfg: DictConfig) -> Iterator[tuple[str, DictConfig]]:
    """(task, its composed configuration) for the task ``cfg`` names, or for every task of its arm in turn."""
    from hydra.core.hydra_config import HydraConfig

    from ..run.settings import arm_tasks, compose_run

    if cfg.get("task") is not None:
        yield cfg.task.name, cfg
        return
    overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith("task=")]
    for name in arm_tasks(cfg):
        yield name, compose_run(overrides + [f"task={name}"]).cfg


def run_app(cfg: DictConfig) -> None:
    """One composed configuration: its task, or every task of its arm."""
    from ..run.runner import execute

    if cfg.get("task") is not None:
        finish(execute(cfg))
        return
    statuses = {}
    for name, task_cfg in each_task(cfg):
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


def show_app(cfg: DictConfig) -> None:
    """``--cfg run``: each run's resolved settings and parameter count (a YAML document per task), nothing run."""
    from .show import show

    for i, (_, task_cfg) in enumerate(each_task(cfg)):
        if i:
            print("---")
        if status := show(task_cfg):
            sys.exit(status)


SHOW_FLAGS = (["--cfg", "run"], ["-c", "run"], ["--cfg=run"])


def take_show_flag(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--cfg run`` (Hydra's ``--cfg`` takes job, hydra or all; ``run`` is this command's), and
    whether it was there."""
    for flag in SHOW_FLAGS:
        for i in range(len(argv) - len(flag) + 1):
            if argv[i : i + len(flag)] == flag:
                return argv[:i] + argv[i + len(flag) :], True
    return argv, False


def main(script: str | None = None) -> None:
    """``lra-run``; experiments/run.py passes its own path as ``script`` (it must be this checkout's)."""
    if wants_help(sys.argv[1:]):
        print(page(RUN, invoked_as("lra-run"), CONF_DIR), end="")
        return
    if script is not None:
        require_same_checkout(script)
    prog = "experiments/run.py" if script else "lra-run"
    conf = config_dir(prog, "config")
    argv, show = take_show_flag(sys.argv[1:])
    if show and any(arg in ("-m", "--multirun") for arg in argv):
        fail(f"{prog}: error: --cfg run shows the settings of one run (or of each task of an arm); leave out -m")
    if mistake := command_line_problem(argv, Path(conf)):
        fail(f"{prog}: error: {mistake}")
    import hydra

    sys.argv[1:] = argv
    hydra.main(version_base="1.3", config_path=conf, config_name="config")(show_app if show else run_app)()


if __name__ == "__main__":
    main()

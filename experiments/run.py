"""Train an arm on a task: ``python experiments/run.py arm=locality_k61 task=listops profile=smoke``.

With ``task`` omitted, the arm runs every task it defines in turn, one record
each, skipping (with one line) a task whose data is absent. Config groups live
in experiments/conf (arm/, task/, profile/); add your own arm with
``--config-dir my_conf`` (a folder holding ``arm/<name>.yaml``).
"""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from repro.runner import arm_tasks, execute  # noqa: E402


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    if cfg.get("task") is not None:
        status = execute(cfg)
        if status not in (0,):
            sys.exit(status)
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
    print(f"arm {cfg.arm.name}: {len(statuses) - len(failed) - len(skipped)} task(s) done"
          + (f", skipped (no data): {', '.join(skipped)}" if skipped else "")
          + (f", failed: {', '.join(failed)}" if failed else ""))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

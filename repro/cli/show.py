"""``lra-run ... --cfg run``: a run's resolved settings, as its config.yaml will hold them (less the run's
fingerprint, which needs the data), and its parameter count (``repro.run.footprint``: the model built on
the CPU for the task's shape alone), without data, training or writing anything.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from ..run import validate
from ..run.footprint import parameter_count
from ..run.settings import command_line_task_keys, resolve


def described(cfg: DictConfig, run: dict | None = None) -> str:
    """The run's config.yaml text followed by ``parameters: N`` (one YAML document); ``run``: ``cfg`` resolved
    (resolved here when not given)."""
    run = resolve(cfg, command_line_task_keys()) if run is None else run
    return OmegaConf.to_yaml(OmegaConf.create(run)) + f"parameters: {parameter_count(run)}\n"


@validate.refusing_bad_input
def show(cfg: DictConfig, run: dict | None = None) -> int:
    """Print ``described(cfg)`` after the run's own checks (``run``: the run they resolved); 0, or 2 (one line)
    on bad input."""
    print(described(cfg, run), end="")
    return 0

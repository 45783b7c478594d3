"""``lra-run ... --cfg run``: a run's resolved settings, as its config.yaml will hold them (less the run's
fingerprint, which needs the data), and its parameter count, without data, training or writing anything.

The model is built on the CPU as the runner builds it (``repro.run.runner.execute``: the arm's model sized for the
task, the techniques' extra tokens and modules attached), for a task described by its shape alone
(``task_shape``: what ``build_model`` reads of a task, from the task's configuration, by the ``shape`` its
module registers, with empty splits), so no data is read, generated or cached.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from ..followup.techniques import build_train_augment
from ..models.model import build_model
from ..run import validate
from ..run.settings import command_line_task_keys, resolve
from ..tasks import TaskData, load_all


def task_shape(task_cfg: dict) -> TaskData:
    """A task with no examples, sized as its builder sizes it (the ``shape`` its module registers)."""
    builder = task_cfg.get("builder", task_cfg["name"])
    table = load_all()
    if builder not in table:
        raise ValueError(f"task.builder={builder!r}: no such task module; choose one of: {', '.join(table.names())}")
    return table.get(builder).shape(task_cfg)


def parameter_count(run: dict) -> int:
    """The parameters of the model the run ``run`` (a resolved run) trains, techniques' modules included."""
    task = task_shape(run["task"])
    augment = build_train_augment(run["techniques"], task)
    model = build_model(run["model"], augment.model_task(task) if augment else task)
    if augment is not None:
        augment.attach(model)
    return sum(p.numel() for p in model.parameters())


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

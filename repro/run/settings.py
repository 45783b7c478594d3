"""A run's settings: its Hydra configuration composed (``compose_run``) and resolved (``resolve``).

``CONF_DIR`` is the checkout's ``experiments/conf``, where every command finds its configuration.
``compose_run`` is the one place a configuration is composed from overrides (a run, a grid's cell, a
protocol, a benchmark row, the settings a run would have without its typed keys); inside a running Hydra
app it composes from the app's search path, else from ``conf_dir``.

Precedence of settings, lowest first (ARCHITECTURE.md, "Configs say deltas"):
arm defaults < the arm's per-task block < the techniques' per-task block
(``techniques.tasks.<task>.task`` / ``.train``) < the task YAML's block for the profile run
(``profiles.<profile>``, not itself recorded) < the profile < the command line's
top-level ``model`` / ``train`` blocks and its ``task.<key>`` settings. A profile's ``model`` block only
shrinks keys the arm already has (so ``smoke`` never adds a key a backbone
does not know).

Techniques (experiments/conf/techniques/): the command line's ``techniques=NAME`` wins;
otherwise the arm's own choice (an ``override /techniques@_global_.techniques: NAME``
line in its defaults list); otherwise ``none`` (config.yaml).

Hydra and OmegaConf are imported inside the functions, so the commands' help pages can name
``CONF_DIR`` before either loads.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from omegaconf import DictConfig

CONF_DIR = Path(__file__).resolve().parents[2] / "experiments" / "conf"


@contextmanager
def hydra_context(conf_dir: Path = CONF_DIR) -> Iterator[None]:
    """Hydra's compose API: the running app's search path when there is one, else ``conf_dir``."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
        yield


@dataclass
class ComposedRun:
    """A composed configuration (``cfg``) and, resolved from it on first use and kept, its run (``run``)."""

    cfg: DictConfig
    typed_task: tuple[str, ...] = ()

    @functools.cached_property
    def run(self) -> dict:
        return resolve(self.cfg, list(self.typed_task))


def compose_run(
    overrides: Sequence[str], config_name: str = "config", conf_dir: Path = CONF_DIR, typed_task: bool = False
) -> ComposedRun:
    """The configuration ``overrides`` compose (under ``config_name``) and its resolved run.

    ``typed_task``: ``overrides`` stand for a command line, so their ``task.<key>`` settings win over every
    layer (``typed_task_paths``); else the composed task block is merged as any other layer."""
    from hydra import compose

    overrides = list(overrides)
    with hydra_context(conf_dir):
        cfg = compose(config_name=config_name, overrides=overrides)
    return ComposedRun(cfg, tuple(typed_task_paths(overrides)) if typed_task else ())


def _plain(node) -> dict:
    """A block of settings as a plain dict, its interpolations resolved where it stands in the
    composed config (``${budget.minutes}``); {} for an absent block."""
    from omegaconf import DictConfig, OmegaConf

    if node is None:
        return {}
    return cast(dict, OmegaConf.to_container(node, resolve=True)) if isinstance(node, DictConfig) else dict(node)


def merge_settings(*layers: dict, typed: DictConfig | None = None, typed_paths: Sequence[str] = ()) -> dict:
    """The one way settings merge: ``layers``, lowest first, merged by OmegaConf (a block merges key
    by key; a value or a list replaces). Then the command line's typed ``task.<path>`` settings
    (``typed_paths``, values read from ``typed``, the task block Hydra composed; ``~path``: a deletion)
    are set again: they win over every layer (module docstring). A typed path must run through blocks.
    """
    from omegaconf import DictConfig, ListConfig, OmegaConf

    merged = cast(dict, OmegaConf.to_container(OmegaConf.merge(*(OmegaConf.create(layer or {}) for layer in layers))))
    for path in typed_paths:
        delete = path.startswith("~")
        *parents, leaf = path.lstrip("~").split(".")
        tree: dict[str, Any] = merged
        for key in parents:
            if not isinstance(tree.get(key, {}), dict):
                raise ValueError(
                    f"task.{path.lstrip('~')}: {key!r} is not a block of settings; "
                    f"set the whole value instead (task.{'.'.join(parents)}=...)"
                )
            tree = tree.setdefault(key, {})
        if delete:
            tree.pop(leaf, None)
            continue
        value = OmegaConf.select(cast(DictConfig, typed), path)
        is_node = isinstance(value, (DictConfig, ListConfig))
        tree[leaf] = OmegaConf.to_container(value, resolve=True) if is_node else value
    return merged


def arm_tasks(cfg: DictConfig) -> list[str]:
    """The tasks the arm has a ``tasks.<task>`` block for (none when it has no ``tasks`` block)."""
    return list((cfg.arm.get("tasks") or {}).keys())


def typed_task_paths(overrides: list[str]) -> list[str]:
    """The ``task`` settings named by command-line overrides, as paths below ``task``.

    A block typed as a whole (``task.generate={padding: 2}``) names its leaves
    (``generate.padding``), so the keys it leaves out keep their merged values; an empty
    block (``task.generate={}``) names none, as Hydra merges nothing from it; a deletion
    (``~task.x``) gives ``~x``.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    def leaves(path: str, value) -> list[str]:
        if isinstance(value, dict):
            return [leaf for key, item in value.items() for leaf in leaves(f"{path}.{key}", item)]
        return [path]

    paths = []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if not key.startswith("task."):
            continue
        path = key[len("task.") :]
        paths += [f"~{path}"] if override.is_delete() else leaves(path, override.value())
    return paths


def command_line_task_keys() -> list[str]:
    """``typed_task_paths`` of the command line (Hydra's overrides), when running under Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return typed_task_paths(HydraConfig.get().overrides.task)


def resolve(cfg: DictConfig, command_line_task: list[str] | None = None) -> dict:
    """The full settings of the run ``cfg`` describes (``cfg.task`` selected).

    ``command_line_task``: the ``task.<key>`` paths typed on the command line. They win over
    every layer (an arm's, the techniques' or the profile's per-task block), so
    ``task.difficulty=hard techniques=followup`` trains on hard although the techniques say all.
    """
    task_name = cfg.task.name
    arm = cfg.arm
    if task_name not in arm_tasks(cfg):
        raise KeyError(
            f"arm {arm.name!r} defines no settings for task {task_name!r}; it defines: "
            f"{', '.join(arm_tasks(cfg)) or 'none'} (each task an arm runs has a tasks.<task> block, {{}} at least)"
        )
    per_task = _plain(arm.tasks[task_name])
    profile = cfg.profile
    arm_model = merge_settings(_plain(arm.model), per_task.get("model", {}))
    profile_model = {k: v for k, v in _plain(profile.get("model")).items() if k in arm_model}
    model = merge_settings(arm_model, profile_model, _plain(cfg.get("model")))
    techniques = _plain(cfg.get("techniques"))
    technique_task = _plain(techniques.get("tasks", {})).get(task_name) or {}
    train_cfg = merge_settings(
        _plain(arm.train),
        per_task.get("train", {}),
        technique_task.get("train", {}),
        _plain(profile.get("train")),
        _plain(cfg.get("train")),
    )
    task_yaml = _plain(cfg.task)
    own_profile = (task_yaml.pop("profiles", None) or {}).get(profile.name, {})  # the task YAML's own, e.g. smoke
    task_cfg = merge_settings(
        task_yaml,
        per_task.get("task", {}),
        technique_task.get("task", {}),
        own_profile,
        _plain(profile.get("tasks", {})).get(task_name, {}),
        typed=cfg.task,
        typed_paths=command_line_task or [],
    )
    device = cfg.get("device") or profile.device
    subset = _plain(profile.get("subset")) or None
    return {
        "subset": subset,
        "arm": arm.name,
        "task": task_cfg,
        "profile": profile.name,
        "seed": int(cfg.seed),
        "model": model,
        "train": train_cfg,
        "device": device,
        "arm_source": arm.get("source"),
        "techniques": {
            "name": techniques.get("name", "none"),
            "augment": technique_task.get("augment", {}),
            "arm_default": arm.get("techniques_default", "none"),
        },
    }

"""Refuse bad input before any work: each mistake is one line naming the setting, its value and the fix.

``refusing_bad_input`` wraps ``runner.execute`` (and ``--cfg run``'s ``cli.show.show``), handing it the run
``check`` resolved. Before the run touches data, model or records it checks that

- every setting typed on the command line under ``model``, ``task``, ``train`` or ``budget``
  names a key the run has without the command line (``train``: ``TrainSettings``' fields;
  ``model.attention_params``: the keyword arguments of the arm's attention mechanism), so a
  typo such as ``+model.kernel_sise=9`` is refused with the closest valid key instead of being
  recorded and ignored;
- numbers are in range and integers where integers (``RULES``): ``seed >= 0``, ``epochs >= 1``,
  step counts ``>= 1``, ``budget.minutes > 0``. ``budget.minutes=null`` spells "no wall-clock
  cap"; 0 is refused (it used to mean no cap, silently);
- ``budget.minutes`` typed under a profile that does not read it (only ``profile=budget`` turns
  it into ``train.budget_minutes``) is refused: ``+train.budget_minutes=M`` caps any profile;
- an arm file's own top-level ``model`` or ``train`` key is not overridden, for the task run, by a
  per-task block the arm inherits (``base/locality`` sets ``depth`` per task): such a key would be
  recorded nowhere and trained with the inherited value; it belongs under ``tasks.<task>``;
- ``logger`` is ``none`` or ``tensorboard``, and ``tensorboard`` finds its package;
- a ``data_dir`` given on the command line (or by ``LRA_DATA_DIR``) holds the task's files: a
  task that can generate its data does so under ``task.source=auto`` only when no data folder
  was named, so a wrong path never turns silently into generated data (``task.source=generated``
  asks for it).

Every failure prints one line (``error: ...``) on stderr and the run exits with status 2. The
same holds for refused input found later (a malformed data file, a damaged record or
checkpoint, a setting a builder rejects): one line, no traceback; ``debug.traceback=true``
shows it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import math
import os
import sys
from pathlib import Path
from typing import cast

from omegaconf import DictConfig, OmegaConf

from ..records import DamagedRecord
from ..tasks import DataError, official_files_missing
from ..training import TrainSettings
from ..training.checkpoints import CorruptCheckpoint
from ..training.scalars import logger_problem
from .settings import compose_run, resolve, typed_task_paths

GROUPS = ("model", "task", "train", "budget")
EXIT_STATUS = 2


class BadInput(Exception):
    """A setting the run cannot take; the message is one line naming it and the fix."""


# ---------------------------------------------------------------- ranges


def is_int(value) -> bool:
    """A whole number, not a bool (which Python counts as an int)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return (is_int(value) or isinstance(value, float)) and math.isfinite(value)


INT_GE0 = ("an integer >= 0", lambda v: is_int(v) and v >= 0)
INT_GE1 = ("an integer >= 1", lambda v: is_int(v) and v >= 1)
INT_GE1_OR_NULL = ("an integer >= 1, or null", lambda v: v is None or (is_int(v) and v >= 1))
POSITIVE = ("a number > 0", lambda v: _is_number(v) and v > 0)
POSITIVE_OR_NULL = ("a number > 0, or null", lambda v: v is None or (_is_number(v) and v > 0))
NON_NEGATIVE = ("a number >= 0", lambda v: _is_number(v) and v >= 0)
FRACTION = ("a number in [0, 1)", lambda v: _is_number(v) and 0 <= v < 1)
MINUTES = ("a number > 0, or null for no wall-clock cap", POSITIVE_OR_NULL[1])
BOOLEAN = ("true or false", lambda v: isinstance(v, bool))
FRACTION_OR_NULL = ("a number in [0, 1), or null", lambda v: v is None or FRACTION[1](v))


def one_of(*choices: str) -> tuple:
    return (f"one of {', '.join(choices)}", lambda v: v in choices)


# Setting -> (what it must be, test), checked on the resolved run (keys a run lacks are skipped).
RULES = {
    "seed": INT_GE0,
    "workers": INT_GE1_OR_NULL,
    "budget.minutes": MINUTES,
    "train.budget_minutes": MINUTES,
    "budget.fraction": POSITIVE_OR_NULL,
    "train.budget_fraction": POSITIVE_OR_NULL,
    "budget.examples": INT_GE1_OR_NULL,
    "train.budget_examples": INT_GE1_OR_NULL,
    "train.epochs": INT_GE1,
    "train.max_steps": INT_GE1_OR_NULL,
    "train.stop_at_step": INT_GE1_OR_NULL,
    "train.batch_size": INT_GE1,
    "train.eval_batch_size": INT_GE1_OR_NULL,
    "train.lr": POSITIVE,
    "train.weight_decay": NON_NEGATIVE,
    "train.warmup_steps": INT_GE0,
    "train.eval_every_steps": INT_GE1_OR_NULL,
    "train.checkpoint_every_steps": INT_GE1_OR_NULL,
    "train.eval_every_seconds": POSITIVE_OR_NULL,
    "train.checkpoint_every_seconds": POSITIVE_OR_NULL,
    "train.log_every": INT_GE1,
    "train.grad_clip": POSITIVE_OR_NULL,
    "train.bucket_pool_batches": INT_GE1,
    "train.trim_multiple": INT_GE1,
    "train.final_phase": one_of("linear", "step"),
    "train.final_factor": POSITIVE,
    "train.plateau_threshold": NON_NEGATIVE,
    "train.plateau_min_lr": NON_NEGATIVE,
    "train.swa_start": FRACTION_OR_NULL,
    "train.swa_lr": POSITIVE,
    "train.swa_anneal_epochs": INT_GE0,
    "train.early_stop_patience": INT_GE1_OR_NULL,
    "train.no_decay": one_of("1d", "bias_norm_embedding"),
    **{f"train.{f.name}": BOOLEAN for f in dataclasses.fields(TrainSettings) if f.type == "bool"},  # every switch
    "task.data_seed": INT_GE0,
    "task.max_len": INT_GE1,
    **{f"task.generate.{key}": INT_GE1 for key in ("n_train", "n_val", "n_test", "n_per_difficulty")},
    **{f"model.{key}": INT_GE1 for key in ("d_model", "d_hidden", "d_ff", "depth", "n_heads", "kernel_size", "groups")},
    **{f"model.{key}": FRACTION for key in ("dropout", "attention_dropout")},
    "model.release_masking": BOOLEAN,
}


_ABSENT = object()


def _lookup(tree: dict, path: tuple):
    """The value at ``path`` through ``tree``'s blocks, or ``_ABSENT``."""
    node = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return _ABSENT
        node = node[key]
    return node


def out_of_range(settings: dict) -> list[str]:
    """One message per setting of ``settings`` (the resolved run plus ``budget``, ``workers``) that breaks ``RULES``."""
    found = []
    for name, (allowed, test) in RULES.items():
        value = _lookup(settings, tuple(name.split(".")))
        if value is not _ABSENT and not test(value):
            found.append(f"{name}={_show(value)}: must be {allowed}")
    return found


def _show(value) -> str:
    if value is None:
        return "null"
    return repr(value) if isinstance(value, str) else str(value)


# ---------------------------------------------------------------- typed keys


@dataclasses.dataclass(frozen=True)
class Typed:
    """One command-line setting under a group: ``text`` as typed, ``group`` and the ``path`` below it."""

    text: str
    group: str
    path: tuple[str, ...]


def _leaf_paths(path: tuple, value) -> list[tuple]:
    """The key paths of ``value``'s leaves below ``path`` (anything but a non-empty block is a leaf)."""
    if isinstance(value, dict) and value:
        return [leaf for key, item in value.items() for leaf in _leaf_paths((*path, str(key)), item)]
    return [path]


def typed_settings(overrides: list[str]) -> list[Typed]:
    """The command line's settings under ``model``, ``task``, ``train`` and ``budget`` (deletions and
    group choices such as ``task=listops`` left out); a block typed whole names each of its leaves."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    found = []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        group, _, rest = override.key_or_group.partition(".")
        if group not in GROUPS or override.is_delete() or (not rest and group == "task"):
            continue
        start = tuple(rest.split(".")) if rest else ()
        line = cast(str, override.input_line)
        found += [Typed(line, group, path) for path in _leaf_paths(start, override.value()) if path]
    return found


def unknown_key(tree: dict, path: tuple[str, ...]) -> tuple[int, list[str]] | None:
    """Where ``path`` leaves ``tree``: (index of the first missing key, the keys present there), or None."""
    node = tree
    for depth, key in enumerate(path):
        if not isinstance(node, dict):
            return None  # below a value (a list item): not a key of the settings
        if key not in node:
            return depth, sorted(map(str, node))
        node = node[key]
    return None


def attention_keywords(model: dict) -> list[str] | None:
    """The keyword arguments ``model.attention_params`` may hold for the arm's attention mechanism."""
    if model.get("backbone") != "lra_transformer" or "attention" not in model:
        return None
    from ..original.attention import load_all

    try:
        cls = load_all().get(model["attention"])
    except KeyError:
        return None
    fixed = {"self", "d_model", "n_heads", "max_len", "dropout"}
    return sorted(p for p in inspect.signature(cls).parameters if p not in fixed)


def valid_keys(base: dict) -> dict:
    """Per group, the settings a typed key may name: the run's own without the command line."""
    train_fields = {f.name: None for f in dataclasses.fields(TrainSettings)}
    model = dict(base["model"])
    keywords = attention_keywords(model)
    if keywords is not None:
        model["attention_params"] = dict.fromkeys(keywords)
    return {"model": model, "task": base["task"], "train": {**train_fields, **base["train"]}, "budget": base["budget"]}


def unknown_typed_keys(typed: list[Typed], valid: dict, where: str) -> list[str]:
    """One message per typed setting naming a key its group lacks, with the closest valid key."""
    found = []
    for item in typed:
        missing = unknown_key(valid[item.group], item.path)
        if missing is None:
            continue
        depth, present = missing
        parent = ".".join((item.group, *item.path[:depth]))
        key = item.path[depth]
        close = difflib.get_close_matches(key, present, n=1, cutoff=0.6)
        hint = f"did you mean {parent}.{close[0]}?" if close else "no key is close"
        found.append(
            f"{item.text}: {parent} has no key {key!r} {where}; {hint} "
            f"(valid: {', '.join(present) if present else 'none'})"
        )
    return found


# ---------------------------------------------------------------- the checks


def typed_overrides() -> list[str]:
    """The command line's overrides, when running under Hydra (else none)."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def base_settings(cfg: DictConfig, overrides: list[str]) -> dict:
    """The resolved run (and ``budget``) that ``cfg`` gives without its typed group settings.

    Composed again from the same config groups (arm, task, profile, techniques, ...) by Hydra,
    so a key the task's own YAML declares counts as existing even when typed with ``++``."""
    from hydra.core.hydra_config import HydraConfig

    kept = [o for o in overrides if o.lstrip("+~").split("=")[0].split(".")[0] not in GROUPS or o.startswith("task=")]
    if not any(o.startswith("task=") for o in kept):
        kept.append(f"task={cfg.task.name}")  # a run of each of an arm's tasks in turn
    name = (HydraConfig.get().job.config_name if HydraConfig.initialized() else None) or "config"
    base = compose_run(kept, config_name=name)
    return {**base.run, "budget": _plain(base.cfg.get("budget"))}


def _plain(node) -> dict:
    return cast(dict, OmegaConf.to_container(node, resolve=True)) if isinstance(node, DictConfig) else dict(node or {})


def data_dir_given(overrides: list[str]) -> bool:
    """Whether the run names its data folder: ``data_dir=`` typed, or ``LRA_DATA_DIR`` set."""
    return bool(os.environ.get("LRA_DATA_DIR")) or any(o.lstrip("+").startswith("data_dir=") for o in overrides)


def check(cfg: DictConfig, overrides: list[str] | None = None) -> dict:
    """The run ``cfg`` (typed as ``overrides``) resolves to; raise BadInput (one line per problem) when it
    cannot be run."""
    overrides = typed_overrides() if overrides is None else overrides
    top = {"seed": cfg.get("seed"), "workers": cfg.get("workers"), "budget": _plain(cfg.get("budget"))}
    problems = out_of_range(top)
    if logger := logger_problem(cfg.get("logger", "none")):
        problems.append(logger)
    if problems:  # resolving reads seed as an integer: stop here
        raise BadInput("\n".join(problems))
    try:
        run = resolve(cfg, typed_task_paths(overrides))
    except (KeyError, ValueError) as err:
        raise BadInput(_message(err)) from None
    typed = typed_settings(overrides)
    if typed:
        where = f"(arm {run['arm']}, task {run['task']['name']}, profile {run['profile']})"
        problems += unknown_typed_keys(typed, valid_keys(base_settings(cfg, overrides)), where)
    if missing := TrainSettings.missing_keys_problem(run["train"]):
        raise BadInput(missing)  # the checks below read those keys
    problems += out_of_range({**run, "budget": top["budget"]})
    problems += budget_not_read(cfg, run, typed)
    problems += shadowed_arm_keys(arm_file(), cfg.arm, run["task"]["name"])
    if not problems and data_dir_given(overrides):
        problems += data_not_there(run, Path(cfg.data_dir))
    if problems:
        raise BadInput("\n".join(problems))
    return run


def arm_file() -> Path | None:
    """The YAML file Hydra read the run's arm from (the first config source holding it); None when
    not running under Hydra's command line."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    runtime = HydraConfig.get().runtime
    choice = runtime.choices.get("arm")
    for source in runtime.config_sources:
        path = Path(source.path) / "arm" / f"{choice}.yaml"
        if source.schema == "file" and path.is_file():
            return path
    return None


def _own_leaves(raw, resolved, prefix: tuple = ()) -> list[tuple]:
    """The key paths an arm file sets (``raw``, unresolved), down to the leaves of the resolved values."""
    if isinstance(raw, dict):
        below = resolved if isinstance(resolved, dict) else {}
        return [path for k, v in raw.items() for path in _own_leaves(v, below.get(k), (*prefix, k))]
    return _leaf_paths(prefix, resolved)  # a value, or an interpolation resolving to a block: its leaves


def _reach(tree, path: tuple) -> tuple[tuple | None, object]:
    """The part of ``path`` that ``tree`` sets, with its value: the whole path, or a shorter one whose value
    is not a block (it replaces the block below, as blocks merge; in an unresolved block, an interpolation
    of the whole); (None, None) where ``tree`` sets neither."""
    for i, key in enumerate(path):
        if not isinstance(tree, dict):
            return path[:i], tree
        if key not in tree:
            return None, None
        tree = tree[key]
    return path, tree


def shadowed_arm_keys(path: Path | None, arm: DictConfig, task: str) -> list[str]:
    """Settings the arm file ``path`` sets in its top-level ``model`` / ``train`` blocks that a per-task
    block the arm inherits (from its defaults list) sets to another value on ``task``: the file's value
    would never train. Compared leaf by leaf on the resolved settings, as blocks merge key by key; what
    the file also sets under ``tasks.<task>`` (an interpolated block included) is its own choice."""
    if path is None or task not in (arm.get("tasks") or {}):
        return []
    own = cast(dict, OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {})
    own_tasks = own.get("tasks") or {}
    own_task = own_tasks.get(task) if isinstance(own_tasks, dict) else None
    if not isinstance(own_tasks, dict) or (own_task is not None and not isinstance(own_task, dict)):
        return []  # the per-task blocks are the file's own (an interpolation)
    per_task = _plain(arm.tasks[task])
    problems: dict[str, str] = {}
    for group in ("model", "train"):
        resolved, inherited = _plain(arm.get(group)), per_task.get(group) or {}
        mine = (own_task or {}).get(group, {})
        for leaf in _own_leaves(own.get(group) or {}, resolved):
            where, theirs = _reach(inherited, leaf)
            if where is None or _reach(mine, where)[0] is not None:  # unset, or the file's own per-task choice
                continue
            ours = _lookup(resolved, where)
            if theirs != ours:
                key = ".".join((group, *map(str, where)))
                problems[key] = (
                    f"{path}: {key}={_show(ours)} is overridden on task {task} by the per-task block arm "
                    f"{arm.name} inherits ({key}={_show(theirs)}); set it under tasks.{task}.{key} in that file, "
                    "for each task it should change"
                )
    return list(problems.values())


def budget_not_read(cfg: DictConfig, run: dict, typed: list[Typed]) -> list[str]:
    """``budget.<key>`` typed where the profile does not make it the run's ``train.budget_<key>``."""
    problems = []
    for key in ("minutes", "fraction", "examples"):
        if not any(t.group == "budget" and t.path == (key,) for t in typed):
            continue
        value, used = cfg.budget.get(key), run["train"].get(f"budget_{key}")
        purpose = "cap this run" if key == "minutes" else "budget this run by examples"
        if used != value:
            problems.append(
                f"budget.{key}={_show(value)}: profile {run['profile']} does not read budget.{key} (its "
                f"train.budget_{key} is {_show(used)}); only profile=budget does: pass profile=budget, "
                f"or +train.budget_{key}={_show(value)} to {purpose}"
            )
    return problems


def data_not_there(run: dict, data_dir: Path) -> list[str]:
    """A named data folder without the task's files, where ``task.source=auto`` would generate instead."""
    task = run["task"]
    if task.get("source") != "auto":
        return []
    missing = official_files_missing(task.get("builder", task["name"]), task, data_dir)
    if missing is None:
        return []
    return [
        f"data_dir={data_dir} lacks the {task['name']} files ({missing}); with a data folder named, "
        "task.source=auto does not generate data: put the files there, or pass task.source=generated "
        "to generate them"
    ]


# ---------------------------------------------------------------- the wrapper

# Refused input found after the checks: settings a builder rejects (ValueError, KeyError: their
# messages name the setting), malformed data, damaged records and checkpoints.
USER_ERRORS = (BadInput, DataError, DamagedRecord, CorruptCheckpoint, ValueError, KeyError)


def _message(err: BaseException) -> str:
    text = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
    return str(text)


def refused(err: BaseException, traceback: bool = False, suffix: str = "") -> int:
    """Refused input ``err`` as every command answers it: ``error: <message><suffix>`` on stderr (a BadInput:
    one such line per problem; any other message on one line), once (rank 0), and the exit status 2. With
    ``traceback`` (``debug.traceback=true``, ``--debug``) ``err`` is raised again instead, with its traceback.
    Call it from the ``except`` clause that caught ``err``; exit status 1 is left to bugs."""
    if traceback:
        raise err
    if os.environ.get("RANK", "0") == "0":
        message = _message(err) or type(err).__name__
        for line in message.splitlines() if isinstance(err, BadInput) else [" ".join(message.split())]:
            print(f"error: {line}{suffix}", file=sys.stderr, flush=True)
    return EXIT_STATUS


def refusing_bad_input(execute):
    """``execute(cfg, run) -> status`` run on ``cfg`` and the run ``check`` resolved, turning refused input into
    one line per problem on stderr and exit status 2 (``refused``; ``debug.traceback=true``: the traceback)."""

    @functools.wraps(execute)
    def checked(cfg: DictConfig) -> int:
        try:
            return execute(cfg, check(cfg))
        except USER_ERRORS as err:
            return refused(err, cfg.get("debug") is not None and bool(cfg.debug.get("traceback")))

    return checked

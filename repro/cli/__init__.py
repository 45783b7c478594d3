"""Command-line entry points (``[project.scripts]`` in pyproject.toml): ``lra-run``, ``lra-bench``, and where
they find their Hydra configuration: experiments/conf of the checkout.

experiments/run.py and experiments/bench.py are thin wrappers around the same ``main()``s. Before Hydra
composes a run, ``command_line_problem`` answers the common mistakes in one line (below). Each command's
``--help`` page is printed before torch or Hydra is imported (``usage.py``).

The configs stay in the checkout (users add arms there, or pass ``--config-dir``), so
``lra-run`` and ``lra-bench`` need the package installed editable (``pip install -e .``),
which leaves it in the checkout, next to experiments/.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

from ..invocation import fail
from ..run.settings import CONF_DIR

CHECKOUT = Path(__file__).resolve().parents[2]


def config_dir(prog: str, config_name: str, conf: Path = CONF_DIR) -> str:
    """``conf`` as a path for ``hydra.main``; exits 2 naming the fix when it lacks ``<config_name>.yaml``."""
    if not (conf / f"{config_name}.yaml").is_file():
        fail(
            f"{prog}: no {config_name}.yaml under {conf}: the Hydra configs live in the checkout's experiments/conf, "
            "so install the checkout editable (pip install -e <checkout>) or run the experiments/ script from it"
        )
    return str(conf)


def require_same_checkout(script: str) -> None:
    """Exit 2 when the experiments/ ``script`` belongs to another checkout than the imported package
    (which would run that checkout's code and configs)."""
    here = Path(script).resolve().parents[1]
    if here != CHECKOUT:
        fail(
            f"{Path(script).name}: `import repro` gives {CHECKOUT / 'repro'}, not this checkout's: "
            f"run `pip install -e .` in {here} (or set PYTHONPATH={here})"
        )


def dispatch(prog: str, doc: str, commands: dict, argv: list[str]) -> int:
    """A script of subcommands (``prog COMMAND [options]``): ``-h``/``--help`` prints ``doc``; no or an
    unknown command is one usage line on stderr, exit status 2; else the command's exit status (None: 0)."""
    if argv[:1] in (["-h"], ["--help"]):
        print(doc)
        return 0
    if not argv or argv[0] not in commands:
        print(f"usage: {prog} {{{','.join(commands)}}} [options] (--help: what each does)", file=sys.stderr)
        return 2
    status = commands[argv[0]](argv[1:])
    return 0 if status is None else status


# --------------------------------------------------------------------------- the run command line
# Mistakes Hydra would answer with a multi-line error, answered in one line first (``lra-run`` and
# experiments/run.py, before Hydra composes): a config group value with no file (``arm=megaa``; also
# task, profile, techniques, and each value of a sweep such as ``arm=a,b``), looked up in
# experiments/conf and every ``--config-dir``; a setting under ``train.`` or ``model.`` typed
# without ``+`` (config.yaml holds both blocks empty, the arm and profile fill them, so Hydra refuses
# ``train.lr=0.1``; the fix is ``+train.lr=0.1``); and a plain key config.yaml lacks (``lr=0.1``: a
# training or model setting, named with its block and the +; any other with the settings there are).

GROUPS = ("arm", "task", "profile", "techniques")
ADDED_BLOCKS = ("train.", "model.")


def config_dirs(argv: list[str], conf: Path) -> list[Path]:
    """``conf`` and the folders given with ``--config-dir`` / ``-cd`` or ``--config-path`` / ``-cp``
    (``DIR`` or ``=DIR``)."""
    dirs = [conf]
    for i, arg in enumerate(argv):
        if arg in ("--config-dir", "-cd", "--config-path", "-cp") and i + 1 < len(argv):
            dirs.append(Path(argv[i + 1]))
        elif arg.startswith(("--config-dir=", "--config-path=")):
            dirs.append(Path(arg.split("=", 1)[1]))
    return dirs


def group_options(group: str, dirs: list[Path]) -> list[str]:
    return sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml")})


def top_level_keys(conf: Path) -> list[str]:
    """The settings config.yaml holds at its top level, its config groups and ``hydra``."""
    import yaml

    config = yaml.safe_load((conf / "config.yaml").read_text()) or {}
    choices = [next(iter(item)) for item in config.get("defaults", []) if isinstance(item, dict)]
    groups = [name.split("@")[0] for name in choices if not name.startswith(("override ", "hydra/"))]
    return sorted({*(k for k in config if k != "defaults"), *groups, "hydra"})


def _model_keys(node, found: set[str]) -> None:
    """Every key of a ``model`` block anywhere in an arm or profile file's tree ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "model" and isinstance(value, dict):
                found.update(map(str, value))
            _model_keys(value, found)


def block_keys(dirs: list[Path]) -> dict[str, set[str]]:
    """Per block (``train``, ``model``): the keys a run's block can hold: the training settings' fields; the keys
    the arm, base and profile files of ``dirs`` give models."""
    import dataclasses

    import yaml

    from ..training.settings import TrainSettings

    model: set[str] = set()
    for path in sorted(p for d in dirs for group in ("arm", "base", "profile") for p in (d / group).glob("*.yaml")):
        try:
            _model_keys(yaml.safe_load(path.read_text()), model)
        except yaml.YAMLError:
            continue  # Hydra names the file when it composes
    return {"train": {f.name for f in dataclasses.fields(TrainSettings)}, "model": model}


def plain_key_problem(arg: str, key: str, dirs: list[Path]) -> str | None:
    """A plain ``key=value`` whose first key config.yaml lacks: the block that has it and the fix, or the
    top-level settings there are."""
    if key.startswith(("+", "~")) or "/" in key or "@" in key:
        return None  # added or deleted with Hydra's own syntax, or a config group of Hydra's
    top = key.split(".")[0]
    settings = top_level_keys(dirs[0])
    if top in settings:
        return None
    blocks = [name for name, keys in block_keys(dirs).items() if top in keys]
    if blocks:
        fixes = " or ".join(f"+{name}.{arg}" for name in blocks)
        kind = " and ".join({"train": "a training", "model": "a model"}[name] for name in blocks)
        return (
            f"{arg}: {top} is {kind} setting; set it with {fixes} (settings under train and model are added to "
            "the arm's with a leading +)"
        )
    close = difflib.get_close_matches(top, settings, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    return (
        f"{arg}: no setting {top!r} in {dirs[0] / 'config.yaml'}; {hint}the settings: {', '.join(settings)} "
        "(training and model settings: +train.KEY=VALUE, +model.KEY=VALUE)"
    )


def command_line_problem(argv: list[str], conf: Path) -> str | None:
    """The first mistake on the command line ``argv`` (the arguments after the script), or None."""
    if any(arg.startswith(("hydra.searchpath", "+hydra.searchpath")) for arg in argv):
        return None  # groups may come from anywhere: leave the lookup to Hydra
    dirs = config_dirs(argv, conf)
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or arg.startswith("-"):
            continue
        if key.startswith(ADDED_BLOCKS):
            return f"{arg}: settings under {key.split('.')[0]} are added to the arm's with a leading +: +{arg}"
        if problem := plain_key_problem(arg, key, dirs):
            return problem
        if key in GROUPS and value not in ("null", "") and "(" not in value:  # choice(...), glob(...): Hydra's
            options = group_options(key, dirs)
            unknown = [v for v in value.split(",") if v not in options]
            if unknown:
                where = " or ".join(str(d / key) for d in dirs)
                return f"{key}={unknown[0]}: no {unknown[0]}.yaml in {where}; choose one of: {', '.join(options)}"
            for path in (d / key / f"{v}.yaml" for v in value.split(",") for d in dirs):
                if path.is_file() and (problem := group_file_problem(path, key) or arm_model_key_problem(path, conf)):
                    return problem
    return None


def arm_model_key_problem(path: Path, conf: Path) -> str | None:
    """An arm file of one's own (outside ``conf``) whose ``model`` block, or a ``tasks.<task>.model`` block,
    names a key no model setting of ``conf``'s files has (``d_modle``): the model builders read the keys they
    know and would leave it unread, trained with the default."""
    import yaml

    if path.parent.parent.resolve() == conf.resolve() or path.parent.name != "arm":
        return None
    arm = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    tasks = arm.get("tasks") if isinstance(arm.get("tasks"), dict) else {}
    per_task = ((f"tasks.{t}.model", b.get("model")) for t, b in tasks.items() if isinstance(b, dict))
    blocks = [("model", arm.get("model")), *per_task]
    known = sorted(block_keys([conf])["model"])
    for where, block in blocks:
        for key in block if isinstance(block, dict) else ():
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]}? " if close else ""
                return (
                    f"{path}: {where}.{key}: no model setting {key!r}; {hint}correct the key in that file (the "
                    f"model settings: {', '.join(known)})"
                )
    return None


def group_file_problem(path: Path, group: str) -> str | None:
    """A config group's file that is not a YAML mapping (a syntax error, a list or a bare value), named with the
    line where its parser stopped; Hydra would answer it with a traceback."""
    import yaml

    try:
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        return f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); save the file as UTF-8"
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        what = getattr(err, "problem", None) or str(err).splitlines()[0]
        return f"{path}{line}: not valid YAML ({what}); correct the file's syntax there"
    if content is not None and not isinstance(content, dict):
        return (
            f"{path}: holds a {type(content).__name__}, not a mapping of settings; a config group's file is a YAML "
            f"mapping (key: value lines), as those in experiments/conf/{group}/ are"
        )
    return None

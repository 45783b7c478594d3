"""How much of the papers' protocol a record ran: training examples trained over the protocol's.

The protocol of an (arm, task, techniques) is the arm's ``profile=paper`` settings (the papers'
epochs, batch and step cap per task: Tay et al. 2021, appendix A and the release configs; the
follow-up study, Tables 5-7), composed from ``experiments/conf`` and resolved as the runner
resolves a run (``repro.run.settings``). Its training examples are ``steps x batch`` with
``steps = min(epochs x (n_train // batch), max_steps)``, the count ``repro.training`` plans (the
last partial batch of an epoch is dropped). ``n_train`` is the paper profile's generated
training-set size for a generated task (``task.generate.n_train``), else the training-set size
the record's data describes (``data.sizes.train``: the files are the same under every profile).

A record's examples are ``steps x batch_size`` from its ``metrics.json`` (``train_settings``,
the global batch under several processes). Its budget is ``budget_fraction`` of the protocol
when the record has that field, else a wall-clock cap (``budget_minutes``), else none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .settings import CONF_DIR, compose_run


class ProtocolUnknown(Exception):
    """The protocol of a record cannot be composed; the message says why."""


@dataclass(frozen=True)
class Protocol:
    """The papers' training length for one (arm, task, techniques): the paper profile's settings."""

    epochs: int
    max_steps: int | None
    batch_size: int
    generated_n_train: int | None  # the paper profile's task.generate.n_train, when the task is generated

    def steps(self, n_train: int) -> int:
        planned = self.epochs * (n_train // self.batch_size)
        return min(planned, self.max_steps) if self.max_steps is not None else planned

    def examples(self, n_train: int) -> int:
        return self.steps(n_train) * self.batch_size


def paper_protocol(
    arm: str, task: str, techniques: str = "none", conf_dir: Path = CONF_DIR, arm_dirs: tuple[str, ...] = ()
) -> Protocol:
    """The paper profile's epochs, step cap and batch of ``arm`` on ``task`` with ``techniques``; ``arm_dirs``:
    config folders searched after ``conf_dir`` (an arm of your own, as ``--config-dir`` gives it). Inside a
    run (``budget.fraction``), Hydra is initialised already: the run's own config search path is composed
    from, and the result is cached per search path."""
    from hydra.core.global_hydra import GlobalHydra

    running = GlobalHydra.instance()
    sources = None
    if running.is_initialized():
        if arm_dirs:
            raise ProtocolUnknown("arm_dirs name config folders of their own; inside a run its search path is used")
        sources = tuple(f"{s.scheme()}://{s.path}" for s in running.config_loader().get_sources())
    return _paper_protocol(arm, task, techniques, Path(conf_dir), tuple(str(d) for d in arm_dirs), sources)


@cache
def _paper_protocol(
    arm: str, task: str, techniques: str, conf_dir: Path, arm_dirs: tuple[str, ...], sources: tuple[str, ...] | None
) -> Protocol:
    """``paper_protocol``; ``sources``: the running Hydra's config sources (None: none running), part of the key."""
    if not (conf_dir / "config.yaml").is_file():
        raise ProtocolUnknown(
            f"{conf_dir}/config.yaml not found: the protocol is read from a checkout's experiments/conf"
        )
    from hydra.errors import HydraException

    overrides = [f"arm={arm}", f"task={task}", "profile=paper", f"techniques={techniques}"]
    search = [f"hydra.searchpath=[{','.join(f'file://{Path(d).resolve()}' for d in arm_dirs)}]"] if arm_dirs else []
    try:  # inside a run (sources given) arm_dirs is empty and the running app's search path is used
        run = compose_run(overrides + search, conf_dir=conf_dir).run
    except (HydraException, KeyError) as err:
        raise ProtocolUnknown(f"{' '.join(overrides)}: {str(err).splitlines()[0]}") from None
    train, generate = run["train"], (run["task"].get("generate") or {})
    return Protocol(
        int(train["epochs"]),
        None if train.get("max_steps") is None else int(train["max_steps"]),
        int(train["batch_size"]),
        int(generate["n_train"]) if "n_train" in generate else None,
    )


def trained_examples(metrics: dict) -> int | None:
    """Training examples a record ran: steps x its global batch (None when the record lacks either)."""
    batch = (metrics.get("train_settings") or {}).get("batch_size")
    steps = metrics.get("steps")
    return int(steps) * int(batch) if steps is not None and batch else None


def protocol_n_train(metrics: dict, protocol: Protocol) -> int | None:
    """The training-set size the protocol's epochs run over (module docstring)."""
    data = metrics.get("data") or {}
    if data.get("source") == "generated" and protocol.generated_n_train is not None:
        return protocol.generated_n_train
    size = (data.get("sizes") or {}).get("train")
    return int(size) if size is not None else None


def share(
    metrics: dict,
    arm: str,
    task: str,
    techniques: str = "none",
    conf_dir: Path = CONF_DIR,
    arm_dirs: tuple[str, ...] = (),
) -> tuple[float, str]:
    """(examples trained / the protocol's, "" or why it is unknown) of one record; NaN when unknown."""
    try:
        protocol = paper_protocol(arm, task, techniques, conf_dir, arm_dirs)
    except ProtocolUnknown as err:
        return math.nan, str(err)
    n_train, trained = protocol_n_train(metrics, protocol), trained_examples(metrics)
    if n_train is None or trained is None:
        return math.nan, "the record lacks data.sizes.train, steps or train_settings.batch_size"
    total = protocol.examples(n_train)
    return (trained / total, "") if total else (math.nan, f"the protocol plans 0 steps on {n_train} examples")


def budget_label(metrics: dict) -> str:
    """Which budget a record ran under: a fraction of the protocol, a wall-clock cap, or none."""
    if metrics.get("budget_fraction") is not None:
        return f"fraction {float(metrics['budget_fraction']):g} of the protocol"
    minutes = metrics.get("budget_minutes") or (metrics.get("train_settings") or {}).get("budget_minutes")
    return f"{float(minutes):g} min wall clock" if minutes else "no cap"

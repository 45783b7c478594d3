"""Which models the benchmark measures, and how each is built: exactly as the runner builds an arm.

A row is an arm (a YAML file in ``experiments/conf/arm/``, found by name, so an arm
added later joins the table with no code change) or a *variant*: an arm with a few
model keys changed, declared in ``experiments/conf/bench.yaml`` (the vanilla
Transformer on its materialised backend, our mechanisms at a peer's settings, and
the peers themselves, whose ``requires`` names the package they need).

Settings come from the runner's own resolution (``repro.run.settings.resolve``: arm <
arm.tasks[task] < profile) for ``task=text`` and ``profile=paper``: the LRA text
configuration of the arm (Tay et al. 2021, section 3.4, appendix A; for the LRA arms the
release's 4 layers, width 256, 4 heads, FFN 1024; for the conv arms the follow-up's
text settings, the follow-up study, Table 7). The sequence length is the benchmark's, not the
task's: ``build`` sizes the model for ``length`` tokens (plus the CLS token where
the arm has one).
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import re
from dataclasses import dataclass, field

import torch
from hydra.core.global_hydra import GlobalHydra

from ..models.model import SequenceClassifier, build_model
from ..run.settings import compose_run, hydra_context
from ..tasks.byte_text import BYTE_VOCAB_SIZE, PAD_ID
from ..tasks.text import NUM_CLASSES


@dataclass(frozen=True)
class TextShape:
    """What ``build_model`` reads of a task, for the LRA byte-level text task at ``max_len`` bytes."""

    max_len: int
    vocab_size: int = BYTE_VOCAB_SIZE
    num_classes: int = NUM_CLASSES
    pad_id: int = PAD_ID
    two_tower: bool = False


@dataclass
class BenchModel:
    """One row of the benchmark: its name, the arm it comes from and its resolved settings."""

    name: str
    arm: str
    kind: str  # "arm" | "variant" | "peer"
    model: dict
    train: dict
    requires: str | None = None  # a module that must be importable (peers)
    note: str | None = None
    compare_with: list[str] = field(default_factory=list)  # our rows a peer is set against (table.md)

    @property
    def layers(self) -> int | None:
        return self.model.get("depth")


def arm_names() -> list[str]:
    """Every arm YAML Hydra can see (``experiments/conf/arm/`` and any ``--config-dir``)."""
    with hydra_context():
        return sorted(GlobalHydra.instance().config_loader().get_group_options("arm"))


def resolve_arm(arm: str, task: str = "text", profile: str = "paper") -> dict | None:
    """The runner's resolved settings of ``arm`` on ``task``; None if the arm defines no such task."""
    composed = compose_run([f"arm={arm}", f"task={task}", f"profile={profile}"])
    if task not in composed.cfg.arm.tasks:
        return None
    return composed.run


def apply_model_changes(model: dict, changes: dict) -> dict:
    """``model`` with ``changes`` merged in; a new ``attention`` replaces the arm's ``attention_params``."""
    out = copy.deepcopy(model)
    changes = copy.deepcopy(changes or {})
    if "attention" in changes:
        out["attention_params"] = {}
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _sort_key(spec: BenchModel) -> tuple:
    """Table order: Transformer first, then the LRA arms, the conv arms by kernel, others, peers."""
    kernel = re.fullmatch(r"locality_k(\d+)", spec.arm)
    if spec.kind == "peer":
        group = 5
    elif spec.arm == "lra_transformer":
        group = 0
    elif spec.arm.startswith("lra_"):
        group = 1
    elif kernel:
        group = 2
    else:
        group = 3
    return (group, int(kernel.group(1)) if kernel else 0, spec.arm, spec.kind != "arm", spec.name)


def attention_dropout_setting(value) -> float | None:
    """``attention_dropout`` of bench.yaml: ``lra`` (None: each arm's own, LRA's 0.1 on text) or a
    probability every arm's attention dropout is set to (``0``: none)."""
    if isinstance(value, str) and value.strip().lower() == "lra":
        return None
    try:
        p = float(value)
    except (TypeError, ValueError):
        p = -1.0
    if not 0.0 <= p < 1.0:
        raise ValueError(
            f"attention_dropout={value!r} (experiments/conf/bench.yaml): give lra (each arm's own) "
            "or a probability in [0, 1), e.g. attention_dropout=0"
        )
    return p


def peer_problem(module: str) -> str | None:
    """Why peer package ``module`` cannot be used (not installed, or its import fails), or None."""
    if importlib.util.find_spec(module) is None:
        return f'peer package {module!r} is not installed (pip install -e ".[peers]")'
    try:
        importlib.import_module(module)
    except Exception as err:  # noqa: BLE001 - any failure to import skips the row, with its reason
        return f"peer package {module!r} does not import ({type(err).__name__}: {err})"
    return None


def plan(
    names: list[str] | None,
    variants: dict,
    task: str = "text",
    depth: int | None = None,
    attention_dropout: float | None = None,
) -> tuple[list[BenchModel], list[str]]:
    """The rows to measure and one line per row skipped (no settings for ``task``, package missing
    or not importing).

    ``names`` None: every arm plus every variant. A name may be an arm or a variant;
    anything else is an error that lists the names there are. ``depth`` overrides
    every model's number of layers (the one-layer memory table); ``attention_dropout``
    (not None) every model's attention dropout, where the model has one.
    """
    arms = arm_names()
    variants = dict(variants or {})
    unknown = [n for n in (names or []) if n not in arms and n not in variants]
    if unknown:
        raise KeyError(
            f"unknown model(s) {', '.join(unknown)} in models=[...]; arms: {', '.join(arms)}; "
            f"variants (experiments/conf/bench.yaml): {', '.join(sorted(variants))}"
        )
    wanted = list(names) if names else arms + sorted(variants)
    specs, skipped, resolved = [], [], {}
    for name in wanted:
        variant = variants.get(name) if name not in arms else None
        arm = variant["arm"] if variant else name
        if arm not in resolved:
            if arm not in arms:
                raise KeyError(
                    f"variant {name!r} (experiments/conf/bench.yaml) names arm {arm!r}, which does not "
                    "exist; "
                    f"arms: {', '.join(arms)}"
                )
            resolved[arm] = resolve_arm(arm, task)
        run = resolved[arm]
        if run is None:
            skipped.append(f"{name}: arm {arm} defines no settings for task {task}; skipped")
            continue
        requires = variant.get("requires") if variant else None
        problem = peer_problem(requires) if requires else None
        if problem:
            skipped.append(f"{name}: {problem}; skipped")
            continue
        model = apply_model_changes(run["model"], variant.get("model", {}) if variant else {})
        if depth is not None:
            model["depth"] = int(depth)
        if attention_dropout is not None and "attention_dropout" in model:
            model["attention_dropout"] = float(attention_dropout)
        kind = "arm" if not variant else ("peer" if requires else "variant")
        specs.append(
            BenchModel(
                name=name,
                arm=arm,
                kind=kind,
                model=model,
                train=dict(run["train"]),
                requires=requires,
                note=(variant or {}).get("note"),
                compare_with=list((variant or {}).get("compare_with") or []),
            )
        )
    return sorted(specs, key=_sort_key), skipped


def build(spec: BenchModel, length: int, device: torch.device, seed: int = 0) -> SequenceClassifier:
    """``spec``'s model for ``length``-byte texts, initialised from ``seed``, on ``device``."""
    torch.manual_seed(seed)
    backbone = None
    if spec.kind == "peer":
        from .peers import build_peer_layers  # the peers' own table; their packages load when one is built

        backbone = build_peer_layers
    return build_model(spec.model, TextShape(max_len=int(length)), backbone).to(device)


def sequence_length(spec: BenchModel, length: int) -> int:
    """Tokens the mixers see: ``length``, plus one for a CLS token."""
    return int(length) + (1 if spec.model.get("cls_token", False) else 0)

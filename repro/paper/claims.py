"""The claims file (paper/claims.yaml): each paper claim's pre-registered primary test, read and checked.

A claim names one primary comparison: arm ``a`` against arm ``b`` (or against a published
number when ``b`` has no ``arm``) on one ``task`` or on the LRA average (``metric: average``:
the mean over ListOps, Text, Retrieval, Image and Pathfinder, as Tay et al. 2021, Table 1; with
``tasks: [...]``, over those of them, the published side the mean of the same tasks' columns),
the claimed ``direction`` of a - b (greater | less | none), and the ``margin`` (accuracy points)
within which our effect "matches" the published one, with its reason. The published effect is
read from the published tables (``repro.reference``), never typed: each side names its
``published`` row (``table`` and a ``row`` selector such as ``{model: performer}``).
``secondary`` comparisons are computed and printed but give no verdict.

A claim of your own (``paper: ours``: an ablation of yours, registered before its runs) has no
published tables to read: its primary sides name arms only, and the claim types the ``effect`` it
expects (a - b, accuracy points), which the verdict rules and the seeds needed then read in place
of a published effect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from ..reference import TABLES, published
from ..stats.verdict import DIRECTIONS
from .names import LRA_AVG_TASKS as AVERAGE_TASKS
from .names import task_names

PAPERS = ("Tay et al. 2021", "the follow-up study")
OWN = "ours"  # a claim of the user's own: its expected effect typed, no published row


class ClaimsError(ValueError):
    """The claims file is malformed; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: our arm (``arm`` or ``arm+techniques``; None: published only) and its published row."""

    arm: str | None
    table: str | None
    row: tuple[tuple[str, str], ...]

    def published_value(self, column: str) -> float | None:
        if self.table is None:
            return None
        frame = published(self.table)
        match = frame
        for key, value in self.row:
            match = match[match[key].astype(str) == value]
        return float(match.iloc[0][column])

    @property
    def label(self) -> str:
        if self.arm:
            return self.arm
        return " ".join(f"{v}" for _, v in self.row) + " (published)"


def published_columns(task: str | None, tasks: tuple[str, ...]) -> tuple[str, ...]:
    """The published table's columns whose mean is a side's number: the task's, Table 1's average of all
    five tasks, or the columns of an average over some of them."""
    if task is not None:
        return ("path_x" if task == "pathx" else task,)
    return ("avg",) if tasks == AVERAGE_TASKS else tasks


@dataclass(frozen=True)
class Comparison:
    a: Side
    b: Side
    task: str | None  # None: the LRA average
    direction: str = "none"
    tasks: tuple[str, ...] = AVERAGE_TASKS  # the average's tasks (task None only)
    expected: float | None = None  # a claim of your own: the effect it expects, typed (paper: ours)

    def published_of(self, side: Side) -> float | None:
        """``side``'s published number: the mean of its row's ``published_columns`` (one, but for an average
        over some of the tasks)."""
        values = [side.published_value(column) for column in published_columns(self.task, self.tasks)]
        return None if any(v is None for v in values) else sum(values) / len(values)

    def published_effect(self) -> float | None:
        a, b = self.published_of(self.a), self.published_of(self.b)
        return None if a is None or b is None else a - b

    def claimed_effect(self) -> float | None:
        """The effect the verdict is read against: the published one, or a claim of your own's expected one."""
        return self.published_effect() if self.expected is None else self.expected


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    source: str
    statement: str
    primary: Comparison
    margin: float
    margin_reason: str
    secondary: tuple[Comparison, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class ClaimsFile:
    path: Path
    alpha: float
    power: float
    claims: tuple[Claim, ...]


def _need(node: dict, key: str, where: str, path: Path, kinds=(str,)):
    if not isinstance(node, dict) or key not in node or node[key] in (None, ""):
        raise ClaimsError(f"{path}: {where} lacks '{key}' (see the header of paper/claims.yaml)")
    value = node[key]
    if not isinstance(value, kinds):
        raise ClaimsError(f"{path}: {where}.{key} is {value!r}; expected {' or '.join(k.__name__ for k in kinds)}")
    return value


def _side(node, where: str, path: Path, columns: tuple[str, ...], need_published: bool) -> Side:
    if not isinstance(node, dict):
        raise ClaimsError(f"{path}: {where} is {node!r}; expected a mapping with 'arm' and/or 'published'")
    unknown = sorted(set(node) - {"arm", "published"})
    if unknown:
        raise ClaimsError(f"{path}: {where} has unknown key(s) {', '.join(unknown)}; use arm and published")
    arm = node.get("arm")
    pub = node.get("published")
    if pub is None:
        if need_published:
            raise ClaimsError(f"{path}: {where} lacks 'published' (the published row the effect is read from)")
        return Side(arm, None, ())
    table = _need(pub, "table", f"{where}.published", path)
    if table not in TABLES:
        raise ClaimsError(
            f"{path}: {where}.published.table {table!r} is not a published table; use one of {', '.join(TABLES)}"
        )
    row = _need(pub, "row", f"{where}.published", path, (dict,))
    side = Side(arm, table, tuple(sorted((str(k), str(v)) for k, v in row.items())))
    frame = published(table)
    match = frame
    for key, value in side.row:
        if key not in frame.columns:
            raise ClaimsError(f"{path}: {where}.published.row key {key!r} is not a column of {table}")
        match = match[match[key].astype(str) == value]
    if len(match) != 1:
        raise ClaimsError(
            f"{path}: {where}.published.row {dict(side.row)} selects {len(match)} rows of {table}; it must select one"
        )
    try:
        for column in columns:
            side.published_value(column)
    except (KeyError, ValueError):
        raise ClaimsError(
            f"{path}: {where}.published: {table} has no number in column {column!r} "
            f"for {dict(side.row)} (got {match.iloc[0].get(column)!r})"
        ) from None
    return side


def _average_tasks(node: dict, where: str, path: Path) -> tuple[str, ...]:
    """An average's ``tasks`` (default: the five of LRA's average), in LRA's order."""
    given = node.get("tasks", list(AVERAGE_TASKS))
    if not isinstance(given, list) or len(set(given)) < 2 or not set(given) <= set(AVERAGE_TASKS):
        raise ClaimsError(
            f"{path}: {where}.tasks {given!r}: two or more of {', '.join(AVERAGE_TASKS)}, or leave it out (all five)"
        )
    return tuple(t for t in AVERAGE_TASKS if t in given)


def _comparison(node, where: str, path: Path, primary: bool, expected: float | None = None) -> Comparison:
    if not isinstance(node, dict):
        raise ClaimsError(f"{path}: {where} is {node!r}; expected a mapping with a, b and task (or metric: average)")
    metric = node.get("metric", "accuracy")
    if metric not in ("accuracy", "average"):
        raise ClaimsError(f"{path}: {where}.metric {metric!r}: use accuracy (with a task) or average (five tasks)")
    task = None if metric == "average" else _need(node, "task", where, path)
    if task is not None and task not in task_names():
        raise ClaimsError(f"{path}: {where}.task {task!r}: use one of {', '.join(task_names())}")
    if task is not None and "tasks" in node:
        raise ClaimsError(f"{path}: {where}.tasks: only an average (metric: average) has tasks; this one has task")
    tasks = _average_tasks(node, where, path) if task is None else AVERAGE_TASKS
    columns = published_columns(task, tasks)
    need_published = primary and expected is None
    a = _side(node.get("a"), f"{where}.a", path, columns, need_published)
    b = _side(node.get("b"), f"{where}.b", path, columns, need_published)
    if a.arm is None:
        raise ClaimsError(f"{path}: {where}.a lacks 'arm': side a is always one of our arms")
    if expected is not None and b.arm is None:
        raise ClaimsError(f"{path}: {where}.b lacks 'arm': a claim of your own compares two of our arms")
    direction = node.get("direction", "none")
    if direction not in DIRECTIONS:
        raise ClaimsError(f"{path}: {where}.direction {direction!r}: use one of {', '.join(DIRECTIONS)}")
    comparison = Comparison(a, b, task, direction, tasks, expected)
    effect = comparison.claimed_effect()
    if effect is not None and direction != "none" and (effect > 0) != (direction == "greater"):
        said = "the published effect" if expected is None else "its effect"
        raise ClaimsError(f"{path}: {where}.direction {direction!r} but {said} is {effect:+.2f}")
    return comparison


def _claim(node, i: int, path: Path) -> Claim:
    where = f"claims[{i}]"
    ident = _need(node, "id", where, path)
    paper = _need(node, "paper", where, path)
    if paper not in (*PAPERS, OWN):
        raise ClaimsError(
            f"{path}: {where}.paper {paper!r}: use one of {', '.join(repr(p) for p in PAPERS)}, "
            f"or {OWN!r} for a claim of your own"
        )
    expected = None
    if paper == OWN:
        effect = _need(node, "effect", where, path, (int, float))
        try:
            expected = math.nan if isinstance(effect, bool) else float(effect)
        except OverflowError:
            expected = math.inf
        if not math.isfinite(expected):
            shown = f"{effect!r}" if len(repr(effect)) < 40 else f"{repr(effect)[:20]}..."
            raise ClaimsError(f"{path}: {where}.effect {shown}: a finite number of accuracy points (a - b)")
    elif "effect" in node:
        raise ClaimsError(
            f"{path}: {where}.effect: only a claim of your own (paper: {OWN}) types its effect; "
            "a paper's is read from its published tables"
        )
    margin = _need(node, "margin", where, path, (int, float))
    if not margin > 0:
        raise ClaimsError(f"{path}: {where}.margin {margin!r}: a positive number of accuracy points")
    secondary = node.get("secondary") or []
    if not isinstance(secondary, list):
        raise ClaimsError(f"{path}: {where}.secondary is {secondary!r}; expected a list of comparisons")
    return Claim(
        ident,
        paper,
        _need(node, "source", where, path),
        _need(node, "statement", where, path),
        _comparison(node.get("primary"), f"{where}.primary", path, primary=True, expected=expected),
        float(margin),
        _need(node, "margin_reason", where, path),
        tuple(_comparison(s, f"{where}.secondary[{j}]", path, primary=False) for j, s in enumerate(secondary)),
    )


def load(path: Path) -> ClaimsFile:
    """Read and check a claims file; ClaimsError names the first problem."""
    path = Path(path)
    if not path.is_file():
        raise ClaimsError(f"{path}: no claims file (paper/claims.yaml is the format)")
    spec = OmegaConf.to_container(OmegaConf.load(path), resolve=True) or {}
    alpha, power = spec.get("alpha", 0.05), spec.get("power", 0.8)
    if not (isinstance(alpha, float) and 0 < alpha < 0.5):
        raise ClaimsError(f"{path}: alpha {alpha!r}: a level between 0 and 0.5, e.g. 0.05")
    if not (isinstance(power, float) and 0 < power < 1):
        raise ClaimsError(f"{path}: power {power!r}: a target power between 0 and 1, e.g. 0.8")
    nodes = spec.get("claims")
    if not isinstance(nodes, list) or not nodes:
        raise ClaimsError(f"{path}: 'claims' must be a non-empty list")
    claims = tuple(_claim(node, i, path) for i, node in enumerate(nodes))
    seen = [c.id for c in claims]
    twice = sorted({c for c in seen if seen.count(c) > 1})
    if twice:
        raise ClaimsError(f"{path}: claim id(s) {', '.join(twice)} used more than once; ids must be unique")
    return ClaimsFile(path, float(alpha), float(power), claims)

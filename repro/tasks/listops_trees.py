"""ListOps expression trees: random generation, evaluation and the TSV text form.

Facts from the LRA release's generator (the LRA release's ``lra_benchmarks/data/listops.py``,
google-research/long-range-arena; Tay et al. 2021, section 2.2.1): operators MIN, MAX, MED (``int(np.median)``), SM (sum
mod 10); values 0-9; a node at depth ``d < max_depth`` (root at depth 1) is an
operator with probability 0.25, otherwise a value; an operator takes
``randint(2, max_args)`` sub-trees; the operator is drawn uniformly after its
arguments. The length of a tree is its number of values plus 2 per operator
(operator token and closing ``]``). Trees are kept only when
``min_len < length < max_len`` (strict).

Unlike the release (an unseeded set), generation here is reproducible: trees
come in chunks, chunk ``c`` drawn from ``random.Random((seed, c))``-derived
state, so the result does not depend on how many processes generate it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
CLOSE = "]"
VALUES = tuple(range(10))


@dataclass(frozen=True)
class TreeSpec:
    """Generator parameters (LRA defaults)."""

    max_depth: int = 10
    max_args: int = 10
    min_len: int = 500  # exclusive lower bound on the token length
    max_len: int = 2000  # exclusive upper bound on the token length
    operator_prob: float = 0.25


class _TooLong(Exception):
    """Raised while growing a tree once its length reaches the upper bound."""


def _grow(rng: random.Random, spec: TreeSpec, depth: int, length: list[int]):
    # LRA order of draws: the node type, then the arity, then each child, then the operator.
    if depth < spec.max_depth and rng.random() < spec.operator_prob:
        n_args = rng.randint(2, spec.max_args)
        length[0] += 2
        children = [_grow(rng, spec, depth + 1, length) for _ in range(n_args)]
        op = OPERATORS[rng.randrange(len(OPERATORS))]
        return (op, children)
    length[0] += 1
    if length[0] >= spec.max_len:
        # Any tree that reaches the bound is rejected anyway: stop growing it early.
        raise _TooLong
    return VALUES[rng.randrange(10)]


def random_tree(rng: random.Random, spec: TreeSpec):
    """One tree from the LRA distribution, or None when its length falls outside the bounds."""
    length = [0]
    try:
        tree = _grow(rng, spec, 1, length)
    except _TooLong:
        return None
    if spec.min_len < length[0] < spec.max_len:
        return tree
    return None


def evaluate(tree) -> int:
    """The value 0-9 of a tree."""
    if isinstance(tree, int):
        return tree
    op, children = tree
    args = [evaluate(c) for c in children]
    if op == "[MIN":
        return min(args)
    if op == "[MAX":
        return max(args)
    if op == "[SM":
        return sum(args) % 10
    if op == "[MED":
        s = sorted(args)
        n = len(s)
        # int(np.median): the mean of the two middle values, floored, for an even count.
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2
    raise ValueError(f"unknown operator {op!r}")


def tokens(tree) -> list[str]:
    """The model's token sequence: operator, arguments, ``]``; no parentheses."""
    out: list[str] = []

    def walk(t):
        if isinstance(t, int):
            out.append(str(t))
            return
        op, children = t
        out.append(op)
        for c in children:
            walk(c)
        out.append(CLOSE)

    walk(tree)
    return out


def to_source(tree) -> str:
    """The release's TSV ``Source`` text: left-nested pairs in parentheses.

    An operator with arguments a, b is written ``( ( ( [MAX a ) b ) ] )``.
    """
    if isinstance(tree, int):
        return str(tree)
    op, children = tree
    text = f"( {op} {to_source(children[0])} )"
    for child in children[1:]:
        text = f"( {text} {to_source(child)} )"
    return f"( {text} {CLOSE} )"


def generate_chunk(seed: int, chunk: int, size: int, spec: TreeSpec) -> list:
    """``size`` accepted trees from chunk ``chunk`` of seed ``seed``."""
    rng = random.Random(f"listops/{seed}/{chunk}")
    out: list = []
    while len(out) < size:
        tree = random_tree(rng, spec)
        if tree is not None:
            out.append(tree)
    return out

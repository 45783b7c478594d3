"""ListOps operand permutation (the follow-up study, section 3): at every operator node, its operands in a random order.

"As each mathematical operation in the task is commutative, we can shuffle the order of
the operands without altering the result ... at each node of the operation tree, we can
apply a random permutation to the children nodes." A fresh permutation is drawn every
time an example is served (every training step).

Works on token ids as ``repro.tasks.listops`` stores them (parentheses dropped, ``]`` its
own token, 0 = padding), for a whole batch at once on its device, with no Python loop
over positions: each token gets one sort key per tree level and a stable sort per level,
deepest first, orders the tokens lexicographically by their keys (an LSD radix sort):

* at level ``j`` every token inside a level-``j`` element (a child of a node at depth
  ``j - 1``: a value, or a whole sub-tree from its operator to its ``]``) gets that
  element's random key, so siblings move as blocks in a random order;
* the operator token of a node at depth ``j - 1`` gets a key below every random key and
  its ``]`` one above, so each node keeps ``OP children... ]``;
* padding sorts after everything at level 1.

Random keys are ``random * L + start position``: distinct, so no two siblings tie.

The number of levels is the batch's deepest level unless ``levels`` gives a bound: reading
the batch's depth is a host synchronisation, which would hold the host until the GPU has
finished the step before and so keep it from queueing the next step while the GPU works.
The training transform takes the bound from its training set once (``tree_level_count``):
operand permutations keep every tree's shape, so no batch is deeper, and a level past a
batch's deepest sorts on equal keys, which a stable sort leaves in place.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...tasks.listops import TOKEN_ID
from ...tasks.listops_trees import CLOSE, OPERATORS

OPERATOR_IDS = tuple(TOKEN_ID[op] for op in OPERATORS)
CLOSE_ID = TOKEN_ID[CLOSE]
PAD_ID = 0
_FIRST = -1  # the operator token of a node: before its children
_LAST = 2**62  # its closing bracket: after them
_PADDING = 2**62 + 1  # padding: after the whole tree


def tree_levels(ids: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per token: its element level, and whether it is an operator, a ``]`` or padding.

    The level of a value or an operator token is the number of operator nodes strictly
    above it (the root operator: 0); a ``]`` has the level of its operator.
    """
    opens = ids == OPERATOR_IDS[0]  # comparisons with numbers: a tensor of the ids would be copied from
    for op in OPERATOR_IDS[1:]:  # the host at every call, a synchronisation on CUDA
        opens = opens | (ids == op)
    closes = ids == CLOSE_ID
    padding = ids == PAD_ID
    delta = opens.long() - closes.long()
    depth_before = torch.cumsum(delta, dim=-1) - delta
    return depth_before - closes.long(), opens, closes, padding


def tree_level_count(ids: Tensor, rows_per_chunk: int = 8192) -> int:
    """The number of levels ``permute_operands`` sorts for the trees ``ids`` [N, L]: one more than the
    deepest element level (0 for no positions), read in chunks of rows."""
    deepest = -1
    for start in range(0, len(ids), rows_per_chunk):
        chunk = ids[start : start + rows_per_chunk].long()
        if chunk.numel():
            deepest = max(deepest, int(tree_levels(chunk)[0].max()))
    return deepest + 1


def permute_operands(
    ids: Tensor, generator: torch.Generator | None = None, levels: int | None = None, compiled: bool = False
) -> Tensor:
    """``ids`` [B, L] with each operator's operands randomly reordered, at every node; same dtype and device.

    ``levels``: the number of levels to sort, at least ``tree_level_count(ids)`` (module docstring); None
    reads it from the batch (a host synchronisation on CUDA). ``compiled``: the sorting through
    ``torch.compile`` (``compiled_permutation_order``)."""
    if ids.dim() != 2:
        raise ValueError(f"expected ListOps token ids [B, L], got shape {tuple(ids.shape)}")
    x = ids.long()
    noise = torch.randint(0, 2**40, tuple(x.shape), device=x.device, generator=generator)
    if levels is None:
        levels = int(tree_levels(x)[0].max()) + 1 if x.shape[1] else 0
    return ids.gather(1, (compiled_permutation_order() if compiled else permutation_order)(x, noise, levels))


def permutation_order(x: Tensor, noise: Tensor, levels: int) -> Tensor:
    """The gather order [B, L] that permutes the trees ``x`` (int64 ids) by the random ``noise`` [B, L] in
    [0, 2^40), sorting ``levels`` levels: a function of tensors alone (the draws are made before it)."""
    batch, length = x.shape
    level, opens, closes, padding = tree_levels(x)
    positions = torch.arange(length, device=x.device).expand(batch, length)
    starts = ~closes & ~padding  # a value or an operator starts an element
    element_key = noise * length + positions  # distinct per element start
    order = positions.clone()
    for j in range(levels, 0, -1):
        start_here = torch.where(starts & (level == j), positions, -1)
        element_start = torch.cummax(start_here, dim=-1).values.clamp_min(0)
        key = torch.where((level >= j) & ~padding, element_key.gather(1, element_start), 0)
        own_node = level == j - 1
        key = torch.where(opens & own_node, _FIRST, key)
        key = torch.where(closes & own_node, _LAST, key)
        if j == 1:
            key = torch.where(padding, _PADDING, key)
        step = torch.sort(key.gather(1, order), dim=-1, stable=True).indices
        order = order.gather(1, step)
    return order


_COMPILED_ORDER: list = []  # permutation_order through torch.compile, made on first use


def compiled_permutation_order():
    """``permutation_order`` through ``torch.compile`` as one graph (integer operations only, so the same
    result to the bit), shapes static: one graph per batch shape and level count. Training compiles one:
    its batches have one shape (the techniques turn length bucketing off, the last partial batch is dropped)
    and the level count is the training set's; more than torch's recompile limit of shapes would fail."""
    if not _COMPILED_ORDER:
        _COMPILED_ORDER.append(torch.compile(permutation_order, fullgraph=True, dynamic=False))
    return _COMPILED_ORDER[0]


class ListOpsOperandPermutation:
    """The training transform: stored ids [B, L] -> ids with freshly permuted operands, sorting ``levels``
    levels (the training set's ``tree_level_count``; None: each batch's own, read on the host)."""

    def __init__(self, levels: int | None = None, compiled: bool = False):
        self.levels, self.compiled = levels, compiled

    def set_compiled(self, on: bool) -> None:
        """``train.compile_transforms``: the sorting through torch.compile."""
        self.compiled = on

    def __call__(self, inputs: Tensor, draws) -> Tensor:
        return permute_operands(inputs, draws.device_generator(inputs.device), self.levels, self.compiled)

    def __repr__(self) -> str:
        compiled = ", compiled" if self.compiled else ""
        return f"ListOpsOperandPermutation(levels={self.levels}{compiled})"

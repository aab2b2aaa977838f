"""The Match record (a subgraph one kernel computes) and the graph-reading helpers the matchers share
(patterns_*.py; the table and the search over a graph: patterns.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.fx import Node

from .fusion import tensor_meta

aten = torch.ops.aten

VIEW_OPS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
TRANSPOSE_2D = {aten.t.default, aten.transpose.int, aten.permute.default}


@dataclass
class Match:
    kernel: str                 # library function (for reports)
    root: Node
    args: list                  # Nodes (values from the environment) or constants
    call: Callable              # call(*arg values) -> root value
    interior: set = field(default_factory=set)  # nodes computed inside the kernel
    check: Callable | None = None  # check(*arg values) -> bool: use the kernel (else eager)
    native: bool = False        # call takes torch tensors itself (CPU included): no NumPy conversion
    extra: list = field(default_factory=list)  # more nodes the kernel computes that others read: call then
    #                                            returns (root value, *their values)
    decides: tuple = ()         # indices of the args whose values (not only shapes) `check` reads on the host
    writes: int | None = None   # index of the arg the kernel writes in place and returns (no new memory)
    sources: tuple = ()         # (kernel name, .tile text) of the generated kernels it may launch (epilogue.py)


def _stdlib():
    import tilex.stdlib as S

    return S


def _is(node, *targets) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


def _float(node) -> bool:
    m = tensor_meta(node)
    return m is not None and m.dtype in (torch.float32, torch.float16, torch.bfloat16)



def _strip_views(node):
    while _is(node, *VIEW_OPS):
        node = node.args[0]
    return node


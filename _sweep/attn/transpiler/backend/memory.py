"""Live-memory accounting: bytes of the distinct tensor storages a program holds, step by step.

The Program drops every value after its last use (the lifetime plan; the allocator reuses the
memory). `peak_bytes` measures what that plan holds at its worst moment; `eager_peak_bytes` runs
the same graph op by op in torch eager with values freed at their last use (torch.fx.Interpreter),
the baseline the plan is reported against. Inputs are not counted (the caller holds them).
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Interpreter


def live_bytes(values, exclude: set) -> int:
    """Bytes of the distinct storages among `values` (tensors, nested lists/tuples), minus `exclude`'s."""
    seen: set = set()
    total = 0
    stack = list(values)
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, torch.Tensor):
            s = v.untyped_storage()
            key = s.data_ptr()
            if key in seen or key in exclude or s.nbytes() == 0:
                continue
            seen.add(key)
            total += s.nbytes()
    return total


def storage_keys(values) -> set:
    return {v.untyped_storage().data_ptr() for v in values if isinstance(v, torch.Tensor)}


class _Counting(Interpreter):
    def __init__(self, gm, inputs):
        super().__init__(gm, garbage_collect_values=True)
        self.exclude = storage_keys(inputs)
        self.peak = 0

    def run_node(self, n):
        out = super().run_node(n)
        self.peak = max(self.peak, live_bytes([*self.env.values(), out], self.exclude))
        return out


def eager_peak_bytes(gm: GraphModule, inputs) -> int:
    """Peak live bytes of `gm` run node by node in eager, values freed at their last use."""
    it = _Counting(gm, inputs)
    with torch.no_grad():
        it.run(*inputs)
    return it.peak

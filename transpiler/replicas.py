"""Replicas of a register tile: the (thread, slot) pairs that hold a copy of an element another pair holds too.

An atomic runs once per element (`replica_guard`, the condition of the one pair that runs it), and an atomic
that returns its old values hands them to the replicas through shared memory (assign_layouts counts it).
"""
from __future__ import annotations

from .layout import Layout


def replica_guard(layout: Layout) -> str | None:
    """A C condition that holds in exactly one of the (thread, slot) pairs holding each element of a tile in
    `layout` (None: every pair holds its own element). Threads beyond the root's distinct ones, and those
    along a root axis the view dropped (a reduction's result is held by every thread that reduced it), hold
    replicas: an atomic must run once per element, not once per replica."""
    root = layout.root
    conds = [f"threadIdx.x < {root.distinct}"] if root.distinct < root.T else []
    for d in range(root.rank):
        if d in layout.dims:
            continue
        for radix, ts in root.thread_groups(d):
            conds.append(f"{'threadIdx.x' if ts == 1 else f'(threadIdx.x / {ts})'} % {radix} == 0")
        for g in sorted(root.axis_digits(d) & set(layout.digits)):  # a slot repeating a dropped axis
            if root.radix(g) > 1:
                conds.append(f"{layout.digit_expr(g, 'tx_s')} == 0")
    return " && ".join(f"({c})" for c in conds) or None


def replicated(layout: Layout) -> bool:
    """True if some element of a tile in `layout` is held by more than one (thread, slot) pair."""
    return replica_guard(layout) is not None

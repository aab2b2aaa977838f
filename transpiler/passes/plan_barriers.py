"""Pass plan_barriers: which block barrier each statement's synchronization points use.

Needs: budget_smem (`kernel.info` is a KernelMemory; `For.plan` of the wgmma main loops). Guarantees:
`kernel.info.sync` is a SyncPlan: the barrier of the kernel-start code and of every top-level statement
(the barriers codegen emits for it: layout conversions, cross-warp reductions, staged products, ring
stages). Every thread of the block (`__syncthreads`) takes part until a warp-specialized wgmma loop: its
producer warpgroup returns after loading, so from that loop on (a persistent tile loop around it
included, whose body the consumers run alone) only the consumer threads synchronize, on named barrier 1.
plan_matmul keeps wgmma loops at the top level or directly in a top-level tile loop, so a top-level
statement is the unit.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .. import ast as A
from ..types import MmaStrategy
from .base import fail
from .memory_info import KernelMemory


@dataclass(frozen=True)
class Barrier:
    """A block barrier: `threads` None is every thread of the block (`__syncthreads`); else named barrier
    `id` of the first `threads` threads (`bar.sync id, threads`)."""
    id: int = 0
    threads: int | None = None


ALL = Barrier()


@dataclass(frozen=True)
class SyncPlan:
    start: Barrier  # the kernel-start code's (the TMA rings' mbarrier initialization)
    stmts: tuple[Barrier, ...]  # per top-level statement of the body, in order


def plan_barriers(program: A.Program) -> A.Program:
    kernels = []
    for k in program.kernels:
        if not isinstance(k.info, KernelMemory):
            fail(f"internal: plan_barriers needs budget_smem's KernelMemory (kernel '{k.name}')")
        kernels.append(replace(k, info=replace(k.info, sync=sync_plan(k))))
    return replace(program, kernels=tuple(kernels))


def sync_plan(k: A.Kernel) -> SyncPlan:
    current, stmts = ALL, []
    for s in k.body.stmts:
        inner = _persistent_main_loop(s)
        if inner is not None:  # the consumers run the tile loop's body alone
            current = Barrier(1, inner.plan.consumers)
        stmts.append(current)
        if _warp_specialized(s):  # the producers have returned after it
            current = Barrier(1, s.plan.consumers)
    return SyncPlan(ALL, tuple(stmts))


def _warp_specialized(s: A.Stmt) -> bool:
    return isinstance(s, A.For) and s.plan is not None and s.plan.strategy == MmaStrategy.WGMMA


def _persistent_main_loop(s: A.Stmt):
    """The wgmma main loop directly in top-level loop `s` (a persistent kernel), or None."""
    if not isinstance(s, A.For) or s.plan is not None:
        return None
    return next((st for st in s.body.stmts if isinstance(st, A.For) and st.plan is not None and st.plan.persistent), None)

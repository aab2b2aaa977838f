"""Pass place_resident: which tiles a kernel keeps in shared memory for its whole run.

A tile computed once at the top level and read only as the left operand of register-tile products
that run on tensor cores (q in attention) is staged into shared memory once instead of at every
product, and needs no registers.

Needs: choose_threads (`kernel.info` its LaunchConfig, or a MemoryPlan that budget_smem's retry
starts again from), choose_mma (`For.mma`: which loops run wgmma), plan_matmul (a kernel with
planned loops keeps none). Guarantees: `kernel.info` is a MemoryPlan whose `resident` gives each
resident tile a byte offset (from 0, 16-byte aligned; swizzled tiles first, each a multiple of 1024
bytes) and a row pitch: its columns (128-byte swizzled rows, when only wgmma products read it) or its
columns + MATMUL_PAD; `resident_uses` one SmemUse per tile; `swizzled` the names of the swizzled ones.
"""
from __future__ import annotations

from dataclasses import replace

from .. import ast as A
from ..targets import MATMUL_PAD, Target
from .assign_layouts import mma_layout, wgmma_loops
from .base import Walker, fail
from .choose_threads import LaunchConfig, planned_loops
from .memory_info import MemoryPlan, SmemUse


def place_resident(program: A.Program, tgt: Target) -> A.Program:
    return replace(program, kernels=tuple(_kernel(k, tgt) for k in program.kernels))


def _kernel(k: A.Kernel, tgt: Target) -> A.Kernel:
    info = k.info
    if not isinstance(info, (LaunchConfig, MemoryPlan)):
        fail(f"internal: place_resident needs choose_threads' launch configuration (kernel '{k.name}')")
    plan = MemoryPlan(info.launch, info.shrink) if isinstance(info, MemoryPlan) else MemoryPlan(info)
    wgmma = {id(f) for f in wgmma_loops(k)}
    resident, uses, swizzled = resident_tiles(k, planned_loops(k), wgmma, lambda e: mma_layout(e, tgt, plan.threads))
    return replace(k, info=replace(plan, resident=resident, resident_uses=tuple(uses), swizzled=frozenset(swizzled)))


def resident_tiles(k: A.Kernel, plans: list, wgmma: set, mma_layout) -> tuple[dict, list, set]:
    """Tiles computed once (at the top level) and read only as the left operand of tensor-core products
    (q in attention): kept in shared memory, staged once instead of at every product, no registers. `wgmma`: ids of
    the wgmma loops; `mma_layout(e)`: the product's mma fragment layout, or None."""
    if plans:
        return {}, [], set()
    count: dict[str, int] = {}
    top = {s.name: s for s in k.body.stmts if isinstance(s, A.Assign)}
    good: dict[str, int] = {}
    in_wgmma: dict[str, int] = {}  # of those, reads by the products of wgmma loops
    bad: set[str] = set()
    inside = [False]

    class _Uses(Walker):
        def on_For(self, f):
            if id(f) not in wgmma:
                return None
            inside[0] = True
            self.walk(f.body)
            inside[0] = False
            return False

        def on_Assign(self, s):
            count[s.name] = count.get(s.name, 0) + 1

        def on_Store(self, s):  # `old = atomic_add(...)` assigns old too
            if s.result is not None:
                count[s.result] = count.get(s.result, 0) + 2

        def on_BinOp(self, e):
            if e.op is A.BinOpKind.MATMUL and isinstance(e.lhs, A.Name):
                if mma_layout(e) is not None:
                    good[e.lhs.id] = good.get(e.lhs.id, 0) + 1
                    if inside[0]:
                        in_wgmma[e.lhs.id] = in_wgmma.get(e.lhs.id, 0) + 1
                else:
                    bad.add(e.lhs.id)
                self.walk(e.rhs)
                return False
            return None

        def on_Name(self, e):
            bad.add(e.id)

    _Uses().walk(k.body)
    out, uses, offset = {}, [], 0
    swizzled_tiles: set = set()
    # 128-byte swizzled tiles first: every one is a multiple of SWIZZLE_ALIGN bytes (rows % 64 == 0)
    order = sorted(good, key=lambda name: good[name] != in_wgmma.get(name, 0))
    for name in order:
        s = top.get(name)
        if name in bad or count.get(name) != 1 or s is None or len(s.value.ty.shape) != 2:
            continue
        rows, cols = s.value.ty.shape
        swizzled = in_wgmma.get(name, 0) == good[name]  # read only by wgmma products
        ld = cols if swizzled else cols + MATMUL_PAD
        size = rows * ld * s.value.ty.dtype.itemsize
        out[name] = (offset, ld)
        how = " (128-byte swizzled rows, for wgmma)" if swizzled else ""
        if swizzled:
            swizzled_tiles.add(name)
        uses.append(SmemUse(f"keeping '{name}' in shared memory for the tensor-core products that read it{how}",
                            size, s.span))
        offset += (size + 15) // 16 * 16
    return out, uses, swizzled_tiles

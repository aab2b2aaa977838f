"""Pass budget_smem: the kernel's shared memory in all, and the policy of what to give up when it does not fit.

Needs: the memory passes before it (`kernel.info` a MemoryPlan: place_resident, plan_streams,
assign_layouts, plan_tma), choose_threads, plan_matmul (`For.plan`). Guarantees: `kernel.info` is a
KernelMemory: resident tiles, streamed rings and persistent rings first in shared memory, then the
scratch of one operation at a time (which reuses the space after them); the `min_blocks` launch
parameter checked. Whether it fits (`fits`) is its verdict: the pipeline runs the memory passes of
a kernel again, from place_resident, as the first fallback of its policy that applies says
(`next_attempt`; `pipeline.SMEM_POLICY`, `SMEM_POLICY` here is the default):

  fewer_stream_stages      streamed rings of at most 2 stages
  no_register_streams      also no streamed tiles that are read into registers (they load directly)
  shallower_ring           one stage fewer in a persistent wgmma ring (again, down to 2 stages)

Streaming and deep rings are optimizations: they never turn a kernel that fits into an error.
When no fallback applies, `check_budget` raises the budget's error, naming the largest use; so a
kernel the pipeline returns has `info.smem_bytes <= info.smem_limit`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from .. import ast as A
from ..diagnostics import CompileError
from ..targets import Target
from ..types import MmaStrategy
from .base import Rewriter, for_loops
from .choose_threads import min_blocks, planned_loops
from .plan_tma_store import kernel_tma_stores
from .memory_info import SWIZZLE_ALIGN, KernelMemory, SmemUse, round_up


def budget_smem(program: A.Program, tgt: Target) -> A.Program:
    return replace(program, kernels=tuple(replace(k, info=kernel_memory(k, tgt)) for k in program.kernels))


def kernel_memory(k: A.Kernel, tgt: Target) -> KernelMemory:
    """The KernelMemory of `k`'s MemoryPlan: the regions kept for the whole kernel (resident tiles, the streamed
    rings' region from `stream_offset`, then the persistent rings'), the largest scratch use after them."""
    plan = k.info
    # a persistent ring is refilled for the next tile while the consumers run this tile's epilogue:
    # it keeps its own region, first in shared memory (no resident or streamed tiles with plans)
    rings = [SmemUse(ring_what(p), p.smem_bytes, k.span) for p in planned_loops(k) if p.persistent]
    # a persistent tile loop's epilogue stores by TMA stage through a region of their own, after the ring
    rings += [SmemUse(f"the staging of {len(ts.stores)} TMA store(s) ({ts.cols} columns at a time)", ts.region,
                      ts.stores[0].span) for _, _, ts in kernel_tma_stores(k, tgt.smem_per_block)]
    kept = list(plan.resident_uses) + list(plan.stream_uses) + rings
    base = plan.stream_offset + sum(round_up(u.bytes, 16) for u in list(plan.stream_uses) + rings)
    swizzled = bool(plan.swizzled) or any(t.swizzled for ts in streamed(k) for t in ts)
    align = SWIZZLE_ALIGN if swizzled else 16
    # codegen rounds the base of dynamic shared memory up to `align`: room for that
    smem = base + max((u.bytes for u in plan.uses), default=0) + (align if swizzled else 0)
    launch = plan.launch
    return KernelMemory(launch.threads, smem, tgt.smem_per_block, kept + list(plan.uses), dict(plan.var_layouts),
                        launch.producers, plan.resident, base, min_blocks(k, launch.launch_threads),
                        frozenset(plan.swizzled), align, *plan.mbar, tma_maps=plan.tma_maps)


def streamed(k: A.Kernel) -> list:
    """The `For.stream` tiles of each loop of `k` that streams some (plan_streams)."""
    return [f.stream for f in for_loops(k.body) if f.stream]


@dataclass(frozen=True)
class Attempt:
    """What one run of the memory passes is asked to do (the pipeline's retry holds it)."""

    kernel: A.Kernel  # with its plans (a shallower persistent ring changes them)
    shrink: int = 0  # streamed rings: 0 as asked, 1 at most 2 stages, 2 also no tiles read into registers


def fewer_stream_stages(a: Attempt, streams: bool) -> Attempt | None:
    return replace(a, shrink=1) if streams and a.shrink < 1 else None


def no_register_streams(a: Attempt, streams: bool) -> Attempt | None:
    return replace(a, shrink=2) if streams and a.shrink < 2 else None


def shallower_ring(a: Attempt, streams: bool) -> Attempt | None:
    k = shallower_persistent_ring(a.kernel)
    return replace(a, kernel=k) if k is not None else None


SMEM_POLICY: tuple[Callable, ...] = (fewer_stream_stages, no_register_streams, shallower_ring)


def next_attempt(policy: tuple, a: Attempt, streams: bool) -> Attempt | None:
    """The attempt after `a` did not fit (`streams`: whether it streamed tiles): the first fallback
    of `policy` that applies, or None when none does."""
    for fallback in policy:
        nxt = fallback(a, streams)
        if nxt is not None:
            return nxt
    return None


def fits(k: A.Kernel) -> bool:
    return k.info.smem_bytes <= k.info.smem_limit


def check_budget(k: A.Kernel) -> A.Kernel:
    """`k`, or a CompileError naming the largest use when its shared memory exceeds the target's."""
    info = k.info
    if info.smem_bytes > info.smem_limit:
        worst = max(info.uses, key=lambda u: u.bytes)
        notes = ("use smaller tiles (lower the compile-time parameters with -D)",)
        if info.resident_bytes and worst.bytes < info.smem_bytes:
            notes = (f"in all the kernel needs {info.smem_bytes} bytes: {info.resident_bytes} kept for the whole "
                     f"kernel and {info.smem_bytes - info.resident_bytes} for one operation at a time",) + notes
        raise CompileError(f"{worst.what} needs {worst.bytes} bytes of shared memory; the target allows {info.smem_limit} per block",
                           worst.span, notes)
    return k


def shallower_persistent_ring(k: A.Kernel) -> A.Kernel | None:
    """`k` with one stage fewer in its persistent wgmma ring (the ring is a region of its own, so
    epilogue scratch adds to it), or None when there is none deeper than 2 stages."""
    changed = []

    class _R(Rewriter):
        def visit_For(self, f):
            body = self.visit(f.body)
            p = f.plan
            if p is not None and p.persistent and p.stages > 2:
                per = (p.smem_bytes - 1024) // p.stages  # a stage and its two mbarriers
                tag = " stages do not fit with the epilogue's shared memory: using "
                kept = [x for x in p.why.split("; ") if x and tag not in x]  # one note, updated each time
                note = f"{max(2, f.stages)}{tag}{p.stages - 1}"  # f.stages: the depth the loop asked for
                plan = replace(p, stages=p.stages - 1, smem_bytes=(p.stages - 1) * per + 1024,
                               why="; ".join(kept + [note]))
                changed.append(plan)
                return replace(f, body=body, plan=plan)
            return replace(f, body=body) if body is not f.body else f
    out = _R().visit(k.body)
    return replace(k, body=out) if changed else None


def ring_what(p) -> str:
    what = "TMA ring" if p.strategy == MmaStrategy.WGMMA else "cp.async ring"
    bs = f"{p.bk}x{p.bn}" if p.nb == 1 else f"{p.nb} of {p.bk}x{p.bn}"
    extra = ", and a re-aligned stage for rows not known to be 16-byte aligned" if getattr(p, "shifted", ()) else ""
    return f"the {p.stages}-stage {what} of the '@' operands ({p.bm}x{p.bk} and {bs} per stage{extra})"

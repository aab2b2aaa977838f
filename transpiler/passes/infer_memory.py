"""Pass infer_memory: decide where every value lives and how tiles are laid out, within the shared-memory budget.

Needs: choose_threads (`kernel.info` is its LaunchConfig), plan_matmul. Guarantees: every value has
`ty.space` (UNIFORM scalars, REGISTERS tiles, SHARED for matmul operands, GLOBAL tensors) and every
tile a `ty.layout`; `kernel.info` is a KernelMemory (threads, the shared memory each operation needs,
resident tiles, mbarriers) within the target's per-block limit; `For.stream` lists the tiles a
pipeline loop copies into shared memory iterations ahead (StreamTile).

This module only drives the runs; each job is a module of its own:
  place_resident   tiles kept in shared memory for the whole kernel (q in attention)
  plan_streams     tiles streamed by pipeline loops (hazard proofs: stream_hazards; TMA boxes: plan_tma)
  assign_layouts   every expression's space and layout, scratch uses, the wgmma check of each product
  budget_smem      the budget's check and the fallback policy (pipeline.SMEM_POLICY)
A run is repeated when a loop-carried variable is updated in a tensor-core layout (the second run
creates it there), when a wgmma `pipeline` loop's product cannot run as wgmma (the loop is demoted to
mma.sync, the reason in `For.mma.why`), and, with the policy's next fallback, when it does not fit.
"""
from __future__ import annotations

from dataclasses import replace

from .. import ast as A
from ..targets import DEFAULT_ARCH, Target, target
from .assign_layouts import LayoutAssigner
from .base import fail
from .budget_smem import SMEM_POLICY, Attempt, check_budget, fits, next_attempt, ring_what
from .choose_threads import LaunchConfig, min_blocks
from .memory_info import SWIZZLE_ALIGN, KernelMemory, SmemUse, StreamTile, round_up  # noqa: F401 (StreamTile: For.stream)
from .place_resident import place_resident
from .plan_tma import kernel_tma_maps
from .plan_tma_store import kernel_tma_stores
from .plan_streams import plan_streams


def infer_memory(program: A.Program, tgt: Target | None = None, policy: tuple = SMEM_POLICY) -> A.Program:
    """`tgt`: the target (default: DEFAULT_ARCH's); `policy`: the budget_smem fallbacks tried in order, each time
    the kernel's shared memory does not fit."""
    tgt = tgt or target(DEFAULT_ARCH)
    for k in program.kernels:
        if not isinstance(k.info, LaunchConfig):
            fail(f"internal: infer_memory needs choose_threads' launch configuration (kernel '{k.name}')")
    return replace(program, kernels=tuple(_kernel_memory(k, tgt, policy) for k in program.kernels))


def _kernel_memory(k: A.Kernel, tgt: Target, policy: tuple) -> A.Kernel:
    """Two runs when a loop-carried variable is updated in a tensor-core layout: the second creates it there.
    A wgmma loop one of whose products cannot run as wgmma is demoted to mma.sync, and all is run again.
    A kernel over the target's shared memory is run again as the first fallback of `policy` that applies
    says (budget_smem: streaming is an optimization, it never turns a kernel that fits into an error);
    when none applies, the budget's error."""
    attempt = Attempt(k)
    demoted: dict = {}  # id(For) -> why its products cannot run as wgmma after all
    while True:
        mem = LayoutAssigner(attempt.kernel, tgt, shrink=attempt.shrink, demoted=demoted)
        out = _plan(mem)  # the second run's layouts may not need all of this run's memory
        if mem.prefer:
            mem = LayoutAssigner(attempt.kernel, tgt, mem.prefer, shrink=attempt.shrink, demoted=demoted)
            out = _plan(mem)
        if mem.demote:
            demoted = {**demoted, **mem.demote}
            continue
        if fits(out):
            return out
        attempt = next_attempt(policy, attempt, bool(mem.streams))
        if attempt is None:
            return check_budget(out)


def _plan(mem: LayoutAssigner) -> A.Kernel:
    """One run: resident tiles, streamed rings and persistent rings first in shared memory, then every
    expression's layout and the scratch it needs (which reuses the space after them), into KernelMemory."""
    k = mem.k
    mem.resident, resident_uses, mem.swizzled_resident = place_resident(k, mem.plans, mem.wgmma, mem.mma_layout)
    base = sum((u.bytes + 15) // 16 * 16 for u in resident_uses)
    if mem.wgmma:  # swizzled stages start aligned (the gap is counted in `base`)
        base = round_up(base, SWIZZLE_ALIGN)
    mem.streams, stream_uses, mem.mbar = plan_streams(mem, base)
    resident_uses = resident_uses + stream_uses
    base += sum((u.bytes + 15) // 16 * 16 for u in stream_uses)
    # a persistent ring is refilled for the next tile while the consumers run this tile's epilogue:
    # it keeps its own region, first in shared memory (no resident or streamed tiles with plans)
    rings = [SmemUse(ring_what(p), p.smem_bytes, mem.k.span) for p in mem.plans if p.persistent]
    rings += [SmemUse(f"the staging of {len(ts.stores)} TMA store(s) ({ts.cols} columns at a time)", ts.region,
                      ts.stores[0].span) for _, _, ts in kernel_tma_stores(k, mem.limit)]  # after the ring
    resident_uses = resident_uses + rings
    base += sum((u.bytes + 15) // 16 * 16 for u in rings)
    where = tuple(mem.assign(e) for e in k.where)
    grid = tuple(mem.assign(e) for e in k.grid)
    body = mem.visit(k.body)
    swizzled = bool(mem.swizzled_resident) or any(t.swizzled for ts in mem.streams.values() for t in ts)
    align = SWIZZLE_ALIGN if swizzled else 16
    # codegen rounds the base of dynamic shared memory up to `align`: room for that
    smem = base + max((u.bytes for u in mem.uses), default=0) + (align if swizzled else 0)
    producers = mem.launch.producers
    info = KernelMemory(mem.T, smem, mem.limit, resident_uses + mem.uses, dict(mem.vars), producers,
                        mem.resident, base, min_blocks(k, mem.launch.launch_threads),
                        frozenset(mem.swizzled_resident), align, *mem.mbar)
    out = replace(k, where=where, grid=grid, body=body, info=info)
    return replace(out, info=replace(info, tma_maps=kernel_tma_maps(out)))  # read by launchspec and codegen

"""The shared-memory budget: the check, and the policy of what to give up when a kernel does not fit.

infer_memory plans a kernel's shared memory (resident tiles, streamed rings, persistent rings,
scratch) as an `Attempt` asks; when the result is over the target's per-block limit (`fits`), it
runs again with the first fallback of the policy that applies (`next_attempt`). The policy is a
tuple of functions listed in pipeline.py (`SMEM_POLICY` here is the default):

  fewer_stream_stages      streamed rings of at most 2 stages
  no_register_streams      also no streamed tiles that are read into registers (they load directly)
  shallower_ring           one stage fewer in a persistent wgmma ring (again, down to 2 stages)

Streaming and deep rings are optimizations: they never turn a kernel that fits into an error.
When no fallback applies, `check_budget` raises the budget's error, naming the largest use.
Needs: plan_matmul (`For.plan`), choose_threads. Guarantees: a kernel returned by infer_memory has
`info.smem_bytes <= info.smem_limit`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from .. import ast as A
from ..diagnostics import CompileError
from ..types import MmaStrategy
from .base import Rewriter


@dataclass(frozen=True)
class Attempt:
    """What one run of the memory planning is asked to do."""

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

"""Pass choose_threads: how many threads run one program (one thread block).

Needs: plan_matmul (its `For.plan`s). Guarantees: `kernel.info` is a `LaunchConfig` with the
consumer threads per block (a planned tensor-core loop's warps, which every plan in the kernel
must agree on; else the kernel's `warps` launch parameter; else enough warps for the largest tile, 1 to 8
warps) and the producer threads of a warp-specialized loop. choose_mma and the memory passes read it;
budget_smem replaces `kernel.info` with its KernelMemory. The `min_blocks` launch parameter is checked by
`min_blocks` (called by budget_smem, so that its errors come after the memory passes' own). Both are read
through `launch_params.requested_launch` (declared `NW: warps`, or the deprecated `WARPS` / `MIN_BLOCKS`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .. import ast as A
from ..diagnostics import CompileError
from ..launch_params import requested_launch
from ..types import TyWhat, numel
from .base import Walker, for_loops

MAX_THREADS_PER_SM = 2048  # sm_80 .. sm_90


@dataclass(frozen=True)
class LaunchConfig:
    threads: int  # consumer threads per block
    producers: int = 0  # extra threads that only load operands (a warp-specialized matmul loop)

    @property
    def launch_threads(self) -> int:
        return self.threads + self.producers


def choose_threads(program: A.Program) -> A.Program:
    return replace(program, kernels=tuple(replace(k, info=launch_config(k)) for k in program.kernels))


def launch_config(k: A.Kernel) -> LaunchConfig:
    plans = planned_loops(k)
    threads = _threads(k, plans)
    for plan in plans:
        if plan.consumers != threads:
            raise CompileError(f"two tensor-core loops in kernel '{k.name}' want different warp counts "
                               f"({plan.consumers // 32} and {threads // 32})", k.span,
                               ("give both loops the same tile sizes, or set WARPS",))
    return LaunchConfig(threads, max((p.producers for p in plans), default=0))


def planned_loops(k: A.Kernel) -> list:
    """The `For.plan`s of `k` (plan_matmul's tensor-core loops), in program order."""
    return [f.plan for f in for_loops(k.body) if f.plan is not None]


def _threads(k: A.Kernel, plans: list) -> int:
    if plans:  # the tensor-core loop decides the warps; every plan in a kernel must agree
        return max(p.consumers for p in plans)
    asked = requested_launch(k)
    if asked.warps is not None:
        v = asked.warps
        if not isinstance(v, int) or v < 1 or v > 32 or v & (v - 1):
            raise CompileError(f"{asked.names['warps']} must be a power of two from 1 to 32, got {v}", k.span)
        return 32 * v
    sizes = _TileSizes()
    sizes.walk(k.body)
    t = 32
    while t < 256 and t * 8 < sizes.biggest:
        t *= 2
    return t


def min_blocks(k: A.Kernel, threads: int) -> int:
    """The `min_blocks` launch parameter, if the kernel declares one: resident blocks per SM requested of
    ptxas, which caps registers per thread at 65536 / (threads * min_blocks) (0: no request)."""
    asked = requested_launch(k)
    v = asked.min_blocks
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v * threads > MAX_THREADS_PER_SM:
        most = MAX_THREADS_PER_SM // threads
        raise CompileError(f"{asked.names['min_blocks']} must be an integer from 0 to {most} for {threads} threads "
                           f"per block (at most {MAX_THREADS_PER_SM} threads per SM), got {v}", k.span)
    return v


class _TileSizes(Walker):
    """Finds the element count of the largest tile a kernel computes."""

    biggest = 1

    def __getattr__(self, name):
        if not name.startswith("on_"):
            raise AttributeError(name)
        return self._see

    def _see(self, node):
        ty = getattr(node, "ty", None)
        if ty is not None and ty.what == TyWhat.VALUE and ty.shape:
            self.biggest = max(self.biggest, numel(ty.shape))

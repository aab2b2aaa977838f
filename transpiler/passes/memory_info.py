"""What the memory passes record: the partial plan they pass on (MemoryPlan), the final KernelMemory, `For.stream` tiles.

`kernel.info` is choose_threads' LaunchConfig before the memory passes, a MemoryPlan while they run
(place_resident, plan_streams, assign_layouts and plan_tma each fill their fields), and budget_smem's
KernelMemory after them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..diagnostics import Span

# 128-byte swizzled tiles (wgmma operands): the XOR pattern repeats every 8 rows of 128 bytes, and the
# hardware takes it from the address bits, so each tile starts at a multiple of 1024 bytes
SWIZZLE_ALIGN = 1024


@dataclass
class SmemUse:
    what: str
    bytes: int
    span: Span

    @property
    def line(self) -> int:
        return self.span.line


@dataclass(frozen=True)
class StreamTile:
    """A tile loaded at the top of a `pipeline(..., stages=S)` loop's body: copied global -> shared
    memory by cp.async S - 1 iterations ahead, into a ring of S stages of `stage_bytes` from byte
    `offset` (rows of `ld` elements). Read only as the right operand of mma products, it never enters registers; read
    otherwise too (`regs`), each iteration reads it from shared memory into its register layout,
    so the next iteration's global load is in flight while this one computes."""
    name: str
    rows: int
    cols: int
    ld: int
    offset: int
    stage_bytes: int
    # a gather (`k_cache[blk, row, h, 0 : D]` with index tiles [rows]): the load with the loop's
    # definitions of its index names substituted (so it can be evaluated one iteration ahead),
    # its index tiles laid out for `copy_layout`, the blocked [rows, cols] layout of the copy
    gather: Any = None
    copy_layout: Any = None
    regs: bool = False
    stages: int = 2  # the ring's depth: the loop's `stages`, or 2 when that does not fit
    swizzled: bool = False  # 128-byte swizzled rows (a wgmma operand; `ld` is then `cols`, no padding)
    # filled by TMA (sm_90a, a wgmma loop whose every tile qualifies, see plan_tma.tma_obstacle): the box of one
    # 64-column atom in the tensor's dims, innermost first ((64, 1, rows, 1) for `k[b, n0 : n0 + BN, h, 0 : D]`);
    # () when the ring is filled by cp.async, with the reason in `tma_why` (a wgmma loop's tiles only)
    tma_box: tuple = ()
    tma_why: str = ""


@dataclass(frozen=True)
class MemoryPlan:
    """The memory plan of a kernel as far as the memory passes have come (`kernel.info` between them)."""

    launch: Any  # choose_threads' LaunchConfig
    # the budget's attempt (budget_smem.Attempt.shrink): streamed rings 0 as asked, 1 at most 2 stages,
    # 2 also no tiles read into registers
    shrink: int = 0
    # place_resident: tile -> (byte offset, row pitch), their uses, the 128-byte swizzled ones
    resident: dict = field(default_factory=dict)
    resident_uses: tuple = ()
    swizzled: frozenset = frozenset()
    # plan_streams (the tiles themselves are on `For.stream`): the rings' region, from `stream_offset`, as one
    # use (or none), the TMA rings' mbarriers (byte offset, count), the scratch its gathers' index tiles need
    stream_offset: int = 0
    stream_uses: tuple = ()
    mbar: tuple = (0, 0)
    gather_uses: tuple = ()
    # assign_layouts: every operation's scratch, in program order, and each variable's layout
    uses: tuple = ()
    var_layouts: dict = field(default_factory=dict)
    # plan_tma
    tma_maps: tuple = ()

    @property
    def threads(self) -> int:
        return self.launch.threads


@dataclass
class KernelMemory:
    threads: int
    smem_bytes: int  # dynamic shared memory per block (the largest single use; uses do not overlap)
    smem_limit: int
    uses: list[SmemUse] = field(default_factory=list)
    var_layouts: dict = field(default_factory=dict)
    producers: int = 0  # extra threads that only load operands (a warp-specialized matmul loop)
    resident: dict = field(default_factory=dict)  # tile -> (byte offset, row pitch in elements) kept in shared memory
    resident_bytes: int = 0  # the resident tiles' region, at the start of shared memory; scratch follows it
    min_blocks: int = 0  # blocks per SM asked of ptxas (`__launch_bounds__` second argument); 0: no request
    swizzled: frozenset = frozenset()  # resident tiles stored in 128-byte swizzled rows (wgmma A operands)
    align: int = 16  # alignment of the shared-memory base codegen establishes (SWIZZLE_ALIGN with swizzled tiles)
    # the mbarriers of the TMA-filled rings (one per stage, shared by the loops, which run one after another):
    # byte offset and count; initialized once at kernel start
    mbar_offset: int = 0
    mbar_count: int = 0
    tma_maps: tuple = ()  # the TmaMaps the host passes after the other arguments (plan_tma.kernel_tma_maps)
    sync: Any = None  # which barrier each statement's sync points use (plan_barriers.SyncPlan), set by plan_barriers

    @property
    def launch_threads(self) -> int:
        return self.threads + self.producers


def round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to

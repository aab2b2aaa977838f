"""TMA epilogue stores: which store of a persistent wgmma tile loop goes out through shared memory by TMA.

A persistent kernel's consumers store each tile after its main loop while the producer already loads the next
tile; the tensor cores idle until they are back. The register path (`tilex_store_quad`: quad shuffles and
per-chunk bounds tests) costs a consumer thread ~800 instructions for a 128x128 bf16 tile (SASS, sm_90a). A
store that qualifies (`tma_store`) is instead written by each consumer warpgroup into a 128-byte swizzled
staging buffer (stmatrix, ~8 instructions per 16 columns) and stored by one thread with
`cp.async.bulk.tensor` in [64, 64] boxes: rows and columns outside the tensor are not written (the valid
region), and the consumers start the next tile at once; a warpgroup waits for its previous store to have read
the buffer only when it next fills it.

Opt-in and not yet on any default path: on the H200 (session 18) linear_persistent_tma matched torch at odd sizes with
128x128, 128x256, 64x128 and 128x64 tiles, and hung with BM = 256 (four consumer warpgroups): not this pass's
barriers but the consumers' setmaxnreg.inc asking more registers than the block held (fixed in session 19,
codegen/matmul.py `register_split`). A kernel asks for it with the compile-time parameter `TMA_STORE: bool = True`.
Qualifies: each `T[r : r + BM, c : c + BN] = v` among the statements after the main loop in the tile
loop's body (not nested in an `if`) that stores a whole accumulator-shaped tile into a rank-2 bf16/f16 tensor
whose row pitch is provably a multiple of 16 bytes (a `where` fact, no launch-time wish is recorded), with
32-bit slice starts, when the staging buffer fits in shared memory next to the ring: BM x C x 2 bytes for C
columns at a time (BN, else the largest whole number of 64-column chunks dividing BN that fits). Codegen
(codegen/matmul.py) also requires the stored value to be in the accumulators' fragment layout, else it stores
through registers as before. Used by budget_smem (the buffer's region, after the ring), plan_tma (the store's
2-D map of [64, 64] boxes) and codegen.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ast as A
from ..exprs import mentions
from ..types import DType, MmaStrategy
from .plan_matmul import SWIZZLE_ELEMS

OPT_IN = "TMA_STORE"  # the kernel's compile-time bool that asks for it (`TMA_STORE: bool = True`): new, opt-in
BOX_ROWS = 64  # one consumer warpgroup's rows: each stores its own part of the tile
SLACK = 1024  # the buffer starts on a 1024-byte boundary after the ring's mbarriers (the swizzle pattern's period)
MAX_CONSUMER_GROUPS = 4  # named barriers 2..5, one per consumer warpgroup (0: the block's, 1: the consumers')


@dataclass(frozen=True)
class TmaStore:
    stores: tuple  # the A.Store statements, in order (each its own staging buffer)
    cols: int  # columns staged per round (a multiple of 64 dividing BN)
    staging: int  # bytes of one store's staging buffer: BM x cols elements

    @property
    def tensors(self) -> tuple:
        return tuple(dict.fromkeys(st.target.base.id for st in self.stores))

    @property
    def region(self) -> int:
        """Bytes of shared memory the buffers take after the ring (with the alignment slack)."""
        return len(self.stores) * self.staging + SLACK


def persistent_loops(k: A.Kernel) -> list[tuple[A.For, A.For]]:
    """(tile loop, wgmma main loop) of each persistent tile loop of `k`, in source order."""
    found = []

    def walk(b: A.Block) -> None:
        for s in b.stmts:
            if isinstance(s, A.For) and s.plan is None:
                inner = next((st for st in s.body.stmts if isinstance(st, A.For) and st.plan is not None
                              and st.plan.persistent and st.plan.strategy == MmaStrategy.WGMMA), None)
                if inner is not None:
                    found.append((s, inner))
                    continue
            for child in (getattr(s, "body", None), getattr(s, "then", None), getattr(s, "orelse", None)):
                if isinstance(child, A.Block):
                    walk(child)

    walk(k.body)
    return found


def tma_store(k: A.Kernel, outer: A.For, inner: A.For, limit: int) -> TmaStore | None:
    """The epilogue stores of persistent tile loop `outer` (main loop `inner`) that go out by TMA, or None."""
    p = inner.plan
    if dict(k.defines).get(OPT_IN) is not True or p.consumers // 128 > MAX_CONSUMER_GROUPS:
        return None
    after = outer.body.stmts[outer.body.stmts.index(inner) + 1:]
    stores = tuple(s for s in after if isinstance(s, A.Store) and s.op is None and s.atomic is None  # a plain store
                   and s.target.ty is not None
                   and s.target.ty.shape and _obstacle(k, s, p.bm, p.bn) is None)
    if not stores:
        return None
    cols = p.bn
    while cols >= SWIZZLE_ELEMS:
        if p.bn % cols == 0 and cols % SWIZZLE_ELEMS == 0 \
                and p.smem_bytes + len(stores) * p.bm * cols * 2 + SLACK <= limit:
            return TmaStore(stores, cols, p.bm * cols * 2)
        cols -= SWIZZLE_ELEMS
    return None if len(stores) == 1 else tma_store_first(k, outer, inner, limit, stores[0])


def tma_store_first(k, outer, inner, limit, first) -> TmaStore | None:
    """The first store alone, when the buffers of all do not fit."""
    p = inner.plan
    cols = p.bn
    while cols >= SWIZZLE_ELEMS:
        if p.bn % cols == 0 and cols % SWIZZLE_ELEMS == 0 and p.smem_bytes + p.bm * cols * 2 + SLACK <= limit:
            return TmaStore((first,), cols, p.bm * cols * 2)
        cols -= SWIZZLE_ELEMS
    return None


def _obstacle(k: A.Kernel, st: A.Store, bm: int, bn: int) -> str | None:
    t = st.target
    if not isinstance(t.base, A.Name) or t.kwargs:
        return "not a plain subscript of a tensor"
    param = next((q for q in k.params if q.name == t.base.id and q.type.dims is not None), None)
    if param is None or not param.is_out or len(param.type.dims) != 2 or len(t.items) != 2:
        return "not a rank-2 tensor"
    if DType(param.type.dtype) not in (DType.BF16, DType.F16):
        return "not a 2-byte float tensor"
    if tuple(t.ty.shape) != (bm, bn):
        return "not a whole accumulator tile"
    if _read(k.body, t.base.id):  # a TMA store completes asynchronously: nothing may read the tensor back
        return "the kernel reads the tensor"
    for item in t.items:
        if not isinstance(item, A.Slice) or item.start is None or item.start.ty is None \
                or item.start.ty.dtype is not DType.I32:
            return "not two slices with 32-bit starts"
    last = param.type.dims[-1]
    per = 16 // DType(param.type.dtype).itemsize
    if isinstance(last, A.IntLit):
        return None if last.value % per == 0 else "row pitch not a multiple of 16 bytes"
    ok = k.facts is not None and k.facts.divisor(last.id) % per == 0  # no wish recorded (no launch variant)
    return None if ok else "row pitch not known to be a multiple of 16 bytes"


def _read(b: A.Block, name: str) -> bool:
    """Whether a statement of `b` (nested ones included) reads tensor `name` (a store's target is not a read,
    its indices are)."""
    for st in b.stmts:
        if isinstance(st, A.Store):
            exprs = [st.value] + [e for it in st.target.items
                                  for e in ((it.start, it.stop) if isinstance(it, A.Slice) else (it,))]
            if st.op is not None and getattr(st.target.base, "id", None) == name:
                return True  # `y[...] += v` reads y
        else:
            exprs = [getattr(st, f) for f in ("value", "cond", "start", "stop", "step") if hasattr(st, f)]
        if any(mentions(e, name) for e in exprs if isinstance(e, A.Expr)):
            return True
        for child in (getattr(st, "body", None), getattr(st, "then", None), getattr(st, "orelse", None)):
            if isinstance(child, A.Block) and _read(child, name):
                return True
    return False


def kernel_tma_stores(k: A.Kernel, limit: int) -> list[tuple[A.For, A.For, TmaStore]]:
    """(tile loop, main loop, store) of every persistent tile loop of `k` whose epilogue stores by TMA."""
    loops = persistent_loops(k)
    if len(loops) != 1:  # the buffer's place is after the one persistent ring
        return []
    out = []
    for outer, inner in loops:
        ts = tma_store(k, outer, inner, limit)
        if ts is not None:
            out.append((outer, inner, ts))
    return out

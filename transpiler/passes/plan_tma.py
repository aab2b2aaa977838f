"""Pass plan_tma: the TMA descriptors a kernel's host passes; and (for plan_streams) which rings TMA fills.

Needs: plan_matmul (the wgmma main loops' operands), plan_streams (`For.stream`, whose wgmma rings
took their boxes from `tma_boxes`). Guarantees: `kernel.info.tma_maps` lists, once per kernel, the
TMA descriptors (`TmaMap`) the host encodes and passes: those of the wgmma main loops and of the
TMA-filled rings; the launch spec (launchspec.py) and codegen both read them from there.

`tma_boxes`, called by plan_streams for the tiles of a wgmma `pipeline` loop (their rows, columns,
swizzle and gathers decided; check_constraints' facts prove row pitches), gives either every tile of
the loop a `tma_box` (one 64-column atom's box in the tensor's dims, innermost first) or none, each
then carrying the first obstacle in `tma_why` (a ring is filled one way).
"""
from __future__ import annotations

from dataclasses import replace

from .. import ast as A
from ..exprs import unparse
from ..spec import TmaMap
from ..targets import Target
from ..types import DType, MmaStrategy
from .base import Walker
from .plan_matmul import swizzle_elems
from .plan_tma_store import BOX_ROWS, kernel_tma_stores


def plan_tma(program: A.Program, tgt: Target) -> A.Program:
    return replace(program, kernels=tuple(replace(k, info=replace(k.info, tma_maps=kernel_tma_maps(k, tgt.smem_per_block)))
                                          for k in program.kernels))


def tma_boxes(k: A.Kernel, tiles: list, loads: dict) -> list:
    """`tiles` (the StreamTiles of one wgmma loop; `loads`: tile name -> its tensor load) with TMA boxes
    when every one qualifies, else with the first tile's obstacle in `tma_why`."""
    why = next((w for w in (tma_obstacle(k, t, loads[t.name]) for t in tiles) if w), None)
    return [replace(t, tma_box=() if why else tma_box(loads[t.name], t.rows), tma_why=why or "") for t in tiles]


# TMA (cp.async.bulk.tensor, tiled mode) limits that the compiler checks (the runtime checks the rest:
# a 16-byte aligned base, strides below 2^40): at most 5 dims, box dims of at most 256, and with
# SWIZZLE_128B an inner box of at most 128 bytes (64 2-byte elements: one swizzle atom per box)
TMA_MAX_RANK = 5
TMA_MAX_BOX = 256


def tma_box(load: A.Index, rows: int) -> tuple:
    """The box of one 64-column atom of the streamed tile `load` (slices on one axis and the last, scalar
    indices elsewhere) in the tensor's dims, innermost first: 64 on the last axis, `rows` on the sliced
    row axis, 1 on the others. It lands in shared memory as [rows, 64] elements, 128 bytes a row."""
    last = len(load.items) - 1
    row = next(a for a, it in enumerate(load.items) if isinstance(it, A.Slice) and a != last)
    return tuple(64 if a == last else rows if a == row else 1 for a in reversed(range(last + 1)))


def tma_obstacle(k: A.Kernel, t, load: A.Index) -> str | None:
    """Why the ring of streamed tile `t` (a StreamTile; `load`, in a wgmma loop) cannot be filled by TMA, or None.

    TMA needs: a swizzled plain slice (no gather, not read into registers), at most TMA_MAX_RANK dims,
    columns in whole 64-element atoms, rows a multiple of 8 (whole swizzle patterns) and at most
    TMA_MAX_BOX, a row pitch provably a multiple of 16 bytes (so is every stride of a row-major tensor),
    and 32-bit indices (TMA coordinates are int32; out-of-range ones read zeros, as the language does)."""
    name = load.base.id
    p = next(p for p in k.params if p.name == name)
    if DType(p.type.dtype).itemsize != 2:
        return f"'{name}' is not a 2-byte float (the ring's byte counts assume bf16/f16)"
    if t.gather is not None or not t.swizzled:
        return f"'{t.name}' is {'gathered' if t.gather is not None else 'not a 128-byte swizzled wgmma operand'}"
    if len(load.items) > TMA_MAX_RANK:
        return f"'{name}' has {len(load.items)} dims (TMA maps have at most {TMA_MAX_RANK})"
    if t.cols % 64:
        return f"'{t.name}' has {t.cols} columns, not whole 64-column atoms"
    if t.rows % 8 or t.rows > TMA_MAX_BOX:
        return f"'{t.name}' has {t.rows} rows (a TMA box takes a multiple of 8, at most {TMA_MAX_BOX})"
    last = p.type.dims[-1]
    per = 16 // DType(p.type.dtype).itemsize
    if isinstance(last, A.IntLit):
        ok = last.value % per == 0
    else:
        ok = k.facts is not None and k.facts.proves(last.id, per)
    if not ok:
        return (f"the row pitch of '{name}' is not known to be a multiple of 16 bytes "
                f"(add `where {unparse(last)} % {per} == 0`)")
    for it in load.items:
        for e in ((it.start,) if isinstance(it, A.Slice) else (it,)):
            if e is not None and e.ty.dtype is not DType.I32:
                return f"an index of '{name}' is {e.ty.dtype.value}, TMA coordinates are 32-bit"
    return None


def stream_source(v: A.Expr) -> A.Expr | None:
    """The tensor load a pipeline loop may stream for the value `v` of an assignment: `v` itself
    (`t[...]`) or the load under an exact widening `t[...].to(f32)` of a 2-byte float; else None."""
    if isinstance(v, A.Method) and v.name == "to" and v.ty.dtype is DType.F32 and isinstance(v.obj, A.Index) \
            and v.obj.ty.dtype in (DType.BF16, DType.F16):
        v = v.obj
    if isinstance(v, A.Index) and isinstance(v.base, A.Name) and v.base.ty.what == "tensor":
        return v
    return None


def kernel_tma_maps(k: A.Kernel, smem_limit: int | None = None) -> tuple[TmaMap, ...]:
    """The TMA descriptors kernel `k`'s wgmma loops read, in parameter order (one per tensor and box): per
    wgmma main loop its A operand's and each product's B operand's, per TMA-filled ring one N-D map per tile."""
    found: list[tuple[str, int, tuple]] = []
    dtypes = {p.name: DType(p.type.dtype) for p in k.params}

    class _Find(Walker):
        def on_For(self, s):
            if s.plan is not None and s.plan.strategy == MmaStrategy.WGMMA:
                p = s.plan
                a = p.products[0].a
                cols = swizzle_elems(p.dtype)
                found.append((a.tensor, p.bm, main_box(a, p.bm, cols)))
                for prod in p.products:
                    rows = p.bn if prod.b.kmajor else p.bk
                    found.append((prod.b.tensor, rows, main_box(prod.b, rows, cols)))
            for t in getattr(s, "stream", ()) or ():  # a streamed loop's TMA-filled ring: an N-D map per tile
                if t.tma_box:
                    value = next(st.value for st in s.body.stmts if isinstance(st, A.Assign) and st.name == t.name)
                    found.append((stream_source(value).base.id, t.rows, t.tma_box))

    _Find().walk(k.body)
    # a persistent tile loop's epilogue store by TMA (plan_tma_store): a 2-D map of [64, 64] boxes
    found += [(t, BOX_ROWS, ()) for _, _, ts in kernel_tma_stores(k, k.info.smem_limit if smem_limit is None else smem_limit)
              for t in ts.tensors]
    unique = list(dict.fromkeys(found))
    return tuple(TmaMap(f"tx_map{i}", t, rows, swizzle_elems(dtypes[t]), box) for i, (t, rows, box) in enumerate(unique))


def main_box(op, rows: int, cols: int = 64) -> tuple:
    """The box of a main-loop operand's N-D tensor map, innermost first: () for a rank-2 tensor (its 2-D map
    of [rows, cols] boxes; cols: a 128-byte row, 64 elements of bf16/f16, 128 of fp8), else [cols, rows] on
    the last two axes and 1 on each batch axis."""
    return (cols, rows) + (1,) * len(op.batch) if op.batch else ()

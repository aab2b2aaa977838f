"""Pass plan_streams: which tiles each `pipeline` loop copies into shared memory iterations ahead.

Needs: place_resident (`kernel.info` a MemoryPlan: the resident tiles come first in shared memory,
the budget's `shrink`), choose_mma (`For.mma` marks wgmma loops), plan_matmul (a kernel with planned
loops streams nothing), choose_threads (the copy layouts); the hazard proofs of stream_hazards and,
for wgmma loops, plan_tma's choice of TMA boxes. Guarantees: `For.stream` of each loop lists its
tiles (StreamTile): every one is assigned once at the top of its loop's body from a load that reads
the same values one or more iterations early (no index or tensor it reads is written in between,
`stream_hazards`); a gather's index definitions are substituted into the load and laid out for its
blocked copy; rings of loops run one after another share one region (the largest) from
`info.stream_offset`, swizzled stages first and 1024-byte aligned; a ring over the target's limit
gets 2 stages, then loses its tiles read into registers (and with `shrink`, see budget_smem);
`info.stream_uses` is the region's use (with the TMA rings' mbarriers, `info.mbar`, after it).
"""
from __future__ import annotations

from dataclasses import replace

from .. import ast as A
from ..targets import MATMUL_PAD, Target
from ..types import DType, TyWhat
from ..exprs import untransposed
from .base import Rewriter, Walker, name_nodes, names_in, stored_tensors
from .assign_layouts import LayoutAssigner, wgmma_loops
from .memory_info import SWIZZLE_ALIGN, SmemUse, StreamTile, round_up
from .plan_tma import stream_source, tma_boxes
from .stream_hazards import assigned, assigned_count, local_to, nested_loops, outside_loops, rows_ahead_disjoint


def plan_streams(program: A.Program, tgt: Target) -> A.Program:
    return replace(program, kernels=tuple(_kernel(k, tgt) for k in program.kernels))


def _kernel(k: A.Kernel, tgt: Target) -> A.Kernel:
    plan = k.info
    offset = sum(round_up(u.bytes, 16) for u in plan.resident_uses)
    wgmma = {id(f) for f in wgmma_loops(k)}
    if wgmma:  # swizzled stages start aligned (the gap is counted in the resident region)
        offset = round_up(offset, SWIZZLE_ALIGN)
    index_tiles = LayoutAssigner(k, tgt)  # lays out the index tiles of gathers (no variable is known to it)
    streams, uses, mbar = stream_tiles(k, tgt, wgmma, plan.shrink, offset, index_tiles)

    class _Set(Rewriter):
        def visit_For(self, f):
            tiles = streams.get(id(f), ())
            body = self.visit(f.body)
            return replace(f, body=body, stream=tiles) if tiles or body is not f.body else f
    info = replace(plan, stream_offset=offset, stream_uses=tuple(uses), mbar=mbar, gather_uses=tuple(index_tiles.uses))
    return replace(k, body=_Set().visit(k.body), info=info)


def stream_tiles(k: A.Kernel, tgt: Target, wgmma: set, shrink: int, offset: int, mem) -> tuple[dict, list, tuple]:
    """{id(for loop): (StreamTile, ...)}, their shared-memory uses, from byte `offset` on, and the TMA
    rings' mbarriers (byte offset, count). `wgmma`: the ids of the wgmma loops; `shrink`: the budget's
    attempt; `mem`: a LayoutAssigner of `k` (its `mma_layout`, `canon`, `assign`).

    A tile qualifies when, in a `pipeline(..., stages >= 2)` loop of a kernel without
    planned (wgmma/mma ring) loops, it is assigned once at the top of the loop body from a
    2-byte-float tensor load `t[i, a : a + R, j, c : c + C]` (slices on one axis and the
    last, scalar indices elsewhere, no `other`, C % 8 == 0) of a tensor the kernel does not
    write (or writes only in this loop's rows, `rows_ahead_disjoint`), whose indices use only the loop variable and names not assigned in the loop. Read
    only as `x @ tile` or `x @ tile.T` products that run on mma.sync (in a wgmma loop also as the left
    operand, `tile @ x.T`: wgmma reads A from the swizzled ring), it stays in shared memory; any other
    read makes it `regs` (read from shared memory into registers)."""
    if mem.plans or not tgt.cp_async:
        return {}, [], (0, 0)
    limit = tgt.smem_per_block
    out = {}

    def eligible_load(v, loop_var, changing) -> bool:
        if not (isinstance(v, A.Index) and isinstance(v.base, A.Name) and v.base.ty.what == TyWhat.TENSOR):
            return False
        if v.kwargs or v.ty.dtype not in (DType.BF16, DType.F16) or len(v.ty.shape) != 2:
            return False
        slices = [a for a, it in enumerate(v.items) if isinstance(it, A.Slice)]
        last = len(v.base.ty.shape) - 1  # a tensor's type holds its dims
        if len(slices) != 2 or slices[1] != last or len(v.items) != last + 1:
            return False
        if any(not isinstance(it, A.Slice) and it.ty.shape for it in v.items):
            return False  # a gather: gather_load
        if v.ty.shape[1] % 8:
            return False
        if any(n.ty.what == TyWhat.TENSOR and n.id in stored for n in name_nodes(tuple(v.items))):
            return False  # an index read S - 1 iterations early could see a value not yet written
        return not (names_in(tuple(v.items)) & (changing - {loop_var}))

    def gather_load(v, loop, changing, at):
        """`v` with the loop's definitions of its index names substituted, if `v` (statement `at` of
        the loop body) is a gather of a [rows, cols] tile (index tiles of shape [rows] on the
        leading axes, scalars, and a slice of the tensor's last axis) whose indices depend only on
        the loop variable, values the loop does not change, and names the body defines once,
        before their first read and before `at`; else None."""
        if not (isinstance(v, A.Index) and isinstance(v.base, A.Name) and v.base.ty.what == TyWhat.TENSOR):
            return None
        if v.kwargs or v.ty.dtype not in (DType.BF16, DType.F16) or len(v.ty.shape) != 2:
            return None
        rows, cols = v.ty.shape
        last = len(v.base.ty.shape) - 1
        if len(v.items) != last + 1 or not isinstance(v.items[last], A.Slice) or cols % 8:
            return None
        lead = v.items[:last]
        if any(isinstance(it, A.Slice) for it in lead):
            return None
        if not any(it.ty.shape for it in lead) or any(tuple(it.ty.shape) not in ((), (rows,)) for it in lead):
            return None
        stmts = loop.body.stmts
        where_at = {}
        for i, st in enumerate(stmts):
            if isinstance(st, A.Assign):
                where_at.setdefault(st.name, []).append(i)
        local = changing - {loop.var}

        def subst(e, pos, depth=0):
            if depth > 16:
                return None
            bad = names_in(e) & local
            table = {}
            for n in bad:
                at_n = where_at.get(n, [])
                # one definition, at the top of the body, before this use, and before any read of n
                # in the body (a read before it would see the previous iteration's value)
                if len(at_n) != 1 or assigned_count(loop.body, n) != 1 or at_n[0] >= pos or not local_to(loop, n):
                    return None
                val = subst(stmts[at_n[0]].value, at_n[0], depth + 1)
                if val is None:
                    return None
                table[n] = val
            return _replace_names(e, table) if table else e

        items = []
        for it in v.items:
            if isinstance(it, A.Slice):
                for part in (it.start, it.stop):
                    if part is not None and names_in(part) & local:
                        return None
                items.append(it)
                continue
            it2 = subst(it, at)
            if it2 is None:
                return None
            items.append(it2)
        # what is left must be evaluable by any thread one iteration ahead: scalars and tensors no
        # statement writes, not tiles computed before the loop (their layouts are not the copy's)
        for n in name_nodes(tuple(items[:last])):
            if n.id == loop.var:
                continue
            if n.ty.what == TyWhat.TENSOR and n.id in stored:
                return None
            if n.ty.what != TyWhat.TENSOR and n.ty.shape:
                return None
        return replace(v, items=tuple(items))

    def operand_uses(block, name, left: bool = False) -> tuple[int, bool]:
        """(reads as an mma right operand, or with `left` (a wgmma loop) as a left one, whether there is any
        other read)."""
        good, bad = [0], [False]

        class _U(Walker):
            def on_BinOp(self, e):
                if e.op is A.BinOpKind.MATMUL:
                    r = untransposed(e.rhs)
                    lhs = left and isinstance(e.lhs, A.Name) and e.lhs.id == name  # wgmma: A from the ring
                    if (isinstance(r, A.Name) and r.id == name) or lhs:
                        if mem.mma_layout(e) is not None:
                            good[0] += 1
                        else:
                            bad[0] = True
                        if not lhs:
                            self.walk(e.lhs)
                        if not (isinstance(r, A.Name) and r.id == name):
                            self.walk(e.rhs)
                        return False
                return None

            def on_Name(self, e):
                if e.id == name:
                    bad[0] = True
        _U().walk(block)
        return good[0], bad[0]

    stored = stored_tensors(k.body)  # a copy one iteration ahead could read stale data
    nested = nested_loops(k.body)  # ids of the loops inside another loop

    class _Loops(Walker):
        def on_For(self, f):
            if not (f.pipelined and f.stages >= 2 and f.plan is None):
                return None
            changing = assigned(f.body)
            tiles, ld_of = [], {}
            for at, st in enumerate(f.body.stmts):
                gather = None
                load = stream_source(st.value) if isinstance(st, A.Assign) else None
                if load is None:
                    continue
                if not eligible_load(load, f.var, changing):
                    gather = gather_load(load, f, changing, at)
                    if gather is None:
                        continue
                if load.base.id in stored and (gather is not None or not rows_ahead_disjoint(k.body, nested, f, load, at)):
                    continue
                # a per-iteration value: assigned once, before any read in this body, and not
                # read anywhere its value could come from outside an iteration
                if not local_to(f, st.name) or outside_loops(k.body, st.name):
                    continue
                if assigned_count(f.body, st.name) != 1:
                    continue
                good, other = operand_uses(f.body, st.name, left=id(f) in wgmma)
                if not good and not other:
                    continue
                other = other or load is not st.value  # converted: read into registers
                if other and gather is not None:
                    continue  # a gather read in registers loads directly (staging it measured slower)
                rows, cols = load.ty.shape
                swizzled = id(f) in wgmma and not other and gather is None
                ld = cols if swizzled else cols + MATMUL_PAD
                stage = round_up(rows * ld * load.ty.dtype.itemsize, SWIZZLE_ALIGN if swizzled else 16)
                copy = None
                if gather is not None:  # index tiles in the rows layout of a blocked copy of the tile
                    copy = mem.canon((rows, cols))
                    row_view = copy.axes(0).compact()  # a slot per row a thread copies
                    gather = replace(gather, items=tuple(
                        mem.assign(it, row_view) if it.ty.shape else it for it in gather.items))
                tiles.append(StreamTile(st.name, rows, cols, ld, 0, stage, gather, copy, regs=other,
                                        swizzled=swizzled))
                ld_of[st.name] = load
            if id(f) in wgmma and tiles:
                tiles = tma_boxes(k, tiles, ld_of)
            # a ring over the target's shared memory (alone, or with the rest: `shrink`, see
            # budget_smem) gets 2 stages, then drops the tiles read into registers (they load directly)
            ring = lambda ts, n: offset + n * sum(t.stage_bytes for t in ts)  # noqa: E731
            depth_f = f.stages if ring(tiles, f.stages) <= limit and shrink < 1 else 2
            if ring(tiles, depth_f) > limit or shrink >= 2:
                tiles = [t for t in tiles if not t.regs]
            if tiles:
                out[id(f)] = tuple(replace(t, stages=depth_f) for t in tiles)
                spans.append(f.span)
                return False  # no streaming inside a streamed loop: both would use the one region
            return None

    spans: list = []
    _Loops().walk(k.body)
    # loops run one after another: each loop's tiles start at `offset`, the region is the largest
    size, names = 0, []
    for key, tiles in out.items():
        at, placed = offset, []
        # swizzled stages first: each a multiple of SWIZZLE_ALIGN bytes from an aligned `offset`
        for t in sorted(tiles, key=lambda t: not t.swizzled):
            placed.append(replace(t, offset=at))
            at += t.stages * t.stage_bytes
            names.append(t.name + (" (read into registers)" if t.regs else ""))
        out[key] = tuple(placed)
        size = max(size, at - offset)
    if not size:
        return out, [], (0, 0)
    # the TMA-filled rings' mbarriers (one per stage) follow the largest ring: no loop's tiles overlap them
    tma_stages = max((ts[0].stages for ts in out.values() if ts[0].tma_box), default=0)
    mbar = (offset + size, tma_stages)
    size += round_up(8 * tma_stages, 16)
    stages = sorted({tiles[0].stages for tiles in out.values()})
    how = ("TMA" if all(ts[0].tma_box for ts in out.values()) else "cp.async" if not tma_stages
           else "TMA or cp.async")
    what = (f"streaming {', '.join(dict.fromkeys(names))} into shared memory by {how} "
            f"({' or '.join(map(str, stages))} stages each)")
    return out, [SmemUse(what, size, spans[0])], mbar


def _replace_names(e, table: dict):
    """`e` with every Name in `table` replaced by its expression (typed AST in, typed AST out)."""
    class _R(Rewriter):
        def visit_Name(self, n):
            return table.get(n.id, n)
    return _R().visit(e)

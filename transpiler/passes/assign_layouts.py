"""Pass assign_layouts: the memory space and layout of every expression, and the scratch each needs.

Needs: choose_threads, choose_mma (`For.mma`), plan_matmul, place_resident and plan_streams
(`kernel.info` a MemoryPlan with the resident tiles; `For.stream`). Guarantees: every value has
`ty.space` and every tile `ty.layout`; elementwise results take the layout of the value they are
assigned to or of their first full-shape operand, operands are read through broadcast views, loads
and constructors are materialized in the layout their consumer wants, a reduction yields the slice
of its operand's layout; `kernel.info.uses` lists the shared memory each operation needs (in program
order, after plan_streams' `gather_uses`) and `var_layouts` each variable's layout. The products of a
wgmma loop read A from registers unless it is a swizzled resident tile or a tile the loop streams (choose_mma
has checked they can).

Its own fixpoint: when a variable is updated in a tensor-core layout, or read at another layout than it
was made in (`t[:, None]` at a fragment, a gather's index tiles), a second run creates it there
(`prefer`, the seed of the second run); nothing else runs again.
"""
from __future__ import annotations

from dataclasses import replace

from .. import ast as A
from ..builtins import FUNCTIONS, BuiltinKind as K, is_reduction, is_scan
from ..diagnostics import CompileError
from ..exprs import unparse, untransposed
from ..layout import Fragment, Layout, canonical, mma_fragment, mma_warp_grid, reduction_plan
from ..replicas import replicated
from ..targets import MATMUL_PAD, TENSOR_CORE_DTYPES, Target
from ..types import DType, MemSpace, MmaStrategy, TyWhat, numel
from .base import Rewriter, fail, for_loops
from .choose_threads import planned_loops
from .budget_smem import ring_what
from .memory_info import SmemUse
from .scan_rules import scan_layout


def compute_bytes(dt) -> int:
    return dt.compute.itemsize if dt.compute.itemsize >= 4 else 4


def reduce_smem_groups(layout: Layout, axis: int) -> int:
    """How many warps' partial results a reduction along `axis` must combine in shared memory."""
    return reduction_plan(layout, axis).groups


def assign_layouts(program: A.Program, tgt: Target) -> A.Program:
    return replace(program, kernels=tuple(_kernel(k, tgt) for k in program.kernels))


def _kernel(k: A.Kernel, tgt: Target) -> A.Kernel:
    mem = LayoutAssigner(k, tgt)
    out = mem.run()
    if mem.prefer:  # the second run's layouts may not need all of the first run's memory
        mem = LayoutAssigner(k, tgt, mem.prefer)
        out = mem.run()
    return out


def wgmma_loops(k: A.Kernel) -> list:
    """The pipeline loops of `k` whose register-tile products run as wgmma (choose_mma's choice), in order."""
    return [f for f in for_loops(k.body) if f.mma is not None and f.mma.strategy == MmaStrategy.WGMMA]


def mma_layout(e: A.BinOp, tgt: Target, threads: int) -> Layout | None:
    """The mma.sync fragment layout of a register-tile product `a @ b` in a block of `threads`, or None (the FMA
    fallback)."""
    (m, kk), (_, n) = e.lhs.ty.shape, e.rhs.ty.shape
    if not tgt.mma or e.lhs.ty.dtype not in TENSOR_CORE_DTYPES or e.rhs.ty.dtype != e.lhs.ty.dtype:
        return None
    if e.ty.dtype is not DType.F32 or kk % 16:
        return None
    grid = mma_warp_grid(m, n, threads // 32)
    if grid is None:
        return None
    return Layout.of(mma_fragment((m, n), *grid))


class LayoutAssigner(Rewriter):
    """One run of the layout rules over a kernel (`run`): annotates every expression (`assign`, the statement
    visitors), recording the shared memory each operation needs (`uses`) and what a second run should change
    (`prefer`: variables to create in another layout)."""

    def __init__(self, k: A.Kernel, tgt: Target, seed: dict | None = None):
        self.k = k
        self.target = tgt
        self.plan = k.info  # the MemoryPlan so far (place_resident, plan_streams)
        self.wgmma = {id(f) for f in wgmma_loops(k)}
        self.swizzled_resident = self.plan.swizzled  # resident tiles in 128-byte swizzled rows (read only by wgmma)
        self.loop = None  # the pipeline loop being visited
        self.seed = seed or {}  # variable -> layout to create it in (from a first run: what its updates produce)
        self.prefer: dict[str, Layout] = {}
        self.plans = planned_loops(k)
        self.T = self.plan.threads
        self.accs: dict[str, Layout] = {}  # accumulators of planned loops -> fragment layouts
        for plan in self.plans:
            frag = Layout.of(mma_fragment((plan.bm, plan.bn), plan.warps_m, plan.warps_n, plan.strategy))
            for prod in plan.products:
                self.accs[prod.acc] = frag
        self.in_plan = False
        self.streaming: frozenset = frozenset()  # names streamed into shared memory by the enclosing loops
        self.vars: dict[str, Layout | None] = {}
        self.uses: list[SmemUse] = []

    def run(self) -> A.Kernel:
        """The kernel annotated (the `where` facts, the grid, then the body), its uses and variables' layouts in
        `kernel.info`."""
        k = self.k
        where = tuple(self.assign(e) for e in k.where)
        grid = tuple(self.assign(e) for e in k.grid)
        body = self.visit(k.body)
        info = replace(self.plan, uses=tuple(self.plan.gather_uses) + tuple(self.uses), var_layouts=dict(self.vars))
        return replace(k, where=where, grid=grid, body=body, info=info)

    def canon(self, shape) -> Layout:
        return Layout.of(canonical(tuple(shape), self.T))

    def need(self, what: str, nbytes: int, node) -> None:
        self.uses.append(SmemUse(what, nbytes, node.span))

    def convert_if_needed(self, e: A.Expr, have: Layout, want: Layout | None) -> None:
        """Account for the shared memory codegen uses to move `e` from `have` to `want`."""
        if want is not None and not have.compatible(want):
            self.need(f"converting the layout of '{unparse(e)}'", numel(e.ty.shape) * compute_bytes(e.ty.dtype), e)

    # ---- layout choice
    def natural(self, e: A.Expr) -> Layout:
        """The layout an elementwise expression computes in when nothing asks for one."""
        shape = e.ty.shape
        found = self._find(e, shape)
        return found or self.canon(shape)

    def _find(self, e: A.Expr, shape) -> Layout | None:
        """The layout `e` naturally has, if a variable, a tensor-core product or a reduction of one decides it."""
        if e.ty is None or e.ty.what != TyWhat.VALUE or e.ty.shape != shape:
            return None
        if isinstance(e, A.Name) and e.kind is A.NameKind.LOCAL:
            return self.vars.get(e.id)
        if isinstance(e, A.BinOp) and e.op is A.BinOpKind.MATMUL:
            return self.mma_layout(e)
        if isinstance(e, A.Call) and is_reduction(e) and e.args[0].ty.shape:
            inner = self._find(e.args[0], e.args[0].ty.shape)
            if inner is None:
                return None
            out = inner
            for axis in sorted(_reduced_axes(e, len(e.args[0].ty.shape)), reverse=True):
                out = out.reduce(axis, keepdims=_keepdims(e))
            return out if out.shape == tuple(shape) else None
        if _elementwise(e):
            found = [got for c in _operands(e) if (got := self._find(c, shape)) is not None]
            frag = [f for f in found if isinstance(f.root, Fragment)]
            return (frag or found or [None])[0]
        return None

    def mma_layout(self, e: A.BinOp) -> Layout | None:
        return mma_layout(e, self.target, self.T)

    def assign(self, e: A.Expr, want: Layout | None = None) -> A.Expr:
        """Annotate `e` (and below) with space and layout; `want` is the view its consumer reads."""
        if e is None or isinstance(e, (A.Slice, A.NewAxis)):
            return e
        ty = e.ty
        if ty.what == TyWhat.TENSOR:
            return replace(e, ty=replace(ty, space=MemSpace.GLOBAL))
        if ty.what in (TyWhat.DTYPE, TyWhat.TYPE):
            if isinstance(e, A.TileTypeExpr):
                return replace(e, dims=tuple(self.assign(d) for d in e.dims))
            return e
        reducing = isinstance(e, A.Call) and is_reduction(e)
        if not ty.shape and not reducing:  # scalars: every thread holds the same value
            return self._children(e, None, MemSpace.UNIFORM, None)
        if isinstance(e, A.Name):
            layout = self.vars[e.id]
            self.convert_if_needed(e, layout, want)
            return replace(e, ty=replace(ty, space=MemSpace.REGISTERS, layout=layout))
        if _elementwise(e):
            layout = want or self.natural(e)
            return self._children(e, layout, MemSpace.REGISTERS, layout)
        if isinstance(e, A.Index):
            if e.base.ty.what == TyWhat.TENSOR:  # a load: materialized where it is consumed
                layout = want or self.canon(ty.shape)
                return self._children(e, None, MemSpace.REGISTERS, layout, operand_layout=None)
            base_want = None
            if want is not None and isinstance(want.root, Fragment) and all(
                    isinstance(i, A.NewAxis) or isinstance(i, A.Slice) and i.start is None and i.stop is None for i in e.items):
                # `t[:, None]` read at a fragment layout: make t in the matching 1-D view of it, so no data moves
                base_want = want.axes(*(a for a, it in enumerate(e.items) if not isinstance(it, A.NewAxis)))
            if isinstance(e.base, A.Name) and base_want is not None:
                have = self.vars.get(e.base.id)
                if have is not None and not have.compatible(base_want) and e.base.id not in self.accs:
                    self.prefer[e.base.id] = base_want  # a second run creates the variable in this layout
                base_want = None
            base = self.assign(e.base, base_want)
            layout = base.ty.layout
            for axis, item in enumerate(e.items):
                if isinstance(item, A.NewAxis):
                    layout = layout.expand(axis)
            self.convert_if_needed(e, layout, want)
            return replace(e, base=base, ty=replace(ty, space=MemSpace.REGISTERS, layout=layout))
        if isinstance(e, A.Attr):  # .T of a tile: a free view
            obj = self.assign(e.obj)
            layout = obj.ty.layout.transpose()
            self.convert_if_needed(e, layout, want)
            return replace(e, obj=obj, ty=replace(ty, space=MemSpace.REGISTERS, layout=layout))
        if isinstance(e, A.BinOp) and e.op is A.BinOpKind.MATMUL:
            lhs, rhs = self.assign(e.lhs), self.assign(e.rhs)
            lhs = replace(lhs, ty=replace(lhs.ty, space=MemSpace.SHARED))
            rhs = replace(rhs, ty=replace(rhs.ty, space=MemSpace.SHARED))
            (m, kk), (_, n) = e.lhs.ty.shape, e.rhs.ty.shape
            item = e.lhs.ty.dtype.itemsize
            frag = None if self.in_plan else self.mma_layout(e)
            if frag is not None:
                r = untransposed(e.rhs)
                if self.loop is not None and id(self.loop) in self.wgmma:
                    if not (isinstance(e.lhs, A.Name) and (e.lhs.id in self.swizzled_resident or e.lhs.id in self.streaming)):
                        lhs = replace(lhs, ty=replace(lhs.ty, space=MemSpace.REGISTERS))  # wgmma reads A from registers
                    layout = frag
                    self.convert_if_needed(e, layout, want)
                    return replace(e, lhs=lhs, rhs=rhs, ty=replace(ty, space=MemSpace.REGISTERS, layout=layout))
                if isinstance(r, A.Name) and r.id in self.streaming:  # b is already in shared memory
                    self.need(f"staging the left operand of '@' for mma.sync ({m}x{kk})", m * (kk + MATMUL_PAD) * item, e)
                else:
                    self.need(f"staging the operands of '@' for mma.sync ({m}x{kk} and {kk}x{n})",
                              (m * (kk + MATMUL_PAD) + max(kk * (n + MATMUL_PAD), n * (kk + MATMUL_PAD))) * item, e)
                layout = frag
                self.convert_if_needed(e, layout, want)
                return replace(e, lhs=lhs, rhs=rhs, ty=replace(ty, space=MemSpace.REGISTERS, layout=layout))
            if not self.in_plan:
                self.need(f"staging the operands of '@' ({m}x{kk} and {kk}x{n})",
                      (m * (kk + MATMUL_PAD) + kk * (n + MATMUL_PAD)) * item, e)
            layout = want or self.canon(ty.shape)
            return replace(e, lhs=lhs, rhs=rhs, ty=replace(ty, space=MemSpace.REGISTERS, layout=layout))
        if reducing:
            x = self.assign(e.args[0])
            layout = x.ty.layout
            if not isinstance(layout, Layout):
                fail("internal: reduction operand without a layout")
            axes = _reduced_axes(e, len(x.ty.shape))
            keep = _keepdims(e)
            out = layout
            for axis in sorted(axes, reverse=True):
                groups = reduce_smem_groups(out, axis if not keep else axis)
                red = out.reduce(axis, keepdims=keep)
                if groups > 1:
                    # argmax/argmin keep (value, i32 index) pairs
                    per = compute_bytes(x.ty.dtype) + 4 if FUNCTIONS[e.func].kind is K.ARGREDUCE else compute_bytes(e.ty.dtype)
                    self.need(f"combining {e.func}() across {groups} warps", groups * max(1, numel(red.shape)) * per, e)
                out = red
            args = (x,) + tuple(self.assign(a) for a in e.args[1:])
            kwargs = tuple((k, self.assign(v)) for k, v in e.kwargs)
            if not ty.shape:
                return replace(e, args=args, kwargs=kwargs, ty=replace(ty, space=MemSpace.UNIFORM, layout=None))
            self.convert_if_needed(e, out, want)
            return replace(e, args=args, kwargs=kwargs, ty=replace(ty, space=MemSpace.REGISTERS, layout=out))
        if isinstance(e, A.Call) and is_scan(e):
            return scan_layout(self, e, want)
        if isinstance(e, A.Call):  # constructors: materialized where consumed
            layout = want or self.canon(ty.shape)
            return self._children(e, None, MemSpace.REGISTERS, layout)
        fail(f"internal: no memory rule for {type(e).__name__}")

    def _children(self, e, view_of: Layout | None, space, layout, operand_layout=None):
        changes = {}
        for name in ("lhs", "rhs", "operand", "obj"):
            if hasattr(e, name):
                c = getattr(e, name)
                changes[name] = self.assign(c, view_of.view_for(c.ty.shape) if view_of is not None and _is_tile(c) else None)
        if hasattr(e, "args"):
            changes["args"] = tuple(self.assign(a, view_of.view_for(a.ty.shape) if view_of is not None and _is_tile(a) else None)
                                    for a in e.args)
        if hasattr(e, "kwargs"):  # a tile mask= is read at the subscript's slots
            changes["kwargs"] = tuple((k, self.assign(v, layout.view_for(v.ty.shape) if k == "mask" and _is_tile(v)
                                                       and layout is not None else None)) for k, v in e.kwargs)
        if isinstance(e, A.Index):
            # index tiles (a gather) are read at the rows of the result: the view of its first axis
            rows = layout.axes(0) if layout is not None and layout.dims else None
            for i in e.items:  # an index variable made elsewhere: a second run creates it at these rows
                if rows is not None and isinstance(i, A.Name) and _is_tile(i) and i.id not in self.accs:
                    have = self.vars.get(i.id)
                    if have is not None and not have.compatible(rows) and i.id not in self.prefer:
                        self.prefer[i.id] = rows.compact()  # a slot per row this thread holds
            changes["items"] = tuple(
                replace(i, start=self.assign(i.start), stop=self.assign(i.stop)) if isinstance(i, A.Slice)
                else self.assign(i, rows if _is_tile(i) else None) for i in e.items)
            changes["base"] = self.assign(e.base)
        return replace(e, **changes, ty=replace(e.ty, space=space, layout=layout))

    # ---- statements
    def visit_Assign(self, s):
        shape = s.value.ty.shape
        if s.name in self.vars:
            layout = self.vars[s.name]
            if layout is not None and shape and s.name not in self.accs:
                natural = self._find(s.value, shape)
                if natural is not None and natural != layout and isinstance(natural.root, Fragment):
                    self.prefer[s.name] = natural  # updated in a tensor-core layout: create it there next time
            want = layout.view_for(shape) if layout is not None and shape else None
            value = self.assign(s.value, want)
        elif s.name in self.accs or s.name in self.seed:
            layout = self.accs.get(s.name) or self.seed[s.name]
            value = self.assign(s.value, layout)
            self.vars[s.name] = layout
        else:
            value = self.assign(s.value)
            self.vars[s.name] = value.ty.layout
        return replace(s, value=value)

    def visit_Store(self, s):
        tshape = s.target.ty.shape
        if tshape:
            natural = self.natural(s.value) if s.value.ty.shape == tshape else self.canon(tshape)
            if s.result is not None:  # `old = atomic_OP(t[...], ...)`: the olds arrive in the variable's layout
                natural = self.vars.get(s.result) or self.seed.get(s.result) or natural
            value = self.assign(s.value, natural.view_for(s.value.ty.shape) if s.value.ty.shape else None)
            target = self.assign(s.target, natural)
            compare = self.assign(s.compare, natural.view_for(s.compare.ty.shape) if _is_tile(s.compare) else None)
        else:
            value, target, compare = self.assign(s.value), self.assign(s.target), self.assign(s.compare)
        if s.result is not None:
            self._atomic_result(s, target)
        return replace(s, target=target, value=value, compare=compare)

    def _atomic_result(self, s, target) -> None:
        """The variable of an atomic's old values, and the shared memory that hands them from the thread that ran
        each element's atomic to the others holding it (every thread for a scalar, the replicas of a tile)."""
        layout = target.ty.layout if target.ty.shape else None
        self.vars.setdefault(s.result, layout)
        if layout is None or replicated(layout):
            self.need(f"handing the old values of atomic_{s.atomic}() to every thread holding them",
                      max(1, numel(target.ty.shape)) * compute_bytes(target.ty.dtype), s)

    def visit_For(self, s):
        start, stop, step = (self.assign(x) for x in (s.start, s.stop, s.step))
        if s.plan is None:
            outer, self.streaming = self.streaming, self.streaming | {t.name for t in s.stream}
            outer_loop, self.loop = self.loop, s if s.mma is not None else self.loop
            body = self.visit(s.body)
            self.streaming, self.loop = outer, outer_loop
            return replace(s, start=start, stop=stop, step=step, body=body)
        p = s.plan
        for prod in p.products:
            if self.vars.get(prod.acc) is None:
                raise CompileError(f"the accumulator '{prod.acc}' must be assigned before the loop", s.span)
        if not p.persistent:  # (a persistent ring is a region of its own, see budget_smem)
            self.need(ring_what(p), p.smem_bytes, s)
        self.in_plan = True
        body = self.visit(s.body)
        self.in_plan = False
        return replace(s, start=start, stop=stop, step=step, body=body)

    def visit_If(self, s):
        return replace(s, cond=self.assign(s.cond), then=self.visit(s.then), orelse=self.visit(s.orelse))


def register_a(lhs: A.Expr) -> A.Expr:
    """The tile whose registers a wgmma product packs into its A operand: x for `x.to(bf16)` of an f32
    tile (the packing conversion rounds, once), else the operand itself."""
    if isinstance(lhs, A.Method) and lhs.name == "to" and lhs.obj.ty.dtype is DType.F32 and lhs.obj.ty.shape == lhs.ty.shape:
        return lhs.obj
    return lhs


def _is_tile(e) -> bool:
    return isinstance(e, A.Expr) and e.ty is not None and e.ty.what == TyWhat.VALUE and bool(e.ty.shape)


def _elementwise(e: A.Expr) -> bool:
    if isinstance(e, A.BinOp):
        return e.op is not A.BinOpKind.MATMUL
    if isinstance(e, A.UnaryOp):
        return True
    if isinstance(e, A.Method):
        return e.name == "to"
    if isinstance(e, A.Call):
        kind = FUNCTIONS[e.func].kind
        return kind in (K.MATH, K.ABS, K.WHERE) or (kind is K.MINMAX and len(e.args) == 2)
    return False


def _operands(e: A.Expr):
    if isinstance(e, A.BinOp):
        return (e.lhs, e.rhs)
    if isinstance(e, A.UnaryOp):
        return (e.operand,)
    if isinstance(e, A.Method):
        return (e.obj,)
    if isinstance(e, A.Call):
        return e.args
    return ()


def _reduced_axes(e: A.Call, rank: int) -> list[int]:
    axis = e.kwarg("axis")
    return [axis.value] if axis is not None else list(range(rank))


def _keepdims(e: A.Call) -> bool:
    k = e.kwarg("keepdims")
    return bool(k is not None and k.value)

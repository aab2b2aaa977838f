"""Kernel-body emission: the annotated IR of one kernel -> lines of CUDA C++.

Every tile is a per-thread register array in its layout (`tilex.layout`); elementwise
expressions are emitted inline, slot by slot, inside one unrolled loop; loads, stores,
reductions, layout conversions and matmuls are materialized as statements. Scalars are
uniform: every thread computes the same value, so all control flow is uniform and
barriers are always legal (plan_barriers says which barrier each statement uses).

The Emitter composes the parts, each an object with explicit inputs (the kernel's facts, the
writer, the scope, and the parts it calls):
  ExprEmitter (expr.py)        scalar and tile expressions, casts, layout conversions
  AccessEmitter (access.py)    tensor subscripts: masked, vectorized loads and stores
  ReductionEmitter (reduce.py) reductions within a thread, a warp, across warps
  ProductEmitter (products.py) `@` of register tiles, staging into shared memory
  MainLoopEmitter (matmul.py)  planned tensor-core main loops, persistent tile loops
  StreamEmitter (stream.py)    streamed pipeline loops; GatherEmitter (gather.py) their gathered copies
and emits the statements itself.
"""
from __future__ import annotations

from .. import ast as A
from ..builtins import ATOMIC_OPS, FUNCTIONS, BuiltinKind as K
from ..exprs import mentions, unparse_stmt
from ..layout import Layout, flat_index
from ..replicas import replica_guard
from ..types import DType, TyWhat
from . import remat
from .access import AccessEmitter
from .c import barrier, reg, rounded_scalar, storage
from .context import KernelFacts, Scope
from .expr import ExprEmitter
from .gather import GatherEmitter
from .matmul import MainLoopEmitter
from .products import ProductEmitter
from .reduce import ReductionEmitter
from .stream import StreamEmitter
from .writer import Writer

B = A.BinOpKind


class Emitter:
    """Emits the body of one kernel into `lines`; `helpers` collects the device helper files it needs,
    `functions` its per-kernel device functions, `tma_maps` the TMA descriptors its parameters end with."""

    def __init__(self, k: A.Kernel, file: str):
        self.k = k
        self.facts = f = KernelFacts(k, file)
        self.out = out = Writer()
        self.sync = k.info.sync  # plan_barriers' SyncPlan
        self.scope = scope = Scope(barrier(self.sync.start) if self.sync is not None else None)
        scope.unstable = remat.unstable_names(k)
        self.expr = expr = ExprEmitter(f, out, scope)
        self.access = access = AccessEmitter(f, out, expr)
        self.reductions = ReductionEmitter(f, out, scope, expr)
        self.products = ProductEmitter(f, out, scope, expr)
        expr.bind(access, self.reductions, self.products)
        self.loops = MainLoopEmitter(f, out, scope, expr, self.stmt, self.store_source)
        self.gather = GatherEmitter(f, out, expr, access)
        self.streams = StreamEmitter(f, out, scope, expr, access, self.gather, self.stmt)

    @property
    def lines(self) -> list[str]:
        return self.out.lines

    @property
    def helpers(self) -> set[str]:
        return self.out.helpers

    @property
    def functions(self) -> dict[str, str]:
        return self.out.functions

    @property
    def tma_maps(self) -> tuple:
        return self.facts.tma_maps

    # ---- prologue: scalars rounded to their dtype, strides of every tensor parameter
    def prologue(self) -> list[str]:
        out = []
        for p in self.k.params:
            if rounded_scalar(p):
                out.append(f"const float {p.name} = {self.expr.round(f'tx_arg_{p.name}', DType(p.type.dtype))};")
        for p in self.facts.tensors.values():
            dims = [str(d.value) if isinstance(d, A.IntLit) else d.id for d in p.type.dims]
            stride = "1LL"
            strides = []
            for d in reversed(dims):
                strides.append(stride)
                stride = f"{stride} * (long long){d}" if stride != "1LL" else f"(long long){d}"
            strides.reverse()
            for i, s in enumerate(strides):
                if s != "1LL":
                    out.append(f"const long long tx_{p.name}_s{i} = {s};")
        return out

    def setup(self) -> None:
        """Kernel-start code (the TMA rings' mbarriers)."""
        self.streams.ring_barriers()

    # ---- statements
    def body(self) -> None:
        """The kernel's body: each top-level statement with the barrier plan_barriers chose for it."""
        if self.sync is None:
            raise AssertionError(f"internal: codegen of kernel '{self.k.name}' needs plan_barriers' SyncPlan")
        with self.scope.names():
            for s, b in zip(self.k.body.stmts, self.sync.stmts, strict=True):
                self.scope.barrier = barrier(b)
                self.stmt(s)

    def block(self, b: A.Block) -> None:
        with self.scope.names():
            for s in b.stmts:
                self.stmt(s)

    def stmt(self, s: A.Stmt) -> None:
        self.out.emit(f"// {self.facts.at(s.span)}  {unparse_stmt(s)}")
        getattr(self, "stmt_" + type(s).__name__)(s)

    def stmt_Assign(self, s: A.Assign) -> None:
        out, expr, scope = self.out, self.expr, self.scope
        v = s.value
        if s.name in self.facts.resident:  # computed once into registers, then kept in shared memory
            offset, ld = self.facts.resident[s.name]
            S = storage(v.ty.dtype)
            with out.block():
                tmp, layout = expr.materialize(v)
                swizzle = v.ty.shape[0] if s.name in self.facts.swizzled else None
                self.products.stage(tmp, layout, f"reinterpret_cast<{S}*>(tilex_smem + {offset})", ld, False, v.ty.dtype,
                                    swizzle)
                if swizzle:
                    out.need("tilex_mma.cuh", "tilex_sm90.cuh")  # tilex_sw128; the proxy fence
                    out.emit("tilex_fence_async_smem();  // wgmma reads it (the async proxy) after the next barrier")
            return
        if not v.ty.shape and not (scope.is_declared(s.name) and s.name in scope.arrays):
            val = expr.scalar(v)
            if scope.is_declared(s.name):
                out.emit(f"{s.name} = {val};")
            else:
                scope.declare(s.name)
                out.emit(f"{reg(v.ty.dtype)} {s.name} = {val};")
            return
        if scope.is_declared(s.name):
            layout = scope.arrays[s.name]
            dt = v.ty.dtype  # the dtype pass keeps one dtype per variable
            want = layout.view_for(v.ty.shape) if v.ty.shape else None
            reads_self = mentions(v, s.name)
            dest = out.fresh("tx_nx") if reads_self else s.name
            if reads_self and _only_identity(v, s.name, layout, want):
                dest = s.name
            if dest != s.name:
                out.emit(f"{reg(dt)} {dest}[{layout.slots}];")
            val = expr.tile(v, want) if v.ty.shape else expr.scalar(v)
            out.unrolled(layout.slots, f"{dest}[tx_s] = {expr.cast(val, v.ty.dtype, dt)};")
            if dest != s.name:
                out.unrolled(layout.slots, f"{s.name}[tx_s] = {dest}[tx_s];")
            return
        layout = v.ty.layout
        scope.declare(s.name, layout)
        if s.name not in scope.unstable and remat.pure(v, scope.unstable, scope.pure):
            scope.pure[s.name] = v
        out.emit(f"{reg(v.ty.dtype)} {s.name}[{layout.slots}];")
        val = expr.tile(v, layout)
        out.unrolled(layout.slots, f"{s.name}[tx_s] = {val};")

    def stmt_Store(self, s: A.Store) -> None:
        out, expr = self.out, self.expr
        t = s.target
        dt = t.ty.dtype
        if not t.ty.shape:
            val = expr.cast(expr.scalar(s.value), s.value.ty.dtype, dt)
            idx, ok = self.access.scalar_address(t)
            if s.atomic is not None:  # one thread updates the element
                args = val if s.compare is None else f"{expr.cast(expr.scalar(s.compare), s.compare.ty.dtype, dt)}, {val}"
                if s.result is not None:
                    return self.scalar_atomic_result(s, f"{ATOMIC_OPS[s.atomic].fetch}(&{t.base.id}[{idx}], {args})", ok)
                out.need("tilex_atomic.cuh")
                out.emit(f"if (threadIdx.x == 0 && {ok}) {ATOMIC_OPS[s.atomic].cuda}(&{t.base.id}[{idx}], {args});")
                return
            out.emit(f"if (threadIdx.x == 0 && {ok}) {t.base.id}[{idx}] = tilex_io<{storage(dt)}>::put({val});")
            return
        compare = None
        if s.compare is not None:  # cas: the expected values at the target's slots
            layout, c = t.ty.layout, s.compare
            compare = out.fresh("tx_cmp")
            cval = expr.tile(c, layout.view_for(c.ty.shape)) if c.ty.shape else expr.scalar(c)
            out.emit(f"{reg(dt)} {compare}[{layout.slots}];")
            out.unrolled(layout.slots, f"{compare}[tx_s] = {expr.cast(cval, c.ty.dtype, dt)};")
        src, layout = self.store_source(s)
        if s.result is None:
            return self.access.access(t, layout, src, store=True, atomic=s.atomic, compare=compare)
        # `old = atomic_OP(t[...], ...)`: the olds straight into the variable (assign_layouts made it in the
        # target's layout); the values were read into src and compare first, so they may read it
        if not self.scope.is_declared(s.result):
            self.scope.declare(s.result, layout)
            out.emit(f"{reg(dt)} {s.result}[{layout.slots}];")
        self.access.access(t, layout, src, store=True, atomic=s.atomic, compare=compare, result=s.result)
        guard = replica_guard(layout)
        if guard is not None:  # the thread that ran each element's atomic hands its old to the replicas
            rt, smem, flat = reg(dt), self.facts.smem, flat_index(layout, t.ty.shape)
            out.emit(f"// the old values of {s.result} to every thread holding them, through shared memory")
            out.emit(self.scope.barrier)
            out.unrolled(layout.slots, f"if ({guard}) reinterpret_cast<{rt}*>({smem})[{flat}] = {s.result}[tx_s];")
            out.emit(self.scope.barrier)
            out.unrolled(layout.slots, f"{s.result}[tx_s] = reinterpret_cast<const {rt}*>({smem})[{flat}];")

    def scalar_atomic_result(self, s: A.Store, call: str, ok: str) -> None:
        """`old = atomic_OP(t[i], ...)` of one element: thread 0 runs it and hands the old to every thread."""
        out, t = self.out, s.target
        rt, smem, dt = reg(t.ty.dtype), self.facts.smem, t.ty.dtype
        other = self.access.other(t)
        out.need("tilex_atomic_fetch.cuh")
        out.emit(self.scope.barrier)
        out.emit(f"if (threadIdx.x == 0) reinterpret_cast<{rt}*>({smem})[0] = ({ok}) ? {call} : ({rt})({other});")
        out.emit(self.scope.barrier)
        val = f"reinterpret_cast<const {rt}*>({smem})[0]"
        if self.scope.is_declared(s.result):
            out.emit(f"{s.result} = {val};")
        else:
            self.scope.declare(s.result)
            out.emit(f"{rt} {s.result} = {val};")

    def store_source(self, s: A.Store) -> tuple[str, Layout]:
        """(register array, its layout: the target's) holding the values tile store `s` writes, converted to the
        target's dtype by the store."""
        out, expr = self.out, self.expr
        t = s.target
        dt = t.ty.dtype
        layout = t.ty.layout
        src = out.fresh("tx_st")
        out.emit(f"{reg(dt)} {src}[{layout.slots}];")
        v, vdt = s.value, s.value.ty.dtype
        if isinstance(v, A.Method) and v.name == "to" and vdt is dt and dt in (DType.BF16, DType.F16) \
                and v.obj.ty.dtype is DType.F32 and v.obj.ty.shape == v.ty.shape:
            # `x.to(bf16)` stored to bf16: the store's conversion (tilex_io::put) rounds to nearest even
            # as .to() does, so the f32 values go to it unrounded (one conversion per element, not two)
            v, vdt = v.obj, dt
        val = expr.tile(v, layout.view_for(v.ty.shape)) if v.ty.shape else expr.scalar(v)
        out.unrolled(layout.slots, f"{src}[tx_s] = {expr.cast(val, vdt, dt)};")
        return src, layout

    def stmt_For(self, s: A.For) -> None:
        if s.plan is not None:
            return self.loops.planned_loop(s)
        inner = next((st for st in s.body.stmts if isinstance(st, A.For) and st.plan is not None and st.plan.persistent), None)
        if inner is not None:
            return self.loops.persistent_loop(s, inner)
        scalar = self.expr.scalar
        start, stop, step = scalar(s.start), scalar(s.stop), scalar(s.step)
        if s.stream:
            return self.streams.streamed_loop(s, start, stop, step)
        if s.pipelined:
            self.out.emit(f"// pipeline(stages={s.stages}): staged sequentially in this version")
        with self.out.block(f"for (int {s.var} = {start}; {s.var} < {stop}; {s.var} += {step}) {{"), \
                self.scope.names(s.var):
            self.block(s.body)

    def stmt_Fence(self, s: A.Fence) -> None:
        """barrier; __threadfence(); barrier. Release: every thread's earlier writes come before the barrier, so
        a later atomic of any thread of the block is ordered after all of them. Acquire: the second barrier puts
        every thread's later reads after the fence of the thread that ran the atomic (an old value is read by
        one thread and handed on: without it only that thread had a fence between its atomic and its reads)."""
        self.out.emit(self.scope.barrier)
        self.out.emit("__threadfence();")
        self.out.emit(self.scope.barrier)

    def stmt_If(self, s: A.If) -> None:
        out = self.out
        with out.block(f"if ({self.expr.scalar(s.cond)}) {{", "}" if s.orelse is None else None):
            self.block(s.then)
        if s.orelse is not None:
            with out.block("} else {"):
                self.block(s.orelse)


def _only_identity(e: A.Expr, name: str, layout: Layout, want) -> bool:
    """True if every read of `name` in `e` is at the same slot it is written (safe in place)."""
    if isinstance(e, A.Name):
        return e.id != name or (want is not None and layout.compatible(want) and layout.slot_map(want) == "tx_s")
    if isinstance(e, A.BinOp) and e.op is B.MATMUL or isinstance(e, (A.Index, A.Attr, A.Call)) and not _elementwise_call(e):
        return not mentions(e, name) or isinstance(e, A.Index) and e.base.ty.what is TyWhat.TENSOR
    return all(_only_identity(c, name, layout, want.view_for(c.ty.shape) if want is not None and c.ty.shape else None)
               for c in e.children() if isinstance(c, A.Expr) and c.ty is not None and c.ty.what is TyWhat.VALUE)


# builtin families whose calls compute each element from the same element of their operands
_ELEMENTWISE = (K.MATH, K.ABS, K.WHERE, K.SCALAR, K.AXIS, K.CTOR, K.ARANGE)


def _elementwise_call(e) -> bool:
    if isinstance(e, A.Call):
        kind = FUNCTIONS[e.func].kind
        return kind in _ELEMENTWISE or (kind is K.MINMAX and len(e.args) == 2)
    return isinstance(e, A.Method)

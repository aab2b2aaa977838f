"""Kernel-body emission: the annotated IR of one kernel -> lines of CUDA C++.

Every tile is a per-thread register array in its layout (`tilex.layout`); elementwise
expressions are emitted inline, slot by slot, inside one unrolled loop; loads, stores,
reductions, layout conversions and matmuls are materialized as statements. Scalars are
uniform: every thread computes the same value, so all control flow is uniform and
barriers are always legal.
"""
from __future__ import annotations

import math

from .. import ast as A
from ..builtins import CUDA_MATH, FUNCTIONS
from ..exprs import unparse
from ..layout import Fragment, Layout, reduction_plan
from .matmul import kernel_tma_maps
from ..passes.infer_dtypes import operand_dtype
from ..passes.infer_memory import MATMUL_PAD, reduce_smem_groups
from ..types import DType, numel

B = A.BinOpKind

# register (compute) C type per dtype
REG = {DType.F16: "float", DType.BF16: "float", DType.F8E4M3: "float", DType.F32: "float", DType.F64: "double",
       DType.I32: "int", DType.I64: "long long", DType.BOOL: "bool", DType.I8: "int", DType.I16: "int", DType.U8: "int"}
ROUND = {DType.BF16: "tilex_round_bf16", DType.F16: "tilex_round_f16", DType.F8E4M3: "tilex_round_fp8e4m3"}
C_BINOP = {B.ADD: "+", B.SUB: "-", B.MUL: "*", B.EQ: "==", B.NE: "!=", B.LT: "<", B.LE: "<=", B.GT: ">", B.GE: ">=",
           B.AND: "&&", B.OR: "||", B.BITAND: "&", B.BITOR: "|"}


def reg(dt: DType) -> str:
    return REG[dt]


def storage(dt: DType) -> str:
    return dt.ctype


def flit(v: float) -> str:
    if math.isnan(v):
        return "__int_as_float(0x7fc00000)"
    if math.isinf(v):
        return "__int_as_float(0x7f800000)" if v > 0 else "__int_as_float(0xff800000)"
    r = repr(float(v))
    if "e" not in r and "." not in r:
        r += ".0"
    return r + "f"


class Emitter:
    """Emits the body of one kernel; `helpers` collects the device helper files it needs."""

    def __init__(self, k: A.Kernel, file: str):
        self.k = k
        self.file = file
        self.T = k.info.threads
        self.lines: list[str] = []
        self.depth = 0
        self.tmp = 0
        self.helpers: set[str] = {"tilex_types.cuh"}
        self.tensors = {p.name: p for p in k.params if p.type.dims is not None}
        self.arrays: dict[str, Layout] = {}  # tile variables -> layout
        self.barrier = "__syncthreads();"  # a named barrier of the consumer warps once producers have left
        self.functions: dict[str, str] = {}  # per-kernel device functions (wgmma wrappers), by name
        self.tma_maps = kernel_tma_maps(k)  # TMA descriptors the host passes after the other arguments
        # tiles kept in shared memory for the whole kernel (matmul operands read in every loop iteration)
        self.resident = dict(getattr(k.info, "resident", {}) or {})
        base = getattr(k.info, "resident_bytes", 0)
        self.smem = f"(tilex_smem + {base})" if base else "tilex_smem"  # scratch space of one op at a time
        self.declared: list[set[str]] = [set()]

    # ---- output helpers
    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def fresh(self, prefix: str) -> str:
        self.tmp += 1
        return f"{prefix}{self.tmp}"

    def unrolled(self, n: int, body: str, var: str = "tx_s", step: int = 1) -> None:
        if n == 1 and step == 1:
            self.emit("{ const int " + var + " = 0; " + body + " }")
            return
        inc = f"++{var}" if step == 1 else f"{var} += {step}"
        self.emit("#pragma unroll")
        self.emit(f"for (int {var} = 0; {var} < {n}; {inc}) {{ {body} }}")

    # ---- prologue: strides of every tensor parameter
    def prologue(self) -> list[str]:
        out = []
        for p in self.tensors.values():
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

    def stride(self, name: str, axis: int) -> str | None:
        p = self.tensors[name]
        return None if axis == len(p.type.dims) - 1 else f"tx_{name}_s{axis}"

    def dim(self, name: str, axis: int) -> str:
        d = self.tensors[name].type.dims[axis]
        return str(d.value) if isinstance(d, A.IntLit) else d.id

    # ---- statements
    def block(self, b: A.Block) -> None:
        self.declared.append(set())
        for s in b.stmts:
            self.stmt(s)
        self.declared.pop()

    def is_declared(self, name: str) -> bool:
        return any(name in d for d in self.declared)

    def stmt(self, s: A.Stmt) -> None:
        self.emit(f"// {self.file}:{s.span.line}  {_source_line(s)}")
        getattr(self, "stmt_" + type(s).__name__)(s)

    def stmt_Assign(self, s: A.Assign) -> None:
        v = s.value
        if s.name in self.resident:  # computed once into registers, then kept in shared memory
            offset, ld = self.resident[s.name]
            layout = v.ty.layout
            S = storage(v.ty.dtype)
            self.emit("{")
            self.depth += 1
            tmp = self.fresh("tx_res")
            self.emit(f"{reg(v.ty.dtype)} {tmp}[{layout.slots}];")
            val = self.tile(v, layout)
            self.unrolled(layout.slots, f"{tmp}[tx_s] = {val};")
            self.stage(tmp, layout, f"reinterpret_cast<{S}*>(tilex_smem + {offset})", ld, False, S)
            self.depth -= 1
            self.emit("}")
            return
        if not v.ty.shape and not (self.is_declared(s.name) and s.name in self.arrays):
            expr = self.scalar(v)
            if self.is_declared(s.name):
                self.emit(f"{s.name} = {expr};")
            else:
                self.declared[-1].add(s.name)
                self.emit(f"{reg(v.ty.dtype)} {s.name} = {expr};")
            return
        if self.is_declared(s.name):
            layout = self.arrays[s.name]
            dt = v.ty.dtype  # the dtype pass keeps one dtype per variable
            want = layout.view_for(v.ty.shape) if v.ty.shape else None
            reads_self = _reads(v, s.name)
            dest = self.fresh("tx_nx") if reads_self else s.name
            if reads_self and _only_identity(v, s.name, layout, want):
                dest = s.name
            if dest != s.name:
                self.emit(f"{reg(dt)} {dest}[{layout.slots}];")
            val = self.tile(v, want) if v.ty.shape else self.scalar(v)
            self.unrolled(layout.slots, f"{dest}[tx_s] = {self.cast(val, v.ty.dtype, dt)};")
            if dest != s.name:
                self.unrolled(layout.slots, f"{s.name}[tx_s] = {dest}[tx_s];")
            return
        layout = v.ty.layout
        self.declared[-1].add(s.name)
        self.arrays[s.name] = layout
        self.emit(f"{reg(v.ty.dtype)} {s.name}[{layout.slots}];")
        val = self.tile(v, layout)
        self.unrolled(layout.slots, f"{s.name}[tx_s] = {val};")

    def stmt_Store(self, s: A.Store) -> None:
        t = s.target
        dt = t.ty.dtype
        if not t.ty.shape:
            val = self.scalar(s.value)
            idx, ok = self.scalar_address(t)
            self.emit(f"if (threadIdx.x == 0 && {ok}) {t.base.id}[{idx}] = tilex_io<{storage(dt)}>::put({self.cast(val, s.value.ty.dtype, dt)});")
            return
        layout = t.ty.layout
        src = self.fresh("tx_st")
        self.emit(f"{reg(dt)} {src}[{layout.slots}];")
        val = self.tile(s.value, layout.view_for(s.value.ty.shape)) if s.value.ty.shape else self.scalar(s.value)
        self.unrolled(layout.slots, f"{src}[tx_s] = {self.cast(val, s.value.ty.dtype, dt)};")
        self.access(t, layout, src, store=True)

    def stmt_For(self, s: A.For) -> None:
        if s.plan is not None:
            return self.planned_loop(s)
        start, stop, step = self.scalar(s.start), self.scalar(s.stop), self.scalar(s.step)
        if s.pipelined:
            self.emit(f"// pipeline(stages={s.stages}): staged sequentially in this version")
        self.emit(f"for (int {s.var} = {start}; {s.var} < {stop}; {s.var} += {step}) {{")
        self.depth += 1
        self.declared.append({s.var})
        self.block(s.body)
        self.declared.pop()
        self.depth -= 1
        self.emit("}")

    def planned_loop(self, s: A.For) -> None:
        """A tensor-core main loop, from its template (see codegen/matmul.py)."""
        from . import _env
        from .matmul import render_mma, render_wgmma

        plan = s.plan
        if plan.strategy == "wgmma":
            ctx = render_wgmma(self, s, plan)
        else:
            ctx = render_mma(self, s, plan)
        text = _env().get_template(f"matmul_{plan.strategy}.j2").render(barrier=self.barrier, **ctx)
        for line in text.rstrip().splitlines():
            self.emit(line)
        if plan.strategy == "wgmma":
            self.barrier = f'asm volatile("bar.sync 1, {plan.consumers};" ::: "memory");'

    def tma_map(self, tensor: str, box_rows: int) -> str:
        return next(m.param for m in self.tma_maps if m.tensor == tensor and m.box_rows == box_rows)

    def stmt_If(self, s: A.If) -> None:
        self.emit(f"if ({self.scalar(s.cond)}) {{")
        self.depth += 1
        self.block(s.then)
        self.depth -= 1
        if s.orelse is not None:
            self.emit("} else {")
            self.depth += 1
            self.block(s.orelse)
            self.depth -= 1
        self.emit("}")

    # ---- conversions
    def cast(self, expr: str, src: DType, dst: DType) -> str:
        if src == dst or reg(src) == reg(dst) and dst not in ROUND and src not in ROUND:
            return expr
        if dst in ROUND:
            if src == dst:
                return expr
            return f"{ROUND[dst]}((float)({expr}))"
        if dst is DType.BOOL:
            return f"(({expr}) != 0)"
        if dst.is_int and src.is_float:
            self.helpers.add("tilex_math.cuh")
            return f"tilex_f2ll({expr})" if dst is DType.I64 else f"tilex_f2i({expr})"
        return f"({reg(dst)})({expr})"

    # ---- scalar expressions (uniform)
    def scalar(self, e: A.Expr) -> str:
        if isinstance(e, A.Name):
            return e.id
        if isinstance(e, A.IntLit):
            return f"{e.value}LL" if e.ty.dtype is DType.I64 or abs(e.value) >= 2**31 else str(e.value)
        if isinstance(e, A.FloatLit):
            return flit(e.value) if e.ty.dtype is not DType.F64 else repr(e.value)
        if isinstance(e, A.BoolLit):
            return "true" if e.value else "false"
        if isinstance(e, A.Index):
            idx, ok = self.scalar_address(e)
            other = e.kwarg("other")
            oth = self.cast(self.scalar(other), other.ty.dtype, e.ty.dtype) if other is not None else "0"
            return f"(({ok}) ? ({reg(e.ty.dtype)})tilex_io<{storage(e.ty.dtype)}>::get({e.base.id}[{idx}]) : ({reg(e.ty.dtype)})({oth}))"
        if isinstance(e, A.Call) and _is_reduction(e):
            name, _ = self.reduction(e)
            return name
        return self.elementwise(e, lambda c: self.scalar(c))

    # ---- tile expressions: the value at slot `s` of layout `want`
    def tile(self, e: A.Expr, want: Layout) -> str:
        if not e.ty.shape:
            return self.scalar(e)
        if isinstance(e, A.Name):
            return self.read_array(e.id, self.arrays[e.id], want, e.ty.dtype)
        if isinstance(e, A.Index) and e.base.ty.what == "tensor":
            layout = e.ty.layout
            name = self.fresh("tx_ld")
            self.emit(f"{reg(e.ty.dtype)} {name}[{layout.slots}];  // {unparse(e)}")
            self.access(e, layout, name, store=False)
            return self.read_array(name, layout, want, e.ty.dtype)
        if isinstance(e, (A.Index, A.Attr)):  # views of a tile: t[:, None], t.T
            base = e.base if isinstance(e, A.Index) else e.obj
            arr, _ = self.materialize(base)
            return self.read_array(arr, e.ty.layout, want, e.ty.dtype)
        if isinstance(e, A.BinOp) and e.op is B.MATMUL:
            name = self.matmul(e)
            return self.read_array(name, e.ty.layout, want, e.ty.dtype)
        if isinstance(e, A.Call) and _is_reduction(e):
            name, layout = self.reduction(e)
            return self.read_array(name, layout, want, e.ty.dtype)
        if isinstance(e, A.Call) and e.func == "zeros":
            return "0"
        if isinstance(e, A.Call) and e.func == "full":
            return self.cast(self.scalar(e.args[1]), e.args[1].ty.dtype, e.ty.dtype)
        if isinstance(e, A.Call) and e.func == "arange":
            return f"({self.scalar(e.args[0])} + ({want.coord(0)}))"
        return self.elementwise(e, lambda c: self.tile(c, want.view_for(c.ty.shape)) if c.ty.shape else self.scalar(c))

    def materialize(self, e: A.Expr) -> tuple[str, Layout]:
        """An array holding tile `e` in its own layout."""
        if isinstance(e, A.Name):
            return e.id, self.arrays[e.id]
        layout = e.ty.layout
        name = self.fresh("tx_tv")
        self.emit(f"{reg(e.ty.dtype)} {name}[{layout.slots}];")
        val = self.tile(e, layout)
        self.unrolled(layout.slots, f"{name}[tx_s] = {val};")
        return name, layout

    def read_array(self, name: str, have: Layout, want: Layout, dt: DType) -> str:
        if have.compatible(want):
            return f"{name}[{have.slot_map(want)}]"
        # a layout conversion through shared memory
        self.helpers.add("tilex_types.cuh")
        out = self.fresh("tx_cv")
        shape = have.shape
        rt = reg(dt)
        self.emit(f"// layout conversion of {name} through shared memory")
        self.emit(self.barrier)
        self.unrolled(have.slots, f"reinterpret_cast<{rt}*>({self.smem})[{_flat(have, shape)}] = {name}[tx_s];")
        self.emit(self.barrier)
        self.emit(f"{rt} {out}[{want.slots}];")
        self.unrolled(want.slots, f"{out}[tx_s] = reinterpret_cast<const {rt}*>({self.smem})[{_flat(want, shape)}];")
        return f"{out}[tx_s]"

    # ---- elementwise operators (shared by scalar and tile paths)
    def elementwise(self, e: A.Expr, sub) -> str:
        dt = e.ty.dtype
        cdt = dt.compute
        if isinstance(e, A.BinOp):
            a, b = sub(e.lhs), sub(e.rhs)
            if e.op.is_compare:
                ct = operand_dtype(e.lhs, e.rhs).compute
                return f"({self.cast(a, e.lhs.ty.dtype, ct)} {C_BINOP[e.op]} {self.cast(b, e.rhs.ty.dtype, ct)})"
            if e.op.is_logical:
                return f"({a} {C_BINOP[e.op]} {b})"
            a, b = self.cast(a, e.lhs.ty.dtype, cdt), self.cast(b, e.rhs.ty.dtype, cdt)
            if e.op in C_BINOP:
                expr = f"({a} {C_BINOP[e.op]} {b})"
            elif e.op is B.DIV:
                expr = f"({a} / {b})"
            elif e.op is B.FLOORDIV:
                self.helpers.add("tilex_math.cuh")
                expr = f"tilex_floordiv<{reg(cdt)}>({a}, {b})"
            elif e.op is B.MOD:
                self.helpers.add("tilex_math.cuh")
                expr = f"tilex_floormod({a}, {b})" if cdt.is_float else f"tilex_floormod<{reg(cdt)}>({a}, {b})"
            elif e.op is B.POW:
                expr = f"powf({a}, {b})" if cdt is DType.F32 else f"({reg(cdt)})pow((double){a}, (double){b})"
            else:
                raise AssertionError(e.op)
            return self.round(expr, dt)
        if isinstance(e, A.UnaryOp):
            x = sub(e.operand)
            if e.op is A.UnaryOpKind.NOT:
                return f"(!{x})"
            return self.round(f"(-{self.cast(x, e.operand.ty.dtype, cdt)})", dt)
        if isinstance(e, A.Method):  # .to(dtype)
            return self.cast(sub(e.obj), e.obj.ty.dtype, dt)
        if isinstance(e, A.Call):
            kind = FUNCTIONS[e.func].kind
            args = [sub(a) for a in e.args]
            if kind == "math":
                self.helpers.add("tilex_math.cuh")
                return self.round(CUDA_MATH[e.func].format(x=self.cast(args[0], e.args[0].ty.dtype, DType.F32)), dt)
            if kind == "abs":
                x = self.cast(args[0], e.args[0].ty.dtype, cdt)
                return self.round(f"fabsf({x})" if cdt is DType.F32 else f"({x} < 0 ? -{x} : {x})", dt)
            if kind == "minmax":
                a, b = (self.cast(x, y.ty.dtype, cdt) for x, y in zip(args, e.args))
                if cdt.is_float:
                    return self.round(f"f{e.func}f({a}, {b})", dt)
                self.helpers.add("tilex_math.cuh")
                return f"tilex_i{e.func}<{reg(cdt)}>({a}, {b})"
            if kind == "where":
                return f"({args[0]} ? {self.cast(args[1], e.args[1].ty.dtype, dt)} : {self.cast(args[2], e.args[2].ty.dtype, dt)})"
            if e.func == "program_id":
                return f"(int)blockIdx.{'xyz'[int(e.args[0].value)]}"
            if e.func == "num_programs":
                return f"(int)gridDim.{'xyz'[int(e.args[0].value)]}"
            if e.func == "cdiv":
                self.helpers.add("tilex_math.cuh")
                return f"tilex_cdiv<{reg(dt)}>({self.cast(args[0], e.args[0].ty.dtype, dt)}, {self.cast(args[1], e.args[1].ty.dtype, dt)})"
        raise AssertionError(f"no emission rule for {type(e).__name__} {unparse(e)}")

    def round(self, expr: str, dt: DType) -> str:
        return f"{ROUND[dt]}({expr})" if dt in ROUND else expr

    # ---- global memory: masked, vectorized tile loads and stores
    def index_axes(self, e: A.Index):
        """(tensor name, [(tensor axis, item)] in view order) of a tensor subscript."""
        base = e.base
        perm = None
        if isinstance(base, A.Attr):
            perm = base.ty.layout
            base = base.obj
        name = base.id
        axes = []
        for i, item in enumerate(e.items):
            axes.append((perm[i] if perm else i, item))
        return name, axes

    def scalar_address(self, e: A.Index) -> tuple[str, str]:
        name, axes = self.index_axes(e)
        terms, oks = [], []
        for ax, item in axes:
            i = f"(long long)({self.scalar(item)})"
            st = self.stride(name, ax)
            terms.append(f"{i} * {st}" if st else i)
            oks.append(f"(unsigned long long){i} < (unsigned long long){self.dim(name, ax)}")
        return " + ".join(terms), " && ".join(oks)

    def access(self, e: A.Index, layout: Layout, arr: str, store: bool) -> None:
        """Emit a masked load of tensor subscript `e` into `arr` (or a store from it)."""
        name, axes = self.index_axes(e)
        dt = e.ty.dtype
        self.helpers.add("tilex_mem.cuh")
        idx_lines, terms, oks = [], [], []
        tile_axis = 0
        last_tensor_axis = len(self.tensors[name].type.dims) - 1
        vec_axis = None
        for ax, item in axes:
            if isinstance(item, A.Slice):
                start = self.scalar(item.start) if item.start is not None else "0"
                iv = f"tx_i{ax}"
                idx_lines.append(f"const long long {iv} = (long long)({start}) + ({layout.coord(tile_axis, 'tx_s')});")
                if ax == last_tensor_axis and tile_axis == len(layout.dims) - 1:
                    vec_axis = (iv, ax)
                tile_axis += 1
            else:
                iv = f"tx_i{ax}"
                idx_lines.append(f"const long long {iv} = (long long)({self.scalar(item)});")
            st = self.stride(name, ax)
            terms.append(f"{iv} * {st}" if st else iv)
            if vec_axis is None or vec_axis[1] != ax:
                oks.append(f"(unsigned long long){iv} < (unsigned long long){self.dim(name, ax)}")
        vec = 1
        root = layout.root
        if vec_axis is not None and layout.dims[-1] == root.rank - 1 and root.vec_digit is not None \
                and layout.digits and layout.digits[-1] == root.vec_digit:
            vec = root.vec
        ok = " && ".join(oks) or "true"
        off = " + ".join(terms)
        S, R = storage(dt), reg(dt)
        if vec > 1:
            iv, ax = vec_axis
            first = f"-{iv}"
            last = f"(long long){self.dim(name, ax)} - {iv}"
            if store:
                call = f"tilex_store_chunk<{vec}, {S}, {R}>({name}, {off}, {first}, {last}, {ok}, &{arr}[tx_s]);"
            else:
                other = self.other(e)
                call = f"tilex_load_chunk<{vec}, {S}, {R}>(&{arr}[tx_s], {name}, {off}, {first}, {last}, {ok}, ({R})({other}));"
            self.unrolled(layout.slots, " ".join(idx_lines + [call]), step=vec)
            return
        ok_all = " && ".join(oks + ([f"(unsigned long long){vec_axis[0]} < (unsigned long long){self.dim(name, vec_axis[1])}"] if vec_axis else [])) or "true"
        if store:
            body = f"if ({ok_all}) {name}[{off}] = tilex_io<{S}>::put({arr}[tx_s]);"
        else:
            body = f"{arr}[tx_s] = ({ok_all}) ? ({R})tilex_io<{S}>::get({name}[{off}]) : ({R})({self.other(e)});"
        self.unrolled(layout.slots, " ".join(idx_lines + [body]))

    def other(self, e: A.Index) -> str:
        o = e.kwarg("other")
        if o is None:
            return "0"
        return self.cast(self.scalar(o), o.ty.dtype, e.ty.dtype)

    # ---- reductions
    def reduction(self, e: A.Call) -> tuple[str, Layout | None]:
        self.helpers.add("tilex_reduce.cuh")
        x = e.args[0]
        src, have = self.materialize(x)
        func = e.func
        arg = FUNCTIONS[func].kind == "argreduce"
        dt = e.ty.dtype
        acc_t = reg(x.ty.dtype.compute if not arg else x.ty.dtype.compute)
        if func in ("sum", "mean"):
            acc_t = reg(dt)
        axis_kw = e.kwarg("axis")
        keep = bool(e.kwarg("keepdims").value) if e.kwarg("keepdims") is not None else False
        axes = [axis_kw.value] if axis_kw is not None else list(range(len(x.ty.shape)))
        count = numel(tuple(x.ty.shape[a] for a in axes))
        ident = _identity(func, acc_t)
        cur, cur_idx, layout = src, None, have
        first = True
        for axis in sorted(axes, reverse=True):
            out_l = layout.reduce(axis, keepdims=keep)
            name = self.fresh("tx_rd")
            self.emit(f"{acc_t} {name}[{out_l.slots}];")
            self.unrolled(out_l.slots, f"{name}[tx_s] = {ident};")
            idx = None
            if arg:
                idx = self.fresh("tx_ri")
                self.emit(f"int {idx}[{out_l.slots}];")
                self.unrolled(out_l.slots, f"{idx}[tx_s] = 0x7fffffff;")
            m = out_l.slot_map(layout, "tx_s")
            val = f"({acc_t}){cur}[tx_s]" if not (func in ("sum", "mean") and first) else self.cast(f"{cur}[tx_s]", x.ty.dtype, dt)
            if arg:
                pos = layout.coord(axis, "tx_s") if first else f"{cur_idx}[tx_s]"
                self.unrolled(layout.slots, f"tilex_{func}_combine({name}[{m}], {idx}[{m}], {val}, {pos});")
            else:
                self.unrolled(layout.slots, f"{name}[{m}] = {_combine(func, acc_t, f'{name}[{m}]', val)};")
            self.cross_thread(func, acc_t, name, idx, layout, axis, out_l)
            cur, cur_idx, layout, first = name, idx, out_l, False
        result = cur_idx if arg else cur
        if func == "mean":
            self.unrolled(layout.slots, f"{cur}[tx_s] = {cur}[tx_s] / ({acc_t}){count};")
        if not e.ty.shape:
            out = self.fresh("tx_red")
            self.emit(f"const {reg(dt)} {out} = {result}[0];")
            return out, None
        return result, layout

    def cross_thread(self, func, acc_t, name, idx, layout: Layout, axis: int, out_l: Layout) -> None:
        plan = reduction_plan(layout, axis)
        for off in plan.shuffles:
            if idx is None:
                self.unrolled(out_l.slots, f"{name}[tx_s] = {_combine(func, acc_t, f'{name}[tx_s]', f'tilex_shfl_xor({name}[tx_s], {off})')};")
            else:
                self.unrolled(out_l.slots, f"tilex_{func}_combine({name}[tx_s], {idx}[tx_s], tilex_shfl_xor({name}[tx_s], {off}), tilex_shfl_xor({idx}[tx_s], {off}));")
        groups = plan.groups
        if groups == 1:
            return
        outn = max(1, numel(out_l.shape))
        flat = _flat(out_l, out_l.shape)
        self.emit(f"// combine {groups} warps' partial {func}s through shared memory")
        self.emit(self.barrier)
        self.emit("{")
        self.depth += 1
        self.emit(f"{acc_t}* tx_sc = reinterpret_cast<{acc_t}*>({self.smem});")
        pi = f"reinterpret_cast<int*>({self.smem} + {groups * outn * 4 if acc_t != 'double' and acc_t != 'long long' else groups * outn * 8})"
        if idx is not None:
            self.emit(f"int* tx_si = {pi};")
        self.emit(f"const int tx_g = {plan.group_expr};")
        write = f"tx_sc[tx_g * {outn} + {flat}] = {name}[tx_s];" + (f" tx_si[tx_g * {outn} + {flat}] = {idx}[tx_s];" if idx else "")
        self.emit(f"if ({plan.writer}) {{")
        self.depth += 1
        self.unrolled(out_l.slots, write)
        self.depth -= 1
        self.emit("}")
        self.emit(self.barrier)
        if idx is None:
            body = (f"{acc_t} tx_a = tx_sc[{flat}]; for (int tx_q = 1; tx_q < {groups}; ++tx_q) tx_a = {_combine(func, acc_t, 'tx_a', f'tx_sc[tx_q * {outn} + {flat}]')}; "
                    f"{name}[tx_s] = tx_a;")
        else:
            body = (f"{acc_t} tx_a = tx_sc[{flat}]; int tx_ai = tx_si[{flat}]; for (int tx_q = 1; tx_q < {groups}; ++tx_q) tilex_{func}_combine(tx_a, tx_ai, tx_sc[tx_q * {outn} + {flat}], tx_si[tx_q * {outn} + {flat}]); "
                    f"{name}[tx_s] = tx_a; {idx}[tx_s] = tx_ai;")
        self.unrolled(out_l.slots, body)
        self.depth -= 1
        self.emit("}")

    # ---- matmul (v0: operands staged in shared memory, f32 FMA at the result layout)
    def stage(self, arr: str, layout: Layout, dst: str, ld: int, transpose: bool, S: str) -> None:
        """Write a register tile into shared memory rows of `ld` elements ([row][col], or [col][row] if
        `transpose`), as 4/8/16-byte vectors when the layout's vector runs along the stored row."""
        r, c = (layout.coord(1), layout.coord(0)) if transpose else (layout.coord(0), layout.coord(1))
        root = layout.root
        along = 0 if transpose else 1
        vec = root.vec if (root.vec_digit is not None and layout.digits and layout.digits[-1] == root.vec_digit
                           and layout.dims[along] == root.rank - 1) else 1
        vbytes = vec * (2 if S in ("tilex_bf16", "tilex_f16") else 4)
        if vec > 1 and vbytes in (4, 8, 16) and (ld * vbytes // vec) % vbytes == 0:
            vt = {4: "unsigned", 8: "uint2", 16: "uint4"}[vbytes]
            self.unrolled(layout.slots, f"{S} tx_v[{vec}]; for (int tx_q = 0; tx_q < {vec}; ++tx_q) tx_v[tx_q] = tilex_io<{S}>::put({arr}[tx_s + tx_q]); "
                                        f"*reinterpret_cast<{vt}*>(&{dst}[({r}) * {ld} + ({c})]) = *reinterpret_cast<const {vt}*>(tx_v);",
                          step=vec)
            return
        self.unrolled(layout.slots, f"{dst}[({r}) * {ld} + ({c})] = tilex_io<{S}>::put({arr}[tx_s]);")

    def matmul(self, e: A.BinOp) -> str:
        resident = self.resident.get(e.lhs.id) if isinstance(e.lhs, A.Name) else None
        a, la = self.materialize(e.lhs) if resident is None else (None, e.lhs.ty.layout)
        b, lb = self.materialize(e.rhs)
        (m, kk), (_, n) = e.lhs.ty.shape, e.rhs.ty.shape
        dt_in = e.lhs.ty.dtype
        S = storage(dt_in)
        lda, ldb = kk + MATMUL_PAD, n + MATMUL_PAD
        out_l = e.ty.layout
        name = self.fresh("tx_mm")
        if isinstance(out_l.root, Fragment):  # tensor cores: ldmatrix + mma.sync into the fragment layout
            from . import _env

            # b goes to shared memory K-contiguous ([n][k], plain ldmatrix) when its registers run along K
            # (a transposed tile, like k.T in attention), else [k][n] (ldmatrix.trans): vector stores either way
            rb = lb.root
            kmajor_b = rb.vec_digit is not None and lb.dims[0] == rb.rank - 1
            ldb = kk + MATMUL_PAD if kmajor_b else n + MATMUL_PAD
            self.emit(f"// {unparse(e)}: stage [{m}, {kk}] and [{kk}, {n}] {dt_in} tiles in shared memory, multiply with mma.sync")
            self.emit(self.barrier)
            self.emit("{")
            self.depth += 1
            # a already in this product's accumulator rows (p of an online softmax): A fragments from registers
            ra = la.root
            a_regs = (resident is None and isinstance(ra, Fragment) and la == Layout.of(ra)
                      and ra.warps == (out_l.root.warps[0], 1) and out_l.root.warps[1] == 1 and ra.shape[0] == m)
            self.emit(f"{S}* tx_As = reinterpret_cast<{S}*>({self.smem});")
            self.emit(f"{S}* tx_Bs = tx_As + {m * lda};")
            a_ptr = f"reinterpret_cast<const {S}*>({self.smem})"
            if resident is not None:
                a_ptr = f"reinterpret_cast<const {S}*>(tilex_smem + {resident[0]})"
                lda = resident[1]
            elif not a_regs:
                self.stage(a, la, "tx_As", lda, False, S)
            self.stage(b, lb, "tx_Bs", ldb, kmajor_b, S)
            self.depth -= 1
            self.emit("}")
            self.emit(self.barrier)
            self.emit(f"float {name}[{out_l.slots}];")
            self.unrolled(out_l.slots, f"{name}[tx_s] = 0.0f;")
            wm_, wn_ = out_l.root.warps
            wm, wn = m // wm_, n // wn_
            self.helpers.add("tilex_mma.cuh")
            text = _env().get_template("matmul_mma_tile.j2").render(
                S=S, m=m, k=kk, lda=lda, ldb=ldb, warps_n=wn_, wm=wm, wn=wn, rm=wm // 16, rn=wn // 8, acc=name,
                kmajor_b=kmajor_b, a_regs=a if a_regs else None, a_blocks=kk // 8, a_ptr=a_ptr,
                b_ptr=f"reinterpret_cast<const {S}*>({self.smem}) + {m * (kk + MATMUL_PAD)}")
            for line in text.rstrip().splitlines():
                self.emit(line)
            return name
        self.emit(f"// {unparse(e)}: stage [{m}, {kk}] and [{kk}, {n}] {dt_in} tiles in shared memory, accumulate in f32")
        self.emit(self.barrier)
        self.emit("{")
        self.depth += 1
        self.emit(f"{S}* tx_As = reinterpret_cast<{S}*>({self.smem});")
        self.emit(f"{S}* tx_Bs = tx_As + {m * lda};")
        self.unrolled(la.slots, f"tx_As[({la.coord(0)}) * {lda} + ({la.coord(1)})] = tilex_io<{S}>::put({a}[tx_s]);")
        self.unrolled(lb.slots, f"tx_Bs[({lb.coord(0)}) * {ldb} + ({lb.coord(1)})] = tilex_io<{S}>::put({b}[tx_s]);")
        self.depth -= 1
        self.emit("}")
        self.emit(self.barrier)
        self.emit(f"float {name}[{out_l.slots}];")
        self.unrolled(out_l.slots, f"{name}[tx_s] = 0.0f;")
        self.emit("{")
        self.depth += 1
        self.emit(f"const {S}* tx_As = reinterpret_cast<const {S}*>({self.smem});")
        self.emit(f"const {S}* tx_Bs = tx_As + {m * lda};")
        self.emit(f"for (int tx_k = 0; tx_k < {kk}; ++tx_k) {{")
        self.depth += 1
        self.unrolled(out_l.slots, f"{name}[tx_s] += (float)tilex_io<{S}>::get(tx_As[({out_l.coord(0)}) * {lda} + tx_k]) * "
                                   f"(float)tilex_io<{S}>::get(tx_Bs[tx_k * {ldb} + ({out_l.coord(1)})]);")
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")
        return name


def _flat(layout: Layout, shape: tuple) -> str:
    """C expression: row-major flat index in `shape` of slot s's element."""
    terms = []
    for i in range(len(shape)):
        stride = numel(shape[i + 1:])
        c = layout.coord(i, "tx_s")
        if c == "0":
            continue
        terms.append(f"({c}) * {stride}" if stride > 1 else f"({c})")
    return " + ".join(terms) or "0"


def _is_reduction(e: A.Call) -> bool:
    kind = FUNCTIONS[e.func].kind
    return kind in ("reduce", "argreduce") or (kind == "minmax" and len(e.args) == 1)


def _identity(func: str, t: str) -> str:
    if func in ("sum", "mean"):
        return "0"
    if func in ("max", "argmax"):
        return {"float": "__int_as_float(0xff800000)", "double": "-__longlong_as_double(0x7ff0000000000000LL)",
                "int": "(-2147483647 - 1)", "long long": "(-9223372036854775807LL - 1)", "bool": "false"}[t]
    return {"float": "__int_as_float(0x7f800000)", "double": "__longlong_as_double(0x7ff0000000000000LL)",
            "int": "2147483647", "long long": "9223372036854775807LL", "bool": "true"}[t]


def _combine(func: str, t: str, a: str, b: str) -> str:
    if func in ("sum", "mean"):
        return f"{a} + {b}"
    if t in ("float", "double"):
        return f"f{func}{'f' if t == 'float' else ''}({a}, {b})"
    return f"({a} {'>' if func == 'max' else '<'} {b} ? {a} : {b})"


def _reads(e: A.Expr, name: str) -> bool:
    if isinstance(e, A.Name):
        return e.id == name
    return any(_reads(c, name) for c in e.children() if isinstance(c, A.Expr))


def _only_identity(e: A.Expr, name: str, layout: Layout, want) -> bool:
    """True if every read of `name` in `e` is at the same slot it is written (safe in place)."""
    if isinstance(e, A.Name):
        return e.id != name or (want is not None and layout.compatible(want) and layout.slot_map(want) == "tx_s")
    if isinstance(e, A.BinOp) and e.op is B.MATMUL or isinstance(e, (A.Index, A.Attr, A.Call)) and not _elementwise_call(e):
        return not _reads(e, name) or isinstance(e, A.Index) and e.base.ty.what == "tensor"
    return all(_only_identity(c, name, layout, want.view_for(c.ty.shape) if want is not None and c.ty.shape else None)
               for c in e.children() if isinstance(c, A.Expr) and c.ty is not None and c.ty.what == "value")


def _elementwise_call(e) -> bool:
    if isinstance(e, A.Call):
        kind = FUNCTIONS[e.func].kind
        return kind in ("math", "abs", "where", "scalar", "axis", "ctor", "arange") or (kind == "minmax" and len(e.args) == 2)
    return isinstance(e, A.Method)


def _source_line(s: A.Stmt) -> str:
    from ..exprs import unparse as u

    if isinstance(s, A.Assign):
        return f"{s.name} = {u(s.value)}"
    if isinstance(s, A.Store):
        return f"{u(s.target)} = {u(s.value)}"
    if isinstance(s, A.For):
        return f"for {s.var} in range({u(s.start)}, {u(s.stop)}, {u(s.step)})"
    if isinstance(s, A.If):
        return f"if {u(s.cond)}"
    return ""

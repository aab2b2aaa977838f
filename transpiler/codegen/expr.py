"""Expressions: a scalar's C expression (uniform) or a tile's value at slot `tx_s` of a layout.

Elementwise operators, casts and roundings are inline C; what a value needs materialized first (a load, a
reduction, a product, a layout conversion through shared memory) is emitted as statements by the part
that owns it (AccessEmitter, ReductionEmitter, ProductEmitter), which `bind` connects.
"""
from __future__ import annotations

from .. import ast as A
from ..builtins import CUDA_MATH, FUNCTIONS, BuiltinKind as K, is_reduction, is_scan
from ..diagnostics import CompileError
from ..exprs import unparse
from ..layout import Layout, flat_index
from ..passes.infer_dtypes import operand_dtype
from ..types import DType, TyWhat
from .c import C_BINOP, ROUND, flit, reg, storage
from .context import KernelFacts, Scope
from .writer import Writer

B = A.BinOpKind
# integer ops emitted through the wrapping helpers of tilex_math.cuh
WRAPPING = {B.ADD: "add", B.SUB: "sub", B.MUL: "mul"}


class ExprEmitter:
    """Scalar and tile expressions of one kernel; loads, reductions and products go to the bound parts."""

    def __init__(self, facts: KernelFacts, out: Writer, scope: Scope):
        self.facts, self.out, self.scope = facts, out, scope
        self.access = self.reductions = self.products = None

    def bind(self, access, reductions, products) -> None:
        """The parts that emit loads (`access`, `scalar_address`, `other`), reductions and `@` for it."""
        self.access, self.reductions, self.products = access, reductions, products

    # ---- conversions
    def cast(self, expr: str, src: DType, dst: DType) -> str:
        if src == dst or reg(src) == reg(dst) and dst not in ROUND and src not in ROUND and not dst.is_narrow_int:
            return expr
        if dst in ROUND:
            if src == dst:
                return expr
            return f"{ROUND[dst]}((float)({expr}))"
        if dst is DType.BOOL:
            return f"(({expr}) != 0)"
        if dst.is_narrow_int:  # from an int: wraps (two's complement); from a float: saturates (NaN gives 0)
            if src.is_float:
                self.out.need("tilex_math.cuh")
                lo, hi = dst.int_range
                return f"tilex_imin<int>(tilex_imax<int>(tilex_f2i({expr}), {lo}), {hi})"
            return f"((int)({dst.ctype})({expr}))"
        if dst.is_int and src.is_float:
            self.out.need("tilex_math.cuh")
            return f"tilex_f2ll({expr})" if dst is DType.I64 else f"tilex_f2i({expr})"
        return f"({reg(dst)})({expr})"

    @staticmethod
    def round(expr: str, dt: DType) -> str:
        return f"{ROUND[dt]}({expr})" if dt in ROUND else expr

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
            idx, ok = self.access.scalar_address(e)
            other = e.kwarg("other")
            oth = self.cast(self.scalar(other), other.ty.dtype, e.ty.dtype) if other is not None else "0"
            return f"(({ok}) ? ({reg(e.ty.dtype)})tilex_io<{storage(e.ty.dtype)}>::get({e.base.id}[{idx}]) : ({reg(e.ty.dtype)})({oth}))"
        if isinstance(e, A.Call) and is_reduction(e):
            name, _ = self.reductions.reduction(e)
            return name
        return self.elementwise(e, lambda c: self.scalar(c))

    # ---- tile expressions: the value at slot `s` of layout `want`
    def tile(self, e: A.Expr, want: Layout) -> str:
        if not e.ty.shape:
            return self.scalar(e)
        if isinstance(e, A.Name):
            have = self.scope.arrays[e.id]
            if not have.compatible(want) and e.id in self.scope.pure:  # recomputed here, not converted (remat.py)
                return self.tile(self.scope.pure[e.id], want)
            return self.read_array(e.id, have, want, e.ty.dtype)
        if isinstance(e, A.Index) and e.base.ty.what is TyWhat.TENSOR:
            layout = e.ty.layout
            name = self.out.fresh("tx_ld")
            self.out.emit(f"{reg(e.ty.dtype)} {name}[{layout.slots}];  // {unparse(e)}")
            self.access.access(e, layout, name, store=False)
            return self.read_array(name, layout, want, e.ty.dtype)
        if (isinstance(e, A.Index) and isinstance(e.base, A.Call) and e.base.func == "arange"
                and all(isinstance(i, A.NewAxis) or isinstance(i, A.Slice) and i.start is None and i.stop is None
                        for i in e.items) and sum(isinstance(i, A.Slice) for i in e.items) == 1):
            # a view of an arange (arange(a, b)[None, :]): its value at the slot's coordinate, not an array
            self.out.need("tilex_math.cuh")
            axis = next(j for j, i in enumerate(e.items) if isinstance(i, A.Slice))
            return f"tilex_wadd<{reg(e.ty.dtype)}>({self.scalar(e.base.args[0])}, {want.coord(axis)})"
        if isinstance(e, (A.Index, A.Attr)):  # views of a tile: t[:, None], t.T
            base = e.base if isinstance(e, A.Index) else e.obj
            arr, have = self.materialize(base)
            if isinstance(e, A.Index) and isinstance(base, A.Name):
                _check_view_layout(e, base, have)
            return self.read_array(arr, e.ty.layout, want, e.ty.dtype)
        if isinstance(e, A.BinOp) and e.op is B.MATMUL:
            name = self.products.matmul(e)
            return self.read_array(name, e.ty.layout, want, e.ty.dtype)
        fused = accumulated_product(e)
        if fused is not None:  # c + a @ b (f32): the product accumulates onto c (acc * alpha + p @ v)
            product, c = fused
            name = self.products.matmul(product, init=self.tile(c, e.ty.layout))
            return self.read_array(name, e.ty.layout, want, e.ty.dtype)
        if isinstance(e, A.Call) and is_reduction(e):
            name, layout = self.reductions.reduction(e)
            return self.read_array(name, layout, want, e.ty.dtype)
        if isinstance(e, A.Call) and is_scan(e):
            name, layout = self.reductions.scan(e)
            return self.read_array(name, layout, want, e.ty.dtype)
        if isinstance(e, A.Call) and e.func == "zeros":
            return "0"
        if isinstance(e, A.Call) and e.func == "full":
            return self.cast(self.scalar(e.args[1]), e.args[1].ty.dtype, e.ty.dtype)
        if isinstance(e, A.Call) and e.func == "arange":
            self.out.need("tilex_math.cuh")
            return f"tilex_wadd<{reg(e.ty.dtype)}>({self.scalar(e.args[0])}, {want.coord(0)})"
        return self.elementwise(e, lambda c: self.tile(c, want.view_for(c.ty.shape)) if c.ty.shape else self.scalar(c))

    def materialize(self, e: A.Expr) -> tuple[str, Layout]:
        """An array holding tile `e` in its own layout."""
        if isinstance(e, A.Name):
            return e.id, self.scope.arrays[e.id]
        layout = e.ty.layout
        name = self.out.fresh("tx_tv")
        self.out.emit(f"{reg(e.ty.dtype)} {name}[{layout.slots}];")
        val = self.tile(e, layout)
        self.out.unrolled(layout.slots, f"{name}[tx_s] = {val};")
        return name, layout

    def read_array(self, name: str, have: Layout, want: Layout, dt: DType) -> str:
        if have.compatible(want):
            return f"{name}[{have.slot_map(want)}]"
        return f"{self.convert(name, have, want, dt)}[tx_s]"

    def convert(self, name: str, have: Layout, want: Layout, dt: DType) -> str:
        """A new array holding `name` (in `have`) at `want`'s slots, through shared memory: each element goes
        to its row-major place in `have`'s shape (`want` may read a leading part of it, as top-k does)."""
        out, smem = self.out, self.facts.smem
        out.need("tilex_types.cuh")
        cv = out.fresh("tx_cv")
        shape = have.shape
        rt = reg(dt)
        out.emit(f"// layout conversion of {name} through shared memory")
        out.emit(self.scope.barrier)
        out.unrolled(have.slots, f"reinterpret_cast<{rt}*>({smem})[{flat_index(have, shape)}] = {name}[tx_s];")
        out.emit(self.scope.barrier)
        out.emit(f"{rt} {cv}[{want.slots}];")
        out.unrolled(want.slots, f"{cv}[tx_s] = reinterpret_cast<const {rt}*>({smem})[{flat_index(want, shape)}];")
        return cv

    # ---- elementwise operators (shared by scalar and tile paths)
    def elementwise(self, e: A.Expr, sub) -> str:
        need = self.out.need
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
            if e.op in WRAPPING and cdt in (DType.I32, DType.I64):  # ints wrap; C++ signed overflow is UB
                need("tilex_math.cuh")
                expr = f"tilex_w{WRAPPING[e.op]}<{reg(cdt)}>({a}, {b})"
            elif e.op in C_BINOP:
                expr = f"({a} {C_BINOP[e.op]} {b})"
            elif e.op in (B.SHL, B.SHR):
                need("tilex_bits.cuh")
                expr = f"tilex_{'shl' if e.op is B.SHL else 'shr'}({a}, {b})"
            elif e.op is B.DIV:
                expr = f"({a} / {b})"
            elif e.op in (B.FLOORDIV, B.MOD) and cdt in (DType.I32, DType.I64) and _power_of_two(e.rhs):
                # by a power of two (two's complement): floor division is the arithmetic shift, the
                # floor modulo (the sign of the divisor, nonnegative) the low bits
                n = e.rhs.value
                expr = (f"({a} >> {n.bit_length() - 1})" if e.op is B.FLOORDIV
                        else f"({a} & {n - 1}{'LL' if cdt is DType.I64 else ''})")
            elif e.op is B.FLOORDIV:
                need("tilex_math.cuh")
                expr = f"tilex_floordiv<{reg(cdt)}>({a}, {b})"
            elif e.op is B.MOD:
                need("tilex_math.cuh")
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
            if e.op is A.UnaryOpKind.INVERT:
                return f"(~{self.cast(x, e.operand.ty.dtype, cdt)})"
            if cdt in (DType.I32, DType.I64):
                need("tilex_math.cuh")
                return f"tilex_wneg<{reg(cdt)}>({self.cast(x, e.operand.ty.dtype, cdt)})"
            return self.round(f"(-{self.cast(x, e.operand.ty.dtype, cdt)})", dt)
        if isinstance(e, A.Method):  # .to(dtype)
            return self.cast(sub(e.obj), e.obj.ty.dtype, dt)
        if isinstance(e, A.Call):
            kind = FUNCTIONS[e.func].kind
            args = [sub(a) for a in e.args]
            if kind is K.MATH:
                need("tilex_math.cuh")
                return self.round(CUDA_MATH[e.func].format(x=self.cast(args[0], e.args[0].ty.dtype, DType.F32)), dt)
            if kind is K.ABS:
                x = self.cast(args[0], e.args[0].ty.dtype, cdt)
                if cdt is DType.BOOL:  # abs of a bool is the bool (as NumPy's)
                    return x
                if cdt is DType.F32:
                    return self.round(f"fabsf({x})", dt)
                need("tilex_math.cuh")
                return f"({x} < 0 ? tilex_wneg<{reg(cdt)}>({x}) : {x})"  # abs(INT_MIN) wraps to INT_MIN
            if kind is K.MINMAX:
                a, b = (self.cast(x, y.ty.dtype, cdt) for x, y in zip(args, e.args))
                if cdt.is_float:
                    return self.round(f"f{e.func}f({a}, {b})", dt)
                need("tilex_math.cuh")
                return f"tilex_i{e.func}<{reg(cdt)}>({a}, {b})"
            if kind is K.WHERE:
                return f"({args[0]} ? {self.cast(args[1], e.args[1].ty.dtype, dt)} : {self.cast(args[2], e.args[2].ty.dtype, dt)})"
            if e.func == "program_id":
                return f"(int)blockIdx.{'xyz'[int(e.args[0].value)]}"
            if e.func == "num_programs":
                return f"(int)gridDim.{'xyz'[int(e.args[0].value)]}"
            if e.func == "cdiv":
                need("tilex_math.cuh")
                return f"tilex_cdiv<{reg(dt)}>({self.cast(args[0], e.args[0].ty.dtype, dt)}, {self.cast(args[1], e.args[1].ty.dtype, dt)})"
        raise AssertionError(f"no emission rule for {type(e).__name__} {unparse(e)}")


def _power_of_two(e: A.Expr) -> bool:
    """True if `e` is an integer literal 2^k (k >= 0) that fits in 32 bits."""
    return isinstance(e, A.IntLit) and 0 < e.value < 2**31 and e.value & (e.value - 1) == 0


def accumulated_product(e: A.Expr):
    """(product, addend) when `e` is `c + a @ b` or `a @ b + c` with f32 tiles of one layout, else None."""
    if not (isinstance(e, A.BinOp) and e.op is B.ADD and e.ty.shape and e.ty.dtype is DType.F32):
        return None
    for p, c in ((e.rhs, e.lhs), (e.lhs, e.rhs)):
        if (isinstance(p, A.BinOp) and p.op is B.MATMUL and p.ty.dtype is DType.F32 and p.ty.layout == e.ty.layout
                and c.ty.shape == e.ty.shape and c.ty.dtype is DType.F32):
            return p, c
    return None


def _check_view_layout(e: A.Index, base: A.Name, have: Layout) -> None:
    """`base[:, None]`-style views are read through the layout the planner annotated; the array codegen holds
    must be in that layout (expanded by the new axes), or the reads index the wrong registers (found at BK=32
    in attention_prefill_short.tile: a row sum of an mma.sync product read at a wgmma product's slots, past its
    4 registers: NaN on the GPU). Until the planner converts such a view, it is a compile-time error."""
    actual = have
    for axis, item in enumerate(e.items):
        if isinstance(item, A.NewAxis):
            actual = actual.expand(axis)
    if actual != e.ty.layout and not (actual.shape == e.ty.layout.shape and actual.compatible(e.ty.layout)
                                      and actual.slots == e.ty.layout.slots):
        raise CompileError(
            f"not supported yet: '{unparse(e)}' is read in a register layout that '{base.id}' does not have ("
            f"'{base.id}' comes from a value laid out for another product or reduction than this use); compute "
            f"it from a value of the same product as its use, or keep both products on the same main loop",
            e.span)

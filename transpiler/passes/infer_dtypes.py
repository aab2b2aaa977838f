"""Pass 2, infer_dtypes: give every expression a dtype, applying the promotion rules.

Needs: resolve_names. Guarantees: every expression has `ty.dtype` (and `ty.what`);
arithmetic operands are promoted (`types.promote`; literals are weak and take the other
operand's dtype); `/` on integers gives f32; `@` takes two equal float dtypes and gives
f32; reductions of narrow floats accumulate and return f32; a variable keeps one dtype
(a loop-carried accumulator cannot silently change precision); stores match the
tensor's dtype (convert with `.to(...)`); f8e4m3 is used only on targets that have it
(sm_89 and later).
"""
from __future__ import annotations

from dataclasses import replace

from .. import ast as A
from ..builtins import ATOMIC_OPS, FUNCTIONS, BuiltinKind as K
from .scan_rules import scan_dtype
from ..diagnostics import CompileError
from ..targets import DEFAULT_ARCH, FP8_MIN_CC, Target, target
from ..types import SUPPORTED, DType, Ty, TyWhat, promote
from .base import Rewriter, fail

B = A.BinOpKind


# dtypes the hardware has only from some compute capability on: the fp8 conversions
# (cvt.*.e4m3x2) need sm_89 (Ada) or later (`Target.fp8`)
MIN_SM = {DType.F8E4M3: FP8_MIN_CC, DType.F8E5M2: FP8_MIN_CC}


def infer_dtypes(program: A.Program, tgt: Target | None = None) -> A.Program:
    tgt = tgt or target(DEFAULT_ARCH)
    return replace(program, kernels=tuple(_Dtypes(k, tgt).run() for k in program.kernels))


def _too_old(dt: DType, tgt: Target) -> bool:
    """Whether `tgt` lacks `dt` (the archs it cannot read are taken to have it)."""
    return dt in MIN_SM and not tgt.fp8


def _dtype(name: str) -> DType:
    try:
        dt = DType(name)
    except ValueError:
        fail(f"unknown dtype '{name}'")
    if dt not in SUPPORTED:
        fail(f"dtype {name} is not supported yet (use one of {', '.join(sorted(d.value for d in SUPPORTED))})")
    return dt


def _weak(e: A.Expr) -> bool:
    return isinstance(e, (A.IntLit, A.FloatLit))


def operand_dtype(a: A.Expr, b: A.Expr) -> DType:
    """The dtype two typed operands meet in: `types.promote`, with literals weak."""
    da, db = a.ty.dtype, b.ty.dtype
    wa, wb = _weak(a), _weak(b)
    if wa and not wb:
        return DType.F32 if (da.is_float and not db.is_float) else db
    if wb and not wa:
        return DType.F32 if (db.is_float and not da.is_float) else da
    return promote(da, db)


def _v(dt: DType) -> Ty:
    return Ty(TyWhat.VALUE, dt)


class _Dtypes(Rewriter):
    def __init__(self, k: A.Kernel, tgt: Target):
        self.k = k
        self.target = tgt
        self.env: dict[str, tuple[DType, int]] = {}  # name -> (dtype, line of first binding)
        for p in k.params:
            dt = _dtype_at(p.type)
            if _too_old(dt, tgt):
                raise CompileError(f"parameter '{p.name}' is {dt.value}, which needs sm_{MIN_SM[dt]} or later; "
                                   f"the target is {tgt.arch}", p.span, _target_notes(dt))
            self.env[p.name] = (dt, p.span.line)
        for s in k.symbols:
            self.env[s] = (DType.I32, k.span.line)

    def run(self) -> A.Kernel:
        k = self.k
        params = tuple(self._param(p) for p in k.params)
        where = tuple(_at(e, lambda e=e: self._bool(self.visit(e), "a where constraint")) for e in k.where)
        grid = tuple(_at(e, lambda e=e: self._int(self.visit(e), "a grid dimension")) for e in k.grid)
        body = self.visit(k.body)
        return replace(k, params=params, where=where, grid=grid, body=body)

    def _param(self, p: A.Param) -> A.Param:
        if p.default is not None:
            d = self.visit(p.default)
            if not isinstance(d, (A.IntLit, A.FloatLit, A.BoolLit)):
                fail(f"the default of '{p.name}' must be a literal")
            return replace(p, default=d)
        return p

    def _bool(self, e: A.Expr, what: str) -> A.Expr:
        if e.ty.dtype is not DType.BOOL:
            fail(f"{what} must be a condition (bool), got {e.ty.dtype}")
        return e

    def _int(self, e: A.Expr, what: str) -> A.Expr:
        if not e.ty.dtype.is_int:
            fail(f"{what} must be an integer, got {e.ty.dtype}")
        return e

    # ---- leaves
    def visit_Name(self, n):
        dt, _ = self.env[n.id]
        what = TyWhat.TENSOR if n.kind is A.NameKind.TENSOR else TyWhat.VALUE
        return replace(n, ty=Ty(what, dt))

    def visit_IntLit(self, n):  # i32, or i64 when the value needs it (the parser keeps literals within i64)
        return replace(n, ty=_v(DType.I32 if -2**31 <= n.value < 2**31 else DType.I64))

    def visit_FloatLit(self, n):
        return replace(n, ty=_v(DType.F32))

    def visit_BoolLit(self, n):
        return replace(n, ty=_v(DType.BOOL))

    def _on_target(self, dt: DType) -> DType:
        if _too_old(dt, self.target):
            fail(f"{dt.value} needs sm_{MIN_SM[dt]} or later; the target is {self.target.arch}", *_target_notes(dt))
        return dt

    def visit_DTypeLit(self, n):
        return replace(n, ty=Ty(TyWhat.DTYPE, self._on_target(_dtype(n.dtype))))

    def visit_TileTypeExpr(self, n):
        dt = self._on_target(_dtype(n.dtype))
        dims = tuple(self._int(self.visit(d), "a tile dimension") for d in n.dims)
        return replace(n, dims=dims, ty=Ty(TyWhat.TYPE, dt))

    # ---- operators
    def visit_BinOp(self, e):
        lhs, rhs = self.visit(e.lhs), self.visit(e.rhs)
        for side in (lhs, rhs):
            if side.ty.what != TyWhat.VALUE:
                fail(f"{_what(side)} cannot be used in arithmetic; slice it into a tile first")
        e = replace(e, lhs=lhs, rhs=rhs)
        da, db = lhs.ty.dtype, rhs.ty.dtype
        op = e.op
        if op is B.MATMUL:
            if not (da.is_float and db.is_float):
                fail(f"@ needs float operands, got {da} @ {db}")
            if da != db:
                fail(f"@ needs operands of one dtype, got {da} @ {db}", "convert one with .to(...)")
            return replace(e, ty=_v(DType.F32))
        if op.is_compare:
            operand_dtype(lhs, rhs)
            return replace(e, ty=_v(DType.BOOL))
        if op.is_logical:
            for side in (lhs, rhs):
                if side.ty.dtype is not DType.BOOL:
                    fail(f"'{op.value}' needs bool operands, got {side.ty.dtype}")
            return replace(e, ty=_v(DType.BOOL))
        if op in (B.BITAND, B.BITOR, B.BITXOR):
            if da.is_float or db.is_float:
                fail(f"'{op.value}' needs bool or integer operands, got {da} and {db}")
            return replace(e, ty=_v(operand_dtype(lhs, rhs).widened))
        if op in (B.SHL, B.SHR):  # the left operand's dtype, as C (the shift amount does not widen it)
            if not (da.is_int and db.is_int):
                fail(f"'{op.value}' needs integer operands, got {da} and {db}")
            dt = DType.I32 if _weak(lhs) and da is DType.I32 else da
            return replace(e, ty=_v(dt.widened))
        if op in (B.FLOORDIV, B.MOD) and (da.is_float or db.is_float) and op is B.FLOORDIV:
            fail(f"'//' is integer division; got {da} and {db} (use / for floats)")
        dt = operand_dtype(lhs, rhs).widened  # narrow ints compute in i32 (C's integer promotion)
        if dt is DType.BOOL:
            dt = DType.I32
        if op is B.DIV and not dt.is_float:
            dt = DType.F32
        return replace(e, ty=_v(dt))

    def visit_UnaryOp(self, e):
        x = self.visit(e.operand)
        if e.op is A.UnaryOpKind.NOT:
            if x.ty.dtype is not DType.BOOL:
                fail(f"'not' needs a bool, got {x.ty.dtype}")
            return replace(e, operand=x, ty=_v(DType.BOOL))
        if e.op is A.UnaryOpKind.INVERT:
            if not x.ty.dtype.is_int:
                fail(f"'~' needs an integer, got {x.ty.dtype}" + ("; use 'not'" if x.ty.dtype is DType.BOOL else ""))
            return replace(e, operand=x, ty=_v(x.ty.dtype.widened))
        if x.ty.dtype is DType.BOOL:
            fail("cannot negate a bool; use 'not'")
        return replace(e, operand=x, ty=_v(x.ty.dtype.widened))

    # ---- calls
    def visit_Call(self, c):
        if c.func not in FUNCTIONS:
            fail(f"{c.func}() can only be iterated by a for loop: for i in {c.func}(...) {{ ... }}")
        spec = FUNCTIONS[c.func]
        args = tuple(self.visit(a) for a in c.args)
        kwargs = tuple((k, self.visit(v)) for k, v in c.kwargs)
        if not spec.min_args <= len(args) <= spec.max_args:
            n = spec.min_args if spec.min_args == spec.max_args else f"{spec.min_args} or {spec.max_args}"
            fail(f"{c.func}() takes {n} argument{'s' if spec.max_args > 1 else ''}, got {len(args)}")
        for k, _ in kwargs:
            if k not in spec.kwargs or (spec.kind is K.MINMAX and len(args) == 2):
                fail(f"{c.func}() got an unexpected keyword argument '{k}'")
        c = replace(c, args=args, kwargs=kwargs)
        kind = spec.kind
        if kind is K.CTOR:
            t = args[0]
            if t.ty.what != TyWhat.TYPE:
                fail(f"{c.func}() takes a tile type such as f32[BLOCK] first, got {_what(t)}")
            if c.func == "full" and args[1].ty.what != TyWhat.VALUE:
                fail("full(type, value) needs a scalar value")
            return replace(c, ty=_v(t.ty.dtype))
        for a in args:
            if a.ty.what != TyWhat.VALUE:
                fail(f"{c.func}() takes values, got {_what(a)}; slice the tensor into a tile first")
        if kind is K.MATH:
            dt = args[0].ty.dtype
            return replace(c, ty=_v(dt if dt.is_float else DType.F32))
        if kind is K.ABS:
            return replace(c, ty=_v(args[0].ty.dtype.widened))
        if kind is K.MINMAX and len(args) == 2:
            return replace(c, ty=_v(operand_dtype(args[0], args[1])))
        if kind in (K.MINMAX, K.REDUCE):
            dt = args[0].ty.dtype
            if c.func == "mean" and not dt.is_float:
                dt = DType.F32
            if c.func in ("sum", "mean"):
                dt = DType.F32 if dt.is_float else (DType.I64 if dt is DType.I64 else DType.I32)
            return replace(c, ty=_v(dt))
        if kind is K.ARGREDUCE:
            return replace(c, ty=_v(DType.I32))
        if kind in (K.SCAN, K.SORT, K.TOPK):
            return replace(c, ty=_v(scan_dtype(c, args)))
        if kind is K.WHERE:
            self._bool(args[0], "the condition of where()")
            return replace(c, ty=_v(operand_dtype(args[1], args[2])))
        if kind in (K.ARANGE, K.AXIS, K.SCALAR):
            for a in args:
                self._int(a, f"an argument of {c.func}()")
            dt = DType.I32 if kind is not K.SCALAR else operand_dtype(args[0], args[1])
            return replace(c, ty=_v(dt))
        fail(f"unsupported function {c.func}()")  # pragma: no cover - table and code out of step

    def visit_Method(self, m):
        obj = self.visit(m.obj)
        args = tuple(self.visit(a) for a in m.args)
        if m.name == "to":
            if len(args) != 1 or args[0].ty.what != TyWhat.DTYPE or m.kwargs:
                fail(".to() takes one dtype, e.g. .to(f32)")
            if obj.ty.what != TyWhat.VALUE:
                fail(f".to() converts tiles and scalars, not {_what(obj)}; slice the tensor first")
            return replace(m, obj=obj, args=args, ty=_v(args[0].ty.dtype))
        fail(f"unknown method '.{m.name}()' (tiles have .to(dtype) and .T)")

    def visit_Attr(self, a):
        obj = self.visit(a.obj)
        if a.name == "T":
            if obj.ty.what in (TyWhat.TYPE, TyWhat.DTYPE):
                notes = ()
                if isinstance(obj, A.TileTypeExpr) and len(obj.dims) == 2:
                    from ..exprs import unparse

                    swapped = f"{obj.dtype}[{unparse(obj.dims[1])}, {unparse(obj.dims[0])}]"
                    notes = (f"write the type with its dimensions swapped: {swapped}",)
                fail(f".T transposes tiles and tensors, not {_what(obj)}", *notes)
            return replace(a, obj=obj, ty=obj.ty)
        fail(f"unknown attribute '.{a.name}' (tiles and tensors have .T)")

    def visit_Index(self, e):
        base = self.visit(e.base)
        items = tuple(self.visit(i) for i in e.items)
        kwargs = tuple((k, self.visit(v)) for k, v in e.kwargs)
        for i in items:
            if isinstance(i, (A.Slice, A.NewAxis)):
                continue
            if i.ty.what != TyWhat.VALUE or not i.ty.dtype.is_int:
                fail(f"an index must be an integer, got {i.ty.show() if i.ty.what == TyWhat.VALUE else _what(i)}")
        for k, v in kwargs:
            if k == "distinct":
                fail("distinct= marks the index tiles of a store (t[ids, distinct = True] = v); a read may repeat indices")
            if k not in ("other", "mask"):
                fail(f"unknown subscript keyword '{k}' (other=VALUE, mask=CONDITION, and distinct=True on a store)")
            if base.ty.what != TyWhat.TENSOR:
                fail("other= applies to reads of a tensor" if k == "other" else "mask= applies to subscripts of a tensor")
            if k == "mask":
                self._bool(v, "mask=")
        return replace(e, base=base, items=items, kwargs=kwargs, ty=Ty(TyWhat.VALUE, base.ty.dtype))

    def visit_Slice(self, s):
        start, stop = self.visit(s.start), self.visit(s.stop)
        for b in (start, stop):
            if b is not None and not b.ty.dtype.is_int:
                fail(f"slice bounds must be integers, got {b.ty.dtype}")
        return replace(s, start=start, stop=stop, ty=Ty(TyWhat.VALUE, DType.I32))

    def visit_NewAxis(self, n):
        return replace(n, ty=Ty(TyWhat.VALUE, DType.I32))

    # ---- statements
    def visit_Assign(self, s):
        value = self.visit(s.value)
        if value.ty.what != TyWhat.VALUE:
            fail(f"'{s.name}' must hold a tile or scalar, not {_what(value)}")
        dt = value.ty.dtype
        if s.name in self.env:
            old, line = self.env[s.name]
            if old != dt and not (_weak(value) and (old.is_float or not dt.is_float)):
                fail(f"'{s.name}' holds {old} (from line {line}) but is assigned {dt} here",
                     f"a variable keeps one dtype; convert with .to({old})")
            if _weak(value):
                value = replace(value, ty=_v(old))
        else:
            self.env[s.name] = (dt, s.span.line)
        return replace(s, value=value)

    def visit_Store(self, s):
        target = self.visit(s.target)
        value = self.visit(s.value)
        compare = self.visit(s.compare)
        want = target.ty.dtype
        if s.atomic is not None:
            ops = ATOMIC_OPS[s.atomic].dtypes
            if want not in ops:
                fail(f"atomic_{s.atomic}() on {want} is not supported ('{target.base.id}' is {want})",
                     f"atomic_{s.atomic}() takes {', '.join(sorted(d.value for d in ops))}")
        for v in (value, compare):
            if v is None:
                continue
            if v.ty.what != TyWhat.VALUE:
                fail(f"cannot store {_what(v)}")
            if want != v.ty.dtype and not _weak(v):
                fail(f"storing {v.ty.dtype} into {target.base.id}: {want}", f"convert explicitly with .to({want})")
        other = target.kwarg("other")
        if other is not None and s.result is None and not (s.updates or s.op is not None):  # x[.., other=v] += e:
            #                                                      other= fills the read half; the store skips as ever
            fail("other= applies to reads of a tensor (and to the old values an atomic returns, "
                 "old = atomic_add(t[..., other = v], ...)); a store skips the elements outside the tensor")
        if s.result is not None:
            self._atomic_result(s, target, other)
        return replace(s, target=target, value=value, compare=compare)

    def _atomic_result(self, s: A.Store, target: A.Expr, other: A.Expr | None) -> None:
        """`old = atomic_OP(t[...], ...)`: old holds t's dtype (one dtype per variable), `other=` one too."""
        want = target.ty.dtype
        if other is not None and other.ty.dtype != want and not _weak(other):
            fail(f"other= of '{target.base.id}' ({want}) is {other.ty.dtype}: the old value of an element the atomic "
                 "skips has the tensor's dtype", f"convert explicitly with .to({want})")
        if s.result in self.env:
            old, line = self.env[s.result]
            if old != want:
                fail(f"'{s.result}' holds {old} (from line {line}) but is assigned the old values of "
                     f"'{target.base.id}' ({want}) here", f"a variable keeps one dtype; use another name")
        else:
            self.env[s.result] = (want, s.span.line)

    def visit_For(self, s):
        start, stop, step = (self._int(self.visit(x), "a loop bound") for x in (s.start, s.stop, s.step))
        self.env[s.var] = (DType.I32, s.span.line)
        return replace(s, start=start, stop=stop, step=step, body=self.visit(s.body))

    def visit_If(self, s):
        cond = self.visit(s.cond)
        self._bool(cond, "an if condition")
        return replace(s, cond=cond, then=self.visit(s.then), orelse=self.visit(s.orelse))


def _at(node, thunk):
    """Run `thunk`, reporting a SemanticError at `node` (for checks made outside visit())."""
    from ..diagnostics import CompileError, SemanticError

    try:
        return thunk()
    except SemanticError as e:
        raise CompileError(e.message, node.span, e.notes) from None


def _target_notes(dt: DType) -> tuple[str, ...]:
    return (f"compile for sm_{MIN_SM[dt]} or later (--arch sm_{MIN_SM[dt]}, {DEFAULT_ARCH}), or use bf16 or f16",)


def _dtype_at(t: A.TypeExpr) -> DType:
    return _at(t, lambda: _dtype(t.dtype))


def _what(e: A.Expr) -> str:
    from ..exprs import unparse

    kinds = {TyWhat.TENSOR: "the tensor", TyWhat.DTYPE: "the dtype", TyWhat.TYPE: "the tile type"}
    return f"{kinds.get(e.ty.what, 'the value')} '{unparse(e)}'"

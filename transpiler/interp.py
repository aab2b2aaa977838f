"""The NumPy interpreter: executes the checked kernel IR on the CPU, one program at a time.

`run_kernel` walks the annotated tree (the output of `compile_program`) once per program
instance of the grid, evaluating every expression with vectorized NumPy on whole tiles.
It implements the same numeric semantics as the CUDA code generator:

* every value carries its node's dtype (`ty.dtype`); an operation converts its operands
  to the node's compute dtype (`DType.compute`: f32 for narrow floats), computes, and
  rounds the result to the node's dtype (narrow floats round to nearest even);
* ints wrap around; `//` and `%` are floor division / floor modulo (Python semantics);
* float -> int conversion truncates toward zero, NaN gives 0, out-of-range saturates;
  conversion to f8e4m3 saturates finite and infinite values to +-448 (NaN stays NaN);
* tensor reads outside `[0, dim)` (or where `mask=` is False) take `other=` (default 0), stores there
  are skipped; atomics update every valid element in the tile's order (`interp_atomic`), and a scatter
  marked `distinct = True` raises when its indices repeat;
* `max`/`min` ignore NaN (like CUDA fmaxf); `argmax`/`argmin` give the first extremum
  and NaN never wins (all-NaN gives 0); sums accumulate in f32 (ints in i32/i64).
* scans add in the GPU's butterfly order, sorts are stable with NaN largest (`interp_scan`).

The arithmetic itself (casts, wrapping ints, the math table, reductions) is in `interp_numeric`.
`launch` binds NumPy arrays and Python scalars to a kernel's parameters with the same
checks as a GPU launch (`runtime.args.bind_arguments`) and runs it.
"""
from __future__ import annotations

import itertools
from typing import Any, Mapping

import numpy as np

from . import ast as A
from .builtins import FUNCTIONS, BuiltinKind as K
from .deep import deep
from .diagnostics import LaunchError
from .exprs import unparse
from .interp_atomic import atomic_fetch, atomic_update, check_distinct
from .interp_numeric import (COMPARE, MATH, MATH_ENV, NP_DTYPES, B, InterpError, argreduce, arith, cast,  # noqa: F401
                             dtype_of, lit, reduce_minmax)  # InterpError: re-exported (tilex.interp.InterpError)
from .interp_scan import run_scan
from .passes.infer_dtypes import operand_dtype
from .types import DType, TyWhat

class _Interp:
    def __init__(self, kernel: A.Kernel, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, Any],
                 symbols: Mapping[str, int]):
        self.kernel = kernel
        self.arrays = dict(arrays)
        self.symbols = {k: np.int32(v) for k, v in symbols.items()}
        self.scalars = {}
        for p in kernel.params:
            if p.type.dims is not None:
                if p.name not in self.arrays:
                    raise InterpError(f"{kernel.name}: no array given for tensor parameter '{p.name}'")
                continue
            if p.name in scalars:
                v = scalars[p.name]
            elif isinstance(p.default, (A.IntLit, A.FloatLit, A.BoolLit)):
                v = p.default.value
            else:
                raise InterpError(f"{kernel.name}: no value given for scalar parameter '{p.name}'")
            self.scalars[p.name] = lit(v.item() if isinstance(v, np.generic) else v, DType(p.type.dtype))
        self.env: dict[str, Any] = {}
        self.pid = (0, 0, 0)
        self.nprog = (1, 1, 1)
        self.lits: dict[int, Any] = {}
        self.expr = {
            A.Name: self.e_name, A.IntLit: self.e_lit, A.FloatLit: self.e_lit, A.BoolLit: self.e_lit,
            A.BinOp: self.e_binop, A.UnaryOp: self.e_unary,
            A.Call: self.e_call, A.Method: self.e_method, A.Attr: self.e_attr, A.Index: self.e_index,
        }
        self.stmt = {A.Assign: self.s_assign, A.Store: self.s_store, A.For: self.s_for, A.If: self.s_if,
                     A.Fence: lambda s: None}  # programs run one after another: every write is already seen

    # ---- driving
    def grid(self) -> tuple[int, int, int]:
        dims = [int(self.ev(g)) for g in self.kernel.grid]
        while len(dims) < 3:
            dims.append(1)
        return dims[0], dims[1], dims[2]

    def run(self) -> None:
        gx, gy, gz = self.nprog = self.grid()
        body = self.kernel.body
        for z, y, x in itertools.product(range(gz), range(gy), range(gx)):
            self.pid = (x, y, z)
            self.env = {}
            self.block(body)

    def block(self, b: A.Block | None) -> None:
        if b is None:
            return
        stmt = self.stmt
        for s in b.stmts:
            stmt[type(s)](s)

    def ev(self, e: A.Expr):
        return self.expr[type(e)](e)

    def ev_as(self, e: A.Expr, dt: DType):
        return cast(self.ev(e), dt)

    # ---- statements
    def s_assign(self, s: A.Assign) -> None:
        v = self.ev(s.value)
        old = self.env.get(s.name)
        if old is not None and np.ndim(old) and np.shape(v) != np.shape(old):
            v = np.array(np.broadcast_to(v, np.shape(old)))
        self.env[s.name] = v

    def s_store(self, s: A.Store) -> None:
        t = s.target
        mask = self.mask(t)
        if s.atomic is not None or _gathers(t):  # element by element: atomics, scatters (valid elements only)
            view, idx, valid = self.gather(t)
            if mask is not None:
                valid = valid & mask
            where = tuple(i[valid] for i in idx)
            v = np.broadcast_to(self.ev_as(s.value, t.ty.dtype), t.ty.shape)[valid]
            if s.atomic is not None:
                cmp = None if s.compare is None else np.broadcast_to(self.ev_as(s.compare, t.ty.dtype), t.ty.shape)[valid]
                if s.result is None:
                    atomic_update(view, where, s.atomic, v, cmp, t.ty.dtype)
                    return
                other = t.kwarg("other")
                fill = cast(self.ev(other), t.ty.dtype) if other is not None else lit(0, t.ty.dtype)
                olds = np.full(t.ty.shape, fill, dtype=NP_DTYPES[t.ty.dtype])
                olds[valid] = atomic_fetch(view, where, s.atomic, v, cmp, t.ty.dtype)
                self.env[s.result] = olds if t.ty.shape else olds[()]
                return
            if s.distinct:
                check_distinct(view, where, f"{s.span}: '{unparse(t)}'")
            if where[0].size:
                view[where] = v
            return
        view, src, dst, inside = self.window(t)
        if not inside:
            return
        v = self.ev_as(s.value, t.ty.dtype)
        shape = t.ty.shape
        if shape == ():
            if mask is None or mask:
                view[src] = v
            return
        v = np.broadcast_to(v, shape)
        view[src] = v[dst] if mask is None else np.where(mask[dst], v[dst], view[src])

    def mask(self, e: A.Index):
        """The `mask=` of a tensor subscript broadcast to its shape, or None."""
        m = e.kwarg("mask")
        return None if m is None else np.broadcast_to(self.ev_as(m, DType.BOOL), e.ty.shape)

    def s_for(self, s: A.For) -> None:
        start, stop, step = int(self.ev(s.start)), int(self.ev(s.stop)), int(self.ev(s.step))
        if step <= 0:
            raise InterpError(f"{s.span}: the loop step must be positive, got {step}")
        env, var = self.env, s.var
        for i in range(start, stop, step):
            env[var] = np.int32(i)
            self.block(s.body)

    def s_if(self, s: A.If) -> None:
        if bool(self.ev(s.cond)):
            self.block(s.then)
        else:
            self.block(s.orelse)

    # ---- leaves
    def e_name(self, n: A.Name):
        k = n.kind
        if k is A.NameKind.LOCAL or k is A.NameKind.LOOP_VAR:
            return self.env[n.id]
        if k is A.NameKind.SYMBOL:
            return self.symbols[n.id]
        if k is A.NameKind.SCALAR_PARAM:
            return self.scalars[n.id]
        if k is A.NameKind.TENSOR:
            return self.arrays[n.id]
        raise InterpError(f"internal error: unresolved name '{n.id}'")

    def e_lit(self, n):
        v = self.lits.get(id(n))
        if v is None:
            v = self.lits[id(n)] = lit(n.value, n.ty.dtype)
        return v

    # ---- operators
    def e_binop(self, e: A.BinOp):
        op = e.op
        if op is B.AND or op is B.OR:
            a = bool(self.ev(e.lhs))
            if (op is B.AND) != a:  # False and ..., True or ...
                return np.bool_(a)
            return np.bool_(bool(self.ev(e.rhs)))
        if op is B.MATMUL:
            a, b = self.ev_as(e.lhs, DType.F32), self.ev_as(e.rhs, DType.F32)
            return cast(np.matmul(a, b), e.ty.dtype)
        if op.is_compare:
            c = operand_dtype(e.lhs, e.rhs).compute
            return COMPARE[op](self.ev_as(e.lhs, c), self.ev_as(e.rhs, c))
        dt = e.ty.dtype
        c = dt.compute
        r = arith(op, self.ev_as(e.lhs, c), self.ev_as(e.rhs, c), c)
        return cast(r, dt)

    def e_unary(self, e: A.UnaryOp):
        if e.op is A.UnaryOpKind.NOT:
            return np.logical_not(self.ev(e.operand))
        dt = e.ty.dtype
        if e.op is A.UnaryOpKind.INVERT:
            return np.invert(self.ev_as(e.operand, dt))
        return cast(np.negative(self.ev_as(e.operand, dt.compute)), dt)

    def e_call(self, c: A.Call):
        f = c.func
        kind = FUNCTIONS[f].kind
        dt = c.ty.dtype
        if kind is K.MATH:
            x = self.ev_as(c.args[0], DType.F32)
            r = eval(MATH[f], MATH_ENV, {"x": x})  # noqa: S307 - fixed table of expressions
            return cast(np.asarray(r, dtype=np.float32)[()], dt)
        if kind is K.ABS:
            return cast(np.abs(self.ev_as(c.args[0], dt.compute)), dt)
        if kind is K.MINMAX and len(c.args) == 2:
            cd = dt.compute
            a, b = self.ev_as(c.args[0], cd), self.ev_as(c.args[1], cd)
            return cast(np.fmax(a, b) if f == "max" else np.fmin(a, b), dt)
        if kind in (K.MINMAX, K.REDUCE, K.ARGREDUCE):
            return self.reduce(c)
        if kind in (K.SCAN, K.SORT, K.TOPK):
            return run_scan(c, self.ev(c.args[0]))
        if kind is K.WHERE:
            cond = self.ev_as(c.args[0], DType.BOOL)
            a, b = self.ev_as(c.args[1], dt), self.ev_as(c.args[2], dt)
            return np.where(cond, a, b)[()]
        if kind is K.CTOR:
            shape = c.args[0].ty.shape
            if f == "zeros":
                return np.zeros(shape, NP_DTYPES[dt])
            return np.full(shape, self.ev_as(c.args[1], dt), NP_DTYPES[dt])
        if kind is K.ARANGE:
            start = self.ev_as(c.args[0], DType.I32)
            return (np.arange(c.ty.shape[0], dtype=np.int32) + start).astype(np.int32)
        if kind is K.AXIS:
            axis = int(self.ev(c.args[0]))
            return np.int32(self.pid[axis] if f == "program_id" else self.nprog[axis])
        if f == "cdiv":
            a, b = self.ev_as(c.args[0], dt), self.ev_as(c.args[1], dt)
            return cast(np.floor_divide(a + b - 1, b), dt)
        raise InterpError(f"internal error: the interpreter has no implementation of {f}()")

    def reduce(self, c: A.Call):
        f, dt = c.func, c.ty.dtype
        axis_e, keep_e = c.kwarg("axis"), c.kwarg("keepdims")
        axis = None if axis_e is None else int(axis_e.value)
        keep = bool(keep_e.value) if keep_e is not None else False
        x = self.ev(c.args[0])
        if f in ("argmax", "argmin"):
            x = cast(x, dtype_of(x).compute)
            r = argreduce(x, f, axis)
            if keep:
                r = np.expand_dims(r, axis) if axis is not None else np.reshape(r, (1,) * np.ndim(x))
            return r
        if f in ("max", "min"):
            src = dtype_of(x)
            return cast(reduce_minmax(cast(x, src.compute), f, axis, keep), dt)
        x = cast(x, dt)
        r = np.sum(x, axis=axis, keepdims=keep, dtype=NP_DTYPES[dt])
        if f == "mean":
            n = x.size if axis is None else x.shape[axis]
            r = r / np.asarray(n, dtype=NP_DTYPES[dt])
        return cast(np.asarray(r)[()], dt)

    def e_method(self, m: A.Method):
        if m.name == "to":
            return self.ev_as(m.obj, m.ty.dtype)
        raise InterpError(f"internal error: unknown method .{m.name}()")

    def e_attr(self, a: A.Attr):
        if a.name == "T":
            v = self.ev(a.obj)
            return np.swapaxes(v, -1, -2)
        raise InterpError(f"internal error: unknown attribute .{a.name}")

    # ---- tensor access
    def tensor_view(self, base: A.Expr) -> np.ndarray:
        """The array a tensor expression (a name or its transposed views) reads."""
        perm = base.ty.layout
        while isinstance(base, A.Attr):
            base = base.obj
        arr = self.arrays[base.id]
        if perm is not None and tuple(perm) != tuple(range(arr.ndim)):
            arr = arr.transpose(perm)
        return arr

    def window(self, e: A.Index):
        """(view, src, dst, inside) for a tensor subscript.

        `view[src]` is the in-bounds part of the subscript in the tensor and `dst` where it
        sits in the tile of shape `e.ty.shape`; `inside` is False when nothing is in bounds.
        """
        view = self.tensor_view(e.base)
        src, dst = [], []
        inside = True
        k = 0
        shape = e.ty.shape
        for axis, item in enumerate(e.items):
            dim = view.shape[axis]
            if isinstance(item, A.Slice):
                start = 0 if item.start is None else int(self.ev(item.start))
                ext = shape[k]
                k += 1
                lo, hi = max(start, 0), min(start + ext, dim)
                if hi <= lo:
                    inside = False
                    lo = hi = 0
                src.append(slice(lo, hi))
                dst.append(slice(lo - start, hi - start) if hi > lo else slice(0, 0))
            else:
                i = int(self.ev(item))
                if not 0 <= i < dim:
                    inside = False
                src.append(i)
        return view, tuple(src), tuple(dst), inside

    def gather(self, e: A.Index):
        """(view, index arrays, valid mask) of a tensor subscript, all shaped like the tile.

        Index tiles give the tile's first axis, slices the following ones (or all of them, without index
        tiles), scalars none; an element is valid when every one of its indices is inside the tensor.
        """
        view = self.tensor_view(e.base)
        shape = e.ty.shape
        rank = len(shape)
        idx, valid, k = [], np.ones(shape, dtype=bool), 1 if _gathers(e) else 0
        for axis, item in enumerate(e.items):
            dim = view.shape[axis]
            if isinstance(item, A.Slice):
                start = 0 if item.start is None else int(self.ev(item.start))
                v = (start + np.arange(shape[k], dtype=np.int64)).reshape((1,) * k + (shape[k],) + (1,) * (rank - k - 1))
                k += 1
            elif item.ty.shape:
                v = np.asarray(self.ev(item), dtype=np.int64).reshape((shape[0],) + (1,) * (rank - 1))
            else:
                v = np.int64(int(self.ev(item)))
            v = np.broadcast_to(v, shape)
            valid &= (v >= 0) & (v < dim)
            idx.append(np.clip(v, 0, max(dim - 1, 0)))
        return view, tuple(idx), valid

    def e_index(self, e: A.Index):
        base = e.base
        if base.ty.what != TyWhat.TENSOR:
            v = self.ev(base)
            idx = tuple(None if isinstance(i, A.NewAxis) else slice(None) for i in e.items)
            return np.asarray(v)[idx]
        mask = self.mask(e)
        if _gathers(e):
            view, idx, valid = self.gather(e)
            if mask is not None:
                valid = valid & mask
            other = e.kwarg("other")
            fill = cast(self.ev(other), e.ty.dtype) if other is not None else lit(0, e.ty.dtype)
            out = np.full(e.ty.shape, fill, dtype=NP_DTYPES[e.ty.dtype])
            if valid.any():
                out[valid] = view[tuple(i[valid] for i in idx)]
            return out
        view, src, dst, inside = self.window(e)
        shape = e.ty.shape
        if inside and mask is None and all(d.start == 0 and d.stop == n for d, n in zip(dst, shape)):
            return np.array(view[src])[()]  # a copy: later stores must not change the tile
        other = e.kwarg("other")
        dt = e.ty.dtype
        fill = cast(self.ev(other), dt) if other is not None else lit(0, dt)
        if shape == ():
            return np.array(view[src])[()] if inside and mask else fill
        out = np.full(shape, fill, dtype=NP_DTYPES[dt])
        if inside:
            out[dst] = view[src] if mask is None else np.where(mask[dst], view[src], fill)
        return out


def _gathers(e: A.Index) -> bool:
    """True if a tensor subscript has index tiles (a gather, or a scatter when stored to)."""
    return any(not isinstance(i, (A.Slice, A.NewAxis)) and i.ty.shape for i in e.items)


# ---------------------------------------------------------------- entry points
@deep
def run_kernel(kernel: A.Kernel, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, Any],
               symbols: Mapping[str, int]) -> None:
    """Execute every program instance of `kernel`'s grid, writing outputs into `arrays` in place.

    `arrays` maps tensor parameter names to NumPy arrays, `scalars` scalar parameter names
    to Python/NumPy values (missing ones take their declared default), `symbols` shape
    symbols to sizes. No argument checks are made here; `launch` makes them.
    """
    for p in kernel.params:
        a = arrays.get(p.name)
        if p.is_out and isinstance(a, np.ndarray) and not a.flags.writeable:
            raise LaunchError(f"argument '{p.name}': an output ({p.type.dtype} tensor) must be writable, got a "
                              "read-only NumPy array; pass a writable copy (numpy.array(x))")
    interp = _Interp(kernel, arrays, scalars, symbols)
    with np.errstate(all="ignore"):
        interp.run()


@deep
def launch(program: A.Program, kernel_name: str, *args, **kwargs) -> None:
    """Bind and check NumPy arrays / Python scalars like a GPU launch, then run the kernel.

    Raises LaunchError for bad arguments (dtype, shape, inconsistent symbols, failed
    `where` constraints). Output tensors are written in place.
    """
    from .launchspec import make_spec
    from .runtime.args import bind_arguments

    kernel = program.kernel(kernel_name)
    bound = bind_arguments(make_spec(kernel, program.source), args, kwargs, allow_numpy=True)
    if bound.empty:
        return
    run_kernel(kernel, bound.arrays, bound.scalars, bound.symbols)

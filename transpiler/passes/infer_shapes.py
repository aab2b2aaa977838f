"""Pass 3, infer_shapes: give every value a shape and check that shapes agree.

Needs: infer_dtypes. Guarantees: every value's `ty.shape` is a tuple of ints (`()` for a
scalar); tensors keep their symbolic dims (`('M', 'N')`) and a transposed view records
its permutation in `ty.layout`; slice extents are proven constant (`c : c + BLOCK` has
extent BLOCK) and tile dims are powers of two; operands broadcast (NumPy rules); `@`
takes [m, k] @ [k, n]; reductions drop (or keep) their axis; stores match the target;
loop-carried and branch values keep one shape; conditions, bounds and indices are scalars.
"""
from __future__ import annotations

from dataclasses import replace

from .. import ast as A
from ..builtins import FUNCTIONS, BuiltinKind as K
from .scan_rules import scan_shape
from ..exprs import affine, const_int, unparse
from ..types import TyWhat, numel
from .base import Rewriter, fail
from .scatter import check_scatter, index_tiles

MAX_TILE_ELEMS = 1 << 16


def infer_shapes(program: A.Program) -> A.Program:
    return replace(program, kernels=tuple(_Shapes(k).run() for k in program.kernels))


def show(shape) -> str:
    return "scalar" if shape == () else "[" + ", ".join(str(d) for d in shape) + "]"


def broadcast(a: tuple, b: tuple) -> tuple | None:
    """NumPy broadcasting of two static shapes; None if they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            return None
        out.append(max(x, y) if x != 1 else y)
    return tuple(reversed(out))


def _check_tile(shape: tuple, what: str) -> tuple:
    for d in shape:
        if d <= 0 or d & (d - 1):
            fail(f"{what} has shape {show(shape)}: tile dimensions must be powers of two",
                 "round up to a power of two; the valid region masks the rest")
    if numel(shape) > MAX_TILE_ELEMS:
        fail(f"{what} has {numel(shape)} elements, more than the {MAX_TILE_ELEMS} a tile may hold")
    return shape


def _with(e, shape, **kw):
    return replace(e, ty=replace(e.ty, shape=shape, **kw))


class _Shapes(Rewriter):
    def __init__(self, k: A.Kernel):
        self.k = k
        self.env: dict[str, tuple[tuple, int]] = {}
        self.tensors = {p.name: p for p in k.params if p.type.dims is not None}

    def run(self) -> A.Kernel:
        k = self.k
        from .infer_dtypes import _at

        where = tuple(_at(e, lambda e=e: self._scalar(self.visit(e), "a where constraint")) for e in k.where)
        grid = tuple(_at(e, lambda e=e: self._scalar(self.visit(e), "a grid dimension")) for e in k.grid)
        return replace(k, where=where, grid=grid, body=self.visit(k.body))

    def _scalar(self, e: A.Expr, what: str) -> A.Expr:
        if e.ty.shape != ():
            fail(f"{what} must be a scalar, got a tile of shape {show(e.ty.shape)}")
        return e

    def _const(self, e: A.Expr, what: str) -> int:
        v = const_int(e)
        if v is None:
            fail(f"{what} must be a compile-time constant, got '{unparse(e)}'")
        return v

    # ---- leaves
    def visit_Name(self, n):
        if n.kind is A.NameKind.TENSOR:
            dims = tuple(d.value if isinstance(d, A.IntLit) else d.id for d in self.tensors[n.id].type.dims)
            return _with(n, dims)
        if n.kind is A.NameKind.LOCAL:
            return _with(n, self.env[n.id][0])
        return _with(n, ())

    def _leaf(self, n):
        return _with(n, ())

    visit_IntLit = visit_FloatLit = visit_BoolLit = _leaf

    def visit_DTypeLit(self, n):
        return n

    def visit_TileTypeExpr(self, t):
        dims = tuple(self.visit(d) for d in t.dims)
        shape = tuple(self._const(d, "a tile dimension") for d in dims)
        _check_tile(shape, f"tile type {unparse(t)}")
        return _with(replace(t, dims=dims), shape)

    # ---- operators
    def visit_BinOp(self, e):
        lhs, rhs = self.visit(e.lhs), self.visit(e.rhs)
        a, b = lhs.ty.shape, rhs.ty.shape
        e = replace(e, lhs=lhs, rhs=rhs)
        if e.op is A.BinOpKind.MATMUL:
            if len(a) != 2 or len(b) != 2:
                fail(f"@ multiplies 2-D tiles, got {show(a)} @ {show(b)}")
            if a[1] != b[0]:
                fail(f"@ inner dimensions differ: {show(a)} @ {show(b)} ({a[1]} != {b[0]})")
            return _with(e, (a[0], b[1]))
        if e.op.is_logical:
            self._scalar(lhs, f"an operand of '{e.op.value}'")
            self._scalar(rhs, f"an operand of '{e.op.value}'")
        out = broadcast(a, b)
        if out is None:
            fail(f"shapes {show(a)} and {show(b)} do not broadcast for '{e.op.value}'",
                 "add an axis with t[:, None] or t[None, :] to broadcast along rows or columns")
        return _with(e, out)

    def visit_UnaryOp(self, e):
        x = self.visit(e.operand)
        return _with(replace(e, operand=x), x.ty.shape)

    def visit_Call(self, c):
        args = tuple(self.visit(a) for a in c.args)
        kwargs = tuple((k, self.visit(v)) for k, v in c.kwargs)
        c = replace(c, args=args, kwargs=kwargs)
        kind = FUNCTIONS[c.func].kind
        shapes = [a.ty.shape for a in args]
        if kind in (K.MATH, K.ABS):
            return _with(c, shapes[0])
        if kind in (K.MINMAX, K.WHERE) and len(args) >= 2:
            out = shapes[0]
            for s in shapes[1:]:
                out = broadcast(out, s) if out is not None else None
            if out is None:
                fail(f"shapes {', '.join(show(s) for s in shapes)} do not broadcast in {c.func}()")
            return _with(c, out)
        if kind in (K.MINMAX, K.REDUCE, K.ARGREDUCE):
            return self._reduce(c, shapes[0])
        if kind in (K.SCAN, K.SORT, K.TOPK):
            return _with(*scan_shape(c, shapes, self._const))
        if kind is K.CTOR:
            if c.func == "full":
                self._scalar(args[1], "the fill value of full()")
            return _with(c, args[0].ty.shape)
        if kind is K.ARANGE:
            n = const_int(A.BinOp(A.BinOpKind.SUB, args[1], args[0]))
            if n is None or n <= 0:
                fail(f"arange(start, stop) needs stop - start to be a positive compile-time constant, got '{unparse(args[1])} - {unparse(args[0])}'")
            return _with(c, _check_tile((n,), "arange()"))
        if kind is K.AXIS:
            axis = self._const(args[0], f"the axis of {c.func}()")
            if not 0 <= axis < len(self.k.grid):
                fail(f"{c.func}({axis}): the grid has {len(self.k.grid)} dimension{'s' if len(self.k.grid) > 1 else ''}")
            if not isinstance(args[0], A.IntLit):  # a constant expression: later passes read the axis as a literal
                c = replace(c, args=(A.IntLit(axis, span=args[0].span, ty=args[0].ty),))
            return _with(c, ())
        for a in args:
            self._scalar(a, f"an argument of {c.func}()")
        return _with(c, ())

    def _reduce(self, c, shape):
        if shape == ():
            fail(f"{c.func}() of a scalar: reduce a tile, or pass two values for the elementwise {c.func}")
        axis_e, keep_e = c.kwarg("axis"), c.kwarg("keepdims")
        keep = False
        if keep_e is not None:
            if not isinstance(keep_e, A.BoolLit):
                fail("keepdims must be True or False")
            keep = keep_e.value
        if axis_e is None:
            return _with(c, tuple(1 for _ in shape) if keep else ())
        axis = self._const(axis_e, f"the axis of {c.func}()")
        if not -len(shape) <= axis < len(shape):
            fail(f"axis {axis} is out of range for a tile of shape {show(shape)}")
        axis %= len(shape)
        out = tuple(1 if i == axis else d for i, d in enumerate(shape)) if keep else shape[:axis] + shape[axis + 1:]
        kwargs = tuple((k, replace(v, value=axis) if k == "axis" else v) for k, v in c.kwargs)
        return _with(replace(c, kwargs=kwargs), out)

    def visit_Method(self, m):
        obj = self.visit(m.obj)
        return _with(replace(m, obj=obj, args=tuple(self.visit(a) for a in m.args)), obj.ty.shape)

    def visit_Attr(self, a):
        obj = self.visit(a.obj)
        shape = obj.ty.shape
        if len(shape) != 2:
            fail(f".T transposes 2-D tiles and tensors, got shape {show(shape)}")
        perm = (1, 0)
        if obj.ty.what == TyWhat.TENSOR and obj.ty.layout is not None:
            perm = tuple(obj.ty.layout[i] for i in perm)
        return _with(replace(a, obj=obj), (shape[1], shape[0]), layout=perm if obj.ty.what == TyWhat.TENSOR else None)

    def visit_Index(self, e):
        base = self.visit(e.base)
        items = tuple(self.visit(i) for i in e.items)
        kwargs = tuple((k, self.visit(v) if k == "mask" else self._scalar(self.visit(v), f"{k}=")) for k, v in e.kwargs)
        e = replace(e, base=base, items=items, kwargs=kwargs)
        if base.ty.what == TyWhat.TENSOR:
            e = self._tensor_index(e, base.ty.shape)
            mask = e.kwarg("mask")
            if mask is not None and broadcast(mask.ty.shape, e.ty.shape) != e.ty.shape:
                fail(f"mask= of shape {show(mask.ty.shape)} does not broadcast to the subscript's shape {show(e.ty.shape)}",
                     "the mask is a bool tile (or scalar) that broadcasts to the tile like an operand")
            return e
        return self._tile_index(e, base.ty.shape)

    def _tensor_index(self, e, dims):
        real = [i for i in e.items if not isinstance(i, A.NewAxis)]
        if len(real) != len(dims):
            fail(f"'{unparse(e.base)}' has {len(dims)} dimension{'s' if len(dims) != 1 else ''} "
                 f"{show(dims)} but is indexed with {len(real)}")
        if len(real) != len(e.items):
            fail("None (new axis) applies to tiles, not to tensor reads; index the tile afterwards")
        shape = []
        gather = None  # length of the index tiles (a gather/scatter through them)
        for axis, (item, dim) in enumerate(zip(e.items, dims)):
            if not isinstance(item, A.Slice) and item.ty.shape:
                if len(item.ty.shape) != 1:
                    fail(f"index {axis} of '{unparse(e.base)}' is a tile of shape {show(item.ty.shape)}; "
                         f"an index tile must be 1-D (one row of the result per element)")
                if shape:
                    fail("index tiles must come before the slices (the gathered axis is the tile's first)",
                         f"write {unparse(e.base)}[rows, ..., a : b] rather than putting ':' ranges first")
                if gather is not None and gather != item.ty.shape[0]:
                    fail(f"index tiles of '{unparse(e.base)}' must have one length, got {gather} and {item.ty.shape[0]}")
                gather = item.ty.shape[0]
                continue
            if isinstance(item, A.Slice):
                if item.start is None and item.stop is None:
                    if not isinstance(dim, int):
                        fail(f"':' along axis {axis} would take all of '{dim}', which is not a compile-time size",
                             "slice a tile: start : start + BLOCK")
                    shape.append(dim)
                    continue
                if item.start is None or item.stop is None:
                    fail("a slice needs both bounds: start : start + SIZE")
                n = const_int(A.BinOp(A.BinOpKind.SUB, item.stop, item.start))
                if n is None:
                    fail(f"the extent of slice '{unparse(item)}' must be a compile-time constant",
                         f"write it as start : start + SIZE; here stop - start is '{_diff(item)}'")
                if n <= 0:
                    fail(f"slice '{unparse(item)}' is empty (extent {n})")
                shape.append(n)
            else:
                self._scalar(item, f"index {axis} of '{unparse(e.base)}'")
        shape = tuple(shape) if gather is None else (gather, *shape)
        if shape:
            _check_tile(shape, f"the tile read from '{unparse(e.base)}'")
        return _with(e, shape)

    def _tile_index(self, e, shape):
        if e.kwargs:
            fail("other= applies to reads of a tensor")
        if shape == ():
            fail("a scalar cannot be indexed; use full(f32[N], v) to make a tile of it")
        out, axis = [], 0
        for item in e.items:
            if isinstance(item, A.NewAxis):
                out.append(1)
            elif isinstance(item, A.Slice) and item.start is None and item.stop is None:
                if axis >= len(shape):
                    fail(f"too many ':' for a tile of shape {show(shape)}")
                out.append(shape[axis])
                axis += 1
            else:
                fail("a tile can be indexed only with ':' and None (to add an axis); "
                     "read smaller tiles from the tensor instead")
        if axis != len(shape):
            fail(f"a tile of shape {show(shape)} needs {len(shape)} ':' in its subscript, got {axis}")
        return _with(e, tuple(out))

    def visit_Slice(self, s):
        return replace(s, start=self.visit(s.start), stop=self.visit(s.stop))

    def visit_NewAxis(self, n):
        return n

    # ---- statements
    def visit_Assign(self, s):
        value = self.visit(s.value)
        shape = value.ty.shape
        if s.name in self.env:
            old, line = self.env[s.name]
            if old != shape:
                if broadcast(shape, old) == old:  # a scalar or broadcastable value fills the tile
                    pass
                else:
                    fail(f"'{s.name}' has shape {show(old)} (from line {line}) but is assigned shape {show(shape)} here",
                         "a variable keeps one shape")
        else:
            self.env[s.name] = (shape, s.span.line)
        return replace(s, value=value)

    def visit_Store(self, s):
        target, value, compare = self.visit(s.target), self.visit(s.value), self.visit(s.compare)
        for v in (value, compare):
            if v is not None and broadcast(v.ty.shape, target.ty.shape) != target.ty.shape:
                fail(f"cannot store a value of shape {show(v.ty.shape)} into '{unparse(target)}' of shape {show(target.ty.shape)}")
        s = replace(s, target=target, value=value, compare=compare)
        check_scatter(s)
        if s.result is not None:
            self._atomic_result(s)
        return s

    def _atomic_result(self, s):
        """`old = atomic_OP(t[...], ...)`: old has the subscript's shape; an atomic that may skip elements on
        purpose (mask=, index tiles) says what their old value reads (other=)."""
        t = s.target
        skips = "mask=" if t.kwarg("mask") is not None else "an index tile" if index_tiles(t) else None
        if skips and t.kwarg("other") is None:
            fail(f"'{s.result}' would hold old values of elements that atomic_{s.atomic}() skips ({skips}: masked "
                 f"off, or outside '{unparse(t.base)}'), which have none",
                 f"say what they read: {unparse(A.Index(t.base, t.items, t.kwargs + (('other', A.IntLit(-1) if t.ty.dtype.is_int else A.FloatLit(-1.0)),)))} "
                 "(a value no real old value takes, to tell them apart)")
        shape = t.ty.shape
        if s.result in self.env:
            old, line = self.env[s.result]
            if old != shape:
                fail(f"'{s.result}' has shape {show(old)} (from line {line}) but is assigned the old values of "
                     f"'{unparse(t)}', shape {show(shape)}, here", "a variable keeps one shape")
        else:
            self.env[s.result] = (shape, s.span.line)

    def visit_For(self, s):
        start, stop, step = (self._scalar(self.visit(x), "a loop bound") for x in (s.start, s.stop, s.step))
        step_v = const_int(step)
        if step_v is not None and step_v <= 0:
            fail(f"the loop step must be positive, got {step_v}")
        return replace(s, start=start, stop=stop, step=step, body=self.visit(s.body))

    def visit_If(self, s):
        cond = self._scalar(self.visit(s.cond), "an if condition (use where() to select between tiles)")
        return replace(s, cond=cond, then=self.visit(s.then), orelse=self.visit(s.orelse))


def _diff(s: A.Slice) -> str:
    a = affine(A.BinOp(A.BinOpKind.SUB, s.stop, s.start))
    parts = [f"{'-' if v < 0 else '+'} {abs(v) if abs(v) != 1 else ''}{k}".replace("  ", " ") for k, v in a.terms]
    if a.const:
        parts.append(f"{'-' if a.const < 0 else '+'} {abs(a.const)}")
    text = " ".join(parts).lstrip("+ ")
    return text or "0"

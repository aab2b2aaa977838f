"""Stores through index tiles: a scatter that may write one element twice is an error, not a silent race.

`t[ids, ...] = v` and `t[ids, ...] += v` through index tiles whose elements can repeat would let one
program's duplicate writes race (one lands, unspecified which; an update keeps one of its increments).
infer_shapes calls `check_scatter` on every store: it passes atomics (every update is kept), subscripts
marked `distinct = True` (the interpreter checks the claim at run time) and index tiles that are
injective by construction (`arange(a, b)`, shifted or scaled by a nonzero constant), and reports the
rest with the atomic or the marker to write instead.
"""
from __future__ import annotations

from .. import ast as A
from ..builtins import ATOMIC_FOR_UPDATE
from ..exprs import const_int, unparse
from ..types import DType
from .base import fail

B = A.BinOpKind


def index_tiles(target: A.Index) -> tuple[A.Expr, ...]:
    """The index tiles (1-D integer tiles) of a tensor subscript: a gather, or a scatter when stored to."""
    return tuple(i for i in target.items if not isinstance(i, (A.Slice, A.NewAxis)) and i.ty is not None and i.ty.shape)


def injective(e: A.Expr) -> bool:
    """True if the 1-D index tile `e` never holds one value twice: an arange, plus or minus a scalar, times
    a nonzero integer constant, or widened to i64."""
    if isinstance(e, A.Call) and e.func == "arange":
        return True
    if isinstance(e, A.Method) and e.name == "to":
        return e.ty.dtype is DType.I64 and e.obj.ty.dtype is DType.I32 and injective(e.obj)
    if isinstance(e, A.BinOp) and e.op in (B.ADD, B.SUB):
        if not e.rhs.ty.shape:
            return injective(e.lhs)
        return not e.lhs.ty.shape and injective(e.rhs)
    if isinstance(e, A.BinOp) and e.op is B.MUL:
        for tile, k in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
            c = const_int(k) if not k.ty.shape else None
            if c and tile.ty.shape:
                return injective(tile)
    return False


def check_scatter(s: A.Store) -> None:
    """Fail if `s` stores through index tiles that may repeat without an atomic or a `distinct` marker."""
    tiles = index_tiles(s.target)
    if s.distinct and not tiles:
        fail("distinct = True marks the index tiles of a scatter, and this subscript has none",
             "remove it: a subscript of scalars and slices writes each element once")
    if not tiles or s.atomic is not None or s.distinct or any(injective(t) for t in tiles):
        return
    t = s.target
    names = " and ".join(f"'{unparse(i)}'" for i in tiles)
    marked = unparse(A.Index(t.base, t.items, t.kwargs + (("distinct", A.BoolLit(True)),)))
    if s.updates:
        op = s.value.op.value if isinstance(s.value, A.BinOp) else s.value.func
        operand = s.value.rhs if isinstance(s.value, A.BinOp) else s.value.args[1]
        atomic = ATOMIC_FOR_UPDATE.get(op)
        if atomic is None:
            first = f"no atomic does '{op}=': compute the values first, then store them with distinct indices"
        else:
            v = unparse(operand)
            first = f"write {atomic}({unparse(t)}, {('-' + _paren(v)) if op == '-' else v}), which keeps every update"
        fail(f"'{unparse(t)} {op}= ...' updates through the index tile {names}: when indices repeat, one "
             f"element is updated several times at once and only one of the updates is kept",
             first, f"or, if the indices never repeat, mark the subscript: {marked} {op}= ... "
             "(the interpreter checks it at run time)")
    fail(f"the store to '{unparse(t)}' goes through the index tile {names}: when indices repeat, one element is "
         "written several times at once and which write lands is unspecified",
         f"if the indices never repeat, mark the subscript: {marked} = ... (the interpreter checks it at run time)",
         f"to keep one of the colliding writes on purpose, write atomic_xchg({unparse(t)}, value)")


def _paren(text: str) -> str:
    return text if text.replace("_", "").replace(".", "").isalnum() else f"({text})"

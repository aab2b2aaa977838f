"""The pass rules of scans, sorts and top-k (cumsum, cummax, cummin, sort, argsort, topk, argtopk).

infer_dtypes calls `scan_dtype`, infer_shapes `scan_shape` (which writes `axis=` and top-k's K as literals,
so later passes read them with `builtins.scan_args`), assign_layouts `scan_layout`: a scan or sort is
computed in its operand's layout (an exchange network over the axis's coordinate bits, layout_bits.py),
with shared memory for the bits held by other warps; a top-k's result is read out of the sorted tile
through shared memory at the layout its consumer wants.
"""
from __future__ import annotations

from dataclasses import replace

from .. import ast as A
from ..builtins import FUNCTIONS, BuiltinKind as K, scan_args
from ..exprs import const_int, unparse
from ..layout_bits import axis_bits
from ..types import DType, MemSpace, Ty, TyWhat, numel
from .base import fail


def scan_dtype(c: A.Call, args) -> DType:
    """The result dtype of a scan, sort or top-k call (its arguments typed); errors for misuse."""
    kind = FUNCTIONS[c.func].kind
    x = args[0]
    dt = x.ty.dtype
    for name, v in c.kwargs:
        if name in ("exclusive", "descending") and not isinstance(v, A.BoolLit):
            fail(f"{name}= of {c.func}() must be True or False, got '{unparse(v)}'")
    if kind is K.TOPK and not args[1].ty.dtype.is_int:
        fail(f"the K of {c.func}(t, K) must be an integer, got {args[1].ty.dtype}")
    if c.func == "cumsum":
        if dt.is_float:
            return DType.F64 if dt is DType.F64 else DType.F32
        return DType.I64 if dt is DType.I64 else DType.I32
    if dt is DType.BOOL:
        fail(f"{c.func}() of a bool tile: convert it first, e.g. t.to(i32)")
    return DType.I32 if c.func in ("argsort", "argtopk") else dt


def scan_shape(c: A.Call, shapes, const) -> tuple[A.Call, tuple]:
    """(the call with `axis=` and K as literals, its result shape); `const(e, what)` reads a constant."""
    shape = shapes[0]
    if shape == ():
        fail(f"{c.func}() of a scalar: it works along an axis of a tile")
    axis_e = c.kwarg("axis")
    axis = -1 if axis_e is None else const(axis_e, f"the axis of {c.func}()")
    if not -len(shape) <= axis < len(shape):
        fail(f"axis {axis} is out of range for a tile of shape [{', '.join(map(str, shape))}]")
    axis %= len(shape)
    span = axis_e.span if axis_e is not None else c.span
    lit = A.IntLit(axis, span=span, ty=Ty(TyWhat.VALUE, DType.I32, ()))
    kwargs = tuple((k, lit if k == "axis" else v) for k, v in c.kwargs)
    if axis_e is None:
        kwargs += (("axis", lit),)
    args = c.args
    out = shape
    if FUNCTIONS[c.func].kind is K.TOPK:
        kk = const_int(args[1])
        n = shape[axis]
        if kk is None:
            fail(f"the K of {c.func}(t, K) must be a compile-time constant, got '{unparse(args[1])}'")
        if not 1 <= kk <= n or kk & (kk - 1):
            fail(f"{c.func}(t, {kk}): K must be a power of two from 1 to the axis's extent {n}",
                 "take a power-of-two K and slice the result when you store it")
        args = (args[0], A.IntLit(kk, span=args[1].span, ty=replace(args[1].ty, shape=())))
        out = shape[:axis] + (kk,) + shape[axis + 1:]
    return replace(c, args=args, kwargs=kwargs), out


def scan_layout(la, e: A.Call, want):
    """assign_layouts' rule (`la` the LayoutAssigner): the operand in its own layout; a scan or sort's result
    in it too, a top-k's at `want` (or the canonical layout); the shared memory each needs."""
    x = la.assign(e.args[0])
    sa = scan_args(e)
    have = x.ty.layout
    try:
        bits = axis_bits(have, sa.axis)
    except ValueError as why:
        fail(f"{e.func}() along axis {sa.axis}: the operand's register layout cannot be scanned ({why})")
    kind = FUNCTIONS[e.func].kind
    vdt = (x.ty.dtype if kind is not K.SCAN else e.ty.dtype).compute
    per = max(4, vdt.itemsize) + (4 if kind is not K.SCAN else 0)  # values (and i32 positions) in registers
    if any(b.where == "warp" for b in bits):
        la.need(f"exchanging {e.func}() values between warps", la.T * have.slots * per, e)
    if kind is K.TOPK:
        layout = want or la.canon(e.ty.shape)
        la.need(f"reading the first {sa.k} of {e.func}() out of the sorted tile", numel(x.ty.shape) * per, e)
    else:
        layout = have
        la.convert_if_needed(e, have, want)
    kwargs = tuple((k, la.assign(v)) for k, v in e.kwargs)
    args = (x,) + tuple(la.assign(a) for a in e.args[1:])
    return replace(e, args=args, kwargs=kwargs, ty=replace(e.ty, space=MemSpace.REGISTERS, layout=layout))

"""Rematerialization: a tile variable whose value is a pure function of its coordinates (an arange, literals, scalars
that never change, elementwise operators over them) is recomputed in the layout a use wants instead of being
converted there through shared memory (two barriers and a round trip a use; the generated kernels' row offsets
`g = (rows // p) % d * s` read `rows` in another layout than its own, once per term)."""
from __future__ import annotations

from .. import ast as A
from ..builtins import FUNCTIONS, BuiltinKind as K

_ELEMENTWISE = {K.MATH, K.ABS, K.MINMAX, K.WHERE}


def unstable_names(k: A.Kernel) -> set[str]:
    """Names a recomputation may not read: assigned more than once (augmented assignments count), a loop's
    variable, or assigned inside a loop or an `if` (a value that changes per iteration, which a streamed loop's
    copies of later iterations would read at the wrong one). Only top-level single assignments stay."""
    counts: dict[str, int] = {}
    nested: set[str] = set()

    def walk(b: A.Block, inner: bool) -> None:
        for s in b.stmts:
            if isinstance(s, A.Assign):
                counts[s.name] = counts.get(s.name, 0) + (2 if s.op is not None else 1)
                if inner:
                    nested.add(s.name)
            elif isinstance(s, A.For):
                nested.add(s.var)
                walk(s.body, True)
            elif isinstance(s, A.If):
                walk(s.then, True)
                if s.orelse is not None:
                    walk(s.orelse, True)
            elif isinstance(s, A.Store) and s.result is not None:
                counts[s.result] = counts.get(s.result, 0) + 2
    walk(k.body, False)
    return {n for n, c in counts.items() if c > 1} | nested


def pure(e: A.Expr, unstable: set[str], tiles: dict) -> bool:
    """Whether `e` can be recomputed at any later point with the same value in any layout: built from literals,
    aranges, program_id / num_programs, stable scalar names, the pure tile variables in `tiles`, and elementwise
    operators."""
    if isinstance(e, (A.IntLit, A.FloatLit, A.BoolLit)):
        return True
    if isinstance(e, A.Name):
        if e.ty is not None and e.ty.shape:
            return e.id in tiles
        return e.id not in unstable
    if isinstance(e, A.BinOp):
        return e.op is not A.BinOpKind.MATMUL and pure(e.lhs, unstable, tiles) and pure(e.rhs, unstable, tiles)
    if isinstance(e, A.UnaryOp):
        return pure(e.operand, unstable, tiles)
    if isinstance(e, A.Call):
        b = FUNCTIONS.get(e.func)
        if b is None or e.kwargs:
            return False
        if b.kind is K.MINMAX and len(e.args) == 1:  # a reduction
            return False
        if b.kind in _ELEMENTWISE or b.kind in (K.ARANGE, K.AXIS, K.SCALAR):
            return all(pure(a, unstable, tiles) for a in e.args)
    return False

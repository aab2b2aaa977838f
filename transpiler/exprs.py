"""Small algebra over scalar expressions: printing, affine forms, constant folding.

Used to prove tile extents constant (`c : c + BLOCK` has extent BLOCK), to render
grid and constraint expressions for Python and C++, and for error messages.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import ast as A

_PREC = {
    "or": 1, "and": 2, "not": 3, "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4,
    "|": 5, "^": 5.5, "&": 6, "<<": 6.5, ">>": 6.5, "+": 7, "-": 7, "*": 8, "/": 8, "//": 8, "%": 8, "@": 8, "neg": 9, "**": 10,
}


def unparse(e: A.Expr | None) -> str:
    """Source-like text of an expression (for messages and for cache keys)."""
    return _unparse(e, 0)


def unparse_stmt(s: A.Stmt) -> str:
    """Source-like text of a statement's head (an assignment, store, loop header or condition)."""
    if isinstance(s, A.Assign):
        return f"{s.name} {'=' if s.op is None else f'{s.op.value}='} {unparse(s.value)}"
    if isinstance(s, A.Store) and s.atomic is not None:
        args = [s.target] + ([s.compare] if s.compare is not None else []) + [s.value]
        call = f"atomic_{s.atomic}({', '.join(unparse(a) for a in args)})"
        return call if s.result is None else f"{s.result} = {call}"
    if isinstance(s, A.Store):
        return f"{unparse(s.target)} {'=' if s.op is None else f'{s.op.value}='} {unparse(s.value)}"
    if isinstance(s, A.For):
        bounds = f"{unparse(s.start)}, {unparse(s.stop)}, {unparse(s.step)}"
        if s.pipelined or s.stages > 1:
            return f"for {s.var} in pipeline({bounds}, stages = {s.stages})"
        return f"for {s.var} in range({bounds})"
    if isinstance(s, A.If):
        return f"if {unparse(s.cond)}"
    if isinstance(s, A.MultiAssign):  # the fn statements (before inline_functions)
        return f"{', '.join(s.names)} = {unparse(s.value)}"
    if isinstance(s, A.CallStmt):
        return unparse(s.call)
    if isinstance(s, A.Fence):
        return "fence()"
    if isinstance(s, A.Return):
        return "return " + ", ".join(unparse(v) for v in s.values)
    return f"<{type(s).__name__}>"


def untransposed(e: A.Expr) -> A.Expr:
    """`t` for the view `t.T`, else `e` itself (a product's right operand names the tile it reads)."""
    return e.obj if isinstance(e, A.Attr) and e.name == "T" else e


def mentions(e: A.Expr | None, name: str) -> bool:
    """True if the variable `name` occurs anywhere in `e`."""
    if e is None:
        return False
    if isinstance(e, A.Name):
        return e.id == name
    return any(mentions(c, name) for c in e.children() if isinstance(c, A.Expr))


def _unparse(e, ctx: int) -> str:
    if e is None:
        return ""
    if isinstance(e, A.Name):
        return e.id
    if isinstance(e, A.IntLit):
        return str(e.value)
    if isinstance(e, A.FloatLit):
        if math.isinf(e.value):
            return "inf" if e.value > 0 else "-inf"
        return repr(e.value)
    if isinstance(e, A.BoolLit):
        return "True" if e.value else "False"
    if isinstance(e, A.DTypeLit):
        return e.dtype
    if isinstance(e, A.TileTypeExpr):
        return f"{e.dtype}[{', '.join(unparse(d) for d in e.dims)}]"
    if isinstance(e, A.BinOp):
        op = e.op.value
        if e.op in (A.BinOpKind.MAX, A.BinOpKind.MIN):
            return f"{op}({unparse(e.lhs)}, {unparse(e.rhs)})"
        p = _PREC[op]
        s = f"{_unparse(e.lhs, p)} {op} {_unparse(e.rhs, p + 1)}"
        return f"({s})" if p < ctx else s
    if isinstance(e, A.UnaryOp):
        if e.op is A.UnaryOpKind.NOT:
            s = f"not {_unparse(e.operand, 3)}"
            return f"({s})" if 3 < ctx else s
        return f"{'~' if e.op is A.UnaryOpKind.INVERT else '-'}{_unparse(e.operand, 9)}"
    if isinstance(e, A.Call):
        parts = [unparse(a) for a in e.args] + [f"{k}={unparse(v)}" for k, v in e.kwargs]
        return f"{e.func}({', '.join(parts)})"
    if isinstance(e, A.Method):
        parts = [unparse(a) for a in e.args] + [f"{k}={unparse(v)}" for k, v in e.kwargs]
        return f"{_unparse(e.obj, 11)}.{e.name}({', '.join(parts)})"
    if isinstance(e, A.Attr):
        return f"{_unparse(e.obj, 11)}.{e.name}"
    if isinstance(e, A.Slice):
        return f"{unparse(e.start)} : {unparse(e.stop)}".strip() if (e.start or e.stop) else ":"
    if isinstance(e, A.NewAxis):
        return "None"
    if isinstance(e, A.Index):
        parts = [unparse(i) for i in e.items] + [f"{k}={unparse(v)}" for k, v in e.kwargs]
        return f"{_unparse(e.base, 11)}[{', '.join(parts)}]"
    return f"<{type(e).__name__}>"


# ---------------------------------------------------------------- affine forms
@dataclass(frozen=True)
class Affine:
    """sum(coeff * term) + const, terms being opaque sub-expressions keyed by their text."""

    terms: tuple[tuple[str, int], ...]
    const: int

    @property
    def is_const(self) -> bool:
        return not self.terms

    def __add__(self, o: "Affine") -> "Affine":
        d = dict(self.terms)
        for k, v in o.terms:
            d[k] = d.get(k, 0) + v
        return Affine(tuple(sorted((k, v) for k, v in d.items() if v != 0)), self.const + o.const)

    def scale(self, c: int) -> "Affine":
        if c == 0:
            return Affine((), 0)
        return Affine(tuple((k, v * c) for k, v in self.terms), self.const * c)

    def __sub__(self, o: "Affine") -> "Affine":
        return self + o.scale(-1)


def affine(e: A.Expr) -> Affine:
    """The affine form of an integer expression; non-linear parts become opaque terms."""
    if isinstance(e, A.IntLit):
        return Affine((), e.value)
    if isinstance(e, A.BinOp):
        if e.op is A.BinOpKind.ADD:
            return affine(e.lhs) + affine(e.rhs)
        if e.op is A.BinOpKind.SUB:
            return affine(e.lhs) - affine(e.rhs)
        if e.op is A.BinOpKind.MUL:
            a, b = affine(e.lhs), affine(e.rhs)
            if a.is_const:
                return b.scale(a.const)
            if b.is_const:
                return a.scale(b.const)
    if isinstance(e, A.UnaryOp) and e.op is A.UnaryOpKind.NEG:
        return affine(e.operand).scale(-1)
    return Affine(((unparse(e), 1),), 0)


def const_int(e: A.Expr) -> int | None:
    """The value of an integer expression if it is a compile-time constant."""
    a = affine(e)
    if a.is_const:
        return a.const
    v = fold(e)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def fold(e: A.Expr):
    """Evaluate an expression made only of literals; None if it is not constant."""
    if isinstance(e, (A.IntLit, A.FloatLit, A.BoolLit)):
        return e.value
    if isinstance(e, A.UnaryOp):
        v = fold(e.operand)
        if v is None:
            return None
        if e.op is A.UnaryOpKind.INVERT:
            return ~v if isinstance(v, int) and not isinstance(v, bool) else None
        return (not v) if e.op is A.UnaryOpKind.NOT else -v
    if isinstance(e, A.BinOp):
        a, b = fold(e.lhs), fold(e.rhs)
        if a is None or b is None:
            return None
        try:
            return _PY_BINOPS[e.op](a, b)
        except (ZeroDivisionError, KeyError, OverflowError, TypeError):
            return None
    if isinstance(e, A.Call) and e.func in ("cdiv", "min", "max") and len(e.args) == 2 and not e.kwargs:
        a, b = fold(e.args[0]), fold(e.args[1])
        if a is None or b is None:
            return None
        if e.func == "cdiv":
            return -(-a // b) if b else None
        return min(a, b) if e.func == "min" else max(a, b)
    return None


_PY_BINOPS = {
    A.BinOpKind.ADD: lambda a, b: a + b,
    A.BinOpKind.SUB: lambda a, b: a - b,
    A.BinOpKind.MUL: lambda a, b: a * b,
    A.BinOpKind.DIV: lambda a, b: a / b,
    A.BinOpKind.FLOORDIV: lambda a, b: a // b,
    A.BinOpKind.MOD: lambda a, b: a % b,
    A.BinOpKind.POW: lambda a, b: a ** b,
    A.BinOpKind.EQ: lambda a, b: a == b,
    A.BinOpKind.NE: lambda a, b: a != b,
    A.BinOpKind.LT: lambda a, b: a < b,
    A.BinOpKind.LE: lambda a, b: a <= b,
    A.BinOpKind.GT: lambda a, b: a > b,
    A.BinOpKind.GE: lambda a, b: a >= b,
    A.BinOpKind.AND: lambda a, b: a and b,
    A.BinOpKind.OR: lambda a, b: a or b,
    A.BinOpKind.MAX: max,
    A.BinOpKind.MIN: min,
    A.BinOpKind.BITXOR: lambda a, b: a ^ b,
    A.BinOpKind.BITAND: lambda a, b: a & b,
    A.BinOpKind.BITOR: lambda a, b: a | b,
}


# ---------------------------------------------------------------- host-side renderers
def to_python(e: A.Expr) -> str:
    """A Python expression over symbol names and `cdiv` (for grids and constraints)."""
    if isinstance(e, A.BinOp):
        op = e.op.value  # `&` `|` `^` stay bitwise: on bools they are the logical ones, on ints `N & 7 == 0` is a bit test
        if e.op in (A.BinOpKind.MAX, A.BinOpKind.MIN):
            return f"{op}({to_python(e.lhs)}, {to_python(e.rhs)})"
        return f"({to_python(e.lhs)} {op} {to_python(e.rhs)})"
    if isinstance(e, A.UnaryOp):
        op = {A.UnaryOpKind.NOT: "not ", A.UnaryOpKind.INVERT: "~"}.get(e.op, "-")
        return f"({op}{to_python(e.operand)})"
    if isinstance(e, A.Call):
        return f"{e.func}({', '.join(to_python(a) for a in e.args)})"
    return unparse(e)


def to_c(e: A.Expr) -> str:
    """A C++ expression over `long long` symbol variables and `tilex_cdiv` (host launcher)."""
    if isinstance(e, A.BinOp):
        ops = {"and": "&&", "or": "||"}
        if e.op in (A.BinOpKind.MAX, A.BinOpKind.MIN):
            return f"tilex_{e.op.value}({to_c(e.lhs)}, {to_c(e.rhs)})"
        if e.op in (A.BinOpKind.FLOORDIV, A.BinOpKind.MOD):  # Python semantics; a zero divisor is flagged
            return f"tilex_{'floordiv' if e.op is A.BinOpKind.FLOORDIV else 'mod'}({to_c(e.lhs)}, {to_c(e.rhs)})"
        return f"({to_c(e.lhs)} {ops.get(e.op.value, e.op.value)} {to_c(e.rhs)})"
    if isinstance(e, A.UnaryOp):
        op = {A.UnaryOpKind.NOT: "!", A.UnaryOpKind.INVERT: "~"}.get(e.op, "-")
        return f"({op}{to_c(e.operand)})"
    if isinstance(e, A.Call):
        return f"tilex_{e.func}({', '.join(to_c(a) for a in e.args)})"
    if isinstance(e, A.IntLit):
        return f"{e.value}LL"
    if isinstance(e, A.BoolLit):
        return "true" if e.value else "false"
    return unparse(e)

"""Safe evaluation of `where` constraints and grid expressions at launch (pure Python).

Only arithmetic, comparisons, bitwise operators, conditionals and `cdiv`/`min`/`max` over
the kernel's shape symbols are allowed; an expression nested deeper than Python's parser
allows is evaluated without recursion (`_DeepExpr`).
"""
from __future__ import annotations

import ast
import functools
import re
from typing import Any, Mapping

from ..diagnostics import LaunchError

def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers: cdiv(7, 2) == 4."""
    return -(-a // b)


_ALLOWED_NODES = (
    ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp,
    ast.Call, ast.Name, ast.Load, ast.Constant,
    ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, ast.Invert,
    ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Div, ast.Pow,
    ast.LShift, ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor,
    ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
)
_FUNCTIONS = {"cdiv": cdiv, "min": min, "max": max}


@functools.lru_cache(maxsize=1024)
def _compile_expr(expr: str) -> tuple[Any, tuple[str, ...]]:
    """Parse `expr`, allow only arithmetic/comparisons/cdiv/min/max; return (code, names).

    An expression nested deeper than Python's parser or compiler allows (200 parentheses: a `where` of 300
    `and`s, a 2000-term grid) is parsed and evaluated without recursion instead (`_DeepExpr`)."""
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, RecursionError, MemoryError) as e:
        deep = _DeepExpr.parse(expr)
        if deep is not None:
            return deep, deep.names
        raise LaunchError(f"internal error: cannot parse launch expression `{expr}`: "
                          f"{getattr(e, 'msg', type(e).__name__)}") from None
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise LaunchError(f"internal error: launch expression `{expr}` uses "
                              f"unsupported syntax ({type(node).__name__})")
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS) or node.keywords:
                raise LaunchError(f"internal error: launch expression `{expr}` may only call "
                                  "cdiv, min and max")
        elif isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, bool)):
            raise LaunchError(f"internal error: launch expression `{expr}` has a non-numeric constant")
        elif isinstance(node, ast.Name) and node.id not in _FUNCTIONS:
            found.append((node.col_offset, node.id))
    names = tuple(dict.fromkeys(n for _, n in sorted(found)))  # source order, unique
    try:
        return compile(tree, "<tilex launch expression>", "eval"), names
    except (RecursionError, MemoryError):
        deep = _DeepExpr.parse(expr)
        if deep is None:
            raise LaunchError(f"internal error: cannot compile launch expression `{expr}`") from None
        return deep, deep.names


class _DeepExpr:
    """A launch expression (what `exprs.to_python` writes: parenthesized binary and unary operators, `cdiv`,
    `min`, `max`, symbols and numbers) parsed by shunting-yard and evaluated with an explicit stack, so its
    depth is bounded by memory only. Python's semantics: `and`/`or` short-circuit, `//` and `%` floor."""

    _TOKEN = re.compile(r"\s*(?:(\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|0[xX][0-9a-fA-F]+|\d+)"
                        r"|([A-Za-z_]\w*)|(\*\*|//|<<|>>|<=|>=|==|!=|[-+*/%<>&|^~(),]))")
    # binary operators: precedence (Python's), right-associative
    _BIN = {"or": (1, False), "and": (2, False), "==": (4, False), "!=": (4, False), "<": (4, False),
            "<=": (4, False), ">": (4, False), ">=": (4, False), "|": (5, False), "^": (6, False), "&": (7, False),
            "<<": (8, False), ">>": (8, False), "+": (9, False), "-": (9, False), "*": (10, False),
            "/": (10, False), "//": (10, False), "%": (10, False), "**": (12, True)}
    _UN = {"not": 3, "-": 11, "+": 11, "~": 11}
    _OPS = {"|": lambda a, b: a | b, "^": lambda a, b: a ^ b, "&": lambda a, b: a & b,
            "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b, "+": lambda a, b: a + b,
            "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
            "//": lambda a, b: a // b, "%": lambda a, b: a % b, "**": lambda a, b: a ** b,
            "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
    _UNOPS = {"not": lambda a: not a, "-": lambda a: -a, "+": lambda a: +a, "~": lambda a: ~a}

    def __init__(self, root, names):
        self.root, self.names = root, names

    @classmethod
    def parse(cls, expr: str) -> "_DeepExpr | None":
        """The expression, or None when it is not one (the caller reports it)."""
        tokens, pos = [], 0
        while pos < len(expr):
            m = cls._TOKEN.match(expr, pos)
            if m is None:
                if expr[pos:].strip():
                    return None
                break
            pos = m.end()
            num, name, op = m.groups()
            if num is not None:
                tokens.append(("num", int(num, 16) if num[:2] in ("0x", "0X") else int(num) if num.isdigit()
                               else float(num)))
            elif name in ("and", "or", "not"):
                tokens.append(("op", name))
            elif name in ("True", "False"):
                tokens.append(("num", name == "True"))
            elif name is not None:
                tokens.append(("name", name))
            else:
                tokens.append(("op", op))
        out: list = []  # operand nodes
        ops: list = []  # ("bin", op) / ("un", op) / ("(", fn or None, argc)
        names: dict[str, None] = {}

        def reduce(top) -> bool:
            if top[0] == "un":
                if not out:
                    return False
                out.append(("un", top[1], out.pop()))
            else:
                if len(out) < 2:
                    return False
                b, a = out.pop(), out.pop()
                out.append(("bin", top[1], a, b))
            return True

        prev = None  # the kind of the previous token: None, "operand", "op", "(", ","
        for i, (kind, v) in enumerate(tokens):
            if kind in ("num", "name"):
                if prev == "operand":
                    return None
                if kind == "name" and i + 1 < len(tokens) and tokens[i + 1] == ("op", "("):
                    if v not in _FUNCTIONS:
                        return None
                    ops.append(("fn", v))
                    prev = "fn"
                    continue
                if kind == "name":
                    names[v] = None
                out.append((kind, v))
                prev = "operand"
            elif v == "(":
                fn = ops.pop()[1] if prev == "fn" else None
                ops.append(("(", fn, [len(out)]))
                prev = "("
            elif v in (",", ")"):
                while ops and ops[-1][0] != "(":
                    if not reduce(ops.pop()):
                        return None
                if not ops or prev in ("op", "(", ","):  # `( )`, `(a, )`, `f(, a)`, `a + )`
                    return None
                if v == ",":
                    ops[-1][2].append(len(out))
                    prev = ","
                    continue
                _, fn, starts = ops.pop()
                args = out[starts[0]:]
                if len(args) != len(starts) or (fn is None and len(args) != 1):
                    return None
                if fn is not None:
                    del out[starts[0]:]
                    out.append(("call", fn, args))
                prev = "operand"
            elif prev != "operand":  # a prefix operator
                if v not in cls._UN:
                    return None
                ops.append(("un", v))
                prev = "op"
            else:
                if v not in cls._BIN:
                    return None
                prec, right = cls._BIN[v]
                while ops and ops[-1][0] in ("un", "bin"):
                    top = ops[-1]
                    tp = cls._UN[top[1]] if top[0] == "un" else cls._BIN[top[1]][0]
                    if tp > prec or (tp == prec and not right):
                        if not reduce(ops.pop()):
                            return None
                    else:
                        break
                ops.append(("bin", v))
                prev = "op"
        while ops:
            top = ops.pop()
            if top[0] not in ("un", "bin") or not reduce(top):
                return None
        if len(out) != 1:
            return None
        return cls(out[0], tuple(names))

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        vals: list = []
        work: list = [(self.root, 0)]
        while work:
            node, state = work.pop()
            kind = node[0]
            if kind == "num":
                vals.append(node[1])
            elif kind == "name":
                vals.append(env[node[1]])
            elif kind == "un":
                if state == 0:
                    work += [(node, 1), (node[2], 0)]
                else:
                    vals.append(self._UNOPS[node[1]](vals.pop()))
            elif kind == "call":
                if state == 0:
                    work.append((node, 1))
                    work += [(a, 0) for a in reversed(node[2])]
                else:
                    n = len(node[2])
                    args = vals[len(vals) - n:]
                    del vals[len(vals) - n:]
                    vals.append(_FUNCTIONS[node[1]](*args))
            elif node[1] in ("and", "or"):
                if state == 0:
                    work += [(node, 1), (node[2], 0)]
                else:  # the left operand decides whether the right one is evaluated, as in Python
                    a = vals[-1]
                    if bool(a) == (node[1] == "and"):
                        vals.pop()
                        work.append((node[3], 0))
            elif state == 0:
                work += [(node, 1), (node[3], 0), (node[2], 0)]
            else:
                b = vals.pop()
                vals.append(self._OPS[node[1]](vals.pop(), b))
        return vals[0]


def eval_expr(expr: str, symbols: Mapping[str, int]) -> Any:
    """Evaluate a constraint/grid expression with only `cdiv`, `min`, `max` and `symbols`."""
    code, names = _compile_expr(expr)
    missing = [n for n in names if n not in symbols]
    if missing:
        raise LaunchError(f"internal error: launch expression `{expr}` uses unknown "
                          f"symbol(s) {', '.join(missing)}")
    env = {"__builtins__": {}, **_FUNCTIONS}
    env.update({n: symbols[n] for n in names})
    try:
        if isinstance(code, _DeepExpr):
            return code.evaluate(env)
        return eval(code, env)  # noqa: S307 - checked AST, no builtins
    except ZeroDivisionError:
        vals = ", ".join(f"{n} = {symbols[n]}" for n in names)
        raise LaunchError(f"launch expression `{expr}` divides by zero ({vals})") from None


def expr_symbols(expr: str) -> tuple[str, ...]:
    """The symbol names an expression refers to, in source order."""
    return _compile_expr(expr)[1]

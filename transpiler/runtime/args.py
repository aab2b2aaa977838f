"""Binding and checking call arguments against a KernelSpec (pure Python, no CuPy).

`bind_arguments` maps positional/keyword arguments onto `spec.params`, checks every
tensor (dtype, rank, sizes, contiguity, device) and scalar, binds the shape symbols,
evaluates the `where` constraints and the grid, and returns a `BoundArgs`. Every
problem is a `LaunchError` that names the parameter and says what was expected and
what was passed.

Tensors may be CuPy arrays, PyTorch CUDA tensors (recognised by their type's module,
so torch is never imported here), other objects with `__cuda_array_interface__`, and
NumPy arrays when `allow_numpy=True` (the interpreter's path).
"""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..diagnostics import LaunchError
from ..spec import KernelSpec, ParamSpec
from ..types import PARAM_DTYPES
from .arrays import ArrayInfo, _numpy_dtypes, describe_array

INT32_MAX = 2**31 - 1
GRID_X_MAX = 2**31 - 1
GRID_YZ_MAX = 65535

def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers: cdiv(7, 2) == 4."""
    return -(-a // b)


# ---------------------------------------------------------------------------------
# Safe evaluation of constraint and grid expressions
# ---------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------
# Binding
# ---------------------------------------------------------------------------------

@dataclass
class BoundArgs:
    """Arguments bound to a KernelSpec and checked: ready to launch (or to interpret)."""

    symbols: dict[str, int]  # symbol name -> size, in `spec.symbols` order
    arrays: dict[str, Any]  # tensor parameter name -> the caller's object
    scalars: dict[str, Any]  # scalar parameter name -> Python value (int, float or bool)
    grid: tuple[int, int, int]
    device: str | None = None  # "cuda:N", "cpu", or None when no tensor told us
    kinds: dict[str, str] = field(default_factory=dict)  # tensor name -> "cupy"/"torch"/...

    @property
    def empty(self) -> bool:
        """True when the grid has no blocks: the launch is skipped."""
        return 0 in self.grid

    @property
    def uses_torch(self) -> bool:
        """True when any tensor argument is a torch tensor."""
        return "torch" in self.kinds.values()


class _SpecPlan:
    """What binding needs to know about one KernelSpec, worked out once: the parameter
    names; per parameter, its fixed dims and its symbol dims (index, size or name); the
    symbols in the order binding finds them; and the grid of each tuple of symbol values
    seen so far (those that passed the constraints and the grid checks)."""

    MAX_GRIDS = 1024

    def __init__(self, spec: KernelSpec):
        self.spec = spec
        self.names = frozenset(p.name for p in spec.params)
        self.steps = tuple((p, tuple((i, d) for i, d in enumerate(p.dims) if isinstance(d, int)),
                            tuple((i, d) for i, d in enumerate(p.dims) if isinstance(d, str)))
                           for p in spec.params)
        found = [d for p in spec.params if p.kind == "tensor" for d in p.dims if isinstance(d, str)]
        bound = dict.fromkeys(found)  # the keys of `symbols` once every tensor is bound, in order
        self.unbound = [s for s in spec.symbols if s not in bound]
        self.order = tuple(dict.fromkeys((*spec.symbols, *bound)))
        self.grids: dict[tuple, tuple[int, int, int]] = {}

    def remember(self, key: tuple, grid: tuple[int, int, int]) -> None:
        if len(self.grids) >= self.MAX_GRIDS:
            self.grids.clear()
        self.grids[key] = grid


_PLANS: dict[int, _SpecPlan] = {}  # id(spec) -> plan; the plan holds the spec, so the id stays its own
_MAX_PLANS = 256


def _plan(spec: KernelSpec) -> _SpecPlan:
    plan = _PLANS.get(id(spec))
    if plan is None or plan.spec is not spec:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[id(spec)] = _SpecPlan(spec)
    return plan


def _match_params(spec: KernelSpec, args: Sequence[Any], kwargs: Mapping[str, Any],
                  names: frozenset[str]) -> dict[str, Any]:
    """Positional then keyword binding by parameter name (`names`: the parameters'); defaults for scalars."""
    params = spec.params
    if len(args) > len(params):
        raise LaunchError(f"{spec.name}() takes {len(params)} argument(s) "
                          f"({', '.join(p.name for p in params)}) but {len(args)} were given")
    values: dict[str, Any] = {p.name: a for p, a in zip(params, args)}
    for k, v in kwargs.items():
        if k not in names:
            raise LaunchError(f"{spec.name}() got an unexpected argument '{k}' "
                              f"(parameters: {', '.join(p.name for p in params)})")
        if k in values:
            raise LaunchError(f"{spec.name}() got multiple values for argument '{k}'")
        values[k] = v
    if len(values) < len(params):
        for p in params:
            if p.name not in values:
                if p.kind == "scalar" and p.default is not None:
                    values[p.name] = p.default
                else:
                    raise LaunchError(f"{spec.name}() missing argument '{p.name}' "
                                      f"({_param_text(p)})")
    return values


def _param_text(p: ParamSpec) -> str:
    if p.kind == "tensor":
        return f"{p.dtype}[{', '.join(str(d) for d in p.dims)}]"
    return p.dtype


# Binding messages, shared with tilex.torch's fake rules for user kernels (tilex/torch/_user.py).
def dtype_message(p: ParamSpec, got: str) -> str:
    return f"argument '{p.name}': expected dtype {p.dtype}, got {got}"


def rank_message(p: ParamSpec, shape) -> str:
    return (f"argument '{p.name}': expected rank {len(p.dims)} ({_param_text(p)}), "
            f"got rank {len(shape)} with shape {tuple(shape)}")


def fixed_dim_message(p: ParamSpec, i: int, n, shape) -> str:
    return f"argument '{p.name}': dimension {i} must be {p.dims[i]} ({_param_text(p)}), got {n} (shape {tuple(shape)})"


def inconsistent_message(d: str, q: str, j: int, first, name: str, i: int, n) -> str:
    return (f"inconsistent size for symbol {d}: '{q}' has {d} = {first} "
            f"({q}.shape[{j}]) but '{name}' has {d} = {n} ({name}.shape[{i}])")


def constraint_message(spec: KernelSpec, c, symbols: Mapping[str, Any]) -> str:
    vals = ", ".join(f"{n} = {symbols[n]}" for n in expr_symbols(c.py))
    return f"constraint `{c.text}` ({spec.source_file}:{c.line}) failed: {vals}"


# the largest finite value of each float dtype whose conversion overflows to inf (f8e4m3 saturates instead)
_FLOAT_MAX = {"f16": 65504.0, "bf16": 3.3895313892515355e38, "f32": 3.4028234663852886e38}


_INT_RANGES = {d.value: d.int_range for d in PARAM_DTYPES if d.is_int}  # i8 ... i64: the values a scalar may have


def _check_scalar(p: ParamSpec, v: Any) -> Any:
    """Check a scalar's Python/NumPy type and range; return a plain Python value."""
    if isinstance(v, np.generic):
        v = v.item()
    if describe_array(v) is not None:
        raise LaunchError(f"argument '{p.name}': expected a {p.dtype} scalar, got an array")
    if p.dtype == "bool":
        if not isinstance(v, bool):
            raise LaunchError(f"argument '{p.name}': expected a bool scalar, got {type(v).__name__} {v!r}")
        return v
    if p.dtype in _INT_RANGES:
        if isinstance(v, bool) or not isinstance(v, int):
            raise LaunchError(f"argument '{p.name}': expected an integer ({p.dtype}), "
                              f"got {type(v).__name__} {v!r}")
        lo, hi = _INT_RANGES[p.dtype]
        if not lo <= v <= hi:
            raise LaunchError(f"argument '{p.name}': {v} does not fit in {p.dtype}")
        return v
    if p.dtype in ("f16", "bf16", "f32", "f8e4m3", "f8e5m2"):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise LaunchError(f"argument '{p.name}': expected a number ({p.dtype}), "
                              f"got {type(v).__name__} {v!r}")
        try:
            v = float(v)
        except OverflowError:  # an int beyond any float
            raise LaunchError(f"argument '{p.name}': {v} is out of the range of {p.dtype}") from None
        if abs(v) > _FLOAT_MAX.get(p.dtype, np.inf) and v - v == 0:  # rare: beyond the largest finite value
            with np.errstate(over="ignore", invalid="ignore"):
                rounded = float(np.asarray(v).astype(_numpy_dtypes()[p.dtype]))
            if np.isfinite(rounded):  # within half an ulp of the largest value: rounds to it
                return v
            # out of range: f32/f16/bf16 would silently become inf (f8e4m3 saturates to +-448 on both backends)
            raise LaunchError(f"argument '{p.name}': {v!r} is out of the range of {p.dtype} "
                              f"(largest finite value {float(np.finfo(_numpy_dtypes()[p.dtype]).max)!r})")
        return v
    raise LaunchError(f"argument '{p.name}': unknown scalar dtype {p.dtype!r}")


def _wanted(allow_numpy: bool) -> str:
    return "a CuPy array or PyTorch CUDA tensor" + (" or NumPy array" if allow_numpy else "")


def _check_tensor(p: ParamSpec, x: Any, allow_numpy: bool, fixed: Sequence[tuple[int, int]]) -> ArrayInfo:
    """Type, device kind, dtype, rank and contiguity of one tensor argument (`fixed`: the
    (index, size) of its fixed dims)."""
    info = describe_array(x)
    if info is None:
        raise LaunchError(f"argument '{p.name}': expected {_wanted(allow_numpy)} of {_param_text(p)}, "
                          f"got {type(x).__module__}.{type(x).__name__}")
    if info.kind == "numpy" and not allow_numpy:
        raise LaunchError(f"argument '{p.name}': expected a CUDA array ({_wanted(allow_numpy)}), got a NumPy "
                          "array; move it to the GPU first (cupy.asarray)")
    if info.device == "cpu" and info.kind != "numpy":
        raise LaunchError(f"argument '{p.name}': expected a CUDA tensor, got a tensor on cpu")
    if info.dtype != p.dtype:
        raise LaunchError(dtype_message(p, info.dtype_text))
    if len(info.shape) != len(p.dims):
        raise LaunchError(rank_message(p, info.shape))
    for i, d in fixed:
        n = info.shape[i]
        if d != n:
            raise LaunchError(fixed_dim_message(p, i, n, info.shape))
    if not info.c_contiguous:
        raise LaunchError(f"argument '{p.name}': expected a C-contiguous (row-major) tensor, "
                          f"got a non-contiguous one with shape {info.shape}; make a contiguous "
                          "copy first")
    return info


def bind_arguments(spec: KernelSpec, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                   allow_numpy: bool = False) -> BoundArgs:
    """Bind and check call arguments against `spec`; raise LaunchError on any mismatch.

    Every argument is checked on every call; only the constraints and the grid, which
    depend on the symbol values alone, are remembered per tuple of symbol values."""
    plan = _plan(spec)
    values = _match_params(spec, tuple(args), kwargs or {}, plan.names)
    arrays: dict[str, Any] = {}
    scalars: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    symbols: dict[str, int] = {}
    bound_by: dict[str, tuple[str, int]] = {}  # symbol -> (param, dim index)
    device: str | None = None
    device_param = ""
    zero_dims: list[str] = []
    for p, fixed, named in plan.steps:
        v = values[p.name]
        if p.kind == "scalar":
            scalars[p.name] = _check_scalar(p, v)
            continue
        if p.kind != "tensor":
            raise LaunchError(f"internal error: parameter '{p.name}' has unknown kind {p.kind!r}")
        info = _check_tensor(p, v, allow_numpy, fixed)
        arrays[p.name], kinds[p.name] = v, info.kind
        if info.device != "cuda:?":  # objects that only expose a pointer can't be compared
            if device is None:
                device, device_param = info.device, p.name
            elif info.device != device:
                raise LaunchError(f"all tensors must be on the same device: '{device_param}' is on "
                                  f"{device} but '{p.name}' is on {info.device}")
        shape = info.shape
        if 0 in shape:
            zero_dims += [f"{p.name}.shape[{i}] = 0" for i, n in enumerate(shape) if n == 0]
        for i, d in named:
            n = shape[i]
            if d in symbols:
                if symbols[d] != n:
                    q, j = bound_by[d]
                    raise LaunchError(inconsistent_message(d, q, j, symbols[d], p.name, i, n))
            else:
                if n > INT32_MAX:
                    raise LaunchError(f"symbol {d} = {n} (from {p.name}.shape[{i}]) does not fit "
                                      f"in a 32-bit int (must be < 2**31)")
                symbols[d], bound_by[d] = n, (p.name, i)
    if plan.unbound:
        raise LaunchError(f"internal error: symbol {plan.unbound[0]} is not bound by any tensor parameter of "
                          f"{spec.name}")
    key = tuple(symbols.values())  # the symbols are always found in the same order (plan.order)
    grid = plan.grids.get(key)
    if grid is None:
        for c in spec.constraints:
            if not eval_expr(c.py, symbols):
                raise LaunchError(constraint_message(spec, c, symbols))
        grid = eval_grid(spec, symbols)
        plan.remember(key, grid)
    if zero_dims and 0 not in grid:
        raise LaunchError(f"zero-size tensor dimension ({', '.join(zero_dims)}) but the grid "
                          f"{grid} is not empty; tilex kernels only accept empty tensors when "
                          "they launch no blocks")
    ordered = {s: symbols[s] for s in plan.order}
    return BoundArgs(ordered, arrays, scalars, grid, device, kinds)


def eval_grid(spec: KernelSpec, symbols: Mapping[str, int]) -> tuple[int, int, int]:
    """Evaluate `spec.grid` (1 to 3 expressions) into (x, y, z), checking CUDA's limits."""
    if not 1 <= len(spec.grid) <= 3:
        raise LaunchError(f"internal error: {spec.name} has {len(spec.grid)} grid expressions "
                          "(expected 1 to 3)")
    dims = []
    for axis, expr in zip("xyz", spec.grid):
        g = eval_expr(expr, symbols)
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)):
            raise LaunchError(f"internal error: grid {axis} = `{expr}` is not an integer ({g!r})")
        g = int(g)
        limit = GRID_X_MAX if axis == "x" else GRID_YZ_MAX
        vals = ", ".join(f"{n} = {symbols[n]}" for n in expr_symbols(expr))
        if g < 0:
            raise LaunchError(f"grid {axis} = `{expr}` is negative: {g} ({vals})")
        if g > limit:
            raise LaunchError(f"grid {axis} = `{expr}` = {g} exceeds the CUDA limit of {limit} "
                              f"blocks ({vals})")
        dims.append(g)
    while len(dims) < 3:
        dims.append(1)
    return (dims[0], dims[1], dims[2])

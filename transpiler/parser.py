"""Parse .tile source text into a `tilex.ast.Program` (Lark LALR, spans kept).

Syntax errors become `CompileError`s at the offending token, with what was expected (syntax_errors.py).
"""
from __future__ import annotations

import functools

from functools import lru_cache
from importlib import resources

import lark
from lark import Token, Transformer, v_args

from . import ast as A
from .builtins import ATOMICS
from .deep import deep
from .diagnostics import CompileError, Span
from .syntax_errors import MAX_NESTING, check_nesting, syntax_error  # noqa: F401 (MAX_NESTING: parser's bound)
from .types import DType

AUG_OPS = {
    "+=": A.BinOpKind.ADD,
    "-=": A.BinOpKind.SUB,
    "*=": A.BinOpKind.MUL,
    "/=": A.BinOpKind.DIV,
    "max=": A.BinOpKind.MAX,
    "min=": A.BinOpKind.MIN,
}

@lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    grammar = resources.files("tilex.grammar").joinpath("tile.lark").read_text()
    return lark.Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=True)


@deep
def parse(source: str, file: str = "<string>") -> A.Program:
    """Parse a whole .tile file. Raises CompileError on a syntax error. The AST is immutable, so the last
    few results are reused (tilex.autoconfig translates one source once per candidate configuration)."""
    return _parse_cached(source, file)


@functools.lru_cache(maxsize=32)
def _parse_cached(source: str, file: str) -> A.Program:
    try:
        tree = _parser().parse(source)
    except lark.exceptions.UnexpectedInput as e:
        raise syntax_error(e, source, file) from None
    check_nesting(tree, source, file)
    try:
        return _ToAst(file, source).transform(tree)
    except lark.exceptions.VisitError as e:
        if isinstance(e.orig_exc, CompileError):
            raise e.orig_exc from None
        raise


I64_MIN, I64_MAX = -2**63, 2**63 - 1


def int_literal(text: str, sign: int = 1) -> int:
    """The value of integer literal `text` (decimal without leading zeros, or 0x hex), times `sign`.

    Raises ValueError with the message for the user when it is malformed or outside i64 (the
    interpreter and the generated CUDA would disagree on a wrapped value)."""
    t = text.strip()
    try:
        value = sign * int(t, 0)
    except ValueError:
        raise ValueError(f"invalid integer literal '{t}' (no leading zeros; hex is 0x...)") from None
    if not I64_MIN <= value <= I64_MAX:
        raise ValueError(f"integer literal {'-' if sign < 0 else ''}{t} does not fit in i64 "
                         f"({I64_MIN} to {I64_MAX})")
    return value


class _ToAst(Transformer):
    """Lark tree -> tilex.ast, one method per grammar rule."""

    def __init__(self, file: str, source: str):
        super().__init__()
        self.file = file
        self.source = source

    def _span(self, meta) -> Span:
        if getattr(meta, "empty", True):
            return Span(self.file, 0, 0, 0, 0)
        return Span(self.file, meta.line, meta.column, meta.end_line, meta.end_column)

    def _tspan(self, tok: Token) -> Span:
        return Span(self.file, tok.line, tok.column, tok.end_line, tok.end_column)

    # ---- top level
    def start(self, items):
        kernels = tuple(i for i in items if isinstance(i, A.Kernel))
        functions = tuple(i for i in items if isinstance(i, A.Function))
        imports = tuple(i for i in items if isinstance(i, A.Import))
        return A.Program(kernels, self.file, self.source, functions, imports)

    # ---- fn helpers and imports
    @v_args(meta=True)
    def fn_def(self, meta, ch):
        cparams, params = (), ()
        for c in ch[1:-1]:
            if isinstance(c, tuple) and c and c[0] == "cparams":
                cparams = c[1]
            elif isinstance(c, tuple) and c and c[0] == "fn_params":
                params = c[1]
        return A.Function(str(ch[0]), cparams, tuple(n for n, _ in params), ch[-1], self._span(meta),
                          tuple(sp for _, sp in params))

    def fn_params(self, ch):
        return ("fn_params", tuple(ch))

    @v_args(meta=True)
    def fn_param(self, meta, ch):
        if len(ch) > 1 and ch[1] is not None:
            raise CompileError(f"fn parameter '{ch[0]}' has a type: fn parameters take none", ch[1].span,
                               ("a fn is inlined at each call and takes the dtype and shape of the argument; "
                                f"write `{ch[0]}`",), self.source)
        return (str(ch[0]), self._tspan(ch[0]))

    @v_args(meta=True)
    def import_all(self, meta, ch):
        return A.Import(str(ch[0])[1:-1], None, self._span(meta))

    @v_args(meta=True)
    def import_from(self, meta, ch):
        return A.Import(str(ch[0])[1:-1], tuple(str(t) for t in ch[1:]), self._span(meta),
                        tuple(self._tspan(t) for t in ch[1:]))

    @v_args(meta=True)
    def return_stmt(self, meta, ch):
        return A.Return(tuple(ch), self._span(meta))

    @v_args(meta=True)
    def multi_assign(self, meta, ch):
        return A.MultiAssign(tuple(str(t) for t in ch[:-1]), ch[-1], self._span(meta))

    @v_args(meta=True)
    def kernel(self, meta, ch):
        name = ch[0]
        cparams, params, where, grid, body = (), (), (), (), None
        for c in ch[1:]:
            if isinstance(c, tuple) and c and c[0] == "cparams":
                cparams = c[1]
            elif isinstance(c, tuple) and c and c[0] == "params":
                params = c[1]
            elif isinstance(c, tuple) and c and c[0] == "where":
                where = c[1]
            elif isinstance(c, tuple) and c and c[0] == "grid":
                grid = c[1]
            elif isinstance(c, A.Block):
                body = c
        return A.Kernel(str(name), cparams, params, where, grid, body, self._span(meta))

    def cparams(self, ch):
        return ("cparams", tuple(ch))

    @v_args(meta=True)
    def cparam(self, meta, ch):
        name, kind = ch[0], ch[1]
        default = ch[2] if len(ch) > 2 else None
        return A.CParam(str(name), _cparam_kind(kind), default, self._span(meta))

    @v_args(meta=True)
    def cparam_dtype(self, meta, ch):  # <T: dtype = bf16>: the default is a dtype name
        return A.CParam(str(ch[0]), _cparam_kind(ch[1]), ch[2], self._span(meta))

    def cparam_dtype_default(self, ch):
        return DType(str(ch[0]))

    @v_args(meta=True)
    def cparam_auto(self, meta, ch):
        return A.CParam(str(ch[0]), _cparam_kind(ch[1]), None, self._span(meta), auto=True)

    @v_args(meta=True)
    def cparam_space(self, meta, ch):
        return A.CParam(str(ch[0]), _cparam_kind(ch[1]), None, self._span(meta), auto=True, space=tuple(ch[2:]))

    def _number(self, t: Token, sign: int = 1) -> int | float:
        if t.type == "INT":
            try:
                return int_literal(str(t), sign)
            except ValueError as e:
                raise CompileError(str(e), self._tspan(t), source=self.source) from None
        return sign * float(str(t))

    def const_value(self, ch):
        t = ch[0]
        if t.type in ("INT", "FLOAT"):
            return self._number(t)
        return t.type == "TRUE"

    def neg_const(self, ch):
        return self._number(ch[0], -1)

    def params(self, ch):
        return ("params", tuple(ch))

    @v_args(meta=True)
    def param(self, meta, ch):
        name = ch[0]
        is_out = False
        rest = list(ch[1:])
        if rest and isinstance(rest[0], Token) and rest[0].type == "OUT":
            is_out = True
            rest.pop(0)
        ty = rest[0]
        default = rest[1] if len(rest) > 1 else None
        return A.Param(str(name), ty, is_out, default, self._span(meta))

    @v_args(meta=True)
    def type_expr(self, meta, ch):
        dims = tuple(ch[1]) if len(ch) > 1 else None
        return A.TypeExpr(DType(str(ch[0])), dims, self._span(meta))

    @v_args(meta=True)
    def type_expr_param(self, meta, ch):  # x: T[M, N] with T a dtype parameter (resolve_names sets the dtype)
        dims = tuple(ch[1]) if len(ch) > 1 else None
        return A.TypeExpr(None, dims, self._span(meta), param=str(ch[0]))

    def dims(self, ch):
        return list(ch)

    def where_clause(self, ch):
        return ("where", tuple(ch))

    def grid_clause(self, ch):
        return ("grid", tuple(ch))

    @v_args(meta=True)
    def block(self, meta, ch):
        return A.Block(tuple(ch), self._span(meta))

    # ---- statements
    @v_args(meta=True)
    def assign(self, meta, ch):
        value = ch[1]
        if isinstance(value, A.Call) and value.func in ATOMICS:  # `old = atomic_add(t[...], v)`: its old values
            return self._atomic(value.func, value.args, value.kwargs, self._span(meta), str(ch[0]))
        return A.Assign(str(ch[0]), value, self._span(meta))

    @v_args(meta=True)
    def augassign(self, meta, ch):
        return A.Assign(str(ch[0]), ch[2], self._span(meta), AUG_OPS[str(ch[1])])

    def _target(self, meta, ch) -> A.Index:
        name_tok = ch[0]
        items, kwargs = ch[1]
        base = A.Name(str(name_tok), self._tspan(name_tok))
        last = (list(items) + [v for _, v in kwargs])[-1:]
        end = last[0].span if last and last[0].span.line else base.span
        span = Span(self.file, name_tok.line, name_tok.column, end.end_line, end.end_col + 1)
        return A.Index(base, items, kwargs, span)

    @v_args(meta=True)
    def store(self, meta, ch):
        return A.Store(self._target(meta, ch), ch[2], self._span(meta))

    @v_args(meta=True)
    def augstore(self, meta, ch):
        return A.Store(self._target(meta, ch), ch[3], self._span(meta), AUG_OPS[str(ch[2])])

    @v_args(meta=True)
    def call_stmt(self, meta, ch):
        """`atomic_add(t[...], v)` (any atomic of builtins.ATOMICS): a Store with its `atomic` op; any other call is a
        CallStmt (a fn called for its stores)."""
        name, span = str(ch[0]), self._span(meta)
        args, kwargs = self._split_args(ch[1:])
        if name == "fence":  # a device-scope fence of this program's memory operations
            if args or kwargs:
                raise CompileError("fence() takes no arguments", span, source=self.source)
            return A.Fence(span)
        if name not in ATOMICS:  # a fn call standing as a statement (inline_functions inlines it or says what it is)
            return A.CallStmt(self.call(meta, ch), span)
        return self._atomic(name, args, kwargs, span, None)

    def _atomic(self, name: str, args, kwargs, span, result: str | None) -> A.Store:
        """The Store of atomic `name` (with `result`, the variable its old values are assigned to)."""
        atomic = ATOMICS[name]
        want = 3 if atomic.op == "cas" else 2
        if kwargs:
            raise CompileError(f"{name}() takes no keyword arguments; put mask= inside the subscript",
                               kwargs[0][1].span, source=self.source)
        if len(args) != want:
            shape = "(t[...], expected, value)" if atomic.op == "cas" else "(t[...], value)"
            raise CompileError(f"{name}{shape} takes {want} arguments, got {len(args)}", span, source=self.source)
        target = args[0]
        compare = args[1] if atomic.op == "cas" else None
        return A.Store(target, args[-1], span, atomic=atomic.op, compare=compare, result=result)

    @v_args(meta=True)
    def for_stmt(self, meta, ch):
        var, it, body = ch
        span = self._span(meta)
        if not (isinstance(it, A.Call) and it.func in ("range", "pipeline")):
            raise CompileError("a for loop iterates over range(start, stop[, step]) or pipeline(start, stop, step, stages=S)",
                               it.span, source=self.source)
        args = it.args
        if not 1 <= len(args) <= 3:
            raise CompileError(f"{it.func}() takes 1 to 3 positional arguments, got {len(args)}", it.span, source=self.source)
        if len(args) == 1:
            start, stop, step = A.IntLit(0, it.span), args[0], A.IntLit(1, it.span)
        else:
            start, stop = args[0], args[1]
            step = args[2] if len(args) == 3 else A.IntLit(1, it.span)
        stages, pipelined = 1, it.func == "pipeline"
        for k, v in it.kwargs:
            if k == "stages" and pipelined:
                stages = v  # an expression; the resolve pass folds it to an int
            else:
                raise CompileError(f"unknown keyword argument '{k}' for {it.func}()", v.span, source=self.source)
        return A.For(str(var), start, stop, step, body, span, stages, pipelined)

    @v_args(meta=True)
    def if_stmt(self, meta, ch):
        cond, then = ch[0], ch[1]
        rest = ch[2:]
        orelse = None
        if rest and isinstance(rest[-1], tuple) and rest[-1][0] == "else":
            orelse = rest[-1][1]
            rest = rest[:-1]
        for econd, eblock, espan in reversed([r[1] for r in rest]):
            inner = A.If(econd, eblock, orelse, espan)
            orelse = A.Block((inner,), espan)
        return A.If(cond, then, orelse, self._span(meta))

    @v_args(meta=True)
    def elif_clause(self, meta, ch):
        return ("elif", (ch[0], ch[1], self._span(meta)))

    def else_clause(self, ch):
        return ("else", ch[0])

    # ---- expressions
    def _bin(self, meta, op, a, b):
        return A.BinOp(op, a, b, self._span(meta))

    @v_args(meta=True)
    def or_op(self, meta, ch):
        return self._bin(meta, A.BinOpKind.OR, ch[0], ch[1])

    @v_args(meta=True)
    def and_op(self, meta, ch):
        return self._bin(meta, A.BinOpKind.AND, ch[0], ch[1])

    @v_args(meta=True)
    def not_op(self, meta, ch):
        return A.UnaryOp(A.UnaryOpKind.NOT, ch[0], self._span(meta))

    @v_args(meta=True)
    def compare(self, meta, ch):
        return self._bin(meta, A.BinOpKind(str(ch[1])), ch[0], ch[2])

    @v_args(meta=True)
    def bitor(self, meta, ch):
        return self._bin(meta, A.BinOpKind.BITOR, ch[0], ch[1])

    @v_args(meta=True)
    def bitand(self, meta, ch):
        return self._bin(meta, A.BinOpKind.BITAND, ch[0], ch[1])

    @v_args(meta=True)
    def bitxor(self, meta, ch):
        return self._bin(meta, A.BinOpKind.BITXOR, ch[0], ch[1])

    @v_args(meta=True)
    def shift_op(self, meta, ch):
        return self._bin(meta, A.BinOpKind(str(ch[1])), ch[0], ch[2])

    @v_args(meta=True)
    def invert(self, meta, ch):
        return A.UnaryOp(A.UnaryOpKind.INVERT, ch[0], self._span(meta))

    @v_args(meta=True)
    def binop(self, meta, ch):
        return self._bin(meta, A.BinOpKind(str(ch[1])), ch[0], ch[2])

    @v_args(meta=True)
    def pow_op(self, meta, ch):
        return self._bin(meta, A.BinOpKind.POW, ch[0], ch[2])

    @v_args(meta=True)
    def neg(self, meta, ch):
        x = ch[0]
        if isinstance(x, (A.IntLit, A.FloatLit)):  # fold literal negation: -1, -inf stays a call
            return type(x)(-x.value, self._span(meta))
        return A.UnaryOp(A.UnaryOpKind.NEG, x, self._span(meta))

    def factor(self, ch):  # unary plus
        return ch[-1]

    @v_args(meta=True)
    def index(self, meta, ch):
        items, kwargs = ch[1]
        return A.Index(ch[0], items, kwargs, self._span(meta))

    def _split_args(self, ch):
        if not ch or ch[0] is None:
            return (), ()
        args = ch[0]
        pos = tuple(a for a in args if not isinstance(a, tuple))
        kw = tuple(a for a in args if isinstance(a, tuple))
        return pos, kw

    @v_args(meta=True)
    def call(self, meta, ch):
        args, kwargs = self._split_args(ch[1:])
        return A.Call(str(ch[0]), args, kwargs, self._span(meta))

    @v_args(meta=True)
    def where_call(self, meta, ch):
        args, kwargs = self._split_args(ch)
        return A.Call("where", args, kwargs, self._span(meta))

    @v_args(meta=True)
    def method(self, meta, ch):
        args, kwargs = self._split_args(ch[2:])
        return A.Method(ch[0], str(ch[1]), args, kwargs, self._span(meta))

    @v_args(meta=True)
    def attr(self, meta, ch):
        return A.Attr(ch[0], str(ch[1]), self._span(meta))

    def args(self, ch):
        return list(ch)

    def kwarg(self, ch):
        return (str(ch[0]), ch[1])

    def subscripts(self, ch):
        items = tuple(c for c in ch if not isinstance(c, tuple))
        kwargs = tuple(c for c in ch if isinstance(c, tuple))
        return items, kwargs

    @v_args(meta=True)
    def slice(self, meta, ch):
        return A.Slice(ch[0], ch[1], self._span(meta))

    @v_args(meta=True)
    def newaxis(self, meta, ch):
        return A.NewAxis(self._span(meta))

    @v_args(meta=True)
    def name(self, meta, ch):
        return A.Name(str(ch[0]), self._span(meta))

    @v_args(meta=True)
    def int_lit(self, meta, ch):
        return A.IntLit(self._number(ch[0]), self._span(meta))

    @v_args(meta=True)
    def float_lit(self, meta, ch):
        return A.FloatLit(float(str(ch[0])), self._span(meta))

    @v_args(meta=True)
    def true_lit(self, meta, ch):
        return A.BoolLit(True, self._span(meta))

    @v_args(meta=True)
    def false_lit(self, meta, ch):
        return A.BoolLit(False, self._span(meta))

    @v_args(meta=True)
    def dtype_lit(self, meta, ch):
        return A.DTypeLit(DType(str(ch[0])), self._span(meta))

    @v_args(meta=True)
    def tile_type(self, meta, ch):
        return A.TileTypeExpr(DType(str(ch[0])), tuple(ch[1]), self._span(meta))


def _cparam_kind(token) -> A.CParamKind | str:
    """A compile-time parameter's declared type: a CParamKind, or the name as written when it is none."""
    text = str(token)
    try:
        return A.CParamKind(text)
    except ValueError:
        return text

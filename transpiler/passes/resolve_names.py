"""Pass 1, resolve_names: bind every name, substitute compile-time parameters.

Needs: a parsed Program and the `-D` overrides. Guarantees: every `Name` has a `kind`
(tensor, scalar param, symbol, local, loop variable); compile-time parameters are
replaced by literals (`kernel.defines` records their values); `kernel.symbols` lists the
shape symbols in order of first appearance; `x op= v` is desugared to `x = x op v`;
`pipeline(..., stages=S)` has an int `stages`. Reports unknown names (with a
suggestion), names used outside the block that defines them, writes to parameters, and
kernel names that would collide with CUDA C++ (`cuda_names`).
"""
from __future__ import annotations

import difflib
import math
import re
from dataclasses import replace

from .. import ast as A
from ..builtins import ATOMICS, FUNCTIONS, BuiltinKind
from ..cuda_names import identifier_reason, reserved_reason
from ..diagnostics import CompileError, Span
from ..parser import I64_MAX, I64_MIN, int_literal
from ..types import DType
from .base import Rewriter, fail

CONSTANTS = {"inf": math.inf, "nan": math.nan, "pi": math.pi}

# every name a call may use: the builtin table plus the loop iterators
CALLABLES = frozenset(FUNCTIONS) | {"range", "pipeline"}


def resolve_names(program: A.Program, defines: dict[str, object] | None = None,
                  auto: dict[str, dict] | None = None) -> A.Program:
    """`auto`: per kernel, the values chosen for its parameters left to tilex (`= auto`, `in (...)`)."""
    defines = dict(defines or {})
    auto = auto or {}
    kernels = tuple(_resolve_kernel(k, {**auto.get(k.name, {}), **defines}, program.source) for k in program.kernels)
    names = {k.name for k in kernels}
    if len(names) != len(kernels):
        seen = set()
        for k in kernels:
            if k.name in seen:
                raise CompileError(f"kernel '{k.name}' is defined twice", k.span)
            seen.add(k.name)
    return replace(program, kernels=kernels)


K = A.CParamKind
_KINDS = tuple(K)


def _coerce(kind: A.CParamKind | str, value, cp: A.CParam):
    shown = kind
    kind = K(kind).value_kind if kind in _KINDS else kind
    if kind == K.DTYPE:
        return _coerce_dtype(value, cp)
    try:
        if kind == K.INT:
            if isinstance(value, bool):  # -D BLOCK=True is not an int
                raise ValueError
            if isinstance(value, str):
                value = int_literal(value)
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            value = int(value)
            if not I64_MIN <= value <= I64_MAX:
                raise CompileError(f"compile-time parameter '{cp.name}' = {value} does not fit in i64", cp.span)
            return value
        if kind == K.FLOAT:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind == K.BOOL:
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes"):
                    return True
                if value.lower() in ("0", "false", "no"):
                    return False
                raise ValueError
            if value not in (0, 1):  # True, False, 1, 0 (and 1.0, 0.0)
                raise ValueError
            return bool(value)
    except (ValueError, TypeError, OverflowError):
        raise CompileError(f"compile-time parameter '{cp.name}' is {shown}, got {value!r}", cp.span) from None
    raise CompileError(f"compile-time parameter '{cp.name}' has unknown type '{kind}' (use int, float, bool or dtype, "
                       "or warps or min_blocks for a launch parameter)", cp.span)


def _coerce_dtype(value, cp: A.CParam) -> DType:
    """A dtype parameter's value: a DType or its name ("f16"); infer_dtypes checks that the dtype is supported."""
    if isinstance(value, str):
        try:
            return DType(value.strip())
        except ValueError:
            pass
    raise CompileError(f"compile-time parameter '{cp.name}' is a dtype, got {value!r}", cp.span,
                       (f"one of {', '.join(d.value for d in DType)}",))


def check_space(cp: A.CParam) -> None:
    """A parameter left to tilex: `= auto` is an int (its role implies the space); `in (...)` values have its kind."""
    if cp.kind not in _KINDS:
        _coerce(cp.kind, 0, cp)  # the unknown-type error
    kind = K(cp.kind).value_kind
    if cp.space is None:
        if kind != K.INT:
            raise CompileError(f"compile-time parameter '{cp.name}' is {cp.kind}: `= auto` implies a search space "
                               "for int parameters only", cp.span, (f"declare one: `{cp.name}: {cp.kind} in (...)`",))
        return
    seen = []
    for v in cp.space:
        bad = (kind == K.INT and (isinstance(v, bool) or not isinstance(v, int))) or \
              (kind == K.FLOAT and (isinstance(v, bool) or not isinstance(v, (int, float)))) or \
              (kind == K.BOOL and not isinstance(v, bool))
        if bad:
            raise CompileError(f"compile-time parameter '{cp.name}' is {cp.kind}: its search space has {v!r}", cp.span)
        if v in seen:
            raise CompileError(f"compile-time parameter '{cp.name}' lists {v!r} twice in its search space", cp.span)
        seen.append(v)


def _literal(value, span):
    if isinstance(value, bool):
        return A.BoolLit(value, span)
    if isinstance(value, int):
        return A.IntLit(value, span)
    return A.FloatLit(float(value), span)


def _check_kernel_name(k: A.Kernel, source: str) -> None:
    """The kernel's name is its extern "C" symbol in the generated CUDA: it must not collide."""
    if k.name.startswith(("tx_", "tilex")):
        why = "names starting with 'tx_' or 'tilex' are reserved for generated code"
    else:
        why = reserved_reason(k.name)
    if why is None:
        return
    raise CompileError(f"kernel name '{k.name}' is reserved in CUDA C++: {why}", _name_span(k, source), (
        "a kernel is emitted as an extern \"C\" function under its own name (hosts call it by that name); "
        f"rename it, e.g. '{k.name.lstrip('_')}_kernel'",))


def _name_span(k: A.Kernel, source: str) -> Span:
    """The span of the kernel's name (the kernel's span starts at the 'kernel' keyword)."""
    lines = source.splitlines() if source else []
    if 1 <= k.span.line <= len(lines):
        m = re.compile(r"kernel\s+([A-Za-z_][A-Za-z_0-9]*)").match(lines[k.span.line - 1], k.span.col - 1)
        if m and m.group(1) == k.name:
            return Span(k.span.file, k.span.line, m.start(1) + 1, k.span.line, m.end(1) + 1)
    return k.span


def _resolve_kernel(k: A.Kernel, defines: dict, source: str) -> A.Kernel:
    _check_kernel_name(k, source)
    consts: dict[str, object] = {}
    for cp in k.cparams:
        if cp.name in consts:
            raise CompileError(f"compile-time parameter '{cp.name}' is declared twice", cp.span)
        if cp.auto:
            if cp.kind == K.DTYPE:
                raise CompileError(f"dtype parameter '{cp.name}' cannot be left to tilex (`= auto`, `in (...)`): "
                                   "give it a default, or let the runtime bind it from the arguments", cp.span)
            check_space(cp)
        value = defines.get(cp.name, cp.default)
        if value is None and cp.auto:
            raise CompileError(f"compile-time parameter '{cp.name}' is chosen by tilex per shape: pass -D {cp.name}=VALUE "
                               "or compile through tilex.compile / tilex explain --shape", cp.span)
        if value is None:
            raise CompileError(f"compile-time parameter '{cp.name}' has no default: give one or pass -D {cp.name}=VALUE", cp.span)
        consts[cp.name] = _coerce(cp.kind, value, cp)

    kinds: dict[str, A.NameKind] = {}
    symbols: list[str] = []
    symbol_of: dict[str, str] = {}  # shape symbol -> the tensor parameter that first uses it
    params = []
    for p in k.params:
        why = identifier_reason(p.name)
        if why is not None:
            raise CompileError(f"parameter name '{p.name}' cannot be used in CUDA C++: {why}", p.span,
                               ("rename the parameter",))
        if kinds.get(p.name) is A.NameKind.SYMBOL:
            raise CompileError(f"'{p.name}' is already a shape symbol", p.span, (
                f"'{p.name}' is a dimension of '{symbol_of[p.name]}' and takes its value from that tensor's shape; "
                f"rename the parameter",))
        if p.name in kinds or p.name in consts:
            raise CompileError(f"parameter '{p.name}' is declared twice", p.span)
        ptype = _param_type(p.type, consts)
        dims = p.type.dims
        if dims is not None:
            new_dims = []
            for d in dims:
                if isinstance(d, A.Name) and isinstance(consts.get(d.id), DType):
                    raise CompileError(f"'{d.id}' is a dtype parameter and cannot name a dimension", d.span)
                if isinstance(d, A.Name) and d.id in consts:
                    d = _literal(consts[d.id], d.span)
                if isinstance(d, A.Name):
                    if d.id in kinds and kinds[d.id] is not A.NameKind.SYMBOL:
                        raise CompileError(f"'{d.id}' is a parameter and cannot name a dimension", d.span)
                    if d.id not in symbols:
                        why = identifier_reason(d.id)
                        if why is not None:
                            raise CompileError(f"shape symbol '{d.id}' cannot be used in CUDA C++: {why}", d.span,
                                               ("rename the dimension",))
                        symbols.append(d.id)
                        symbol_of[d.id] = p.name
                    kinds[d.id] = A.NameKind.SYMBOL
                    d = replace(d, kind=A.NameKind.SYMBOL)
                elif not (isinstance(d, A.IntLit) and d.value > 0):
                    raise CompileError("a tensor dimension is a symbol (like N) or a positive integer", d.span)
                elif d.value > 2**31 - 1:  # as shape symbols are checked at launch: dimensions are i32
                    raise CompileError(f"tensor dimension {d.value} is larger than 2147483647 (dimensions are i32, "
                                       "as shape symbols)", d.span)
                new_dims.append(d)
            dims = tuple(new_dims)
        if p.name in kinds:  # a tensor whose own dimensions use its name: x: f32[x]
            raise CompileError(f"'{p.name}' names both a tensor parameter and one of its dimensions", p.span,
                               ("rename one of them",))
        kinds[p.name] = A.NameKind.TENSOR if dims is not None else A.NameKind.SCALAR_PARAM
        if p.default is not None and not isinstance(p.default, (A.IntLit, A.FloatLit, A.BoolLit)):
            raise CompileError(f"the default of '{p.name}' must be a number or True/False", p.default.span)
        if p.is_out and dims is None:
            raise CompileError(f"output parameter '{p.name}' must be a tensor (scalars are passed by value)", p.span)
        params.append(replace(p, type=replace(ptype, dims=dims)))

    r = _Resolver(consts, kinds, source)
    r.outs = {p.name for p in k.params if p.is_out}
    where = tuple(r.visit_header(e, "a where constraint") for e in k.where)
    if not k.grid or len(k.grid) > 3:
        raise CompileError(f"the launch grid has 1 to 3 dimensions, got {len(k.grid)}", k.span)
    grid = tuple(r.visit_header(e, "the launch grid") for e in k.grid)
    body = r.block(k.body)
    used = tuple((cp.name, consts[cp.name]) for cp in k.cparams)
    return replace(k, params=tuple(params), where=where, grid=grid, body=body, defines=used, symbols=tuple(symbols))


def _param_type(t: A.TypeExpr, consts: dict) -> A.TypeExpr:
    """A parameter's type with its dtype parameter (`x: T[M, N]`) replaced by the dtype bound to it."""
    if t.param is None:
        return t
    dt = consts.get(t.param)
    if isinstance(dt, DType):
        return replace(t, dtype=dt)
    what = "a compile-time parameter that is not a dtype" if t.param in consts else "neither a dtype nor a dtype parameter"
    raise CompileError(f"'{t.param}' is {what}", t.span, (
        "declare a dtype parameter: kernel k<T: dtype = bf16>(x: T[N], ...)" if t.param not in consts
        else f"declare it `{t.param}: dtype` to use it as a tensor's dtype",))


def dtype_misuse(name: str, dt: DType) -> str:
    """The message for a dtype parameter used as a value (the error corpus has it)."""
    return (f"'{name}' is a dtype parameter (= {dt.value}); it stands where a dtype is written "
            f"(x: {name}[N], .to({name}), zeros({name}[BLOCK])), not as a value")


class _Resolver(Rewriter):
    def __init__(self, consts: dict, kinds: dict, source: str):
        self.consts = consts
        self.params = dict(kinds)
        self.scopes: list[dict[str, A.NameKind]] = [{}]
        self.defined_at: dict[str, tuple[str, int]] = {}  # name -> (where, line), for messages
        self.source = source
        self.header = None  # set while visiting where/grid

    def lookup(self, name: str) -> A.NameKind | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return self.params.get(name)

    def visit_header(self, e: A.Expr, what: str) -> A.Expr:
        self.header = what
        try:
            return self.visit(e)
        finally:
            self.header = None

    def block(self, b: A.Block) -> A.Block:
        self.scopes.append({})
        try:
            return replace(b, stmts=tuple(self.visit(s) for s in b.stmts))
        finally:
            self.scopes.pop()

    # ---- names
    def visit_Name(self, n: A.Name) -> A.Expr:
        if n.id in self.consts:
            if isinstance(self.consts[n.id], DType):
                fail(dtype_misuse(n.id, self.consts[n.id]))
            return _literal(self.consts[n.id], n.span)
        kind = self.lookup(n.id)
        if kind is None:
            if n.id in CONSTANTS:
                return A.FloatLit(CONSTANTS[n.id], n.span)
            if n.id in self.defined_at:
                where, line = self.defined_at[n.id]
                fail(f"'{n.id}' is only defined inside the {where} at line {line}",
                     "assign it before the block to use it after")
            known = set(self.params) | set(self.consts) | set(CONSTANTS)
            for s in self.scopes:
                known |= set(s)
            fail(f"unknown name '{n.id}'", *_suggest(n.id, known))
        if self.header and kind not in (A.NameKind.SYMBOL,):
            fail(f"{self.header} may use only shape symbols and compile-time parameters; '{n.id}' is a {kind.value}")
        return replace(n, kind=kind)

    def visit_UnaryOp(self, u: A.UnaryOp) -> A.Expr:
        x = self.visit(u.operand)
        if u.op is A.UnaryOpKind.NEG and isinstance(x, (A.IntLit, A.FloatLit)):  # -inf, -BLOCK: still a literal
            return type(x)(-x.value, u.span)
        return replace(u, operand=x)

    def visit_Call(self, c: A.Call) -> A.Expr:
        if c.func not in CALLABLES:
            fail(f"unknown function '{c.func}'", *_suggest(c.func, CALLABLES))
        if self.header and c.func not in ("cdiv", "min", "max"):
            fail(f"{self.header} may call only cdiv(), min() and max(), not {c.func}()")
        if c.func == "fence":
            fail("fence() is a statement and gives no value", "write fence() on its own line")
        if c.func in ATOMICS:
            fail(f"{c.func}() is a statement: its old values can only be assigned to a variable, as the whole "
                 "right side of an assignment",
                 f"write old = {c.func}(t[...], value) on its own line (or {c.func}(t[...], value) alone), "
                 "then use old")
        if c.args and c.func in FUNCTIONS and FUNCTIONS[c.func].kind is BuiltinKind.CTOR:
            first = self.dtype_arg(c.args[0])
            if first is not None:  # zeros(T[BLOCK]): a tile type of the dtype parameter
                return replace(c, args=(first, *(self.visit(a) for a in c.args[1:])),
                               kwargs=tuple((k, self.visit(v)) for k, v in c.kwargs))
        return self.generic(c)

    def visit_Method(self, m: A.Method) -> A.Expr:
        if m.name == "to" and len(m.args) == 1:
            arg = self.dtype_arg(m.args[0])
            if arg is not None:  # .to(T)
                return replace(m, obj=self.visit(m.obj), args=(arg,), kwargs=tuple((k, self.visit(v)) for k, v in m.kwargs))
        return self.generic(m)

    def dtype_arg(self, e: A.Expr) -> A.Expr | None:
        """`T` (a DTypeLit) or `T[dims]` (a TileTypeExpr) for a dtype parameter T where a dtype is written; else None."""
        if isinstance(e, A.Name) and isinstance(self.consts.get(e.id), DType):
            return A.DTypeLit(self.consts[e.id], e.span)
        if isinstance(e, A.Index) and isinstance(e.base, A.Name) and isinstance(self.consts.get(e.base.id), DType):
            if e.kwargs or any(isinstance(i, (A.Slice, A.NewAxis)) for i in e.items):
                fail(f"a tile type's dimensions are integers: {e.base.id}[BLOCK, ...]")
            return A.TileTypeExpr(self.consts[e.base.id], tuple(self.visit(i) for i in e.items), e.span)
        return None

    # ---- statements
    def _bind(self, name: str, kind: A.NameKind, stmt) -> None:
        if name.startswith(("tx_", "tilex")):
            fail(f"names starting with 'tx_' or 'tilex' are reserved for generated code: rename '{name}'")
        why = identifier_reason(name)
        if why is not None:
            fail(f"'{name}' cannot be a variable name in CUDA C++: {why}", "rename it")
        prior = self.lookup(name)
        if prior in (A.NameKind.TENSOR, A.NameKind.SCALAR_PARAM, A.NameKind.SYMBOL):
            fail(f"cannot assign to '{name}': it is a {prior.value}")
        if name in self.consts:
            fail(f"cannot assign to '{name}': it is a compile-time parameter")
        if prior is A.NameKind.LOOP_VAR and kind is not A.NameKind.LOOP_VAR:
            fail(f"cannot assign to loop variable '{name}'")
        if prior is None:
            self.scopes[-1][name] = kind

    def visit_Assign(self, s: A.Assign) -> A.Stmt:
        value = self.visit(s.value)
        if s.op is not None:
            if self.lookup(s.name) is None:
                fail(f"'{s.name}' is updated with an augmented assignment before it has a value")
            cur = A.Name(s.name, s.span)
            cur = self.visit(cur)
            value = _combine(s.op, cur, value, s.span)
        self._bind(s.name, A.NameKind.LOCAL, s)
        return A.Assign(s.name, value, s.span)

    def visit_Store(self, s: A.Store) -> A.Stmt:
        what = "x[...] = ..." if s.atomic is None else f"atomic_{s.atomic}()"
        if s.atomic is not None and not isinstance(s.target, A.Index):
            _atomic_target(s, self.visit(s.target))
        target = self.visit(s.target)
        kind = target.base.kind if isinstance(target.base, A.Name) else None
        if kind is not A.NameKind.TENSOR:
            if s.atomic is not None and kind in (A.NameKind.LOCAL, A.NameKind.LOOP_VAR):
                _atomic_target(s, target.base)
            name = s.target.base.id if isinstance(s.target.base, A.Name) else None
            what_is = "the target is not a name" if name is None else \
                f"'{name}' is a {kind.value if kind else 'compile-time parameter' if name in self.consts else 'constant'}"
            fail(f"only tensor parameters can be written with {what}; {what_is}")
        if target.base.id not in self.outs:
            fail(f"'{target.base.id}' is an input; mark it `out` in the parameter list to write it")
        target, distinct = _distinct(target)
        value = self.visit(s.value)
        compare = self.visit(s.compare)
        if s.op is not None:
            value = _combine(s.op, target, value, s.span)
        if s.result is not None:  # `old = atomic_add(...)`: bound after its operands are read
            self._bind(s.result, A.NameKind.LOCAL, s)
        return A.Store(target, value, s.span, atomic=s.atomic, compare=compare, distinct=distinct,
                       updates=s.op is not None, result=s.result)

    def visit_For(self, s: A.For) -> A.Stmt:
        start, stop, step = self.visit(s.start), self.visit(s.stop), self.visit(s.step)
        stages = s.stages
        if isinstance(stages, A.Expr):
            v = self.visit(stages)
            if not isinstance(v, A.IntLit) or v.value < 1:
                fail("pipeline stages must be a positive compile-time integer")
            stages = v.value
        self.scopes.append({})
        try:
            self._bind(s.var, A.NameKind.LOOP_VAR, s)
            self.scopes[-1][s.var] = A.NameKind.LOOP_VAR
            body = self.block(s.body)
            for name in self.scopes[-1]:
                self.defined_at.setdefault(name, ("loop", s.span.line))
            for name in _assigned(s.body):
                self.defined_at.setdefault(name, ("loop", s.span.line))
        finally:
            self.scopes.pop()
        return replace(s, start=start, stop=stop, step=step, body=body, stages=stages)

    def visit_If(self, s: A.If) -> A.Stmt:
        cond = self.visit(s.cond)
        then = self.block(s.then)
        for name in _assigned(s.then):
            self.defined_at.setdefault(name, ("if", s.span.line))
        orelse = self.block(s.orelse) if s.orelse is not None else None
        if s.orelse is not None:
            for name in _assigned(s.orelse):
                self.defined_at.setdefault(name, ("else", s.span.line))
        return replace(s, cond=cond, then=then, orelse=orelse)


def _atomic_target(s: A.Store, target: A.Expr) -> None:
    """The error for an atomic whose first argument is not a subscript of a tensor (a register tile, a scalar)."""
    fn = f"atomic_{s.atomic}"
    base = target.base if isinstance(target, A.Index) else target
    if isinstance(base, A.Name) and base.kind is A.NameKind.TENSOR:
        fail(f"{fn}() takes a subscript of a tensor, not the whole tensor '{base.id}'",
             f"write {fn}({base.id}[...], value): the elements to update, e.g. {base.id}[ids] or {base.id}[i : i + B]")
    if isinstance(base, A.Name) and base.kind in (A.NameKind.LOCAL, A.NameKind.LOOP_VAR):
        fail(f"{fn}() updates elements of an out tensor in global memory; '{base.id}' is a {base.kind.value} "
             "(a register value of this program, which no other program can see)",
             f"update a tile with an ordinary assignment ({base.id} += ...), or write "
             f"{fn}(t[...], value) with a subscript of an out tensor parameter t")
    fail(f"{fn}() takes a subscript of an out tensor parameter first, e.g. {fn}(counts[ids], 1)")


def _distinct(target: A.Index) -> tuple[A.Index, bool]:
    """The subscript without its `distinct = True` marker, and the marker (a literal bool)."""
    flag = target.kwarg("distinct")
    if flag is None:
        return target, False
    if not isinstance(flag, A.BoolLit):
        raise CompileError("distinct= takes True or False (a compile-time constant)", flag.span)
    return replace(target, kwargs=tuple((k, v) for k, v in target.kwargs if k != "distinct")), flag.value


def _combine(op: A.BinOpKind, cur: A.Expr, value: A.Expr, span) -> A.Expr:
    if op in (A.BinOpKind.MAX, A.BinOpKind.MIN):
        return A.Call(op.value, (cur, value), (), span)
    return A.BinOp(op, cur, value, span)


def _assigned(b: A.Block) -> set[str]:
    out = set()
    for s in b.stmts:
        if isinstance(s, A.Assign):
            out.add(s.name)
        elif isinstance(s, A.Store) and s.result is not None:
            out.add(s.result)
        elif isinstance(s, A.For):
            out |= _assigned(s.body)
        elif isinstance(s, A.If):
            out |= _assigned(s.then)
            if s.orelse:
                out |= _assigned(s.orelse)
    return out


def _suggest(name: str, known) -> tuple[str, ...]:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return (f"did you mean '{close[0]}'?",) if close else ()

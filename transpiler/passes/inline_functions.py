"""Pass 0, inline_functions: replace every call of a `fn` helper by the helper's body, renamed apart.

Needs: a parsed Program (its `functions` and `imports`). Guarantees: no kernel has a fn call, a `return`,
an `a, b = f(...)` or a call statement left, and the program carries no functions; the passes after it see
ordinary kernels. A call inside an expression is replaced by the helper's result (its one returned
expression), the helper's other statements placed before the caller's statement.

Hygiene: a helper sees only its parameters, its compile-time parameters, its own locals and constants; its
locals never capture or clobber the caller's: one whose name the kernel uses anywhere is renamed
(`first` -> `first_1`), the others keep theirs, so the CUDA stays readable. An argument that is a name, a
literal or program_id/num_programs is substituted where its parameter is used; so is any other argument used
once, outside a loop, by a helper that stores nothing; the rest are evaluated once into a local first. A
parameter the helper assigns is a local copy, unless the call assigns that parameter's final value back to
its argument's name (`m, l = update(s, m, l)`, the fn returning its `l`): then it is that variable. A result that is a local bound at the helper's top
level is computed under the name it is assigned to (`acc = f(...)`: no copy) unless the call's arguments
read that name. Compile-time parameters (`fn f<G: int = 8>`, given by
keyword at the call) must be compile-time at the call and are substituted.

Every node of an inlined body keeps its span in the helper, with the call sites it was inlined at added
(`Span.called_from`), so an error inside it names the helper's line and each call site. A fn that calls
itself, directly or through others, is a CompileError.
"""
from __future__ import annotations

import difflib
from dataclasses import fields, replace

from .. import ast as A
from ..diagnostics import CompileError, Span
from ..imports import Helper, scope_of
from .base import Walker, name_nodes, names_in
from .resolve_names import CALLABLES, CONSTANTS, _coerce, _literal

_ATOM_CALLS = ("program_id", "num_programs")
_FN_STMTS = (A.Return, A.MultiAssign, A.CallStmt)
DTYPE_KIND = "dtype"  # `fn f<T: dtype>`: given a dtype at the call (`f(x, T=bf16)`), usable as `.to(T)`, `zeros(T[B])`
_FN_CPARAM_KINDS = (A.CParamKind.INT, A.CParamKind.FLOAT, A.CParamKind.BOOL, DTYPE_KIND)


def inline_functions(program: A.Program) -> A.Program:
    scope = scope_of(program)
    for h in {id(h): h for h in scope.values()}.values():
        _check_helper(h)
    _check_recursion(scope)
    kernels = tuple(_Inliner(scope, k).kernel() for k in program.kernels)
    return replace(program, kernels=kernels, functions=(), imports=())


# ------------------------------------------------------------------ checks of a helper, once per fn
def _assigned(stmts) -> list[str]:
    """Every name a statement list binds: assignments, unpackings and loop variables, in order."""
    out: list[str] = []

    class _A(Walker):
        def on_Assign(self, s):
            out.append(s.name)

        def on_Store(self, s):
            if s.result is not None:  # `old = atomic_add(...)`
                out.append(s.result)

        def on_MultiAssign(self, s):
            out.extend(s.names)

        def on_For(self, s):
            out.append(s.var)
    for s in stmts:
        _A().walk(s)
    return out


def _nodes(node, cls) -> list:
    """Every node of class `cls` under `node` (a node or a tuple of them), in source order."""
    out: list = []

    class _Collect(Walker):
        def walk(self, n):
            if isinstance(n, cls):
                out.append(n)
            super().walk(n)
    for n in (node if isinstance(node, tuple) else (node,)):
        _Collect().walk(n)
    return out


def _check_helper(h: Helper) -> None:
    f = h.fn
    if f.name in CALLABLES:
        raise CompileError(f"fn '{f.name}' has the name of a builtin function", f.span, ("rename the fn",))
    seen: set[str] = set()
    for name, span in zip([c.name for c in f.cparams] + list(f.params),
                          [c.span for c in f.cparams] + list(f.param_spans or [f.span] * len(f.params))):
        if name in seen:
            raise CompileError(f"fn '{f.name}' has two parameters named '{name}'", span)
        seen.add(name)
    for cp in f.cparams:
        if cp.auto or cp.kind not in _FN_CPARAM_KINDS:
            raise CompileError(f"compile-time parameter '{cp.name}' of fn '{f.name}' is int, float, bool or dtype, "
                               "with an optional default (the call gives its value)", cp.span)
    stmts = f.body.stmts
    for r in _nodes(f.body, A.Return):
        if not (stmts and r is stmts[-1]):
            raise CompileError("`return` must be the last statement of a fn's body", r.span,
                               ("a fn returns once, at its end: compute the results with where() instead",))
    known = seen | set(_assigned(stmts)) | set(CONSTANTS)
    for n in name_nodes(f.body):
        if n.id not in known:
            close = difflib.get_close_matches(n.id, sorted(known - set(CONSTANTS)), n=1)
            raise CompileError(f"fn '{f.name}' uses '{n.id}', which is not one of its parameters or locals", n.span,
                               (f"did you mean '{close[0]}'?",) if close else
                               (f"a fn sees only its parameters: pass '{n.id}' as an argument",))


def _check_recursion(scope: dict[str, Helper]) -> None:
    """A CompileError at the first call that closes a cycle of fn calls."""
    done: set[int] = set()

    def visit(h: Helper, path: list[Helper]) -> None:
        if id(h) in done:
            return
        path.append(h)
        for c in _nodes(h.fn.body, A.Call):
            g = h.scope.get(c.func)
            if g is None:
                continue
            if any(g is p for p in path):
                chain = " -> ".join(p.fn.name for p in path[next(i for i, p in enumerate(path) if p is g):]) + \
                    f" -> {g.fn.name}"
                raise CompileError(f"fn '{g.fn.name}' calls itself ({chain})", c.span,
                                   ("fns are inlined at each call, so they cannot recurse",))
            visit(g, path)
        path.pop()
        done.add(id(h))

    for h in scope.values():
        visit(h, [])


# ------------------------------------------------------------------ inlining
def _kernel_names(k: A.Kernel) -> set[str]:
    names = {p.name for p in k.params} | {c.name for c in k.cparams}
    names |= names_in(tuple(d for p in k.params for d in (p.type.dims or ())))
    names |= names_in(k.where + k.grid) | names_in(k.body) | set(_assigned(k.body.stmts))
    return names


def _is_atom(e: A.Expr) -> bool:
    if isinstance(e, (A.Name, A.IntLit, A.FloatLit, A.BoolLit, A.DTypeLit)):
        return True
    return isinstance(e, A.Call) and e.func in _ATOM_CALLS and not e.kwargs and \
        all(isinstance(a, A.IntLit) for a in e.args)


def _uses(body: A.Block, name: str) -> tuple[int, bool]:
    """(how many times `name` is read in `body`, whether any read is inside a loop)."""
    count, in_loop = 0, False

    class _U(Walker):
        depth = 0

        def on_Name(self, n):
            nonlocal count, in_loop
            if n.id == name:
                count += 1
                in_loop |= self.depth > 0

        def on_For(self, s):
            for e in (s.start, s.stop, s.step):
                self.walk(e)
            self.depth += 1
            self.walk(s.body)
            self.depth -= 1
            return False
    _U().walk(body)
    return count, in_loop


def _has_store(body: A.Block, scope) -> bool:
    """Whether `body` may store: a store, or a call of a fn (which may)."""
    return bool(_nodes(body, A.Store)) or any(c.func in scope for c in _nodes(body, A.Call))


def _plain(span: Span) -> Span:
    return replace(span, called_from=()) if span.called_from else span


class _FnFacts:
    """What inlining reads of a fn at every call: its statements and results, the names it binds, the names
    it has at all (renamed names avoid them), the parameters an argument may be substituted for."""

    def __init__(self, h: Helper):
        f = h.fn
        body = f.body.stmts
        ret = body[-1] if body and isinstance(body[-1], A.Return) else None
        self.values = ret.values if ret else ()
        self.stmts = body[:-1] if ret else body
        self.assigned = tuple(dict.fromkeys(_assigned(body)))
        self.top = {s.name for s in self.stmts if isinstance(s, A.Assign)} | \
            {s.result for s in self.stmts if isinstance(s, A.Store) and s.result is not None}
        self.top -= set(f.params)  # bound at the top level
        self.own = set(self.assigned) | set(f.params) | {cp.name for cp in f.cparams} | names_in(f.body)
        stores = _has_store(f.body, h.scope)
        self.single_use = set() if stores else {p for p in f.params if _uses(f.body, p) in ((0, False), (1, False))}


class _Instantiate:
    """A helper's body with names substituted or renamed and every span marked with the call site."""

    def __init__(self, subst: dict[str, A.Expr], rename: dict[str, str], site: tuple):
        self.subst, self.rename, self.site = subst, rename, site

    def span(self, s: Span) -> Span:
        return replace(s, called_from=self.site + s.called_from)

    def node(self, n):
        if isinstance(n, A.Name):
            if n.id in self.subst:
                return self.subst[n.id]
            return replace(n, id=self.rename.get(n.id, n.id), span=self.span(n.span))
        if isinstance(n, A.Index) and isinstance(n.base, A.Name) and isinstance(self.subst.get(n.base.id), A.DTypeLit):
            # `T[BM, BN]` with T a dtype parameter: the tile type `bf16[BM, BN]`
            return A.TileTypeExpr(self.subst[n.base.id].dtype, tuple(self.node(d) for d in n.items), self.span(n.span))
        changes = {}
        for f in fields(n):
            v = getattr(n, f.name)
            if f.name == "span":
                changes["span"] = self.span(v)
            elif f.name in ("name", "var") and isinstance(n, (A.Assign, A.For)) or \
                    f.name == "result" and isinstance(n, A.Store) and v is not None:
                changes[f.name] = self.rename.get(v, v)
            elif f.name == "names" and isinstance(n, A.MultiAssign):
                changes[f.name] = tuple(self.rename.get(x, x) for x in v)
            elif f.name not in ("ty",):
                changes[f.name] = self.value(v)
        return replace(n, **changes)

    def value(self, v):
        if isinstance(v, (A.Expr, A.Stmt, A.Block)):
            return self.node(v)
        if isinstance(v, tuple):
            return tuple(self.value(x) for x in v)
        return v


class _Inliner:
    def __init__(self, scope: dict[str, Helper], k: A.Kernel):
        self.scope, self.k = scope, k
        self.taken = _kernel_names(k) if scope else set()
        self.consts = {c.name for c in k.cparams}
        self.exprs = bool(scope)  # without fns only the fn statements need a look (resolve_names does the rest)
        self.suffix: dict[str, int] = {}  # the last suffix given to a renamed name
        self.facts: dict[int, _FnFacts] = {}  # per fn of this run (id of a live Function)

    def kernel(self) -> A.Kernel:
        k = self.k
        for what, exprs in (("a where constraint", k.where), ("the launch grid", k.grid)):
            for c in _nodes(exprs, A.Call):
                if c.func in self.scope:
                    raise CompileError(f"{what} cannot call fn '{c.func}' (fns are inlined into kernel bodies)",
                                       c.span)
        body = self.block(k.body, self.scope)
        return k if body is k.body else replace(k, body=body)

    # ---- statements
    def block(self, b: A.Block, scope) -> A.Block:
        out, changed = [], False
        for s in b.stmts:
            new = self.stmt(s, scope)
            changed |= len(new) != 1 or new[0] is not s
            out.extend(new)
        return replace(b, stmts=tuple(out)) if changed else b

    def stmt(self, s: A.Stmt, scope) -> list[A.Stmt]:
        pre: list[A.Stmt] = []
        if isinstance(s, A.Assign) and s.op is None and self.exprs and isinstance(s.value, A.Call) and \
                s.value.func in scope:  # `a = f(...)`: as `a, = f(...)`
            self._known(s.value, scope)
            values = self.call(self._children(s.value, scope, pre), scope[s.value.func], scope, pre, 1, (s.name,))
            return pre + _assigns((s.name,), values, s.span)
        if isinstance(s, A.Assign):
            v = self.expr(s.value, scope, pre)
            return pre + [s if v is s.value else replace(s, value=v)]
        if isinstance(s, A.Store):
            t, v = self.expr(s.target, scope, pre), self.expr(s.value, scope, pre)
            c = None if s.compare is None else self.expr(s.compare, scope, pre)  # atomic_cas's expected values
            same = t is s.target and v is s.value and c is s.compare
            return pre + [s if same else replace(s, target=t, value=v, compare=c)]
        if isinstance(s, A.For):
            start, stop, step = (self.expr(e, scope, pre) for e in (s.start, s.stop, s.step))
            stages = self.expr(s.stages, scope, pre) if isinstance(s.stages, A.Expr) else s.stages
            body = self.block(s.body, scope)
            same = (start, stop, step, stages, body) == (s.start, s.stop, s.step, s.stages, s.body) and \
                all(a is b for a, b in zip((start, stop, step, body), (s.start, s.stop, s.step, s.body)))
            return pre + [s if same else replace(s, start=start, stop=stop, step=step, stages=stages, body=body)]
        if isinstance(s, A.If):
            cond = self.expr(s.cond, scope, pre)
            then = self.block(s.then, scope)
            orelse = self.block(s.orelse, scope) if s.orelse is not None else None
            same = cond is s.cond and then is s.then and orelse is s.orelse
            return pre + [s if same else replace(s, cond=cond, then=then, orelse=orelse)]
        if isinstance(s, A.MultiAssign):
            h = self._helper(s.value, scope)
            if h is None:
                raise CompileError("only the results of a fn call can be unpacked: `a, b = f(...)`", s.value.span)
            values = self.call(self._children(s.value, scope, pre), h, scope, pre, len(s.names), s.names)
            return pre + _assigns(s.names, values, s.span)
        if isinstance(s, A.CallStmt):
            h = self._helper(s.call, scope)
            if h is None:
                raise CompileError(f"a call of builtin '{s.call.func}' as a statement does nothing", s.call.span,
                                   ("assign its result (`x = ...`) or store it (`t[...] = ...`); the calls that are "
                                    "statements are fn calls and the atomics (atomic_add, atomic_max, ...)",))
            self.call(self._children(s.call, scope, pre), h, scope, pre, None)
            return pre
        if isinstance(s, A.Return):
            raise CompileError("`return` outside a fn", s.span, ("kernels write their results with stores",))
        return [s]

    def _helper(self, e: A.Expr, scope) -> Helper | None:
        if not isinstance(e, A.Call):
            return None
        self._known(e, scope)
        return scope.get(e.func)

    def _known(self, c: A.Call, scope) -> None:
        if c.func not in scope and c.func not in CALLABLES:
            known = set(CALLABLES) | set(scope)
            close = difflib.get_close_matches(c.func, sorted(known), n=1)
            raise CompileError(f"unknown function '{c.func}'", c.span, (f"did you mean '{close[0]}'?",) if close else ())

    # ---- expressions: fn calls replaced by their results, their bodies appended to `pre`
    def expr(self, e, scope, pre: list):
        if not isinstance(e, A.Expr) or not self.exprs:
            return e
        if isinstance(e, A.Call):
            self._known(e, scope)
        e = self._children(e, scope, pre)
        if isinstance(e, A.Call) and e.func in scope:
            return self.call(e, scope[e.func], scope, pre, 1)[0]
        return e

    def _children(self, e: A.Expr, scope, pre: list) -> A.Expr:
        """`e` with the fn calls below it inlined."""
        changes = {}
        for f in fields(e):
            if f.name in ("span", "ty"):
                continue
            v = getattr(e, f.name)
            new = self._field(v, scope, pre)
            if new is not v:
                changes[f.name] = new
        return replace(e, **changes) if changes else e

    def _field(self, v, scope, pre):
        if isinstance(v, A.Expr):
            return self.expr(v, scope, pre)
        if isinstance(v, tuple) and v:
            out = tuple(self._field(x, scope, pre) for x in v)
            return v if all(a is b for a, b in zip(out, v)) else out
        return v

    def _fresh(self, name: str, avoid: set[str]) -> str:
        if name not in self.taken:
            self.taken.add(name)
            return name
        i = self.suffix.get(name, 0) + 1
        while f"{name}_{i}" in self.taken or f"{name}_{i}" in avoid:
            i += 1
        self.suffix[name] = i
        self.taken.add(f"{name}_{i}")
        return f"{name}_{i}"

    def _facts(self, h: Helper) -> "_FnFacts":
        f = self.facts.get(id(h.fn))
        if f is None:
            _check_helper(h)
            f = self.facts[id(h.fn)] = _FnFacts(h)
        return f

    def _bind(self, c: A.Call, f: A.Function) -> dict[str, A.Expr]:
        """Parameter name -> argument, for the call `c` (CompileErrors for a wrong count or keyword)."""
        if len(c.args) > len(f.params):
            raise CompileError(f"fn '{f.name}' takes {len(f.params)} argument{'s' * (len(f.params) != 1)} "
                               f"({', '.join(f.params)}), got {len(c.args)}", c.span)
        bound = dict(zip(f.params, c.args))
        cnames = {cp.name for cp in f.cparams}
        for k, v in c.kwargs:
            if k not in cnames and k not in f.params:
                raise CompileError(f"fn '{f.name}' has no parameter '{k}'", v.span,
                                   (f"its parameters: {', '.join([*f.params, *cnames]) or 'none'}",))
            if k in bound:
                raise CompileError(f"fn '{f.name}' is given '{k}' twice", v.span)
            bound[k] = v
        missing = [p for p in f.params if p not in bound]
        if missing:
            raise CompileError(f"fn '{f.name}' takes {len(f.params)} argument{'s' * (len(f.params) != 1)} "
                               f"({', '.join(f.params)}), got {len(f.params) - len(missing)}", c.span,
                               (f"missing: {', '.join(missing)}",))
        for cp in f.cparams:
            if cp.name not in bound:
                if cp.default is None:
                    raise CompileError(f"fn '{f.name}' needs its compile-time parameter '{cp.name}': "
                                       f"pass {cp.name}=VALUE", c.span)
                bound[cp.name] = _literal(_coerce(cp.kind, cp.default, cp), c.span)
            elif cp.kind == DTYPE_KIND and not isinstance(bound[cp.name], (A.DTypeLit, A.Name)):
                raise CompileError(f"compile-time parameter '{cp.name}' of fn '{f.name}' is a dtype: give one "
                                   f"({cp.name}=bf16)", bound[cp.name].span)
            else:
                free = names_in(bound[cp.name]) - self.consts - set(CONSTANTS)
                if free:
                    raise CompileError(f"compile-time parameter '{cp.name}' of fn '{f.name}' is given "
                                       f"'{sorted(free)[0]}', which is not known at compile time", bound[cp.name].span,
                                       ("give a literal or a compile-time parameter of the kernel",))
        return bound

    def call(self, c: A.Call, h: Helper, scope, pre: list, want: int | None,
             targets: tuple[str, ...] = ()) -> tuple[A.Expr, ...]:
        """The results of fn call `c` (its arguments already inlined); its statements appended to `pre`.

        `targets`: the names the results are assigned to (`a, b = f(...)`, `a = f(...)`). A result that is a
        local the fn binds at its top level is computed under its target's name when nothing the call reads
        uses that name (no copy `a = acc_1` after the body)."""
        f = h.fn
        facts = self._facts(h)
        bound = self._bind(c, f)
        values = facts.values
        if want is not None and len(values) != want:
            raise CompileError(f"fn '{f.name}' returns {len(values)} value{'s' * (len(values) != 1)}, "
                               f"{want} expected here", c.span)
        site = ((f.name, _plain(c.span)),) + c.span.called_from
        subst: dict[str, A.Expr] = {cp.name: bound[cp.name] for cp in f.cparams}
        rename: dict[str, str] = {}
        copies: list[A.Stmt] = []
        for p in f.params:
            a = bound[p]
            if p not in facts.assigned and (_is_atom(a) or p in facts.single_use):
                subst[p] = a
            elif _updated_in_place(p, a, bound, values, targets, facts):
                rename[p] = a.id  # `x = f(x)` with f assigning and returning its parameter: x itself, no copies
                self.taken.add(a.id)
            else:
                rename[p] = self._fresh(p, facts.own)
                copies.append(A.Assign(rename[p], a, a.span))
        read = names_in(tuple(bound.values()))
        for t, v in zip(targets, values):
            if isinstance(v, A.Name) and v.id in facts.top and v.id not in rename and targets.count(t) == 1 and \
                    t not in read and (t == v.id or t not in facts.own):
                rename[v.id] = t
                self.taken.add(t)
        for name in facts.assigned:
            if name not in rename:
                rename[name] = self._fresh(name, facts.own)
        stmts = facts.stmts
        inst = _Instantiate(subst, rename, site)
        new_stmts = [inst.node(s) for s in stmts]
        new_values = tuple(inst.node(v) for v in values)
        pre.extend(copies)
        block = self.block(A.Block(tuple(new_stmts), inst.span(f.body.span)), h.scope)
        pre.extend(block.stmts)
        return tuple(self.expr(v, h.scope, pre) for v in new_values)


def _updated_in_place(p: str, a: A.Expr, bound: dict, values: tuple, targets: tuple, facts: "_FnFacts") -> bool:
    """Whether parameter `p`, which the fn assigns, may be the caller's variable itself: its argument is a name
    `x` that the call's results assign the final `p` back to (`m, l = update(s, m, l)` with `return m_new, l`),
    that no other argument reads (they would see the updated value) and no other result or fn local names."""
    if not (isinstance(a, A.Name) and a.id in targets and targets.count(a.id) == 1):
        return False
    j = targets.index(a.id)
    if not (isinstance(values[j], A.Name) and values[j].id == p):
        return False
    others = tuple(v for q, v in bound.items() if q != p)
    return a.id not in names_in(others) and (a.id == p or a.id not in facts.own)


def _assigns(names, values, span) -> list[A.Stmt]:
    """`name = value` for each pair, but none for a result already computed under its name."""
    return [A.Assign(n, v, span) for n, v in zip(names, values) if not (isinstance(v, A.Name) and v.id == n)]

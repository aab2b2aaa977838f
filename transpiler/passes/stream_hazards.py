"""The write/read hazard proofs of streamed tiles (used by plan_streams).

A pipeline loop copies a streamed tile into shared memory S - 1 iterations before the iteration
that reads it. These functions decide, from the typed AST alone, whether doing so can change what
the program computes: whether a name is a per-iteration value of a loop (`local_to`,
`outside_loops`), and whether a tensor the kernel writes can still be read ahead
(`rows_ahead_disjoint`). Needs: infer_shapes (types on every expression) and check_constraints.
Guarantees nothing of its own: each function answers one question and never rewrites.
"""
from __future__ import annotations

from .. import ast as A
from ..exprs import affine, const_int
from ..explain import walk_stmts
from .base import Walker, stored_tensors


def assigned(block) -> set:
    """The names assigned (and the loop variables bound) anywhere under `block`."""
    names: set = set()

    class _A(Walker):
        def on_Assign(self, st):
            names.add(st.name)

        def on_Store(self, st):  # `old = atomic_add(...)` assigns old
            if st.result is not None:
                names.add(st.result)

        def on_For(self, st):
            names.add(st.var)
    _A().walk(block)
    return names


def assigned_count(node, name) -> int:
    """How many assignments to `name` there are under `node`."""
    n = [0]

    class _C(Walker):
        def on_Assign(self, st):
            n[0] += st.name == name

        def on_Store(self, st):
            n[0] += st.result == name
    _C().walk(node)
    return n[0]


def mentions(node, name, skip_local: bool = False) -> int:
    """Assignments to and reads of `name` under `node`; with skip_local, not inside the
    loops where it is a per-iteration value."""
    n = [0]

    class _M(Walker):
        def on_For(self, loop):
            return False if skip_local and local_to(loop, name) else None

        def on_Assign(self, st):
            n[0] += st.name == name

        def on_Store(self, st):
            n[0] += st.result == name

        def on_Name(self, e):
            n[0] += e.id == name
    _M().walk(node)
    return n[0]


def local_to(loop, name) -> bool:
    """`name`'s first mention in the loop body is a top-level assignment not reading it."""
    for x in loop.body.stmts:
        if mentions(x, name):
            return isinstance(x, A.Assign) and x.name == name and not mentions(x.value, name)
    return False


def outside_loops(node, name) -> int:
    """Mentions of `name` that are not inside a loop where it is a per-iteration value."""
    return mentions(node, name, skip_local=True)


def nested_loops(body) -> set:
    """ids of the loops under `body` that are inside another loop."""
    nested: set = set()

    class _Nested(Walker):
        def __init__(self):
            self.depth = 0

        def on_For(self, f):
            if self.depth:
                nested.add(id(f))
            self.depth += 1
            self.walk(f.body)
            self.depth -= 1
            return False
    _Nested().walk(body)
    return nested


def rows_ahead_disjoint(kernel_body, nested: set, f, load, at: int) -> bool:
    """Whether streaming `load` (of a tensor the kernel writes) one or more iterations ahead
    is safe: the loop f is not inside another loop (`nested`: nested_loops of the kernel body),
    has a positive compile-time step, every store to the tensor is in f's body and writes, on the
    axis of the load's row slice `var + d : var + d + R`, an extent `var + c : var + c + L` (or the
    element `var + c`) that ends by `var + step + d`. A copy for iteration var + g (g >= step) then
    reads rows from var + g + d on, past everything iterations up to var wrote (and rows no earlier
    iteration writes later): it can never read a value before the store that makes it. Within an
    iteration the load (the body's statement `at`) must come before every store to the tensor:
    its tile is read from the stage copied ahead, not after this iteration's stores. No loop in the
    body may rebind the loop variable (the row offsets are matched by name).
    (rope_inplace: each iteration rotates rows h : h + HB in place, the next reads h + HB on.)"""
    step = const_int(f.step)
    if id(f) in nested or step is None or step <= 0:
        return False
    if any(isinstance(st, A.Assign) and st.name == f.var or isinstance(st, A.For) and st.var == f.var
           for st, _ in walk_stmts(f.body)):
        return False
    name = load.base.id

    def offset(e) -> int | None:  # c when e is `var + c`
        a = affine(e)
        return a.const if a.terms == ((f.var, 1),) else None

    axis = next(a for a, it in enumerate(load.items) if isinstance(it, A.Slice))
    sl = load.items[axis]
    d = offset(sl.start) if sl.start is not None else None
    if d is None:
        return False
    stores = [st for st, _ in walk_stmts(kernel_body) if isinstance(st, A.Store) and name in stored_tensors(st)]
    # the statements from the load on: a store to the tensor must be one of them or nested in one
    after = {id(st) for st, _ in walk_stmts(A.Block(f.body.stmts[at + 1:]))}
    for st in stores:
        t = st.target
        if id(st) not in after or not (isinstance(t.base, A.Name) and t.base.id == name):
            return False
        if len(t.items) != len(load.items):
            return False
        it = t.items[axis]
        if isinstance(it, A.Slice):
            c = offset(it.start) if it.start is not None else None
            n = const_int(A.BinOp(A.BinOpKind.SUB, it.stop, it.start)) if it.stop is not None else None
        else:
            c, n = offset(it), 1
        if c is None or n is None or c + n > step + d:
            return False
    return True

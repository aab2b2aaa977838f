"""verify(): the IR invariants after each pass; run after every pass in the tests.

After infer_dtypes every expression has a dtype; after infer_shapes every value has a
static shape (tensors: symbolic dims); after assign_layouts every tile has a memory space
and a layout, and every scalar is uniform; after plan_barriers every top-level statement has its barrier.
"""
from __future__ import annotations

from . import ast as A
from .passes.base import Walker
from .types import TyWhat



class IRInvariantError(AssertionError):
    """The compiler broke its own IR contract (a bug in tilex, not in the user's program)."""


def verify(program: A.Program, after: str) -> None:
    """Check the invariants of every pass up to `after` (a name of pipeline.PASS_NAMES, whose order it reads)."""
    from .pipeline import PASS_NAMES  # the pipeline calls verify: its order, read when called (no import cycle)

    if after not in PASS_NAMES:
        raise ValueError(f"verify: unknown pass '{after}' (passes: {', '.join(PASS_NAMES)})")
    done = frozenset(PASS_NAMES[: PASS_NAMES.index(after) + 1])
    for k in program.kernels:
        if "plan_barriers" in done and len(getattr(k.info.sync, "stmts", ())) != len(k.body.stmts):
            raise IRInvariantError(f"after {after}: kernel '{k.name}' has no barrier for each top-level statement")
        _Check(done, after, k.name).walk(k.body)
        for e in k.where + k.grid:
            _Check(done, after, k.name).walk(e)


class _Check(Walker):
    def __init__(self, done: frozenset, after: str, kernel: str):
        self.done, self.after, self.kernel = done, after, kernel

    def _bad(self, node, what):
        raise IRInvariantError(f"after {self.after}, in kernel {self.kernel}: {type(node).__name__} at {node.span} {what}")

    def _expr(self, e: A.Expr):
        if isinstance(e, (A.Slice, A.NewAxis)):
            return
        done = self.done
        if "resolve_names" in done and isinstance(e, A.Name) and e.kind is A.NameKind.UNRESOLVED:
            self._bad(e, "is unresolved")
        if "infer_dtypes" in done and (e.ty is None or e.ty.dtype is None):
            self._bad(e, "has no dtype")
        if "infer_shapes" in done and e.ty.what in (TyWhat.VALUE, TyWhat.TENSOR, TyWhat.TYPE) and e.ty.shape is None:
            self._bad(e, "has no shape")
        if "infer_shapes" in done and e.ty.what == TyWhat.VALUE and not all(isinstance(d, int) for d in e.ty.shape):
            self._bad(e, f"has a non-static shape {e.ty.shape}")
        if "assign_layouts" in done and e.ty.what == TyWhat.VALUE:
            if e.ty.space is None:
                self._bad(e, "has no memory space")
            if e.ty.shape and e.ty.layout is None:
                self._bad(e, "is a tile without a layout")

    def on_Return(self, s):  # and the other statements only a fn has
        if "inline_functions" in self.done:
            self._bad(s, "is a fn statement left after inline_functions")

    on_MultiAssign = on_CallStmt = on_Return

    def __getattr__(self, name):
        if name.startswith("on_"):
            return lambda node: self._expr(node) if isinstance(node, A.Expr) else None
        raise AttributeError(name)

"""verify(): the IR invariants after each pass; run after every pass in the tests.

After infer_dtypes every expression has a dtype; after infer_shapes every value has a
static shape (tensors: symbolic dims); after assign_layouts every tile has a memory space
and a layout, and every scalar is uniform; after plan_barriers every top-level statement has its barrier.
"""
from __future__ import annotations

from . import ast as A
from .passes.base import Walker
from .types import TyWhat

_ORDER = ["parse", "inline_functions", "resolve_names", "infer_dtypes", "infer_shapes", "check_constraints", "plan_matmul", "choose_threads",
          "choose_mma", "place_resident", "plan_streams", "assign_layouts", "plan_tma", "budget_smem", "plan_barriers"]


_RESOLVED = _ORDER.index("resolve_names")  # then infer_dtypes, infer_shapes


class IRInvariantError(AssertionError):
    """The compiler broke its own IR contract (a bug in tilex, not in the user's program)."""


def verify(program: A.Program, after: str) -> None:
    stage = _ORDER.index(after)
    for k in program.kernels:
        if stage >= _ORDER.index("plan_barriers") and len(getattr(k.info.sync, "stmts", ())) != len(k.body.stmts):
            raise IRInvariantError(f"after {after}: kernel '{k.name}' has no barrier for each top-level statement")
        _Check(stage, after, k.name).walk(k.body)
        for e in k.where + k.grid:
            _Check(stage, after, k.name).walk(e)


class _Check(Walker):
    def __init__(self, stage: int, after: str, kernel: str):
        self.stage, self.after, self.kernel = stage, after, kernel

    def _bad(self, node, what):
        raise IRInvariantError(f"after {self.after}, in kernel {self.kernel}: {type(node).__name__} at {node.span} {what}")

    def _expr(self, e: A.Expr):
        if isinstance(e, (A.Slice, A.NewAxis)):
            return
        if self.stage >= _RESOLVED and isinstance(e, A.Name) and e.kind is A.NameKind.UNRESOLVED:
            self._bad(e, "is unresolved")
        if self.stage >= _RESOLVED + 1 and (e.ty is None or e.ty.dtype is None):
            self._bad(e, "has no dtype")
        if self.stage >= _RESOLVED + 2 and e.ty.what in (TyWhat.VALUE, TyWhat.TENSOR, TyWhat.TYPE) and e.ty.shape is None:
            self._bad(e, "has no shape")
        if self.stage >= _RESOLVED + 2 and e.ty.what == TyWhat.VALUE and not all(isinstance(d, int) for d in e.ty.shape):
            self._bad(e, f"has a non-static shape {e.ty.shape}")
        if self.stage >= _ORDER.index("assign_layouts") and e.ty.what == TyWhat.VALUE:
            if e.ty.space is None:
                self._bad(e, "has no memory space")
            if e.ty.shape and e.ty.layout is None:
                self._bad(e, "is a tile without a layout")

    def on_Return(self, s):  # and the other statements only a fn has
        if self.stage >= 1:
            self._bad(s, "is a fn statement left after inline_functions")

    on_MultiAssign = on_CallStmt = on_Return

    def __getattr__(self, name):
        if name.startswith("on_"):
            return lambda node: self._expr(node) if isinstance(node, A.Expr) else None
        raise AttributeError(name)

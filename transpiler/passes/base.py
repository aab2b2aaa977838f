"""The pass driver: a visitor that rebuilds the tree and attaches spans to errors.

A pass subclasses `Rewriter` and defines `visit_<NodeClass>` for the nodes it cares about;
every other node is rebuilt from its visited children. A `SemanticError` raised anywhere
below becomes a `CompileError` at the span of the innermost node being visited.
"""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from .. import ast as A
from ..diagnostics import CompileError, SemanticError


class Rewriter:
    """Rebuilds a tree bottom-up; subclasses override `visit_<Class>` methods."""

    def visit(self, node: Any) -> Any:
        if node is None:
            return None
        method = getattr(self, "visit_" + type(node).__name__, None)
        try:
            if method is not None:
                return method(node)
            return self.generic(node)
        except SemanticError as e:
            raise CompileError(e.message, getattr(node, "span", None), e.notes) from None

    def generic(self, node: Any) -> Any:
        """Visit every child node and rebuild `node` if any changed."""
        changes = {}
        for f in fields(node):
            if f.name in ("span", "ty", "info"):
                continue
            old = getattr(node, f.name)
            new = self._visit_field(old)
            if new is not old:
                changes[f.name] = new
        return replace(node, **changes) if changes else node

    def _visit_field(self, v: Any) -> Any:
        if isinstance(v, (A.Expr, A.Stmt, A.Block, A.Param, A.TypeExpr)):
            return self.visit(v)
        if isinstance(v, tuple) and v:
            out = tuple(self._visit_field(x) for x in v)
            return v if all(a is b for a, b in zip(out, v)) else out
        return v


class Walker:
    """Read-only traversal: calls `on_<Class>` for each node, children first unless told."""

    def walk(self, node: Any) -> None:
        if node is None:
            return
        method = getattr(self, "on_" + type(node).__name__, None)
        try:
            if method is not None and method(node) is False:
                return  # the handler walked (or skipped) the children itself
            for f in fields(node):
                if f.name in ("span", "ty", "info"):
                    continue
                self._walk_field(getattr(node, f.name))
        except SemanticError as e:
            raise CompileError(e.message, getattr(node, "span", None), e.notes) from None

    def _walk_field(self, v: Any) -> None:
        if isinstance(v, (A.Expr, A.Stmt, A.Block, A.Param, A.TypeExpr)):
            self.walk(v)
        elif isinstance(v, tuple):
            for x in v:
                self._walk_field(x)


def name_nodes(e) -> list:
    """Every Name node under `e` (a node or a tuple of them)."""
    out: list = []

    class _N(Walker):
        def on_Name(self, n):
            out.append(n)
    for x in (e if isinstance(e, tuple) else (e,)):
        _N().walk(x)
    return out


def names_in(e) -> set:
    """The ids of every Name under `e`."""
    return {n.id for n in name_nodes(e)}


def stored_tensors(node) -> set:
    """Names of the tensors stored into under `node` (`t[...] = ...`, through views)."""
    out: set = set()

    class _Stores(Walker):
        def on_Store(self, st):
            t = st.target
            while isinstance(t, (A.Index, A.Attr)):
                t = t.base if isinstance(t, A.Index) else t.obj
            if isinstance(t, A.Name):
                out.add(t.id)
    _Stores().walk(node)
    return out


def for_loops(node) -> list:
    """Every `for` loop under `node` (a kernel body, a block), in pre-order: an outer loop before the loops in it,
    and those in program order. The passes number and filter a kernel's loops through it."""
    out: list = []

    class _Loops(Walker):
        def on_For(self, f):
            out.append(f)
    _Loops().walk(node)
    return out


def fail(message: str, *notes: str) -> None:
    raise SemanticError(message, notes)

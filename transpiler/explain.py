"""Readable views of the kernel IR: `dump_ir` (text, for `tilex translate --dump-after`)
and `explain` (plain data, for `tilex explain`).

Both read only the IR (`tilex.ast`) and its annotations. Annotations a pass has not
filled in yet (no `ty` before `infer_dtypes`, no `ty.space`/`ty.layout`/`kernel.info`
before `assign_layouts`, `smem_bytes` before `budget_smem`) are left out of the dump and reported as None by `explain`, so
both work after any pass.
"""
from __future__ import annotations

import math
from typing import Any, Iterator

from . import ast as A
from .exprs import unparse, unparse_stmt
from .spec import ParamKind
from .types import DType, TyWhat

__all__ = ["dump_ir", "explain", "has_matmul", "has_product", "walk_exprs", "walk_stmts"]


# ---------------------------------------------------------------- traversal
def walk_exprs(e: A.Expr | None) -> Iterator[A.Expr]:
    """`e` and every sub-expression, pre-order."""
    if e is None:
        return
    yield e
    for c in e.children():
        if isinstance(c, A.Expr):
            yield from walk_exprs(c)


def stmt_exprs(s: A.Stmt) -> tuple[A.Expr, ...]:
    """The top-level expressions of one statement (not those of nested blocks)."""
    if isinstance(s, A.Assign):
        return (s.value,)
    if isinstance(s, A.Store):
        return (s.target, s.value)
    if isinstance(s, A.For):
        return (s.start, s.stop, s.step)
    if isinstance(s, A.If):
        return (s.cond,)
    return ()


def walk_stmts(block: A.Block | None, depth: int = 0) -> Iterator[tuple[A.Stmt, int]]:
    """(statement, nesting depth) for every statement, nested blocks included, in order."""
    if block is None:
        return
    for s in block.stmts:
        yield s, depth
        if isinstance(s, A.For):
            yield from walk_stmts(s.body, depth + 1)
        elif isinstance(s, A.If):
            yield from walk_stmts(s.then, depth + 1)
            yield from walk_stmts(s.orelse, depth + 1)


# ---------------------------------------------------------------- small renderers
def has_product(block: A.Block | None) -> bool:
    """True if any expression in `block`, nested blocks included, is an `@`."""
    return any(isinstance(e, A.BinOp) and e.op is A.BinOpKind.MATMUL
               for s, _ in walk_stmts(block) for top in stmt_exprs(s) for e in walk_exprs(top))


def has_matmul(kernel: A.Kernel) -> bool:
    """True if any expression of the kernel is an `@` (its outputs then get matmul tolerances)."""
    return has_product(kernel.body)


def _space(ty) -> str | None:
    space = getattr(ty, "space", None)
    if space is None:
        return None
    return str(getattr(space, "value", space))


def _layout(ty) -> str | None:
    layout = getattr(ty, "layout", None)
    if layout is None:
        return None
    return " ".join(str(layout).split())  # one line


def show_ty(ty) -> str:
    """`ty.show()` plus the memory space and layout when they are set."""
    if ty is None:
        return "?"
    text = ty.show()
    space, layout = _space(ty), _layout(ty)
    if space is not None:
        text += f" @{space}"
    if layout is not None:
        text += f" layout={layout}"
    return text


def _param_text(p: A.Param) -> str:
    t = p.type
    text = t.dtype if t.dims is None else f"{t.dtype}[{', '.join(unparse(d) for d in t.dims)}]"
    if p.is_out:
        text = "out " + text
    if p.default is not None:
        text += f" = {unparse(p.default)}"
    return text


def _value_text(v) -> str:
    """A compile-time parameter's value as written: 256, True, bf16 (a dtype parameter's)."""
    return str(v) if isinstance(v, DType) else repr(v)


def _cparam_text(c: A.CParam) -> str:
    return f"{c.name}: {c.kind}" + ("" if c.default is None else f" = {_value_text(c.default)}")


def _stmt_head(s: A.Stmt) -> str:
    return unparse_stmt(s) + (" {" if isinstance(s, (A.For, A.If)) else "")


def _annotations(exprs) -> str:
    seen: dict[str, None] = {}
    for top in exprs:
        for e in walk_exprs(top):
            if e.ty is None:
                continue
            seen.setdefault(f"`{unparse(e)}` {show_ty(e.ty)}", None)
    return "; ".join(seen)


def _line(n: int) -> str:
    return f"{n:>4} | " if n > 0 else "     | "


# ---------------------------------------------------------------- dump_ir
def dump_ir(program: A.Program) -> str:
    """The IR as text: per kernel its header, params and one line per statement.

    Statement lines are ``LINE |  <statement>    # `expr` type; `expr` type; ...`` where every
    (distinct) sub-expression is listed with `ty.show()`, plus `@space` and `layout=...`
    once the memory pass has set them.
    """
    out: list[str] = []
    for k in program.kernels:
        if out:
            out.append("")
        cps = f"<{', '.join(_cparam_text(c) for c in k.cparams)}>" if k.cparams else ""
        out.append(f"kernel {k.name}{cps}    # {k.span.file}:{k.span.line}")
        if k.defines:
            out.append("  defines: " + ", ".join(f"{n} = {_value_text(v)}" for n, v in k.defines))
        if k.symbols:
            out.append("  symbols: " + ", ".join(k.symbols))
        for p in k.params:
            out.append(f"  param {p.name}: {_param_text(p)}")
        for c in k.where:
            out.append(f"  where {unparse(c)}")
        out.append(f"  grid ({', '.join(unparse(g) for g in k.grid)}{',' if len(k.grid) == 1 else ''})")
        info = k.info
        if info is not None:
            items = [f"{name} = {_get(info, name)}" for name in ("threads", "smem_bytes")
                     if _get(info, name) is not None]
            if items:
                out.append("  info: " + ", ".join(items))
            sync = _get(info, "sync")  # plan_barriers: the barrier of each top-level statement
            if sync is not None:
                runs = [(s, b) for i, (s, b) in enumerate(zip(k.body.stmts, sync.stmts)) if i == 0 or b != sync.stmts[i - 1]]
                out.append("  barriers: " + "; ".join(
                    ("__syncthreads" if b.threads is None else f"bar.sync {b.id}, {b.threads}") + f" from line {s.span.line}"
                    for s, b in runs))
        _dump_block(k.body, 1, out)
    return "\n".join(out) + "\n"


def _dump_block(block: A.Block | None, depth: int, out: list[str]) -> None:
    if block is None:
        return
    for s in block.stmts:
        head = "    " * depth + _stmt_head(s)
        notes = _annotations(stmt_exprs(s))
        out.append(_line(s.span.line) + head + (f"    # {notes}" if notes else ""))
        if isinstance(s, A.For):
            _dump_block(s.body, depth + 1, out)
            out.append(_line(0) + "    " * depth + "}")
        elif isinstance(s, A.If):
            _dump_block(s.then, depth + 1, out)
            if s.orelse is not None:
                out.append(_line(0) + "    " * depth + "} else {")
                _dump_block(s.orelse, depth + 1, out)
            out.append(_line(0) + "    " * depth + "}")


# ---------------------------------------------------------------- explain
def _get(obj: Any, name: str) -> Any:
    """An annotation field of `kernel.info` (an object or a dict), or None."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if hasattr(v, "value") and not isinstance(v, (list, tuple, dict)):  # an Enum
        return _jsonable(v.value)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def slots_per_thread(layout: Any) -> int | None:
    """Elements of a tile each thread holds, from the layout's `slots` (an int or a sequence)."""
    slots = getattr(layout, "slots", None)
    if slots is None:
        return None
    if isinstance(slots, bool):
        return None
    if isinstance(slots, int):
        return slots
    try:
        return len(slots)
    except TypeError:
        return None


def registers_per_thread(ty) -> int | None:
    """32-bit registers per thread for a tile: slots x ceil(itemsize / 4); None without slots."""
    n = slots_per_thread(getattr(ty, "layout", None))
    if n is None:
        return None
    itemsize = ty.dtype.itemsize if ty.dtype is not None else 4
    return n * max(1, -(-itemsize // 4))


def _tile_rows(k: A.Kernel) -> list[dict]:
    rows: list[dict] = []
    seen: set = set()
    for s, _depth in walk_stmts(k.body):
        tops = stmt_exprs(s)
        for top in tops:
            for e in walk_exprs(top):
                ty = e.ty
                if ty is None or ty.what != TyWhat.VALUE or ty.shape is None:
                    continue
                # every tile; scalars only when bound to a name (`inv = rsqrt(...)`)
                if not ty.shape and not (isinstance(s, A.Assign) and e is s.value):
                    continue
                text = unparse(e)
                key = (e.span.line, text, ty.show())
                if key in seen:
                    continue
                seen.add(key)
                rows.append({
                    "line": e.span.line,
                    "expr": text,
                    "name": s.name if isinstance(s, A.Assign) and e is s.value else None,
                    "dtype": str(ty.dtype) if ty.dtype is not None else None,
                    "shape": list(ty.shape),
                    "space": _space(ty),
                    "layout": _layout(ty),
                    "slots": slots_per_thread(ty.layout),
                    "regs_per_thread": registers_per_thread(ty) if _space(ty) in (None, "registers", "fragment") else None,
                })
    return rows


def _matmul_loops(k: A.Kernel) -> list[dict]:
    """The tensor-core main loops plan_matmul found: strategy, tiles, pipeline depth, why not wgmma, and the
    batch indices of batched operands (`{"a": ["z"]}` for `a[z, m : m + BM, k : k + BK]`)."""
    out = []
    for s, _ in walk_stmts(k.body):
        p = getattr(s, "plan", None)
        if p is not None:
            batch = {op.tensor: [unparse(i) for i in op.batch]
                     for pr in p.products for op in (pr.a, pr.b) if getattr(op, "batch", ())}
            out.append({"line": s.span.line, "strategy": p.strategy, "tile": [p.bm, p.bn, p.bk], "stages": p.stages,
                        "products": [pr.acc for pr in p.products], "warps": p.consumers // 32,
                        "producer_warps": p.producers // 32, "smem_bytes": p.smem_bytes, "note": p.why or None,
                        "batch": batch, **_inlined(s.span)})
    return out


def _inlined(span) -> dict:
    """For code inlined from a fn: {"file": the fn's file, "inlined_at": ["in fn NAME, inlined at FILE:LINE", ...]}
    (innermost first); else {}."""
    if not span.called_from:
        return {}
    return {"file": span.file, "inlined_at": [f"in fn {name}, inlined at {site.file}:{site.line}"
                                              for name, site in span.called_from]}


def _streamed_loops(k: A.Kernel) -> list[dict]:
    """The pipeline loops that stream tiles into shared memory (plan_streams' StreamTile) or multiply tiles
    on tensor cores: which tiles, how many stages, which are read from there into registers, which are in
    128-byte swizzled rows, the bytes of one stage of each, whether TMA fills the ring (else cp.async; in a
    wgmma loop, why not TMA) and how the products run (choose_mma's StreamedMma: "wgmma" or "mma", and why
    not wgmma)."""
    out = []
    for s, _ in walk_stmts(k.body):
        stream = getattr(s, "stream", ())
        mma = getattr(s, "mma", None)
        if stream or mma is not None:
            out.append({"line": s.span.line, "stages": stream[0].stages if stream else None, "asked": s.stages,
                        "tiles": [t.name for t in stream], "into_registers": [t.name for t in stream if t.regs],
                        "gathered": [t.name for t in stream if t.gather is not None],
                        "swizzled": [t.name for t in stream if t.swizzled],
                        "stage_bytes": [t.stage_bytes for t in stream],
                        "tma": bool(stream) and all(t.tma_box for t in stream),
                        "tma_note": next((t.tma_why for t in stream if t.tma_why), None),
                        "products": None if mma is None else mma.strategy,
                        "products_note": None if mma is None else (mma.why or None)})
    return out


def _unplanned_loops(k: A.Kernel) -> list[dict]:
    """The `pipeline` loops with products that plan_matmul did not plan as tensor-core main loops and that neither
    stream tiles nor multiply register tiles on tensor cores: why not (`For.not_main`), e.g. an fp8 product whose
    BK does not suit wgmma."""
    return [{"line": s.span.line, "why": s.not_main, **_inlined(s.span)} for s, _ in walk_stmts(k.body)
            if isinstance(s, A.For) and s.not_main and s.plan is None and not s.stream and s.mma is None
            and has_product(s.body)]


def explain(program: A.Program) -> list[dict]:
    """One dict per kernel (JSON-ready): symbols, params, constraints, grid, launch shape, tiles.

    `threads` and `smem_bytes` come from the memory pass (`kernel.info`); they are None
    when that pass has not annotated the kernel. In each tile row `space` is
    `ty.space.value` and `layout` is `str(ty.layout)` (None when unset).
    """
    result = []
    for k in program.kernels:
        info = k.info
        params = []
        for p in k.params:
            t = p.type
            params.append({
                "name": p.name,
                "kind": ParamKind.SCALAR if t.dims is None else ParamKind.TENSOR,
                "dtype": t.dtype,
                "dims": None if t.dims is None else [unparse(d) if not isinstance(d, A.IntLit) else d.value
                                                     for d in t.dims],
                "out": p.is_out,
                "default": None if p.default is None else unparse(p.default),
                "line": p.span.line,
            })
        extra = {}
        for name in ("num_warps", "regs_per_thread", "registers_per_thread"):
            v = _get(info, name)
            if v is not None:
                extra[name] = _jsonable(v)
        result.append({
            "kernel": k.name,
            "file": k.span.file,
            "line": k.span.line,
            "defines": {n: _jsonable(v) for n, v in k.defines},
            "symbols": list(k.symbols),
            "params": params,
            "constraints": [unparse(c) for c in k.where],
            "grid": [unparse(g) for g in k.grid],
            "threads": _jsonable(_get(info, "launch_threads")),
            "matmul_loops": _matmul_loops(k),
            "streamed_loops": _streamed_loops(k),
            "unplanned_loops": _unplanned_loops(k),
            "smem_bytes": _jsonable(_get(info, "smem_bytes")),
            "info": extra,
            "tiles": _tile_rows(k),
        })
    return result

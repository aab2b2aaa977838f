"""Build the host-side KernelSpec of a checked kernel (params, symbols, constraints, grid)."""
from __future__ import annotations

from functools import lru_cache

from . import ast as A
from .exprs import to_python, unparse
from .spec import ConstraintSpec, KernelSpec, ParamKind, ParamSpec


@lru_cache(maxsize=4)
def _lines(source_text: str) -> tuple[str, ...]:
    """The source's lines, split once per source (translate asks once per kernel: a 10,000-kernel file
    must not be split 10,000 times)."""
    return tuple(source_text.splitlines())


def make_spec(k: A.Kernel, source_text: str | None = None) -> KernelSpec:
    """The launch contract of kernel `k` (after the semantic passes)."""
    params = []
    for p in k.params:
        dims = ()
        if p.type.dims is not None:
            dims = tuple(d.value if isinstance(d, A.IntLit) else d.id for d in p.type.dims)
        default = p.default.value if isinstance(p.default, (A.IntLit, A.FloatLit, A.BoolLit)) else None
        kind = ParamKind.TENSOR if p.type.dims is not None else ParamKind.SCALAR
        params.append(ParamSpec(p.name, kind, p.type.dtype, dims, p.is_out, default))
    lines = _lines(source_text or "")
    constraints = []
    for c in k.where:
        text = lines[c.span.line - 1][c.span.col - 1:c.span.end_col - 1] if 0 < c.span.line <= len(lines) and c.span.end_line == c.span.line else unparse(c)
        constraints.append(ConstraintSpec(to_python(c), text, c.span.line))
    info = k.info
    return KernelSpec(
        name=k.name,
        params=tuple(params),
        symbols=k.symbols,
        constraints=tuple(constraints),
        grid=tuple(to_python(g) for g in k.grid),
        threads=info.launch_threads if info is not None else 128,
        smem_bytes=getattr(info, "smem_bytes", 0),
        defines=k.defines,
        source_file=k.span.file,
        line=k.span.line,
        tma=getattr(info, "tma_maps", ()),  # plan_tma's, kept in budget_smem's KernelMemory
    )

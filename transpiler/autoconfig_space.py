"""The search space of the compile-time parameters left to tilex: each `auto` parameter's role (tile size, loop
step, pipeline depth, warps), its candidates (declared `in (...)` or implied by the role) and the model buckets
of the sizes a choice is made for.
"""
from __future__ import annotations

from typing import Mapping

from . import ast as A
from .diagnostics import CompileError
from .explain import stmt_exprs as _stmt_exprs, walk_exprs as _walk, walk_stmts
from .types import StrEnum


class Role(StrEnum):
    """What an `auto` parameter is to its kernel (`role`)."""

    TILE = "tile"  # a tile dimension or a slice extent
    STEP = "step"  # the step of a loop (a K step)
    STAGES = "stages"  # the depth of a pipeline loop
    WARPS = "warps"  # warps per block


IMPLIED = {  # role -> candidate values when a parameter says `= auto`
    Role.TILE: (16, 32, 64, 128, 256),
    Role.STEP: (32, 64, 128),
    Role.STAGES: (2, 3, 4),
    Role.WARPS: (4, 8),
}


# ---------------------------------------------------------------- search spaces
def auto_params(k: A.Kernel) -> list[A.CParam]:
    return [c for c in k.cparams if c.auto]


def role(k: A.Kernel, name: str) -> Role | None:
    """What an `auto` parameter is, from how the (parsed) kernel uses it: the `stages` of a pipeline loop, the
    step of a loop (a K step), WARPS, or a tile size (a tile dimension or a slice extent); None otherwise."""
    if name.upper() in ("WARPS", "NUM_WARPS") or any(c.name == name and c.kind == A.CParamKind.WARPS
                                                     for c in k.cparams):
        return Role.WARPS
    roles: set[Role] = set()

    def mentions(e) -> bool:
        return any(isinstance(x, A.Name) and x.id == name for x in _walk(e))

    for s, _ in walk_stmts(k.body):
        if isinstance(s, A.For):
            if s.pipelined and isinstance(s.stages, A.Expr) and mentions(s.stages):
                roles.add(Role.STAGES)
            if mentions(s.step):
                roles.add(Role.STEP)
        for top in _stmt_exprs(s):
            for e in _walk(top):
                if isinstance(e, A.Call) and e.func in ("pipeline", "range"):
                    if any(kw == "stages" and mentions(v) for kw, v in e.kwargs):
                        roles.add(Role.STAGES)
                    if len(e.args) >= 3 and mentions(e.args[2]):
                        roles.add(Role.STEP)
                elif isinstance(e, A.TileTypeExpr) and any(mentions(d) for d in e.dims):
                    roles.add(Role.TILE)
                elif isinstance(e, A.Slice) and e.stop is not None and mentions(e.stop):
                    roles.add(Role.TILE)
    for r in (Role.STAGES, Role.STEP, Role.TILE):  # the first that applies
        if r in roles:
            return r
    return None


def declared_space(k: A.Kernel) -> dict[str, tuple]:
    """{auto parameter: its candidates}: the declared `in (...)` values, else the implied ones of its role."""
    from .passes.resolve_names import check_space

    out = {}
    for c in auto_params(k):
        check_space(c)
        if c.space is not None:
            out[c.name] = tuple(c.space)
            continue
        r = role(k, c.name)
        if r is None:
            raise CompileError(f"tilex cannot imply a search space for '{c.name}' (it is not a tile size, a loop "
                               "step, a pipeline depth or WARPS)", c.span,
                               (f"declare one: `{c.name}: {c.kind} in (V1, V2, ...)`",))
        out[c.name] = IMPLIED[r]
    return out


# ---------------------------------------------------------------- buckets
def model_bucket(n: int) -> int:
    """The size the model evaluates for `n`: up to 16 the next power of two, above it the next of 4, 5, 6 or 7
    times a power of two (four buckets an octave: 896, 5120 and 14336 are their own, 13824 -> 14336)."""
    n = int(n)
    if n <= 16:
        return 1 if n <= 1 else 1 << (n - 1).bit_length()
    p = 1 << (n.bit_length() - 3)  # n in [4p, 8p)
    return -(-n // p) * p


def bucket_of(shapes: Mapping[str, int]) -> dict[str, int]:
    return {s: model_bucket(v) for s, v in sorted(shapes.items())}

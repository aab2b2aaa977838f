"""The launch parameters a kernel asks for (warps per block, resident blocks per SM), read by one function.

A kernel declares them as compile-time parameters of type `warps` and `min_blocks`:

    kernel softmax<BLOCK: int = 1024, NW: warps = 8, MB: min_blocks = 2>(...)

They are ints like any other compile-time parameter (`-D NW=4`, tunable, usable in the body). The older
spelling, an int parameter named `WARPS` or `MIN_BLOCKS`, is still accepted (deprecated: docs/language.md).
`requested_launch` is the only reader; choose_threads and plan_matmul take the values from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import ast as A
from .diagnostics import CompileError

K = A.CParamKind

# the deprecated spelling: a compile-time parameter with one of these names is that launch parameter
LEGACY_NAMES = {"WARPS": K.WARPS, "MIN_BLOCKS": K.MIN_BLOCKS}


@dataclass(frozen=True)
class KernelLaunch:
    """What a kernel's launch parameters ask for (None: not declared; the compiler chooses)."""

    warps: object = None  # warps per block (choose_threads checks it: a power of two, 1 to 32)
    min_blocks: object = None  # resident blocks per SM (choose_threads.min_blocks checks it)
    names: dict = field(default_factory=dict, compare=False)  # field -> the parameter that gave it, for messages


def launch_role(cp: A.CParam) -> A.CParamKind | None:
    """K.WARPS / K.MIN_BLOCKS when `cp` is that launch parameter (by its type, or by its legacy name)."""
    if cp.kind in (K.WARPS, K.MIN_BLOCKS):
        return K(cp.kind)
    return LEGACY_NAMES.get(cp.name)


def requested_launch(k: A.Kernel) -> KernelLaunch:
    """The launch parameters of `k` with their values (`k.defines`, after resolve_names); at most one of each."""
    values = dict(k.defines)
    found: dict = {}
    names: dict = {}
    for cp in k.cparams:
        role = launch_role(cp)
        if role is None or cp.name not in values:
            continue
        if role.value in found:
            raise CompileError(f"kernel '{k.name}' declares two {role.value} parameters ('{names[role.value]}' and "
                               f"'{cp.name}')", cp.span)
        found[role.value], names[role.value] = values[cp.name], cp.name
    return KernelLaunch(**found, names=names)

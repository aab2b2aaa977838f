"""A kernel's dtype parameters (`<T: dtype = bf16>`): those a set of defines leaves free (bound per call from
the arguments, `dtype_binding`) and those it changes from their defaults (the tuned store's key)."""
from __future__ import annotations

from . import ast as A


def changed_dtypes(kernel: A.Kernel, defines) -> dict[str, str]:
    """The dtype parameters `defines` sets to other than their defaults, {name: dtype}: what tells apart the
    tuned configurations of one source (`tune_store.tuned_kernel`)."""
    return {c.name: str(defines[c.name]) for c in kernel.cparams
            if c.kind == A.CParamKind.DTYPE and c.name in defines and str(defines[c.name]) != str(c.default)}


def free_dtype_params(kernel: A.Kernel, defines: dict) -> tuple[str, ...]:
    """The dtype parameters of `kernel` that `defines` does not set (the runtime binds them)."""
    return tuple(c.name for c in kernel.cparams if c.kind == A.CParamKind.DTYPE and c.name not in defines)

"""The one place the backend calls kernels: library functions (tilex.stdlib) and generated
modules, on torch CUDA tensors directly (torch's current stream) or, for CPU tensors, through the
NumPy interpreter (bf16 via ml_dtypes, sharing memory with the tensors where it can).

A later session may route these calls through the torch.ops.tilex custom ops (issue 18); nothing
else in the backend knows how a kernel is launched.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

_BF16_VIEW = {torch.bfloat16: torch.int16}


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor (bf16 as ml_dtypes.bfloat16), made contiguous first."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def from_numpy(a: np.ndarray) -> torch.Tensor:
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def _convert(v, fn):
    if isinstance(v, (tuple, list)):
        return type(v)(_convert(x, fn) for x in v)
    return fn(v) if isinstance(v, (torch.Tensor, np.ndarray)) else v


def on_cuda(tensors) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_cuda for t in tensors)


def call_library(fn, *args, **kwargs):
    """`fn` (a tilex.stdlib function) on torch tensors; CPU tensors go through the interpreter."""
    if on_cuda([*args, *kwargs.values()]):
        return fn(*args, **kwargs)
    out = fn(*_convert(args, to_numpy), **{k: _convert(v, to_numpy) for k, v in kwargs.items()})
    return _convert(out, from_numpy)


@functools.lru_cache(maxsize=None)
def module(source: str, defines: tuple):
    """tilex.compile of a generated source with compile-time parameters, once per process, its
    translation and cubins cached on disk (cache.module)."""
    from . import cache

    return cache.module(source, defines)


def launch_generated(source: str, kernel: str, defines: dict, arrays: list, scalars: dict,
                     launched: set | None = None) -> None:
    """Launch a generated kernel; `arrays` (torch, contiguous, outputs included) are written in place.
    `launched` collects (kernel, source, defines) for the graph cache's record."""
    items = tuple(sorted(defines.items()))
    mod = module(source, items)
    if launched is not None:
        launched.add((kernel, source, items))
    if on_cuda(arrays):
        mod.kernel(kernel)(*arrays, **scalars)
        return
    mod.interp(kernel, *[to_numpy(a) for a in arrays], **scalars)

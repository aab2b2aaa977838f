"""The one place the backend calls kernels: library functions (tilex.stdlib) and generated
modules, on torch CUDA tensors directly (torch's current stream) or, for CPU tensors, through the
NumPy interpreter (bf16 via ml_dtypes, sharing memory with the tensors where it can).

A later session may route these calls through the torch.ops.tilex custom ops (issue 18); nothing
else in the backend knows how a kernel is launched.
"""
from __future__ import annotations

import functools
import logging
import os
import time

import numpy as np
import torch

_BF16_VIEW = {torch.bfloat16: torch.int16}
log = logging.getLogger("tilex.backend")


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


def generated_launcher(source: str, kernel: str, defines: dict, launched: set | None, cuda: bool):
    """`launch(arrays, scalars)` for a generated kernel whose operands are CUDA tensors (`cuda`) or CPU ones:
    launch_generated with the module and kernel looked up once (a generated step's launch plan keeps it)."""
    items = tuple(sorted(defines.items()))
    mod = module(source, items)
    if launched is not None:
        launched.add((kernel, source, items))
    if cuda:
        kern = mod.kernel(kernel)
        return lambda arrays, scalars: kern(*arrays, **scalars)
    return lambda arrays, scalars: mod.interp(kernel, *[to_numpy(a) for a in arrays], **scalars)


def _compile(kern) -> float:
    """Compile a runtime Kernel's binary (through the cubin cache); seconds taken."""
    from ..runtime.nvrtc import default_arch

    t0 = time.perf_counter()
    kern.cubin_for(kern.arch or default_arch())
    return time.perf_counter() - t0


def build_all(todo: list, cuda: bool, workers: int | None = None, library: list = ()) -> dict:
    """Translate each generated (source, kernel, defines items) of `todo` once and resolve each library
    job ((label, resolve() -> runtime Kernel), prewarm.py), serially (Python); then on CUDA compile all
    their binaries with a thread pool (NVRTC runs outside the GIL). Logs progress at INFO. Returns
    {"translate_s", "compile_s", "library_builds", "slowest": [(kernel, s), ...]}."""
    t0 = time.perf_counter()
    jobs = []
    for i, (source, kernel, items) in enumerate(todo):
        k = module(source, items).kernel(kernel)
        jobs.append((kernel, getattr(k, "base", k)))  # generated kernels want no launch facts
        if (i + 1) % 16 == 0:
            log.info("tilex backend: translated %d/%d generated kernels", i + 1, len(todo))
    n_lib = 0
    if cuda:
        for label, resolve in library:
            try:
                jobs.append((label, resolve()))
                n_lib += 1
            except Exception as e:  # noqa: BLE001 - prewarming is an optimization: the launch decides
                log.debug("tilex backend: no prewarm for %s: %s", label, e)
    translate_s = time.perf_counter() - t0
    times: list = []
    compile_s = 0.0
    if cuda and jobs:
        from concurrent.futures import ThreadPoolExecutor, as_completed

        n = workers or max(1, min(8, os.cpu_count() or 1))
        t1 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=n) as pool:
            futs = {pool.submit(_compile, kern): label for label, kern in jobs}
            for i, f in enumerate(as_completed(futs)):
                times.append((futs[f], round(f.result(), 3)))
                log.info("tilex backend: built %d/%d %s (%.2f s)", i + 1, len(jobs), futs[f], times[-1][1])
        compile_s = time.perf_counter() - t1
    return {"translate_s": round(translate_s, 3), "compile_s": round(compile_s, 3), "library_builds": n_lib,
            "slowest": sorted(times, key=lambda x: -x[1])[:5]}

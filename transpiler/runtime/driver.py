"""The CUDA driver's cuLaunchKernelEx through ctypes: the direct launch of a pre-built parameter buffer.

CuPy's RawModule call packs its argument list anew on every launch (about 5.5 µs of host time on an
H200 host); a launch plan (`plan.py`) keeps the packed parameters in ctypes storage and the grid, block,
shared memory and stream in a `LaunchConfig` (CUlaunchConfig), and hands their addresses to
cuLaunchKernelEx itself: four arguments, all made once per plan, that ctypes passes as they are
(cuLaunchKernel's eleven cost ~0.4 µs more to convert on a dev CPU; on the H200 host both measured 6.0 µs
per launch of an empty kernel, the driver's own time: benchmarks/host_floor.py). libcuda is opened with
ctypes (as `tma.py` does for cuTensorMapEncodeTiled), so no extra Python package is needed.
`TILEX_DIRECT_LAUNCH=0` in the environment turns the direct launch off (every launch then goes through
CuPy, as before plans). With `TILEX_CFAST_LAUNCHER=1` and the C extension loaded (`tilex.cfast`), the function
`launcher()` returns is its `Launcher` on the same library: the same call, without ctypes' conversions (opt-in:
not yet run on a GPU; the stdlib's C fast path launches from C either way).
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Callable

from ..envflags import switch

ENV = "TILEX_DIRECT_LAUNCH"
C_ENV = "TILEX_CFAST_LAUNCHER"  # 1: launcher() is tilex._cfast.Launcher (see the module docstring)
LIBRARY = "libcuda.so.1"  # the driver library (tests point it at a stand-in)


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h, CUDA >= 12.0): what cuLaunchKernelEx launches with; no launch attributes."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("numAttrs", ctypes.c_uint)]


@lru_cache(maxsize=1)
def launcher() -> Callable[..., int] | None:
    """cuLaunchKernelEx(config, f, kernelParams, extra) -> CUresult, or None when the direct launch is off
    (TILEX_DIRECT_LAUNCH=0) or libcuda cannot be loaded or lacks cuLaunchKernelEx (read once per process).

    No argtypes (their conversion costs more than the call): the caller passes config as a ctypes.pointer to
    a LaunchConfig, f as a ctypes.c_void_p, kernelParams as a ctypes array of void* (passed by address) and
    extra as None. The pointer and the arrays are made once per plan, so a launch converts nothing. With
    TILEX_CFAST_LAUNCHER=1 and the C extension loaded (tilex.cfast: the stdlib loads it) it is
    `_cfast.Launcher(LIBRARY)`, taking the same arguments (it releases the GIL around the driver call, as ctypes)."""
    if not switch(ENV, True):
        return None
    try:
        lib = ctypes.CDLL(LIBRARY)
        fn = lib.cuLaunchKernelEx
    except (OSError, AttributeError):  # no driver, or one older than CUDA 12.0
        return None
    fn.restype = ctypes.c_int
    if not switch(C_ENV, False) or not C_LAUNCHER:
        return fn
    try:
        return C_LAUNCHER[0](LIBRARY)
    except (OSError, AttributeError):  # opened by ctypes above, so not expected: keep the ctypes function
        return fn


C_LAUNCHER: list = []  # [_cfast.Launcher], put here by tilex.cfast when its extension loads (this module does not
#                        import cfast: the runtime stays below it), which also clears launcher()'s cache

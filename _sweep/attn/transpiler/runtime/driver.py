"""The CUDA driver's cuLaunchKernel through ctypes: the direct launch of a pre-built parameter buffer.

CuPy's RawModule call packs its argument list anew on every launch (about 5.5 µs of host time on an
H200 host); a launch plan (`plan.py`) keeps the packed parameters in ctypes storage and hands their
addresses to cuLaunchKernel itself. libcuda is opened with ctypes (as `tma.py` does for
cuTensorMapEncodeTiled), so no extra Python package is needed. `TILEX_DIRECT_LAUNCH=0` in the
environment turns the direct launch off (every launch then goes through CuPy, as before plans).
"""
from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from typing import Callable

ENV = "TILEX_DIRECT_LAUNCH"
LIBRARY = "libcuda.so.1"  # the driver library (tests point it at a stand-in)


@lru_cache(maxsize=1)
def launcher() -> Callable[..., int] | None:
    """cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, kernelParams, extra) -> CUresult, or None when
    the direct launch is off (TILEX_DIRECT_LAUNCH=0) or libcuda cannot be loaded (read once per process).

    No argtypes (their conversion doubles the call's cost, ~1.7 against ~0.8 us): the caller passes f and
    stream as ctypes.c_void_p, kernelParams as a ctypes array of void* (passed by address), extra as None,
    and the grid, block and shared-memory sizes as Python ints below 2**31 (C ints, as the driver's
    unsigned ints take them; bind_arguments keeps grids within CUDA's limits)."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    try:
        lib = ctypes.CDLL(LIBRARY)
    except OSError:
        return None
    fn = lib.cuLaunchKernel
    fn.restype = ctypes.c_int
    return fn

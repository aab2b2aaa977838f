"""TMA descriptors (CUtensorMap) for the wgmma main loops, encoded on the host at launch.

The driver's `cuTensorMapEncodeTiled` (libcuda, through ctypes: no extra Python package)
writes a 128-byte descriptor of a 2-D row-major tensor; the kernel takes it by value as a
`__grid_constant__` parameter. Boxes are [box_rows, 64] elements, 128-byte swizzled (the
layout the generated wgmma descriptors expect), and reads outside the tensor give zeros,
which is the valid-region rule of a tile load.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from ..diagnostics import LaunchError

# CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion (cuda.h)
_DATA_TYPE = {"f16": 6, "bf16": 9, "f32": 7}
_ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4}
_SWIZZLE_128B = 3
_L2_PROMOTION_256B = 3


@lru_cache(maxsize=1)
def _encoder():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:  # pragma: no cover - only without a driver
        raise LaunchError(f"cannot load the CUDA driver (libcuda.so.1) to encode TMA descriptors: {e}") from None
    fn = lib.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return fn


def check_alignment(name: str, ptr: int, dtype: str, cols: int) -> None:
    """TMA needs a 16-byte aligned base and a row pitch that is a multiple of 16 bytes."""
    if ptr % 16:
        raise LaunchError(f"argument '{name}': the tensor-core loop reads it with TMA, which needs a 16-byte aligned "
                          f"address (got 0x{ptr:x}); pass a tensor that starts on a 16-byte boundary (e.g. .clone())")
    if cols * _ITEMSIZE[dtype] % 16:
        raise LaunchError(f"argument '{name}': TMA needs a row pitch that is a multiple of 16 bytes, "
                          f"got {cols} elements of {dtype}")


@lru_cache(maxsize=4096)
def encode(ptr: int, dtype: str, rows: int, cols: int, box_rows: int, box_cols: int) -> np.void:
    """The 128-byte CUtensorMap of a row-major [rows, cols] tensor at `ptr`, as a by-value kernel argument."""
    buf = (ctypes.c_uint64 * 24)()  # 192 bytes: room to place 128 at a 64-byte boundary
    base = ctypes.addressof(buf)
    at = (base + 63) & ~63
    dims = (ctypes.c_uint64 * 2)(cols, rows)
    strides = (ctypes.c_uint64 * 1)(cols * _ITEMSIZE[dtype])
    box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
    elem = (ctypes.c_uint32 * 2)(1, 1)
    err = _encoder()(at, _DATA_TYPE[dtype], 2, ctypes.c_void_p(ptr), dims, strides, box, elem,
                     0, _SWIZZLE_128B, _L2_PROMOTION_256B, 0)
    if err != 0:
        raise LaunchError(f"cuTensorMapEncodeTiled failed with CUresult {err} for a [{rows}, {cols}] {dtype} tensor "
                          f"(box {box_rows}x{box_cols})")
    return np.void(ctypes.string_at(at, 128))

"""TMA descriptors (CUtensorMap) for the wgmma main loops and TMA-filled streamed rings, encoded on the host at launch.

The driver's `cuTensorMapEncodeTiled` (libcuda, through ctypes: no extra Python package)
writes a 128-byte descriptor; the kernel takes it by value as a `__grid_constant__` parameter.
A wgmma main loop reads 2-D row-major tensors in [box_rows, 64] boxes (`encode`); a streamed
loop's ring reads an N-D map mirroring the tensor's dims (`encode_nd`, geometry from the pure
`geometry`). Boxes are 128-byte swizzled (the layout the generated wgmma descriptors expect),
and reads outside the tensor give zeros, which is the valid-region rule of a tile load.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from ..diagnostics import LaunchError

# CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion (cuda.h)
_DATA_TYPE = {"f16": 6, "bf16": 9, "f32": 7, "f8e4m3": 0, "f8e5m2": 0}  # fp8: UINT8 (TMA moves bytes)
_ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4, "f8e4m3": 1, "f8e5m2": 1}
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


def encode(ptr: int, dtype: str, rows: int, cols: int, box_rows: int, box_cols: int) -> np.void:
    """The 128-byte CUtensorMap of a row-major [rows, cols] tensor at `ptr` (rows, cols >= 1) read in
    [box_rows, box_cols] boxes, as a by-value kernel argument: the 2-D case of `encode_nd`."""
    return encode_nd(ptr, dtype, (rows, cols), (box_cols, box_rows))


# cuTensorMapEncodeTiled's limits on a tiled map (CUDA driver API, "Tensor Map Object Management")
MAX_RANK = 5
MAX_STRIDE = 1 << 40  # byte strides below 2^40, multiples of 16
MAX_DIM = 1 << 32  # dims in [1, 2^32]


def geometry(dims: tuple, itemsize: int, box: tuple) -> tuple[tuple, tuple, tuple]:
    """(global dims, byte strides, box), innermost first, of the N-D TMA map of a row-major tensor of shape
    `dims` (outermost first) read in boxes `box` (innermost first): dims reversed, the byte stride of every
    dim but the innermost. A dim of 0 becomes 1 (the driver takes no empty dims; the kernel then sends every
    box outside the map, so nothing is read: see codegen's tma copy)."""
    if not 1 <= len(dims) <= MAX_RANK or len(box) != len(dims):
        raise ValueError(f"a TMA map has 1 to {MAX_RANK} dims and a box of as many, got {dims} and {box}")
    gdims = tuple(max(1, int(d)) for d in reversed(dims))
    strides, stride = [], itemsize
    for d in gdims[:-1]:
        stride *= d
        strides.append(stride)
    return gdims, tuple(strides), tuple(int(b) for b in box)


def nd_obstacle(name: str, ptr: int, dtype: str, dims: tuple, box: tuple) -> str | None:
    """Why the N-D map of tensor argument `name` cannot be encoded (a LaunchError message), or None."""
    if ptr % 16:
        return (f"argument '{name}': a pipeline loop reads it with TMA, which needs a 16-byte aligned address "
                f"(got 0x{ptr:x}); pass a tensor that starts on a 16-byte boundary (e.g. .clone())")
    gdims, strides, _ = geometry(dims, _ITEMSIZE[dtype], box)
    for s in strides:
        if s % 16 or s >= MAX_STRIDE:
            return (f"argument '{name}': TMA needs byte strides that are multiples of 16 and below 2^40, "
                    f"got {s} for a {list(dims)} {dtype} tensor")
    if any(d > MAX_DIM for d in gdims):
        return f"argument '{name}': TMA takes dims of at most 2^32, got {list(dims)}"
    return None


@lru_cache(maxsize=4096)
def encode_nd(ptr: int, dtype: str, dims: tuple, box: tuple) -> np.void:
    """The 128-byte CUtensorMap of the row-major tensor of shape `dims` at `ptr`, boxes `box` (innermost first),
    128-byte swizzled, zero fill; a by-value kernel argument. Check `nd_obstacle` first."""
    gdims, strides, box = geometry(dims, _ITEMSIZE[dtype], box)
    rank = len(gdims)
    buf = (ctypes.c_uint64 * 24)()  # 192 bytes: room to place 128 at a 64-byte boundary
    at = (ctypes.addressof(buf) + 63) & ~63
    c_dims = (ctypes.c_uint64 * rank)(*gdims)
    c_strides = (ctypes.c_uint64 * max(1, rank - 1))(*strides)
    c_box = (ctypes.c_uint32 * rank)(*box)
    elem = (ctypes.c_uint32 * rank)(*([1] * rank))
    err = _encoder()(at, _DATA_TYPE[dtype], rank, ctypes.c_void_p(ptr), c_dims, c_strides, c_box, elem,
                     0, _SWIZZLE_128B, _L2_PROMOTION_256B, 0)
    if err != 0:
        raise LaunchError(f"cuTensorMapEncodeTiled failed with CUresult {err} for a {list(dims)} {dtype} tensor "
                          f"(box {list(box)}, innermost first)")
    return np.void(ctypes.string_at(at, 128))

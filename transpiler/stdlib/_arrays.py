"""Arrays the library's wrappers are given: their kind (NumPy, CuPy, torch CUDA), tilex dtype names, and the
wrappers' argument checks (dtype, rank, shape, numbers), each a TypeError/ValueError naming the argument."""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from . import messages as M
from ..runtime.arrays import (_TORCH_TYPES, ArrayInfo, describe_array, is_cupy_array, is_torch_tensor,
                              torch_dtype_names)
from ..types import PARAM_DTYPES

# ------------------------------------------------------------------------- array kinds

def _kind1(x: Any) -> str:
    if type(x) in _TORCH_TYPES and x.device.type == "cuda":  # the common case first
        return "torch"
    if isinstance(x, np.ndarray):
        return "numpy"
    if is_torch_tensor(x):
        if x.device.type != "cuda":
            raise TypeError(f"a torch tensor on {x.device} was passed: tilex.stdlib runs torch tensors "
                            "on the GPU only; move it with .cuda(), or pass a NumPy array for the "
                            "interpreter")
        return "torch"
    if is_cupy_array(x):
        return "cupy"
    raise TypeError(f"expected a NumPy array, CuPy array or torch CUDA tensor, got "
                    f"{type(x).__module__}.{type(x).__name__}")


def kind_of(*arrays) -> str:
    """"numpy" | "cupy" | "torch" for arrays of one kind (None entries are ignored)."""
    kinds = {}
    for a in arrays:
        if a is None:
            continue
        kinds.setdefault(_kind1(a), a)
    if not kinds:
        raise TypeError("no array arguments")
    if len(kinds) > 1:
        raise TypeError(f"arrays of different kinds were mixed ({', '.join(sorted(kinds))}); "
                        "pass all NumPy, all CuPy or all torch CUDA tensors")
    return next(iter(kinds))


def dtype_name(x) -> str:
    """The tilex dtype name of an array ("bf16", "f16", "f32", "i32", "i64", ...)."""
    if type(x) in _TORCH_TYPES:
        name = torch_dtype_names(x.dtype)[0]
        if name is not None:
            return name
    info = describe_array(x)
    if info is None:
        raise TypeError(f"not an array: {type(x).__module__}.{type(x).__name__}")
    if info.dtype is None:
        raise TypeError(f"dtype {info.dtype_text} has no tilex equivalent")
    return info.dtype


@functools.lru_cache(maxsize=None)
def _torch_dtypes() -> dict:
    import torch

    return {d.value: getattr(torch, d.info.torch) for d in PARAM_DTYPES}


def _torch_dtype(name: str):
    return _torch_dtypes()[name]


def _np_dtype(name: str):
    from ..runtime.arrays import numpy_dtype

    return numpy_dtype(name)


# ------------------------------------------------------------------- wrapper helpers

FLOATS = ("f32", "f16", "bf16")


def _accepted(x, name: str | None = None) -> ArrayInfo:
    """describe_array(x) for an array `_kind1` accepts; `_kind1`'s TypeError (naming argument `name`) else."""
    info = describe_array(x) if isinstance(x, np.ndarray) or is_torch_tensor(x) or is_cupy_array(x) else None
    if info is None or (info.kind == "torch" and not info.device.startswith("cuda:")):
        try:
            _kind1(x)  # raises
        except TypeError as e:
            raise TypeError(f"{name}: {e}") if name else e from None
    return info


def check_number(name: str, v) -> float:
    """A Python/NumPy real scalar argument (eps, scale, ...) as a finite float; TypeError/ValueError naming it."""
    if isinstance(v, np.generic) and np.ndim(v) == 0:
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(v).__name__} {v!r}"[:200])
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"{name}: expected a finite number, got {v}")
    return v


def _dtype_text(info: ArrayInfo) -> str:
    return info.dtype if info.dtype is not None else info.dtype_text


def _accepted_dtype(x, name: str | None = None) -> str:
    """_dtype_text(_accepted(x, name)), without describing a torch CUDA tensor in full."""
    if type(x) in _TORCH_TYPES and x.device.type == "cuda":
        dt, text = torch_dtype_names(x.dtype)
        return dt if dt is not None else text
    return _dtype_text(_accepted(x, name))


def check_float(name: str, x, ndim_min: int = 1, ndim: int | None = None) -> str:
    """Check that argument `name` is a float array of a supported dtype and rank; its dtype name."""
    dt = _accepted_dtype(x, name)
    if dt not in FLOATS:
        raise TypeError(M.not_float(name, dt))
    check_rank(name, x, ndim_min, ndim)
    return dt


def check_int(name: str, x, ndim: int | None = None) -> str:
    dt = _accepted_dtype(x, name)
    if dt not in ("i32", "i64"):
        raise TypeError(M.not_int(name, dt))
    if ndim is not None:
        check_rank(name, x, ndim, ndim)
    return dt


def check_rank(name: str, x, ndim_min: int = 1, ndim: int | None = None) -> None:
    n = len(x.shape)
    if ndim is not None and n != ndim:
        raise ValueError(M.wrong_rank(name, ndim, x.shape))
    if n < ndim_min:
        raise ValueError(M.too_few_dims(name, ndim_min, x.shape))


def check_same_dtype(name: str, x, want: str) -> None:
    dt = dtype_name_or_text(x)
    if dt != want:
        raise TypeError(M.wrong_dtype(name, want, dt))


def check_shape(name: str, x, shape) -> None:
    if tuple(x.shape) != tuple(shape):
        raise ValueError(M.wrong_shape(name, shape, x.shape))


def dtype_name_or_text(x) -> str:
    """dtype_name, or the library's own spelling for dtypes tilex lacks (for messages)."""
    if type(x) in _TORCH_TYPES:
        name, text = torch_dtype_names(x.dtype)
        return name if name is not None else text
    return _dtype_text(describe_array(x))


def sm_count(x) -> int:
    """Streaming multiprocessors of x's device (132, an H100/H200, for NumPy arrays); memoized per device."""
    kind = kind_of(x)
    if kind == "numpy":
        return 132
    index = x.device.index if kind == "torch" else x.device.id
    return _sm_count(kind, 0 if index is None else int(index))


@functools.lru_cache(maxsize=None)
def _sm_count(kind: str, index: int) -> int:
    try:
        if kind == "torch":
            import torch

            return int(torch.cuda.get_device_properties(index).multi_processor_count)
        import cupy

        return int(cupy.cuda.Device(index).attributes["MultiProcessorCount"])
    except Exception:  # pragma: no cover - an odd device query; the default is fine
        return 132


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def reshape(x, shape):
    """A view of contiguous `x` with another shape (any kind)."""
    return x.reshape(tuple(shape))


def row_config(n: int, m: int, sms: int = 132, **kw) -> dict:
    """rows.row_config (the row kernels' launch model lives in transpiler/stdlib/rows.py)."""
    from .rows import row_config as impl

    return impl(n, m, sms, **kw)

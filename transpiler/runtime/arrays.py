"""Array-like call arguments: the tilex dtype of a NumPy, CuPy or torch dtype, and `describe_array`, what the
checks need to know about one array (kind, dtype, shape, contiguity, device), without importing torch or CuPy."""
from __future__ import annotations

import functools
from typing import Any, NamedTuple, Sequence

import numpy as np

from ..diagnostics import LaunchError
from ..types import PARAM_DTYPES

# tilex dtype name -> numpy dtype name (bf16 via ml_dtypes), torch dtype str.
_NUMPY_NAMES = tuple(d.value for d in PARAM_DTYPES)  # dtypes a kernel parameter may have (types.DTYPES)
_TORCH_NAMES = {d.value: f"torch.{d.info.torch}" for d in PARAM_DTYPES}
_TORCH_TO_TILEX = {v: k for k, v in _TORCH_NAMES.items()}
# torch spells some dtypes two ways (torch.half is torch.float16 and prints as such).


@functools.lru_cache(maxsize=None)
def _numpy_dtypes() -> dict[str, np.dtype]:
    """tilex dtype name -> NumPy dtype, for every name in _NUMPY_NAMES (in that order)."""
    from ..types import DType, numpy_dtype as _np_dtype

    return {name: _np_dtype(DType(name)) for name in _NUMPY_NAMES}


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a tilex dtype name (bf16 and fp8 through ml_dtypes)."""
    if name not in _NUMPY_NAMES:
        raise LaunchError(f"unknown tilex dtype {name!r}")
    return _numpy_dtypes()[name]


def tilex_dtype_of_numpy(dt: np.dtype) -> str | None:
    """The tilex dtype name of a NumPy dtype, or None when tilex has no such dtype."""
    dt = np.dtype(dt)
    return next((name for name, d in _numpy_dtypes().items() if dt == d), None)


# ---------------------------------------------------------------------------------
# Describing array-like arguments
# ---------------------------------------------------------------------------------

class ArrayInfo(NamedTuple):
    """What the checks need to know about one array argument."""

    kind: str  # "numpy", "cupy", "torch", "cai" (other __cuda_array_interface__)
    dtype: str | None  # tilex dtype name, None when tilex has no such dtype
    dtype_text: str  # the dtype as the caller's library spells it
    shape: tuple[int, ...]
    c_contiguous: bool
    device: str  # "cpu", "cuda:N" or "cuda:?" (CUDA, ordinal unknown)


# Types seen to be torch tensors / CuPy arrays (a type's module and methods do not change),
# so that the test below runs once per type; Python scalars are never arrays.
_TORCH_TYPES: set[type] = set()
_CUPY_TYPES: set[type] = set()
_PLAIN_SCALARS = frozenset({bool, int, float})


def _type_module(x: Any) -> str:
    return type(x).__module__ or ""


def _top_module(x: Any) -> str:
    return _type_module(x).partition(".")[0]


def _of_library(x: Any, seen: set[type], module: str, attr: str) -> bool:
    """True when x's type comes from `module` and x has `attr`; types whose class has `attr`
    (not this object alone) are remembered in `seen`."""
    t = type(x)
    if t in seen:
        return True
    if _top_module(x) == module and hasattr(x, attr):
        if hasattr(t, attr):
            seen.add(t)
        return True
    return False


def is_torch_tensor(x: Any) -> bool:
    """True for a torch.Tensor (checked without importing torch)."""
    return _of_library(x, _TORCH_TYPES, "torch", "is_contiguous")


def is_cupy_array(x: Any) -> bool:
    """True for a cupy.ndarray (checked without importing cupy)."""
    return _of_library(x, _CUPY_TYPES, "cupy", "__cuda_array_interface__")


def _c_contiguous(shape: Sequence[int], strides: Sequence[int] | None, itemsize: int) -> bool:
    """Row-major check on byte strides; dims of size <= 1 may have any stride."""
    if strides is None:
        return True
    expected = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n > 1 and s != expected:
            return False
        expected *= max(n, 1)
    return True


def describe_array(x: Any) -> ArrayInfo | None:
    """An ArrayInfo for a supported array object, or None when `x` is not an array."""
    if type(x) in _PLAIN_SCALARS:
        return None
    if is_torch_tensor(x):
        dev = x.device
        device = f"cuda:{dev.index if dev.index is not None else 0}" if dev.type == "cuda" else dev.type
        return ArrayInfo("torch", *torch_dtype_names(x.dtype), tuple(map(int, x.shape)),
                         bool(x.is_contiguous()), device)
    if isinstance(x, np.ndarray):
        return ArrayInfo("numpy", *_numpy_names(x.dtype), tuple(x.shape), bool(x.flags.c_contiguous), "cpu")
    if is_cupy_array(x):
        return ArrayInfo("cupy", *_numpy_names(x.dtype), tuple(x.shape), bool(x.flags.c_contiguous),
                         f"cuda:{x.device.id}")
    cai = getattr(x, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        try:
            dt = np.dtype(cai["typestr"])
        except (TypeError, KeyError, ValueError):
            dt = None
        shape = _cai_shape(x, cai)
        itemsize = dt.itemsize if dt is not None else 1
        return ArrayInfo("cai", tilex_dtype_of_numpy(dt) if dt is not None else None,
                         str(dt) if dt is not None else cai["typestr"], shape,
                         _c_contiguous(shape, cai.get("strides"), itemsize), "cuda:?")
    return None


def _cai_shape(x: Any, cai: dict) -> tuple[int, ...]:
    """The `shape` of a `__cuda_array_interface__`: a tuple of non-negative ints, else a LaunchError."""
    shape = cai.get("shape")
    what = f"{type(x).__module__}.{type(x).__name__}.__cuda_array_interface__"
    if not isinstance(shape, (tuple, list)):
        raise LaunchError(f"{what}: 'shape' must be a tuple of non-negative integers, got {shape!r}")
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise LaunchError(f"{what}: 'shape' must be a tuple of non-negative integers, got {tuple(shape)!r}")
    return tuple(int(n) for n in shape)


@functools.lru_cache(maxsize=256)
def torch_dtype_names(dt: Any) -> tuple[str | None, str]:
    """(tilex dtype name or None, torch's spelling) of a torch dtype, memoized per dtype object."""
    text = str(dt)
    return _TORCH_TO_TILEX.get(text), text


@functools.lru_cache(maxsize=256)
def _numpy_names(dt: np.dtype) -> tuple[str | None, str]:
    """(tilex dtype name or None, NumPy's own spelling) of a NumPy dtype, memoized."""
    return tilex_dtype_of_numpy(dt), str(dt)


def is_array(x: Any) -> bool:
    """`describe_array(x) is not None`, without describing torch, NumPy and CuPy arrays."""
    if type(x) in _PLAIN_SCALARS:
        return False
    if is_torch_tensor(x) or isinstance(x, np.ndarray) or is_cupy_array(x):
        return True
    return describe_array(x) is not None

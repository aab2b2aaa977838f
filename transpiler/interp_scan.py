"""The interpreter's scans, sorts and top-k along an axis, in the GPU's order.

* `cumsum`/`cummax`/`cummin` combine in the order of the GPU's exchange network (codegen/scan.py): for each
  coordinate bit b, lowest first, every element adds its partner block's total (the element at i ^ 2^b);
  so a float cumsum gives the same f32 numbers as the GPU, bit for bit, not NumPy's sequential order
  (within a few ulp of it). Ints wrap. max/min ignore NaN (fmaxf). `exclusive=True` starts from the
  identity: 0, -inf (or the smallest int) for cummax, +inf (the largest int) for cummin.
* `sort`/`argsort`/`topk`/`argtopk` order by value, NaN largest, ties (and -0.0 == 0.0) by position: a stable
  sort, ascending or descending; top-k is the first K of the descending sort (the ascending one with
  `descending=False`). The GPU's bitonic network compares the same (value, position) pairs, a total order,
  so both give the same positions.
"""
from __future__ import annotations

import numpy as np

from .builtins import scan_args
from .interp_numeric import NP_DTYPES, cast, dtype_of
from .types import DType

_IDENTITY = {"cumsum": lambda dt: 0, "cummax": lambda dt: -np.inf if dt.is_float else np.iinfo(NP_DTYPES[dt]).min,
             "cummin": lambda dt: np.inf if dt.is_float else np.iinfo(NP_DTYPES[dt]).max}
_COMBINE = {"cumsum": np.add, "cummax": np.fmax, "cummin": np.fmin}


def scan_axis(x: np.ndarray, func: str, exclusive: bool) -> np.ndarray:
    """A scan along the last axis of `x` (a power-of-two extent) by the GPU's butterfly."""
    op = _COMBINE[func]
    n = x.shape[-1]
    idx = np.arange(n)
    total = x.copy()
    prefix = np.full_like(x, _IDENTITY[func](dtype_of(x))) if exclusive else x.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        b = 1
        while b < n:
            partner = total[..., idx ^ b]
            prefix = np.where((idx & b) != 0, op(partner, prefix), prefix)
            total = op(total, partner)
            b *= 2
    return prefix


def sort_order(x: np.ndarray, descending: bool) -> np.ndarray:
    """The i32 positions that sort the last axis of `x` stably (NaN largest, -0.0 == 0.0)."""
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        if descending:
            keys = (np.where(nan, 0, -x), ~nan)  # NaN first, then larger values
        else:
            keys = (np.where(nan, 0, x), nan)
    else:
        keys = (~x if descending else x,)  # ~x reverses the order of ints without overflow
    return np.lexsort(keys, axis=-1).astype(np.int32)


def run_scan(c, x: np.ndarray):
    """The value of the scan, sort or top-k call `c` (an ast.Call after the passes) on operand value `x`."""
    sa = scan_args(c)
    dt: DType = c.ty.dtype
    src = dtype_of(np.asarray(x))
    y = np.moveaxis(np.asarray(x), sa.axis, -1)
    if c.func.startswith("cum"):
        r = scan_axis(cast(y, dt.compute if c.func == "cumsum" else src.compute), c.func, sa.flag)
        return cast(np.moveaxis(r, -1, sa.axis), dt)
    v = cast(y, src.compute)
    order = sort_order(v, sa.flag)
    if sa.k is not None:
        order = order[..., :sa.k]
    r = order if sa.indices else np.take_along_axis(y, order, axis=-1)
    return cast(np.ascontiguousarray(np.moveaxis(r, -1, sa.axis)), dt)

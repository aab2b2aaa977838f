"""The interpreter's arithmetic, CUDA's semantics in NumPy: dtypes, casts (rounding, saturation), wrapping ints,
`//` and `%`, the math table, reductions."""
from __future__ import annotations

import math

import numpy as np

from . import ast as A
from .builtins import NUMPY_MATH
from .diagnostics import TilexError
from .types import DType, numpy_dtype

B = A.BinOpKind

NP_DTYPES: dict[DType, np.dtype] = {}
for _dt in DType:
    try:
        NP_DTYPES[_dt] = numpy_dtype(_dt)
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - old ml_dtypes
        pass
_FROM_NP: dict[np.dtype, DType] = {v: k for k, v in NP_DTYPES.items()}
_F32 = np.dtype(np.float32)
_F8_MAX = {DType.F8E4M3: np.float32(448.0), DType.F8E5M2: np.float32(57344.0)}  # the largest finite values


class InterpError(TilexError, RuntimeError):
    """A run-time problem the interpreter cannot execute (e.g. a loop step of 0)."""


# ---------------------------------------------------------------- numeric helpers
_erf_py = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    """The error function of a float32 array/scalar, correctly rounded to float32."""
    return np.asarray(_erf_py(np.asarray(x, dtype=np.float64)), dtype=np.float64).astype(np.float32)[()]


def _ftz(x):
    """Subnormal float32 results flushed to (signed) zero, as the GPU's ex2.approx.ftz does."""
    x = np.asarray(x, dtype=np.float32)
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.float32(0) * x, x)[()]


MATH = {name: compile(expr, f"<tilex math {name}>", "eval") for name, expr in NUMPY_MATH.items()}
MATH_ENV = {"np": np, "_erf": _erf, "_ftz": _ftz, "__builtins__": {}}


def dtype_of(v) -> DType:
    return _FROM_NP[v.dtype]


def _float_to_int(v, npdt: np.dtype):
    """C-style conversion: truncate toward zero, NaN -> 0, saturate to the int range."""
    info = np.iinfo(npdt)
    x = np.trunc(np.asarray(v, dtype=np.float64))
    x = np.where(np.isnan(x), 0.0, x)
    hi = x >= float(info.max)  # float(max) may round up past max (i64)
    out = np.clip(x, float(info.min), float(info.max))
    out = np.where(hi, 0.0, out).astype(npdt)
    out = np.where(hi, info.max, out).astype(npdt)
    return out[()]


def cast(v, dt: DType):
    """Convert a NumPy value to tilex dtype `dt` with the kernel's conversion semantics."""
    npdt = NP_DTYPES[dt]
    if v.dtype == npdt:
        return v
    src = _FROM_NP.get(v.dtype)
    if src is None:  # a plain NumPy dtype tilex does not name (float64 from a helper)
        return np.asarray(v).astype(npdt)[()]
    if dt.is_int and src.is_float:
        return _float_to_int(v, npdt)
    if dt is DType.BOOL:
        if src.is_float and src.compute is not src:
            v = v.astype(_F32)
        return v != 0
    if dt in _F8_MAX:  # via f32, saturating like PTX cvt.rn.satfinite (NaN stays NaN)
        return np.clip(v.astype(_F32), -_F8_MAX[dt], _F8_MAX[dt]).astype(npdt)
    return v.astype(npdt)


def lit(value, dt: DType):
    if isinstance(value, bool):
        return cast(np.bool_(value), dt)
    if isinstance(value, int):
        if -(2 ** 63) <= value < 2 ** 63:
            return cast(np.int64(value), dt)
        return cast(np.float64(value), dt)
    return cast(np.float64(value), dt)


def _int_power(a, b):
    """a ** b on ints with wraparound; negative exponents give 1/a truncated (0 unless |a| == 1)."""
    a, b = np.asarray(a), np.asarray(b)
    neg = b < 0
    if not np.any(neg):
        return np.power(a, b)[()]
    pos = np.power(a, np.where(neg, 0, b))
    odd = (b % 2) != 0
    one = np.ones_like(pos)
    small = np.where(a == 1, one, np.where(a == -1, np.where(odd, -one, one), np.zeros_like(pos)))
    return np.where(neg, small, pos).astype(pos.dtype)[()]


def arith(op: B, a, b, dt: DType):
    if op is B.ADD:
        return a + b
    if op is B.SUB:
        return a - b
    if op is B.MUL:
        return a * b
    if op is B.DIV:
        return a / b
    if op is B.FLOORDIV:
        if dt.is_float:
            return np.floor(a / b)
        return np.floor_divide(a, b)
    if op is B.MOD:
        if dt.is_float:
            return a - np.floor(a / b) * b
        return np.remainder(a, b)
    if op is B.POW:
        if dt.is_int:
            return _int_power(a, b)
        return np.power(a, b)
    if op is B.BITAND:
        return np.bitwise_and(a, b)
    if op is B.BITOR:
        return np.bitwise_or(a, b)
    if op is B.BITXOR:
        return np.bitwise_xor(a, b)
    if op is B.SHL or op is B.SHR:
        return shift(op, a, b)
    if op is B.MAX:
        return np.fmax(a, b)
    if op is B.MIN:
        return np.fmin(a, b)
    raise InterpError(f"internal error: unknown operator {op.value}")


def shift(op: B, a, b):
    """a << b, a >> b on i32/i64 (two's complement; `>>` arithmetic). A shift amount outside [0, width) shifts
    every bit out: `<<` gives 0, `>>` the sign (0 or -1); the generated CUDA does the same (tilex_bits.cuh)."""
    a, b = np.asarray(a), np.asarray(b)
    bits = a.dtype.itemsize * 8
    ok = (b >= 0) & (b < bits)
    s = np.where(ok, b, 0).astype(a.dtype)
    if op is B.SHL:
        r = np.where(ok, np.left_shift(a, s), np.zeros_like(a))
    else:
        r = np.where(ok, np.right_shift(a, s), np.right_shift(a, bits - 1))
    return r.astype(a.dtype)[()]


COMPARE = {B.EQ: np.equal, B.NE: np.not_equal, B.LT: np.less, B.LE: np.less_equal,
            B.GT: np.greater, B.GE: np.greater_equal}


def reduce_minmax(x, func: str, axis, keep: bool):
    ufunc = np.fmax if func == "max" else np.fmin
    return ufunc.reduce(np.asarray(x), axis=axis, keepdims=keep)[()]


def argreduce(x, func: str, axis):
    x = np.asarray(x)
    if x.dtype.kind == "f":  # NaN-ignoring, like max/min; all-NaN gives index 0
        x = np.where(np.isnan(x), -np.inf if func == "argmax" else np.inf, x)
    f = np.argmax if func == "argmax" else np.argmin
    if axis is None:
        return np.int32(f(x.reshape(-1)))
    return f(x, axis=axis).astype(np.int32)


# ---------------------------------------------------------------- the interpreter

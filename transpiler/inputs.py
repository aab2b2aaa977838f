"""Arguments for `tilex run`: parsing NAME=VALUE options, generating and loading inputs,
comparing outputs.

Everything here is NumPy-only (no CuPy) and raises `InputError` (a `TilexError`) with a
message meant for the command line.
"""
from __future__ import annotations

import math
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np

from .diagnostics import TilexError
from .runtime.args import eval_expr, expr_symbols
from .spec import KernelSpec, ParamKind, ParamSpec
from .types import DType, numpy_dtype

DTYPE_NAMES = frozenset(d.value for d in DType)  # `-D T=f16`: a dtype parameter's value

SYMBOL_MAX = 2**31 - 1  # shape symbols are i32 in generated kernels
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# relative tolerance of a compared output, by dtype; 0 means exact
TOLERANCE = {"bf16": 1e-2, "f16": 1e-2, "f8e4m3": 1e-2, "f8e5m2": 1e-2, "f32": 1e-5, "f64": 1e-5}


class InputError(TilexError):
    """A bad command-line value, shape or input file for `tilex run`."""


# ---------------------------------------------------------------- NAME=VALUE parsing
def split_assignment(text: str, option: str) -> tuple[str, str]:
    """`NAME=VALUE` -> (NAME, VALUE); InputError naming `option` when malformed."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not _NAME.match(name) or value == "":
        raise InputError(f"{option} {text!r}: expected NAME=VALUE")
    return name, value


def parse_literal(text: str) -> int | float | bool | str:
    """An int, a float, True/False, or a dtype name (for a dtype parameter: `-D T=f16`), as `-D` values are written."""
    t = text.strip()
    if t in DTYPE_NAMES:
        return t
    if t in ("True", "true"):
        return True
    if t in ("False", "false"):
        return False
    if re.match(r"^[+-]?0\d+$", t):  # as in .tile source: 010 is neither 10 nor octal 8
        raise InputError(f"invalid integer literal {t!r} (no leading zeros; hex is 0x...)")
    try:
        return int(t, 0)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        raise InputError(f"{text!r} is not an int, a float, True/False or a dtype") from None


def parse_defines(items: Sequence[str]) -> dict[str, int | float | bool]:
    """`-D NAME=VALUE` options -> {NAME: value} (later options win)."""
    out: dict[str, int | float | bool] = {}
    for item in items or ():
        name, value = split_assignment(item, "-D")
        try:
            out[name] = parse_literal(value)
        except InputError as e:
            raise InputError(f"-D {item}: {e}") from None
    return out


def parse_shapes(items: Sequence[str]) -> dict[str, int]:
    """`--shape M=256,N=1000` (repeatable) -> {"M": 256, "N": 1000}."""
    out: dict[str, int] = {}
    for item in items or ():
        for part in item.split(","):
            if not part.strip():
                continue
            name, value = split_assignment(part, "--shape")
            try:
                n = int(value, 0)
            except ValueError:
                raise InputError(f"--shape {part.strip()}: size must be an integer, got {value!r}") from None
            if n < 0:
                raise InputError(f"--shape {part.strip()}: size must be >= 0")
            if n > SYMBOL_MAX:
                raise InputError(f"--shape {part.strip()}: size must be at most {SYMBOL_MAX} "
                                 "(shape symbols are i32 in the kernel)")
            if name in out and out[name] != n:
                raise InputError(f"--shape {name} is given twice ({name}={out[name]} and {name}={n})")
            out[name] = n
    return out


def parse_pairs(items: Sequence[str], option: str) -> dict[str, str]:
    """Repeatable `--opt NAME=VALUE` -> {NAME: VALUE} (VALUE kept as text)."""
    out: dict[str, str] = {}
    for item in items or ():
        name, value = split_assignment(item, option)
        out[name] = value
    return out


def scalar_value(p: ParamSpec, text: str) -> int | float | bool:
    """Parse `--arg NAME=VALUE` for scalar parameter `p` according to its dtype."""
    dt = DType(p.dtype)
    t = text.strip()
    if dt.is_bool:
        if t in ("True", "true", "1"):
            return True
        if t in ("False", "false", "0"):
            return False
        raise InputError(f"--arg {p.name}={text}: '{p.name}' is a bool: pass True or False")
    if dt.is_int:
        try:
            return int(t, 0)
        except ValueError:
            raise InputError(f"--arg {p.name}={text}: '{p.name}' is {p.dtype}: pass an integer") from None
    try:
        return float(t)
    except ValueError:
        raise InputError(f"--arg {p.name}={text}: '{p.name}' is {p.dtype}: pass a number") from None


# ---------------------------------------------------------------- shapes
def _param_text(p: ParamSpec) -> str:
    if p.kind == ParamKind.TENSOR:
        return f"{p.dtype}[{', '.join(str(d) for d in p.dims)}]"
    return p.dtype


def np_dtype(name: str) -> np.dtype:
    try:
        return numpy_dtype(DType(name))
    except (ValueError, ImportError, AttributeError) as e:
        raise InputError(f"dtype {name} has no NumPy equivalent here ({e})") from None


def load_input(path: str, p: ParamSpec) -> np.ndarray:
    """Load a .npy file for tensor parameter `p`, checking its dtype and rank."""
    want = np_dtype(p.dtype)
    try:
        arr = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"--input {p.name}={path}: {path}: No such file") from None
    except (OSError, ValueError) as e:
        raise InputError(f"--input {p.name}={path}: cannot read a .npy array from {path} ({e})") from None
    if not isinstance(arr, np.ndarray):
        raise InputError(f"--input {p.name}={path}: {path} is not a single .npy array")
    # ml_dtypes arrays (bf16, fp8) round-trip through .npy as raw bytes ('V2', 'V1')
    if arr.dtype != want and arr.dtype.kind == "V" and arr.dtype.itemsize == want.itemsize:
        arr = arr.view(want)
    if arr.dtype != want:
        raise InputError(f"--input {p.name}={path}: array has dtype {arr.dtype}, but '{p.name}' is "
                         f"{_param_text(p)} (NumPy dtype {want})")
    if arr.ndim != len(p.dims):
        raise InputError(f"--input {p.name}={path}: array has shape {arr.shape} (rank {arr.ndim}), but "
                         f"'{p.name}' is {_param_text(p)} (rank {len(p.dims)})")
    return np.ascontiguousarray(arr)


def resolve_symbols(spec: KernelSpec, shapes: Mapping[str, int],
                    loaded: Mapping[str, np.ndarray] | None = None) -> dict[str, int]:
    """Sizes of every symbol of `spec`, from `--shape` and the shapes of loaded inputs.

    Raises InputError for an unknown symbol, a conflict, a missing symbol (named), or a
    failed `where` constraint.
    """
    loaded = loaded or {}
    symbols = dict(shapes)
    unknown = [s for s in shapes if s not in spec.symbols]
    if unknown:
        has = ", ".join(spec.symbols) or "none"
        raise InputError(f"--shape {unknown[0]}=...: kernel {spec.name} has no symbol {unknown[0]} "
                         f"(its symbols: {has})")
    source: dict[str, str] = {s: f"--shape {s}={v}" for s, v in symbols.items()}
    for p in spec.params:
        arr = loaded.get(p.name)
        if arr is None:
            continue
        for i, (d, n) in enumerate(zip(p.dims, arr.shape)):
            where = f"--input {p.name} (shape {tuple(arr.shape)})"
            if isinstance(d, int):
                if d != n:
                    raise InputError(f"{where}: dimension {i} must be {d} ({_param_text(p)}), got {n}")
            elif d in symbols:
                if symbols[d] != n:
                    raise InputError(f"{where} has {d} = {n}, but {source[d]} says {d} = {symbols[d]}")
            else:
                symbols[d], source[d] = n, where
    missing = [s for s in spec.symbols if s not in symbols]
    if missing:
        users = [f"{p.name}: {_param_text(p)}" for p in spec.params
                 if p.kind == ParamKind.TENSOR and any(d in missing for d in p.dims)]
        example = ",".join(f"{s}=..." for s in spec.symbols)
        raise InputError(f"no size for symbol{'s' if len(missing) > 1 else ''} {', '.join(missing)} of kernel "
                         f"{spec.name} ({'; '.join(users)}): pass --shape {example}")
    for c in spec.constraints:
        try:
            ok = eval_expr(c.py, symbols)
        except Exception as e:  # e.g. division by a zero size
            raise InputError(f"cannot evaluate constraint `{c.text}` (line {c.line}): {e}") from None
        if not ok:
            vals = ", ".join(f"{n} = {symbols[n]}" for n in expr_symbols(c.py) if n in symbols)
            raise InputError(f"shape violates constraint `{c.text}` of kernel {spec.name} "
                             f"({spec.source_file}:{c.line}): {vals}")
    return {s: symbols[s] for s in spec.symbols}


def tensor_shape(p: ParamSpec, symbols: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else int(symbols[d]) for d in p.dims)


# ---------------------------------------------------------------- generating inputs
def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Random data in tilex dtype `dtype`: normal floats (scale 1), ints in [0, 16), random bools."""
    dt = DType(dtype)
    want = np_dtype(dtype)
    if dt.is_bool:
        return rng.random(shape) < 0.5
    if dt.is_int:
        return rng.integers(0, 16, size=shape).astype(want)
    return (rng.standard_normal(shape, dtype=np.float32) * 1.0).astype(want)


def make_inputs(spec: KernelSpec, symbols: Mapping[str, int], seed: int = 0,
                loaded: Mapping[str, np.ndarray] | None = None,
                args: Mapping[str, str] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, scalars) for one launch of `spec`.

    Tensors (outputs too, so that backends agree where a kernel does not write) are
    random unless loaded; scalars come from `args` (text), else the declared default.
    """
    loaded = dict(loaded or {})
    args = dict(args or {})
    by_name = {p.name: p for p in spec.params}
    for name in list(loaded) + list(args):
        if name not in by_name:
            raise InputError(f"kernel {spec.name} has no parameter '{name}' "
                             f"(parameters: {', '.join(by_name) or 'none'})")
    for name in loaded:
        if by_name[name].kind != ParamKind.TENSOR:
            raise InputError(f"'{name}' is a scalar parameter: pass --arg {name}=VALUE, not --input")
    for name in args:
        if by_name[name].kind != ParamKind.SCALAR:
            raise InputError(f"'{name}' is a tensor parameter: pass --input {name}=FILE.npy, not --arg")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"--seed {seed}: the seed is a non-negative integer")
    _check_memory(spec, symbols, loaded)
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, Any] = {}
    for p in spec.params:
        if p.kind == ParamKind.TENSOR:
            shape = tensor_shape(p, symbols)
            if p.name in loaded:
                arr = loaded[p.name]
                if tuple(arr.shape) != shape:
                    raise InputError(f"--input {p.name}: array has shape {tuple(arr.shape)}, expected {shape} "
                                     f"({_param_text(p)} with {', '.join(f'{s}={v}' for s, v in symbols.items())})")
                arrays[p.name] = arr
            else:
                arrays[p.name] = random_array(rng, shape, p.dtype)
        else:
            if p.name in args:
                scalars[p.name] = scalar_value(p, args[p.name])
            elif p.default is not None:
                scalars[p.name] = p.default
            else:
                raise InputError(f"scalar parameter '{p.name}' needs a value: pass --arg {p.name}=VALUE")
    return arrays, scalars


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def _check_memory(spec: KernelSpec, symbols: Mapping[str, int], loaded: Mapping[str, np.ndarray]) -> None:
    """InputError before allocating random tensors larger than half of this machine's memory."""
    sizes = {p.name: math.prod(tensor_shape(p, symbols)) * np_dtype(p.dtype).itemsize
             for p in spec.params if p.kind == ParamKind.TENSOR and p.name not in loaded}
    limit = _memory_bytes() // 2
    if sum(sizes.values()) > limit:
        big = max(sizes, key=sizes.get)
        shapes = ", ".join(f"{s}={v}" for s, v in symbols.items())
        raise InputError(f"the random inputs would take {sum(sizes.values()) / 2**30:.1f} GiB ('{big}' alone "
                         f"{sizes[big] / 2**30:.1f} GiB) with {shapes}; this machine allows {limit / 2**30:.1f} GiB: "
                         "pass smaller --shape sizes")


def tensor_bytes(spec: KernelSpec, symbols: Mapping[str, int]) -> int:
    """Bytes of every tensor parameter (inputs read once, outputs written once)."""
    total = 0
    for p in spec.params:
        if p.kind == ParamKind.TENSOR:
            total += math.prod(tensor_shape(p, symbols)) * np_dtype(p.dtype).itemsize
    return total


# ---------------------------------------------------------------- comparing and summarising
def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def compare(got: np.ndarray, want: np.ndarray, dtype: str) -> dict:
    """max_abs_err, rel_err (= max|got-want| / max|want|), tol and ok for one output.

    NaNs at the same positions count as equal; a NaN in only one of them is an error
    (inf). Integer and bool outputs must match exactly.
    """
    tol = TOLERANCE.get(dtype, 0.0)
    g, w = _f64(got), _f64(want)
    if g.shape != w.shape:
        return {"max_abs_err": math.inf, "rel_err": math.inf, "tol": tol, "ok": False}
    if g.size == 0:
        return {"max_abs_err": 0.0, "rel_err": 0.0, "tol": tol, "ok": True}
    gn, wn = np.isnan(g), np.isnan(w)
    if np.any(gn != wn):
        return {"max_abs_err": math.inf, "rel_err": math.inf, "tol": tol, "ok": False}
    both = ~(gn | wn)
    g, w = g[both], w[both]
    same_inf = np.isinf(g) & np.isinf(w) & (g == w)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same_inf, 0.0, np.abs(g - w))
    max_abs = float(diff.max()) if diff.size else 0.0
    finite_w = np.abs(w[np.isfinite(w)])
    scale = float(finite_w.max()) if finite_w.size else 0.0
    if max_abs == 0.0:
        rel = 0.0
    elif scale == 0.0 or not math.isfinite(max_abs):
        rel = math.inf
    else:
        rel = max_abs / scale
    ok = max_abs == 0.0 if tol == 0.0 else rel <= tol
    return {"max_abs_err": max_abs, "rel_err": rel, "tol": tol, "ok": bool(ok)}


def stats(a: np.ndarray) -> dict:
    """Summary of one output: dtype, shape, min/max/mean/std over finite values, NaN/inf counts."""
    a = np.asarray(a)
    f = _f64(a)
    finite = f[np.isfinite(f)]
    out = {"dtype": str(a.dtype), "shape": list(a.shape),
           "min": None, "max": None, "mean": None, "std": None,
           "nan": int(np.isnan(f).sum()), "inf": int(np.isinf(f).sum())}
    if finite.size:
        out.update(min=float(finite.min()), max=float(finite.max()),
                   mean=float(finite.mean()), std=float(finite.std()))
    return out

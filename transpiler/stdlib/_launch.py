"""Shared plumbing of the kernel library: compile a stdlib kernel, tell array kinds apart,
allocate outputs of the caller's kind, and launch on the GPU or in the interpreter.

Dtype-generic kernels. The language has no dtype-valued compile-time parameters, so a
stdlib `.tile` file is written for one concrete dtype per *dtype placeholder* and says
so on a header line:

    # dtypes: T=bf16 I=i64

`load("rms_norm", T="f16")` rewrites every whole word `bf16` of the source to `f16`
before compiling (and `I="i32"` every `i64` to `i32`). The dtype written in the file
for a placeholder must be used by that placeholder only. The file as written is an
ordinary `.tile` file: `tilex translate stdlib_kernels/rms_norm.tile` compiles the bf16
variant. Every other keyword of `load` is a `-D` compile-time parameter.
"""
from __future__ import annotations

import functools
import math
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np

from . import messages as M
from ..runtime.args import (_TORCH_TYPES, ArrayInfo, describe_array, is_array, is_cupy_array, is_torch_tensor,
                            torch_dtype_names)

KERNEL_DIR = Path(__file__).resolve().parent.parent.parent / "stdlib_kernels"
_DTYPE_NAMES = ("f16", "bf16", "f32", "i32", "i64", "bool", "f8e4m3")
_HEADER = re.compile(r"^#\s*dtypes:\s*(.*)$", re.MULTILINE)


@functools.lru_cache(maxsize=None)
def _kernel_dir() -> Path:
    """The installed tilex.stdlib_kernels package (wheel or editable), else stdlib_kernels/
    next to the source tree (found once per process)."""
    try:
        import tilex.stdlib_kernels as pkg

        d = Path(pkg.__file__).resolve().parent
        if (d / "rms_norm.tile").is_file():
            return d
    except ImportError:  # pragma: no cover - a source tree without the package mapping
        pass
    return KERNEL_DIR


@functools.lru_cache(maxsize=None)
def kernel_path(name: str) -> Path:
    """stdlib_kernels/<name>.tile (ValueError when there is no such file); found once per name."""
    p = _kernel_dir() / f"{name}.tile"
    if not p.is_file():
        raise ValueError(f"no stdlib kernel file {name}.tile in {_kernel_dir()}")
    return p


def placeholders(source: str) -> dict[str, str]:
    """The `# dtypes: T=bf16 I=i64` header of a stdlib kernel file: placeholder -> written dtype."""
    m = _HEADER.search(source)
    if not m:
        return {}
    out = {}
    for item in m.group(1).split():
        k, _, v = item.partition("=")
        out[k.strip()] = v.strip()
    return out


def specialize(source: str, dtypes: dict[str, str]) -> str:
    """Rewrite the placeholder dtypes of `source` (see the module docstring)."""
    header = placeholders(source)
    subst = {}
    for k, v in dtypes.items():
        if k not in header:
            raise ValueError(f"dtype parameter {k}={v!r}: the kernel file declares "
                             f"{', '.join(header) or 'no dtype parameters'}")
        if v not in _DTYPE_NAMES:
            raise ValueError(f"dtype parameter {k}={v!r} is not a tilex dtype ({', '.join(_DTYPE_NAMES)})")
        if v != header[k]:
            subst[header[k]] = v
    if not subst:
        return source
    body_start = _HEADER.search(source).end()  # keep the header line as written
    pat = re.compile(r"\b(" + "|".join(map(re.escape, subst)) + r")\b")
    return source[:body_start] + pat.sub(lambda m: subst[m.group(1)], source[body_start:])


@functools.lru_cache(maxsize=None)
def source(name: str, dtypes: tuple = ()) -> str:
    """The text of stdlib_kernels/<name>.tile with its dtype placeholders set (`dtypes`: (placeholder, dtype)
    pairs), read once per process like the modules `load` compiles from it."""
    return specialize(kernel_path(name).read_text(encoding="utf-8"), dict(dtypes))


@functools.lru_cache(maxsize=None)
def _load(name: str, kernel: str | None, items: tuple):
    from ..api import Module
    from ..pipeline import Options
    from ..translation_cache import translate

    path = kernel_path(name)
    defines = {k: v for k, v in items if not isinstance(v, str)}
    text = source(name, tuple((k, v) for k, v in items if isinstance(v, str)))
    try:
        from ..runtime.nvrtc import default_arch

        arch = default_arch()
    except Exception:  # no GPU: the target only matters when launching
        arch = "sm_90a"
    return Module(translate(text, str(path), Options(defines=defines, arch=arch, kernel=kernel))[0], arch)


def load(name: str, kernel: str | None = None, **defines):
    """Compile stdlib_kernels/<name>.tile for the current target, memoized per (name, defines).

    String values are dtype placeholders (`T="f16"`), the others `-D` compile-time
    parameters. `kernel=` restricts the module to one kernel of the file (less to compile).
    """
    return _load(name, kernel, tuple(sorted(defines.items())))


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

    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32,
            "i64": torch.int64, "bool": torch.bool, "f8e4m3": torch.float8_e4m3fn}


def _torch_dtype(name: str):
    return _torch_dtypes()[name]


def _np_dtype(name: str):
    from ..runtime.args import numpy_dtype

    return numpy_dtype(name)


# Tests set POISON = True so that every output `empty` allocates starts as NaN (floats)
# or -777 (ints): an element a kernel fails to write is then caught.
POISON = False


def empty(like, shape, dtype=None):
    """An uninitialized array of `like`'s kind and device; dtype None = like's dtype, or a
    tilex dtype name ("bf16", "f32", "i64", ...)."""
    if POISON:
        name = dtype if dtype is not None else dtype_name(like)
        out = _empty(like, shape, name)
        out[...] = float("nan") if name in FLOATS else -777
        return out
    return _empty(like, shape, dtype)


class _Output(threading.local):
    """`fn(kind, shape, dtype name)` -> an array to use as this allocation, or None: set by
    tilex.backend's memory arena around a library call, so its output lands in the arena."""
    fn = None


OUTPUT = _Output()


def _empty(like, shape, dtype=None):
    kind = _kind1(like)
    shape = tuple(map(int, shape))
    name = dtype if dtype is not None else dtype_name(like)
    if OUTPUT.fn is not None:
        got = OUTPUT.fn(kind, shape, name)
        if got is not None:
            return got
    if kind == "torch":
        import torch

        return torch.empty(shape, dtype=_torch_dtypes()[name], device=like.device)
    if kind == "cupy":
        import cupy

        with like.device:
            return cupy.empty(shape, dtype=_np_dtype(name))
    return np.empty(shape, dtype=_np_dtype(name))


def full(like, shape, value, dtype=None):
    """Like `empty`, filled with `value`."""
    out = _empty(like, shape, dtype)
    out[...] = value
    return out


def contiguous(x):
    """`x` itself when C-contiguous, else a contiguous copy of the same kind."""
    kind = _kind1(x)
    if kind == "torch":
        return x.contiguous()
    if kind == "cupy":
        import cupy

        return cupy.ascontiguousarray(x)
    return np.ascontiguousarray(x)


def astype(x, name: str):
    """`x` converted to the tilex dtype `name` (the same object when it already is)."""
    if dtype_name(x) == name:
        return x
    kind = _kind1(x)
    if kind == "torch":
        return x.to(_torch_dtype(name))
    return x.astype(_np_dtype(name))


def run(mod, kernel: str, *args, **scalars):
    """Launch `kernel` of `mod` on the GPU (CuPy/torch arrays) or in the interpreter (NumPy).

    `args` are arrays and scalars in kernel parameter order; outputs are written in place. A call whose
    argument layout launched before replays that launch's plan (`Kernel.replay`: the checks' results
    are reused, see tilex.runtime.plan); any other call is checked in full here and in the kernel.
    """
    if kernel in mod.specs and mod.kernel(kernel).replay(args, scalars, one_kind=True):
        return
    arrays = [a for a in (*args, *scalars.values()) if is_array(a)]
    if kind_of(*arrays) == "numpy":
        mod.interp(kernel, *args, **scalars)
    else:
        mod.kernel(kernel)(*args, **scalars)


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

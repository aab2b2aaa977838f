"""Binding and checking call arguments against a KernelSpec (pure Python, no CuPy).

`bind_arguments` maps positional/keyword arguments onto `spec.params`, checks every
tensor (dtype, rank, sizes, contiguity, device) and scalar, binds the shape symbols,
evaluates the `where` constraints and the grid, and returns a `BoundArgs`. Every
problem is a `LaunchError` that names the parameter and says what was expected and
what was passed.

Tensors may be CuPy arrays, PyTorch CUDA tensors (recognised by their type's module,
so torch is never imported here), other objects with `__cuda_array_interface__`, and
NumPy arrays when `allow_numpy=True` (the interpreter's path).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..diagnostics import LaunchError
from ..spec import KernelSpec, ParamSpec
from ..types import PARAM_DTYPES
from .arrays import ArrayInfo, _numpy_dtypes, describe_array
from .exprs import cdiv, eval_expr, expr_symbols  # noqa: F401 - cdiv re-exported for callers

INT32_MAX = 2**31 - 1
GRID_X_MAX = 2**31 - 1
GRID_YZ_MAX = 65535


# ---------------------------------------------------------------------------------
# Binding
# ---------------------------------------------------------------------------------

@dataclass
class BoundArgs:
    """Arguments bound to a KernelSpec and checked: ready to launch (or to interpret)."""

    symbols: dict[str, int]  # symbol name -> size, in `spec.symbols` order
    arrays: dict[str, Any]  # tensor parameter name -> the caller's object
    scalars: dict[str, Any]  # scalar parameter name -> Python value (int, float or bool)
    grid: tuple[int, int, int]
    device: str | None = None  # "cuda:N", "cpu", or None when no tensor told us
    kinds: dict[str, str] = field(default_factory=dict)  # tensor name -> "cupy"/"torch"/...

    @property
    def empty(self) -> bool:
        """True when the grid has no blocks: the launch is skipped."""
        return 0 in self.grid

    @property
    def uses_torch(self) -> bool:
        """True when any tensor argument is a torch tensor."""
        return "torch" in self.kinds.values()


class _SpecPlan:
    """What binding needs to know about one KernelSpec, worked out once: the parameter
    names; per parameter, its fixed dims and its symbol dims (index, size or name); the
    symbols in the order binding finds them; and the grid of each tuple of symbol values
    seen so far (those that passed the constraints and the grid checks)."""

    MAX_GRIDS = 1024

    def __init__(self, spec: KernelSpec):
        self.spec = spec
        self.names = frozenset(p.name for p in spec.params)
        self.steps = tuple((p, tuple((i, d) for i, d in enumerate(p.dims) if isinstance(d, int)),
                            tuple((i, d) for i, d in enumerate(p.dims) if isinstance(d, str)))
                           for p in spec.params)
        found = [d for p in spec.params if p.kind == "tensor" for d in p.dims if isinstance(d, str)]
        bound = dict.fromkeys(found)  # the keys of `symbols` once every tensor is bound, in order
        self.unbound = [s for s in spec.symbols if s not in bound]
        self.order = tuple(dict.fromkeys((*spec.symbols, *bound)))
        self.grids: dict[tuple, tuple[int, int, int]] = {}

    def remember(self, key: tuple, grid: tuple[int, int, int]) -> None:
        if len(self.grids) >= self.MAX_GRIDS:
            self.grids.clear()
        self.grids[key] = grid


_PLANS: dict[int, _SpecPlan] = {}  # id(spec) -> plan; the plan holds the spec, so the id stays its own
_MAX_PLANS = 256


def _plan(spec: KernelSpec) -> _SpecPlan:
    plan = _PLANS.get(id(spec))
    if plan is None or plan.spec is not spec:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[id(spec)] = _SpecPlan(spec)
    return plan


def _match_params(spec: KernelSpec, args: Sequence[Any], kwargs: Mapping[str, Any],
                  names: frozenset[str]) -> dict[str, Any]:
    """Positional then keyword binding by parameter name (`names`: the parameters'); defaults for scalars."""
    params = spec.params
    if len(args) > len(params):
        raise LaunchError(f"{spec.name}() takes {len(params)} argument(s) "
                          f"({', '.join(p.name for p in params)}) but {len(args)} were given")
    values: dict[str, Any] = {p.name: a for p, a in zip(params, args)}
    for k, v in kwargs.items():
        if k not in names:
            raise LaunchError(f"{spec.name}() got an unexpected argument '{k}' "
                              f"(parameters: {', '.join(p.name for p in params)})")
        if k in values:
            raise LaunchError(f"{spec.name}() got multiple values for argument '{k}'")
        values[k] = v
    if len(values) < len(params):
        for p in params:
            if p.name not in values:
                if p.kind == "scalar" and p.default is not None:
                    values[p.name] = p.default
                else:
                    raise LaunchError(f"{spec.name}() missing argument '{p.name}' "
                                      f"({_param_text(p)})")
    return values


def _param_text(p: ParamSpec) -> str:
    if p.kind == "tensor":
        return f"{p.dtype}[{', '.join(str(d) for d in p.dims)}]"
    return p.dtype


# Binding messages, shared with tilex.torch's fake rules for user kernels (tilex/torch/_user.py).
def dtype_message(p: ParamSpec, got: str) -> str:
    return f"argument '{p.name}': expected dtype {p.dtype}, got {got}"


def rank_message(p: ParamSpec, shape) -> str:
    return (f"argument '{p.name}': expected rank {len(p.dims)} ({_param_text(p)}), "
            f"got rank {len(shape)} with shape {tuple(shape)}")


def fixed_dim_message(p: ParamSpec, i: int, n, shape) -> str:
    return f"argument '{p.name}': dimension {i} must be {p.dims[i]} ({_param_text(p)}), got {n} (shape {tuple(shape)})"


def inconsistent_message(d: str, q: str, j: int, first, name: str, i: int, n) -> str:
    return (f"inconsistent size for symbol {d}: '{q}' has {d} = {first} "
            f"({q}.shape[{j}]) but '{name}' has {d} = {n} ({name}.shape[{i}])")


def constraint_message(spec: KernelSpec, c, symbols: Mapping[str, Any]) -> str:
    vals = ", ".join(f"{n} = {symbols[n]}" for n in expr_symbols(c.py))
    return f"constraint `{c.text}` ({spec.source_file}:{c.line}) failed: {vals}"


# the largest finite value of each float dtype whose conversion overflows to inf (f8e4m3 saturates instead)
_FLOAT_MAX = {"f16": 65504.0, "bf16": 3.3895313892515355e38, "f32": 3.4028234663852886e38}


_INT_RANGES = {d.value: d.int_range for d in PARAM_DTYPES if d.is_int}  # i8 ... i64: the values a scalar may have


def _check_scalar(p: ParamSpec, v: Any) -> Any:
    """Check a scalar's Python/NumPy type and range; return a plain Python value."""
    if isinstance(v, np.generic):
        v = v.item()
    if describe_array(v) is not None:
        raise LaunchError(f"argument '{p.name}': expected a {p.dtype} scalar, got an array")
    if p.dtype == "bool":
        if not isinstance(v, bool):
            raise LaunchError(f"argument '{p.name}': expected a bool scalar, got {type(v).__name__} {v!r}")
        return v
    if p.dtype in _INT_RANGES:
        if isinstance(v, bool) or not isinstance(v, int):
            raise LaunchError(f"argument '{p.name}': expected an integer ({p.dtype}), "
                              f"got {type(v).__name__} {v!r}")
        lo, hi = _INT_RANGES[p.dtype]
        if not lo <= v <= hi:
            raise LaunchError(f"argument '{p.name}': {v} does not fit in {p.dtype}")
        return v
    if p.dtype in ("f16", "bf16", "f32", "f8e4m3", "f8e5m2"):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise LaunchError(f"argument '{p.name}': expected a number ({p.dtype}), "
                              f"got {type(v).__name__} {v!r}")
        try:
            v = float(v)
        except OverflowError:  # an int beyond any float
            raise LaunchError(f"argument '{p.name}': {v} is out of the range of {p.dtype}") from None
        if abs(v) > _FLOAT_MAX.get(p.dtype, np.inf) and v - v == 0:  # rare: beyond the largest finite value
            with np.errstate(over="ignore", invalid="ignore"):
                rounded = float(np.asarray(v).astype(_numpy_dtypes()[p.dtype]))
            if np.isfinite(rounded):  # within half an ulp of the largest value: rounds to it
                return v
            # out of range: f32/f16/bf16 would silently become inf (f8e4m3 saturates to +-448 on both backends)
            raise LaunchError(f"argument '{p.name}': {v!r} is out of the range of {p.dtype} "
                              f"(largest finite value {float(np.finfo(_numpy_dtypes()[p.dtype]).max)!r})")
        return v
    raise LaunchError(f"argument '{p.name}': unknown scalar dtype {p.dtype!r}")


def _wanted(allow_numpy: bool) -> str:
    return "a CuPy array or PyTorch CUDA tensor" + (" or NumPy array" if allow_numpy else "")


def _check_tensor(p: ParamSpec, x: Any, allow_numpy: bool, fixed: Sequence[tuple[int, int]]) -> ArrayInfo:
    """Type, device kind, dtype, rank and contiguity of one tensor argument (`fixed`: the
    (index, size) of its fixed dims)."""
    info = describe_array(x)
    if info is None:
        raise LaunchError(f"argument '{p.name}': expected {_wanted(allow_numpy)} of {_param_text(p)}, "
                          f"got {type(x).__module__}.{type(x).__name__}")
    if info.kind == "numpy" and not allow_numpy:
        raise LaunchError(f"argument '{p.name}': expected a CUDA array ({_wanted(allow_numpy)}), got a NumPy "
                          "array; move it to the GPU first (cupy.asarray)")
    if info.device == "cpu" and info.kind != "numpy":
        raise LaunchError(f"argument '{p.name}': expected a CUDA tensor, got a tensor on cpu")
    if info.dtype != p.dtype:
        raise LaunchError(dtype_message(p, info.dtype_text))
    if len(info.shape) != len(p.dims):
        raise LaunchError(rank_message(p, info.shape))
    for i, d in fixed:
        n = info.shape[i]
        if d != n:
            raise LaunchError(fixed_dim_message(p, i, n, info.shape))
    if not info.c_contiguous:
        raise LaunchError(f"argument '{p.name}': expected a C-contiguous (row-major) tensor, "
                          f"got a non-contiguous one with shape {info.shape}; make a contiguous "
                          "copy first")
    return info


def bind_arguments(spec: KernelSpec, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                   allow_numpy: bool = False) -> BoundArgs:
    """Bind and check call arguments against `spec`; raise LaunchError on any mismatch.

    Every argument is checked on every call; only the constraints and the grid, which
    depend on the symbol values alone, are remembered per tuple of symbol values."""
    plan = _plan(spec)
    values = _match_params(spec, tuple(args), kwargs or {}, plan.names)
    arrays: dict[str, Any] = {}
    scalars: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    symbols: dict[str, int] = {}
    bound_by: dict[str, tuple[str, int]] = {}  # symbol -> (param, dim index)
    device: str | None = None
    device_param = ""
    zero_dims: list[str] = []
    for p, fixed, named in plan.steps:
        v = values[p.name]
        if p.kind == "scalar":
            scalars[p.name] = _check_scalar(p, v)
            continue
        if p.kind != "tensor":
            raise LaunchError(f"internal error: parameter '{p.name}' has unknown kind {p.kind!r}")
        info = _check_tensor(p, v, allow_numpy, fixed)
        arrays[p.name], kinds[p.name] = v, info.kind
        if info.device != "cuda:?":  # objects that only expose a pointer can't be compared
            if device is None:
                device, device_param = info.device, p.name
            elif info.device != device:
                raise LaunchError(f"all tensors must be on the same device: '{device_param}' is on "
                                  f"{device} but '{p.name}' is on {info.device}")
        shape = info.shape
        if 0 in shape:
            zero_dims += [f"{p.name}.shape[{i}] = 0" for i, n in enumerate(shape) if n == 0]
        for i, d in named:
            n = shape[i]
            if d in symbols:
                if symbols[d] != n:
                    q, j = bound_by[d]
                    raise LaunchError(inconsistent_message(d, q, j, symbols[d], p.name, i, n))
            else:
                if n > INT32_MAX:
                    raise LaunchError(f"symbol {d} = {n} (from {p.name}.shape[{i}]) does not fit "
                                      f"in a 32-bit int (must be < 2**31)")
                symbols[d], bound_by[d] = n, (p.name, i)
    if plan.unbound:
        raise LaunchError(f"internal error: symbol {plan.unbound[0]} is not bound by any tensor parameter of "
                          f"{spec.name}")
    key = tuple(symbols.values())  # the symbols are always found in the same order (plan.order)
    grid = plan.grids.get(key)
    if grid is None:
        for c in spec.constraints:
            if not eval_expr(c.py, symbols):
                raise LaunchError(constraint_message(spec, c, symbols))
        grid = eval_grid(spec, symbols)
        plan.remember(key, grid)
    if zero_dims and 0 not in grid:
        raise LaunchError(f"zero-size tensor dimension ({', '.join(zero_dims)}) but the grid "
                          f"{grid} is not empty; tilex kernels only accept empty tensors when "
                          "they launch no blocks")
    ordered = {s: symbols[s] for s in plan.order}
    return BoundArgs(ordered, arrays, scalars, grid, device, kinds)


def eval_grid(spec: KernelSpec, symbols: Mapping[str, int]) -> tuple[int, int, int]:
    """Evaluate `spec.grid` (1 to 3 expressions) into (x, y, z), checking CUDA's limits."""
    if not 1 <= len(spec.grid) <= 3:
        raise LaunchError(f"internal error: {spec.name} has {len(spec.grid)} grid expressions "
                          "(expected 1 to 3)")
    dims = []
    for axis, expr in zip("xyz", spec.grid):
        g = eval_expr(expr, symbols)
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)):
            raise LaunchError(f"internal error: grid {axis} = `{expr}` is not an integer ({g!r})")
        g = int(g)
        limit = GRID_X_MAX if axis == "x" else GRID_YZ_MAX
        vals = ", ".join(f"{n} = {symbols[n]}" for n in expr_symbols(expr))
        if g < 0:
            raise LaunchError(f"grid {axis} = `{expr}` is negative: {g} ({vals})")
        if g > limit:
            raise LaunchError(f"grid {axis} = `{expr}` = {g} exceeds the CUDA limit of {limit} "
                              f"blocks ({vals})")
        dims.append(g)
    while len(dims) < 3:
        dims.append(1)
    return (dims[0], dims[1], dims[2])

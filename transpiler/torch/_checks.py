"""tilex.stdlib's launch-time argument checks restated for fake tensors, whose sizes may be symbolic:
the same conditions, the same messages (tilex.stdlib.messages), raised at trace time.

Sizes are never converted with int() (that would specialize a dynamic size): a condition on sizes
is a torch._check_with on a (Sym)Bool, which records a guard instead; dtypes and ranks are static.
"""
import torch

from ..runtime.arrays import _TORCH_TO_TILEX
from ..stdlib import messages as M
from ..stdlib._launch import FLOATS


def dtype_name(x: torch.Tensor) -> str:
    """The tilex dtype name of x ("bf16", "i64", ...), else torch's spelling, as the stdlib says it."""
    text = str(x.dtype)
    return _TORCH_TO_TILEX.get(text, text)


def _shown(v):
    """A size as a message shows it: a symbolic size by its example value (no guard is recorded)."""
    if isinstance(v, torch.SymInt):
        hint = getattr(v.node, "hint", None)
        return hint if hint is not None else v
    return v


def shown(shape) -> tuple:
    return tuple(_shown(d) for d in shape)


def require(cond, message, exc=ValueError) -> None:
    """Raise `exc(message())` unless `cond` (a bool or SymBool; a guard on symbolic sizes)."""
    torch._check_with(exc, cond, message)


def check_rank(name, x, ndim_min=1, ndim=None) -> None:
    n = x.dim()
    if ndim is not None and n != ndim:
        raise ValueError(M.wrong_rank(name, ndim, shown(x.shape)))
    if n < ndim_min:
        raise ValueError(M.too_few_dims(name, ndim_min, shown(x.shape)))


def check_float(name, x, ndim_min=1, ndim=None) -> str:
    dt = dtype_name(x)
    if dt not in FLOATS:
        raise TypeError(M.not_float(name, dt))
    check_rank(name, x, ndim_min, ndim)
    return dt


def check_int(name, x, ndim=None) -> str:
    dt = dtype_name(x)
    if dt not in ("i32", "i64"):
        raise TypeError(M.not_int(name, dt))
    if ndim is not None:
        check_rank(name, x, ndim, ndim)
    return dt


def check_same_dtype(name, x, want) -> None:
    dt = dtype_name(x)
    if dt != want:
        raise TypeError(M.wrong_dtype(name, want, dt))


def check_shape(name, x, shape) -> None:
    shape = tuple(shape)
    msg = lambda: M.wrong_shape(name, shown(shape), shown(x.shape))  # noqa: E731
    if x.dim() != len(shape):
        raise ValueError(msg())
    for a, b in zip(x.shape, shape):
        require(a == b, msg)


def check_vector(name, v, n, dt) -> None:
    """The optional [N] weight/bias of a row op (tilex.stdlib.norms._vector)."""
    if v is not None:
        check_float(name, v, ndim=1)
        check_same_dtype(name, v, dt)
        check_shape(name, v, (n,))


def numel(shape):
    m = 1
    for d in shape:
        m = m * d
    return m

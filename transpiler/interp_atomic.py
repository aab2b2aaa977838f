"""The interpreter's atomics and checked scatters: element updates in a fixed order, with the device's rules.

`atomic_update` applies one statement's updates to the elements `where` of a tensor, in the tile's
element order (programs run one after another), as `np.add.at` / `np.maximum.at` do: every update is
kept, however often an element repeats. The device runs them in some order, so only float sums (whose
rounding depends on it), `xchg` and `cas` between colliding elements may differ; the rest is exact:

* add: ints wrap; f32/f16/bf16 round after each addition (to the tensor's dtype);
* max/min of f32: a NaN operand is skipped; the others are ordered on their bits as the device does
  (`atomicMax` on the int bits of a value with sign 0, `atomicMin` on the unsigned bits of one with sign 1,
  so -0.0 < +0.0); this is max/min of the values when the tensor holds no NaN;
* xchg: each write lands in order (the last one wins here; on the device, one of them);
* cas: in order, each element whose bits equal `compare`'s takes the value (f32 compares bits).

`atomic_fetch` does the same and returns each element's old value (`old = atomic_add(...)`): the value the element
held just before its update, in that serial order, which is one order the device may run them in (the olds of a
ticket counter's colliding adds are 0, 1, 2, ... in element order here, some permutation of them on the device).

`check_distinct` enforces the `distinct = True` claim of a scatter.
"""
from __future__ import annotations

import numpy as np

from .interp_numeric import InterpError
from .types import DType

_BITS = {DType.F32: (np.int32, np.uint32)}


def atomic_update(view: np.ndarray, where: tuple, op: str, v: np.ndarray, compare, dt: DType) -> None:
    """Apply atomic `op` with values `v` (and `compare` for cas) to `view[where]`, element by element."""
    if not v.size:
        return
    if op == "add":
        np.add.at(view, where, v)
    elif op in ("max", "min"):
        if dt not in _BITS:
            (np.maximum if op == "max" else np.minimum).at(view, where, v)
            return
        signed, unsigned = _BITS[dt]
        keep = ~np.isnan(v)
        neg = np.signbit(v) & keep
        pos = keep & ~neg
        # a value with sign 0 is ordered on its signed bits, one with sign 1 on its unsigned bits (reversed)
        up, down = (np.maximum, np.minimum) if op == "max" else (np.minimum, np.maximum)
        up.at(view.view(signed), tuple(i[pos] for i in where), v[pos].view(signed))
        down.at(view.view(unsigned), tuple(i[neg] for i in where), v[neg].view(unsigned))
    elif op == "xchg":
        for k in range(v.size):
            view[tuple(i[k] for i in where)] = v[k]
    elif op == "cas":
        bits = view.view(_BITS[dt][1]) if dt in _BITS else view
        want = compare.view(_BITS[dt][1]) if dt in _BITS else compare
        for k in range(v.size):
            at = tuple(i[k] for i in where)
            if bits[at] == want[k]:
                view[at] = v[k]
    else:
        raise InterpError(f"internal error: no interpreter rule for atomic_{op}")


def atomic_fetch(view: np.ndarray, where: tuple, op: str, v: np.ndarray, compare, dt: DType) -> np.ndarray:
    """`atomic_update`, returning the old value of each of its updates (in element order)."""
    olds = np.empty(v.shape, dtype=view.dtype)
    if not v.size:
        return olds
    if op == "add" and dt.is_int:  # vectorized: each old is the start value plus the earlier updates of its element
        flat = np.ravel_multi_index(where, view.shape)
        order = np.argsort(flat, kind="stable")
        f, inc = flat[order], v[order].astype(view.dtype)
        run = np.cumsum(inc, dtype=view.dtype) - inc  # ints wrap, as the device's
        first = np.r_[True, f[1:] != f[:-1]]
        base = np.maximum.accumulate(np.where(first, np.arange(f.size), 0))  # where each element's run starts
        olds[order] = view.reshape(-1)[f] + (run - run[base])
        np.add.at(view, where, v)
        return olds
    for k in range(v.size):
        at = tuple(i[k : k + 1] for i in where)
        olds[k] = view[at][0]
        atomic_update(view, at, op, v[k : k + 1], None if compare is None else compare[k : k + 1], dt)
    return olds


def check_distinct(view: np.ndarray, where: tuple, what: str) -> None:
    """Raise if two of the elements `view[where]` (valid ones only) are one: `what` names the store."""
    if not where or not where[0].size:
        return
    flat = np.ravel_multi_index(where, view.shape)
    uniq, first, counts = np.unique(flat, return_index=True, return_counts=True)
    if (counts > 1).any():
        k = first[np.argmax(counts > 1)]
        at = ", ".join(str(int(i[k])) for i in where)
        raise InterpError(f"{what}: the subscript is marked distinct = True, but element [{at}] is written "
                          f"{int(counts.max())} times by one program; use an atomic (atomic_add, atomic_xchg) "
                          "where indices can repeat")

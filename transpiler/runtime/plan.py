"""Launch plans: the checked argument layout of a Kernel call, replayed by later calls of the same layout.

A call's *signature* is everything the argument checks depend on: the number of positional arguments, the
keyword names, and per argument: for a torch tensor or CuPy array its type, shape, dtype, device,
contiguity and its address modulo 16 (TMA and 16-byte accesses need aligned bases); for a scalar its type.
The first call of a signature is bound and checked in full (`bind_arguments`, with every clear error); a
plan is made only when that passed, so a later call of the same signature passes the same checks, except
the scalars' own checks (their range depends on the value), which run on every replay. Arguments of other
kinds (NumPy arrays, other `__cuda_array_interface__` objects) have no signature and always take the full
path.

A plan holds the kernel's parameter buffer (ctypes storage for every pointer, scalar, symbol and TMA map,
and the array of their addresses) and its `driver.LaunchConfig` (grid, block, shared memory, stream), the
two things cuLaunchKernelEx takes (`driver.py`). A replay writes the new pointers, scalars and stream into
them and launches. TMA maps depend on the address: a map is re-encoded (memoized per address by
`tma.encode_nd`) when its tensor's pointer changed.
"""
from __future__ import annotations

import ctypes
import threading
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from ..diagnostics import LaunchError
from ..spec import KernelSpec, ParamKind
from ..types import PARAM_DTYPES
from .args import _FLOAT_MAX, _INT_RANGES, BoundArgs, _check_scalar
from .arrays import _CUPY_TYPES, _PLAIN_SCALARS, _TORCH_TYPES, is_cupy_array, is_torch_tensor
from .driver import LaunchConfig

# ctypes storage of a scalar parameter by its dtype: f16/bf16/f8e4m3 scalars are passed as float (the kernel
# rounds). The one table of scalar C types: launch._SCALAR_TYPES (the CuPy path's) is derived from it
_SCALAR_CTYPES = {d: getattr(ctypes, d.info.scalar_arg) for d in PARAM_DTYPES}  # from types.DTYPES
_TMA_BYTES = ctypes.c_ubyte * 128


def scalar_fast_check(p) -> tuple:
    """(type, lo, hi): a value of exactly this Python type within [lo, hi] is one `_check_scalar(p, v)` returns
    unchanged, so a replay skips the full check for it (anything else, NaN and inf included, takes the check)."""
    if p.dtype == "bool":
        return bool, False, True
    if p.dtype in _INT_RANGES:
        return (int, *_INT_RANGES[p.dtype])
    top = _FLOAT_MAX.get(p.dtype, float("inf"))  # f8 scalars saturate: any float
    return float, -top, top


def signature(args: tuple, kwargs: dict) -> tuple[tuple, list] | None:
    """(key, pointers) of a call: the key as the module docstring says, and per argument (positional,
    then keyword values in the order given) its device address or None for a scalar. None when an
    argument is neither a torch tensor, a CuPy array nor a Python/NumPy scalar."""
    try:
        return _signature(args, kwargs)
    except Exception:  # e.g. a tensor without storage: the full path says what is wrong with it
        return None


def _signature(args: tuple, kwargs: dict) -> tuple[tuple, list] | None:
    key: list = [len(args)]
    ptrs: list = []
    for v in (args if not kwargs else (*args, *kwargs.values())):
        t = type(v)
        if t in _PLAIN_SCALARS:
            key.append(t)
            ptrs.append(None)
            continue
        if t not in _TORCH_TYPES and t not in _CUPY_TYPES:
            if isinstance(v, np.generic):
                key.append(t)
                ptrs.append(None)
                continue
            is_torch_tensor(v) or is_cupy_array(v)  # remembers the type when its class is an array type
            if t not in _TORCH_TYPES and t not in _CUPY_TYPES:
                return None  # not an array type the checks can be keyed on
        if t in _TORCH_TYPES:
            ptr = v.data_ptr()
            key.append((t, v.shape, v.dtype, v.device, v.is_contiguous(), ptr & 15))
        else:
            ptr = v.data.ptr
            key.append((t, v.shape, v.dtype, v.device.id, v.flags.c_contiguous, ptr & 15))
        ptrs.append(ptr)
    if kwargs:
        key.append(tuple(kwargs))
    return tuple(key), ptrs


@lru_cache(maxsize=1)
def _torch_stream_getter() -> Callable[[int], int]:
    """device index -> torch's current raw stream handle there: torch._C._cuda_getCurrentRawStream where
    torch has it (no Stream object is made), else torch.cuda.current_stream(device).cuda_stream."""
    import torch

    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: int(torch.cuda.current_stream(torch.device("cuda", device)).cuda_stream)


def stream_handle(stream: Any, device: int, uses_torch: bool) -> int:
    """The raw cudaStream_t a launch goes to: `stream` (a CuPy stream, a torch.cuda.Stream or a handle), else
    torch's current stream when a torch tensor is passed, else CuPy's current stream."""
    if stream is None:
        if uses_torch:
            return int(_torch_stream_getter()(device))
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    if type(stream) is int:
        return stream
    if type(stream).__module__.split(".")[0] == "cupy":
        return int(stream.ptr)
    handle = getattr(stream, "cuda_stream", None)
    if not isinstance(handle, int):
        raise LaunchError(f"stream: expected a CuPy stream, torch.cuda.Stream or stream handle, "
                          f"got {type(stream).__name__}")
    return handle


class _Map:
    """The parameter slot of one TMA map and the address it was last encoded for."""

    __slots__ = ("index", "m", "param", "slot", "ptr")

    def __init__(self, index: int, m, param, slot, ptr: int):
        self.index, self.m, self.param, self.slot, self.ptr = index, m, param, slot, ptr


class LaunchPlan:
    """One checked argument layout of a kernel, ready to replay (see the module docstring).

    `function`: the CUfunction handle loaded on `device`; `current_device`: () -> the calling thread's
    device ordinal. None function: an empty grid (nothing is launched)."""

    def __init__(self, spec: KernelSpec, bound: BoundArgs, nargs: int, kwnames: tuple, ptrs: list,
                 device: int, function: int | None, current_device: Callable[[], int] | None):
        from .launch import tma_argument

        self.spec, self.device, self.function = spec, device, function
        self.current_device = current_device
        self.empty = bound.empty
        self.grid = bound.grid
        self.uses_torch = bound.uses_torch
        self.one_kind = len(set(bound.kinds.values())) <= 1  # all torch, or all CuPy
        self.threads, self.smem = int(spec.threads), int(spec.smem_bytes)
        self.symbols = dict(bound.symbols)  # sizes only: the plan keeps no reference to the caller's arrays
        where = {p.name: (i if i < nargs else nargs + kwnames.index(p.name) if p.name in kwnames else None)
                 for i, p in enumerate(spec.params)}
        slots: list = []
        tensors, scalars, maps = [], [], []  # (call position, slot); (call position, param, slot, fast check); maps
        for p in spec.params:  # in the declared order, the kernel's signature (a scalar may come before a tensor)
            if p.kind == ParamKind.TENSOR:
                slot = ctypes.c_uint64(ptrs[where[p.name]])
                tensors.append((where[p.name], slot))
            else:
                slot = _SCALAR_CTYPES[p.dtype](bound.scalars[p.name])
                if where[p.name] is not None:  # a default stays as written
                    scalars.append((where[p.name], p, slot, scalar_fast_check(p)))
            slots.append(slot)
        slots += [ctypes.c_int32(bound.symbols[s]) for s in spec.symbols]
        params = {p.name: p for p in spec.params}
        for m in spec.tma if not self.empty else ():  # an empty grid launches nothing: no maps to encode
            index = where[m.tensor]
            slot = _TMA_BYTES.from_buffer_copy(tma_argument(m, params[m.tensor], ptrs[index], self.symbols).tobytes())
            maps.append(_Map(index, m, params[m.tensor], slot, ptrs[index]))
            slots.append(slot)
        self.tensors, self.scalars, self.maps = tuple(tensors), tuple(scalars), tuple(maps)
        self._slots = slots  # keeps the storage the addresses point to alive
        self.params = (ctypes.c_void_p * max(1, len(slots)))(*(ctypes.addressof(s) for s in slots))
        self._lock = threading.Lock()  # the buffer is shared; ctypes releases the GIL during the launch
        self._config = LaunchConfig(*self.grid, self.threads, 1, 1, self.smem, None, None, 0)
        self._config_ptr = ctypes.pointer(self._config)  # as driver.launcher takes them: nothing to convert
        self._function = ctypes.c_void_p(function)
        self._torch_stream = _torch_stream_getter() if self.uses_torch and not self.empty else None

    def replay(self, args: tuple, kwargs: dict, ptrs: list, stream: Any, launch: Callable[..., int]) -> bool:
        """Check the scalars, fill in this call's pointers and scalars, launch with `launch` (driver.launcher()).
        False when the direct launch could not be made (another device is current, or the driver refused it):
        the caller then takes the full path, whose CuPy launch switches devices or raises CuPy's error."""
        if self.scalars:
            flat = (*args, *kwargs.values()) if kwargs else args
            values = []
            for i, p, slot, (t, lo, hi) in self.scalars:
                v = flat[i]
                values.append((slot, v if type(v) is t and lo <= v <= hi else _check_scalar(p, v)))
        else:
            values = ()
        if self.empty:
            return True
        if stream is None and self.uses_torch:  # the common case, without stream_handle's branches
            handle = self._torch_stream(self.device)
        else:
            handle = stream_handle(stream, self.device, self.uses_torch)
        if self.current_device() != self.device:
            return False
        lock = self._lock
        lock.acquire()  # acquire/release: a `with` block costs twice as much
        try:
            for slot, v in values:
                slot.value = v
            err = self._fire(ptrs, handle, launch)
        finally:
            lock.release()
        return err == 0

    def patches(self, sources: list, values: tuple) -> tuple[tuple, tuple, tuple]:
        """(tensor patches, map patches, scalar writes) for `fire`: `sources[i]` is (index, byte offset) of call
        position i's address in the list `fire` will be given (None for a scalar); `values` the checked scalar
        values in `self.scalars` order."""
        tensors = tuple((slot, *sources[i]) for i, slot in self.tensors)
        maps = tuple((mp, *sources[mp.index]) for mp in self.maps)
        writes = tuple((slot, v) for (_, _, slot, _), v in zip(self.scalars, values))
        return tensors, maps, writes

    def fire(self, tensors: tuple, maps: tuple, writes: tuple, addresses: list, handle: int,
             launch: Callable[..., int]) -> int:
        """Launch with checked inputs (the stdlib's fast path, `tilex.stdlib._launch.fastpath`; the three tuples
        from `patches`): each pointer slot gets addresses[index] + offset, each scalar slot its value, the stream
        `handle`. No device check here (the caller made it). The driver's CUresult (0: launched)."""
        lock = self._lock
        lock.acquire()
        try:
            for slot, v in writes:
                slot.value = v
            self._config.hStream = handle
            for slot, j, off in tensors:
                slot.value = addresses[j] + off
            for mp, j, off in maps:
                ptr = addresses[j] + off
                if ptr != mp.ptr:
                    self._encode(mp, ptr)
            return launch(self._config_ptr, self._function, self.params, None)
        finally:
            lock.release()

    def _fire(self, ptrs: list, handle: int, launch: Callable[..., int]) -> int:
        """Write the stream and pointers (re-encoding TMA maps whose address changed) and launch; under the lock."""
        self._config.hStream = handle
        for i, slot in self.tensors:
            slot.value = ptrs[i]
        for mp in self.maps:
            ptr = ptrs[mp.index]
            if ptr != mp.ptr:
                self._encode(mp, ptr)
        return launch(self._config_ptr, self._function, self.params, None)

    def _encode(self, mp: _Map, ptr: int) -> None:
        from .launch import tma_argument

        encoded = tma_argument(mp.m, mp.param, ptr, self.symbols).tobytes()
        ctypes.memmove(ctypes.addressof(mp.slot), encoded, 128)
        mp.ptr = ptr

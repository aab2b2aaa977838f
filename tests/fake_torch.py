"""A stand-in `torch` module for measuring and testing the host side of the torch path
without torch or a GPU: NumPy-backed tensors whose type module is `torch`, as the runtime
recognises them. Used by tests/test_launch_overhead.py and benchmarks/host_overhead_cpu.py."""
from __future__ import annotations

import types

import ml_dtypes
import numpy as np

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "int32": np.int32,
          "int64": np.int64, "bool": np.bool_, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
          "float8_e5m2": ml_dtypes.float8_e5m2, "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16}


class Dtype:
    def __init__(self, name, np_dtype):
        self.name, self.np = name, np.dtype(np_dtype)

    def __str__(self):
        return self.name

    __repr__ = __str__


class Device:
    def __init__(self, type_="cuda", index=0):
        self.type, self.index = type_, index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other):  # as torch.device: equal by type and index (launch plans are keyed on it)
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))


class FakeTensor:
    """NumPy-backed; as much of torch.Tensor as tilex.stdlib's torch path uses."""

    def __init__(self, a, dtype, device=None):
        self._a, self.dtype, self.device = a, dtype, device or Device()

    @property
    def shape(self):
        return tuple(self._a.shape)

    def is_contiguous(self):
        return bool(self._a.flags.c_contiguous)

    def contiguous(self):
        return self if self.is_contiguous() else FakeTensor(np.ascontiguousarray(self._a), self.dtype, self.device)

    def reshape(self, shape):
        return FakeTensor(self._a.reshape(shape), self.dtype, self.device)

    def data_ptr(self):
        return 0x7F0000000000  # never dereferenced: launches are stubbed out

    def __getitem__(self, idx):
        return FakeTensor(self._a[idx], self.dtype, self.device)

    def __setitem__(self, idx, value):
        self._a[idx] = value._a if isinstance(value, FakeTensor) else value


FakeTensor.__module__ = "torch"


def module() -> types.ModuleType:
    """A fresh stand-in `torch` module (dtypes, Tensor, empty, device, tensor(shape, dtype))."""
    t = types.ModuleType("torch")
    for n, d in DTYPES.items():
        setattr(t, n, Dtype(f"torch.{n}", d))
    t.Tensor = FakeTensor
    t.device = Device
    t.empty = lambda shape, dtype, device=None: FakeTensor(np.empty(shape, dtype.np), dtype, device)

    def tensor(shape, dtype="bfloat16", device=None, seed=0):
        dt = getattr(t, dtype)
        return FakeTensor(np.random.default_rng(seed).standard_normal(shape).astype(dt.np), dt, device)

    t.tensor = tensor
    return t

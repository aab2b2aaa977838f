"""Stand-ins for testing the stdlib's per-call fast path (`tilex.stdlib._launch.fastpath`) on the CPU.

`install(monkeypatch)` puts a stand-in `torch` (NumPy-backed tensors with real, distinct host addresses,
strides in elements as torch gives them) and `cupy` in sys.modules, stubs the module load, TMA encoding and the
driver's cuLaunchKernel (a `Driver` that decodes every parameter buffer it is given), and fixes the arch to an
H200's. Nothing is computed: the launches are what the tests compare (which kernel, grid, block, shared memory,
stream, and every parameter, pointers named by where they point).
"""
from __future__ import annotations

import ctypes
import sys
import types

import numpy as np

import fake_torch
from fake_torch import Device, FakeTensor


class AddrTensor(FakeTensor):
    """A stand-in torch tensor whose data_ptr is its NumPy buffer's address (views share their base's memory)."""

    def __init__(self, a, dtype, device=None):
        super().__init__(a, dtype, device)
        self._ptr = int(a.__array_interface__["data"][0])  # read once: a real tensor's is a field too
        self._stride = tuple(s // a.itemsize for s in a.strides)

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._stride

    def element_size(self):
        return int(self._a.itemsize)

    def numel(self):
        return int(self._a.size)

    def contiguous(self):
        return self if self.is_contiguous() else AddrTensor(np.ascontiguousarray(self._a), self.dtype, self.device)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return AddrTensor(self._a.reshape(shape), self.dtype, self.device)

    def __getitem__(self, idx):
        return AddrTensor(self._a[idx], self.dtype, self.device)

    def to(self, dtype):
        return AddrTensor(self._a.astype(dtype.np), dtype, self.device)

    def clone(self):
        return AddrTensor(self._a.copy(), self.dtype, self.device)

    def movedim(self, a, b):
        return AddrTensor(np.moveaxis(self._a, a, b), self.dtype, self.device)


AddrTensor.__module__ = "torch"

_CTYPES = {"f32": ctypes.c_float, "f16": ctypes.c_float, "bf16": ctypes.c_float, "f8e4m3": ctypes.c_float,
           "i32": ctypes.c_int32, "i64": ctypes.c_int64, "bool": ctypes.c_bool}


class Driver:
    """cuLaunchKernelEx: decodes each launch's LaunchConfig and parameter buffer by the spec of the function it
    is given."""

    def __init__(self):
        self.launches: list = []
        self.specs: dict = {}  # function handle -> KernelSpec
        self.result = 0

    def __call__(self, config, f, params, extra):
        c = config.contents
        spec = self.specs[f.value]
        layout = ([("ptr", ctypes.c_uint64) for p in spec.params if p.kind == "tensor"]
                  + [("scalar", _CTYPES[p.dtype]) for p in spec.params if p.kind == "scalar"]
                  + [("sym", ctypes.c_int32)] * len(spec.symbols) + [("tma", ctypes.c_ubyte * 128)] * len(spec.tma))
        values = []
        for i, (what, ct) in enumerate(layout):
            v = ct.from_address(params[i])
            values.append((what, bytes(v) if what == "tma" else v.value))
        self.launches.append(dict(kernel=spec.name, grid=(c.gridDimX, c.gridDimY, c.gridDimZ),
                                  block=(c.blockDimX, c.blockDimY, c.blockDimZ), smem=c.sharedMemBytes,
                                  stream=c.hStream or 0, values=values))
        return self.result


def install(monkeypatch):
    """The stand-ins (see the module docstring); returns a namespace: torch, driver, state (current device,
    stream handle), tensor(shape, dtype, device) making random tensors."""
    import tilex.runtime.nvrtc as nvrtc
    from tilex.runtime import Kernel, driver, plan as rt_plan, tma
    from tilex.stdlib import _launch as L

    t = fake_torch.module()
    t.Tensor = AddrTensor
    t.empty = lambda shape, dtype, device=None: AddrTensor(np.empty(shape, dtype.np), dtype, device)

    def empty_strided(shape, stride, dtype, device=None):  # contiguous strides only (what tilex asks for)
        a = np.empty(shape, dtype.np)
        assert tuple(s // a.itemsize for s in a.strides) == tuple(stride) or a.size == 0, (shape, stride)
        return AddrTensor(a, dtype, device)
    t.empty_strided = empty_strided
    state = {"device": 0, "stream": 0x5000}
    t._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda d: state["stream"] + d)
    monkeypatch.setitem(sys.modules, "torch", t)
    cp = types.ModuleType("cupy")
    cp.cuda = types.SimpleNamespace(Device=lambda i=None: types.SimpleNamespace(id=state["device"]),
                                    runtime=types.SimpleNamespace(getDevice=lambda: state["device"]),
                                    get_current_stream=lambda: types.SimpleNamespace(ptr=0xC0))
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(nvrtc, "default_arch", lambda: "sm_90a")
    rt_plan._torch_stream_getter.cache_clear()
    L._torch_dtypes.cache_clear()
    drv = Driver()
    monkeypatch.setattr(driver, "launcher", lambda: drv)
    monkeypatch.setattr(tma, "_encoder", lambda: (lambda *a: 0))
    handles = {}

    def function(self, device):
        h = handles.setdefault(id(self), 0xF000 + 16 * len(handles))
        drv.specs[h] = self.spec
        return types.SimpleNamespace(ptr=h)

    monkeypatch.setattr(Kernel, "_function", function)
    full = []  # launches that took CuPy's path (a device switch, a refused direct launch)
    monkeypatch.setattr(Kernel, "_prepare", lambda self, bound, stream: full.append(self.spec.name))
    rng = np.random.default_rng(0)

    def tensor(shape, dtype="bfloat16", device=None, low=None, high=None):
        dt = getattr(t, dtype)
        if low is not None:
            a = rng.integers(low, high, shape).astype(dt.np)
        else:
            a = rng.standard_normal(shape).astype(dt.np)
        return AddrTensor(a, dt, device or Device("cuda", 0))

    return types.SimpleNamespace(torch=t, driver=drv, state=state, tensor=tensor, full=full, Device=Device)


def flatten(result) -> list:
    if result is None:
        return []
    if isinstance(result, (tuple, list)):
        return [x for r in result for x in flatten(r)]
    return [result]


def named_launches(launches: list, inputs: list, result) -> list:
    """The launches with each pointer replaced by where it points: ("in", argument, offset) inside an input,
    ("out", result position, offset) inside a returned tensor, ("tmp", first-appearance rank) otherwise."""
    ranges = []
    for tag, arrays in (("in", inputs), ("out", flatten(result))):
        for i, a in enumerate(arrays):
            if isinstance(a, AddrTensor):
                ranges.append((a.data_ptr(), max(1, a._a.nbytes), (tag, i)))
    temps: dict = {}
    out = []
    for launch in launches:
        vals = []
        for what, v in launch["values"]:
            if what == "ptr":
                hit = [(tag, v - base) for base, size, tag in ranges if base <= v < base + size]
                v = (*hit[0][0], hit[0][1]) if hit else ("tmp", temps.setdefault(v, len(temps)))
            vals.append((what, v))
        out.append({**launch, "values": vals})
    return out

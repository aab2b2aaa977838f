"""The direct launch's ctypes plumbing on the CPU: driver.launcher() opened on a stand-in libcuda (a small C
library built with the system C compiler, exporting cuLaunchKernelEx with cuda.h's CUlaunchConfig) that copies
out what the real driver would read: the grid, block, shared memory, stream, launch attributes, `extra`, and
each kernel parameter through kernelParams[i] with the parameter's size. Compared, byte for byte, with the CuPy path's argument list
(kernel_arguments) packed as C types, on random sizes, addresses and scalars."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

import fake_torch
from fake_torch import FakeTensor
from tilex.runtime import Kernel, driver, launch as rt_launch, plan as rt_plan, tma as rt_tma
from tilex.runtime.args import bind_arguments
from tilex.spec import KernelSpec, ParamSpec, TmaMap

STUB = r"""
#include <stdint.h>
#include <string.h>
static int n_sizes;
static int sizes[64];
static unsigned char record[8192];
static unsigned long long meta[12];
static int result;
void stub_setup(int n, const int* s, int r) { n_sizes = n; memcpy(sizes, s, n * sizeof(int)); result = r; }
const unsigned long long* stub_meta(void) { return meta; }
const unsigned char* stub_record(void) { return record; }
typedef struct CUlaunchConfig_st {  /* cuda.h */
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    void* hStream;
    void* attrs;
    unsigned int numAttrs;
} CUlaunchConfig;
int cuLaunchKernelEx(const CUlaunchConfig* c, void* f, void** params, void** extra) {
    meta[0] = (uintptr_t)f; meta[1] = c->gridDimX; meta[2] = c->gridDimY; meta[3] = c->gridDimZ;
    meta[4] = c->blockDimX; meta[5] = c->blockDimY; meta[6] = c->blockDimZ; meta[7] = c->sharedMemBytes;
    meta[8] = (uintptr_t)c->hStream; meta[9] = (uintptr_t)extra;
    meta[10] = (uintptr_t)c->attrs; meta[11] = c->numAttrs;
    size_t off = 0;
    for (int i = 0; i < n_sizes; i++) { memcpy(record + off, params[i], sizes[i]); off += sizes[i]; }
    return result;
}
"""

SPEC = KernelSpec("k", (ParamSpec("a", "tensor", "bf16", ("M", "K")), ParamSpec("b", "tensor", "bf16", ("K",)),
                        ParamSpec("alpha", "scalar", "f32"), ParamSpec("step", "scalar", "i64", default=0),
                        ParamSpec("flag", "scalar", "bool", default=False), ParamSpec("h", "scalar", "bf16", default=0.5)),
                  ("M", "K"), (), ("cdiv(M, 3)", "2"), 96, 4096, tma=(TmaMap("tx_map0", "a", 64, 64),))
SIZES = [8, 8, 4, 8, 1, 4, 4, 4, 128]  # a, b, alpha, step, flag, h (a float), M, K, the map


@pytest.fixture
def stub(tmp_path, monkeypatch):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src, lib = tmp_path / "stub.c", tmp_path / "libcudastub.so"
    src.write_text(STUB)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True)
    so = ctypes.CDLL(str(lib))
    so.stub_meta.restype = ctypes.POINTER(ctypes.c_ulonglong)
    so.stub_record.restype = ctypes.POINTER(ctypes.c_ubyte)
    monkeypatch.setattr(driver, "LIBRARY", str(lib))
    monkeypatch.delenv(driver.ENV, raising=False)
    driver.launcher.cache_clear()
    t = fake_torch.module()
    t._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda d: 0xABC000 + d)
    monkeypatch.setitem(sys.modules, "torch", t)
    cp = types.ModuleType("cupy")
    cp.cuda = types.SimpleNamespace(Device=lambda i=None: types.SimpleNamespace(id=0),
                                    runtime=types.SimpleNamespace(getDevice=lambda: 0))
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(rt_tma, "encode_nd", lambda ptr, dtype, dims, box: np.void(
        (np.arange(16, dtype=np.uint64) * 0 + np.uint64(ptr) + np.arange(16, dtype=np.uint64)).tobytes()))
    rt_plan._torch_stream_getter.cache_clear()
    so.stub_setup(len(SIZES), (ctypes.c_int * len(SIZES))(*SIZES), 0)
    yield so, t
    driver.launcher.cache_clear()
    rt_plan._torch_stream_getter.cache_clear()


class Ptr(FakeTensor):
    def __init__(self, a, dtype, ptr):
        super().__init__(a, dtype)
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


Ptr.__module__ = "torch"


def packed(values) -> bytes:
    """kernel_arguments' list as the driver reads it: bf16/f16 scalars as float, bool one byte."""
    return b"".join(v.tobytes() for v in values)


def test_the_driver_reads_what_the_cupy_path_passes(stub, monkeypatch):
    so, t = stub
    assert driver.launcher() is not None
    k = Kernel(SPEC, "// never compiled")
    monkeypatch.setattr(k, "_function", lambda device: types.SimpleNamespace(ptr=0xF00D0))
    fallbacks = []
    monkeypatch.setattr(Kernel, "_prepare", lambda self, bound, stream: fallbacks.append(bound))
    rng = np.random.default_rng(3)
    for i in range(8):
        m, kk = int(rng.integers(1, 500)), 8 * int(rng.integers(1, 60))
        a = Ptr(np.zeros((m, kk), fake_torch.DTYPES["bfloat16"]), t.bfloat16, int(rng.integers(1, 2**44)) * 16)
        b = Ptr(np.zeros(kk, fake_torch.DTYPES["bfloat16"]), t.bfloat16, int(rng.integers(1, 2**44)) * 2)
        kwargs = {"alpha": float(rng.standard_normal()), "step": int(rng.integers(-2**62, 2**62))}
        if i % 2:
            kwargs.update(flag=True, h=float(rng.standard_normal()))
        stream = None if i % 3 else int(rng.integers(1, 2**40))
        for _ in range(2):  # makes the plan, then replays it
            k(a, b, stream=stream, **kwargs)
            meta = [so.stub_meta()[j] for j in range(12)]
            assert meta == [0xF00D0, -(-m // 3), 2, 1, 96, 1, 1, 4096, stream if stream else 0xABC000, 0, 0, 0]
            want = packed(rt_launch.kernel_arguments(SPEC, bind_arguments(SPEC, (a, b), kwargs)))
            assert bytes(so.stub_record()[:sum(SIZES)]) == want
    assert fallbacks == []
    so.stub_setup(len(SIZES), (ctypes.c_int * len(SIZES))(*SIZES), 1)  # CUDA_ERROR_INVALID_VALUE: the CuPy path
    k(a, b, **kwargs)
    assert len(fallbacks) == 1

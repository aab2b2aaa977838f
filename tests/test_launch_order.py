"""The launch packs the parameters in the kernel signature's order, a scalar declared before a tensor included.

Found by tests/test_atomics_gpu.py on the H200 (CUDA_ERROR_MISALIGNED_ADDRESS): `kernel masked(x: f32[N],
lim: f32, y: out f32[N], ...)` is emitted as `masked(const float* x, const float lim, float* y, ...)`, but
both launch paths packed every tensor pointer first and the scalars after them, so `y` took the next
pointer's bits and the last tensor read 8 bytes of a 4-byte float. CPU-only: fake device arrays.
"""
from __future__ import annotations

import ctypes

from tilex.launchspec import make_spec
from tilex.pipeline import Options, compile_program
from tilex.runtime.args import bind_arguments
from tilex.runtime.launch import kernel_arguments
from tilex.runtime.plan import LaunchPlan

SRC = """
kernel k(x: f32[N], lim: f32, y: out f32[N], n: i32, z: out f32[N])
    grid (1,)
{
    y[0 : 8] = x[0 : 8] + lim
    z[0 : 8] = x[0 : 8] * n.to(f32)
}
"""


class FakeDeviceArray:
    def __init__(self, n: int, ptr: int):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 3,
                                         "strides": None}


def _bound():
    spec = make_spec(compile_program(SRC, "k.tile", Options()).kernels[0], SRC)
    args = (FakeDeviceArray(10, 4096), 0.5, FakeDeviceArray(10, 8192), 7, FakeDeviceArray(10, 12288))
    return spec, args, bind_arguments(spec, args, {})


def test_cupy_path_arguments_follow_the_signature():
    spec, _, bound = _bound()
    got = [(type(a).__name__, a.item()) for a in kernel_arguments(spec, bound)]
    assert got == [("uint64", 4096), ("float32", 0.5), ("uint64", 8192), ("int32", 7), ("uint64", 12288),
                   ("int32", 10)]


def test_plan_buffer_follows_the_signature():
    spec, args, bound = _bound()
    plan = LaunchPlan(spec, bound, len(args), (), [4096, None, 8192, None, 12288], 0, None, None)
    slots = [ctypes.cast(plan.params[i], ctypes.POINTER(t)).contents.value for i, t in enumerate(
        (ctypes.c_uint64, ctypes.c_float, ctypes.c_uint64, ctypes.c_int32, ctypes.c_uint64, ctypes.c_int32))]
    assert slots == [4096, 0.5, 8192, 7, 12288, 10]

"""Where the engine's arrays live: NumPy (the tilex interpreter) or torch CUDA tensors.

The backend only allocates, copies and casts; every computation on the forward pass is a
`tilex.stdlib` call, which dispatches on the array type it is given (NumPy -> interpreter,
torch CUDA -> generated CUDA kernels launched on torch's current stream).
"""
from __future__ import annotations

import numpy as np

DTYPES = ("bf16", "f16", "f32")


def numpy_dtype(name: str):
    import ml_dtypes

    return {"bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.dtype(np.float16),
            "f32": np.dtype(np.float32), "i32": np.dtype(np.int32), "i64": np.dtype(np.int64)}[name]


class Backend:
    name = "?"

    def is_gpu(self) -> bool:
        return False


class NumpyBackend(Backend):
    """Host arrays: tilex.stdlib runs each kernel in the NumPy interpreter."""

    name = "interp"

    def empty(self, shape, dtype):
        return np.empty(shape, numpy_dtype(dtype))

    def zeros(self, shape, dtype):
        return np.zeros(shape, numpy_dtype(dtype))

    def from_numpy(self, a, dtype=None):
        a = np.ascontiguousarray(a)
        return a.astype(numpy_dtype(dtype)) if dtype is not None else a.copy()

    def to_numpy(self, a):
        return np.asarray(a)

    def cast(self, a, dtype):
        a = np.asarray(a)
        return np.ascontiguousarray(a.astype(numpy_dtype(dtype)))

    def cat(self, arrays, axis=0):
        return np.ascontiguousarray(np.concatenate(arrays, axis=axis))

    def randn(self, shape, dtype, std, rng):
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(numpy_dtype(dtype))

    def copy_into(self, dst, src_numpy):
        dst[...] = src_numpy

    def synchronize(self):
        pass

    def nbytes(self, a) -> int:
        return int(a.nbytes)

    def empty_like(self, x):
        return np.empty_like(x)


class TorchCudaBackend(Backend):
    """torch CUDA tensors: tilex.stdlib launches the compiled kernels on torch's current stream."""

    name = "cuda"

    def __init__(self, device="cuda"):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("--backend cuda needs a CUDA GPU visible to torch")
        self.torch = torch
        self.device = torch.device(device)

    def is_gpu(self) -> bool:
        return True

    def tdtype(self, name):
        t = self.torch
        return {"bf16": t.bfloat16, "f16": t.float16, "f32": t.float32, "i32": t.int32,
                "i64": t.int64}[name]

    def empty(self, shape, dtype):
        return self.torch.empty(shape, dtype=self.tdtype(dtype), device=self.device)

    def zeros(self, shape, dtype):
        return self.torch.zeros(shape, dtype=self.tdtype(dtype), device=self.device)

    def from_numpy(self, a, dtype=None):
        t = self.torch
        a = np.ascontiguousarray(a)
        if a.dtype.name == "bfloat16":  # torch cannot wrap ml_dtypes arrays: go through the bits
            x = t.from_numpy(a.view(np.int16)).view(t.bfloat16)
        else:
            x = t.from_numpy(a)
        x = x.to(self.device)
        return x.to(self.tdtype(dtype)) if dtype is not None else x

    def to_numpy(self, a):
        t = self.torch
        a = a.detach()
        if a.dtype == t.bfloat16:
            return a.float().cpu().numpy().astype(numpy_dtype("bf16"))
        return a.cpu().numpy()

    def cast(self, a, dtype):
        return a.to(device=self.device, dtype=self.tdtype(dtype)).contiguous()

    def cat(self, arrays, axis=0):
        return self.torch.cat(arrays, dim=axis).contiguous()

    def randn(self, shape, dtype, std, rng):
        g = rng  # a torch.Generator on the device
        return (self.torch.randn(shape, generator=g, device=self.device, dtype=self.torch.float32)
                * std).to(self.tdtype(dtype))

    def copy_into(self, dst, src_numpy):
        dst.copy_(self.torch.from_numpy(np.ascontiguousarray(src_numpy)), non_blocking=False)

    def synchronize(self):
        self.torch.cuda.synchronize()

    def nbytes(self, a) -> int:
        return int(a.numel() * a.element_size())

    def empty_like(self, x):
        return self.torch.empty_like(x)


def make_backend(name: str) -> Backend:
    if name == "interp":
        return NumpyBackend()
    if name == "cuda":
        return TorchCudaBackend()
    if name == "auto":
        try:
            return TorchCudaBackend()
        except Exception:
            return NumpyBackend()
    raise ValueError(f"unknown backend '{name}' (cuda, interp or auto)")

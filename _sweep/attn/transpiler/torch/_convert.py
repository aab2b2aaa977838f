"""Torch tensors <-> the arrays tilex.stdlib takes: CUDA tensors as they are, CPU tensors as NumPy views
(bf16 through ml_dtypes) for the interpreter; results back as fresh tensors that alias no input."""
import numpy as np
import torch

_BF16 = torch.bfloat16


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of CPU tensor `t` (same memory: in-place kernels write the tensor)."""
    t = t.detach()
    if t.dtype == _BF16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def from_numpy(a: np.ndarray) -> torch.Tensor:
    """A new contiguous CPU tensor holding a copy of `a` (a bf16 array becomes torch.bfloat16)."""
    import ml_dtypes

    bf16 = a.dtype == np.dtype(ml_dtypes.bfloat16)
    src = a.view(np.int16) if bf16 else a
    out = torch.empty(tuple(a.shape), dtype=torch.from_numpy(np.empty(0, src.dtype)).dtype)
    out.numpy()[...] = src
    return out.view(_BF16) if bf16 else out


def _arg(x, cpu: bool):
    if isinstance(x, torch.Tensor):
        return to_numpy(x) if cpu else x
    return x


def _result(r, cpu: bool):
    if isinstance(r, tuple):
        return tuple(_result(x, cpu) for x in r)
    if isinstance(r, np.ndarray):
        return from_numpy(r)
    return r


def _fresh(r, inputs):
    """`r` with every tensor that shares storage with an input replaced by a copy (custom-op outputs
    must not alias their inputs; a stdlib wrapper may hand back an input it did not need to copy)."""
    if isinstance(r, tuple):
        return tuple(_fresh(x, inputs) for x in r)
    if isinstance(r, torch.Tensor):
        ptr = r.untyped_storage().data_ptr()
        if ptr and any(t.untyped_storage().data_ptr() == ptr for t in inputs):
            return r.clone()
    return r


def call(fn, *args, **kwargs):
    """fn(*args, **kwargs) with torch tensors: CUDA tensors are passed through (the kernels launch on
    torch's current stream), CPU tensors run in the NumPy interpreter. Returns torch tensors."""
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    cpu = bool(tensors) and all(t.device.type == "cpu" for t in tensors)
    r = fn(*(_arg(a, cpu) for a in args), **{k: _arg(v, cpu) for k, v in kwargs.items()})
    return _fresh(_result(r, cpu), tensors)

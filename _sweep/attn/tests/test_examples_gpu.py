"""GPU: every example's CUDA output matches the NumPy interpreter and a float64 reference.

Odd sizes included (M=1, N=1000, N and K not multiples of the tile). Outputs are poisoned
with NaN before the launch, so an element the kernel fails to write is caught.
Tolerances: relative error max|out - ref| / max|ref| <= 1e-2 for bf16 outputs, 1e-5 for f32.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tilex
from tilex.types import DType, numpy_dtype

pytestmark = pytest.mark.gpu
EX = Path(__file__).resolve().parent.parent / "examples"
BF16 = numpy_dtype(DType.BF16)


def _rel(out, ref):
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert np.isfinite(out).all(), "output has NaN/inf: some element was not written"
    return float(np.max(np.abs(out - ref)) / max(np.max(np.abs(ref)), 1e-30))


def _run(name, kernel, inputs, outputs, scalars=None, **defines):
    import cupy as cp

    mod = tilex.compile(str(EX / f"{name}.tile"), **defines)
    d_in = {k: cp.asarray(v) for k, v in inputs.items()}
    d_out = {k: cp.full(v.shape, np.nan, dtype=v.dtype) for k, v in outputs.items()}
    getattr(mod, kernel)(**d_in, **d_out, **(scalars or {}))
    cp.cuda.Device().synchronize()
    gpu = {k: cp.asnumpy(v) for k, v in d_out.items()}
    host_out = {k: np.full(v.shape, np.nan, dtype=v.dtype) for k, v in outputs.items()}
    mod.interp(kernel, **inputs, **host_out, **(scalars or {}))
    return gpu, host_out


@pytest.mark.parametrize("n", [1, 1000, 1024, 4097, 1 << 20])
def test_vector_add(n):
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    gpu, ref = _run("vector_add", "vector_add", dict(x=x, y=y), dict(z=np.empty(n, np.float32)))
    assert _rel(gpu["z"], ref["z"]) <= 1e-5
    assert _rel(gpu["z"], x.astype(np.float64) + y) <= 1e-6


@pytest.mark.parametrize("m,n", [(1, 8), (3, 1000), (64, 5120), (7, 4104)])
def test_rmsnorm(m, n):
    rng = np.random.default_rng(m * 7 + n)
    x = rng.standard_normal((m, n), dtype=np.float32).astype(BF16)
    w = rng.standard_normal(n, dtype=np.float32).astype(BF16)
    gpu, ref = _run("rmsnorm", "rmsnorm", dict(x=x, w=w), dict(y=np.empty((m, n), BF16)), dict(eps=1e-6))
    assert _rel(gpu["y"], ref["y"]) <= 1e-2
    xf = x.astype(np.float64)
    want = xf / np.sqrt((xf * xf).mean(axis=1, keepdims=True) + 1e-6) * w.astype(np.float64)
    assert _rel(gpu["y"], want) <= 1e-2


@pytest.mark.parametrize("m,n", [(1, 1), (2, 1000), (33, 4096), (5, 5000)])
def test_swiglu(m, n):
    rng = np.random.default_rng(m + n)
    g = rng.standard_normal((m, n), dtype=np.float32).astype(BF16)
    u = rng.standard_normal((m, n), dtype=np.float32).astype(BF16)
    gpu, ref = _run("swiglu", "swiglu", dict(g=g, u=u), dict(h=np.empty((m, n), BF16)))
    assert _rel(gpu["h"], ref["h"]) <= 1e-2
    gf = g.astype(np.float64)
    assert _rel(gpu["h"], gf / (1 + np.exp(-gf)) * u.astype(np.float64)) <= 1e-2


@pytest.mark.parametrize("m,n", [(1, 1), (4, 1000), (16, 3000), (3, 1024)])
def test_softmax(m, n):
    rng = np.random.default_rng(m * n + 5)
    x = (rng.standard_normal((m, n), dtype=np.float32) * 3).astype(BF16)
    gpu, ref = _run("softmax", "softmax", dict(x=x), dict(y=np.empty((m, n), BF16)))
    assert _rel(gpu["y"], ref["y"]) <= 1e-2
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    assert _rel(gpu["y"], e / e.sum(axis=1, keepdims=True)) <= 1e-2


@pytest.mark.parametrize("m,n,k", [(1, 64, 64), (37, 45, 70), (128, 256, 96), (65, 1, 33)])
def test_matmul(m, n, k):
    rng = np.random.default_rng(m + 3 * n + 7 * k)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(BF16)
    b = rng.standard_normal((k, n), dtype=np.float32).astype(BF16)
    gpu, ref = _run("matmul", "matmul", dict(a=a, b=b), dict(c=np.empty((m, n), BF16)))
    assert _rel(gpu["c"], ref["c"]) <= 1e-2
    assert _rel(gpu["c"], a.astype(np.float64) @ b.astype(np.float64)) <= 1e-2

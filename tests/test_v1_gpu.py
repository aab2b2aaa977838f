"""GPU: each file of examples/v1/ (docs/language.md, "What's new in v1") and the int8 / int4 GEMV examples, run on
the GPU at odd sizes against float64 (or exact integer) NumPy and against the interpreter on the same inputs.

Outputs start poisoned (NaN, or a sentinel for integer outputs other than the atomics' counters, which start at
zero as the examples ask), so an element a kernel fails to write is caught. Tolerances: exact for integer results
(histogram counts, compaction's count and multiset); f32 results 1e-5 relative to the largest reference value
(the cumsum: 2e-4 sqrt(N) absolute, the GPU's order of additions within a tile differs from the interpreter's); f16 / bf16 results one rounding of the output type.
"""
from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilex

pytestmark = pytest.mark.gpu
EX = Path(__file__).resolve().parents[1] / "examples"
RNG = np.random.default_rng()


def _run(path, kernel, arrays, scalars=None, fill=None):
    """Run `kernel` of `path` on the GPU and in the interpreter from the same host arrays (outputs given in
    `arrays` with their starting values): ({name: GPU result}, {name: interpreter result})."""
    cp = pytest.importorskip("cupy")
    mod = tilex.compile(str(path))
    dev = {k: cp.asarray(v) for k, v in arrays.items()}
    getattr(mod, kernel)(**dev, **(scalars or {}))
    cp.cuda.Device().synchronize()
    host = {k: v.copy() for k, v in arrays.items()}
    mod.interp(kernel, **host, **(scalars or {}))
    return {k: cp.asnumpy(v) for k, v in dev.items()}, host


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert np.isfinite(out).all(), "NaN/inf in the output: some element was not written"
    return float(np.max(np.abs(out - ref)) / max(np.max(np.abs(ref)), 1e-30))


@pytest.mark.parametrize("n,k", [(1, 1), (5000, 37), (200_003, 7), (65_536, 1024)])
def test_histogram_under_collision(n, k):
    ids = RNG.integers(-3, k + 3, n).astype(np.int32)  # some outside [0, K): skipped
    gpu, host = _run(EX / "v1" / "histogram.tile", "histogram", dict(ids=ids, counts=np.zeros(k, np.int32)))
    want = np.bincount(ids[(ids >= 0) & (ids < k)], minlength=k)
    np.testing.assert_array_equal(gpu["counts"], want)
    np.testing.assert_array_equal(host["counts"], want)


@pytest.mark.parametrize("n", [1, 1000, 10_007, 300_001])
def test_compaction_keeps_every_selected_element_once(n):
    x = RNG.standard_normal(n).astype(np.float32)
    gpu, _ = _run(EX / "v1" / "compact.tile", "compact",
                  dict(x=x, y=np.full(n, np.nan, np.float32), count=np.zeros(1, np.int32)), dict(lim=0.5))
    want = x[x > 0.5]
    assert int(gpu["count"][0]) == want.size
    # blocks take their places in the order their atomics ran: compare the multiset, and that nothing else moved
    np.testing.assert_array_equal(np.sort(gpu["y"][: want.size]), np.sort(want))
    assert np.isnan(gpu["y"][want.size:]).all()


@pytest.mark.parametrize("n", [1, 255, 1001, 70_001])
def test_shared_helper_in_two_kernels(n):
    x, g = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    s = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64))) * 0.5
    path = EX / "v1" / "shared_helper.tile"
    gpu, host = _run(path, "silu_scale", dict(x=x, y=np.full(n, np.nan, np.float32)), dict(a=0.5))
    assert _rel(gpu["y"], s) <= 1e-5 and _rel(gpu["y"], host["y"]) <= 1e-5
    gpu, host = _run(path, "silu_mul", dict(x=x, g=g, y=np.full(n, np.nan, np.float32)), dict(a=0.5))
    assert _rel(gpu["y"], s * g) <= 1e-5 and _rel(gpu["y"], host["y"]) <= 1e-5


@pytest.mark.parametrize("np_dt,tol", [(np.float16, 1e-3), (ml_dtypes.bfloat16, 8e-3), (np.float32, 1e-6)])
@pytest.mark.parametrize("n", [1, 777, 65_537])
def test_one_kernel_for_several_dtypes(np_dt, tol, n):
    x, y = (RNG.standard_normal(n).astype(np_dt) for _ in range(2))
    gpu, host = _run(EX / "v1" / "any_dtype.tile", "axpy", dict(x=x, y=y, z=np.full(n, np.nan, np_dt)), dict(a=-1.5))
    ref = x.astype(np.float64) * -1.5 + y.astype(np.float64)
    assert gpu["z"].dtype == np_dt
    assert _rel(gpu["z"], ref) <= tol
    # nvcc contracts the f32 `x * a + y` into one FMA (one rounding where the interpreter rounds twice), so the two
    # agree within half an f32 ulp of each term and of the result, then the rounding to T: one ulp of T at most
    xa = np.abs(x.astype(np.float64) * 1.5)
    bound = 2.0 ** -24 * (xa + np.abs(y.astype(np.float64)) + np.abs(ref)) + float(ml_dtypes.finfo(np_dt).eps) * np.abs(ref)
    assert (np.abs(gpu["z"].astype(np.float64) - host["z"].astype(np.float64)) <= bound).all()


@pytest.mark.parametrize("m,n", [(1, 1), (3, 1023), (2, 1025), (4, 5000), (1, 70_001)])
def test_cumsum_of_rows_longer_than_a_tile(m, n):
    x = RNG.standard_normal((m, n)).astype(np.float32)
    gpu, host = _run(EX / "v1" / "cumsum.tile", "row_cumsum", dict(x=x, y=np.full((m, n), np.nan, np.float32)))
    ref = np.cumsum(x.astype(np.float64), axis=1)
    # f32 partial sums of N(0, 1) terms (as test_v1_examples.py): a few ulps of the running magnitude, summed
    atol = 2e-4 * np.sqrt(n)
    assert np.isfinite(gpu["y"]).all()
    np.testing.assert_allclose(gpu["y"], ref, rtol=0, atol=atol)
    np.testing.assert_allclose(gpu["y"], host["y"], rtol=0, atol=atol)


@pytest.mark.parametrize("m,c", [(1, 4), (5, 180), (33, 252), (7, 256)])  # the example: C % 4 == 0, C <= 256
def test_group_norm_masked_loads_and_stores(m, c):
    g = 4
    x = RNG.standard_normal((m, c)).astype(np.float32)
    w, b = RNG.standard_normal(c).astype(np.float32), RNG.standard_normal(c).astype(np.float32)
    path = EX / "v1" / "group_norm.tile"
    gpu, host = _run(path, "group_norm", dict(x=x, w=w, b=b, y=np.full((m, c), np.nan, np.float32)))
    xg = x.astype(np.float64).reshape(m, g, c // g)
    norm = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)
    want = norm.reshape(m, c) * w + b
    assert _rel(gpu["y"], want) <= 1e-4
    assert _rel(gpu["y"], host["y"]) <= 1e-5


@pytest.mark.parametrize("n,k", [(1, 8), (70, 300), (4099, 4096), (33, 14336)])
def test_gemv_int8(n, k):
    w = RNG.integers(-128, 128, (n, k)).astype(np.int8)
    scale = (RNG.random(n) * 0.02).astype(np.float32)
    x = RNG.standard_normal(k).astype(np.float16)
    gpu, host = _run(EX / "gemv_int8.tile", "gemv_int8", dict(w=w, scale=scale, x=x, y=np.full(n, np.nan, np.float16)))
    ref = (w.astype(np.float64) * scale[:, None].astype(np.float64)) @ x.astype(np.float64)
    assert _rel(gpu["y"], ref) <= 2e-3
    assert _rel(gpu["y"], host["y"]) <= 2e-3


@pytest.mark.parametrize("n,k2", [(1, 4), (70, 150), (4099, 2048)])
def test_gemv_int4(n, k2):
    w = RNG.integers(0, 256, (n, k2)).astype(np.uint8)
    scale = (RNG.random(n) * 0.02).astype(np.float32)
    x = RNG.standard_normal(2 * k2).astype(np.float16)
    gpu, host = _run(EX / "gemv_int4.tile", "gemv_int4", dict(w=w, scale=scale, x=x, y=np.full(n, np.nan, np.float16)))
    lo = ((w.astype(np.int64) & 15) ^ 8) - 8
    hi = ((w.astype(np.int64) >> 4) ^ 8) - 8
    full = np.concatenate([lo, hi], axis=1).astype(np.float64)
    ref = (full * scale[:, None].astype(np.float64)) @ x.astype(np.float64)
    assert _rel(gpu["y"], ref) <= 2e-3
    assert _rel(gpu["y"], host["y"]) <= 2e-3

"""GPU: scans, sorts and top-k (tests/data/scan_programs.tile) against the interpreter at odd lengths.

The interpreter combines a cumsum in the GPU's butterfly order, so float scans must agree to rounding
(rtol 1e-6; the mma-product scans to the product's own difference) and integer scans, sorts, positions
and top-k exactly. Outputs are filled with NaN / -1 first, so an element the kernel skips shows.
Run: pytest -m gpu tests/test_scan_gpu.py
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tilex

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

PROGRAMS = Path(__file__).resolve().parent / "data" / "scan_programs.tile"


def both(kernel, arrays: dict, outs: dict, defines=None, **scalars):
    """(gpu outputs, interpreter outputs) of `kernel` on the same inputs."""
    mod = tilex.compile(str(PROGRAMS), **(defines or {}))
    g = {k: cp.asarray(v) for k, v in {**arrays, **outs}.items()}
    getattr(mod, kernel)(**g, **scalars)
    cp.cuda.runtime.deviceSynchronize()
    h = {k: v.copy() for k, v in {**arrays, **outs}.items()}
    mod.interp(kernel, **h, **scalars)
    return {k: cp.asnumpy(g[k]) for k in outs}, {k: h[k] for k in outs}


@pytest.mark.parametrize("n", [1, 7, 100, 1000, 152064])
@pytest.mark.parametrize("excl", [False, True])
@pytest.mark.parametrize("b", [256, 4096])
def test_cumsum_rows(n, excl, b):
    x = np.random.default_rng().standard_normal((3, n)).astype(np.float32)
    gpu, host = both("cumrows", {"x": x}, {"y": np.full_like(x, np.nan)}, {"B": b, "EXCL": excl})
    # each tile's cumsum is the interpreter's order; the carried sum(t) is a reduction (its own order)
    np.testing.assert_allclose(gpu["y"], host["y"], rtol=1e-6, atol=1e-5 + 1e-7 * n)
    if n <= b:  # one tile, no carry: the same f32 numbers
        np.testing.assert_array_equal(gpu["y"], host["y"])
    ref = np.cumsum(x.astype(np.float64), axis=1) - (x if excl else 0)
    np.testing.assert_allclose(gpu["y"], ref, rtol=0, atol=1e-6 * n + 1e-6)


@pytest.mark.parametrize("m,n", [(1, 1), (7, 7), (40, 100), (100, 1000)])
def test_cum2d(m, n):
    x = np.random.default_rng().standard_normal((m, n)).astype(np.float32)
    x[0, 0] = np.nan
    outs = {k: np.full((m, n), np.nan, np.float32) for k in "abce"}
    outs["d"] = np.full((m, n), -1, np.int32)
    gpu, host = both("cum2d", {"x": x}, outs)
    for k in "bcde":
        np.testing.assert_array_equal(gpu[k], host[k], err_msg=k)
    np.testing.assert_allclose(gpu["a"], host["a"], rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (100, 70, 33)])
def test_scans_of_an_mma_product(m, n, k):
    ml = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(ml.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml.bfloat16)
    outs = {"y": np.full((m, n), np.nan, np.float32), "z": np.full((m, n), np.nan, np.float32),
            "s": np.full((m, n), np.nan, ml.bfloat16)}
    gpu, host = both("cummma", {"a": a, "b": b}, outs)
    scale = float(np.abs(host["y"]).max())
    np.testing.assert_allclose(gpu["y"], host["y"], rtol=0, atol=1e-4 * scale)
    np.testing.assert_allclose(gpu["z"], host["z"], rtol=0, atol=1e-4 * scale)
    # the columns sorted (descending) within each 64-row block: the products differ by rounding only
    np.testing.assert_allclose(gpu["s"].astype(np.float32), host["s"].astype(np.float32), rtol=1e-2, atol=1e-2 * scale)


@pytest.mark.parametrize("n,L", [(1, 128), (7, 128), (100, 128), (1000, 1024), (3000, 4096)])
@pytest.mark.parametrize("desc", [False, True])
def test_sort_rows(n, L, desc):
    rng = np.random.default_rng()
    x = np.round(rng.standard_normal((6, n)) * 2).astype(np.float32)  # ties
    x[1, ::5] = np.nan
    x[2, ::7] = np.inf
    x[2, 1::7] = -np.inf
    x[3, ::2] = -0.0
    outs = {"v": np.full((6, n), np.nan, np.float32), "p": np.full((6, n), -1, np.int32)}
    gpu, host = both("sortrows", {"x": x}, outs, {"L": L, "DESC": desc})
    np.testing.assert_array_equal(gpu["p"], host["p"])
    np.testing.assert_array_equal(gpu["v"], host["v"])


def test_sort_int_columns():
    x = np.random.default_rng().integers(-5, 5, (64, 100)).astype(np.int32)
    outs = {"v": np.full(x.shape, -1, np.int32), "p": np.full(x.shape, -1, np.int32)}
    gpu, host = both("sortcols", {"x": x}, outs)
    np.testing.assert_array_equal(gpu["v"], host["v"])
    np.testing.assert_array_equal(gpu["p"], host["p"])


@pytest.mark.parametrize("n", [1, 7, 100, 1000])
@pytest.mark.parametrize("k", [1, 16, 64])
@pytest.mark.parametrize("desc", [True, False])
def test_topk_rows(n, k, desc):
    rng = np.random.default_rng()
    x = rng.standard_normal((5, n)).astype(np.float32)
    x[1] = np.round(x[1])
    x[2, ::3] = np.nan
    x[3, ::4] = -np.inf
    outs = {"v": np.full((5, k), np.nan, np.float32), "p": np.full((5, k), -1, np.int32)}
    gpu, host = both("topkrows", {"x": x}, outs, {"K": k, "DESC": desc}, pad=-np.inf if desc else np.inf)
    np.testing.assert_array_equal(gpu["p"], host["p"])
    np.testing.assert_array_equal(gpu["v"], host["v"])


def test_mixed_operands():
    rng = np.random.default_rng()
    M, N = 16, 64
    x = rng.standard_normal((M, N)).astype(np.float32)
    a = rng.integers(-9, 9, N).astype(np.int64)
    a[::5] = 2**62
    h = rng.standard_normal(N).astype(np.float16)
    outs = {"b": np.full(M, np.nan, np.float32), "c": np.full(N, -1, np.int64), "d": np.full(N, np.nan, np.float16),
            "e": np.full(N, -1, np.int32), "f": np.full(N, -1, np.int64), "g": np.full((M, N), np.nan, np.float32)}
    gpu, host = both("mixed", {"x": x, "a": a, "h": h}, outs)
    for k in "cef":
        np.testing.assert_array_equal(gpu[k], host[k], err_msg=k)
    np.testing.assert_array_equal(gpu["d"][:16], host["d"][:16])
    np.testing.assert_allclose(gpu["b"], host["b"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gpu["g"], host["g"], rtol=1e-5, atol=1e-5)

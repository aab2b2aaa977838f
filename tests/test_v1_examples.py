"""examples/v1/: the kinds of kernel language v1 makes direct (docs/language.md, "What's new in v1"), each run on
the interpreter against float64 NumPy (or exact integer NumPy) on fresh random data, and built by nvcc for sm_90a."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilex
from tilex.pipeline import Options
from tilex.translate import translate

V1 = Path(__file__).resolve().parents[1] / "examples" / "v1"
RNG = np.random.default_rng()


def mod(name):
    return tilex.compile(str(V1 / f"{name}.tile"), cache_dir=False)


def test_histogram_counts_repeated_ids_exactly():
    k, n = 37, 5000
    ids = RNG.integers(-3, k + 3, n).astype(np.int32)  # some outside [0, K): skipped
    counts = np.zeros(k, np.int32)
    mod("histogram").interp("histogram", ids, counts)
    want = np.bincount(ids[(ids >= 0) & (ids < k)], minlength=k)
    np.testing.assert_array_equal(counts, want)


def test_gemv_int8_against_float64():
    n, k = 70, 300
    w = RNG.integers(-128, 128, (n, k)).astype(np.int8)
    scale = (RNG.random(n) * 0.02).astype(np.float32)
    x = RNG.standard_normal(k).astype(np.float16)
    y = np.zeros(n, np.float16)
    tilex.compile(str(V1.parent / "gemv_int8.tile"), cache_dir=False).interp("gemv_int8", w, scale, x, y)
    ref = (w.astype(np.float64) * scale[:, None].astype(np.float64)) @ x.astype(np.float64)
    assert np.max(np.abs(y.astype(np.float64) - ref)) <= 2e-3 * np.max(np.abs(ref)) + 1e-3


def test_one_helper_serves_two_kernels():
    n = 1001
    x, g = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    m = mod("shared_helper")
    y1, y2 = np.zeros(n, np.float32), np.zeros(n, np.float32)
    m.interp("silu_scale", x, y1, a=0.5)
    m.interp("silu_mul", x, g, y2, a=0.5)
    s = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64))) * 0.5
    np.testing.assert_allclose(y1, s, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y2, s * g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dt,np_dt,tol", [("f16", np.float16, 1e-3), ("bf16", ml_dtypes.bfloat16, 8e-3),
                                          ("f32", np.float32, 1e-6)])
def test_one_kernel_for_several_dtypes(dt, np_dt, tol):
    n = 777
    x, y = (RNG.standard_normal(n).astype(np_dt) for _ in range(2))
    out = np.zeros(n, np_dt)
    mod("any_dtype").interp("axpy", x, y, out, a=-1.5)  # T bound from the arrays
    ref = x.astype(np.float64) * -1.5 + y.astype(np.float64)
    assert out.dtype == np_dt
    assert np.max(np.abs(out.astype(np.float64) - ref)) <= tol * np.max(np.abs(ref))


def test_cumsum_of_rows_longer_than_a_tile():
    x = RNG.standard_normal((3, 5000)).astype(np.float32)
    y = np.zeros_like(x)
    mod("cumsum").interp("row_cumsum", x, y)
    ref = np.cumsum(x.astype(np.float64), axis=1)
    # f32 partial sums over 5000 terms of N(0, 1): a few ulps of the running magnitude
    np.testing.assert_allclose(y, ref, rtol=0, atol=2e-4 * np.sqrt(5000))


def test_group_norm_with_masked_loads_and_stores():
    m, c, g = 5, 180, 4  # 45 columns a group, in tiles of 64
    x = RNG.standard_normal((m, c)).astype(np.float32)
    w, b = RNG.standard_normal(c).astype(np.float32), RNG.standard_normal(c).astype(np.float32)
    y = np.full((m, c), np.nan, np.float32)
    mod("group_norm").interp("group_norm", x, w, b, y)
    xg = x.astype(np.float64).reshape(m, g, c // g)
    norm = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, norm.reshape(m, c) * w + b, rtol=1e-4, atol=1e-4)


def test_vocabulary_topk_through_the_library():
    import tilex.stdlib as S

    x = RNG.standard_normal((2, 152064)).astype(np.float32)
    v, i = S.topk(x, 40)
    order = np.argsort(-x.astype(np.float64), axis=1, kind="stable")[:, :40]
    np.testing.assert_array_equal(i, order)
    np.testing.assert_array_equal(v, np.take_along_axis(x, order, 1))


def test_stream_compaction_with_an_atomic_ticket_counter():
    n = 10_007
    x = RNG.standard_normal(n).astype(np.float32)
    y, count = np.full(n, np.nan, np.float32), np.zeros(1, np.int32)
    mod("compact").interp("compact", x, y, count, lim=0.5)
    want = x[x > 0.5]
    assert count[0] == want.size
    # the interpreter runs the programs in order, so the blocks come out in order; on the GPU in some order of
    # blocks (tests/test_atomics_old_gpu.py compares the multiset)
    np.testing.assert_array_equal(y[: want.size], want)
    assert np.isnan(y[want.size:]).all()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("name", sorted(p.stem for p in V1.glob("*.tile")))
def test_nvcc_builds_each_v1_example(name, tmp_path):
    cu = tmp_path / f"{name}.cu"
    cu.write_text(translate((V1 / f"{name}.tile").read_text(), f"{name}.tile", Options(arch="sm_90a")).cuda)
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-o", str(tmp_path / f"{name}.cubin"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]

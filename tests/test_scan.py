"""Scans, sorts and top-k along an axis: the interpreter against float64 NumPy and a plain Python sort
(odd lengths 1, 7, 100, 1000; ties, NaN, inf; exclusive scans, a running total across tiles), the
coordinate bits of layouts, nvcc builds of the feature programs (tests/data/scan_programs.tile) and
the misuse errors. GPU runs: tests/test_scan_gpu.py."""
from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tilex
from test_nvcc import assert_no_branch_among_shuffles
from tilex.diagnostics import CompileError
from tilex.layout import Layout, canonical, mma_fragment
from tilex.layout_bits import axis_bits
from tilex.translate import translate
from tilex.pipeline import Options

PROGRAMS = Path(__file__).resolve().parent / "data" / "scan_programs.tile"
LENGTHS = [1, 7, 100, 1000]


def mod(**defines):
    return tilex.compile(str(PROGRAMS), **defines)


def padded(x, shape, fill):
    out = np.full(shape, fill, x.dtype)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out


def order_key(v, i, descending):
    """The documented order: by value, NaN largest, ties by position (the lower first)."""
    v = float(v)
    if math.isnan(v):
        return (0 if descending else 1, 0.0, i)
    return (1 if descending else 0, -v if descending else v, i)


def ref_order(row, descending):
    return [i for i in sorted(range(len(row)), key=lambda i: order_key(row[i], i, descending))]


# ---------------------------------------------------------------- scans

@pytest.mark.parametrize("n", LENGTHS + [5000])
@pytest.mark.parametrize("excl", [False, True])
def test_cumsum_over_rows_longer_than_a_tile(n, excl):
    rng = np.random.default_rng()
    x = rng.standard_normal((3, n)).astype(np.float32)
    y = np.full_like(x, np.nan)
    mod(EXCL=excl).interp("cumrows", x, y)
    ref = np.cumsum(x.astype(np.float64), axis=1) - (x if excl else 0)
    # f32 sums of n terms of size 1: within n * 2^-24 * sqrt-ish growth; a generous bound
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-6 * n + 1e-6)


@pytest.mark.parametrize("m,n", [(1, 1), (7, 7), (32, 64), (40, 100), (100, 7)])
def test_cum2d_axes_exclusive_and_ints(m, n):
    rng = np.random.default_rng()
    x = rng.standard_normal((m, n)).astype(np.float32)
    x[0, 0] = np.nan if m * n > 1 else x[0, 0]  # NaN is ignored by max/min
    outs = [np.full((m, n), np.nan, np.float32) for _ in range(3)]
    d = np.zeros((m, n), np.int32)
    e = np.full((m, n), np.nan, np.float32)
    mod().interp("cum2d", x, *outs, d, e)
    a, b, c = outs
    M, N = -(-m // 32) * 32, -(-n // 64) * 64
    xp = padded(x, (M, N), 0).astype(np.float64)
    blocks = xp.reshape(M // 32, 32, N // 64, 64)
    ra = np.nancumsum(blocks, axis=1)  # NaN propagates in the sum: compared where finite
    ra = np.where(np.isnan(blocks).cumsum(axis=1) > 0, np.nan, ra).reshape(M, N)[:m, :n]
    np.testing.assert_allclose(a, ra, rtol=1e-6, atol=1e-5)
    rb = np.fmax.accumulate(blocks, axis=3).reshape(M, N)[:m, :n]
    np.testing.assert_array_equal(b, rb.astype(np.float32))
    inf = np.full((M // 32, 1, N // 64, 64), np.inf)
    # exclusive: the scan of [identity, x0, x1, ...] without its last element (fmin(+inf, NaN) is +inf)
    rc = np.fmin.accumulate(np.concatenate([inf, blocks[:, :-1]], axis=1), axis=1).reshape(M, N)[:m, :n]
    np.testing.assert_array_equal(c, rc.astype(np.float32))
    re = np.fmax.accumulate(np.concatenate([-inf, blocks[:, :-1]], axis=1), axis=1).reshape(M, N)[:m, :n]
    np.testing.assert_array_equal(e, re.astype(np.float32))
    xi = np.where(np.isnan(xp), 0, xp * np.float32(1000)).astype(np.float32).astype(np.int32)
    rd = np.cumsum(xi.reshape(M, N // 64, 64).astype(np.int64), axis=2).reshape(M, N)[:m, :n]
    np.testing.assert_array_equal(d, rd.astype(np.int32))


def test_integer_cumsum_wraps():
    src = """
kernel k(x: i32[N], y: out i32[N])
    grid (1,)
{
    y[0 : 8] = cumsum(x[0 : 8])
}
"""
    x = np.array([2**31 - 1, 1, 5, -7, 0, 0, 0, 0], np.int32)
    y = np.zeros(8, np.int32)
    tilex.compile(src).interp("k", x, y)
    assert list(y[:4]) == [2**31 - 1, -2**31, -2**31 + 5, -2**31 - 2 + 2**32]


# ---------------------------------------------------------------- sorts and top-k

@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("desc", [False, True])
def test_sort_rows_ties_nan_inf(n, desc):
    rng = np.random.default_rng()
    L = 128 if n <= 128 else 1024
    x = np.round(rng.standard_normal((4, n)) * 2).astype(np.float32)  # many ties
    x[1, ::5] = np.nan
    x[2, ::7] = np.inf
    x[2, 1::7] = -np.inf
    x[3, ::2] = -0.0
    v = np.full((4, n), np.nan, np.float32)
    p = np.full((4, n), -1, np.int32)
    mod(L=L, DESC=desc).interp("sortrows", x, v, p)
    for r in range(4):
        row = padded(x[r], (L,), np.inf)
        o = ref_order(row, desc)
        expect = o[:n]
        assert list(p[r]) == expect, r
        np.testing.assert_array_equal(v[r], row[o][:n])


def test_sort_int_columns():
    rng = np.random.default_rng()
    x = rng.integers(-5, 5, (64, 40)).astype(np.int32)
    x[0, :] = 2**31 - 1
    x[1, :] = -2**31
    v = np.zeros_like(x)
    p = np.zeros_like(x)
    mod().interp("sortcols", x, v, p)
    for c in range(40):
        col = list(x[:, c])
        np.testing.assert_array_equal(v[:, c], sorted(col))
        assert list(p[:, c]) == sorted(range(64), key=lambda i: (-int(col[i]), i))


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("k", [1, 16])
@pytest.mark.parametrize("desc", [True, False])
def test_topk_rows(n, k, desc):
    rng = np.random.default_rng()
    x = rng.standard_normal((5, n)).astype(np.float32)
    x[1] = np.round(x[1])  # ties
    x[2, ::3] = np.nan
    x[3, ::4] = -np.inf
    x[4, ::4] = np.inf
    pad = -np.inf if desc else np.inf
    v = np.zeros((5, k), np.float32)
    p = np.zeros((5, k), np.int32)
    mod(K=k, DESC=desc).interp("topkrows", x, v, p, pad=pad)
    for r in range(5):
        row = padded(x[r], (1024,), pad)
        o = ref_order(row, desc)[:k]
        assert list(p[r]) == o, r
        np.testing.assert_array_equal(v[r], row[o])


def test_sort_of_bf16_keeps_values():
    ml = pytest.importorskip("ml_dtypes")
    src = """
kernel k(x: bf16[N], y: out bf16[N], p: out i32[N])
    grid (1,)
{
    t = x[0 : 64]
    y[0 : 64] = sort(t, descending=True)
    p[0 : 64] = argsort(t, descending=True)
}
"""
    x = np.random.default_rng().standard_normal(64).astype(ml.bfloat16)
    y = np.zeros_like(x)
    p = np.zeros(64, np.int32)
    tilex.compile(src).interp("k", x, y, p)
    o = ref_order(x.astype(np.float32), True)
    assert list(p) == o
    np.testing.assert_array_equal(y.astype(np.float32), x.astype(np.float32)[o])


def test_mixed_operands():
    """A reduction's slice layout, i64 and f16 tiles, a bool count, an exclusive i64 cumsum."""
    rng = np.random.default_rng()
    M, N = 16, 64
    x = rng.standard_normal((M, N)).astype(np.float32)
    a = rng.integers(-9, 9, N).astype(np.int64)
    a[::5] = 2**62  # wraps in the cumsum
    h = rng.standard_normal(N).astype(np.float16)
    outs = [np.zeros(M, np.float32), np.zeros(N, np.int64), np.zeros(N, np.float16), np.zeros(N, np.int32),
            np.zeros(N, np.int64), np.zeros((M, N), np.float32)]
    mod().interp("mixed", x, a, h, *outs)
    b, c, d, e, f, g = outs
    np.testing.assert_allclose(b, np.cumsum(x.astype(np.float64).sum(1)), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(c, np.sort(a)[::-1])
    np.testing.assert_array_equal(d[:16], np.sort(h)[::-1][:16])
    np.testing.assert_array_equal(e, np.cumsum(a > 0))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(f, np.cumsum(a) - a)  # int64 wraps in NumPy too
    ref = np.maximum.accumulate(x, 0) + x.astype(np.float64).sum(1, keepdims=True) + np.sort(x, 1)[:, ::-1]
    np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- layouts

@pytest.mark.parametrize("shape,T", [((1024,), 128), ((32, 64), 128), ((8, 512), 256), ((64,), 128), ((2, 4), 32)])
def test_axis_bits_cover_the_coordinates(shape, T):
    """Every coordinate bit of every axis is one slot, lane or warp bit of the canonical layout."""
    lay = Layout.of(canonical(shape, T))
    for axis, n in enumerate(shape):
        bits = axis_bits(lay, axis)
        assert [b.value for b in bits] == [1 << i for i in range(n.bit_length() - 1)]
        for b in bits:
            assert (b.where == "lane") == (b.mask < 32 and b.where != "slot")


def test_axis_bits_of_an_mma_fragment():
    lay = Layout.of(mma_fragment((64, 64), 4, 1))
    rows = axis_bits(lay, 0)
    assert [(b.where, b.mask) for b in rows] == [("lane", 4), ("lane", 8), ("lane", 16), ("slot", 2), ("warp", 32), ("warp", 64)]
    cols = axis_bits(lay, 1)
    assert [(b.where, b.mask) for b in cols] == [("slot", 1), ("lane", 1), ("lane", 2), ("slot", 4), ("slot", 8), ("slot", 16)]


# ---------------------------------------------------------------- builds and errors

KERNELS = ["cumrows", "cum2d", "cummma", "sortrows", "sortcols", "topkrows", "mixed"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_feature_programs_build_with_nvcc(kernel, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc")
    cu = translate(PROGRAMS.read_text(), str(PROGRAMS), Options(kernel=kernel, arch="sm_90a")).cuda
    src = tmp_path / f"{kernel}.cu"
    src.write_text(cu)
    r = subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-o", str(tmp_path / "k.cubin"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("kernel", ["topkrows", "cumrows", "cummma"])
def test_shuffles_without_branches_among_them(kernel, tmp_path):
    """Every lane issues every shuffle (docs/internals.md): the exchanges come before the selects, and a
    sort's loop chooses its exchange by the uniform bit j. In the PTX, no branch sits inside a run of
    shfl.sync (as tests/test_nvcc.py checks for reductions)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc")
    cu = translate(PROGRAMS.read_text(), str(PROGRAMS), Options(kernel=kernel, arch="sm_90a")).cuda
    (tmp_path / "k.cu").write_text(cu)
    r = subprocess.run([nvcc, "-ptx", "-arch=sm_90a", "-o", str(tmp_path / "k.ptx"), str(tmp_path / "k.cu")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = (tmp_path / "k.ptx").read_text().splitlines()
    assert sum("shfl.sync" in line for line in lines) >= 8
    assert_no_branch_among_shuffles(lines)


BAD = [
    ("cumsum(3.0)", "of a scalar"),
    ("cumsum(t, axis=2)", "axis 2 is out of range"),
    ("sort(t, descending=1)", "descending= of sort() must be True or False"),
    ("topk(t, 3)", "K must be a power of two"),
    ("topk(t, 128)", "K must be a power of two from 1 to the axis's extent 64"),
    ("topk(t, n)", "must be a compile-time constant"),
    ("sort(t > 0.0)", "of a bool tile"),
    ("cumsum(t, exclusive=True, keepdims=True)", "unexpected keyword argument 'keepdims'"),
]


@pytest.mark.parametrize("call,msg", BAD)
def test_misuse_is_a_compile_error(call, msg):
    src = f"""
kernel k(x: f32[N], y: out f32[N], n: i32)
    grid (1,)
{{
    t = x[0 : 64]
    y[0 : 64] = {call}
}}
"""
    with pytest.raises(CompileError) as err:
        tilex.compile(src)
    assert msg in str(err.value)


def test_exclusive_cummax_cummin_of_narrow_ints_start_from_their_own_range():
    """An exclusive cummax of i8 starts from -128 and a cummin of i16 from 32767, on the GPU as in the interpreter
    (np.iinfo): the registers are int, whose range (-2**31) would wrap to 0 / -1 in the narrow store."""
    from tilex.translate import translate

    src = """
kernel k(x: i8[N], y: out i8[N], z: out i16[N])
    grid (1,)
{
    t = x[0 : 64]
    y[0 : 64] = cummax(t, exclusive=True)
    z[0 : 64] = cummin(t.to(i16), exclusive=True)
}
"""
    cuda = translate(src, "k.tile").cuda
    assert "] = -128; }" in cuda and "] = 32767; }" in cuda and "2147483647" not in cuda
    x = np.random.default_rng().integers(-128, 128, 64).astype(np.int8)
    y, z = np.zeros(64, np.int8), np.zeros(64, np.int16)
    tilex.compile(src, cache_dir=False).interp("k", x, y, z)
    assert y[0] == -128 and z[0] == 32767
    np.testing.assert_array_equal(y[1:], np.maximum.accumulate(x)[:-1])
    np.testing.assert_array_equal(z[1:], np.minimum.accumulate(x.astype(np.int16))[:-1])

"""Tests of tilex.interp, the NumPy interpreter of the checked kernel IR.

The examples run at odd sizes against independent float64 NumPy references; small
inline kernels pin down one semantic rule each (masking, floor division, conversions,
reductions, weak literals, bf16 rounding, ...). CPU only; the file runs in seconds.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tilex import ast as A
from tilex.diagnostics import LaunchError
from tilex.interp import launch, run_kernel
from tilex.parser import parse
from tilex.passes.base import Rewriter
from tilex.pipeline import PASSES, Options, compile_program

ROOT = Path(__file__).resolve().parents[1]
BF16 = ml_dtypes.bfloat16


def example(name: str) -> A.Program:
    path = ROOT / "examples" / f"{name}.tile"
    return compile_program(path.read_text(encoding="utf-8"), str(path))


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    out = out.astype(np.float64)
    assert np.all(np.isfinite(out)), "some output elements were not written (still NaN)"
    return float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))


def poisoned(shape, dtype) -> np.ndarray:
    return np.full(shape, np.nan, dtype=dtype)


def run(src: str, *args, **kwargs) -> None:
    prog = compile_program(src, "<test>")
    launch(prog, prog.kernels[0].name, *args, **kwargs)


def f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


# ---------------------------------------------------------------- the examples
@pytest.mark.parametrize("n", [1, 1000, 1024, 3001])
def test_vector_add(n):
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    z = poisoned(n, np.float32)
    launch(example("vector_add"), "vector_add", x, y, z)
    assert rel_err(z, x.astype(np.float64) + y.astype(np.float64)) <= 1e-6


@pytest.mark.parametrize("m,n", [(1, 1000), (3, 2056), (37, 72)])
def test_swiglu(m, n):
    rng = np.random.default_rng(m * n)
    g = (2 * rng.standard_normal((m, n))).astype(BF16)
    u = rng.standard_normal((m, n)).astype(BF16)
    h = poisoned((m, n), BF16)
    launch(example("swiglu"), "swiglu", g, u, h)
    G, U = g.astype(np.float64), u.astype(np.float64)
    assert rel_err(h, G / (1 + np.exp(-G)) * U) <= 1e-2


@pytest.mark.parametrize("m,n", [(1, 1000), (3, 2056), (37, 72)])
def test_softmax(m, n):
    rng = np.random.default_rng(m + n)
    x = (3 * rng.standard_normal((m, n))).astype(BF16)
    y = poisoned((m, n), BF16)
    launch(example("softmax"), "softmax", x, y)
    X = x.astype(np.float64)
    e = np.exp(X - X.max(axis=1, keepdims=True))
    assert rel_err(y, e / e.sum(axis=1, keepdims=True)) <= 1e-2


@pytest.mark.parametrize("m,n", [(1, 1000), (3, 2056), (37, 72)])
def test_rmsnorm(m, n):
    rng = np.random.default_rng(7 * m + n)
    x = rng.standard_normal((m, n)).astype(BF16)
    w = rng.standard_normal(n).astype(BF16)
    y = poisoned((m, n), BF16)
    launch(example("rmsnorm"), "rmsnorm", x, w, y, eps=1e-5)
    X = x.astype(np.float64)
    ref = X / np.sqrt((X * X).mean(axis=1, keepdims=True) + 1e-5) * w.astype(np.float64)
    assert rel_err(y, ref) <= 1e-2


@pytest.mark.parametrize("m,n,k", [(37, 45, 70), (1, 3, 1), (64, 64, 32), (70, 130, 33)])
def test_matmul(m, n, k):
    rng = np.random.default_rng(m + 10 * n + 100 * k)
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((k, n)).astype(BF16)
    c = poisoned((m, n), BF16)
    launch(example("matmul"), "matmul", a, b, c)
    assert rel_err(c, a.astype(np.float64) @ b.astype(np.float64)) <= 1e-2


def test_run_kernel_directly():
    prog = example("vector_add")
    x, y = f32(np.arange(5)), f32(np.ones(5))
    z = poisoned(5, np.float32)
    run_kernel(prog.kernel("vector_add"), {"x": x, "y": y, "z": z}, {}, {"N": 5})
    np.testing.assert_array_equal(z, x + 1)


# ---------------------------------------------------------------- tensor reads and stores
def test_masked_read_other():
    src = """
    kernel k(x: f32[N], y: out f32[16], s: out f32[4])
        grid (1,)
    {
        y[0 : 16] = x[-4 : -4 + 16, other = 7.5]
        s[0] = x[-1]                     # out of bounds: other's default, 0
        s[1] = x[N, other = -2.0]
        s[2] = x[N - 1]
        s[3] = sum(x[0 : 16])            # masked elements read as 0
    }"""
    x = f32([1, 2, 3, 4, 5])
    y, s = poisoned(16, np.float32), poisoned(4, np.float32)
    run(src, x, y, s)
    np.testing.assert_array_equal(y, f32([7.5] * 4 + [1, 2, 3, 4, 5] + [7.5] * 7))
    np.testing.assert_array_equal(s, f32([0, -2, 5, 15]))


def test_stores_skip_out_of_bounds():
    src = """
    kernel k(y: out f32[N], z: out i32[R, C])
        grid (1,)
    {
        y[N - 4 : N + 12] = full(f32[16], 1.0)      # past the end
        y[-6 : -6 + 8] = arange(0, 8).to(f32)       # before the start
        y[-1] = 9.0                                 # not y[N - 1]
        y[N] = 9.0
        z[-1 : 3, 1 : 3] = full(i32[4, 2], 7)       # rows -1..2 of 2, cols 1..2 of 3
        z[5, 0] = 8
    }"""
    y = np.full(10, -5.0, dtype=np.float32)
    z = np.full((2, 3), -5, dtype=np.int32)
    run(src, y, z)
    np.testing.assert_array_equal(y, f32([6, 7, -5, -5, -5, -5, 1, 1, 1, 1]))
    np.testing.assert_array_equal(z, [[-5, 7, 7], [-5, 7, 7]])


def test_value_broadcasts_into_store():
    src = """
    kernel k(y: out f32[4, 8]) grid (1,) {
        y[:, :] = arange(0, 8).to(f32)[None, :] + 0.5
    }"""
    y = poisoned((4, 8), np.float32)
    run(src, y)
    np.testing.assert_array_equal(y, np.tile(np.arange(8, dtype=np.float32) + 0.5, (4, 1)))


def test_transposed_tensor_view():
    src = """
    kernel tr<BK: int = 4, BN: int = 8>(w: f32[N, K], o: out f32[K, N], r: out f32[N])
        grid (cdiv(K, BK), cdiv(N, BN))
    {
        k = program_id(0) * BK
        n = program_id(1) * BN
        o[k : k + BK, n : n + BN] = w.T[k : k + BK, n : n + BN, other = -1.0];   # `;`: see the report
        if program_id(0) == 0 {
            r[n : n + BN] = w.T[1, n : n + BN]          # column 1 of w
        }
    }"""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((11, 5)).astype(np.float32)
    o, r = poisoned((5, 11), np.float32), poisoned(11, np.float32)
    run(src, w, o, r)
    np.testing.assert_array_equal(o, w.T)
    np.testing.assert_array_equal(r, w[:, 1])


def test_tile_transpose_and_matmul_f32():
    src = """
    kernel k(a: f32[4, 8], b: f32[4, 8], c: out f32[4, 4]) grid (1,) {
        c[:, :] = a[:, :] @ b[:, :].T
    }"""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32)
    c = poisoned((4, 4), np.float32)
    run(src, a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.T.astype(np.float64), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- scalars and control flow
def test_scalar_reads_and_loop_carried_scalars():
    src = """
    kernel dot(x: f32[N], y: f32[N], res: out f32[2], cnt: out i32[1])
        grid (1,)
    {
        acc = 0
        s = 0.0
        for i in range(0, N + 3, 1) {          # reads past N give 0
            s += x[i] * y[i]
            acc += 1
        }
        res[0] = s
        res[1] = x[2] + y[N - 1]
        cnt[0] = acc
    }"""
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(9).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    out, cnt = poisoned(2, np.float32), np.zeros(1, np.int32)
    run(src, x, y, out, cnt)
    np.testing.assert_allclose(out[0], np.dot(x.astype(np.float64), y), rtol=1e-5)
    assert out[1] == x[2] + y[8]
    assert cnt[0] == 12


def test_if_elif_else_and_scalar_where():
    src = """
    kernel k(x: f32[N], y: out f32[N], p: out i32[N])
        grid (N,)
    {
        i = program_id(0)
        v = x[i]
        if v > 0.0 {
            y[i] = v * 2.0
        } elif v < -1.0 and not (v < -100.0) {
            y[i] = 0.0
        } else {
            y[i] = -v
        }
        p[i] = where(i % 2 == 0, 1, 2)
    }"""
    x = f32([1.5, -3.0, -0.5, 0.0, -1000.0])
    y, p = poisoned(5, np.float32), np.zeros(5, np.int32)
    run(src, x, y, p)
    np.testing.assert_array_equal(y, f32([3.0, 0.0, 0.5, 0.0, 1000.0]))
    np.testing.assert_array_equal(p, [1, 2, 1, 2, 1])


def test_grid_axes_and_num_programs():
    src = """
    kernel k(o: out i32[A, B]) grid (A, B) {
        o[program_id(0), program_id(1)] = program_id(0) * 100 + program_id(1) + num_programs(1) * 1000
    }"""
    o = np.full((3, 4), -1, np.int32)
    run(src, o)
    np.testing.assert_array_equal(o, np.arange(3)[:, None] * 100 + np.arange(4)[None, :] + 4000)


def test_scalar_param_and_default():
    src = """
    kernel k(x: f32[N], y: out f32[N], a: f32 = 2.0, b: i32 = 3) grid (1,) {
        y[0 : 8] = x[0 : 8] * a + b
    }"""
    x, y = f32(np.arange(8)), poisoned(8, np.float32)
    run(src, x, y)
    np.testing.assert_array_equal(y, x * 2 + 3)
    run(src, x, y, a=-1.0, b=1)
    np.testing.assert_array_equal(y, 1 - x)


# ---------------------------------------------------------------- integer arithmetic and conversions
def test_floor_division_and_modulo():
    src = """
    kernel k(a: i32[N], b: i32[N], q: out i32[N], r: out i32[N], fr: out f32[N], c: out i32[2])
        grid (1,)
    {
        x = a[0 : 16]
        y = b[0 : 16, other = 1]
        q[0 : 16] = x // y
        r[0 : 16] = x % y
        fr[0 : 16] = x.to(f32) % y.to(f32)
        c[0] = cdiv(N, 4)
        c[1] = -7 // 2
    }"""
    a = np.array([7, -7, 7, -7, 0, 5, -1, -9, 100, -100], np.int32)
    b = np.array([2, 2, -2, -2, 3, -3, 4, 4, 7, 7], np.int32)
    q, r, c = np.zeros(10, np.int32), np.zeros(10, np.int32), np.zeros(2, np.int32)
    fr = poisoned(10, np.float32)
    run(src, a, b, q, r, fr, c)
    np.testing.assert_array_equal(q, a // b)  # NumPy's // and % follow Python: floor
    np.testing.assert_array_equal(r, a % b)
    np.testing.assert_array_equal(fr, (a % b).astype(np.float32))
    np.testing.assert_array_equal(c, [3, -4])


def test_int_wraparound_and_true_division():
    src = """
    kernel k(a: i32[N], o: out i32[N], d: out f32[N]) grid (1,) {
        x = a[0 : 4]
        o[0 : 4] = x * 2 + 1
        d[0 : 4] = x / 4
    }"""
    a = np.array([2**30, 2**31 - 1, -3, 5], np.int32)
    o, d = np.zeros(4, np.int32), poisoned(4, np.float32)
    run(src, a, o, d)
    np.testing.assert_array_equal(o, (a.astype(np.int64) * 2 + 1).astype(np.int32))
    np.testing.assert_array_equal(d, a.astype(np.float32) / np.float32(4))


def test_to_int_truncates_and_saturates():
    src = """
    kernel k(x: f32[N], y: out i32[N], z: out i64[N], b: out bool[N], h: out f32[N]) grid (1,) {
        t = x[0 : 16]
        y[0 : 16] = t.to(i32)
        z[0 : 16] = t.to(i64)
        b[0 : 16] = t.to(bool)
        h[0 : 16] = t.to(bf16).to(f32)
    }"""
    x = f32([-2.7, -0.5, 0.5, 2.7, np.nan, 1e10, -1e10, np.inf, -np.inf, 1e20, 1.00390625 + 2**-9, 0.0])
    n = len(x)
    y, z, b, h = np.zeros(n, np.int32), np.zeros(n, np.int64), np.zeros(n, np.bool_), poisoned(n, np.float32)
    run(src, x, y, z, b, h)
    i32max, i32min = 2**31 - 1, -(2**31)
    np.testing.assert_array_equal(y, [-2, 0, 0, 2, 0, i32max, i32min, i32max, i32min, i32max, 1, 0])
    np.testing.assert_array_equal(z, [-2, 0, 0, 2, 0, 10**10, -(10**10), 2**63 - 1, -(2**63), 2**63 - 1, 1, 0])
    np.testing.assert_array_equal(b, [True] * 11 + [False])
    np.testing.assert_array_equal(h, x.astype(BF16).astype(np.float32))


def test_fp8_saturates_and_int_to_bf16_and_bool_ops():
    src = """
    kernel k(x: i32[N], f: f32[N], o: out bf16[N], p: out f32[N], b: out bool[N], q: out i32[N]) grid (1,) {
        t = x[0 : 8]
        o[0 : 8] = t.to(bf16)
        p[0 : 8] = f[0 : 8].to(f8e4m3).to(f32)
        b[0 : 8] = (t > 2) & (f[0 : 8] < 0.0) | (t == 0)
        q[0 : 8] = (t & 6) | 1
    }"""
    x = np.array([0, 1, 2, 3, 257, 2**24 + 1, -5, 100], np.int32)
    f = f32([-1.2, 500, np.inf, 0.3, -1e6, 2, np.nan, 1e-3])
    o, p, b, q = np.zeros(8, BF16), poisoned(8, np.float32), np.zeros(8, np.bool_), np.zeros(8, np.int32)
    run(src, x, f, o, p, b, q)
    np.testing.assert_array_equal(o.astype(np.float32), x.astype(np.float32).astype(BF16).astype(np.float32))
    want = np.clip(f, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)  # satfinite
    np.testing.assert_array_equal(p, want)
    assert p[1] == 448 and p[2] == 448 and p[4] == -448 and np.isnan(p[6])
    np.testing.assert_array_equal(b, ((x > 2) & (f < 0)) | (x == 0))
    np.testing.assert_array_equal(q, (x & 6) | 1)


# ---------------------------------------------------------------- reductions
def test_reductions_axis_keepdims_argmax():
    src = """
    kernel red(x: f32[4, 8], s0: out f32[8], mu: out f32[4], sub: out f32[4, 8], mn: out f32[4],
               am: out i32[4], an: out i32[8], tot: out f32[3], ia: out i32[1])
        grid (1,)
    {
        t = x[:, :]
        s0[:] = sum(t, axis = 0)
        mu[:] = mean(t, axis = 1)
        sub[:, :] = t - max(t, axis = 1, keepdims = True)
        mn[:] = min(t, axis = -1)
        am[:] = argmax(t, axis = 1)
        an[:] = argmin(t, axis = 0)
        tot[0] = sum(t)
        tot[1] = max(t)
        tot[2] = sum(sum(t, axis = 1, keepdims = True))
        ia[0] = argmax(t)
    }"""
    rng = np.random.default_rng(6)
    x = rng.integers(-3, 4, size=(4, 8)).astype(np.float32)  # many ties
    x[2, 5] = 9.0
    outs = dict(s0=poisoned(8, np.float32), mu=poisoned(4, np.float32), sub=poisoned((4, 8), np.float32),
                mn=poisoned(4, np.float32), am=np.full(4, -1, np.int32), an=np.full(8, -1, np.int32),
                tot=poisoned(3, np.float32), ia=np.full(1, -1, np.int32))
    run(src, x, **outs)
    np.testing.assert_allclose(outs["s0"], x.sum(axis=0))
    np.testing.assert_allclose(outs["mu"], x.mean(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(outs["sub"], x - x.max(axis=1, keepdims=True))
    np.testing.assert_array_equal(outs["mn"], x.min(axis=1))
    np.testing.assert_array_equal(outs["am"], x.argmax(axis=1))  # NumPy: the first maximum
    np.testing.assert_array_equal(outs["an"], x.argmin(axis=0))
    np.testing.assert_allclose(outs["tot"], [x.sum(), 9.0, x.sum()])
    assert outs["ia"][0] == 2 * 8 + 5


def test_max_min_ignore_nan_and_int_sum():
    src = """
    kernel k(x: f32[8], i: i32[8], o: out f32[4], s: out i32[2]) grid (1,) {
        t = x[:]
        o[0] = max(t)
        o[1] = min(t)
        o[2] = max(max(t, 3.0))               # elementwise fmax with a scalar, then reduce
        m = -inf
        m max= 1.5
        o[3] = m
        s[0] = sum(i[:])
        s[1] = sum(i[:] > 0)
    }"""
    x = f32([np.nan, 1, -2, np.nan, 5, 0, 2, np.nan])
    i = np.array([2**30, 2**30, 2**30, 2**30, 1, -1, 0, 3], np.int32)
    o, s = poisoned(4, np.float32), np.zeros(2, np.int32)
    run(src, x, i, o, s)
    np.testing.assert_array_equal(o, [5, -2, 5, 1.5])
    np.testing.assert_array_equal(s, [3, 6])  # 4 * 2**30 + 3 wraps around to 3


# ---------------------------------------------------------------- constructors and broadcasting
def test_arange_zeros_full_broadcast():
    src = """
    kernel ctor(o: out i32[4, 8], f: out f32[4, 8], b: out bf16[8]) grid (1,) {
        r = arange(0, 4)
        c = arange(10, 18)
        o[:, :] = r[:, None] * 100 + c[None, :]
        f[:, :] = zeros(f32[4, 8]) + full(f32[8], 2.5)[None, :] + r[:, None].to(f32)
        acc = zeros(bf16[8])
        acc = 1                               # a scalar fills the whole tile
        b[:] = acc + full(bf16[8], 0.1)
    }"""
    o, f, b = np.zeros((4, 8), np.int32), poisoned((4, 8), np.float32), poisoned(8, BF16)
    run(src, o, f, b)
    np.testing.assert_array_equal(o, np.arange(4)[:, None] * 100 + np.arange(10, 18)[None, :])
    np.testing.assert_array_equal(f, np.arange(4, dtype=np.float32)[:, None] + np.full((4, 8), 2.5, np.float32))
    want = (np.float32(1) + np.float32(np.float32(0.1).astype(BF16))).astype(BF16)
    np.testing.assert_array_equal(b, np.full(8, want, BF16))


# ---------------------------------------------------------------- dtypes: weak literals, bf16 rounding
def test_weak_literals_keep_narrow_dtype():
    src = """
    kernel k(x: bf16[N], i: i32[N], y: out bf16[N], f: out f32[N]) grid (1,) {
        t = x[0 : 16]
        y[0 : 16] = t * 3 + 0.1                 # stays bf16: rounded after each op
        f[0 : 16] = i[0 : 16] + 0.5             # int tile with a float literal: f32
    }"""
    rng = np.random.default_rng(8)
    x = rng.standard_normal(16).astype(BF16)
    i = rng.integers(-100, 100, 16).astype(np.int32)
    y, f = poisoned(16, BF16), poisoned(16, np.float32)
    run(src, x, i, y, f)
    t3 = (x.astype(np.float32) * np.float32(3)).astype(BF16)
    want = (t3.astype(np.float32) + np.float32(np.float32(0.1).astype(BF16))).astype(BF16)
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(f, i.astype(np.float32) + np.float32(0.5))


def test_bf16_ops_round_like_ml_dtypes():
    src = """
    kernel k(a: bf16[N], b: bf16[N], s: out bf16[N], p: out bf16[N], e: out bf16[N], g: out bf16[N],
             m: out f32[1])
        grid (1,)
    {
        x = a[0 : 64]
        y = b[0 : 64]
        s[0 : 64] = x + y
        p[0 : 64] = x * y / (y - x)
        e[0 : 64] = exp(x)
        g[0 : 64] = gelu(x) + abs(y)
        m[0] = sum(x)                          # narrow sums accumulate and return f32
    }"""
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal(64).astype(BF16), rng.standard_normal(64).astype(BF16)
    outs = [poisoned(64, BF16) for _ in range(4)]
    msum = poisoned(1, np.float32)
    run(src, a, b, *outs, msum)
    A32, B32 = a.astype(np.float32), b.astype(np.float32)

    def r(v):
        return np.asarray(v, np.float32).astype(BF16).astype(np.float32)

    import math
    erf = np.vectorize(math.erf)
    gelu = r(0.5 * A32 * (1 + erf(A32.astype(np.float64) / np.sqrt(2.0)).astype(np.float32)))
    wants = [r(A32 + B32), r(r(A32 * B32) / r(B32 - A32)), r(np.exp(A32)), r(gelu + np.abs(B32))]
    for got, want in zip(outs, wants):
        np.testing.assert_array_equal(got.astype(np.float32), want)
    np.testing.assert_allclose(msum[0], A32.astype(np.float64).sum(), rtol=1e-5)


def test_math_functions_f32():
    src = """
    kernel k(x: f32[N], y: out f32[8, N]) grid (1,) {
        t = x[0 : 32]
        y[0, 0 : 32] = sqrt(abs(t)) + rsqrt(abs(t) + 1.0)
        y[1, 0 : 32] = tanh(t) + sigmoid(t)
        y[2, 0 : 32] = silu(t) + gelu_tanh(t)
        y[3, 0 : 32] = sin(t) * cos(t)
        y[4, 0 : 32] = erf(t)
        y[5, 0 : 32] = floor(t) + ceil(t)
        y[6, 0 : 32] = log(abs(t) + 1.0) + log2(abs(t) + 1.0) + exp2(t)
        y[7, 0 : 32] = max(t, -0.5) - min(t, 0.25)
    }"""
    import math
    rng = np.random.default_rng(10)
    x = (2 * rng.standard_normal(32)).astype(np.float32)
    y = poisoned((8, 32), np.float32)
    run(src, x, y)
    X = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    sig = 1 / (1 + np.exp(-X))
    want = [np.sqrt(np.abs(X)) + 1 / np.sqrt(np.abs(X) + 1), np.tanh(X) + sig,
            X * sig + 0.5 * X * (1 + np.tanh(0.7978845608028654 * (X + 0.044715 * X**3))),
            np.sin(X) * np.cos(X), erf(X), np.floor(X) + np.ceil(X),
            np.log(np.abs(X) + 1) + np.log2(np.abs(X) + 1) + np.exp2(X),
            np.maximum(X, -0.5) - np.minimum(X, 0.25)]
    for row, w in zip(y, want):
        np.testing.assert_allclose(row, w, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- where() and **
def test_where_and_power():
    src = """
    kernel k(x: f32[N], i: i32[N], y: out f32[N], q: out i32[N]) grid (1,) {
        t = x[0 : 8]
        y[0 : 8] = where(t > 0.0, t ** 2.0, 0.0 - t)
        q[0 : 8] = i[0 : 8] ** 3
    }"""
    prog = compile_program(src, "<test>")
    x = f32([-2, -1, 0, 0.5, 1, 2, 3, -0.25])
    i = np.arange(-3, 5, dtype=np.int32)
    y, q = poisoned(8, np.float32), np.zeros(8, np.int32)
    launch(prog, "k", x, i, y, q)
    np.testing.assert_array_equal(y, np.where(x > 0, x * x, -x))
    np.testing.assert_array_equal(q, i**3)


# ---------------------------------------------------------------- launch errors
def test_launch_error_wrong_dtype():
    x = np.zeros(8, np.float64)
    with pytest.raises(LaunchError, match="dtype"):
        launch(example("vector_add"), "vector_add", x, x, x)


def test_launch_error_inconsistent_symbol():
    x, y, z = np.zeros(8, np.float32), np.zeros(9, np.float32), np.zeros(8, np.float32)
    with pytest.raises(LaunchError, match="inconsistent size for symbol N"):
        launch(example("vector_add"), "vector_add", x, y, z)


def test_launch_error_failed_constraint():
    x, w, y = np.zeros((2, 7), BF16), np.zeros(7, BF16), np.zeros((2, 7), BF16)
    src = (ROOT / "examples" / "rmsnorm.tile").read_text().replace("    grid (M,)", "    where N % 8 == 0\n    grid (M,)")
    with pytest.raises(LaunchError, match="N % 8 == 0"):
        launch(compile_program(src, "rmsnorm.tile"), "rmsnorm", x, w, y)


def test_launch_error_missing_argument_and_empty_grid():
    x = np.zeros(8, np.float32)
    with pytest.raises(LaunchError, match="missing argument 'z'"):
        launch(example("vector_add"), "vector_add", x, x)
    e = np.zeros(0, np.float32)
    launch(example("vector_add"), "vector_add", e, e, e)  # no blocks: nothing to do


def test_exp2_flushes_subnormal_results():
    """exp2 is ex2.approx.ftz on the GPU: results below 2**-126 are 0, normal ones are 2**x."""
    src = """
    kernel k(x: f32[N], y: out f32[N]) grid (1,) {
        y[0 : 8] = exp2(x[0 : 8])
    }"""
    x = np.array([-130.0, -126.5, -126.0, -100.0, -1.5, 0.0, 3.25, 127.0], np.float32)
    y = poisoned((8,), np.float32)
    run(src, x, y)
    want = np.exp2(x.astype(np.float64))
    want[want < 2.0**-126] = 0.0
    assert y[0] == 0.0 and y[1] == 0.0 and y[2] == np.float32(2.0**-126)
    np.testing.assert_allclose(y, want, rtol=1e-6)

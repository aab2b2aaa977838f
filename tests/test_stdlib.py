"""tilex.stdlib on the CPU: every kernel in the interpreter against a float64 NumPy
reference, on fresh random data at small and odd sizes, in f32, f16 and bf16; both
paths of the row kernels (row in registers / chunked); argument errors; sampling
semantics and a statistical test of top-p sampling; and (marker nvcc) the generated CUDA
of every kernel in every dtype variant compiles for sm_90a.

Tolerance: max |out - ref| / max |ref| <= TOL[dtype] (about two roundings of the
output dtype), unless a test states another.
"""
from __future__ import annotations

import math
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tilex.stdlib as S
from tilex.stdlib import _launch as L
from tilex.types import DType, numpy_dtype

BF16 = numpy_dtype(DType.BF16)
NP = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16}
TOL = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}
DTYPES = ["f32", "f16", "bf16"]


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    """Outputs the wrappers allocate start as NaN (ints: -777): unwritten elements show."""
    monkeypatch.setattr(L, "POISON", True)


def rnd(rng, shape, dt, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(NP[dt])


def f64(x):
    return np.asarray(x, dtype=np.float64)


def rel(out, ref):
    out, ref = f64(out), f64(ref)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert np.isfinite(out).all(), "output has NaN/inf"
    return float(np.max(np.abs(out - ref), initial=0.0) / max(np.max(np.abs(ref), initial=0.0), 1e-30))


# ----------------------------------------------------------------------------- references

def ref_rms(x, w, eps):
    x = f64(x)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * f64(w)


def ref_ln(x, w, b, eps):
    x = f64(x)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * f64(w) + f64(b)


def ref_softmax(x, axis=-1):
    x = f64(x)
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def ref_gelu(x, tanh=False):
    if tanh:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def ref_rope(x, pos, theta, r):
    x = f64(x).copy()
    half = r // 2
    inv = theta ** (-np.arange(half) * 2.0 / r)
    ang = f64(pos)[:, None] * inv[None, :]            # [S, half]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :half].copy(), x[..., half:r].copy()
    x[..., :half] = a * c - b * s
    x[..., half:r] = b * c + a * s
    return x


# ----------------------------------------------------------------------------- norms

@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (5, 100), (2, 3, 1000), (9, 64)])
def test_rms_norm(dt, shape):
    rng = np.random.default_rng(hash((dt, shape)) % 2**32)
    x, w = rnd(rng, shape, dt), rnd(rng, shape[-1:], dt)
    y = S.rms_norm(x, w, 1e-5)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert rel(y, ref_rms(x, w, 1e-5)) <= TOL[dt]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(1, 5), (4, 300), (3, 1000)])
def test_fused_add_rms_norm(dt, shape):
    rng = np.random.default_rng(hash((dt, shape, 1)) % 2**32)
    x, r, w = rnd(rng, shape, dt), rnd(rng, shape, dt), rnd(rng, shape[-1:], dt)
    h_ref = (f64(x) + f64(r)).astype(NP[dt])  # the residual is stored in x's dtype
    y, h = S.fused_add_rms_norm(x, r, w, 1e-6)
    assert rel(h, f64(x) + f64(r)) <= TOL[dt]
    assert rel(y, ref_rms(h_ref, w, 1e-6)) <= TOL[dt]
    x0, r0 = x.copy(), r.copy()
    y2, h2 = S.fused_add_rms_norm(x, r, w, 1e-6, inplace=True)
    assert y2 is x and h2 is r
    np.testing.assert_array_equal(f64(x), f64(y))
    np.testing.assert_array_equal(f64(r), f64(h))
    assert not np.array_equal(f64(x), f64(x0)) and not np.array_equal(f64(r), f64(r0))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (6, 1000)])
def test_layer_norm(dt, shape):
    rng = np.random.default_rng(hash((dt, shape, 2)) % 2**32)
    x = (f64(rnd(rng, shape, dt)) + 2.0).astype(NP[dt])  # an offset the mean must remove
    w, b = rnd(rng, shape[-1:], dt), rnd(rng, shape[-1:], dt)
    assert rel(S.layer_norm(x, w, b, 1e-5), ref_ln(x, w, b, 1e-5)) <= TOL[dt]
    assert rel(S.layer_norm(x, None, None, 1e-5), ref_ln(x, np.ones(1), np.zeros(1), 1e-5)) <= TOL[dt]


# The chunked paths (rows longer than what stays in registers) run with small blocks.
@pytest.mark.parametrize("n,block", [(1000, 64), (129, 32), (8, 8)])
def test_row_kernels_chunked(n, block):
    rng = np.random.default_rng(n)
    dt, m = "bf16", 3
    x, r, w, b = rnd(rng, (m, n), dt), rnd(rng, (m, n), dt), rnd(rng, n, dt), rnd(rng, n, dt)
    cfg = dict(T=dt, BLOCK=block, ONE_PASS=False, WARPS=1, PROGRAMS=2)  # a program walks rows 0, 2 / 1
    y = np.full((m, n), np.nan, NP[dt])
    L.run(L.load("rms_norm", **cfg), "rms_norm", x, w, y, eps=1e-6)
    assert rel(y, ref_rms(x, w, 1e-6)) <= TOL[dt]
    y2, h = np.full_like(y, np.nan), np.full_like(y, np.nan)
    L.run(L.load("fused_add_rms_norm", kernel="fused_add_rms_norm", **cfg), "fused_add_rms_norm",
          x, r, w, y2, h, eps=1e-6)
    assert rel(y2, ref_rms((f64(x) + f64(r)).astype(BF16), w, 1e-6)) <= TOL[dt]
    xi, ri = x.copy(), r.copy()
    L.run(L.load("fused_add_rms_norm", kernel="fused_add_rms_norm_inplace", T=dt, BLOCK=block, ROWS=2,
                 ONE_PASS=False, WARPS=1),
          "fused_add_rms_norm_inplace", xi, ri, w, eps=1e-6)
    np.testing.assert_array_equal(f64(xi), f64(y2))
    np.testing.assert_array_equal(f64(ri), f64(h))
    L.run(L.load("layer_norm", **cfg), "layer_norm", x, w, b, y, eps=1e-5)
    assert rel(y, ref_ln(x, w, b, 1e-5)) <= TOL[dt]
    xs = (f64(x) * 4).astype(BF16)
    if n > block:
        xs[0, :block] = -np.inf  # a chunk of only -inf must not poison the online sum
    L.run(L.load("softmax", **cfg), "softmax", xs, y)
    assert rel(y, ref_softmax(xs)) <= TOL[dt]


def test_chunked_softmax_of_rows_at_the_float_minimum():
    """A fully masked row written as finfo.min (not -inf) is uniform, as in torch: the running max starts
    at -FLT_MAX, so exp(-|u - m|) is 1 there, not an underflow to 0 followed by 0 * inf."""
    n = 300
    x = np.full((2, n), np.finfo(np.float32).min, np.float32)
    x[1, :5] = np.arange(5)
    y = np.full_like(x, np.nan)
    L.run(L.load("softmax", T="f32", BLOCK=64, ONE_PASS=False, WARPS=1, PROGRAMS=2), "softmax", x, y)
    np.testing.assert_allclose(y[0], np.full(n, 1.0 / n), rtol=1e-6)
    assert rel(y, ref_softmax(x)) <= 1e-6


# One-pass steps of R rows (rows past M in the last step), a persistent grid of 2 programs.
@pytest.mark.parametrize("m,n,block,r", [(5, 100, 128, 2), (3, 8, 8, 4), (4, 64, 64, 1)])
def test_row_kernels_steps(m, n, block, r):
    rng = np.random.default_rng(m * n)
    dt = "bf16"
    x, res, w, b = rnd(rng, (m, n), dt), rnd(rng, (m, n), dt), rnd(rng, n, dt), rnd(rng, n, dt)
    cfg = dict(T=dt, BLOCK=block, R=r, ONE_PASS=True, WARPS=1, PROGRAMS=2)
    y, h = np.full((m, n), np.nan, NP[dt]), np.full((m, n), np.nan, NP[dt])
    L.run(L.load("rms_norm", **cfg), "rms_norm", x, w, y, eps=1e-6)
    assert rel(y, ref_rms(x, w, 1e-6)) <= TOL[dt]
    L.run(L.load("fused_add_rms_norm", kernel="fused_add_rms_norm", **cfg), "fused_add_rms_norm",
          x, res, w, y, h, eps=1e-6)
    assert rel(y, ref_rms((f64(x) + f64(res)).astype(BF16), w, 1e-6)) <= TOL[dt]
    assert rel(h, (f64(x) + f64(res))) <= TOL[dt]
    L.run(L.load("layer_norm", **cfg), "layer_norm", x, w, b, y, eps=1e-5)
    assert rel(y, ref_ln(x, w, b, 1e-5)) <= TOL[dt]
    L.run(L.load("softmax", **cfg), "softmax", x, y)
    assert rel(y, ref_softmax(x)) <= TOL[dt]


def test_row_config():
    c = L.row_config(4096, 10)
    assert c == dict(BLOCK=4096, R=1, ONE_PASS=True, WARPS=8, MIN_BLOCKS=4, PROGRAMS=4 * 132, STAGES=2)
    assert L.row_config(16384, 10)["WARPS"] == 32  # 16 per thread, at most 1024 threads
    assert L.row_config(100000, 10)["ONE_PASS"] is False
    c = L.row_config(128, 100000, sms=100)
    assert c["R"] > 1 and c["BLOCK"] == 128 and c["PROGRAMS"] == 100 * c["MIN_BLOCKS"]


def test_layer_norm_exact_rows_on_the_interpreter():
    """EXACT (N == BLOCK) drops the column mask; the constraint refuses it for a shorter row."""
    from tilex.diagnostics import LaunchError
    rng = np.random.default_rng(11)
    x, w, b = rnd(rng, (5, 64), "bf16"), rnd(rng, 64, "bf16"), rnd(rng, 64, "bf16")
    x = (f64(x) + 3.0).astype(BF16)  # a mean far from 0: the variance is taken around it
    y = np.full(x.shape, np.nan, BF16)
    cfg = dict(T="bf16", BLOCK=64, R=2, ONE_PASS=True, WARPS=1, PROGRAMS=2, EXACT=True)
    L.run(L.load("layer_norm", **cfg), "layer_norm", x, w, b, y, eps=1e-5)
    assert rel(y, ref_ln(x, w, b, 1e-5)) <= TOL["bf16"]
    with pytest.raises(LaunchError, match="N == BLOCK"):
        L.run(L.load("layer_norm", **cfg), "layer_norm", x[:, :60].copy(), w[:60].copy(), b[:60].copy(),
              y[:, :60].copy(), eps=1e-5)


def test_softmax_config_whole_rows():
    """2-byte rows up to 32768 are one whole-row step (64 per thread); f32 and longer rows are chunked."""
    from tilex.stdlib.activations import softmax_config
    c = softmax_config(32000, 4096, "bf16", 132)
    assert c == dict(BLOCK=32768, R=1, ONE_PASS=True, WARPS=16, MIN_BLOCKS=1, PROGRAMS=132, STAGES=2)
    assert softmax_config(20000, 8, "f16", 132)["ONE_PASS"] is True
    assert softmax_config(32000, 4096, "f32", 132)["ONE_PASS"] is False
    assert softmax_config(40000, 4096, "bf16", 132) == L.row_config(40000, 4096, 132, threads_per_sm=768, stages=3)
    assert softmax_config(4096, 4096, "bf16", 132) == L.row_config(4096, 4096, 132)


def test_whole_row_softmax_on_the_interpreter():
    """The whole-row configuration (BLOCK past N, columns masked) against float64, on 3 rows of 20000."""
    rng = np.random.default_rng(7)
    x = rnd(rng, (3, 20000), "bf16")
    xs = (f64(x) * 4).astype(BF16)
    y = np.full(xs.shape, np.nan, BF16)
    L.run(L.load("softmax", T="bf16", BLOCK=32768, R=1, ONE_PASS=True, WARPS=16, MIN_BLOCKS=1, PROGRAMS=2, STAGES=2),
          "softmax", xs, y)
    assert rel(y, ref_softmax(xs)) <= TOL["bf16"]


# ----------------------------------------------------------------------------- activations

@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(1, 2), (3, 14), (2, 5, 2000)])
def test_silu_and_mul(dt, shape):
    rng = np.random.default_rng(hash((dt, shape, 3)) % 2**32)
    x = rnd(rng, shape, dt, 2.0)
    d = shape[-1] // 2
    g, u = f64(x[..., :d]), f64(x[..., d:])
    y = S.silu_and_mul(x)
    assert y.shape == shape[:-1] + (d,) and y.dtype == x.dtype
    assert rel(y, g / (1 + np.exp(-g)) * u) <= TOL[dt]


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_mul(dt, approximate):
    rng = np.random.default_rng(7)
    x = rnd(rng, (3, 2 * 333), dt, 2.0)
    g, u = f64(x[:, :333]), f64(x[:, 333:])
    y = S.gelu_and_mul(x, approximate=approximate)
    assert rel(y, ref_gelu(g, approximate == "tanh") * u) <= TOL[dt]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape,dim", [((1, 1), -1), ((4, 37), -1), ((3, 1000), 1), ((5, 6, 7), 1), ((3, 4), 0)])
def test_softmax(dt, shape, dim):
    rng = np.random.default_rng(hash((dt, shape, 4)) % 2**32)
    x = rnd(rng, shape, dt, 3.0)
    y = S.softmax(x, dim=dim)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert rel(y, ref_softmax(x, dim)) <= TOL[dt]


# ----------------------------------------------------------------------------- rope

@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("s,hq,hk,d,r", [
    (1, 1, 1, 2, None),     # the smallest head
    (5, 4, 2, 64, None),    # full rotary
    (3, 3, 1, 80, None),    # full rotary, R/2 = 40 not a power of two
    (4, 2, 2, 96, 64),      # partial rotary, R/2 a power of two (tail copied)
    (2, 5, 3, 40, 24),      # partial rotary, R/2 = 12: the slice-and-copy path
])
def test_rope(dt, s, hq, hk, d, r):
    rng = np.random.default_rng(hash((dt, s, hq, d, r)) % 2**32)
    q, k = rnd(rng, (s, hq, d), dt), rnd(rng, (s, hk, d), dt)
    pos = rng.integers(0, 300, s).astype(np.int64)
    theta = 10000.0 if d != 96 else 500000.0
    rr = d if r is None else r
    tol = max(TOL[dt], 1e-4)  # f32: angles up to 300 rad carry ~1e-5 of rounding
    qo, ko = S.rope(q, k, pos, theta, rotary_dim=r)
    assert rel(qo, ref_rope(q, pos, theta, rr)) <= tol
    assert rel(ko, ref_rope(k, pos, theta, rr)) <= tol
    q2, k2 = q.copy(), k.copy()
    out = S.rope(q2, k2, pos.astype(np.int32), theta, rotary_dim=r, inplace=True)
    assert out[0] is q2 and out[1] is k2
    np.testing.assert_array_equal(f64(q2), f64(qo))
    np.testing.assert_array_equal(f64(k2), f64(ko))


# ----------------------------------------------------------------------------- embedding, kv cache

@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("ids_shape,v,d", [((1,), 1, 1), ((7,), 50, 33), ((2, 3), 10, 1000)])
def test_embedding(dt, ids_shape, v, d):
    rng = np.random.default_rng(hash((dt, ids_shape, v, d)) % 2**32)
    table = rnd(rng, (v, d), dt)
    for idt in (np.int64, np.int32):
        ids = rng.integers(0, v, ids_shape).astype(idt)
        y = S.embedding(ids, table)
        assert y.shape == ids_shape + (d,)
        np.testing.assert_array_equal(f64(y), f64(table)[ids])


def test_embedding_out_of_range_gives_zeros():
    table = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    y = S.embedding(np.array([2, -1, 3, 0]), table)
    np.testing.assert_array_equal(y, [table[2], np.zeros(4), np.zeros(4), table[0]])


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("s,h,d,nb,bs", [(1, 1, 1, 1, 1), (7, 2, 12, 3, 4), (5, 3, 64, 4, 16)])
def test_kv_cache_write(dt, s, h, d, nb, bs):
    rng = np.random.default_rng(hash((dt, s, h, d, nb, bs)) % 2**32)
    k, v = rnd(rng, (s, h, d), dt), rnd(rng, (s, h, d), dt)
    for idt in (np.int64, np.int32):
        kc, vc = rnd(rng, (nb, bs, h, d), dt), rnd(rng, (nb, bs, h, d), dt)
        slots = rng.permutation(nb * bs)[:s].astype(idt)
        slots[::3] = -1  # padding tokens are skipped
        want_k, want_v = f64(kc).copy(), f64(vc).copy()
        for t, sl in enumerate(slots):
            if sl >= 0:
                want_k[sl // bs, sl % bs] = f64(k[t])
                want_v[sl // bs, sl % bs] = f64(v[t])
        out = S.kv_cache_write(k, v, kc, vc, slots)
        assert out[0] is kc and out[1] is vc
        np.testing.assert_array_equal(f64(kc), want_k)
        np.testing.assert_array_equal(f64(vc), want_v)


@pytest.mark.parametrize("block,rows,warps", [(16, 4, 1), (64, 2, 1), (2048, 4, 8)])
def test_embedding_rows_per_program(block, rows, warps):
    """[ROWS, BLOCK] gathers: S = 7 not a multiple of ROWS (the last program's extra tokens store
    nothing), D = 40 not a multiple of BLOCK, ids out of range (-1, V) give rows of zeros."""
    rng = np.random.default_rng(block + rows)
    table = rnd(rng, (5, 40), "bf16")
    ids = np.array([4, -1, 0, 5, 2, 2, 3], np.int64)
    y = np.full((7, 40), np.nan, BF16)
    L.run(L.load("embedding", T="bf16", I="i64", BLOCK=block, ROWS=rows, WARPS=warps), "embedding", ids, table, y)
    want = np.where(((ids >= 0) & (ids < 5))[:, None], f64(table)[np.clip(ids, 0, 4)], 0.0)
    np.testing.assert_array_equal(f64(y), want)


# ----------------------------------------------------------------------------- argmax, sampling

@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("b,v", [(1, 1), (3, 7), (2, 5000), (600, 40)])
def test_argmax(dt, b, v):
    rng = np.random.default_rng(hash((dt, b, v)) % 2**32)
    x = rnd(rng, (b, v), dt)
    if v > 3:
        x[0, v // 2] = x[0, v - 1] = np.float32(10.0)  # a tie: the first index wins
    ids = S.argmax(x)
    assert ids.dtype == np.int64 and ids.shape == (b,)
    np.testing.assert_array_equal(ids, f64(x).argmax(-1))


def test_argmax_inf_rows():
    x = np.full((2, 3000), -np.inf, np.float32)
    x[1, 2999] = 1.0
    np.testing.assert_array_equal(S.argmax(x), [0, 2999])


def _probs(logits, temperature, top_p):
    """The truncated, renormalized distribution the sampler must draw from (float64)."""
    p = ref_softmax(f64(logits) / temperature)
    out = np.zeros_like(p)
    for r in range(p.shape[0]):
        order = np.argsort(-p[r], kind="stable")
        cum = np.cumsum(p[r][order])
        k = int(np.searchsorted(cum, top_p * cum[-1] * (1 - 1e-6))) + 1
        thr = p[r][order[k - 1]]
        keep = p[r] >= thr
        out[r] = np.where(keep, p[r], 0) / p[r][keep].sum()
    return out


def test_sample_greedy_and_tiny_top_p():
    rng = np.random.default_rng(11)
    x = rnd(rng, (4, 300), "f32", 2.0)
    want = f64(x).argmax(-1)
    np.testing.assert_array_equal(S.sample(x, 0.0, 0.9, 1), want)
    for seed in range(3):
        np.testing.assert_array_equal(S.sample(x, 1.0, 1e-6, seed), want)


def test_sample_reproducible_and_inside_nucleus():
    rng = np.random.default_rng(12)
    x = rnd(rng, (6, 50), "bf16", 2.0)
    a, b = S.sample(x, 0.8, 0.6, 5), S.sample(x, 0.8, 0.6, 5)
    np.testing.assert_array_equal(a, b)
    p = _probs(x, 0.8, 0.6)
    assert all(p[r, a[r]] > 0 for r in range(6))
    draws = np.stack([S.sample(x, 0.8, 0.6, s) for s in range(6)])
    assert len({tuple(d) for d in draws}) > 1, "different seeds should give different tokens"


@pytest.mark.parametrize("temperature,top_p", [(1.0, 0.7), (0.5, 1.0)])
def test_sample_distribution(temperature, top_p):
    """Rows of identical logits are independent draws (the hash keys on the row): the
    empirical distribution over 400 rows matches the truncated renormalized softmax
    (Pearson chi-square, generous bound: p-value ~1e-4 at these degrees of freedom)."""
    n, v = 400, 8
    logits = np.array([[2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0]], np.float32)
    x = np.repeat(logits, n, axis=0)
    p = _probs(logits, temperature, top_p)[0]
    ids = S.sample(x, temperature, top_p, seed=1234)
    counts = np.bincount(ids, minlength=v)
    assert counts[p == 0].sum() == 0, f"sampled outside the nucleus: {counts} vs {p}"
    keep = p > 0
    exp = n * p[keep]
    chi2 = float(((counts[keep] - exp) ** 2 / exp).sum())
    dof = int(keep.sum()) - 1
    assert chi2 < dof + 6 * math.sqrt(2 * dof) + 10, (chi2, counts, exp)


def test_sample_hash_matches_reference():
    """The kernel's noise is the documented lowbias32 hash of (seed, row, index)."""
    def mix(h):
        h = np.uint32(h)
        h ^= h >> np.uint32(16); h = np.uint32((int(h) * 0x7FEB352D) & 0xFFFFFFFF)
        h ^= h >> np.uint32(15); h = np.uint32((int(h) * 0x846CA68B) & 0xFFFFFFFF)
        h ^= h >> np.uint32(16)
        return int(h)

    seed, v = 77, 16
    logits = np.zeros((2, v), np.float32)  # uniform: the sample is the argmax of the noise
    ids = S.sample(logits, 1.0, 1.0, seed)
    for row in range(2):
        base = mix((seed * 0x9E3779B1 + row * 0x85EBCA6B) & 0xFFFFFFFF)
        u = [((mix((i * 0x9E3779B1 + base) & 0xFFFFFFFF) >> 8) + 0.5) / 2**24 for i in range(v)]
        g = [-math.log(-math.log(x)) for x in u]
        assert ids[row] == int(np.argmax(g))


# ----------------------------------------------------------------------------- errors

def test_errors():
    x = np.ones((2, 8), np.float32)
    with pytest.raises(TypeError, match="x: expected a float"):
        S.rms_norm(np.ones((2, 8), np.int32), None)
    with pytest.raises(TypeError, match="weight: expected dtype f32"):
        S.rms_norm(x, np.ones(8, np.float16))
    with pytest.raises(ValueError, match=r"weight: expected shape \(8,\)"):
        S.rms_norm(x, np.ones(7, np.float32))
    with pytest.raises(ValueError, match="residual: expected shape"):
        S.fused_add_rms_norm(x, np.ones((3, 8), np.float32))
    with pytest.raises(ValueError, match="x: the last dimension holds"):
        S.silu_and_mul(np.ones((2, 7), np.float32))
    with pytest.raises(ValueError, match="dim: 2 is out of range"):
        S.softmax(x, dim=2)
    with pytest.raises(ValueError, match="q: expected a 3-D tensor"):
        S.rope(x, x, np.zeros(2, np.int64))
    q = np.ones((2, 2, 8), np.float32)
    with pytest.raises(TypeError, match="positions: expected an integer"):
        S.rope(q, q, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="rotary_dim"):
        S.rope(q, q, np.zeros(2, np.int64), rotary_dim=3)
    with pytest.raises(ValueError, match="k: expected shape"):
        S.rope(q, np.ones((3, 2, 8), np.float32), np.zeros(2, np.int64))
    with pytest.raises(TypeError, match="ids: expected an integer"):
        S.embedding(np.zeros(3, np.float32), x)
    with pytest.raises(ValueError, match="k_cache: expected shape"):
        S.kv_cache_write(q, q, np.ones((4, 2, 2, 4), np.float32), np.ones((4, 2, 2, 8), np.float32),
                         np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="logits: expected a 2-D"):
        S.argmax(np.ones(5, np.float32))
    with pytest.raises(ValueError, match="top_p"):
        S.sample(x, 1.0, 0.0, 1)
    with pytest.raises(ValueError, match="temperature"):
        S.sample(x, -1.0, 0.5, 1)
    with pytest.raises(TypeError, match="different kinds|NumPy array, CuPy array"):
        S.rms_norm(x, [1.0] * 8)


def test_launch_helpers():
    x = np.ones((2, 3), BF16)
    assert L.kind_of(x, None, np.zeros(1)) == "numpy"
    assert L.dtype_name(x) == "bf16" and L.dtype_name(np.zeros(1, np.int64)) == "i64"
    e = L.empty(x, (4,), "i32")
    assert e.dtype == np.int32 and e.shape == (4,)
    assert L.empty(x, (1, 2)).dtype == BF16
    with pytest.raises(TypeError, match="expected a NumPy array"):
        L.kind_of([1, 2])
    from tilex.diagnostics import CompileError

    with pytest.raises(CompileError, match="no kernel in .*rms_norm.tile has a compile-time parameter 'X'"):
        L.load("rms_norm", X="f16")
    with pytest.raises(CompileError, match="'T' is a dtype, got 'f17'"):
        L.load("rms_norm", T="f17")
    mod = L.load("rope", kernel="rope", T="f16", I="i32")  # dtype parameters, set as any -D
    assert [p.dtype for p in mod.specs["rope"].params[:3]] == ["f16", "f16", "i32"]
    assert mod.defines["T"] == "f16" and type(mod.kernel("rope")).__name__ == "Kernel"  # never bound per call
    assert "bf16" not in L.source("rope").split("\n", 1)[1].replace("= bf16", "")  # no text to substitute


# ----------------------------------------------------------------------------- nvcc

KERNELS = {  # file -> (kernel restriction or None, placeholders, extra defines per variant)
    "rms_norm": [{}, {"ONE_PASS": False}, {"BLOCK": 4096, "WARPS": 16, "MIN_BLOCKS": 3, "PROGRAMS": 396}],
    "fused_add_rms_norm": [{}, {"ONE_PASS": False, "PROGRAMS": 132}, {"BLOCK": 256, "R": 4, "WARPS": 4}],
    "layer_norm": [{}, {"ONE_PASS": False}, {"BLOCK": 512, "R": 2, "WARPS": 4, "MIN_BLOCKS": 12}],
    "softmax": [{}, {"ONE_PASS": False, "BLOCK": 4096, "WARPS": 16, "MIN_BLOCKS": 3}],
    "silu_and_mul": [{}, {"MIN_BLOCKS": 8}],
    "gelu_and_mul": [{"TANH": True}],
    "rope": [{}, {"HB": 8, "WARPS": 2}],
    "embedding": [{"ROWS": 4}, {"BLOCK": 2048, "ROWS": 4, "WARPS": 8}],
    "kv_cache_write": [{}],
    "qkv_rope_cache": [{}, {"HAS_BIAS": False, "HALF": 32}],
    "splitk_add_rms_norm": [{}, {"BLOCK": 1024, "WARPS": 4}],
    "argmax": [{}],
    "sample": [{}],
}


def _dtype_params(name):
    from tilex.ast import CParamKind
    from tilex.parser import parse

    return {c.name for k in parse(L.source(name), name).kernels for c in k.cparams if c.kind == CParamKind.DTYPE}


def _variants():
    for name, extras in KERNELS.items():
        ph = _dtype_params(name)
        for dt in DTYPES:
            for extra in extras:
                dts = {"T": dt}
                if "I" in ph:
                    dts["I"] = "i32" if dt == "f16" else "i64"
                yield f"{name}-{dt}-{'-'.join(f'{k}{v}' for k, v in extra.items()) or 'default'}", name, dts, extra


VARIANTS = list(_variants())
_POOL = {}


def _nvcc(name, dts, extra, tmp):
    from tilex.pipeline import Options
    from tilex.translate import translate

    cu = translate(L.source(name), f"{name}.tile", Options(defines={**dts, **extra})).cuda
    path = tmp / f"{name}-{abs(hash((tuple(dts.items()), tuple(extra.items()))))}.cu"
    path.write_text(cu)
    return subprocess.run(["nvcc", "-cubin", "-gencode=arch=compute_90a,code=sm_90a", str(path),
                           "-o", str(path.with_suffix(".cubin"))], capture_output=True, text=True)


@pytest.fixture(scope="module")
def nvcc_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stdlib_nvcc")
    pool = ThreadPoolExecutor(max_workers=2)
    futs = {vid: pool.submit(_nvcc, name, dts, extra, tmp) for vid, name, dts, extra in VARIANTS}
    yield futs
    pool.shutdown(wait=True)


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("vid", [v[0] for v in VARIANTS])
def test_nvcc_sm90a(vid, nvcc_results):
    r = nvcc_results[vid].result()
    assert r.returncode == 0, r.stderr[-3000:]

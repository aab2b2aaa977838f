"""Held-out language-v1 programs (tests/heldout_v1/*.tile), written from docs/language.md alone as a new user
would: each runs on the interpreter against float64 (or exact integer) NumPy on fresh random data, is built by
nvcc for sm_90a, and (marked gpu) runs on the GPU against NumPy and the interpreter on the same inputs.

GPU outputs start poisoned (NaN, or a sentinel for integers) unless the program asks for a starting value (the
atomics' accumulators), so an element a kernel fails to write is caught."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilex
from tilex.diagnostics import CompileError

HERE = Path(__file__).resolve().parent / "heldout_v1"
RNG = np.random.default_rng()
F32_EPS = 2.0 ** -24  # half an ulp: one f32 rounding, relative


def mod(name, **defines):
    return tilex.compile(str(HERE / f"{name}.tile"), cache_dir=False, **defines)


def _gpu(name, kernel, arrays, scalars=None, defines=None):
    """Run `kernel` of heldout_v1/`name`.tile on the GPU and in the interpreter from the same host arrays (outputs
    with their starting values): ({name: GPU result}, {name: interpreter result})."""
    cp = pytest.importorskip("cupy")
    m = mod(name, **(defines or {}))
    dev = {k: cp.asarray(v) for k, v in arrays.items()}
    getattr(m, kernel)(**dev, **(scalars or {}))
    cp.cuda.Device().synchronize()
    host = {k: v.copy() for k, v in arrays.items()}
    m.interp(kernel, **host, **(scalars or {}))
    return {k: cp.asnumpy(v) for k, v in dev.items()}, host


def _f64(a):
    return np.asarray(a, np.float64)


# ---------------------------------------------------------------------------------------------------------------
# 1. scatter-add with heavily repeated ids

def _scatter_ref(ids, v, k):
    ref = np.zeros(k, np.float64)
    ok = (ids >= 0) & (ids < k)
    np.add.at(ref, ids[ok], _f64(v[ok]))
    bound = np.zeros(k, np.float64)  # f32 adds in some order: each rounds by half an ulp of the running sum
    np.add.at(bound, ids[ok], np.abs(_f64(v[ok])))
    return ref, bound * np.bincount(ids[ok], minlength=k).max() * F32_EPS * 2 + 1e-6


def test_scatter_add_repeated_ids():
    n, k = 100_000, 37
    ids = RNG.integers(-2, k + 2, n).astype(np.int32)  # ~2700 updates a bin, a few outside [0, K): skipped
    v = RNG.standard_normal(n).astype(np.float32)
    y = np.zeros(k, np.float32)
    mod("scatter_add").interp("scatter_add", ids, v, y)
    ref, tol = _scatter_ref(ids, v, k)
    assert (np.abs(_f64(y) - ref) <= tol).all()


def test_plain_scatter_add_is_an_error_pointing_to_the_atomic():
    src = (HERE / "scatter_add.tile").read_text().replace(
        "atomic_add(y[ids[i : i + B, other = -1]], v[i : i + B])", "y[ids[i : i + B, other = -1]] += v[i : i + B]")
    assert "+=" in src
    with pytest.raises(CompileError) as e:
        tilex.compile(src, cache_dir=False)
    assert "atomic_add(" in str(e.value) and "only one of the updates is kept" in str(e.value)


# ---------------------------------------------------------------------------------------------------------------
# 2. split-K GEMM into one f32 output

def _splitk_case(m, n, k):
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    ref = _f64(a) @ _f64(b)
    # f32 products summed in some order over K terms: at most K roundings of the magnitude sum
    tol = (np.abs(_f64(a)) @ np.abs(_f64(b))) * k * F32_EPS + 1e-6
    return a, b, ref, tol


def test_splitk_gemm_odd_sizes():
    a, b, ref, tol = _splitk_case(100, 70, 300)
    c = np.zeros((100, 70), np.float32)
    mod("splitk").interp("splitk", a, b, c)
    assert (np.abs(_f64(c) - ref) <= tol).all()


# ---------------------------------------------------------------------------------------------------------------
# 3. int4 weight GEMM

def _int4_case(m, n, k2):
    x = RNG.standard_normal((m, 2 * k2)).astype(np.float16)
    w = RNG.integers(0, 256, (n, k2)).astype(np.uint8)
    scale = (RNG.random(n) * 0.02 + 0.001).astype(np.float32)
    lo = ((w.astype(np.int64) & 15) ^ 8) - 8
    hi = ((w.astype(np.int64) >> 4) ^ 8) - 8
    wq = np.concatenate([lo, hi], axis=1).astype(np.float64)  # [N, K]
    ref = (_f64(x) @ wq.T) * _f64(scale)[None, :]
    # exact f16 inputs and int4 weights, f32 accumulation over K terms, then one f32 multiply
    tol = (np.abs(_f64(x)) @ np.abs(wq).T) * _f64(scale)[None, :] * (2 * k2 + 1) * F32_EPS + 1e-6
    return x, w, scale, ref, tol


def test_int4_gemm_against_dequantized_numpy():
    x, w, scale, ref, tol = _int4_case(33, 70, 150)
    y = np.zeros((33, 70), np.float32)
    mod("gemm_int4").interp("gemm_int4", x, w, scale, y)
    assert (np.abs(_f64(y) - ref) <= tol).all()


# ---------------------------------------------------------------------------------------------------------------
# 4. per-row top-k of a 50000-wide row

def _topk(m, x, k=20, ch=4096, kp=32):
    r, v = x.shape
    nch = -(-v // ch)
    pval, pidx = np.full((r, nch * kp), np.nan, np.float32), np.full((r, nch * kp), -7, np.int32)
    val, idx = np.full((r, k), np.nan, np.float32), np.full((r, k), -7, np.int32)
    m.interp("topk_chunks", x, pval, pidx)
    m.interp("topk_merge", pval, pidx, val, idx)
    return val, idx


def test_topk_of_wide_rows():
    x = RNG.standard_normal((2, 50_000)).astype(np.float32)
    val, idx = _topk(mod("topk_rows"), x)
    order = np.argsort(-_f64(x), axis=1, kind="stable")[:, :20]  # ties: the lower index first
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(val, np.take_along_axis(x, order, 1))


# ---------------------------------------------------------------------------------------------------------------
# 5. cummax carried across tiles

def test_cummax_across_tiles_odd_length():
    x = RNG.standard_normal((3, 1001)).astype(np.float32)
    y = np.full_like(x, np.nan)
    mod("cummax").interp("row_cummax", x, y)
    np.testing.assert_array_equal(y, np.maximum.accumulate(x, axis=1))  # max is exact


# ---------------------------------------------------------------------------------------------------------------
# 6. argsort + gather: a sort with a payload

def _sort_case(m, n):
    keys = (RNG.integers(-20, 20, (m, n)) / 4).astype(np.float32)  # many ties: the sort must be stable
    vals = RNG.integers(-1000, 1000, (m, n)).astype(np.int32)
    order = np.argsort(keys, axis=1, kind="stable")
    return keys, vals, np.take_along_axis(keys, order, 1), np.take_along_axis(vals, order, 1)


def test_argsort_gather_payload():
    keys, vals, want_k, want_v = _sort_case(5, 100)
    sk, sv = np.full_like(keys, np.nan), np.full_like(vals, -7)
    mod("argsort_gather").interp("sort_pairs", keys, vals, sk, sv)
    np.testing.assert_array_equal(sk, want_k)
    np.testing.assert_array_equal(sv, want_v)


# ---------------------------------------------------------------------------------------------------------------
# 7. masked tail: fill value on the load, masked store

def _tail_ref(x, y0, n, fill, b=128):
    y = y0.copy()
    y[:n] = x[:n] * np.float32(2.0) - np.float32(1.0)  # exact in f32 order: one multiply by 2, one subtract
    t = np.full(-(-x.size // b) * b, fill, np.float64)
    t[:n] = x[:n]
    return y, t.reshape(-1, b).sum(1), np.abs(t).reshape(-1, b).sum(1)


@pytest.mark.parametrize("nn,n", [(1000, 1000), (1000, 777), (1000, 0), (1, 1)])
def test_masked_tail(nn, n):
    x = RNG.standard_normal(nn).astype(np.float32)
    y = np.full(nn, 123.0, np.float32)
    t = -(-nn // 128)
    s = np.full(t + 1, np.nan, np.float32)
    mod("masked_tail").interp("masked_tail", x, y, s, n=n, fill=-3.25)
    want_y, want_s, mag = _tail_ref(x, np.full(nn, 123.0, np.float32), n, -3.25)
    np.testing.assert_array_equal(y, want_y)
    assert (np.abs(_f64(s[:t]) - want_s) <= 128 * F32_EPS * mag + 1e-6).all()  # f32 sum of 128 terms
    assert np.isnan(s[t])


# ---------------------------------------------------------------------------------------------------------------
# 8. one fn imported from another file, used by three kernels

def _softcap(x, cap):
    return cap * np.tanh(_f64(x) / cap)


def test_imported_fn_in_three_kernels():
    m, cap = mod("imported_fn"), 2.5
    x = (RNG.standard_normal(1001) * 4).astype(np.float32)
    y = np.full_like(x, np.nan)
    m.interp("cap_vec", x, y, cap=cap)
    np.testing.assert_allclose(y, _softcap(x, cap), rtol=1e-5, atol=1e-6)  # f32 tanh and a division
    xb = (RNG.standard_normal((9, 100)) * 4).astype(ml_dtypes.bfloat16)
    yb = np.zeros_like(xb)
    m.interp("cap_rows", xb, yb, cap=cap)
    ref = _softcap(xb, cap)
    assert (np.abs(_f64(yb) - ref) <= 2.0 ** -8 * np.abs(ref) + 1e-6).all()  # one bf16 rounding
    x2 = (RNG.standard_normal((3, 300)) * 4).astype(np.float32)
    s = np.full(3, np.nan, np.float32)
    m.interp("cap_rowsum", x2, s, cap=cap)
    np.testing.assert_allclose(s, _softcap(x2, cap).sum(1), rtol=0, atol=1e-4 * 300)  # 300 f32 terms, |t| <= 2.5


# ---------------------------------------------------------------------------------------------------------------
# 9. a dtype-generic fn from f16, bf16 and f32 kernels

DTYPES = [("f16", np.float16, 2.0 ** -11), ("bf16", ml_dtypes.bfloat16, 2.0 ** -8), ("f32", np.float32, 2.0 ** -22)]


def _mix_ref(x, y, w):
    return _f64(x) * (1 - w) + _f64(y) * w


@pytest.mark.parametrize("dt,np_dt,tol", DTYPES)
def test_dtype_generic_fn(dt, np_dt, tol):
    m, n, w = mod("generic_fn"), 777, 0.3
    x, y = (RNG.standard_normal(n).astype(np_dt) for _ in range(2))
    ref = _mix_ref(x, y, w)
    for kernel in (f"mix_{dt}", "mix_any"):  # the concrete kernel, and the generic one bound from the arrays
        z = np.zeros(n, np_dt)
        m.interp(kernel, x, y, z, w=w)
        assert z.dtype == np_dt
        # f32 arithmetic (a few ulps of f32 of the terms), then one rounding to the output dtype
        assert (np.abs(_f64(z) - ref) <= tol * np.abs(ref) + 4 * F32_EPS * (np.abs(_f64(x)) + np.abs(_f64(y)))).all()


# ---------------------------------------------------------------------------------------------------------------
# 10. u8 / i16 bit operations, exact

BIT_OUTS = [("rot", np.uint8), ("mix", np.uint8), ("wrap8", np.uint8), ("sgn", np.int8), ("hx", np.int16),
            ("hs", np.int16), ("hw", np.int16), ("hu", np.uint16), ("nb", np.int32)]


def _bits_ref(a, h):
    x, y = a.astype(np.int64), h.astype(np.int64)
    wrap = lambda v, dt: v.astype(dt)  # int64 -> narrow: two's complement wraparound in NumPy
    return dict(
        rot=wrap((x << 3) | (x >> 5), np.uint8), mix=wrap((x & 0xF0) ^ (x | 0x0F) ^ 0x3C, np.uint8),
        wrap8=wrap(x + 200, np.uint8), sgn=wrap(x, np.int8), hx=wrap(y ^ 0x5A5A, np.int16),
        hs=wrap((y >> 3) + (y << 2), np.int16), hw=wrap(y * 3 + 1000, np.int16), hu=wrap(y, np.uint16),
        nb=wrap(~x & (y & 0x7F), np.int32))


def _bits_inputs(n):
    a = RNG.integers(0, 256, n).astype(np.uint8)
    h = RNG.integers(-32768, 32768, n).astype(np.int16)
    a[:4], h[:4] = [0, 255, 128, 127], [-32768, 32767, -1, 0]
    return a, h


def test_narrow_int_bit_operations_exact():
    a, h = _bits_inputs(1001)
    outs = {k: np.zeros(1001, dt) for k, dt in BIT_OUTS}
    mod("bitops").interp("bitops", a, h, **outs)
    for k, want in _bits_ref(a, h).items():
        np.testing.assert_array_equal(outs[k], want, err_msg=k)


# ---------------------------------------------------------------------------------------------------------------
# 11. deep nesting: a ~2000-term expression and ~300 nested ifs, generated

TERMS, DEPTH = 2000, 300
_OPS = ["+", "-", "^"]


def _deep_source():
    # integer terms (exact): u op1 (u & c1) op2 (u | c2) ...; left to right as written, ^ binds tighter than +/-
    terms = " ".join(f"{_OPS[j % 2]} ((u ^ {j}) & {j * 7 % 1024})" for j in range(TERMS))
    ifs, close = [], []
    for d in range(DEPTH):
        ifs.append(f"if n > {d} {{ acc += {d + 1}; v = v * 2 % 1000003 + {d}")
        close.append("}")
    return f"""
kernel deep<B: int = 128>(y: out i32[N], z: out i32[N], n: i32)
    grid (cdiv(N, B),)
{{
    i = program_id(0) * B
    u = arange(i, i + B)
    y[i : i + B] = u {terms}
    acc = 0
    v = u
    {" ".join(ifs)} {" ".join(close)}
    z[i : i + B] = v + acc
}}
"""


def _deep_ref(nn, n):
    u = np.arange(nn, dtype=np.int64)
    y = u.copy()
    for j in range(TERMS):
        t = (u ^ j) & (j * 7 % 1024)
        y = y + t if j % 2 == 0 else y - t
    acc, v = 0, u.copy()
    for d in range(min(n, DEPTH)):
        acc += d + 1
        v = v * 2 % 1000003 + d
    return y.astype(np.int32), (v + acc).astype(np.int32)


def test_deep_nesting_translates_and_runs():
    m = tilex.compile(_deep_source(), cache_dir=False)
    nn = 300
    for n in (0, 137, DEPTH):
        y, z = np.zeros(nn, np.int32), np.zeros(nn, np.int32)
        m.interp("deep", y, z, n=n)
        wy, wz = _deep_ref(nn, n)
        np.testing.assert_array_equal(y, wy)
        np.testing.assert_array_equal(z, wz)


# ---------------------------------------------------------------------------------------------------------------
# 12. atomic max / min / compare-and-swap under collisions

def _minmax_case(n, k):
    ids = RNG.integers(-2, k + 2, n).astype(np.int32)
    v = RNG.standard_normal(n).astype(np.float32)
    ok = (ids >= 0) & (ids < k)
    mx, mn = np.full(k, -np.inf, np.float32), np.full(k, np.inf, np.float32)
    np.maximum.at(mx, ids[ok], v[ok])
    np.minimum.at(mn, ids[ok], v[ok])
    vi = RNG.integers(-2**31, 2**31, n).astype(np.int32)
    mxi, mni = np.full(k, -2**31, np.int32), np.full(k, 2**31 - 1, np.int32)
    np.maximum.at(mxi, ids[ok], vi[ok])
    np.minimum.at(mni, ids[ok], vi[ok])
    return ids, v, vi, (mx, mn, mxi, mni)


def _check_owner(owner, wins, ids, k):
    ok = (ids >= 0) & (ids < k)
    hit = np.bincount(ids[ok], minlength=k) > 0
    assert (owner[~hit] == -1).all()
    assert (ids[owner[hit]] == np.nonzero(hit)[0]).all()  # the owner is a lane that wrote to that bin
    assert wins[0] == hit.sum()  # exactly one lane won each bin it hit


def test_atomic_max_min_cas_under_collisions():
    n, k = 20_000, 37
    ids, v, vi, (mx, mn, mxi, mni) = _minmax_case(n, k)
    m = mod("atomic_minmax_cas")
    gmx, gmn = np.full(k, -np.inf, np.float32), np.full(k, np.inf, np.float32)
    m.interp("bin_minmax", ids, v, gmx, gmn)
    np.testing.assert_array_equal(gmx, mx)
    np.testing.assert_array_equal(gmn, mn)
    gmxi, gmni = np.full(k, -2**31, np.int32), np.full(k, 2**31 - 1, np.int32)
    m.interp("bin_minmax_i32", ids, vi, gmxi, gmni)
    np.testing.assert_array_equal(gmxi, mxi)
    np.testing.assert_array_equal(gmni, mni)
    owner, wins = np.full(k, -1, np.int32), np.zeros(1, np.int32)
    m.interp("first_writer", ids, owner, wins)
    _check_owner(owner, wins, ids, k)
    ok = (ids >= 0) & (ids < k)
    first = np.full(k, -1, np.int32)  # the interpreter runs programs and elements in order: the first lane wins
    for b in range(k):
        hits = np.nonzero(ok & (ids == b))[0]
        if hits.size:
            first[b] = hits[0]
    np.testing.assert_array_equal(owner, first)


# ---------------------------------------------------------------------------------------------------------------
# nvcc builds every held-out file (and the generated deep program)

def _nvcc(cuda, name, tmp_path, nvcc):
    cu = tmp_path / f"{name}.cu"
    cu.write_text(cuda)
    r = subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-o", str(tmp_path / f"{name}.cubin"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("name", sorted(p.stem for p in HERE.glob("*.tile")))
def test_nvcc_builds(name, tmp_path, nvcc):
    _nvcc(mod(name).cuda, name, tmp_path, nvcc)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_nvcc_builds_generic_kernel_other_dtypes(dt, tmp_path, nvcc):
    _nvcc(mod("generic_fn", T=dt).cuda, f"generic_fn_{dt}", tmp_path, nvcc)


def test_nvcc_builds_deep_program(tmp_path, nvcc):
    _nvcc(tilex.compile(_deep_source(), cache_dir=False).cuda, "deep", tmp_path, nvcc)


# ---------------------------------------------------------------------------------------------------------------
# GPU halves: the same programs on the GPU, against NumPy and the interpreter

@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(100_000, 37), (1, 1), (300_001, 5)])
def test_gpu_scatter_add(n, k):
    ids = RNG.integers(-2, k + 2, n).astype(np.int32)
    v = RNG.standard_normal(n).astype(np.float32)
    gpu, host = _gpu("scatter_add", "scatter_add", dict(ids=ids, v=v, y=np.zeros(k, np.float32)))
    ref, tol = _scatter_ref(ids, v, k)
    # colliding f32 atomics add in an unspecified order: both within the rounding bound of the reference
    assert (np.abs(_f64(gpu["y"]) - ref) <= tol).all()
    assert (np.abs(_f64(gpu["y"]) - _f64(host["y"])) <= 2 * tol).all()


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(100, 70, 300), (1, 1, 1), (257, 129, 1001)])
def test_gpu_splitk(m, n, k):
    a, b, ref, tol = _splitk_case(m, n, k)
    gpu, host = _gpu("splitk", "splitk", dict(a=a, b=b, c=np.zeros((m, n), np.float32)))
    assert np.isfinite(gpu["c"]).all()
    assert (np.abs(_f64(gpu["c"]) - ref) <= tol).all()
    assert (np.abs(_f64(gpu["c"]) - _f64(host["c"])) <= 2 * tol).all()


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k2", [(33, 70, 150), (1, 1, 1), (130, 257, 512)])
def test_gpu_int4_gemm(m, n, k2):
    x, w, scale, ref, tol = _int4_case(m, n, k2)
    gpu, host = _gpu("gemm_int4", "gemm_int4", dict(x=x, w=w, scale=scale, y=np.full((m, n), np.nan, np.float32)))
    assert np.isfinite(gpu["y"]).all()
    assert (np.abs(_f64(gpu["y"]) - ref) <= tol).all()
    assert (np.abs(_f64(gpu["y"]) - _f64(host["y"])) <= 2 * tol).all()


@pytest.mark.gpu
@pytest.mark.parametrize("r,v", [(2, 50_000), (3, 4097), (1, 32)])
def test_gpu_topk(r, v):
    cp = pytest.importorskip("cupy")
    x = RNG.standard_normal((r, v)).astype(np.float32)
    m = mod("topk_rows")
    nch = -(-v // 4096)
    dx = cp.asarray(x)
    pval, pidx = cp.full((r, nch * 32), cp.nan, cp.float32), cp.full((r, nch * 32), -7, cp.int32)
    val, idx = cp.full((r, 20), cp.nan, cp.float32), cp.full((r, 20), -7, cp.int32)
    m.topk_chunks(dx, pval, pidx)
    m.topk_merge(pval, pidx, val, idx)
    cp.cuda.Device().synchronize()
    order = np.argsort(-_f64(x), axis=1, kind="stable")[:, :20]
    if v < 20:
        order = order[:, :v]
    hv, hi = _topk(m, x)
    np.testing.assert_array_equal(cp.asnumpy(idx)[:, :order.shape[1]], order)
    np.testing.assert_array_equal(cp.asnumpy(val)[:, :order.shape[1]], np.take_along_axis(x, order, 1))
    np.testing.assert_array_equal(cp.asnumpy(idx), hi)  # bitonic sorts in the same total order: exact
    np.testing.assert_array_equal(cp.asnumpy(val), hv)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n", [(3, 1001), (1, 1), (2, 70_001)])
def test_gpu_cummax(m, n):
    x = RNG.standard_normal((m, n)).astype(np.float32)
    gpu, host = _gpu("cummax", "row_cummax", dict(x=x, y=np.full((m, n), np.nan, np.float32)))
    np.testing.assert_array_equal(gpu["y"], np.maximum.accumulate(x, axis=1))
    np.testing.assert_array_equal(gpu["y"], host["y"])


@pytest.mark.gpu
@pytest.mark.parametrize("m,n", [(5, 100), (1, 1), (33, 128)])
def test_gpu_argsort_gather(m, n):
    keys, vals, want_k, want_v = _sort_case(m, n)
    gpu, host = _gpu("argsort_gather", "sort_pairs", dict(keys=keys, vals=vals, skeys=np.full_like(keys, np.nan),
                                                          svals=np.full_like(vals, -7)))
    np.testing.assert_array_equal(gpu["skeys"], want_k)
    np.testing.assert_array_equal(gpu["svals"], want_v)  # positions are the interpreter's exactly (stable)
    np.testing.assert_array_equal(gpu["svals"], host["svals"])


@pytest.mark.gpu
@pytest.mark.parametrize("nn,n", [(1000, 777), (1000, 1000), (1000, 0), (100_003, 99_999), (1, 1)])
def test_gpu_masked_tail(nn, n):
    x = RNG.standard_normal(nn).astype(np.float32)
    t = -(-nn // 128)
    gpu, host = _gpu("masked_tail", "masked_tail", dict(x=x, y=np.full(nn, 123.0, np.float32),
                                                        s=np.full(t + 1, np.nan, np.float32)), dict(n=n, fill=-3.25))
    want_y, want_s, mag = _tail_ref(x, np.full(nn, 123.0, np.float32), n, -3.25)
    # nvcc may contract t * 2 - 1 into an FMA: exact anyway (t * 2 is exact in f32)
    np.testing.assert_array_equal(gpu["y"], want_y)
    assert (np.abs(_f64(gpu["s"][:t]) - want_s) <= 128 * F32_EPS * mag + 1e-6).all()  # f32 sum, another order
    assert np.isnan(gpu["s"][t])


@pytest.mark.gpu
def test_gpu_imported_fn_in_three_kernels():
    cap = 2.5
    x = (RNG.standard_normal(70_001) * 4).astype(np.float32)
    gpu, host = _gpu("imported_fn", "cap_vec", dict(x=x, y=np.full_like(x, np.nan)), dict(cap=cap))
    # the GPU's tanhf and division: within a few f32 ulps of float64 and of the interpreter's
    np.testing.assert_allclose(gpu["y"], _softcap(x, cap), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gpu["y"], host["y"], rtol=1e-5, atol=1e-6)
    xb = (RNG.standard_normal((33, 1000)) * 4).astype(ml_dtypes.bfloat16)
    gpu, host = _gpu("imported_fn", "cap_rows", dict(x=xb, y=np.full_like(xb, np.nan)), dict(cap=cap))
    ref = _softcap(xb, cap)
    assert (np.abs(_f64(gpu["y"]) - ref) <= 2.0 ** -8 * np.abs(ref) + 1e-6).all()
    assert (np.abs(_f64(gpu["y"]) - _f64(host["y"])) <= 2.0 ** -7 * np.abs(ref) + 1e-6).all()  # one bf16 ulp
    x2 = (RNG.standard_normal((3, 5000)) * 4).astype(np.float32)
    gpu, host = _gpu("imported_fn", "cap_rowsum", dict(x=x2, s=np.full(3, np.nan, np.float32)), dict(cap=cap))
    np.testing.assert_allclose(gpu["s"], _softcap(x2, cap).sum(1), rtol=0, atol=1e-4 * 5000)
    np.testing.assert_allclose(gpu["s"], host["s"], rtol=0, atol=1e-4 * 5000)


@pytest.mark.gpu
@pytest.mark.parametrize("dt,np_dt,tol", DTYPES)
@pytest.mark.parametrize("n", [1, 777, 65_537])
def test_gpu_dtype_generic_fn(dt, np_dt, tol, n):
    x, y = (RNG.standard_normal(n).astype(np_dt) for _ in range(2))
    ref = _mix_ref(x, y, 0.3)
    for kernel in (f"mix_{dt}", "mix_any"):
        gpu, host = _gpu("generic_fn", kernel, dict(x=x, y=y, z=np.full(n, np.nan, np_dt)), dict(w=0.3))
        z = gpu["z"]
        assert z.dtype == np_dt
        slack = 4 * F32_EPS * (np.abs(_f64(x)) + np.abs(_f64(y)))  # f32 arithmetic, FMA contraction included
        assert (np.abs(_f64(z) - ref) <= tol * np.abs(ref) + slack).all()
        assert (np.abs(_f64(z) - _f64(host["z"])) <= 2 * tol * np.abs(ref) + slack).all()  # one ulp of T apart


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 1001, 65_537])
def test_gpu_narrow_int_bit_operations(n):
    a, h = _bits_inputs(max(n, 4))
    a, h = a[:n], h[:n]
    outs = {k: np.full(n, 77, dt) for k, dt in BIT_OUTS}
    gpu, host = _gpu("bitops", "bitops", dict(a=a, h=h, **outs))
    for k, want in _bits_ref(a, h).items():
        np.testing.assert_array_equal(gpu[k], want, err_msg=k)
        np.testing.assert_array_equal(host[k], want, err_msg=k)


@pytest.mark.gpu
def test_gpu_deep_nesting():
    cp = pytest.importorskip("cupy")
    m = tilex.compile(_deep_source(), cache_dir=False)
    nn = 1001
    for n in (0, 137, DEPTH):
        y, z = cp.full(nn, 7, cp.int32), cp.full(nn, 7, cp.int32)
        m.deep(y, z, n=n)
        cp.cuda.Device().synchronize()
        wy, wz = _deep_ref(nn, n)
        np.testing.assert_array_equal(cp.asnumpy(y), wy)
        np.testing.assert_array_equal(cp.asnumpy(z), wz)


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(20_000, 37), (1, 1), (500_003, 3)])
def test_gpu_atomic_max_min_cas(n, k):
    ids, v, vi, (mx, mn, mxi, mni) = _minmax_case(n, k)
    gpu, host = _gpu("atomic_minmax_cas", "bin_minmax", dict(ids=ids, v=v, mx=np.full(k, -np.inf, np.float32),
                                                             mn=np.full(k, np.inf, np.float32)))
    for out in (gpu, host):  # max and min are exact in any order
        np.testing.assert_array_equal(out["mx"], mx)
        np.testing.assert_array_equal(out["mn"], mn)
    gpu, host = _gpu("atomic_minmax_cas", "bin_minmax_i32", dict(ids=ids, v=vi, mx=np.full(k, -2**31, np.int32),
                                                                 mn=np.full(k, 2**31 - 1, np.int32)))
    for out in (gpu, host):
        np.testing.assert_array_equal(out["mx"], mxi)
        np.testing.assert_array_equal(out["mn"], mni)
    gpu, host = _gpu("atomic_minmax_cas", "first_writer", dict(ids=ids, owner=np.full(k, -1, np.int32),
                                                               wins=np.zeros(1, np.int32)))
    # which colliding CAS wins is unspecified on the GPU: some lane of that bin, exactly one per bin
    _check_owner(gpu["owner"], gpu["wins"], ids, k)
    _check_owner(host["owner"], host["wins"], ids, k)


# ---------------------------------------------------------------------------------------------------------------
# Regressions found while writing these programs (compiler fixes next to them)

def _copy_kernel(where="", grid="cdiv(N, 16)", params=""):
    return (f"kernel k{params}(x: f32[N], y: out f32[N])\n" + (f"    where {where}\n" if where else "")
            + f"    grid ({grid},)\n{{\n    i = program_id(0) * 16\n    y[i : i + 16] = x[i : i + 16]\n}}\n")


@pytest.mark.parametrize("where,ok,bad", [("N & 7 == 0", 16, 12), ("(N | 1) == 17", 16, 12), ("(N ^ 3) == 19", 16, 12),
                                          ("(N > 0) & (N < 20)", 16, 24), ("(N < 10) | (N == 16)", 16, 12)])
def test_bitwise_int_constraints_at_launch(where, ok, bad):
    # `&` and `|` in a where were evaluated at launch as Python's `and` / `or`: (16 and 7) == 0 is False
    m = tilex.compile(_copy_kernel(where), cache_dir=False)
    x = RNG.standard_normal(ok).astype(np.float32)
    y = np.zeros_like(x)
    m.interp("k", x, y)
    np.testing.assert_array_equal(y, x)
    with pytest.raises(tilex.diagnostics.LaunchError, match="failed"):
        m.interp("k", np.zeros(bad, np.float32), np.zeros(bad, np.float32))


def test_bitwise_int_grid():
    from tilex.runtime.args import eval_grid

    m = tilex.compile(_copy_kernel(grid="(N >> 4) | 1"), cache_dir=False)  # (N >> 4) | 1 programs: 3 for N = 40
    assert eval_grid(m.specs["k"], {"N": 40})[0] == 3  # the launch's grid (the interpreter reads the IR's)
    x = RNG.standard_normal(40).astype(np.float32)
    y = np.zeros_like(x)
    m.interp("k", x, y)
    np.testing.assert_array_equal(y, x)


def test_bitwise_constraint_on_compile_time_parameters_is_decided_at_compile_time():
    src = _copy_kernel("B & 7 == 0", params="<B: int = 16>")
    tilex.compile(src, cache_dir=False)
    with pytest.raises(CompileError, match="is false for these compile-time parameters"):
        tilex.compile(src, cache_dir=False, B=12)


def test_deep_where_and_grid_launch():
    # launch expressions nested past Python's parser (200 parentheses) were an "internal error" at every launch
    where = "N >= 1" + "".join(f" and N + {j} >= {j}" for j in range(300))
    grid = "cdiv(N, 16)" + " + 0" * TERMS
    m = tilex.compile(_copy_kernel(where, grid), cache_dir=False)
    x = RNG.standard_normal(100).astype(np.float32)
    y = np.zeros_like(x)
    m.interp("k", x, y)
    np.testing.assert_array_equal(y, x)
    m = tilex.compile(_copy_kernel("N >= 1" + "".join(f" and N != {j + 50}" for j in range(300))), cache_dir=False)
    with pytest.raises(tilex.diagnostics.LaunchError, match=r"failed: N = 100"):
        m.interp("k", np.zeros(100, np.float32), np.zeros(100, np.float32))


def test_deep_launch_expression_evaluator_matches_python():
    from tilex.runtime.exprs import _DeepExpr

    env = {"N": 7, "M": 3, "cdiv": lambda a, b: -(-a // b), "min": min, "max": max}
    for e in ["-2 ** 2", "2 ** -1", "not 1 == 2", "-N * 3", "2 ** 3 ** 2", "N - 3 - 2", "min(N, max(1, 2 + N))",
              "cdiv(N, 2) * 2", "0x10 + 1", "(N & 6) | (M << 2) ^ 1", "N < 0 and 5 // (N - 7) > 0", "N == 7 or 1 // 0",
              "-7 // 2 + -7 % 3", "N / 2 >= M", "((((N))))", "~N + (not 0)"]:
        assert _DeepExpr.parse(e).evaluate(env) == eval(e, {"__builtins__": {}}, env), e
    for e in ["N +", "(N", "N)", "foo(N)", "N N", "min(N,)", "()", "N $ 2"]:
        assert _DeepExpr.parse(e) is None, e

"""Atomics, checked scatters and masked stores/loads (issue 20, items 3 and 5).

The interpreter against float64 / exact NumPy references on fresh random data (histograms with heavy
collisions, scatter-add, split-K into one output, max/min/xchg/cas, masked stores and loads at odd sizes),
the compile-time errors (a scatter through repeating indices, an atomic on a register tile), the run-time
check of `distinct = True`, and nvcc builds of the feature programs. The GPU versions are in
tests/test_atomics_gpu.py.
"""
from __future__ import annotations

import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

import tilex
from tilex.diagnostics import CompileError
from tilex.interp_numeric import InterpError
from tilex.pipeline import Options
from tilex.translate import translate

HIST = """
kernel hist<B: int = 256>(ids: i32[N], counts: out i32[K])
    grid (cdiv(N, B),)
{
    i = program_id(0) * B
    atomic_add(counts[ids[i : i + B, other = -1]], 1)
}
"""

SCATTER_ADD = """
kernel scatter_add<B: int = 32, D: int = 64>(ids: i32[N], x: f32[N, C], y: out f32[K, C], yb: out bf16[K, C],
                                             yh: out f16[K, C])
    grid (cdiv(N, B),)
{
    i = program_id(0) * B
    t = ids[i : i + B, other = -1]
    rows = x[i : i + B, 0 : D]
    atomic_add(y[t, 0 : D], rows)
    atomic_add(yb[t, 0 : D], rows.to(bf16))
    atomic_add(yh[t, 0 : D], rows.to(f16))
}
"""

SPLITK = """
kernel splitk<BM: int = 32, BN: int = 32, BK: int = 16>(a: f32[M, K], b: f32[K, N], c: out f32[M, N])
    grid (cdiv(M, BM), cdiv(N, BN), cdiv(K, BK))
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    k = program_id(2) * BK
    atomic_add(c[m : m + BM, n : n + BN], a[m : m + BM, k : k + BK] @ b[k : k + BK, n : n + BN])
}
"""

SPLITK_WGMMA = """
kernel splitk_wgmma<BM: int = 128, BN: int = 128, BK: int = 64, SPLIT: int = 4>(
    a: bf16[M, K], b: bf16[N, K], c: out f32[M, N], cb: out bf16[M, N])
    where K % 8 == 0
    grid (cdiv(M, BM), cdiv(N, BN), SPLIT)
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    per = cdiv(cdiv(K, SPLIT), BK) * BK
    k0 = program_id(2) * per
    acc = zeros(f32[BM, BN])
    for k in pipeline(k0, min(k0 + per, K), BK, stages = 3) {
        acc += a[m : m + BM, k : k + BK] @ b[n : n + BN, k : k + BK].T
    }
    atomic_add(c[m : m + BM, n : n + BN], acc)              # the accumulator fragments, element by element
    atomic_add(cb[m : m + BM, n : n + BN], acc.to(bf16))    # packed bf16x2 pairs
}
"""

OPS = """
kernel ops<B: int = 128>(ids: i32[N], v: f32[N], vi: i64[N], mx: out f32[K], mn: out f32[K], mi: out i64[K],
                         ni: out i32[K], ex: out i32[K], owner: out i32[K], total: out f32[2])
    grid (cdiv(N, B),)
{
    i = program_id(0) * B
    t = ids[i : i + B, other = -1]
    x = v[i : i + B]
    atomic_max(mx[t], x)
    atomic_min(mn[t], x)
    atomic_max(mi[t], vi[i : i + B])
    atomic_min(ni[t], vi[i : i + B].to(i32))
    atomic_xchg(ex[t], arange(i, i + B))
    atomic_cas(owner[t], -1, program_id(0))
    atomic_add(total[0], sum(x))
    atomic_max(total[1], max(x))
}
"""

ROWSUM = """
kernel rowsum<R: int = 16, C: int = 64>(x: f32[M, C], ids: i32[M], out_: out f32[K], out2: out f32[K])
    grid (cdiv(M, R),)
{
    r = program_id(0) * R
    t = x[r : r + R, 0 : C]
    atomic_add(out_[ids[r : r + R, other = -1]], sum(t, axis=1))         # in t's layout, reduced: replicated
    atomic_add(out2[ids[r : r + R, other = -1]], sum(x[r : r + R, 0 : C], axis=1))
}
"""

MASKED = """
kernel masked<B: int = 64>(x: f32[N], lim: f32, y: out f32[N], z: out f32[N], w: out f32[N])
    grid (cdiv(N, B),)
{
    i = program_id(0) * B
    t = x[i : i + B, mask = x[i : i + B] > lim, other = -1.0]       # masked load with a fill value
    y[i : i + B, mask = t > 0.0] = t * 2.0                          # masked store
    z[i : i + B, mask = program_id(0) % 2 == 0] = t                 # a scalar mask
    w[i : i + B] = x[i : i + B, mask = arange(i, i + B) % 3 == 0]   # other defaults to 0
}
"""

MASKED_2D = """
kernel masked2d<BM: int = 16, BN: int = 32>(x: bf16[M, N], keep: bool[N], y: out bf16[M, N])
    grid (cdiv(M, BM), cdiv(N, BN))
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    k = keep[n : n + BN]
    y[m : m + BM, n : n + BN, mask = k[None, :] & (arange(m, m + BM) % 2 == 1)[:, None]] = x[m : m + BM, n : n + BN]
}
"""

GROUP_NORM = """
# Group norm over the C columns of a row, G groups of C / G columns each (not a power of two): the
# group's tile is masked to its own columns on the load and the store, so no group touches its neighbour's.
kernel group_norm<G: int = 4, BLOCK: int = 64>(x: f32[M, C], w: f32[C], b: f32[C], y: out f32[M, C],
                                               eps: f32 = 1e-5)
    where C % G == 0, C <= G * BLOCK
    grid (M, G)
{
    row = program_id(0)
    cg = C // G
    c0 = program_id(1) * cg
    inside = arange(0, BLOCK) < cg                       # this group's columns
    t = x[row, c0 : c0 + BLOCK, mask = inside, other = 0.0]
    mean = sum(t) / cg
    d = where(inside, t - mean, 0.0)
    inv = rsqrt(sum(d * d) / cg + eps)
    y[row, c0 : c0 + BLOCK, mask = inside] = d * inv * w[c0 : c0 + BLOCK] + b[c0 : c0 + BLOCK]
}
"""

DISTINCT = """
kernel perm<B: int = 64>(p: i32[N], x: f32[N], y: out f32[N])
    grid (cdiv(N, B),)
{
    i = program_id(0) * B
    y[p[i : i + B, other = -1], distinct = True] = x[i : i + B]
}
"""


def interp(src, name, *args, **scalars):
    tilex.compile(src, cache_dir=False).interp(name, *args, **scalars)


def rng(seed):
    return np.random.default_rng(seed)


def test_histogram_with_heavy_collisions():
    r = rng(1)
    n, k = 5003, 17  # every bin hit ~300 times, ids outside [0, K) skipped
    ids = r.integers(-3, k + 3, size=n).astype(np.int32)
    counts = r.integers(0, 5, size=k).astype(np.int32)
    ref = counts.astype(np.int64)
    np.add.at(ref, ids[(ids >= 0) & (ids < k)], 1)
    interp(HIST, "hist", ids, counts)
    np.testing.assert_array_equal(counts, ref)


def test_scatter_add_rows():
    r = rng(2)
    n, k, d = 301, 7, 45  # odd rows: the bf16/f16 pairs are unaligned on every other row, cut at the edge
    ids = r.integers(-1, k + 1, size=n).astype(np.int32)
    x = r.standard_normal((n, d)).astype(np.float32)
    y = r.standard_normal((k, d)).astype(np.float32)
    yb = np.zeros((k, d), ml_dtypes.bfloat16)
    yh = np.zeros((k, d), np.float16)
    ref = y.astype(np.float64)
    ok = (ids >= 0) & (ids < k)
    np.add.at(ref, ids[ok], x[ok].astype(np.float64))
    interp(SCATTER_ADD, "scatter_add", ids, x, y, yb, yh)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-4)  # f32: ~45 additions per element
    refb = np.zeros((k, d))
    np.add.at(refb, ids[ok], x[ok].astype(ml_dtypes.bfloat16).astype(np.float64))
    # bf16 rounds after each of ~45 additions (8 bits): within a few percent of the sums' scale
    assert np.abs(yb.astype(np.float64) - refb).max() <= 0.05 * np.abs(refb).max() + 0.1
    assert np.abs(yh.astype(np.float64) - refb).max() <= 0.01 * np.abs(refb).max() + 0.05


def test_splitk_accumulates_into_one_output():
    r = rng(3)
    m, n, k = 45, 70, 83  # odd: every edge is partial, 6 k-splits
    a = r.standard_normal((m, k)).astype(np.float32)
    b = r.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    interp(SPLITK, "splitk", a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_splitk_tensor_core_main_loop_accumulates_into_one_output():
    r = rng(10)
    m, n, k = 130, 70, 520  # 4 splits of 192 (the last one short)
    a = r.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = r.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    c, cb = np.zeros((m, n), np.float32), np.zeros((m, n), ml_dtypes.bfloat16)
    mod = tilex.compile(SPLITK_WGMMA, cache_dir=False)
    assert "tilex_atomic_add_pair(cb" in mod.cuda and "wgmma" in mod.cuda
    mod.interp("splitk_wgmma", a, b, c, cb)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(cb.astype(np.float64), ref, rtol=0.05, atol=0.5)  # 4 bf16 roundings


def _ops_inputs(seed, n=1000, k=13):
    r = rng(seed)
    ids = r.integers(-2, k + 2, size=n).astype(np.int32)
    v = (r.standard_normal(n) * 10).astype(np.float32)
    v[r.integers(0, n, size=20)] = np.nan  # skipped by max/min
    v[:3] = (0.0, -0.0, -np.inf)
    vi = r.integers(-2**40, 2**40, size=n).astype(np.int64)
    outs = dict(mx=np.full(k, -1e30, np.float32), mn=np.full(k, 1e30, np.float32),
                mi=np.full(k, np.iinfo(np.int64).min, np.int64), ni=np.full(k, 2**31 - 1, np.int32),
                ex=np.full(k, -7, np.int32), owner=np.full(k, -1, np.int32), total=np.zeros(2, np.float32))
    return ids, v, vi, outs


def test_max_min_xchg_cas_and_scalar_atomics():
    ids, v, vi, o = _ops_inputs(4)
    k = len(o["mx"])
    interp(OPS, "ops", ids, v, vi, *o.values())
    ok = (ids >= 0) & (ids < k)
    for name, init, fn in (("mx", -1e30, np.fmax), ("mn", 1e30, np.fmin)):
        ref = np.full(k, init, np.float64)
        fn.at(ref, ids[ok], v[ok].astype(np.float64))  # fmax/fmin skip NaN
        np.testing.assert_array_equal(o[name], ref.astype(np.float32))
    ref = np.full(k, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(ref, ids[ok], vi[ok])
    np.testing.assert_array_equal(o["mi"], ref)
    ref = np.full(k, 2**31 - 1, np.int64)
    np.minimum.at(ref, ids[ok], vi[ok].astype(np.int32).astype(np.int64))  # the conversion wraps
    np.testing.assert_array_equal(o["ni"], ref)
    pos = np.arange(len(ids))
    for j in range(k):  # xchg: the interpreter keeps the last write; cas: the first program claims the bin
        hits = pos[ids == j]
        assert o["ex"][j] == (hits[-1] if hits.size else -7)
        assert o["owner"][j] == (hits[0] // 128 if hits.size else -1)
    blocks = [np.sum(v[b:b + 128], dtype=np.float32) for b in range(0, len(v), 128)]
    np.testing.assert_allclose(o["total"][0], sum(np.float64(s) for s in blocks), rtol=1e-5)  # NaN: NaN
    assert o["total"][1] == np.nanmax(v)


def test_float_max_orders_signed_zeros_and_skips_nan():
    src = """
kernel fmax_k(v: f32[N], y: out f32[2])
    grid (cdiv(N, 8),)
{
    i = program_id(0) * 8
    atomic_max(y[0 * arange(0, 8)], v[i : i + 8, other = nan])
    atomic_min(y[1 + 0 * arange(0, 8)], v[i : i + 8, other = nan])
}
"""
    y = np.array([-np.inf, np.inf], np.float32)
    v = np.array([np.nan, -0.0, -5.0, np.nan, -1e-30], np.float32)
    interp(src, "fmax_k", v, y)
    assert y[0] == 0.0 and np.signbit(y[0])  # the largest is -0.0 (-1e-30 < -0.0)
    assert y[1] == -5.0


def test_atomic_on_reduced_tile_runs_once_per_element():
    """A row sum is held by every thread that reduced it: the atomic must count it once (replica_guard)."""
    r = rng(5)
    m, c, k = 77, 64, 5
    x = r.standard_normal((m, c)).astype(np.float32)
    ids = r.integers(0, k, size=m).astype(np.int32)
    out, out2 = np.zeros(k, np.float32), np.zeros(k, np.float32)
    interp(ROWSUM, "rowsum", x, ids, out, out2)
    ref = np.zeros(k)
    np.add.at(ref, ids, x.astype(np.float64).sum(axis=1))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out2, ref, rtol=1e-4, atol=1e-4)
    cuda = translate(ROWSUM, "rowsum.tile", Options()).cuda
    guards = [line.split("&& (")[-1].split(")) tilex_atomic")[0] for line in cuda.splitlines() if "tilex_atomic_add(&" in line]
    assert len(guards) == 2 and all("threadIdx.x" in g for g in guards), guards


@pytest.mark.parametrize("n", [1, 63, 64, 200, 1001])
def test_masked_store_and_load(n):
    r = rng(6 + n)
    x = r.standard_normal(n).astype(np.float32)
    lim = 0.3
    y, z, w = (np.full(n, 9.0, np.float32) for _ in range(3))
    interp(MASKED, "masked", x, lim, y, z, w)
    t = np.where(x > np.float32(lim), x, -1.0).astype(np.float32)
    np.testing.assert_array_equal(y, np.where(t > 0, t * 2, 9.0).astype(np.float32))
    even = (np.arange(n) // 64) % 2 == 0
    np.testing.assert_array_equal(z, np.where(even, t, 9.0).astype(np.float32))
    np.testing.assert_array_equal(w, np.where(np.arange(n) % 3 == 0, x, 0.0).astype(np.float32))


def test_masked_scalar_store_and_load():
    src = """
kernel k(x: f32[N], flag: i32[1], y: out f32[4])
    grid (1,)
{
    on = flag[0] > 0
    y[0, mask = on] = x[1]
    y[1] = x[2, mask = on, other = -3.0]
    y[2, mask = not on] = 5.0
    atomic_add(y[3, mask = on], x[0])
}
"""
    x = np.arange(1, 5, dtype=np.float32)
    for flag, want in ((1, [2.0, 3.0, 9.0, 10.0]), (0, [9.0, -3.0, 5.0, 9.0])):
        y = np.full(4, 9.0, np.float32)
        interp(src, "k", x, np.array([flag], np.int32), y)
        np.testing.assert_array_equal(y, np.array(want, np.float32))


def test_masked_store_broadcast_mask_2d():
    r = rng(7)
    m, n = 37, 45
    x = r.standard_normal((m, n)).astype(ml_dtypes.bfloat16)
    keep = r.random(n) < 0.5
    y = np.zeros((m, n), ml_dtypes.bfloat16)
    interp(MASKED_2D, "masked2d", x, keep, y)
    sel = keep[None, :] & (np.arange(m) % 2 == 1)[:, None]
    np.testing.assert_array_equal(y.astype(np.float32), np.where(sel, x.astype(np.float32), 0.0))


def group_norm_reference(x, w, b, g, eps=1e-5):
    m, c = x.shape
    xg = x.astype(np.float64).reshape(m, g, c // g)
    d = xg - xg.mean(axis=2, keepdims=True)
    return (d / np.sqrt((d * d).mean(axis=2, keepdims=True) + eps)).reshape(m, c) * w + b


@pytest.mark.parametrize("m, c, g", [(5, 92, 4), (3, 7, 1), (2, 150, 3)])
def test_group_norm_with_masked_store(m, c, g):
    r = rng(9 + c)
    x = (r.standard_normal((m, c)) * 3 + 1).astype(np.float32)
    w, b = r.standard_normal(c).astype(np.float32), r.standard_normal(c).astype(np.float32)
    y = np.full((m, c), np.nan, np.float32)
    tilex.compile(GROUP_NORM, cache_dir=False, G=g).interp("group_norm", x, w, b, y)
    np.testing.assert_allclose(y, group_norm_reference(x, w, b, g), rtol=1e-4, atol=1e-4)


def test_distinct_scatter_runs_and_repeats_raise():
    r = rng(8)
    n = 300
    p = r.permutation(n).astype(np.int32)
    x = r.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    interp(DISTINCT, "perm", p, x, y)
    ref = np.zeros(n, np.float32)
    ref[p] = x
    np.testing.assert_array_equal(y, ref)
    p[5] = p[6]  # one program writes one element twice
    with pytest.raises(InterpError, match=r"marked distinct = True, but element \[\d+\] is written 2 times"):
        interp(DISTINCT, "perm", p, x, np.zeros(n, np.float32))
    q = np.full(n, n + 5, np.int32)  # out of range: skipped, never a repeat
    interp(DISTINCT, "perm", q, x, np.zeros(n, np.float32))


@pytest.mark.parametrize("src, message", [
    ("counts[t] += 1", "write atomic_add(counts[t], 1), which keeps every update"),
    ("counts[t] -= v", "write atomic_add(counts[t], -v)"),
    ("counts[t] max= v", "write atomic_max(counts[t], v)"),
    ("counts[t] *= v", "no atomic does '*='"),
    ("counts[t] = v", "write atomic_xchg(counts[t], value)"),
    ("atomic_add(acc, v)", "'acc' is a local (a register value of this program"),
    ("atomic_add(counts, v)", "takes a subscript of a tensor, not the whole tensor 'counts'"),
    ("atomic_add(ids[t], v)", "'ids' is an input"),
    ("x = atomic_add(counts[t], v) + 1", "atomic_add() is a statement"),
    ("x = atomic_add(counts[t], v)", "skips (an index tile: masked off, or outside 'counts')"),
    ("atomic_max(h[t], v.to(bf16))", "atomic_max() on bf16 is not supported"),
    ("atomic_add(counts[t], v, v)", "takes 2 arguments, got 3"),
    ("sum(v)", "as a statement does nothing"),
    ("counts[t, mask = v] = v", "mask= must be a condition (bool), got i32"),
    ("counts[t, distinct = 1] = v", "distinct= takes True or False"),
    ("acc = v[0 : 64, distinct = True]", "distinct= marks the index tiles of a store"),
    ("acc = acc[:, mask = v > 0]", "mask= applies to subscripts of a tensor"),
    ("counts[0 : 64, distinct = True] = v", "distinct = True marks the index tiles of a scatter"),
    ("counts[t, mask = (v > 0)[:, None]] = v", "mask= of shape [64, 1] does not broadcast to the subscript's shape [64]"),
    ("counts[t, mask = v > 0, distinct = True] = v.to(f32)", "storing f32 into counts: i32"),
    ("atomic_cas(counts[t], v.to(f32), v)", "storing f32 into counts: i32"),
])
def test_errors(src, message):
    prog = f"""
kernel k(ids: i32[N], counts: out i32[K], h: out bf16[K])
    grid (1,)
{{
    t = ids[0 : 64]
    v = ids[0 : 64]
    acc = zeros(i32[64])
    {src}
}}
"""
    with pytest.raises(CompileError, match=None) as e:
        tilex.compile(prog, cache_dir=False)
    assert message in str(e.value), str(e.value)


def test_distinct_augmented_scatter():
    src = """
kernel k<B: int = 64>(p: i32[N], x: f32[N], y: out f32[N])
    grid (cdiv(N, B),)
{
    i = program_id(0) * B
    y[p[i : i + B, other = -1], distinct = True] += x[i : i + B]
}
"""
    r = rng(11)
    n = 150
    p, x, y = r.permutation(n).astype(np.int32), r.standard_normal(n).astype(np.float32), r.standard_normal(n).astype(np.float32)
    ref = y.copy()
    ref[p] += x
    interp(src, "k", p, x, y)
    np.testing.assert_array_equal(y, ref)


def test_injective_index_tiles_need_no_marker():
    src = """
kernel k(x: f32[N], y: out f32[M])
    grid (cdiv(N, 64),)
{
    i = program_id(0) * 64
    y[2 * arange(i, i + 64) + 1] = x[i : i + 64]
    y[(arange(0, 64) - i).to(i64)] += x[i : i + 64]
}
"""
    tilex.compile(src, cache_dir=False)


FEATURES = {"hist": HIST, "scatter_add": SCATTER_ADD, "splitk": SPLITK, "splitk_wgmma": SPLITK_WGMMA, "ops": OPS, "rowsum": ROWSUM,
            "masked": MASKED, "masked2d": MASKED_2D, "distinct": DISTINCT, "group_norm": GROUP_NORM}


@pytest.mark.nvcc
@pytest.mark.parametrize("arch, flags", [("sm_90a", ["-gencode=arch=compute_90a,code=sm_90a"]),
                                         ("sm_80", ["-arch=sm_80"])])
@pytest.mark.parametrize("name", sorted(FEATURES))
def test_feature_programs_build_with_nvcc(name, arch, flags, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found on PATH")
    cu = tmp_path / f"{name}.cu"
    cu.write_text(translate(FEATURES[name], f"{name}.tile", Options(arch=arch)).cuda)
    r = subprocess.run([nvcc, "-cubin", *flags, "-o", str(tmp_path / "k.cubin"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]

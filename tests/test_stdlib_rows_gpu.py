"""GPU: the row kernels at public decoder sizes (the paths transpiler/stdlib/rows.py picks) against
PyTorch and a float64 reference on fresh random data.

The pieces path (rms_norm_k2, fused_add_rms_norm_k2 and its in-place kernel, layer_norm_k2) at
5120, 1536, 2304, 2560, 3072, 4608 with odd token counts; the power-of-two path at 896 and 3584;
softmax/argmax/sample split over 1 and 16 rows of 152064 (argmax ties in different segments: the
lowest index, as torch); silu_and_mul and embedding at column blocks narrower than 2048; the PREFETCH paths
(power-of-two and pieces, bf16/f16/f32) and embedding_tile at odd sizes. Outputs are
poisoned first (_launch.POISON). Tolerance: max |out - ref| / max |ref| <= TOL[dtype]; torch's own
result within 3x that of the reference.

Run: pytest -m gpu tests/test_stdlib_rows_gpu.py
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tilex.stdlib as S  # noqa: E402
from tilex.stdlib import _launch as L  # noqa: E402
from tilex.stdlib import rows  # noqa: E402

TD = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setattr(L, "POISON", True)
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    yield
    torch.cuda.synchronize()


def rel(out, ref):
    out, ref = out.double(), ref.double()
    assert out.shape == ref.shape
    assert torch.isfinite(out).all(), "output has NaN/inf"
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def randn(shape, dt, scale=1.0, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda") * scale).to(TD[dt])


# decode-sized row counts (under 132: the one-step power-of-two path, 8 elements a thread) and row counts
# that fill the SMs (the pieces path and the streamed ring)
SIZES = [(7, 5120), (4099, 5120), (1, 1536), (333, 1536), (5, 2304), (200, 2304), (100, 2560), (133, 2560),
         (3, 3072), (150, 3072), (17, 4608), (140, 4608), (9, 896), (1000, 3584), (1, 16384), (61, 8192),
         (1001, 2304), (700, 4608)]  # the last two: layer_norm_k2 at W / 4 threads through the persistent ring


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("m,n", SIZES)
def test_norms_vs_torch(dt, m, n):
    x, r = randn((m, n), dt, seed=n + m), randn((m, n), dt, seed=n + m + 1)
    w, b = randn((n,), dt, seed=2), randn((n,), dt, seed=3)
    x64, w64, b64 = x.double(), w.double(), b.double()
    ref = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w64
    assert rel(S.rms_norm(x, w, 1e-6), ref) <= TOL[dt]
    assert rel(F.rms_norm(x, (n,), w, 1e-6), ref) <= 3 * TOL[dt]
    y, h = S.fused_add_rms_norm(x, r, w, 1e-6)
    hr = (x.double() + r.double()).to(TD[dt]).double()
    ref2 = hr * torch.rsqrt((hr * hr).mean(-1, keepdim=True) + 1e-6) * w64
    assert torch.equal(h, (x.float() + r.float()).to(TD[dt]))
    assert rel(y, ref2) <= TOL[dt]
    xi, ri = x.clone(), r.clone()
    S.fused_add_rms_norm(xi, ri, w, 1e-6, inplace=True)
    assert torch.equal(ri, h)
    assert rel(xi, ref2) <= TOL[dt]
    mu = x64.mean(-1, keepdim=True)
    ref3 = (x64 - mu) * torch.rsqrt(((x64 - mu) ** 2).mean(-1, keepdim=True) + 1e-5) * w64 + b64
    assert rel(S.layer_norm(x, w, b, 1e-5), ref3) <= TOL[dt]
    assert rel(F.layer_norm(x, (n,), w, b, 1e-5), ref3) <= 3 * TOL[dt]


def test_pieces_path_taken_at_5120():
    assert rows.plan("rms_norm", 5120, 4096)[0] == "rms_norm_k2"
    assert rows.plan("fused_add_rms_norm", 5120, 4096)[0] == "fused_add_rms_norm_k2"
    assert rows.plan("layer_norm", 5120, 4096)[0] == "layer_norm_k2"


@pytest.mark.parametrize("dt", ["bf16", "f32"])
@pytest.mark.parametrize("m", [1, 16, 100])
def test_softmax_split_vs_torch(dt, m):
    x = randn((m, 152064), dt, 4.0, seed=m)
    x[0, 10:70000] = float("-inf")
    ref = torch.softmax(x.double(), -1)
    assert rel(S.softmax(x), ref) <= TOL[dt]
    assert rel(torch.softmax(x, -1), ref) <= 3 * TOL[dt]


@pytest.mark.parametrize("dt", ["bf16", "f32"])
@pytest.mark.parametrize("m", [1, 16])
def test_argmax_split_ties_vs_torch(dt, m):
    x = randn((m, 152064), dt, seed=10 + m)
    g = torch.Generator().manual_seed(m)
    top = float(x.double().max()) + 1.0
    for row in range(m):
        cols = torch.randperm(152064, generator=g)[:3]
        x[row, cols.cuda()] = top
    assert torch.equal(S.argmax(x), torch.argmax(x, -1))
    assert torch.equal(S.argmax(x), torch.argmax(x.double(), -1))


def test_sample_split_matches_one_program_kernel():
    x = randn((3, 152064), "f32", 2.0, seed=5)
    assert rows.split_segments(3, 152064, 1024, fill=True, min_chunks=8) > 1
    for seed in (0, 7, 123):
        got = S.sample(x, temperature=0.8, seed=seed)
        ids = torch.empty(3, dtype=torch.int64, device="cuda")
        mod = L.load("sample", kernel="sample", T="f32", BLOCK=1024, WARPS=8)
        L.run(mod, "sample", x, ids, inv_temp=1 / 0.8, top_p=1.0, seed=seed)
        assert torch.equal(got, ids)


def test_sample_split_distribution():
    """20000 draws from one 4-token-dominant row of 152064 against softmax(z / T), chi-square."""
    v = 152064
    z = torch.full((1, v), -30.0, device="cuda")
    z[0, [5, 40000, 90000, 150000]] = torch.tensor([1.0, 0.5, 0.0, -0.5], device="cuda")
    p = torch.softmax(z[0].double() / 0.7, -1)
    counts = torch.zeros(v, dtype=torch.float64)
    for seed in range(20000):
        counts[int(S.sample(z, temperature=0.7, seed=seed))] += 1
    keep = [5, 40000, 90000, 150000]
    expected = p[keep].cpu() * 20000
    chi2 = float((((counts[keep] - expected) ** 2) / expected).sum())
    assert counts[keep].sum() >= 20000 - 5
    assert chi2 < 16.3  # 3 degrees of freedom, p = 0.001


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sample_gpu_equals_interpreter(dtype):
    """The GPU's draws are the interpreter's, token for token, on both paths (split: 1 row of 20000; one program
    per row: 200 rows of 2048), for 40 seeds: the same counter-based Gumbel noise and the same argmax."""
    import ml_dtypes
    import numpy as np

    g = torch.Generator(device="cuda").manual_seed(5)
    for rows_, v in ((1, 20000), (200, 2048)):
        z = (torch.randn(rows_, v, device="cuda", generator=g) * 2).to(dtype)
        zn = z.float().cpu().numpy()
        zn = zn.astype(ml_dtypes.bfloat16) if dtype == torch.bfloat16 else zn
        for seed in range(40):
            got = S.sample(z, temperature=0.8, seed=seed).cpu().numpy()
            want = S.sample(np.ascontiguousarray(zn), temperature=0.8, seed=seed)
            assert np.array_equal(got, want), (rows_, v, seed, got[:8], want[:8])


@pytest.mark.parametrize("m,d", [(5, 4864), (300, 1536), (3, 3584), (2, 18944)])
def test_column_blocked_kernels_vs_torch(m, d):
    x = randn((m, 2 * d), "bf16", seed=d)
    ref = (F.silu(x[:, :d].double()) * x[:, d:].double())
    assert rel(S.silu_and_mul(x), ref) <= TOL["bf16"]
    table = randn((1000, d), "bf16", seed=1)
    ids = torch.randint(0, 1000, (m, 3), device="cuda")
    assert torch.equal(S.embedding(ids, table), F.embedding(ids, table))


# ----------------------------------------------------------------------------- decode-sized launches

def _rope_ref(x, pos, theta):
    x = x.double().clone()
    half = x.shape[-1] // 2
    inv = theta ** (-torch.arange(half, device="cuda", dtype=torch.float64) * 2.0 / x.shape[-1])
    ang = pos.double()[:, None] * inv[None, :]
    c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
    a, b = x[..., :half].clone(), x[..., half:].clone()
    x[..., :half], x[..., half:] = a * c - b * s, b * c + a * s
    return x


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("s,hq,hk,d", [(1, 32, 8, 128), (3, 5, 3, 80), (131, 28, 4, 128), (4, 8, 4, 256),
                                       (2, 1, 1, 2)])
@pytest.mark.parametrize("kernel", ["rope", "rope_heads"])
def test_rope_kernels_vs_torch(dt, s, hq, hk, d, kernel):
    """Both full-rotary kernels at odd head counts, sizes and heads per block, out of place and in place."""
    import math

    q, k = randn((s, hq, d), dt, seed=s + hq), randn((s, hk, d), dt, seed=s + hk + 1)
    pos = torch.randint(0, 4096, (s,), device="cuda")
    theta, half = 500000.0, d // 2
    tol = max(TOL[dt], 4e-3)  # f32 angles up to 4096 rad carry ~4096 * 2**-24 rad of rounding
    rq, rk = _rope_ref(q, pos, theta), _rope_ref(k, pos, theta)
    for hb, warps in ((1, 1), (4, 1), (8, 2)):
        cfg = dict(T=dt, I="i64", HB=hb, HALFB=L.next_pow2(half), WARPS=warps)
        q4, k4 = q.view(s, hq, 2, half), k.view(s, hk, 2, half)
        qo, ko = torch.full_like(q4, float("nan")), torch.full_like(k4, float("nan"))
        L.run(L.load("rope", kernel=kernel, **cfg), kernel, q4, k4, pos, qo, ko, nlog2=-2.0 * math.log2(theta) / d)
        assert rel(qo.view(q.shape), rq) <= tol and rel(ko.view(k.shape), rk) <= tol
        q2, k2 = q4.clone(), k4.clone()
        L.run(L.load("rope", kernel=kernel + "_inplace", **cfg), kernel + "_inplace", q2, k2, pos,
              nlog2=-2.0 * math.log2(theta) / d)
        assert torch.equal(q2, qo) and torch.equal(k2, ko)


@pytest.mark.parametrize("dt", ["bf16", "f32"])
@pytest.mark.parametrize("m,n,block,r,warps,blocks,stages", [
    (1000, 3584, 4096, 1, 8, 4, 3), (4099, 3584, 4096, 1, 4, 6, 2), (333, 896, 1024, 2, 4, 8, 3),
    (5, 896, 1024, 1, 2, 0, 1), (1001, 2048, 2048, 1, 4, 0, 1)])
def test_layer_norm_reloaded_weights_vs_torch(dt, m, n, block, r, warps, blocks, stages):
    """layer_norm with w and b read again each step (HOLD=False) on persistent and one-step grids."""
    x = randn((m, n), dt, seed=m + n, scale=2.0) + 1.0
    w, b = randn((n,), dt, seed=5), randn((n,), dt, seed=6)
    cfg = dict(BLOCK=block, R=r, ONE_PASS=True, WARPS=warps, MIN_BLOCKS=blocks, STAGES=stages,
               PROGRAMS=132 * blocks if blocks else 1 << 30, EXACT=block == n, HOLD=False)
    y = torch.full_like(x, float("nan"))
    L.run(L.load("layer_norm", kernel="layer_norm", T=dt, **cfg), "layer_norm", x, w, b, y, eps=1e-5)
    x64 = x.double()
    mu = x64.mean(-1, keepdim=True)
    ref = (x64 - mu) * torch.rsqrt(((x64 - mu) ** 2).mean(-1, keepdim=True) + 1e-5) * w.double() + b.double()
    assert rel(y, ref) <= TOL[dt]


PREFETCH_GPU = [  # (m, n, BLOCK, R, WARPS, blocks per SM): odd row counts, programs of 1..many steps, R > 1
    (1023, 8192, 8192, 1, 16, 2), (1025, 8192, 8192, 1, 32, 1), (3001, 896, 1024, 2, 4, 8), (133, 896, 1024, 4, 8, 4),
    (4097, 2048, 2048, 1, 8, 4), (999, 2304, 4096, 1, 8, 2), (17, 3584, 4096, 1, 16, 1), (2000, 100, 128, 4, 1, 16)]


@pytest.mark.parametrize("dt", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("m,n,block,r,warps,blocks", PREFETCH_GPU)
def test_prefetch_path_vs_torch(dt, m, n, block, r, warps, blocks):
    """The PREFETCH path of rms_norm, fused_add_rms_norm and layer_norm (persistent programs, the next step's rows
    loaded into registers during this one) against a float64 reference and torch."""
    x = randn((m, n), dt, seed=m + n)
    res = randn((m, n), dt, seed=m + n + 1)
    w, b = randn((n,), dt, seed=5), randn((n,), dt, seed=6)
    cfg = dict(T=dt, BLOCK=block, R=r, ONE_PASS=True, WARPS=warps, MIN_BLOCKS=blocks, PROGRAMS=132 * blocks,
               STAGES=1, PREFETCH=True)
    y = torch.full_like(x, float("nan"))
    L.run(L.load("rms_norm", kernel="rms_norm", **cfg), "rms_norm", x, w, y, eps=1e-6)
    x64 = x.double()
    ref = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w.double()
    assert rel(y, ref) <= TOL[dt]
    assert rel(F.rms_norm(x, (n,), w, 1e-6), ref) <= 3 * TOL[dt]
    y, h = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    L.run(L.load("fused_add_rms_norm", kernel="fused_add_rms_norm", **cfg), "fused_add_rms_norm", x, res, w, y, h,
          eps=1e-6)
    assert torch.equal(h, x + res)
    h64 = h.double()
    assert rel(y, h64 * torch.rsqrt((h64 * h64).mean(-1, keepdim=True) + 1e-6) * w.double()) <= TOL[dt]
    x3 = x + 3.0  # a mean far from 0: masked columns must stay out of the variance
    y = torch.full_like(x, float("nan"))
    L.run(L.load("layer_norm", kernel="layer_norm", EXACT=block == n, **cfg), "layer_norm", x3, w, b, y, eps=1e-5)
    ref = F.layer_norm(x3.double(), (n,), w.double(), b.double(), 1e-5)
    assert rel(y, ref) <= TOL[dt]


@pytest.mark.parametrize("dt", ["bf16", "f32"])
@pytest.mark.parametrize("m,w,p1,p2,warps,blocks", [(4099, 1024, 4, 1, 4, 4), (1001, 256, 8, 1, 2, 6),
                                                    (333, 512, 2, 1, 2, 8), (150, 1024, 2, 1, 4, 1)])
def test_pieces_prefetch_vs_torch(dt, m, w, p1, p2, warps, blocks):
    """rms_norm_k2 and layer_norm_k2 with PREFETCH (the next row's two pieces in registers)."""
    k = p1 + p2
    n = w * k
    x = randn((m, n), dt, seed=m + n) + 1.0
    wt, b = randn((n,), dt, seed=5), randn((n,), dt, seed=6)
    cfg = dict(T=dt, W=w, P1=p1, P2=p2, WARPS=warps, MIN_BLOCKS=blocks, PROGRAMS=132 * blocks, STAGES=1,
               PREFETCH=True)
    y = torch.full_like(x, float("nan"))
    L.run(L.load("rms_norm", kernel="rms_norm_k2", **cfg), "rms_norm_k2", x.view(m * k, w), wt.view(k, w),
          y.view(m * k, w), eps=1e-6)
    x64 = x.double()
    assert rel(y, x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * wt.double()) <= TOL[dt]
    y = torch.full_like(x, float("nan"))
    L.run(L.load("layer_norm", kernel="layer_norm_k2", **cfg), "layer_norm_k2", x.view(m * k, w), wt.view(k, w),
          b.view(k, w), y.view(m * k, w), eps=1e-5)
    assert rel(y, F.layer_norm(x64, (n,), wt.double(), b.double(), 1e-5)) <= TOL[dt]


@pytest.mark.parametrize("dt", ["bf16", "f32"])
@pytest.mark.parametrize("s,v,d,block,r,warps", [(4097, 32000, 4096, 2048, 4, 8), (1001, 151936, 896, 1024, 2, 4),
                                                 (3, 1000, 4864, 512, 8, 4), (2048, 128256, 2048, 256, 8, 8)])
def test_embedding_tile_vs_torch(dt, s, v, d, block, r, warps):
    """embedding_tile (ROWS tokens a program as one gather) against F.embedding, a few ids out of range -> zeros."""
    g = torch.Generator(device="cuda").manual_seed(s)
    ids = torch.randint(0, v, (s,), device="cuda", generator=g)
    ids[::97] = v + 5
    ids[1::101] = -2
    table = randn((v, d), dt, seed=d)
    y = torch.full((s, d), float("nan"), device="cuda", dtype=TD[dt])
    L.run(L.load("embedding", kernel="embedding_tile", T=dt, I="i64", BLOCK=block, ROWS=r, WARPS=warps),
          "embedding_tile", ids, table, y)
    ok = (ids >= 0) & (ids < v)
    ref = torch.where(ok[:, None], F.embedding(ids.clamp(0, v - 1), table), torch.zeros((), dtype=TD[dt], device="cuda"))
    assert torch.equal(y, ref)

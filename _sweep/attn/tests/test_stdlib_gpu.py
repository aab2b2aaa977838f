"""GPU: tilex.stdlib against PyTorch (and a float64 reference) on random data.

bf16, f16 and f32; odd sizes (1 row, sizes that are not multiples of the block or of 8,
so 16-byte vector accesses fall back at the edges); large rows that take the chunked
paths. Every output the wrappers allocate is poisoned (NaN, or -777 for ints) before the
launch (`_launch.POISON`), so an element a kernel fails to write is caught. Torch tensors
are the main path; CuPy arrays and the interpreter are cross-checked on a few.

Tolerance: max |out - ref| / max |ref| <= TOL[dtype], ref the float64 reference;
torch's own result must be within 3x that bound of it (so the reference is checked too).

Run: pytest -m gpu tests/test_stdlib_gpu.py
"""
from __future__ import annotations

import math

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tilex.stdlib as S  # noqa: E402
from tilex.stdlib import _launch as L  # noqa: E402

TD = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}
DTYPES = ["bf16", "f16", "f32"]


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setattr(L, "POISON", True)
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    yield
    torch.cuda.synchronize()


def rnd(shape, dt, seed, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda", dtype=torch.float32) * scale).to(TD[dt])


def f64(x):
    if isinstance(x, torch.Tensor):
        return x.detach().double().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def rel(out, ref):
    out, ref = f64(out), f64(ref)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert np.isfinite(out).all(), "output has NaN/inf: some element was not written"
    return float(np.max(np.abs(out - ref), initial=0.0) / max(np.max(np.abs(ref), initial=0.0), 1e-30))


def check(out, ref64, torch_out, dt, tol=None):
    tol = TOL[dt] if tol is None else tol
    assert out.dtype == torch_out.dtype and tuple(out.shape) == tuple(torch_out.shape)
    assert rel(out, ref64) <= tol, "tilex vs float64 reference"
    # torch may round intermediates (e.g. F.silu(g) * u in bf16): allow it 3x
    assert rel(torch_out, ref64) <= 3 * tol, "torch vs float64 reference (the reference itself is off?)"


# (1000, 4104), (600, 20000), (4096, 128): programs of the persistent grid walk several rows (steps)
ROW_SHAPES = [(1, 1), (1, 4096), (3, 1000), (7, 4104), (33, 5120), (2, 20000), (4096, 128), (5, 77),
              (1000, 4104), (600, 20000)]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("m,n", ROW_SHAPES)
def test_rms_norm(dt, m, n):
    x, w = rnd((m, n), dt, m * 31 + n), rnd((n,), dt, n + 1)
    y = S.rms_norm(x, w, 1e-6)
    xf = f64(x)
    ref = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + 1e-6) * f64(w)
    check(y, ref, F.rms_norm(x, (n,), w, 1e-6), dt)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("m,n", ROW_SHAPES)
@pytest.mark.parametrize("inplace", [False, True])
def test_fused_add_rms_norm(dt, m, n, inplace):
    x, r, w = rnd((m, n), dt, m + n), rnd((m, n), dt, m + n + 1), rnd((n,), dt, n)
    h_t = x + r
    want = F.rms_norm(h_t, (n,), w, 1e-6)
    hf = f64(h_t)
    ref = hf / np.sqrt((hf * hf).mean(-1, keepdims=True) + 1e-6) * f64(w)
    x0, r0 = x.clone(), r.clone()
    y, h = S.fused_add_rms_norm(x, r, w, 1e-6, inplace=inplace)
    check(y, ref, want, dt)
    assert rel(h, f64(x0) + f64(r0)) <= TOL[dt]
    if inplace:
        assert y.data_ptr() == x.data_ptr() and h.data_ptr() == r.data_ptr()
    else:
        assert torch.equal(x, x0) and torch.equal(r, r0)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("m,n", ROW_SHAPES)
def test_layer_norm(dt, m, n):
    x = rnd((m, n), dt, m * 7 + n, 2.0) + 1.5
    w, b = rnd((n,), dt, n + 3), rnd((n,), dt, n + 4)
    y = S.layer_norm(x, w, b, 1e-5)
    xf = f64(x)
    mu = xf.mean(-1, keepdims=True)
    ref = (xf - mu) / np.sqrt(((xf - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * f64(w) + f64(b)
    check(y, ref, F.layer_norm(x, (n,), w, b, 1e-5), dt)


# The streamed row kernels at launch shapes the wrappers may not pick: R rows per step with rows
# past M in the last step, a few programs walking many rows (both pipeline stages in turn), rows
# whose pitch is not a multiple of 16 bytes (the copy's element-by-element edge path).
@pytest.mark.parametrize("m,n,cfg", [
    (37, 1000, dict(BLOCK=1024, R=2, WARPS=8, MIN_BLOCKS=2, PROGRAMS=3)),
    (301, 4104, dict(BLOCK=8192, R=1, WARPS=16, MIN_BLOCKS=2, PROGRAMS=7)),
    (130, 96, dict(BLOCK=128, R=8, WARPS=4, PROGRAMS=5)),
    (9, 20001, dict(BLOCK=2048, ONE_PASS=False, WARPS=8, PROGRAMS=4)),
])
def test_row_kernels_streamed(m, n, cfg):
    dt = "bf16"
    x, r, w, b = rnd((m, n), dt, m), rnd((m, n), dt, m + 1), rnd((n,), dt, n), rnd((n,), dt, n + 1)
    xf, hf = f64(x), f64(x + r)
    ms = lambda a: (a * a).mean(-1, keepdims=True)
    mu = xf.mean(-1, keepdims=True)
    refs = {"rms_norm": xf / np.sqrt(ms(xf) + 1e-6) * f64(w),
            "layer_norm": (xf - mu) / np.sqrt(ms(xf - mu) + 1e-5) * f64(w) + f64(b),
            "softmax": np.exp(xf - xf.max(-1, keepdims=True)) / np.exp(xf - xf.max(-1, keepdims=True)).sum(-1, keepdims=True),
            "fused_add_rms_norm": hf / np.sqrt(ms(hf) + 1e-6) * f64(w)}
    args = {"rms_norm": (x, w), "layer_norm": (x, w, b), "softmax": (x,), "fused_add_rms_norm": (x, r, w)}
    for name, ref in refs.items():
        outs = [torch.full_like(x, float("nan")) for _ in range(2 if name == "fused_add_rms_norm" else 1)]
        L.run(L.load(name, kernel=name, T=dt, **cfg), name, *args[name], *outs)
        assert rel(outs[0], ref) <= TOL[dt], name
        if len(outs) == 2:
            assert torch.equal(outs[1], x + r), name


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(1, 2), (3, 2 * 1001), (64, 2 * 14336), (300, 2 * 64), (2, 3, 2 * 100)])
def test_silu_gelu_and_mul(dt, shape):
    x = rnd(shape, dt, sum(shape), 2.0)
    d = shape[-1] // 2
    g, u = f64(x[..., :d]), f64(x[..., d:])
    ref = g / (1 + np.exp(-g)) * u
    check(S.silu_and_mul(x), ref, F.silu(x[..., :d]) * x[..., d:], dt)
    for approx in ("none", "tanh"):
        gt = torch.from_numpy(g)
        ref = (F.gelu(gt, approximate=approx).numpy()) * u
        check(S.gelu_and_mul(x, approximate=approx), ref, F.gelu(x[..., :d], approximate=approx) * x[..., d:], dt)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape,dim", [((1, 1), -1), ((3, 1000), -1), ((8, 32000), -1), ((2, 70000), -1),
                                       ((1000, 33), -1), ((4, 5, 6), 1)])
def test_softmax(dt, shape, dim):
    x = rnd(shape, dt, sum(shape), 3.0)
    xf = f64(x)
    e = np.exp(xf - xf.max(dim, keepdims=True))
    check(S.softmax(x, dim), e / e.sum(dim, keepdims=True), torch.softmax(x, dim), dt)


def _rope_torch(x, pos, theta, r):
    """The reference rotation in f32 (as vLLM computes it), returned in x's dtype."""
    half = r // 2
    inv = 1.0 / (theta ** (torch.arange(0, r, 2, device=x.device, dtype=torch.float32) / r))
    ang = pos.float()[:, None] * inv[None, :]
    c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
    xf = x.float()
    a, b = xf[..., :half], xf[..., half:r]
    out = xf.clone()
    out[..., :half] = a * c - b * s
    out[..., half:r] = b * c + a * s
    return out.to(x.dtype)


def _rope_ref(x, pos, theta, r):
    x = f64(x).copy()
    half = r // 2
    inv = theta ** (-np.arange(half) * 2.0 / r)
    ang = f64(pos)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :half].copy(), x[..., half:r].copy()
    x[..., :half] = a * c - b * s
    x[..., half:r] = b * c + a * s
    return x


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("s,hq,hk,d,r", [(1, 1, 1, 2, None), (7, 32, 8, 128, None), (300, 28, 4, 128, None),
                                         (5, 12, 12, 80, None), (3, 8, 2, 128, 64), (2, 5, 3, 40, 24)])
@pytest.mark.parametrize("inplace", [False, True])
def test_rope(dt, s, hq, hk, d, r, inplace):
    q, k = rnd((s, hq, d), dt, s + hq), rnd((s, hk, d), dt, s + hk + 1)
    pos = torch.randint(0, 4096, (s,), device="cuda", dtype=torch.int64)
    theta, rr = 500000.0, (d if r is None else r)
    tol = max(TOL[dt], 4e-3)  # f32 angles up to 4096 rad carry ~4096 * 2**-24 rad of rounding
    ref_q, ref_k = _rope_ref(q, pos, theta, rr), _rope_ref(k, pos, theta, rr)
    tq, tk = _rope_torch(q, pos, theta, rr), _rope_torch(k, pos, theta, rr)
    q0 = q.clone()
    qo, ko = S.rope(q, k, pos if s % 2 else pos.int(), theta, rotary_dim=r, inplace=inplace)
    check(qo, ref_q, tq, dt, tol)
    check(ko, ref_k, tk, dt, tol)
    if inplace:
        assert qo.data_ptr() == q.data_ptr()
    else:
        assert torch.equal(q, q0)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("m,k,hq,hkv,d,bias,fused", [
    (1, 5120, 40, 8, 128, True, True),    # Qwen2.5-14B, one decode token
    (16, 4096, 32, 8, 128, False, True),  # Llama-3-8B, batch 16
    (5, 1000, 6, 2, 64, True, True),      # K not a multiple of the K tile
    (64, 520, 4, 4, 256, False, True),    # 64 rows (the split-K limit), D = 256
    (7, 64, 3, 1, 8, True, True),         # HALF = 4
    (3, 256, 4, 2, 96, True, False),      # D / 2 = 48: the unfused calls
])
def test_linear_qkv_rope_cache(dt, m, k, hq, hkv, d, bias, fused, monkeypatch):
    x, nb, bs = rnd((m, k), dt, m + k), 40, 16
    n = (hq + 2 * hkv) * d
    w = rnd((n, k), dt, n, 1 / math.sqrt(k))
    b = rnd((n,), dt, 7) if bias else None
    kc, vc = rnd((nb, bs, hkv, d), dt, 2), rnd((nb, bs, hkv, d), dt, 3)
    pos = torch.randint(0, 4096, (m,), device="cuda", dtype=torch.int32 if m % 2 else torch.int64)
    slots = torch.randperm(nb * bs, device="cuda")[:m].int()
    slots[1::5] = -1
    slots[2::7] = nb * bs + 3  # past the cache: skipped
    theta = 1e6
    # reference: F.linear in f32 rounded to dt (as stored), the rotation in float64
    qkv = F.linear(x.float(), w.float(), None if b is None else b.float()).to(TD[dt])
    q_ref = _rope_ref(qkv[:, :hq * d].reshape(m, hq, d), pos, theta, d)
    k_ref = _rope_ref(qkv[:, hq * d:(hq + hkv) * d].reshape(m, hkv, d), pos, theta, d)
    v_ref = f64(qkv[:, (hq + hkv) * d:].reshape(m, hkv, d))
    want_k, want_v = f64(kc).reshape(nb * bs, hkv, d), f64(vc).reshape(nb * bs, hkv, d)
    keep = (f64(slots) >= 0) & (f64(slots) < nb * bs)
    want_k[f64(slots)[keep].astype(int)] = k_ref[keep]
    want_v[f64(slots)[keep].astype(int)] = v_ref[keep]
    tol = max(2 * TOL[dt], 1e-3)  # two roundings to dt; f32 angles up to 4096 rad (~2.4e-4 rad)
    calls, real = [], L.run
    monkeypatch.setattr(L, "run", lambda mod, kernel, *a, **kw: (calls.append(kernel), real(mod, kernel, *a, **kw))[1])
    q = S.linear_qkv_rope_cache(x, w, hq * d, hkv * d, pos, kc, vc, slots, theta, bias=b)
    assert ("splitk_qkv_rope_cache" in calls) == fused, calls
    assert q.dtype == x.dtype and tuple(q.shape) == (m, hq, d)
    assert rel(q, q_ref) <= tol
    assert rel(kc.reshape(nb * bs, hkv, d), want_k) <= tol
    assert rel(vc.reshape(nb * bs, hkv, d), want_v) <= tol


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("m,k,n", [(1, 5120, 5120), (1, 13824, 5120), (16, 4096, 4096), (5, 1000, 777),
                                   (64, 520, 16384), (3, 12, 30), (80, 256, 512)])
def test_linear_add_rms_norm(dt, m, k, n, monkeypatch):
    x, w = rnd((m, k), dt, m + k), rnd((n, k), dt, n, 1 / math.sqrt(k))
    res, nw = rnd((m, n), dt, 5), rnd((n,), dt, 6)
    p = F.linear(x.float(), w.float()).to(TD[dt])  # stored in dt, as linear does
    h_t = (p.float() + res.float()).to(TD[dt])
    h_ref = f64(h_t)
    y_ref = h_ref / np.sqrt((h_ref * h_ref).mean(-1, keepdims=True) + 1e-5) * f64(nw)
    calls, real = [], L.run
    monkeypatch.setattr(L, "run", lambda mod, kernel, *a, **kw: (calls.append(kernel), real(mod, kernel, *a, **kw))[1])
    y, h = S.linear_add_rms_norm(x, w, res, nw, 1e-5)
    assert ("splitk_add_rms_norm" in calls) == (m <= 64 and k % 8 == 0 and n <= 16384), calls
    tol = 2 * TOL[dt]  # two roundings to dt before the norm
    assert y.dtype == h.dtype == x.dtype and tuple(y.shape) == tuple(h.shape) == (m, n)
    assert rel(h, h_ref) <= tol and rel(y, y_ref) <= tol


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n,v,d", [(1, 1, 1), (7, 1000, 4096), (513, 32000, 77), (3, 10, 8)])
def test_embedding(dt, n, v, d):
    table = rnd((v, d), dt, v + d)
    ids = torch.randint(0, v, (n,), device="cuda")
    assert torch.equal(S.embedding(ids, table), F.embedding(ids, table))
    assert torch.equal(S.embedding(ids.int().view(1, n), table), F.embedding(ids.view(1, n), table))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("s,h,d,nb,bs", [(1, 1, 1, 1, 1), (37, 8, 128, 16, 16), (5, 3, 100, 4, 7)])
def test_kv_cache_write(dt, s, h, d, nb, bs):
    k, v = rnd((s, h, d), dt, s), rnd((s, h, d), dt, s + 1)
    kc, vc = rnd((nb, bs, h, d), dt, 2), rnd((nb, bs, h, d), dt, 3)
    slots = torch.randperm(nb * bs, device="cuda")[:s]
    slots[::4] = -1
    want_k, want_v = kc.clone().view(nb * bs, h, d), vc.clone().view(nb * bs, h, d)
    keep = slots >= 0
    want_k[slots[keep]] = k[keep]
    want_v[slots[keep]] = v[keep]
    S.kv_cache_write(k, v, kc, vc, slots if h % 2 else slots.int())
    assert torch.equal(kc.view(nb * bs, h, d), want_k) and torch.equal(vc.view(nb * bs, h, d), want_v)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("b,v", [(1, 1), (1, 151936), (8, 128256), (600, 32000), (3, 1001)])
def test_argmax(dt, b, v):
    x = rnd((b, v), dt, b + v, 3.0)
    ids = S.argmax(x)
    assert ids.dtype == torch.int64 and tuple(ids.shape) == (b,)
    want = torch.from_numpy(f64(x).argmax(-1)).cuda()  # numpy: the first maximum on ties
    assert torch.equal(ids, want)
    same = torch.argmax(x, -1) == ids
    if not bool(same.all()):  # torch may pick another index only on an exact tie
        rows = (~same).nonzero().flatten()
        assert torch.equal(x[rows, ids[rows]], x[rows].max(-1).values)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("b,v", [(1, 128256), (16, 32000), (5, 77)])
def test_sample_greedy_and_matches_interpreter(dt, b, v):
    x = rnd((b, v), dt, b * v, 3.0)
    want = S.argmax(x)
    assert torch.equal(S.sample(x, 0.0, 0.9, 1), want)
    tiny = S.sample(x, 1.0, 1e-7, 1)  # only the maximum (or the tokens tied with it) remain
    rows = torch.arange(b, device="cuda")
    assert torch.equal(x[rows, tiny], x[rows, want])
    # the same hash in the interpreter: the same tokens (up to exp/log rounding near ties)
    got = S.sample(x, 0.7, 0.9, 42).cpu().numpy()
    xn = x.float().cpu().numpy().astype(L._np_dtype(dt))  # exact: the same values
    if v <= 32000:
        ref = S.sample(xn, 0.7, 0.9, 42)
        assert (got == ref).mean() >= 0.9


def _nucleus(logits, temperature, top_p):
    z = f64(logits) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(p[order])
    k = int(np.searchsorted(cum, top_p * (1 - 1e-6))) + 1
    keep = p >= p[order[k - 1]]
    q = np.where(keep, p, 0)
    return q / q.sum()


@pytest.mark.parametrize("temperature,top_p", [(1.0, 0.8), (0.7, 1.0), (1.3, 0.5)])
def test_sample_distribution(temperature, top_p):
    n, v = 20000, 16
    g = torch.Generator(device="cuda").manual_seed(5)
    logits = torch.randn((1, v), generator=g, device="cuda") * 1.5
    x = logits.expand(n, v).contiguous()
    p = _nucleus(logits[0].cpu().numpy(), temperature, top_p)
    ids = S.sample(x, temperature, top_p, seed=99).cpu().numpy()
    counts = np.bincount(ids, minlength=v)
    assert counts[p == 0].sum() == 0
    keep = p > 0
    exp = n * p[keep]
    chi2 = float(((counts[keep] - exp) ** 2 / exp).sum())
    dof = int(keep.sum()) - 1
    assert chi2 < dof + 6 * math.sqrt(2 * max(dof, 1)) + 10, (chi2, counts, exp)


def test_cupy_and_interpreter_agree():
    import cupy as cp

    rng = np.random.default_rng(3)
    xc = cp.asarray(rng.standard_normal((5, 3000)).astype(np.float16))
    wc = cp.asarray(rng.standard_normal(3000).astype(np.float16))
    yc = S.rms_norm(xc, wc, 1e-6)
    assert isinstance(yc, cp.ndarray)
    yn = S.rms_norm(cp.asnumpy(xc), cp.asnumpy(wc), 1e-6)
    assert rel(cp.asnumpy(yc), yn) <= 2e-3
    ids = S.argmax(cp.asarray(np.random.default_rng(0).standard_normal((4, 5000)).astype(np.float32)))
    assert isinstance(ids, cp.ndarray) and ids.dtype == np.int64


def test_errors():
    x = torch.randn(4, 8, device="cuda")
    with pytest.raises(TypeError, match="cpu"):
        S.rms_norm(x.cpu(), None)
    with pytest.raises(TypeError, match="different kinds"):
        S.rms_norm(x, np.ones(8, np.float32))
    with pytest.raises(TypeError, match="weight: expected dtype f32"):
        S.rms_norm(x, torch.ones(8, device="cuda", dtype=torch.bfloat16))


def test_cuda_graph_capture():
    """The wrappers allocate with torch and launch on torch's current stream: capturable."""
    x, w = rnd((16, 4096), "bf16", 1), rnd((4096,), "bf16", 2)
    gu = rnd((16, 2 * 1024), "bf16", 3)
    for _ in range(2):  # compile and load outside the capture
        S.rms_norm(x, w, 1e-6), S.silu_and_mul(gu), S.argmax(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = S.rms_norm(x, w, 1e-6)
        a = S.silu_and_mul(gu)
        ids = S.argmax(y)
    x.copy_(rnd((16, 4096), "bf16", 9))
    graph.replay()
    torch.cuda.synchronize()
    assert rel(y, F.rms_norm(x, (4096,), w, 1e-6).double().cpu().numpy()) <= 1e-2
    assert torch.equal(ids, S.argmax(S.rms_norm(x, w, 1e-6)))
    assert rel(a, (F.silu(gu[:, :1024].float()) * gu[:, 1024:].float()).double().cpu().numpy()) <= 1e-2

"""The row kernels' launch model (tilex.stdlib.rows) and the paths it picks, on the CPU.

* The model's choices for a table of public decoder sizes (hidden, intermediate, vocabulary; token
  counts 1..32768): which path, threads, blocks per SM, stages, bytes in flight, and the rules the
  module docstring states (no idle tile above IDLE_MAX where a pieces split exists, >= 32 KB in
  flight where the SM budget allows).
* The interpreter against a float64 NumPy reference on fresh random data at the odd sizes of those
  configs: the pieces path (rms_norm_k2, fused_add_rms_norm_k2, layer_norm_k2 at 5120, 1536, 2304,
  2560, 3072), the power-of-two path (896, 3584), the split reductions (softmax and argmax over 1
  and 16 rows of 152064, argmax ties across segments resolving to the lowest index, as torch),
  sample's split path giving the tokens of the one-program kernel for the same seed.
* (marker nvcc) every configuration the model picks for those sizes builds for sm_90a without
  register spills (ptxas -v).

Tolerance: max |out - ref| / max |ref| <= TOL[dtype] (test_stdlib.py's).
"""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import tilex.stdlib as S
from tilex.stdlib import _launch as L
from tilex.stdlib import rows
from tilex.types import DType, numpy_dtype

BF16 = numpy_dtype(DType.BF16)
NP = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16}
TOL = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}

HIDDEN = [896, 1536, 2048, 2304, 2560, 3072, 3584, 4096, 4608, 5120, 6144, 8192]
INTERMEDIATE = [4864, 8960, 11008, 13824, 14336, 18944, 27648, 28672, 29568]
VOCAB = [32000, 128256, 151936, 152064, 256000]
TOKENS = [1, 7, 100, 1000, 4096, 5000, 16384, 32768]


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setattr(L, "POISON", True)


def rnd(rng, shape, dt, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(NP[dt])


def f64(x):
    return np.asarray(x, dtype=np.float64)


def rel(out, ref):
    out, ref = f64(out), f64(ref)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert np.isfinite(out).all(), "output has NaN/inf"
    return float(np.max(np.abs(out - ref)) / max(np.max(np.abs(ref)), 1e-30))


def ref_rms(x, w, eps):
    x = f64(x)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * f64(w)


def ref_ln(x, w, b, eps):
    x = f64(x)
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * f64(w) + f64(b)


def ref_softmax(x):
    x = f64(x)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ----------------------------------------------------------------------------- the model

def test_pieces_table():
    assert rows.pieces(5120) == (1024, 4, 1)
    assert rows.pieces(1536) == (512, 2, 1)
    assert rows.pieces(3072) == (1024, 2, 1)
    assert rows.pieces(6144) == (2048, 2, 1)
    assert rows.pieces(4608) == (512, 8, 1)
    assert rows.pieces(2304) == (256, 8, 1)
    for n in (896, 3584, 7168):  # 12.5% idle at the next power of two: kept
        assert rows.pieces(n) is None
    for n in (2048, 4096, 8192, 20000, 5000, 5121):  # powers of two, too long, not a multiple of 8
        assert rows.pieces(n) is None
    assert rows.pieces(4608, "layer_norm") == (512, 8, 1)  # 72 elements x 5 registers would spill: 36 a thread
    assert rows.pieces_elems(4608, "layer_norm") == 4 and rows.pieces_elems(2304, "layer_norm") == 4
    assert rows.pieces_elems(4608) == 8 and rows.pieces_elems(5120, "layer_norm") == 8
    assert rows.pieces(17 * 256, "layer_norm") is None  # 17 sub-rows x 4 x 5 registers: too many even so
    assert rows.pieces(2 ** 13 * 3 // 2) == (4096, 2, 1)  # 12288: W capped at 4096 (512 threads)


def _prefetch_rules(cfg, m, steps, threads, budget):
    """A PREFETCH grid: persistent, PROGRAMS = 132 x b resident blocks per SM within `budget` threads (b the
    launch bound MIN_BLOCKS, or none on the pieces path), and some program with a second step to prefetch."""
    assert cfg["STAGES"] == 1 and cfg["PREFETCH"] is True
    b = cfg["PROGRAMS"] // 132
    assert cfg["PROGRAMS"] == 132 * b and 1 <= b <= 32 and threads * b <= budget, cfg
    assert cfg["MIN_BLOCKS"] in (0, b)
    assert steps > cfg["PROGRAMS"], (m, cfg)


@pytest.mark.parametrize("kernel", ["rms_norm", "fused_add_rms_norm", "layer_norm"])
def test_plan_rules_over_public_sizes(kernel):
    t = rows.TRAITS[kernel]
    for n in HIDDEN + INTERMEDIATE:
        for m in TOKENS:
            name, cfg = rows.plan(kernel, n, m)
            if name.endswith("_k2"):
                w, k = cfg["W"], cfg["P1"] + cfg["P2"]
                threads = 32 * cfg["WARPS"]
                assert w * k == n and threads == w // rows.pieces_elems(n, kernel)
                ring = rows.plan(kernel, n, 10 ** 6)[1]["PROGRAMS"]  # the persistent grid (m-independent)
                if cfg.get("PREFETCH"):  # persistent, the next row's pieces in registers: registers without spills
                    assert t.prefetch_pieces and not t.registers
                    _prefetch_rules(cfg, m, m, threads, rows.PIECES_THREADS)
                    held = t.prefetch_pieces * k * (w // threads)
                    assert cfg["MIN_BLOCKS"] == 0 and cfg["PROGRAMS"] // 132 * threads * held <= rows.H100.registers

                    continue
                assert cfg["MIN_BLOCKS"] == 0  # a register cap would spill (see the nvcc test)
                # a program per row, loads straight into registers: for kernels that measured best so, and
                # wherever the persistent grid would give each program one step at most
                assert (cfg["STAGES"] == 1) == (t.registers or m <= ring), (n, m, cfg)
                if cfg["STAGES"] == 1:
                    assert cfg["PROGRAMS"] >= m
                    continue
                assert not t.prefetch_pieces  # the ring only where the kernel does not prefetch
                blocks = cfg["PROGRAMS"] // 132
                assert 1 <= blocks <= 32 and blocks * w // 8 <= 2048
                assert blocks * cfg["STAGES"] * n * 2 * t.reads <= rows.H100.smem
            else:
                assert name == kernel
                if cfg["ONE_PASS"]:
                    idle = 1 - n / cfg["BLOCK"]
                    # rows fewer than the SMs keep the power-of-two tile (latency-bound: idle lanes are free)
                    assert idle <= rows.IDLE_MAX or rows.pieces(n, kernel) is None or m < 132
                    assert cfg["BLOCK"] >= n and cfg["BLOCK"] & (cfg["BLOCK"] - 1) == 0
                else:
                    assert n > rows.ONE_PASS_MAX and cfg["BLOCK"] == rows.CHUNK
                if cfg["ONE_PASS"]:
                    ring = L.row_config(n, m, 132, threads_per_sm=t.threads_per_sm, stages=t.stages)
                    one_step = -(-m // ring["R"]) <= ring["PROGRAMS"]
                    if one_step:  # latency-bound: 8 elements a thread, at most 512 threads, no register cap
                        threads = 32 * cfg["WARPS"]
                        assert threads == min(512, cfg["BLOCK"] * cfg["R"] // 8) and cfg["MIN_BLOCKS"] == 0
                        assert cfg["STAGES"] == 1 and cfg["PROGRAMS"] >= m and not cfg.get("PREFETCH")
                        continue
                    short = t.prefetch_short and cfg["BLOCK"] <= 1024
                    per = rows.FEW_ELEMS if short else rows.ELEMS_PER_THREAD
                    waves = -(-m // ring["R"]) / (132 * ring["MIN_BLOCKS"])
                    if cfg.get("PREFETCH"):
                        assert cfg["BLOCK"] * cfg["R"] // (32 * cfg["WARPS"]) == per
                        _prefetch_rules(cfg, m, -(-m // cfg["R"]), 32 * cfg["WARPS"],
                                        rows.SHORT_THREADS if short else rows.PF_THREADS)
                        assert not t.registers or waves <= t.prefetch_waves, (n, m, waves)
                        continue
                    # no PREFETCH: a `registers` kernel past its waves, or no program with a second step
                    assert (t.registers and waves > t.prefetch_waves) or -(-m // cfg["R"]) <= 132 * (
                        (rows.SHORT_THREADS if short else rows.PF_THREADS) // (32 * cfg["WARPS"])), (n, m, cfg)
                    if cfg["STAGES"] == 1:
                        assert t.registers and cfg["PROGRAMS"] >= m
                        continue
            assert 2 <= cfg["STAGES"] <= t.max_stages <= rows.MAX_STAGES


def test_plan_choices_5120_and_friends():
    # the shape: BLOCK 8192 left 37% idle and 20 KB in flight per SM; the pieces now prefetch (rows.py)
    name, cfg = rows.plan("rms_norm", 5120, 4096)
    assert name == "rms_norm_k2"
    assert cfg == dict(W=1024, P1=4, P2=1, WARPS=4, MIN_BLOCKS=0, PROGRAMS=4 * 132, STAGES=1, PREFETCH=True)
    assert "40 KB in flight" in rows.explain("rms_norm", 5120, 4096)
    pf = dict(ONE_PASS=True, STAGES=1, PREFETCH=True)
    # the PREFETCH configurations measured best (sweep_rows.py --misses, H200, 2026-12-02; rows.py's notes)
    assert rows.plan("rms_norm", 8192, 1024) == ("rms_norm", dict(  # 6.65 us, the ring 8.27, compile 6.93
        BLOCK=8192, R=1, WARPS=16, MIN_BLOCKS=2, PROGRAMS=264, **pf))
    assert rows.plan("rms_norm", 2048, 4096) == ("rms_norm", dict(  # 6.15 us, the ring 6.88
        BLOCK=2048, R=1, WARPS=4, MIN_BLOCKS=8, PROGRAMS=1056, **pf))
    assert rows.plan("layer_norm", 3584, 32768) == ("layer_norm", dict(  # 135.4 us, the ring 149.7
        BLOCK=4096, R=1, WARPS=8, MIN_BLOCKS=4, PROGRAMS=528, **pf))
    assert rows.plan("layer_norm", 896, 32768) == ("layer_norm", dict(  # 33.7 us, the ring 44.2, compile 30.4
        BLOCK=1024, R=1, WARPS=4, MIN_BLOCKS=12, PROGRAMS=1584, **pf))
    assert rows.plan("fused_add_rms_norm", 8192, 1024) == ("fused_add_rms_norm", dict(  # 18.47 us vs 20.38
        BLOCK=8192, R=1, WARPS=16, MIN_BLOCKS=2, PROGRAMS=264, **pf))
    assert rows.plan("layer_norm", 2304, 16384) == ("layer_norm_k2", dict(  # 42.1 us, the ring 47.3
        W=256, P1=8, P2=1, WARPS=2, MIN_BLOCKS=0, PROGRAMS=792, STAGES=1, PREFETCH=True))
    # fused_add_rms_norm past prefetch_waves keeps a program per step (16384x4096: 132.5 us, PREFETCH 141.0)
    assert rows.plan("fused_add_rms_norm", 4096, 16384) == (
        "fused_add_rms_norm", dict(L.row_config(4096, 16384), STAGES=1, PROGRAMS=1 << 30))
    assert rows.column_block(14336) == 2048 and rows.column_block(4096) == 2048  # silu_and_mul, embedding
    assert rows.split_segments(4096, 32000, 2048, fill=True, min_chunks=8) == 1  # softmax 4096x32000
    assert rows.split_segments(64, 128256, 2048) == 8  # argmax 64x128256, as before
    # the pieces ring where the PREFETCH grid gives no program a second row (5 ring programs per SM, 6 prefetching)
    assert rows.plan("layer_norm", 2304, 700)[1] == dict(W=256, P1=8, P2=1, WARPS=2, MIN_BLOCKS=0, PROGRAMS=660,
                                                          STAGES=2)
    assert rows.plan("rms_norm", 5120, 4096, sms=100)[1]["PROGRAMS"] == 400


def test_split_segments():
    assert rows.split_segments(1, 152064, 2048) == 75  # one chunk each
    assert rows.split_segments(16, 152064, 2048) == 33  # about 4 programs per SM
    assert rows.split_segments(600, 152064, 2048) == 1
    assert rows.split_segments(200, 152064, 2048, fill=True) == 1  # rows alone fill the SMs
    assert rows.split_segments(200, 152064, 2048) == 2
    assert rows.split_segments(4, 8192, 2048, fill=True, min_chunks=8) == 1
    seg, ns = rows.segment(152064, 2048, 33)
    assert seg % 2048 == 0 and ns * seg >= 152064 > (ns - 1) * seg and ns <= 33


def test_column_block():
    assert [rows.column_block(d) for d in (4864, 5120, 3584, 1536, 14336, 13824, 896, 100, 1)] == \
        [1024, 1024, 512, 512, 2048, 2048, 1024, 128, 8]
    for d in HIDDEN + INTERMEDIATE:
        b = rows.column_block(d)
        pad = (-(-d // b) * b - d) / d
        assert b & (b - 1) == 0 and 8 <= b <= 2048
        # no wider block pads within PAD_MAX, and the one taken is the least padded when none does
        wider = [c for c in (2048, 1024, 512, 256) if b < c <= max(b, rows.next_pow2(d))]
        assert all((-(-d // c) * c - d) / d > rows.PAD_MAX for c in wider), (d, b)
        assert pad <= rows.PAD_MAX or d < 256 or all(
            (-(-d // c) * c - d) / d >= pad for c in (2048, 1024, 512, 256)), (d, b)


def test_column_config():
    # at 132 SMs, the rule the wrappers used before column_config (rows while m >= rows * 2 * 528)
    for d in HIDDEN + INTERMEDIATE:
        for m in (1, 16, 511, 1056, 2112, 4096, 16384):
            b = rows.column_block(d)
            r = 1
            while r < 8 and b * r * 2 <= 2048 and m >= r * 2 * 528:
                r *= 2
            if m * -(-d // b) < 132:  # fewer programs than SMs: the block halves, down to NARROW_MIN
                c = rows.column_config(d, m)
                assert c["BLOCK"] == min(b, rows.NARROW_MIN) or (
                    m * -(-d // c["BLOCK"]) >= 132 and m * -(-d // (2 * c["BLOCK"])) < 132), (d, m, c)
                continue
            assert rows.column_config(d, m) == dict(BLOCK=b, ROWS=r, WARPS=max(1, min(8, b * r // 256)))
            assert rows.column_config(d, m, rows_in_warps=False)["WARPS"] == max(1, min(8, b // 256))
    # rows per program follow the SM count: fewer SMs take rows sooner, more SMs later
    assert rows.column_config(1024, 1056, sms=132)["ROWS"] == 2
    assert rows.column_config(1024, 1056, sms=264)["ROWS"] == 1
    assert rows.column_config(1024, 528, sms=66)["ROWS"] == 2
    for m in (1, 100, 5000):  # every grid keeps COLUMN_WAVES programs per SM once rows are taken
        c = rows.column_config(1024, m, sms=132)
        assert c["ROWS"] == 1 or -(-m // c["ROWS"]) >= rows.COLUMN_WAVES * 132


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("m,d", [(3, 4864), (2, 1536), (5, 3584)])
def test_column_blocked_kernels_at_decoder_sizes(dt, m, d):
    rng = np.random.default_rng(d + m)
    x = rnd(rng, (m, 2 * d), dt)
    g, u = f64(x[:, :d]), f64(x[:, d:])
    assert rel(S.silu_and_mul(x), g / (1 + np.exp(-g)) * u) <= TOL[dt]
    table = rnd(rng, (50, d), dt)
    ids = rng.integers(0, 50, size=(m, 4))
    assert np.array_equal(f64(S.embedding(ids, table)), f64(table)[ids])


# ----------------------------------------------------------------------------- numerics

PIECE_SIZES = [(3, 5120), (5, 1536), (2, 2304), (4, 2560), (3, 3072), (2, 4608)]


@pytest.mark.parametrize("grid", ["decode", "wave"])
@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("m,n", PIECE_SIZES + [(3, 896), (2, 3584), (7, 2304), (5, 4608)])
def test_norms_at_decoder_sizes(dt, m, n, grid, monkeypatch):
    """grid "decode": 132 SMs, so these few rows take the one-step power-of-two path; "wave": one SM,
    so the rows fill it and take the pieces path and the streamed ring (the model's other choices)."""
    if grid == "wave":
        monkeypatch.setattr(L, "sm_count", lambda x: 1)
    rng = np.random.default_rng(n * 7 + m)
    x, r = rnd(rng, (m, n), dt), rnd(rng, (m, n), dt)
    w, b = rnd(rng, (n,), dt), rnd(rng, (n,), dt)
    assert rel(S.rms_norm(x, w, 1e-6), ref_rms(x, w, 1e-6)) <= TOL[dt]
    y, h = S.fused_add_rms_norm(x, r, w, 1e-6)
    h_ref = (f64(x) + f64(r)).astype(NP[dt])
    assert rel(h, f64(x) + f64(r)) <= TOL[dt]
    assert rel(y, ref_rms(h_ref, w, 1e-6)) <= TOL[dt]
    assert rel(S.layer_norm(x, w, b, 1e-5), ref_ln(x, w, b, 1e-5)) <= TOL[dt]
    assert rel(S.layer_norm(x + 3.0, None, None, 1e-5), ref_ln(f64(x) + 3.0, np.ones(1), np.zeros(1), 1e-5)) <= TOL[dt]


# PREFETCH (the persistent path that loads a program's next step into registers during this one): odd row
# counts, programs that take 1, 2 and 3+ steps, the last prefetch past M (masked), R > 1 with a partial last step
PREFETCH_CASES = [(7, 96, 128, 2, 3), (9, 128, 128, 1, 2), (1, 100, 128, 4, 5), (13, 64, 64, 2, 1), (5, 200, 256, 1, 5)]


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("m,n,block,r,progs", PREFETCH_CASES)
def test_prefetch_path_vs_numpy(dt, m, n, block, r, progs):
    rng = np.random.default_rng(m * 31 + n)
    x, res = rnd(rng, (m, n), dt), rnd(rng, (m, n), dt)
    w, b = rnd(rng, (n,), dt), rnd(rng, (n,), dt)
    cfg = dict(T=dt, BLOCK=block, R=r, ONE_PASS=True, WARPS=1, MIN_BLOCKS=0, PROGRAMS=progs, STAGES=1, PREFETCH=True)
    y = L.empty(x, (m, n))
    L.run(L.load("rms_norm", kernel="rms_norm", **cfg), "rms_norm", x, w, y, eps=1e-6)
    assert rel(y, ref_rms(x, w, 1e-6)) <= TOL[dt]
    y, h = L.empty(x, (m, n)), L.empty(x, (m, n))
    L.run(L.load("fused_add_rms_norm", kernel="fused_add_rms_norm", **cfg), "fused_add_rms_norm", x, res, w, y, h,
          eps=1e-6)
    h_ref = (f64(x) + f64(res)).astype(NP[dt])
    assert np.array_equal(f64(h), f64(h_ref))
    assert rel(y, ref_rms(h_ref, w, 1e-6)) <= TOL[dt]
    x3 = (f64(x) + 3.0).astype(NP[dt])  # a mean far from 0: the masked columns must not enter the variance
    y = L.empty(x, (m, n))
    L.run(L.load("layer_norm", kernel="layer_norm", EXACT=block == n, **cfg), "layer_norm", x3, w, b, y, eps=1e-5)
    assert rel(y, ref_ln(x3, w, b, 1e-5)) <= TOL[dt]


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("m,w,p1,p2,progs", [(5, 16, 2, 1, 2), (3, 8, 4, 1, 5), (7, 16, 4, 2, 3), (4, 32, 8, 1, 1)])
def test_pieces_prefetch_vs_numpy(dt, m, w, p1, p2, progs):
    k = p1 + p2
    n = w * k
    rng = np.random.default_rng(m * 17 + n)
    x = (f64(rnd(rng, (m, n), dt)) + 2.0).astype(NP[dt])
    wt, b = rnd(rng, (n,), dt), rnd(rng, (n,), dt)
    cfg = dict(T=dt, W=w, P1=p1, P2=p2, WARPS=1, MIN_BLOCKS=0, PROGRAMS=progs, STAGES=1, PREFETCH=True)
    y = L.empty(x, (m, n))
    L.run(L.load("rms_norm", kernel="rms_norm_k2", **cfg), "rms_norm_k2", x.reshape(m * k, w), wt.reshape(k, w),
          y.reshape(m * k, w), eps=1e-6)
    assert rel(y, ref_rms(x, wt, 1e-6)) <= TOL[dt]
    y = L.empty(x, (m, n))
    L.run(L.load("layer_norm", kernel="layer_norm_k2", **cfg), "layer_norm_k2", x.reshape(m * k, w),
          wt.reshape(k, w), b.reshape(k, w), y.reshape(m * k, w), eps=1e-5)
    assert rel(y, ref_ln(x, wt, b, 1e-5)) <= TOL[dt]


def test_pieces_at_four_elements_a_thread_stream_on_one_sm():
    """(7, 2304) and (5, 4608) above, on one SM, run layer_norm_k2 at W / 4 threads, persistent, prefetching."""
    assert rows.plan("layer_norm", 2304, 7, sms=1) == ("layer_norm_k2", dict(
        W=256, P1=8, P2=1, WARPS=2, MIN_BLOCKS=0, PROGRAMS=6, STAGES=1, PREFETCH=True))
    assert rows.plan("layer_norm", 4608, 5, sms=1)[1]["PROGRAMS"] == 3  # 3 programs over 5 rows


def test_pieces_kernels_are_the_ones_run(monkeypatch):
    """The wrappers really launch the _k2 kernels at 5120 once the rows fill the SMs (one SM here, so
    the tests above with GRID "wave" cover them), the power-of-two kernel below that."""
    monkeypatch.setattr(L, "sm_count", lambda x: 1)
    seen = []
    real = L.run
    monkeypatch.setattr(L, "run", lambda mod, kernel, *a, **k: (seen.append(kernel), real(mod, kernel, *a, **k)))
    rng = np.random.default_rng(5)
    x = rnd(rng, (2, 5120), "f32")
    S.rms_norm(x)
    S.fused_add_rms_norm(x, x)
    S.fused_add_rms_norm(x.copy(), x.copy(), inplace=True)
    S.layer_norm(x)
    S.rms_norm(rnd(rng, (2, 4096), "f32"))
    monkeypatch.setattr(L, "sm_count", lambda x: 132)
    S.rms_norm(x)
    S.layer_norm(x)
    assert seen == ["rms_norm_k2", "fused_add_rms_norm_k2", "fused_add_rms_norm_inplace_k2", "layer_norm_k2",
                    "rms_norm", "rms_norm", "layer_norm"]


def test_prefetch_only_for_bf16(monkeypatch):
    """The wrappers launch PREFETCH grids for bf16 only (f16 / f32 spilled under their launch bounds, rows.plan)."""
    monkeypatch.setattr(L, "sm_count", lambda x: 1)
    seen = []
    real = L.load
    monkeypatch.setattr(L, "load", lambda name, **d: (seen.append((name, d.get("T"), d.get("PREFETCH"))),
                                                      real(name, **d))[1])
    rng = np.random.default_rng(3)
    for dt in ("bf16", "f32", "f16"):
        x = rnd(rng, (24, 2048), dt)  # 24 rows on one SM: 3 steps a program of 8 resident blocks
        S.rms_norm(x)
        S.layer_norm(x)
        S.fused_add_rms_norm(x, x)
        S.rms_norm(rnd(rng, (24, 1536), dt))  # the pieces path
    assert all(bool(pf) == (t == "bf16") for _, t, pf in seen), seen
    assert sum(1 for _, t, pf in seen if pf) == 4


def test_pieces_inplace_fused_add_matches():
    rng = np.random.default_rng(9)
    x, r, w = rnd(rng, (3, 5120), "bf16"), rnd(rng, (3, 5120), "bf16"), rnd(rng, (5120,), "bf16")
    y, h = S.fused_add_rms_norm(x, r, w)
    xi, ri = x.copy(), r.copy()
    assert S.fused_add_rms_norm(xi, ri, w, inplace=True)[0] is xi
    assert np.array_equal(f64(ri), f64(h))  # the same f32 operations in both kernels
    assert np.array_equal(f64(xi), f64(y))


@pytest.mark.parametrize("m", [1, 16])
def test_softmax_split_vocab(m):
    rng = np.random.default_rng(m)
    x = rnd(rng, (m, 152064), "f32", 4.0)
    x[0, 100:50000] = -np.inf  # whole segments of -inf
    assert rows.split_segments(m, 152064, 2048, fill=True, min_chunks=8) > 1
    assert rel(S.softmax(x), ref_softmax(x)) <= TOL["f32"]
    xb = x.astype(BF16)
    assert rel(S.softmax(xb), ref_softmax(xb)) <= TOL["bf16"]


@pytest.mark.parametrize("m", [1, 16])
def test_argmax_split_ties(m):
    rng = np.random.default_rng(100 + m)
    x = rnd(rng, (m, 152064), "bf16")
    top = float(np.max(f64(x))) + 1.0
    for row in range(m):  # the maximum at three places, in different segments: the first wins
        cols = sorted(rng.choice(152064, 3, replace=False))
        x[row, cols] = top
    got = S.argmax(x)
    assert np.array_equal(got, np.argmax(f64(x), -1))
    x[0, :] = -np.inf
    assert S.argmax(x)[0] == 0


def test_sample_split_same_tokens_as_one_program():
    rng = np.random.default_rng(3)
    for b, v in [(1, 152064), (4, 10000), (3, 129 * 1024 + 5)]:
        x = rnd(rng, (b, v), "f32", 2.0)
        assert rows.split_segments(b, v, 1024, fill=True, min_chunks=8) > 1
        for seed in (0, 7, 2 ** 31 - 1):
            got = S.sample(x, temperature=0.8, seed=seed)
            ids = np.empty(b, np.int64)
            mod = L.load("sample", kernel="sample", T="f32", BLOCK=1024, WARPS=8)
            L.run(mod, "sample", x, ids, inv_temp=1 / 0.8, top_p=1.0, seed=seed)
            assert np.array_equal(got, ids), (b, v, seed)


# ----------------------------------------------------------------------------- nvcc

def _chosen():
    """The pieces configurations the model picks for HIDDEN, the PREFETCH ones, and the power-of-two ones whose
    ring it deepened past the measured depth (the others are the measured configurations test_stdlib.py builds);
    PROGRAMS (host side only) is not part of the key."""
    out = {}
    for kernel in ("rms_norm", "fused_add_rms_norm", "layer_norm"):
        for n in HIDDEN:
            for m in (1, 1024, 4096, 32768):
                name, cfg = rows.plan(kernel, n, m)
                if kernel == "fused_add_rms_norm" and not cfg.get("PREFETCH"):  # registers, no ring (test_stdlib.py)
                    if name == kernel:
                        continue
                    inplace = {k: cfg[k] for k in ("W", "P1", "P2", "WARPS")}
                    out["inplace-" + "-".join(f"{k}{v}" for k, v in inplace.items())] = (
                        kernel, "fused_add_rms_norm_inplace_k2", inplace)
                elif name == kernel and cfg["STAGES"] == rows.TRAITS[kernel].stages and not cfg.get("PREFETCH"):
                    continue
                if kernel == "layer_norm" and name == kernel:
                    cfg["EXACT"] = cfg["BLOCK"] == n
                out[f"{name}-" + "-".join(f"{k}{v}" for k, v in cfg.items() if k != "PROGRAMS")] = (kernel, name, cfg)
    return sorted(out.items())


def _ptxas(file, kernel, cfg, tmp_path, dt="bf16"):
    from tilex.pipeline import Options
    from tilex.translate import translate

    src = L.source(file)
    cu = translate(src, f"{file}.tile", Options(defines={"T": dt, **cfg}, kernel=kernel, arch="sm_90a")).cuda
    path = tmp_path / f"k{abs(hash(tuple(cfg.items())))}.cu"
    path.write_text(cu)
    r = subprocess.run(["nvcc", "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v", str(path),
                        "-o", str(path.with_suffix(".cubin"))], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", r.stderr)]
    regs = [int(s) for s in re.findall(r"Used (\d+) registers", r.stderr)]
    assert spills and regs, r.stderr[-2000:]
    return max(spills), max(regs), r.stderr


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("vid,spec", _chosen(), ids=[v for v, _ in _chosen()])
def test_chosen_configs_build_without_spills(vid, spec, tmp_path):
    file, kernel, cfg = spec
    spills, regs, log = _ptxas(file, kernel, cfg, tmp_path)
    if cfg.get("PREFETCH"):  # no spills, and the MIN_BLOCKS resident blocks the grid counts on fit the registers
        assert spills == 0, log[-2000:]
        blocks = cfg["MIN_BLOCKS"] or cfg["PROGRAMS"] // 132
        assert -(-regs // 8) * 8 * 32 * cfg["WARPS"] * blocks <= rows.H100.registers, (regs, cfg)
    elif kernel == "fused_add_rms_norm_inplace_k2":
        assert spills == 0, log[-2000:]
    elif kernel.endswith("_k2"):
        assert spills == 0, log[-2000:]
        # the register count the model assumed for blocks per SM holds (within 8)
        k = cfg["P1"] + cfg["P2"]
        assert regs <= int(rows.TRAITS[file].regs_per_elem * 8 * k + 0.5) + 8, (regs, k)
    else:  # a deeper ring than measured: no more spills than the measured depth has
        base, _, _ = _ptxas(file, kernel, dict(cfg, STAGES=rows.TRAITS[file].stages), tmp_path)
        assert spills <= base, (spills, base)


def _wide_dtype_pieces():
    """The pieces configurations the model picks at 5120 (f16 and f32) and the heaviest ones (K = 9:
    f16, which took the most registers in ptxas)."""
    out = {}
    for _, (file, kernel, cfg) in _chosen():
        if cfg.get("PREFETCH"):  # bf16 only: f16 and f32 keep the ring (rows.plan(prefetch=False))
            continue
        k = cfg["P1"] + cfg["P2"] if kernel.endswith("_k2") else 0
        if k == 9 or (k == 5 and cfg["W"] == 1024):
            key = "-".join(f"{p}{v}" for p, v in cfg.items() if p != "PROGRAMS")  # PROGRAMS: host side only
            for dt in ("f16",) if k == 9 else ("f16", "f32"):
                out[f"{dt}-{kernel}-{key}"] = (dt, file, kernel, cfg)
    return sorted(out.items())


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("vid,spec", _wide_dtype_pieces(), ids=[v for v, _ in _wide_dtype_pieces()])
def test_pieces_configs_build_without_spills_f16_f32(vid, spec, tmp_path, monkeypatch):
    """f16 and f32 take more registers than bf16 (fused_add_rms_norm_k2 at K = 9: 246), still no spills."""
    dt, file, kernel, cfg = spec
    spills, regs, log = _ptxas(file, kernel, cfg, tmp_path, dt)
    assert spills == 0 and regs <= 255, log[-2000:]


# ----------------------------------------------------------------------------- decode-sized launches

def ref_rope(x, pos, theta):
    x = f64(x).copy()
    half = x.shape[-1] // 2
    ang = f64(pos)[:, None] * theta ** (-np.arange(half) * 2.0 / x.shape[-1])[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :half].copy(), x[..., half:].copy()
    x[..., :half], x[..., half:] = a * c - b * s, b * c + a * s
    return x


def test_rope_plan():
    """Fewer tokens than SMs: a program per (token, head block); else a program per token."""
    from tilex.stdlib.rope import HEADS_BLOCK, rope_plan

    name, cfg = rope_plan(1, 32, 8, 64, 132)
    assert name == "rope_heads" and cfg["HB"] == HEADS_BLOCK and cfg["HALFB"] == 64
    assert 32 * cfg["WARPS"] <= cfg["HB"] * cfg["HALFB"] // 8  # >= 8 elements (16 bytes) per thread per half
    assert rope_plan(131, 28, 4, 64, 132)[0] == "rope_heads"
    assert rope_plan(132, 28, 4, 64, 132) == ("rope", dict(HB=8, HALFB=64, WARPS=1))  # few tokens: 512-element steps
    assert rope_plan(16384, 28, 4, 64, 132) == ("rope", dict(HB=4, HALFB=64, WARPS=1))  # many: 256 (measured)
    assert rope_plan(16384, 14, 2, 32, 132) == ("rope", dict(HB=8, HALFB=32, WARPS=1))
    assert rope_plan(16384, 16, 8, 128, 132) == ("rope", dict(HB=2, HALFB=128, WARPS=1))  # D=256
    assert rope_plan(16, 8, 4, 128, 132) == ("rope_heads", dict(HB=HEADS_BLOCK, HALFB=128,
                                                                WARPS=max(1, HEADS_BLOCK * 128 // 256)))
    assert rope_plan(1, 1, 1, 1, 132)[1]["HB"] == 1  # never more heads per block than the tensor has


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("s,hq,hk,d", [(1, 32, 8, 128), (3, 5, 3, 80), (2, 1, 1, 2), (4, 8, 4, 256)])
@pytest.mark.parametrize("kernel", ["rope", "rope_heads"])
def test_rope_kernels_vs_numpy(dt, s, hq, hk, d, kernel):
    """Both full-rotary kernels (the wrapper picks one by the token count) at odd head counts and sizes,
    out of place and in place, in the interpreter against float64."""
    rng = np.random.default_rng(s * 1000 + hq * 10 + d)
    q, k = rnd(rng, (s, hq, d), dt), rnd(rng, (s, hk, d), dt)
    pos = rng.integers(0, 500, s).astype(np.int64)
    theta, half = 10000.0, d // 2
    nlog2 = -2.0 * np.log2(theta) / d
    for hb in (1, 4):
        cfg = dict(T=dt, I="i64", HB=hb, HALFB=L.next_pow2(half), WARPS=1)
        q4, k4 = q.reshape(s, hq, 2, half), k.reshape(s, hk, 2, half)
        qo, ko = np.empty_like(q4), np.empty_like(k4)
        L.run(L.load("rope", kernel=kernel, **cfg), kernel, q4, k4, pos, qo, ko, nlog2=nlog2)
        tol = max(TOL[dt], 1e-4)  # f32: angles up to 500 rad carry ~3e-5 of rounding
        assert rel(qo.reshape(q.shape), ref_rope(q, pos, theta)) <= tol
        assert rel(ko.reshape(k.shape), ref_rope(k, pos, theta)) <= tol
        q2, k2 = q4.copy(), k4.copy()
        L.run(L.load("rope", kernel=kernel + "_inplace", **cfg), kernel + "_inplace", q2, k2, pos, nlog2=nlog2)
        assert np.array_equal(f64(q2), f64(qo)) and np.array_equal(f64(k2), f64(ko))


def test_rope_wrapper_picks_heads_kernel_for_few_tokens(monkeypatch):
    seen = []
    real = L.run
    monkeypatch.setattr(L, "run", lambda mod, kernel, *a, **kw: (seen.append(kernel), real(mod, kernel, *a, **kw)))
    rng = np.random.default_rng(1)
    for s in (1, 140):
        q, k = rnd(rng, (s, 4, 16), "f32"), rnd(rng, (s, 2, 16), "f32")
        pos = rng.integers(0, 100, s)
        qo, ko = S.rope(q, k, pos)
        assert rel(qo, ref_rope(q, pos, 10000.0)) <= 1e-4 and rel(ko, ref_rope(k, pos, 10000.0)) <= 1e-4
        S.rope(q, k, pos, inplace=True)
    assert seen == ["rope_heads", "rope_heads_inplace", "rope", "rope_inplace"]


# ----------------------------------------------------------------------------- measured choices

def _measured():
    import json
    from pathlib import Path

    return json.loads((Path(__file__).parent / "data" / "sweep_rows_misses_h200.json").read_text())["cases"]


def _label(kernel: str, cfg: dict) -> str:
    """The sweep's label (benchmarks/sweep_rows.py row_candidates) of a one-pass configuration."""
    if kernel.endswith("_k2"):
        tag = f"k2 W{cfg['W']}({cfg['P1']}+{cfg['P2']}) W{cfg['WARPS']}"
    else:
        tag = f"pow2 B{cfg['BLOCK']} R{cfg['R']} W{cfg['WARPS']}"
    where = "all" if cfg["PROGRAMS"] >= 1 << 30 else f"{cfg['PROGRAMS'] // 132}/SM"
    return f"{tag} {where} S{cfg['STAGES']}"


@pytest.mark.parametrize("case", [c for c in _measured() if c["family"] in ("rms_norm", "fused_add_rms_norm")
                                  and c["sizes"]["T"] <= 100], ids=lambda c: f"{c['family']}-{c['sizes']}")
def test_decode_norm_choices_are_the_measured_best(case):
    """At 1-100 rows the model's configuration is the fastest candidate measured on the H200 (within 3%),
    and at or above torch.compile."""
    s = case["sizes"]
    name, cfg = rows.plan(case["family"], s["N"], s["T"])
    us = case["candidates"][_label(name, cfg)]
    assert us <= 1.03 * min(case["candidates"].values()), (name, cfg, us)
    assert us <= case["baselines_us"]["compile"] * 1.01, (us, case["baselines_us"])


@pytest.mark.parametrize("case", [c for c in _measured() if c["family"] == "rope"],
                         ids=lambda c: f"rope-{c['sizes']}")
def test_decode_rope_choice_measured(case):
    """rope_plan's pick at the measured decode shapes: within 7% of the fastest candidate, >= 1.2x compile."""
    from tilex.stdlib.rope import rope_plan

    s = case["sizes"]
    name, cfg = rope_plan(s["T"], s["Hq"], s["Hkv"], s["D"] // 2, 132)
    us = case["candidates"][f"{name} HB{cfg['HB']} W{cfg['WARPS']}"]
    assert us <= 1.07 * min(case["candidates"].values())
    assert case["baselines_us"]["compile"] >= 1.2 * us


def _measured_prefill_rope():
    import json
    from pathlib import Path

    return json.loads((Path(__file__).parent / "data" / "sweep_rope_prefill_h200.json").read_text())["cases"]


@pytest.mark.parametrize("case", _measured_prefill_rope(), ids=lambda c: f"rope-{c['sizes']}")
def test_prefill_rope_choice_measured(case):
    """rope_plan's pick at the measured prefill shapes (H200, 2026-12-03): within 3% of the fastest of the
    30-38 candidates timed (rope / rope_heads / rope_token over HB and WARPS)."""
    from tilex.stdlib.rope import rope_plan

    s = case["sizes"]
    name, cfg = rope_plan(s["T"], s["Hq"], s["Hkv"], s["D"] // 2, 132)
    us = case["candidates"][f"{name} HB{cfg['HB']} W{cfg['WARPS']}"]
    assert us <= 1.03 * min(case["candidates"].values()), (name, cfg, us)


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("s,v,d,block,r", [(7, 50, 40, 32, 2), (5, 9, 64, 64, 4), (1, 20, 24, 32, 8), (9, 30, 100, 64, 4)])
def test_embedding_tile_vs_numpy(dt, s, v, d, block, r):
    """embedding_tile (ROWS tokens a program as one gather): ids past S store nothing, ids outside [0, V) give
    zeros, a partial last column block."""
    rng = np.random.default_rng(s * 13 + d)
    ids = rng.integers(-3, v + 3, s).astype(np.int64)
    table = rnd(rng, (v, d), dt)
    y = L.empty(table, (s, d))
    L.run(L.load("embedding", kernel="embedding_tile", T=dt, I="i64", BLOCK=block, ROWS=r, WARPS=1),
          "embedding_tile", ids, table, y)
    ref = np.where(((ids >= 0) & (ids < v))[:, None], f64(table)[np.clip(ids, 0, v - 1)], 0.0)
    assert np.array_equal(f64(y), ref)

"""Decode-step fusions (tilex.stdlib.linear_qkv_rope_cache) in the interpreter, against
NumPy float64 references and against the unfused calls they replace."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import tilex.stdlib as S
from tilex.stdlib import _launch as L
from tilex.stdlib import fused as F

LIN = importlib.import_module("tilex.stdlib.linear")  # the module (tilex.stdlib.linear is also the function)

from test_stdlib import DTYPES, TOL, f64, ref_rope, rel, rnd


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setattr(L, "POISON", True)


def _case(rng, dt, m, k, hq, hkv, d, nb, bs, bias, idt=np.int64):
    x = rnd(rng, (m, k), dt)
    n = (hq + 2 * hkv) * d
    w = rnd(rng, (n, k), dt, 1 / np.sqrt(k))
    b = rnd(rng, (n,), dt) if bias else None
    kc, vc = rnd(rng, (nb, bs, hkv, d), dt), rnd(rng, (nb, bs, hkv, d), dt)
    pos = rng.integers(0, 2000, m).astype(idt)
    slots = rng.permutation(nb * bs)[:m].astype(idt)
    if m > 2:
        slots[1] = -1  # a padding row: nothing written
    return x, w, b, kc, vc, pos, slots


def _reference(x, w, b, kc, vc, pos, slots, hq, hkv, d, theta, dt):
    """float64: the projections (rounded to dt, as linear stores them), RoPE, the cache rows."""
    qkv = f64(x) @ f64(w).T + (0.0 if b is None else f64(b))
    qkv = f64(qkv.astype(np.float32).astype(x.dtype))
    m = x.shape[0]
    q = ref_rope(qkv[:, :hq * d].reshape(m, hq, d), pos, theta, d)
    k = ref_rope(qkv[:, hq * d:(hq + hkv) * d].reshape(m, hkv, d), pos, theta, d)
    v = qkv[:, (hq + hkv) * d:].reshape(m, hkv, d)
    want_k, want_v = f64(kc).copy(), f64(vc).copy()
    bs = kc.shape[1]
    for t, sl in enumerate(slots):
        if sl >= 0:
            want_k[sl // bs, sl % bs], want_v[sl // bs, sl % bs] = k[t], v[t]
    return q, want_k, want_v


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("m,k,hq,hkv,d,bias", [
    (1, 64, 4, 2, 16, True),      # one decode token, GQA, with bias (Qwen)
    (3, 136, 6, 2, 32, False),    # odd rows, K not a multiple of the K tile, no bias (Llama)
    (5, 40, 2, 1, 8, True),       # HALF = 4
    (2, 48, 3, 3, 12, True),      # D / 2 = 6 is not a power of two: the unfused calls
])
def test_linear_qkv_rope_cache(dt, m, k, hq, hkv, d, bias):
    rng = np.random.default_rng(hash((dt, m, k, hq, hkv, d, bias)) % 2**32)
    theta = 10000.0
    x, w, b, kc, vc, pos, slots = _case(rng, dt, m, k, hq, hkv, d, nb=7, bs=4, bias=bias)
    q_ref, k_ref, v_ref = _reference(x, w, b, kc, vc, pos, slots, hq, hkv, d, theta, dt)
    q = S.linear_qkv_rope_cache(x, w, hq * d, hkv * d, pos, kc, vc, slots, theta, bias=b)
    assert q.shape == (m, hq, d) and q.dtype == x.dtype
    # two roundings to dt (the projection, then the rotation); f32: angles up to 2000 rad are
    # computed in f32 (as in rope.tile), ~1e-4 of rounding
    tol = max(2 * TOL[dt], 3e-4)
    assert rel(q, q_ref) <= tol
    assert rel(kc, k_ref) <= tol and rel(vc, v_ref) <= tol
    # rows with a negative slot left the caches as they were (checked inside rel above too)
    unwritten = np.ones((7 * 4,), bool)
    unwritten[slots[slots >= 0]] = False
    blk, off = np.nonzero(unwritten.reshape(7, 4))
    np.testing.assert_array_equal(f64(kc)[blk, off], k_ref[blk, off])


def test_fused_matches_unfused_calls():
    """The fused kernels and linear + rope + kv_cache_write give the same bf16 values, bit for
    bit here (the K sums differ in order only; a missing rounding step changes dozens)."""
    rng = np.random.default_rng(5)
    hq, hkv, d, theta = 4, 2, 16, 1e6
    x, w, b, kc, vc, pos, slots = _case(rng, "bf16", 2, 256, hq, hkv, d, nb=5, bs=4, bias=True, idt=np.int32)
    kc2, vc2 = kc.copy(), vc.copy()
    q = S.linear_qkv_rope_cache(x, w, hq * d, hkv * d, pos, kc, vc, slots, theta, bias=b)
    qkv = S.linear(x, w, b)
    q2, k2 = S.rope(np.ascontiguousarray(qkv[:, :hq * d]).reshape(2, hq, d),
                    np.ascontiguousarray(qkv[:, hq * d:(hq + hkv) * d]).reshape(2, hkv, d), pos, theta)
    S.kv_cache_write(k2, np.ascontiguousarray(qkv[:, (hq + hkv) * d:]).reshape(2, hkv, d), kc2, vc2, slots)
    np.testing.assert_array_equal(q, q2)
    np.testing.assert_array_equal(kc, kc2)
    np.testing.assert_array_equal(vc, vc2)


def test_mixed_index_dtypes_and_edge_slots():
    """int64 positions with int32 slots (and the reverse) stay on the fused path; a slot past
    the cache and a negative one are skipped."""
    rng = np.random.default_rng(9)
    for idt, sdt in ((np.int64, np.int32), (np.int32, np.int64)):
        x, w, b, kc, vc, pos, slots = _case(rng, "f32", 4, 64, 2, 1, 8, nb=3, bs=2, bias=True, idt=idt)
        slots = slots.astype(sdt)
        slots[2] = 3 * 2 + 5  # beyond the cache: skipped
        q_ref, k_ref, v_ref = _reference(x, w, b, kc, vc, pos, np.where(slots >= 6, -1, slots), 2, 1, 8, 1e4, "f32")
        calls, real = [], L.run
        try:
            L.run = lambda mod, kernel, *a, **kw: (calls.append(kernel), real(mod, kernel, *a, **kw))[1]
            q = S.linear_qkv_rope_cache(x, w, 16, 8, pos, kc, vc, slots, 1e4, bias=b)
        finally:
            L.run = real
        assert calls == ["linear_splitk", "splitk_qkv_rope_cache"]
        assert rel(q, q_ref) <= 3e-4 and rel(kc, k_ref) <= 3e-4 and rel(vc, v_ref) <= 3e-4


def test_fused_path_taken_and_split():
    """The two-kernel path runs for decode shapes (several K shares here), not the fallback."""
    assert LIN._splits(1, 96, 1024) > 1  # on the interpreter: split-K
    rng = np.random.default_rng(6)
    x, w, b, kc, vc, pos, slots = _case(rng, "f32", 1, 1024, 2, 2, 16, nb=3, bs=2, bias=False)
    calls = []
    real = L.run
    try:
        L.run = lambda mod, kernel, *a, **kw: (calls.append(kernel), real(mod, kernel, *a, **kw))[1]
        q = S.linear_qkv_rope_cache(x, w, 32, 32, pos, kc, vc, slots)
    finally:
        L.run = real
    assert calls == ["linear_splitk", "splitk_qkv_rope_cache"]
    q_ref, k_ref, _ = _reference(x, w, None, kc, vc, pos, slots, 2, 2, 16, 10000.0, "f32")
    assert rel(q, q_ref) <= 3e-4 and rel(kc, k_ref) <= 3e-4


@pytest.mark.parametrize("bad, match", [
    (dict(q_size=30, weight=np.zeros((62, 32), np.float32)), "whole heads"),
    (dict(kv_size=8, weight=np.zeros((48, 32), np.float32)), "whole heads"),
    (dict(weight=np.zeros((60, 32), np.float32)), r"weight: expected shape \(64, 32\)"),
    (dict(positions=np.zeros(3, np.int64)), r"positions: expected shape \(1,\)"),
    (dict(slot_mapping=np.zeros(1, np.float32)), "slot_mapping: expected an integer tensor"),
    (dict(theta=0.0), "theta"),
])
def test_linear_qkv_rope_cache_errors(bad, match):
    rng = np.random.default_rng(7)
    x, w, b, kc, vc, pos, slots = _case(rng, "f32", 1, 32, 2, 1, 16, nb=2, bs=2, bias=False)
    args = dict(x=x, weight=w, q_size=32, kv_size=16, positions=pos, k_cache=kc, v_cache=vc,
                slot_mapping=slots, theta=1e4)
    args.update(bad)
    with pytest.raises((ValueError, TypeError), match=match):
        S.linear_qkv_rope_cache(**args)


# ------------------------------------------------------------------ linear_add_rms_norm

def _ref_add_norm(x, w, res, nw, eps):
    p = f64((f64(x) @ f64(w).T).astype(np.float32).astype(x.dtype))  # linear's stored output
    h = f64((p + f64(res)).astype(np.float32).astype(x.dtype))        # rounded as stored
    y = h / np.sqrt((h * h).mean(-1, keepdims=True) + eps) * (1.0 if nw is None else f64(nw))
    return y, h


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("m,k,n,norm", [
    (1, 64, 40, True),      # one decode token
    (3, 136, 1000, True),   # odd sizes, K not a multiple of the K tile
    (5, 1024, 513, False),  # several K shares; no norm weight
    (2, 12, 30, True),      # in % 8 != 0: linear + fused_add_rms_norm
    (70, 64, 24, True),     # more than 64 rows: the two calls
])
def test_linear_add_rms_norm(dt, m, k, n, norm):
    rng = np.random.default_rng(hash((dt, m, k, n, norm)) % 2**32)
    x, w = rnd(rng, (m, k), dt), rnd(rng, (n, k), dt, 1 / np.sqrt(k))
    res, nw = rnd(rng, (m, n), dt), (rnd(rng, (n,), dt) if norm else None)
    y, h = S.linear_add_rms_norm(x, w, res, nw, 1e-5)
    y_ref, h_ref = _ref_add_norm(x, w, res, nw, 1e-5)
    assert y.shape == h.shape == (m, n) and y.dtype == h.dtype == x.dtype
    tol = 2 * TOL[dt]  # two roundings to dt before the norm
    assert rel(h, h_ref) <= tol and rel(y, y_ref) <= tol


def test_linear_add_rms_norm_path():
    """Decode shapes take linear_splitk + splitk_add_rms_norm (K split in several shares here)."""
    assert LIN._splits(2, 96, 1024) > 1
    rng = np.random.default_rng(8)
    x, w, res, nw = (rnd(rng, s, "f32") for s in ((2, 1024), (96, 1024), (2, 96), (96,)))
    calls, real = [], L.run
    try:
        L.run = lambda mod, kernel, *a, **kw: (calls.append(kernel), real(mod, kernel, *a, **kw))[1]
        y, h = S.linear_add_rms_norm(x, w, res, nw)
    finally:
        L.run = real
    assert calls == ["linear_splitk", "splitk_add_rms_norm"]
    y_ref, h_ref = _ref_add_norm(x, w, res, nw, 1e-6)
    assert rel(y, y_ref) <= 1e-5 and rel(h, h_ref) <= 1e-5


def test_linear_add_rms_norm_matches_unfused_calls():
    """Bit for bit against linear + fused_add_rms_norm in bf16 (S = 10 K shares: not a
    multiple of the kernel's 4 per step); a missing rounding step changes dozens of values."""
    rng = np.random.default_rng(10)
    x, w = rnd(rng, (3, 2560), "bf16"), rnd(rng, (200, 2560), "bf16", 0.02)
    res, nw = rnd(rng, (3, 200), "bf16"), rnd(rng, (200,), "bf16")
    assert LIN._splits(3, 200, 2560) == 10
    y, h = S.linear_add_rms_norm(x, w, res, nw)
    y2, h2 = S.fused_add_rms_norm(S.linear(x, w), res, nw)
    np.testing.assert_array_equal(h, h2)
    np.testing.assert_array_equal(y, y2)


@pytest.mark.parametrize("bad, match", [
    (dict(weight=np.zeros((8, 16), np.float32)), r"weight: expected shape \[out, 32\]"),
    (dict(residual=np.zeros((1, 9), np.float32)), r"residual: expected shape \(1, 8\)"),
    (dict(norm_weight=np.zeros(8, np.float16)), "norm_weight: expected dtype f32"),
    (dict(weight=np.ones((0, 32), np.float32), residual=np.ones((1, 0), np.float32), norm_weight=None),
     "weight: no output features"),
])
def test_linear_add_rms_norm_errors(bad, match):
    args = dict(x=np.ones((1, 32), np.float32), weight=np.ones((8, 32), np.float32),
                residual=np.ones((1, 8), np.float32), norm_weight=np.ones(8, np.float32))
    args.update(bad)
    with pytest.raises((ValueError, TypeError), match=match):
        S.linear_add_rms_norm(**args)

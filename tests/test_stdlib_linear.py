"""tilex.stdlib.linear / gated_mlp on the interpreter (NumPy in, NumPy out) against float64 NumPy.

Tolerance: max |out - ref| / max |ref| <= 1e-2 (bf16 output), 1e-5 (f32). Shapes include M = 1,
sizes that are not multiples of the tile, K not a multiple of 8 (the `linear_any` kernel) and
several tiles per axis with the grouped tile order.
"""
from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilex
from tilex.stdlib import gated_mlp, linear

BF16 = ml_dtypes.bfloat16
LINEAR = str(Path(__file__).resolve().parents[1] / "stdlib_kernels" / "linear.tile")


def _rel(out, ref):
    out = np.asarray(out, dtype=np.float64)
    assert np.isfinite(out).all()
    return float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))


@pytest.mark.parametrize("m,n,k", [(1, 24, 40), (5, 33, 16), (3, 7, 37)])
@pytest.mark.parametrize("dtype,tol", [(BF16, 1e-2), (np.float32, 1e-5)])
def test_linear(m, n, k, dtype, tol):
    rng = np.random.default_rng(m * 100 + n + k)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in ((m, k), (n, k), (n,)))
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    assert _rel(linear(x, w), ref) <= tol
    if k % 8 == 0:
        assert _rel(linear(x, w, b), ref + b.astype(np.float64)) <= tol


def test_linear_keeps_leading_dims():
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((2, 3, 16)).astype(BF16), rng.standard_normal((8, 16)).astype(BF16)
    y = linear(x, w)
    assert y.shape == (2, 3, 8) and y.dtype == BF16
    assert _rel(y, x.astype(np.float64) @ w.astype(np.float64).T) <= 1e-2


def test_gated_mlp():
    rng = np.random.default_rng(8)
    x, wg, wu = (rng.standard_normal(s).astype(BF16) for s in ((4, 24), (40, 24), (40, 24)))
    g, u = x.astype(np.float64) @ wg.astype(np.float64).T, x.astype(np.float64) @ wu.astype(np.float64).T
    assert _rel(gated_mlp(x, wg, wu), g / (1 + np.exp(-g)) * u) <= 1e-2


@pytest.mark.parametrize("m,n,k", [(50, 40, 24), (17, 100, 8), (100, 17, 32)])
def test_grouped_tile_order_covers_every_tile(m, n, k):
    rng = np.random.default_rng(m + n)
    mod = tilex.compile(LINEAR, BM=16, BN=16, BK=16, GROUP=3)
    x, w = rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((n, k)).astype(BF16)
    y = np.full((m, n), np.nan, BF16)
    mod.interp("linear", x, w, y)
    assert _rel(y, x.astype(np.float64) @ w.astype(np.float64).T) <= 1e-2


@pytest.mark.parametrize("m,n,k,programs", [(50, 40, 24, 3), (17, 100, 8, 5), (100, 17, 32, 64), (1, 9, 16, 2)])
def test_persistent_tile_loop_covers_every_tile(m, n, k, programs):
    """linear_persistent: `programs` blocks walk every tile in the grouped order (fewer, as many or more
    blocks than tiles), NaN-poisoned output."""
    rng = np.random.default_rng(m * n + programs)
    mod = tilex.compile(LINEAR, BM=16, BN=16, BK=16, GROUP=3, PROGRAMS=programs)
    x, w = rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((n, k)).astype(BF16)
    y = np.full((m, n), np.nan, BF16)
    mod.interp("linear_persistent", x, w, y)
    assert _rel(y, x.astype(np.float64) @ w.astype(np.float64).T) <= 1e-2


def test_bias_at_any_k_on_the_interpreter():
    """linear_any_bias: a bias where in_features % 8 != 0 (it raised before session 26)."""
    rng = np.random.default_rng(12)
    x, w, b = (rng.standard_normal(t).astype(BF16) for t in ((5, 36), (24, 36), (24,)))
    ref = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    assert _rel(linear(x, w, b), ref) <= 1e-2


def test_bad_arguments():
    x = np.zeros((2, 16), BF16)
    with pytest.raises(ValueError, match="weight"):
        linear(x, np.zeros((4, 8), BF16))
    with pytest.raises((TypeError, ValueError), match="weight"):
        linear(x, np.zeros((4, 16), np.float32))
    with pytest.raises(ValueError, match="in_features % 8"):
        gated_mlp(np.zeros((2, 12), BF16), np.zeros((4, 12), BF16), np.zeros((4, 12), BF16))


@pytest.mark.parametrize("bias", [False, True])
def test_split_k_kernels_on_the_interpreter(bias):
    """linear_splitk + splitk_sum(_bias), the decode path the GPU wrapper takes (the NumPy
    path never splits), with S = 3 shares of an odd K range and N not a multiple of BN."""
    from tilex.stdlib import _launch as L

    rng = np.random.default_rng(11 + bias)
    m, n, k, s = 3, 40, 72, 3
    x, w, b = (rng.standard_normal(t).astype(BF16) for t in ((m, k), (n, k), (n,)))
    mod = L.load("linear", T="bf16", BM=16, BN=32, BK=16, STAGES=2)
    part = np.full((s, m, n), np.nan, np.float32)
    L.run(mod, "linear_splitk", x, w, part)
    y = np.full((m, n), np.nan, BF16)
    if bias:
        L.run(mod, "splitk_sum_bias", part, b, y)
    else:
        L.run(mod, "splitk_sum", part, y)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + (b.astype(np.float64) if bias else 0)
    assert _rel(y, ref) <= 1e-2


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("m,nq,nk,k,batched", [(5, 32, 16, 24, False), (1, 48, 16, 16, True), (7, 40, 24, 8, True),
                                               (3, 20, 6, 16, False)])
def test_linear_qkv(m, nq, nk, k, batched, bias):
    """One fused [q | k | v] weight -> three contiguous outputs; (3, 20, 6) has no common tile
    width of 8 or more, so it takes the three-linear fallback."""
    rng = np.random.default_rng(m + nq + nk + k + bias)
    n = nq + 2 * nk
    x, w, b = (rng.standard_normal(s).astype(BF16) for s in ((m, k), (n, k), (n,)))
    q, kk, v = tilex.stdlib.linear_qkv(x[None] if batched else x, w, nq, nk, b if bias else None)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + (b.astype(np.float64) if bias else 0)
    for got, (a, e) in zip((q, kk, v), ((0, nq), (nq, nq + nk), (nq + nk, n))):
        assert got.flags.c_contiguous and got.shape == ((1, m) if batched else (m,)) + (e - a,)
        assert _rel(got.reshape(m, e - a), ref[:, a:e]) <= 1e-2


def test_linear_qkv_errors():
    x, w = np.zeros((2, 16), BF16), np.zeros((40, 16), BF16)
    with pytest.raises(ValueError, match="expected shape"):
        tilex.stdlib.linear_qkv(x, w, 16, 8)


@pytest.mark.parametrize("m,n,k,s", [(1, 40, 72, 1), (16, 100, 24, 1), (5, 33, 72, 3), (3, 64, 16, 2)])
def test_swapped_operand_kernels_on_the_interpreter(m, n, k, s):
    """linear_swap (y.T = w @ x.T, one pass) and linear_swap_splitk + splitk_sum, the decode kernels for
    M <= 16: N not a multiple of BN, K shares of an odd range, NaN-poisoned outputs."""
    from tilex.stdlib import _launch as L

    rng = np.random.default_rng(m * n + k + s)
    x, w = rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((n, k)).astype(BF16)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    mod = L.load("linear", T="bf16", BN=32, BM=16, BK=16, STAGES=2)
    y = np.full((m, n), np.nan, BF16)
    L.run(mod, "linear_swap", x, w, y)
    assert _rel(y, ref) <= 1e-2
    part = np.full((s, m, n), np.nan, np.float32)
    L.run(mod, "linear_swap_splitk", x, w, part)
    y = np.full((m, n), np.nan, BF16)
    L.run(mod, "splitk_sum", part, y)
    assert _rel(y, ref) <= 1e-2


@pytest.mark.parametrize("m,n,k,programs", [(50, 40, 24, 3), (1, 9, 16, 2), (33, 70, 8, 64)])
def test_gated_mlp_persistent_on_the_interpreter(m, n, k, programs):
    """gated_mlp_persistent: `programs` blocks walk every tile (fewer or more blocks than tiles)."""
    rng = np.random.default_rng(m + n + programs)
    mod = tilex.compile(LINEAR, BM=16, BN=16, BK=16, GROUP=3, PROGRAMS=programs)
    x, wg, wu = (rng.standard_normal(s).astype(BF16) for s in ((m, k), (n, k), (n, k)))
    y = np.full((m, n), np.nan, BF16)
    mod.interp("gated_mlp_persistent", x, wg, wu, y)
    g, u = x.astype(np.float64) @ wg.astype(np.float64).T, x.astype(np.float64) @ wu.astype(np.float64).T
    assert _rel(y, g / (1 + np.exp(-g)) * u) <= 1e-2


def test_tuned_lookup_passes_every_size_symbol(monkeypatch):
    """The tune store keys a bucket by all of a kernel's size symbols: the split-K kernels' S too."""
    import importlib

    import tilex.api

    lin = importlib.import_module("tilex.stdlib.linear")
    seen = []
    monkeypatch.setattr(tilex.api, "tuned_defines",
                        lambda src, kernel, shapes, dtypes: seen.append((kernel, shapes, dtypes)) or {"BK": 64})
    assert lin._tuned("linear_swap_splitk", "bf16", 1, 64, 128, dict(BN=64, BK=128), S=1) == dict(BN=64, BK=64)
    assert lin._tuned("linear_swap_splitk", "f16", 1, 64, 128, dict(BN=64, BK=128), S=1) == dict(BN=64, BK=64)
    assert seen == [("linear_swap_splitk", dict(M=1, N=64, K=128, S=1), {}),  # bf16: the default, as tuned
                    ("linear_swap_splitk", dict(M=1, N=64, K=128, S=1), {"T": "f16"})]  # f16: its own entries

"""The gated MLP's decode path through swapped products (stdlib/gated.py `_SWAP`): two linear_swap_splitk launches
into f32 partials and gated_sum, against float64 NumPy on the interpreter (CPU) and against torch on the GPU.

Tolerance: max |out - ref| / max |ref| <= 1e-2 for bf16 outputs, 1e-5 for f32. Odd sizes: M = 1, 5, 16 (the swap
path's 16-row x tile), N not a multiple of the 64/128-row weight tiles, K a multiple of 8 but not of the 128-deep
step; gated_sum over S = 1 and 3 shares and a row wider than one 512-column block.
"""
from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np
import pytest

from tilex.stdlib import _launch as L

BF16 = ml_dtypes.bfloat16
G = importlib.import_module("tilex.stdlib.gated")
LN = importlib.import_module("tilex.stdlib.linear")


def _rel(out, ref):
    out = np.asarray(out, dtype=np.float64)
    assert np.isfinite(out).all()
    return float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))


def _ref(x, wg, wu):
    x, wg, wu = (np.asarray(a, np.float64) for a in (x, wg, wu))
    g, u = x @ wg.T, x @ wu.T
    return g / (1 + np.exp(-g)) * u


@pytest.mark.parametrize("s,m,n", [(1, 1, 7), (3, 5, 600), (2, 16, 1030), (17, 2, 77)])
def test_gated_sum_adds_the_shares_then_gates(s, m, n):
    rng = np.random.default_rng(s * 1000 + m + n)
    pg, pu = (rng.standard_normal((s, m, n)).astype(np.float32) for _ in range(2))
    y = np.full((m, n), np.nan, np.float32)
    L.run(L.load("linear", kernel="gated_sum", T="f32"), "gated_sum", pg, pu, y)
    g, u = pg.astype(np.float64).sum(0), pu.astype(np.float64).sum(0)
    assert _rel(y, g / (1 + np.exp(-g)) * u) <= 1e-5


@pytest.mark.parametrize("m,n,k", [(1, 100, 136), (5, 70, 48), (16, 129, 264)])
@pytest.mark.parametrize("dtype,tol", [(BF16, 1e-2), (np.float32, 1e-5)])
def test_swap_partials_match_numpy(m, n, k, dtype, tol):
    rng = np.random.default_rng(m * 7 + n + k)
    x, wg, wu = (rng.standard_normal(sh).astype(dtype) for sh in ((m, k), (n, k), (n, k)))
    y = np.full((m, n), np.nan, dtype)
    G._swap_partials(x, wg, wu, y, "bf16" if dtype is BF16 else "f32", m, n, k)
    assert _rel(y, _ref(x, wg, wu)) <= tol


def test_the_wrapper_takes_the_swap_path_when_asked(monkeypatch):
    """With _SWAP on and decode sizes (the GPU condition forced here) gated_mlp launches the three kernels."""
    ran = []
    real = L.run
    monkeypatch.setattr(G, "_SWAP", True)
    monkeypatch.setattr(L, "FASTPATH", False)
    monkeypatch.setattr(LN, "_use_swap", lambda m, k, gpu: 0 < m <= 16 and k % 8 == 0)
    monkeypatch.setattr(L, "run", lambda mod, kernel, *a, **kw: (ran.append(kernel), real(mod, kernel, *a, **kw))[1])
    rng = np.random.default_rng(3)
    x, wg, wu = (rng.standard_normal(sh).astype(BF16) for sh in ((2, 3, 40), (90, 40), (90, 40)))
    y = G.gated_mlp(x, wg, wu)
    assert ran == ["linear_swap_splitk", "linear_swap_splitk", "gated_sum"]
    assert y.shape == (2, 3, 90) and _rel(y, _ref(x.reshape(6, 40), wg, wu).reshape(2, 3, 90)) <= 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1, 18944, 3584), (5, 1000, 136), (16, 8320, 2048), (3, 4097, 520)])
def test_gpu_swap_path_matches_torch(m, n, k, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(G, "_SWAP", True)
    monkeypatch.setattr(L, "FASTPATH", False)  # no replay of a layout recorded with the path off
    ran = []
    real = L.run
    monkeypatch.setattr(L, "run", lambda mod, kernel, *a, **kw: (ran.append(kernel), real(mod, kernel, *a, **kw))[1])
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    wg, wu = ((torch.randn(n, k, device="cuda", generator=g) / k ** 0.5).bfloat16() for _ in range(2))
    ref = torch.nn.functional.silu(x.float() @ wg.float().T) * (x.float() @ wu.float().T)
    y = G.gated_mlp(x, wg, wu)
    err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
    assert ran == ["linear_swap_splitk", "linear_swap_splitk", "gated_sum"]  # the swap path ran, not gated_mlp
    assert err <= 1e-2, err

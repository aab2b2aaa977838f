"""linear_splitk_tiles + splitk_sum (split-K at any M) in the interpreter against NumPy float64 (CPU tier),
including shares past K (empty K ranges write zero partials) and M, N not multiples of the tiles."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tilex.stdlib import _launch as L


@pytest.mark.parametrize("m, n, k, s", [(37, 90, 200, 3), (20, 40, 64, 4), (1, 17, 72, 5), (65, 33, 136, 2)])
def test_splitk_tiles_partials_sum_to_the_product(m, n, k, s):
    rng = np.random.default_rng(m * 1000 + n + k + s)
    x = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    part = np.full((s, m, n), np.nan, np.float32)
    mod = L.load("linear", kernel="linear_splitk_tiles", T="bf16", BM=16, BN=32, BK=16, STAGES=2)
    L.run(mod, "linear_splitk_tiles", x, w, part)
    assert not np.isnan(part).any()
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(part.sum(0), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    y = np.zeros((m, n), ml_dtypes.bfloat16)
    L.run(L.load("linear", kernel="splitk_sum", T="bf16"), "splitk_sum", part, y)
    err = np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err < 1e-2

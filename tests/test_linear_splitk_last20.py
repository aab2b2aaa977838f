"""linear_splitk_last (split-K in one launch, the last share of each tile adds the partials) on the interpreter
against float64 NumPy: odd sizes, S not dividing K's steps, shares with an empty K range, bias, counters reset."""
from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilex

BF16 = ml_dtypes.bfloat16
LINEAR = str(Path(__file__).resolve().parents[1] / "stdlib_kernels" / "linear.tile")


def _rel(out, ref):
    out = np.asarray(out, dtype=np.float64)
    assert np.isfinite(out).all()
    return float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("m,n,k,s", [(50, 40, 72, 3), (17, 100, 8, 2), (1, 9, 48, 4), (33, 16, 32, 5)])
def test_splitk_last_on_the_interpreter(m, n, k, s, bias):
    """Every tile summed once by its last share (NaN-poisoned y and partials), twice in a row on the same counters
    (they must be back at zero after each launch); (33, 16, 32, 5): shares 3 and 4 have no K steps (chunk 16)."""
    rng = np.random.default_rng(m * n + k + s + bias)
    mod = tilex.compile(LINEAR, BM=16, BN=16, BK=16, GROUP=3, BIAS=bias)
    x, w, b = (rng.standard_normal(t).astype(BF16) for t in ((m, k), (n, k), (n,)))
    tiles = -(-m // 16) * -(-n // 16)
    count = np.zeros(tiles + 3, np.int32)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + (b.astype(np.float64) if bias else 0)
    for _ in range(2):
        part = np.full((s, m, n), np.nan, np.float32)
        y = np.full((m, n), np.nan, BF16)
        mod.interp("linear_splitk_last", x, w, b, part, count, y)
        assert _rel(y, ref) <= 1e-2
        assert not count.any()


def test_splitk_last_refuses_too_few_counters():
    mod = tilex.compile(LINEAR, BM=16, BN=16, BK=16)
    x, w, b = np.zeros((20, 16), BF16), np.zeros((20, 16), BF16), np.zeros((20,), BF16)
    with pytest.raises(Exception, match="C"):
        mod.interp("linear_splitk_last", x, w, b, np.zeros((2, 20, 20), np.float32), np.zeros(3, np.int32),
                   np.zeros((20, 20), BF16))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("m,n,k,programs", [(50, 40, 72, 3), (17, 100, 8, 5), (1, 9, 48, 4), (33, 16, 40, 7),
                                            (100, 24, 200, 4), (64, 64, 16, 16), (40, 72, 96, 2), (48, 32, 40, 4)])
def test_streamk_on_the_interpreter(m, n, k, programs, bias):
    """linear_streamk: whole rounds of tiles, then the tail's K steps shared out (tails of 0 tiles, of fewer K steps
    than programs (1, 9, 48, 4: 3 steps over 4 programs), ranges crossing a tile boundary), NaN-poisoned y and
    partials, twice on the same counters (zeros again after each launch)."""
    rng = np.random.default_rng(m * n + k + programs + bias)
    mod = tilex.compile(LINEAR, BM=16, BN=16, BK=16, GROUP=3, PROGRAMS=programs, BIAS=bias)
    n8 = -(-n // 8) * 8  # the kernel wants N % 8 == 0
    x, w, b = (rng.standard_normal(t).astype(BF16) for t in ((m, k), (n8, k), (n8,)))
    tiles = -(-m // 16) * -(-n8 // 16)
    count = np.zeros(tiles, np.int32)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + (b.astype(np.float64) if bias else 0)
    for _ in range(2):
        part = np.full((2 * programs, 16, 16), np.nan, np.float32)
        y = np.full((m, n8), np.nan, BF16)
        mod.interp("linear_streamk", x, w, b, part, count, y)
        assert _rel(y, ref) <= 1e-2
        assert not count.any()

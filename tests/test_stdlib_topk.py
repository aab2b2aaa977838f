"""tilex.stdlib.topk on the interpreter: the k largest of each row and their int64 indices against a
float64 NumPy stable sort (NaN largest, ties to the lower index) at odd lengths up to a vocabulary of
152064 (one chunk, one merge, two merges), and its argument errors. GPU: tests/test_stdlib_topk_gpu.py."""
from __future__ import annotations

import numpy as np
import pytest

import tilex.stdlib as S
import importlib

T = importlib.import_module("tilex.stdlib.topk")  # the module (tilex.stdlib.topk is the function)


def reference(x, k):
    """(values, indices) by value descending, NaN first, ties by the lower index."""
    x64 = x.astype(np.float64)
    nan = np.isnan(x64)
    order = np.lexsort((np.arange(x.shape[-1])[None, :].repeat(x.shape[0], 0), np.where(nan, 0, -x64), ~nan), axis=-1)
    idx = order[:, :k]
    return np.take_along_axis(x, idx, axis=-1), idx


@pytest.mark.parametrize("v,k", [(1, 1), (7, 3), (7, 7), (100, 16), (1000, 50), (5000, 1), (152064, 50),
                                 (152064, 64), (40000, 1000)])
def test_topk_matches_a_stable_sort(v, k):
    rng = np.random.default_rng()
    x = rng.standard_normal((3, v)).astype(np.float32)
    x[1] = np.round(x[1] * 2)  # ties everywhere
    x[2, ::11] = np.nan
    x[2, 1::13] = np.inf
    x[2, 2::17] = -np.inf
    val, idx = S.topk(x, k)
    rv, ri = reference(x, k)
    assert idx.dtype == np.int64 and val.dtype == np.float32 and val.shape == (3, k)
    np.testing.assert_array_equal(idx, ri)
    np.testing.assert_array_equal(val, rv)


def test_topk_bf16_and_leading_dims():
    ml = pytest.importorskip("ml_dtypes")
    x = np.random.default_rng().standard_normal((2, 3, 3000)).astype(ml.bfloat16)  # bf16: many ties
    val, idx = S.topk(x, 10)
    assert val.shape == (2, 3, 10) and val.dtype == x.dtype
    rv, ri = reference(x.reshape(6, 3000).astype(np.float32), 10)
    np.testing.assert_array_equal(idx.reshape(6, 10), ri)
    np.testing.assert_array_equal(val.reshape(6, 10).astype(np.float32), rv)


def test_plan_merges_until_one_chunk():
    assert T.plan(152064, 64) == (4096, [4096])  # 38 chunks x 64 candidates, one merge
    assert T.plan(7, 8) == (8, [])
    ch, merges = T.plan(152064, 1024)
    assert ch == 4096 and merges == [4096, 4096, 4096]  # 38912 -> 10240 -> 3072 -> 1024 candidates
    for v, k2 in [(152064, 64), (152064, 1024), (100, 16), (1, 1)]:
        ch, merges = T.plan(v, k2)
        width = -(-v // ch) * k2
        for c in merges:
            assert c % k2 == 0 and c >= 2 * k2
            width = -(-width // c) * k2
        assert width == k2


@pytest.mark.parametrize("k", [0, 11, 2000, 2.0, True])
def test_bad_k(k):
    x = np.zeros((2, 10), np.float32) if k != 2000 else np.zeros((2, 4000), np.float32)
    with pytest.raises(ValueError, match="topk"):
        S.topk(x, k)

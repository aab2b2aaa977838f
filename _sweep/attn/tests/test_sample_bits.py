"""The sampler's uniform variate never reaches 1.0 (CPU, interpreter).

sample.tile draws by Gumbel-max, argmax(z - log(-log u)). Until session 16, u = (k + 1/2) 2**-24 for a 24-bit
hash k: for k = 2**24 - 1 that rounds to 1.0 in f32, -log(u) = 0 and the token's score is +inf, so about one
draw in 110 over a 152064-token row returned a token regardless of its logit (found on the H200 by
test_stdlib_rows_gpu.py::test_sample_split_distribution: 185 of 20000 draws off the four live tokens). Here the
hash is replayed in NumPy to find (seed, token) pairs whose old k was 2**24 - 1, and the sampler must still
return the only live token for them, on both paths (one program per row, and the split path of long rows).
"""
from __future__ import annotations

import numpy as np
import pytest

import tilex.stdlib as S
from tilex.stdlib import rows as model


def _wrap(v):
    return ((v + 2**31) % 2**32) - 2**31  # int32 arithmetic on int64 arrays


def _lowbias(x):
    """sample.tile's hash (lowbias32 with xor as (a | b) - (a & b) and shifts as floor division and a mask)."""
    sh = (x // 65536) & 65535
    x = _wrap(((x | sh) - (x & sh)) * 2146121005)
    sh = (x // 32768) & 131071
    x = _wrap(((x | sh) - (x & sh)) * -2073254261)
    sh = (x // 65536) & 65535
    return (x | sh) - (x & sh)


def _old_k(seed: int, row: int, idx: np.ndarray) -> np.ndarray:
    b = _lowbias(_wrap(np.int64(seed) * -1640531535 + np.int64(row) * -2048144789))
    return (_lowbias(_wrap(idx.astype(np.int64) * -1640531535 + b)) // 256) & 16777215


def _pairs(v: int, want: int, seeds: range):
    idx = np.arange(v)
    out = []
    for seed in seeds:
        hit = np.nonzero(_old_k(seed, 0, idx) == 2**24 - 1)[0]
        out += [(seed, int(t)) for t in hit]
        if len(out) >= want:
            break
    return out


@pytest.mark.parametrize("v, split", [(4096, False), (20000, True)])
def test_uniform_never_reaches_one(v, split, monkeypatch):
    if not split:
        monkeypatch.setattr(model, "split_segments", lambda *a, **k: 1)
    pairs = _pairs(v, 2, range(20000))
    assert pairs, "no (seed, token) with the old 24-bit k = 2**24 - 1 in the searched range"
    for seed, bad in pairs:
        live = (bad + 1) % v
        z = np.full((1, v), -1e4, np.float32)
        z[0, live] = 0.0  # the only token with any mass
        assert int(S.sample(z, temperature=1.0, seed=seed)[0]) == live, (seed, bad)


def test_the_variate_is_exact_in_f32():
    """u = (k + 1/2) 2**-23 over every 23-bit k, as the interpreter evaluates it: strictly inside (0, 1)."""
    k = np.arange(2**23, dtype=np.int64)
    u = k.astype(np.float32) * np.float32(1.1920929e-07) + np.float32(5.9604645e-08)
    assert u.dtype == np.float32 and u.min() > 0 and u.max() < 1
    assert np.array_equal(u.astype(np.float64), (k + 0.5) * 2.0**-23)

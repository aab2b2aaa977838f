"""CPU: attention_decode with session 20's tiles (BN = 16 / 32 / 64 keys by one or two warps), through the
interpreter, against a float64 reference that walks the block table token by token.

The interpreter runs the kernel's semantics, which depend on the tile's BN (keys per iteration; with BN < BS an
iteration reads part of one cache block, with BN > BS several blocks) but not on WARPS / STAGES (how the GPU lays
it out): the GPU half is tests/test_attention_decode_gpu.py::test_decode_warp_tiles_vs_sdpa.
"""
from __future__ import annotations

import numpy as np
import pytest

from tilex import stdlib
from tilex.types import DType, numpy_dtype

BF16 = numpy_dtype(DType.BF16)

TILES = [dict(BN=32, WARPS=1, STAGES=3), dict(BN=16, WARPS=1, STAGES=4), dict(BN=64, WARPS=1, STAGES=2),
         dict(BN=32, WARPS=2, STAGES=2)]


def _ref(q, k_cache, v_cache, table, lens, scale):
    b_, hq, d = q.shape
    bs, hkv = k_cache.shape[1], k_cache.shape[2]
    g = hq // hkv
    out = np.zeros((b_, hq, d))
    for b in range(b_):
        n = int(lens[b])
        if n == 0:
            continue
        tok = np.arange(n)
        blocks = table[b, tok // bs]
        kk = k_cache[blocks, tok % bs].astype(np.float64)
        vv = v_cache[blocks, tok % bs].astype(np.float64)
        for h in range(hq):
            s = kk[:, h // g] @ q[b, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[b, h] = p / p.sum() @ vv[:, h // g]
    return out


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("bs,lens", [(16, [0, 1, 47, 16, 100]), (32, [70, 5]), (4, [9, 33])],
                         ids=["BS16", "BS32", "BS4"])
@pytest.mark.parametrize("tile", TILES, ids=lambda t: "BN{BN}_W{WARPS}_S{STAGES}".format(**t))
def test_decode_tiles_interp(tile, bs, lens, splits):
    rng = np.random.default_rng(len(lens) * 100 + bs + tile["BN"])
    hq, hkv, d = 6, 2, 32
    need = [-(-n // bs) for n in lens]
    maxb = max(max(need), 1) + 1
    nb = sum(need) + 3
    kc = rng.standard_normal((nb, bs, hkv, d)).astype(BF16)
    vc = rng.standard_normal((nb, bs, hkv, d)).astype(BF16)
    table = rng.integers(-4, 2 * nb, size=(len(lens), maxb)).astype(np.int32)   # junk past each sequence
    perm, at = rng.permutation(nb), 0
    for i, n in enumerate(need):
        table[i, :n] = perm[at:at + n]
        at += n
    q = rng.standard_normal((len(lens), hq, d)).astype(BF16)
    seq = np.asarray(lens, np.int32)
    o = stdlib.attention_decode(q, kc, vc, table, seq, num_splits=splits, config=tile)
    ref = _ref(q, kc, vc, table, seq, d ** -0.5)
    assert o.shape == ref.shape and np.isfinite(o.astype(np.float64)).all()
    if lens[0] == 0:
        assert not o[0].astype(np.float64).any()                          # an empty sequence gives zeros
    err = np.abs(o.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err <= 1e-2, err


@pytest.mark.parametrize("static,splits", [(True, 1), (False, 1), (False, 2)])   # STATIC is one share only
def test_decode_q_streamed_interp(static, splits):
    """attention_decode_split_qs (config QS=True: q read inside the key loop) gives the same attention."""
    rng = np.random.default_rng(7 + splits)
    bs, lens, hq, hkv, d = 16, [0, 1, 47, 100], 8, 2, 32
    need = [-(-n // bs) for n in lens]
    maxb = max(need) + 1
    nb = sum(need) + 2
    kc = rng.standard_normal((nb, bs, hkv, d)).astype(BF16)
    vc = rng.standard_normal((nb, bs, hkv, d)).astype(BF16)
    table = rng.integers(-4, 2 * nb, size=(len(lens), maxb)).astype(np.int32)
    perm, at = rng.permutation(nb), 0
    for i, n in enumerate(need):
        table[i, :n] = perm[at:at + n]
        at += n
    q = rng.standard_normal((len(lens), hq, d)).astype(BF16)
    seq = np.asarray(lens, np.int32)
    o = stdlib.attention_decode(q, kc, vc, table, seq, num_splits=splits,
                                config=dict(BN=32, WARPS=1, STAGES=2, QS=True, STATIC=static))
    ref = _ref(q, kc, vc, table, seq, d ** -0.5)
    assert not o[0].astype(np.float64).any()
    assert np.abs(o.astype(np.float64) - ref).max() / np.abs(ref).max() <= 1e-2

"""tilex.stdlib attention on the NumPy interpreter against float64 NumPy references.

Tiny shapes, fresh random data per case. Prefill: odd S (tails inside a tile, several
tiles, one token), grouped-query heads (G = 1, 2, 3, 4), causal and not, several tile
configurations so that the unmasked loop, the diagonal blocks and the tail all run.
Decode: a paged cache with a shuffled block table (junk past each sequence's blocks),
sequence lengths that are not multiples of the block size, 1, exact multiples and 0,
block sizes 16 and 32, and split counts 1 (direct), 2, 3 and more than the blocks
(empty shares).

Error measure: max |out - ref| / max |ref|. Tolerances: 1e-2 for bf16 (the output and
the probabilities fed to P @ V are rounded to bf16, 8 bits), 2e-3 for f16, 1e-5 for f32.
"""
from __future__ import annotations

import numpy as np
import pytest

from tilex import stdlib
from tilex.types import DType, numpy_dtype

BF16 = numpy_dtype(DType.BF16)
DTYPES = {"bf16": BF16, "f16": np.float16, "f32": np.float32}
TOL = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}


def _rand(rng, shape, dt):
    return rng.standard_normal(shape, dtype=np.float32).astype(DTYPES[dt])


def _rel(out, ref):
    out = np.asarray(out, dtype=np.float64)
    assert np.isfinite(out).all(), "output has NaN/inf"
    return float(np.max(np.abs(out - ref)) / max(np.max(np.abs(ref)), 1e-30))


def ref_attention(q, k, v, causal, scale):
    """float64: q [B, Hq, S, D], k, v [B, Hkv, S, D]."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if causal:
        n = q.shape[2]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def ref_decode(q, k_cache, v_cache, block_table, seq_lens, scale):
    """float64, one token at a time through the block table: q [B, Hq, D] -> [B, Hq, D]."""
    b_, hq, d = q.shape
    bs, hkv = k_cache.shape[1], k_cache.shape[2]
    g = hq // hkv
    out = np.zeros((b_, hq, d))
    for b in range(b_):
        n = int(seq_lens[b])
        if n == 0:
            continue
        tok = np.arange(n)
        blocks = np.asarray(block_table)[b, tok // bs]
        kk = k_cache[blocks, tok % bs].astype(np.float64)  # [n, Hkv, D]
        vv = v_cache[blocks, tok % bs].astype(np.float64)
        for h in range(hq):
            s = kk[:, h // g] @ q[b, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[b, h] = (p / p.sum()) @ vv[:, h // g]
    return out


# ------------------------------------------------------------------------------ prefill

PREFILL_CASES = [
    # B, Hq, Hkv, S, D, config
    (1, 1, 1, 1, 16, None),                      # one token
    (2, 4, 2, 37, 16, dict(BM=16, BN=16, WARPS=4)),   # tail in the last tile, G = 2
    (1, 6, 2, 45, 32, dict(BM=32, BN=16, WARPS=4)),   # G = 3 (not a power of two), BM > BN
    (1, 4, 1, 50, 16, dict(BM=16, BN=32, WARPS=4)),   # G = 4, BN > BM
    (1, 2, 2, 33, 64, None),                     # default config, D = 64
    (1, 2, 1, 70, 128, None),                    # default config, D = 128, two m-tiles
    (1, 2, 1, 40, 256, None),                    # D = 256 (its own default config)
]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("case", PREFILL_CASES, ids=lambda c: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c[:5]))
def test_prefill_bf16(case, causal):
    b, hq, hkv, s, d, cfg = case
    rng = np.random.default_rng()
    q, k, v = _rand(rng, (b, hq, s, d), "bf16"), _rand(rng, (b, hkv, s, d), "bf16"), _rand(rng, (b, hkv, s, d), "bf16")
    o = stdlib.attention_prefill(q, k, v, causal=causal, config=cfg)
    assert isinstance(o, np.ndarray) and o.dtype == BF16 and o.shape == (b, hq, s, d)
    assert _rel(o, ref_attention(q, k, v, causal, d ** -0.5)) <= TOL["bf16"]


@pytest.mark.parametrize("dt", ["f16", "f32"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_prefill_dtypes(dt, causal):
    rng = np.random.default_rng()
    b, hq, hkv, s, d = 1, 4, 2, 29, 32
    q, k, v = _rand(rng, (b, hq, s, d), dt), _rand(rng, (b, hkv, s, d), dt), _rand(rng, (b, hkv, s, d), dt)
    o = stdlib.attention_prefill(q, k, v, causal=causal, config=dict(BM=16, BN=16, WARPS=4))
    assert o.dtype == DTYPES[dt]
    assert _rel(o, ref_attention(q, k, v, causal, d ** -0.5)) <= TOL[dt]


@pytest.mark.parametrize("case", [PREFILL_CASES[1], PREFILL_CASES[2], PREFILL_CASES[5]],
                         ids=lambda c: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c[:5]))
def test_prefill_token_major_layout(case):
    """layout="bshd": q [B, S, Hq, D], k, v [B, S, Hkv, D], passed to the kernel as they are."""
    b, hq, hkv, s, d, cfg = case
    rng = np.random.default_rng()
    q, k, v = _rand(rng, (b, s, hq, d), "bf16"), _rand(rng, (b, s, hkv, d), "bf16"), _rand(rng, (b, s, hkv, d), "bf16")
    o = stdlib.attention_prefill(q, k, v, causal=True, config=cfg, layout="bshd")
    assert o.shape == (b, s, hq, d)
    heads = lambda t: np.ascontiguousarray(t.transpose(0, 2, 1, 3))  # noqa: E731
    ref = ref_attention(heads(q), heads(k), heads(v), True, d ** -0.5)
    assert _rel(heads(o), ref) <= TOL["bf16"]
    with pytest.raises(ValueError, match="layout"):
        stdlib.attention_prefill(q, k, v, layout="sbhd")


GQA_CASES = [
    # B, Hq, Hkv, S, D, config: the packed kernel (KERNEL="gqa"), G = Hq / Hkv query heads per tile
    (1, 1, 1, 9, 16, dict(BM=16, BN=16, WARPS=4)),       # G = 1, S < BM
    (2, 4, 1, 37, 16, dict(BM=16, BN=16, WARPS=4)),      # G = 4, BM / G = 4 queries a tile, tail
    (1, 7, 1, 23, 32, dict(BM=32, BN=16, WARPS=4)),      # G = 7: tiles that end inside a query's heads
    (1, 16, 2, 45, 16, dict(BM=32, BN=32, WARPS=4)),     # G = 8, two KV heads
    (2, 6, 2, 50, 16, dict(BM=16, BN=32, WARPS=4)),      # G = 3, BN > BM
    (1, 8, 2, 70, 64, dict(BM=64, BN=32, WARPS=4)),      # D = 64, G = 4
    (1, 4, 1, 33, 128, dict(BM=64, BN=64, WARPS=4)),     # D = 128
    (1, 2, 1, 19, 256, dict(BM=64, BN=64, WARPS=4)),     # D = 256, G = 2
]


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("case", GQA_CASES, ids=lambda c: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c[:5]))
def test_prefill_gqa_kernel(case, causal, layout):
    """attention_prefill_gqa (rows = (query, head) pairs of one KV head, gathered and scattered) against
    float64 NumPy, in both layouts (its head-of-row rule differs: batch rows in bhsd, heads in bshd)."""
    b, hq, hkv, s, d, cfg = case
    rng = np.random.default_rng()
    q, k, v = _rand(rng, (b, hq, s, d), "bf16"), _rand(rng, (b, hkv, s, d), "bf16"), _rand(rng, (b, hkv, s, d), "bf16")
    ref = ref_attention(q, k, v, causal, d ** -0.5)
    cfg = dict(cfg, KERNEL="gqa")
    if layout == "bshd":
        tok = lambda t: np.ascontiguousarray(t.transpose(0, 2, 1, 3))  # noqa: E731
        o = tok(stdlib.attention_prefill(tok(q), tok(k), tok(v), causal=causal, config=cfg, layout="bshd"))
    else:
        o = stdlib.attention_prefill(q, k, v, causal=causal, config=cfg)
    assert o.shape == (b, hq, s, d)
    assert _rel(o, ref) <= TOL["bf16"]


SHORT_CASES = [
    # B, Hq, Hkv, S, D, config: the persistent short-sequence kernel (KERNEL="short"), S <= BN, BK = 64
    (1, 1, 1, 1, 64, dict(BM=16, BN=16)),                 # one token
    (2, 4, 1, 37, 64, dict(BM=16, BN=64)),                # G = 4, tiles that hold parts of two heads
    (1, 7, 1, 23, 128, dict(BM=32, BN=32)),               # G = 7, D in two slices
    (3, 16, 2, 45, 64, dict(BM=64, BN=64, PROGRAMS=5)),   # G = 8, programs that walk several tiles
    (1, 2, 2, 64, 64, dict(BM=32, BN=64, STAGES=1)),      # G = 1, S = BN
    (1, 4, 2, 19, 128, None),                             # the default configuration, D = 128
]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("case", SHORT_CASES, ids=lambda c: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c[:5]))
def test_prefill_short_kernel(case, causal):
    """attention_prefill_short (rows = the G heads' queries of one KV head, one key block) vs float64 NumPy."""
    b, hq, hkv, s, d, cfg = case
    rng = np.random.default_rng()
    q, k, v = _rand(rng, (b, hq, s, d), "bf16"), _rand(rng, (b, hkv, s, d), "bf16"), _rand(rng, (b, hkv, s, d), "bf16")
    out = np.full((b, hq, s, d), np.nan, BF16)
    o = stdlib.attention_prefill(q, k, v, causal=causal, out=out, config=dict(cfg or {}, KERNEL="short"))
    assert o is out
    assert _rel(o, ref_attention(q, k, v, causal, d ** -0.5)) <= TOL["bf16"]


def test_prefill_short_kernel_refuses_what_it_cannot_take():
    rng = np.random.default_rng()
    q, k, v = _rand(rng, (1, 2, 70, 64), "f32"), _rand(rng, (1, 1, 70, 64), "f32"), _rand(rng, (1, 1, 70, 64), "f32")
    with pytest.raises(ValueError, match=r"KERNEL='short' takes layout='bhsd', S <= BN \(64\) and D 64 or 128"):
        stdlib.attention_prefill(q, k, v, config=dict(KERNEL="short", BN=64))
    with pytest.raises(ValueError, match=r"D=32"):
        stdlib.attention_prefill(q[..., :32], k[..., :32], v[..., :32], config=dict(KERNEL="short"))
    t = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # noqa: E731
    with pytest.raises(ValueError, match="layout='bhsd'"):
        stdlib.attention_prefill(t(q), t(k), t(v), layout="bshd", config=dict(KERNEL="short"))


def test_prefill_gqa_out_is_written_only_inside():
    """Rows past S (query index S) are not stored: out= around a bigger buffer keeps its sentinel."""
    rng = np.random.default_rng()
    b, hq, hkv, s, d = 1, 4, 1, 13, 16
    q, k, v = (_rand(rng, sh, "f32") for sh in ((b, hq, s, d), (b, hkv, s, d), (b, hkv, s, d)))
    out = np.full((b, hq, s, d), np.nan, np.float32)
    o = stdlib.attention_prefill(q, k, v, causal=True, out=out, config=dict(KERNEL="gqa", BM=32, BN=16, WARPS=4))
    assert o is out
    assert _rel(out, ref_attention(q, k, v, True, d ** -0.5)) <= 1e-5
    with pytest.raises(ValueError, match="KERNEL"):
        stdlib.attention_prefill(q, k, v, config=dict(KERNEL="nope"))


def test_prefill_scale_out_and_large_logits():
    """A given scale; large scores (a wide softmax range) stay finite; out= is written in place."""
    rng = np.random.default_rng()
    b, hq, hkv, s, d = 1, 2, 1, 21, 16
    q, k, v = (_rand(rng, sh, "f32") for sh in ((b, hq, s, d), (b, hkv, s, d), (b, hkv, s, d)))
    q *= 8
    out = np.full((b, hq, s, d), np.nan, np.float32)
    o = stdlib.attention_prefill(q, k, v, causal=True, scale=0.7, out=out, config=dict(BM=16, BN=16, WARPS=4))
    assert o is out
    assert _rel(out, ref_attention(q, k, v, True, 0.7)) <= 1e-5


def test_prefill_errors():
    z = np.zeros((1, 3, 8, 16), BF16)
    with pytest.raises(ValueError, match="multiple"):
        stdlib.attention_prefill(z, np.zeros((1, 2, 8, 16), BF16), np.zeros((1, 2, 8, 16), BF16))
    with pytest.raises(ValueError, match="head size"):
        stdlib.attention_prefill(*(np.zeros((1, 1, 8, 24), BF16),) * 3)
    with pytest.raises(TypeError, match="dtype"):
        stdlib.attention_prefill(z, z.astype(np.float16), z)
    with pytest.raises(ValueError, match="shape"):
        stdlib.attention_prefill(z, np.zeros((1, 3, 9, 16), BF16), z)


def test_prefill_empty():
    z = np.zeros((1, 2, 0, 16), BF16)
    assert stdlib.attention_prefill(z, z, z).shape == (1, 2, 0, 16)


# ------------------------------------------------------------------------------- decode

def _paged(rng, dt, b, hkv, d, bs, lens, extra_blocks=3):
    """A shuffled paged cache holding sequences of `lens` tokens, and its block table."""
    need = [-(-n // bs) for n in lens]
    maxb = max(max(need), 1) + 1                 # a spare column of junk ids
    nb = sum(need) + extra_blocks
    k_cache, v_cache = _rand(rng, (nb, bs, hkv, d), dt), _rand(rng, (nb, bs, hkv, d), dt)
    perm = rng.permutation(nb)
    table = np.empty((b, maxb), np.int32)
    table[...] = rng.integers(-5, 3 * nb, size=(b, maxb))   # junk past each sequence (even out of range)
    at = 0
    for i, n in enumerate(need):
        table[i, :n] = perm[at:at + n]
        at += n
    return k_cache, v_cache, table, np.asarray(lens, np.int32)


DECODE_CASES = [
    # Hq, Hkv, D, block size, seq lens
    (4, 2, 16, 16, [1, 37, 16, 50]),              # G = 2; one token, a multiple of BS, tails
    (6, 2, 32, 16, [100, 3]),                     # G = 3
    (8, 1, 16, 32, [33, 64, 95]),                 # G = 8, block size 32
    (2, 2, 64, 16, [23]),                         # G = 1
    (5, 1, 128, 32, [70, 1]),                     # G = 5 (the Qwen 40/8 ratio), D = 128
    (2, 1, 256, 4, [9, 30]),                      # D = 256, block size 4
]


@pytest.mark.parametrize("splits", [None, 1, 2, 3, 9])
@pytest.mark.parametrize("case", DECODE_CASES, ids=lambda c: "Hq{}_Hkv{}_D{}_BS{}".format(*c[:4]))
def test_decode_bf16(case, splits):
    hq, hkv, d, bs, lens = case
    rng = np.random.default_rng()
    b = len(lens)
    k_cache, v_cache, table, seq_lens = _paged(rng, "bf16", b, hkv, d, bs, lens)
    q = _rand(rng, (b, hq, d), "bf16")
    o = stdlib.attention_decode(q, k_cache, v_cache, table, seq_lens, num_splits=splits)
    assert isinstance(o, np.ndarray) and o.dtype == BF16 and o.shape == (b, hq, d)
    assert _rel(o, ref_decode(q, k_cache, v_cache, table, seq_lens, d ** -0.5)) <= TOL["bf16"]


@pytest.mark.parametrize("dt", ["f16", "f32"])
def test_decode_dtypes(dt):
    rng = np.random.default_rng()
    lens = [45, 8, 17]
    k_cache, v_cache, table, seq_lens = _paged(rng, dt, 3, 2, 32, 16, lens)
    q = _rand(rng, (3, 6, 32), dt)
    o = stdlib.attention_decode(q, k_cache, v_cache, table, seq_lens, num_splits=2)
    assert o.dtype == DTYPES[dt]
    assert _rel(o, ref_decode(q, k_cache, v_cache, table, seq_lens, 32 ** -0.5)) <= TOL[dt]


@pytest.mark.parametrize("warps", [1, 8])
def test_decode_config_override(warps):
    rng = np.random.default_rng()
    k_cache, v_cache, table, seq_lens = _paged(rng, "f32", 2, 2, 16, 16, [40, 3])
    q = _rand(rng, (2, 6, 16), "f32")
    o = stdlib.attention_decode(q, k_cache, v_cache, table, seq_lens, num_splits=2, config=dict(WARPS=warps))
    assert _rel(o, ref_decode(q, k_cache, v_cache, table, seq_lens, 0.25)) <= 1e-5


@pytest.mark.parametrize("static", [True, False])
@pytest.mark.parametrize("bs,lens", [(16, [0, 1, 16, 37, 64]), (32, [95, 0, 2]), (4, [9, 3, 0])],
                         ids=["BS16", "BS32", "BS4"])
def test_decode_static_walk(bs, lens, static, monkeypatch):
    """STATIC (one share walking the table's whole width): the same result as the walk to seq_len, with every
    cache block no sequence owns full of NaN and the table's junk entries past each sequence pointing at them
    (and outside the cache), lengths 0 (zeros), 1, multiples of the block and not."""
    from tilex.stdlib import _launch as L

    rng = np.random.default_rng()
    hq, hkv, d = 8, 2, 16
    k_cache, v_cache, table, seq_lens = _paged(rng, "f32", len(lens), hkv, d, bs, lens, extra_blocks=4)
    used = {int(x) for i, n in enumerate(lens) for x in table[i, :-(-n // bs)]}
    junk = [j for j in range(k_cache.shape[0]) if j not in used]
    k_cache[junk] = np.nan
    v_cache[junk] = np.nan
    for i, n in enumerate(lens):
        past = table[i, -(-n // bs):]
        table[i, -(-n // bs):] = np.where(np.arange(past.size) % 2, junk[0], -1 - np.arange(past.size))
    q = _rand(rng, (len(lens), hq, d), "f32")
    seen = []
    real = L.load
    monkeypatch.setattr(L, "load", lambda name, **kw: (seen.append(kw), real(name, **kw))[1])
    o = stdlib.attention_decode(q, k_cache, v_cache, table, seq_lens, num_splits=1, config=dict(STATIC=static))
    split = _split_loads(seen)
    assert split[-1]["STATIC"] is static and split[-1]["DIRECT"] is True
    ref = ref_decode(q, k_cache, v_cache, table, seq_lens, d ** -0.5)
    assert _rel(o, ref) <= 1e-5
    assert np.all(o[np.asarray(lens) == 0] == 0)
    seen.clear()
    stdlib.attention_decode(q, k_cache, v_cache, table, seq_lens)   # the default for a table this narrow
    split = _split_loads(seen)[-1]
    assert split["STATIC"] is (split["DIRECT"] and table.shape[1] * bs <= stdlib.decode_model.STATIC_TOKENS)


def _split_loads(seen):
    """The launches' loads of attention_decode_split (or its q-streamed twin, _qs) among recorded L.load calls (the
    plan's shared-memory reads, which pass no STATIC, left out)."""
    return [kw for kw in seen if kw.get("kernel") in ("attention_decode_split", "attention_decode_split_qs")
            and "STATIC" in kw]


def test_decode_wrapper_launches_the_plan(monkeypatch):
    """The wrapper launches decode_plan's split count and tiles, and a config= entry overrides one of them."""
    from tilex.stdlib import _launch as L

    rng = np.random.default_rng()
    k_cache, v_cache, table, seq_lens = _paged(rng, "bf16", 2, 2, 32, 16, [300, 45])
    q = _rand(rng, (2, 8, 32), "bf16")
    seen = []
    real = L.load
    monkeypatch.setattr(L, "load", lambda name, **kw: (seen.append(kw), real(name, **kw))[1])
    pl = stdlib.attention.decode_plan(2, 8, 2, 32, table.shape[1], 16, "bf16", 132)
    o = stdlib.attention_decode(q, k_cache, v_cache, table, seq_lens)
    split = _split_loads(seen)[-1]
    assert {k: split[k] for k in pl.config} == pl.config and split["DIRECT"] is (pl.splits == 1)
    assert _rel(o, ref_decode(q, k_cache, v_cache, table, seq_lens, 32 ** -0.5)) <= TOL["bf16"]
    seen.clear()
    stdlib.attention_decode(q, k_cache, v_cache, table, seq_lens, num_splits=3, config=dict(BN=32, WARPS=4))
    split = _split_loads(seen)[-1]
    assert (split["BN"], split["WARPS"], split["DIRECT"]) == (32, 4, False)


@pytest.mark.parametrize("lens", [[128], [1, 100, 0]])
def test_decode_one_iteration_of_128_keys(lens, monkeypatch):
    """The one-iteration configuration in the interpreter (with and without STATIC) against float64."""
    from tilex.stdlib import _launch as L

    rng = np.random.default_rng()
    k_cache, v_cache, table, seq_lens = _paged(rng, "bf16", len(lens), 8, 64, 16, lens)
    table = table[:, :8]
    q = _rand(rng, (len(lens), 32, 64), "bf16")
    seen = []
    real = L.load
    monkeypatch.setattr(L, "load", lambda name, **kw: (seen.append(kw), real(name, **kw))[1])
    o = stdlib.attention_decode(q, k_cache, v_cache, table, seq_lens)
    split = _split_loads(seen)[-1]
    assert (split["BN"], split["WARPS"], split["STAGES"], split["STATIC"]) == (128, 8, 2, True)
    assert _rel(o, ref_decode(q, k_cache, v_cache, table, seq_lens, 64 ** -0.5)) <= TOL["bf16"]


def test_decode_static_needs_one_share():
    rng = np.random.default_rng()
    k_cache, v_cache, table, seq_lens = _paged(rng, "f32", 1, 1, 16, 16, [40])
    q = _rand(rng, (1, 2, 16), "f32")
    with pytest.raises(Exception, match=r"NS == 1 or not STATIC"):
        stdlib.attention_decode(q, k_cache, v_cache, table, seq_lens, num_splits=2, config=dict(STATIC=True))


def test_decode_int64_metadata_scale_out():
    rng = np.random.default_rng()
    lens = [19, 40]
    k_cache, v_cache, table, seq_lens = _paged(rng, "f32", 2, 2, 16, 16, lens)
    q = _rand(rng, (2, 4, 16), "f32")
    out = np.full((2, 4, 16), np.nan, np.float32)
    o = stdlib.attention_decode(q, k_cache, v_cache, table.astype(np.int64), seq_lens.astype(np.int64),
                                scale=0.3, num_splits=3, out=out)
    assert o is out
    assert _rel(out, ref_decode(q, k_cache, v_cache, table, seq_lens, 0.3)) <= 1e-5


@pytest.mark.parametrize("splits", [1, 4])
def test_decode_empty_sequence_gives_zeros(splits):
    rng = np.random.default_rng()
    k_cache, v_cache, table, seq_lens = _paged(rng, "f32", 3, 1, 16, 16, [0, 5, 0])
    q = _rand(rng, (3, 2, 16), "f32")
    o = stdlib.attention_decode(q, k_cache, v_cache, table, seq_lens, num_splits=splits)
    assert np.all(o[0] == 0) and np.all(o[2] == 0)
    assert _rel(o[1], ref_decode(q, k_cache, v_cache, table, seq_lens, 0.25)[1]) <= 1e-5


def test_decode_matches_prefill_last_row():
    """The same keys in a contiguous layout (prefill) and through a paged cache (decode)."""
    rng = np.random.default_rng()
    s, hq, hkv, d, bs = 27, 4, 2, 16, 16
    q, k, v = _rand(rng, (1, hq, s, d), "f32"), _rand(rng, (1, hkv, s, d), "f32"), _rand(rng, (1, hkv, s, d), "f32")
    nblk = -(-s // bs)
    k_cache = np.zeros((nblk + 2, bs, hkv, d), np.float32)
    v_cache = np.zeros_like(k_cache)
    blocks = rng.permutation(nblk + 2)[:nblk]
    for t in range(s):
        k_cache[blocks[t // bs], t % bs] = k[0, :, t]
        v_cache[blocks[t // bs], t % bs] = v[0, :, t]
    full = stdlib.attention_prefill(q, k, v, causal=True, config=dict(BM=16, BN=16, WARPS=4))
    last = stdlib.attention_decode(q[:, :, s - 1], k_cache, v_cache, blocks[None].astype(np.int32),
                                   np.array([s], np.int32), num_splits=2)
    np.testing.assert_allclose(last[0], full[0, :, s - 1], rtol=1e-5, atol=1e-6)


def test_decode_errors():
    q = np.zeros((2, 4, 16), BF16)
    kc = np.zeros((3, 16, 2, 16), BF16)
    t, n = np.zeros((2, 2), np.int32), np.ones(2, np.int32)
    with pytest.raises(ValueError, match="multiple"):
        stdlib.attention_decode(np.zeros((2, 3, 16), BF16), kc, kc, t, n)
    with pytest.raises(ValueError, match="block size"):
        stdlib.attention_decode(q, np.zeros((3, 12, 2, 16), BF16), np.zeros((3, 12, 2, 16), BF16), t, n)
    with pytest.raises(ValueError, match="block_table"):
        stdlib.attention_decode(q, kc, kc, np.zeros((3, 2), np.int32), n)
    with pytest.raises(TypeError, match="integer"):
        stdlib.attention_decode(q, kc, kc, t.astype(np.float32), n)
    with pytest.raises(ValueError, match="num_splits"):
        stdlib.attention_decode(q, kc, kc, t, n, num_splits=0)


# ------------------------------------------------------------------ nvcc (no GPU needed)

# the specializations the wrappers compile for the H200 targets (and f16, f32, D = 64,
# block size 32, the direct and combine paths); the default variants are in test_nvcc.py
NVCC_VARIANTS = [
    ("attention_prefill", dict(T="bf16", D=128, CAUSAL=True, BM=128, BN=64, WARPS=8)),
    ("attention_prefill", dict(T="f16", D=64, CAUSAL=False, BM=128, BN=64, WARPS=8)),
    ("attention_prefill", dict(T="f32", D=64, CAUSAL=True, BM=64, BN=64, WARPS=4)),
    ("attention_decode", dict(T="bf16", D=128, BS=16, GP=8, DIRECT=False, NSP=16, WARPS=4)),
    # the wrapper's (GP >= 16: mma products, K/V gathered into shared memory by cp.async)
    ("attention_decode", dict(T="bf16", D=128, BS=16, GP=16, BN=64, DIRECT=False, NSP=16, WARPS=4)),
    ("attention_decode", dict(T="f16", D=64, BS=32, GP=16, BN=64, DIRECT=True, NSP=16, WARPS=4)),
    ("attention_decode", dict(T="f16", D=128, BS=32, GP=4, DIRECT=True, NSP=64, WARPS=8)),
    ("attention_decode", dict(T="f32", D=64, BS=16, GP=1, DIRECT=False, NSP=2, WARPS=4)),
    # one share walking the table's whole width (the wrapper's default for tables of <= 256 tokens)
    ("attention_decode", dict(T="bf16", D=128, BS=16, GP=16, BN=64, DIRECT=True, STATIC=True, NSP=16, WARPS=4)),
    # one iteration of 128 keys by 8 warps (few programs, shares of <= 128 tokens)
    ("attention_decode", dict(T="bf16", D=128, BS=16, GP=16, BN=128, DIRECT=True, STATIC=True, STAGES=2, NSP=16,
                              WARPS=8)),
    # the packed-heads prefill: G = 4 (TMA + wgmma at BM 128), G = 7 at BM 64, D = 256 with G = 2
    ("attention_prefill_gqa", dict(T="bf16", D=128, G=4, BM=128, BN=64, WARPS=8)),
    ("attention_prefill_gqa", dict(T="bf16", D=128, G=7, BM=64, BN=64, WARPS=4, STAGES=3)),
    ("attention_prefill_gqa", dict(T="bf16", D=256, G=2, BM=128, BN=64, WARPS=8, CAUSAL=False)),
    # the persistent short-sequence prefill (producer warpgroup + 2 consumers; BM=64: one consumer)
    ("attention_prefill_short", dict(T="bf16", D=128, BM=128, BN=128, BK=64)),
    ("attention_prefill_short", dict(T="f16", D=64, BM=64, BN=64, BK=64, STAGES=3, CAUSAL=False)),
]


@pytest.mark.nvcc
@pytest.mark.parametrize("name,defines", NVCC_VARIANTS,
                         ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={x}" for k, x in v.items()))
def test_specializations_compile_with_nvcc(name, defines, tmp_path):
    import shutil
    import subprocess

    from tilex.pipeline import Options
    from tilex.stdlib import _launch
    from tilex.translate import translate

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    src = _launch.source(name)
    cu = tmp_path / f"{name}.cu"
    cu.write_text(translate(src, name, Options(defines=defines, arch="sm_90a")).cuda)
    proc = subprocess.run([nvcc, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-o", str(tmp_path / "k.cubin"),
                           str(cu)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_prefill_steps_down_where_shared_memory_is_smaller(monkeypatch):
    """On a 99 KB target (sm_86/sm_89) BM=128, BN=64 at D = 128 does not fit: the wrapper compiles the
    first smaller tiling that does (the interpreter then runs it), instead of failing."""
    from tilex.runtime import nvrtc
    from tilex.stdlib import _launch as L

    monkeypatch.setattr(nvrtc, "default_arch", lambda: "sm_86")
    L._load.cache_clear()
    try:
        rng = np.random.default_rng(3)
        b, hq, hkv, s, d = 1, 2, 1, 70, 128
        q, k, v = (_rand(rng, sh, "bf16") for sh in ((b, hq, s, d), (b, hkv, s, d), (b, hkv, s, d)))
        o = stdlib.attention_prefill(q, k, v, causal=True)
        assert _rel(o, ref_attention(q, k, v, True, 1 / np.sqrt(d))) <= 1e-2
        _, mod = stdlib.attention._prefill_module(stdlib.attention.prefill_config(d, s), {}, T="bf16", D=d, CAUSAL=True)
        assert "BM=64" in mod.cuda and "BN=32" in mod.cuda
    finally:
        L._load.cache_clear()

"""GPU: tilex.stdlib attention against torch.nn.functional.scaled_dot_product_attention.

Random bf16 (and f16) data, KV heads expanded for SDPA (repeat_interleave), odd sequence
lengths. Outputs are poisoned with NaN before the launch (`out=`), and so are the
split-K workspaces (`_launch.POISON`), so an element a kernel fails to write, or a
workspace row the combine reads without it being written, is caught.

Prefill: tilex vs SDPA (is_causal top-left, as tilex). Decode: a paged cache with a
shuffled block table holding per-sequence lengths that are not multiples of the block
size; SDPA sees the same keys contiguous with a padding mask. Also: CuPy arrays, and a
torch CUDA graph capture / replay of attention_decode with changed lengths.

Tolerance: max |out - ref| / max |ref| <= 1e-2 (bf16), 2e-3 (f16), ref = SDPA in f32 on
the same (rounded) inputs.

Run: pytest -m gpu tests/test_stdlib_attention_gpu.py
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tilex.stdlib as S  # noqa: E402
from tilex.stdlib import _launch as L  # noqa: E402

TD = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
TOL = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    monkeypatch.setattr(L, "POISON", True, raising=False)
    yield
    torch.cuda.synchronize()


def rnd(shape, dt, gen, scale=1.0):
    return (torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * scale).to(TD[dt])


def rel(out, ref):
    out, ref = out.double(), ref.double()
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert torch.isfinite(out).all(), "output has NaN/inf: some element was not written"
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def sdpa_ref(q, k, v, causal, scale=None, mask=None):
    """SDPA in f32 with the KV heads expanded to the query heads."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, is_causal=causal,
                                          scale=scale)


# ------------------------------------------------------------------------------ prefill

PREFILL = [
    # B, Hq, Hkv, S, D
    (1, 8, 2, 1, 128),
    (2, 8, 2, 77, 128),
    (1, 40, 8, 1000, 128),     # Qwen-14B heads, G = 5
    (2, 4, 4, 513, 64),
    (1, 32, 8, 2048, 128),     # Llama-3-8B heads
    (3, 6, 3, 129, 64),
]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("case", PREFILL, ids=lambda c: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c))
def test_prefill_vs_sdpa(case, causal):
    b, hq, hkv, s, d = case
    gen = torch.Generator(device="cuda").manual_seed(hash(case) % 2**31)
    q, k, v = rnd((b, hq, s, d), "bf16", gen), rnd((b, hkv, s, d), "bf16", gen), rnd((b, hkv, s, d), "bf16", gen)
    out = torch.full((b, hq, s, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    o = S.attention_prefill(q, k, v, causal=causal, out=out)
    assert o is out
    assert rel(o, sdpa_ref(q, k, v, causal)) <= TOL["bf16"]


@pytest.mark.parametrize("case", [(1, 40, 8, 512, 128), (2, 28, 4, 301, 128), (1, 4, 2, 77, 64)])
def test_prefill_token_major_vs_sdpa(case):
    """layout="bshd" (what the LLM engine passes): q [B, S, Hq, D], no transposes."""
    b, hq, hkv, s, d = case
    gen = torch.Generator(device="cuda").manual_seed(s)
    q, k, v = rnd((b, s, hq, d), "bf16", gen), rnd((b, s, hkv, d), "bf16", gen), rnd((b, s, hkv, d), "bf16", gen)
    o = S.attention_prefill(q, k, v, causal=True, layout="bshd")
    ref = sdpa_ref(*(t.transpose(1, 2) for t in (q, k, v)), True).transpose(1, 2)
    assert o.shape == q.shape and rel(o, ref) <= TOL["bf16"]


@pytest.mark.parametrize("dt", ["f16", "f32"])
def test_prefill_other_dtypes(dt):
    gen = torch.Generator(device="cuda").manual_seed(7)
    b, hq, hkv, s, d = 2, 8, 2, 301, 128
    q, k, v = rnd((b, hq, s, d), dt, gen), rnd((b, hkv, s, d), dt, gen), rnd((b, hkv, s, d), dt, gen)
    o = S.attention_prefill(q, k, v, causal=True, scale=0.05)
    assert o.dtype == TD[dt]
    assert rel(o, sdpa_ref(q, k, v, True, scale=0.05)) <= TOL[dt]


def test_prefill_cupy_and_interpreter_agree():
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(3)
    bf16 = L._np_dtype("bf16")
    b, hq, hkv, s, d = 1, 4, 2, 45, 64
    q, k, v = (rng.standard_normal(sh, dtype=np.float32).astype(bf16)
               for sh in ((b, hq, s, d), (b, hkv, s, d), (b, hkv, s, d)))
    gpu = S.attention_prefill(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True)
    assert isinstance(gpu, cp.ndarray)
    host = S.attention_prefill(q, k, v, causal=True)
    ref = sdpa_ref(*(torch.from_numpy(x.astype(np.float32)).cuda() for x in (q, k, v)), True)
    assert rel(torch.from_numpy(cp.asnumpy(gpu).astype(np.float32)), ref.cpu()) <= TOL["bf16"]
    assert rel(torch.from_numpy(host.astype(np.float32)), ref.cpu()) <= TOL["bf16"]


# ------------------------------------------------------------------------------- decode

# wgmma in the streamed loops (sm_90a; mma.sync elsewhere): the tilings it takes, odd lengths, GQA,
# against a float64 reference on the same bf16 inputs (tests/test_streamed_wgmma.py pins the code)
WGMMA_CONFIGS = [dict(BM=128, BN=64, WARPS=8), dict(BM=128, BN=128, WARPS=8), dict(BM=64, BN=64, WARPS=4),
                 dict(BM=128, BN=64, WARPS=8, STAGES=3)]
WGMMA_SHAPES = [(1, 8, 2, 1, 128), (2, 4, 1, 77, 64), (1, 5, 5, 1000, 128), (1, 8, 2, 1000, 64), (2, 6, 2, 333, 128)]


def f64_ref(q, k, v, causal, scale=None):
    g = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.repeat_interleave(g, dim=1).double(), v.repeat_interleave(g, dim=1).double()
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("cfg", WGMMA_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("case", WGMMA_SHAPES, ids=lambda c: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c))
def test_prefill_wgmma_tilings_vs_float64(case, cfg, causal):
    b, hq, hkv, s, d = case
    gen = torch.Generator(device="cuda").manual_seed(s * 7 + d)
    q, k, v = rnd((b, hq, s, d), "bf16", gen), rnd((b, hkv, s, d), "bf16", gen), rnd((b, hkv, s, d), "bf16", gen)
    out = torch.full((b, hq, s, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    o = S.attention_prefill(q, k, v, causal=causal, out=out, config=cfg)
    assert rel(o, f64_ref(q, k, v, causal)) <= TOL["bf16"]


def test_prefill_f16_wgmma_large_values():
    """f16 operands on wgmma, with scores large enough that the running max moves often."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    b, hq, hkv, s, d = 1, 8, 2, 700, 128
    q, k, v = rnd((b, hq, s, d), "f16", gen, 3.0), rnd((b, hkv, s, d), "f16", gen, 3.0), rnd((b, hkv, s, d), "f16", gen)
    o = S.attention_prefill(q, k, v, causal=True)
    assert rel(o, f64_ref(q, k, v, True)) <= 5e-3


# the packed-heads kernel (KERNEL="gqa"): GQA ratios 1/4/7/8, D 64/128/256, S not a multiple of the tile
GQA_SHAPES = [(2, 8, 8, 77, 128), (3, 32, 8, 128, 128), (2, 28, 4, 301, 128), (1, 16, 2, 1000, 64),
              (2, 8, 4, 513, 256), (1, 7, 1, 45, 128), (4, 32, 8, 1, 128)]
GQA_CONFIGS = [dict(BM=128, BN=64, WARPS=8), dict(BM=64, BN=64, WARPS=4), dict(BM=128, BN=128, WARPS=8, STAGES=1),
               dict(BM=64, BN=32, WARPS=4, STAGES=3)]


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("cfg", GQA_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("case", GQA_SHAPES, ids=lambda c: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c))
def test_prefill_gqa_kernel_vs_float64(case, cfg, causal, layout):
    b, hq, hkv, s, d = case
    if d == 256 and cfg["BN"] == 128:
        pytest.skip("BN=128 at D=256 does not fit shared memory")
    gen = torch.Generator(device="cuda").manual_seed(s * 7 + d + hq)
    q, k, v = rnd((b, hq, s, d), "bf16", gen), rnd((b, hkv, s, d), "bf16", gen), rnd((b, hkv, s, d), "bf16", gen)
    ref = f64_ref(q, k, v, causal)
    cfg = dict(cfg, KERNEL="gqa")
    if layout == "bshd":
        tq, tk, tv = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        out = torch.full_like(tq, float("nan"))
        o = S.attention_prefill(tq, tk, tv, causal=causal, out=out, config=cfg, layout="bshd").transpose(1, 2)
    else:
        out = torch.full_like(q, float("nan"))
        o = S.attention_prefill(q, k, v, causal=causal, out=out, config=cfg)
    assert rel(o, ref) <= TOL["bf16"]


# the persistent short-sequence kernel (KERNEL="short", S <= BN): GQA 1/2/4/7/8, D 64/128, S not a multiple of 16,
# more tiles than programs, and out= that is not written past the heads' rows
SHORT_SHAPES = [(3, 32, 8, 128, 128), (5, 28, 4, 100, 128), (2, 8, 8, 77, 64), (4, 16, 2, 1, 128), (2, 8, 4, 61, 64),
                (1, 7, 1, 128, 128)]
SHORT_CONFIGS = [None, dict(BM=64), dict(STAGES=3), dict(PROGRAMS=7)]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("cfg", SHORT_CONFIGS,
                         ids=lambda c: "default" if c is None else ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("case", SHORT_SHAPES, ids=lambda c: "B{}_Hq{}_Hkv{}_S{}_D{}".format(*c))
def test_prefill_short_kernel_vs_float64(case, cfg, causal):
    b, hq, hkv, s, d = case
    gen = torch.Generator(device="cuda").manual_seed(s * 13 + d + hq)
    q, k, v = rnd((b, hq, s, d), "bf16", gen), rnd((b, hkv, s, d), "bf16", gen), rnd((b, hkv, s, d), "bf16", gen)
    out = torch.full_like(q, float("nan"))
    o = S.attention_prefill(q, k, v, causal=causal, out=out, config=dict(cfg or {}, KERNEL="short"))
    assert o is out
    assert rel(o, f64_ref(q, k, v, causal)) <= TOL["bf16"]


def test_prefill_gqa_kernel_f16_and_interpreter_agree():
    """f16 on the GPU and the same call in the interpreter (NumPy inputs) give the same numbers."""
    gen = torch.Generator(device="cuda").manual_seed(12)
    b, hq, hkv, s, d = 1, 8, 2, 70, 64
    q, k, v = rnd((b, hq, s, d), "f16", gen), rnd((b, hkv, s, d), "f16", gen), rnd((b, hkv, s, d), "f16", gen)
    cfg = dict(KERNEL="gqa", BM=64, BN=32, WARPS=4)
    gpu = S.attention_prefill(q, k, v, causal=True, config=cfg)
    host = S.attention_prefill(*(t.cpu().numpy() for t in (q, k, v)), causal=True, config=cfg)
    ref = f64_ref(q, k, v, True)
    assert rel(gpu, ref) <= TOL["f16"]
    assert rel(torch.from_numpy(host).cuda(), ref) <= TOL["f16"]


def _misaligned(t):
    """The same values in a view that starts 2 bytes past a 16-byte boundary (contiguous, odd element offset)."""
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buf[1:].view(t.shape)
    view.copy_(t)
    assert view.data_ptr() % 16 == 2 and view.is_contiguous()
    return view


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_prefill_misaligned_kv_views(causal):
    """K/V views that TMA cannot read in place (sm_90a): the wrapper copies them; elsewhere cp.async copes."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    b, hq, hkv, s, d = 2, 8, 2, 333, 128
    q, k, v = rnd((b, hq, s, d), "bf16", gen), rnd((b, hkv, s, d), "bf16", gen), rnd((b, hkv, s, d), "bf16", gen)
    o = S.attention_prefill(q, _misaligned(k), _misaligned(v), causal=causal)
    assert rel(o, f64_ref(q, k, v, causal)) <= TOL["bf16"]


def test_prefill_kernel_rejects_a_misaligned_tma_operand():
    """The kernel itself (no wrapper) on sm_90a: a clear LaunchError, not a fault."""
    from tilex.diagnostics import LaunchError

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("TMA rings are sm_90a's")
    gen = torch.Generator(device="cuda").manual_seed(6)
    b, h, s, d = 1, 2, 128, 128
    q, k, v = (rnd((b, s, h, d), "bf16", gen) for _ in range(3))
    o = torch.empty_like(q)
    mod = L.load("attention_prefill", T="bf16", D=d, CAUSAL=True)
    with pytest.raises(LaunchError, match=r"argument 'k': a pipeline loop reads it with TMA, which needs a 16-byte aligned"):
        L.run(mod, "attention_prefill", q, _misaligned(k), v, o, scale=0.1)
    L.run(mod, "attention_prefill", q, k, v, o, scale=d ** -0.5)  # aligned: runs
    ref = f64_ref(*(t.transpose(1, 2) for t in (q, k, v)), True).transpose(1, 2)
    assert rel(o, ref) <= TOL["bf16"]


def paged(lens, hkv, d, bs, dt, gen):
    """Contiguous K/V [B, Hkv, Lmax, D] and the same tokens in a shuffled paged cache."""
    b, lmax = len(lens), max(max(lens), 1)
    k = rnd((b, hkv, lmax, d), dt, gen)
    v = rnd((b, hkv, lmax, d), dt, gen)
    need = [-(-n // bs) for n in lens]
    maxb = max(max(need), 1) + 1
    nb = sum(need) + 5
    perm = torch.randperm(nb, generator=torch.Generator().manual_seed(nb)).tolist()
    k_cache = rnd((nb, bs, hkv, d), dt, gen)   # junk everywhere no sequence lives
    v_cache = rnd((nb, bs, hkv, d), dt, gen)
    table = torch.randint(-3, 2 * nb, (b, maxb), dtype=torch.int32)   # junk past each sequence
    at = 0
    for i, n in enumerate(lens):
        blocks = perm[at:at + need[i]]
        at += need[i]
        table[i, :need[i]] = torch.tensor(blocks, dtype=torch.int32)
        for j, blk in enumerate(blocks):
            t0, t1 = j * bs, min(n, (j + 1) * bs)
            k_cache[blk, : t1 - t0] = k[i, :, t0:t1].transpose(0, 1)
            v_cache[blk, : t1 - t0] = v[i, :, t0:t1].transpose(0, 1)
    return k, v, k_cache, v_cache, table.cuda(), torch.tensor(lens, dtype=torch.int32, device="cuda")


def decode_ref(q, k, v, lens, scale=None):
    lmax = k.shape[2]
    mask = torch.arange(lmax, device="cuda")[None, :] < lens[:, None]   # [B, Lmax]
    o = sdpa_ref(q[:, :, None, :], k, v, False, scale=scale, mask=mask[:, None, None, :])
    return o[:, :, 0]


DECODE = [
    # lens, Hq, Hkv, D, block size
    ([1, 17, 4096, 300], 40, 8, 128, 16),
    ([4095, 33, 1000], 40, 8, 128, 32),
    ([32768], 40, 8, 128, 16),                    # batch 1, 32k context
    ([37] * 7 + [5000], 32, 8, 128, 16),
    ([97, 64, 1], 8, 8, 64, 32),                  # G = 1, D = 64
    ([int(x) for x in np.random.default_rng(0).integers(1, 700, 256)], 40, 8, 128, 16),   # batch 256
]


@pytest.mark.parametrize("splits", [None, 1, 7])
@pytest.mark.parametrize("case", DECODE, ids=lambda c: f"B{len(c[0])}_L{max(c[0])}_Hq{c[1]}_Hkv{c[2]}_D{c[3]}_BS{c[4]}")
def test_decode_vs_sdpa(case, splits):
    lens, hq, hkv, d, bs = case
    gen = torch.Generator(device="cuda").manual_seed(len(lens) * 1000 + max(lens))
    k, v, k_cache, v_cache, table, seq_lens = paged(lens, hkv, d, bs, "bf16", gen)
    q = rnd((len(lens), hq, d), "bf16", gen)
    out = torch.full_like(q, float("nan"))
    o = S.attention_decode(q, k_cache, v_cache, table, seq_lens, num_splits=splits, out=out)
    assert o is out
    assert rel(o, decode_ref(q, k, v, seq_lens)) <= TOL["bf16"]


@pytest.mark.parametrize("static", [True, False])
@pytest.mark.parametrize("case", [([128], 32, 8, 16), ([1, 0, 77, 128] * 64, 64, 8, 16), ([200, 3, 0], 28, 4, 32)],
                         ids=["B1_L128", "B256_L128", "B3_L200_BS32"])
def test_decode_static_walk_vs_sdpa(case, static):
    """One share walking the whole (narrow) table, the default at <= 256 tokens, with every cache block no
    sequence owns full of NaN and junk table entries past each sequence pointing at them."""
    lens, hq, hkv, bs = case
    gen = torch.Generator(device="cuda").manual_seed(len(lens) + hq)
    k, v, k_cache, v_cache, table, seq_lens = paged(lens, hkv, 128, bs, "bf16", gen)
    need = [-(-n // bs) for n in lens]
    used = {int(x) for i, n in enumerate(need) for x in table[i, :n].tolist()}
    junk = [j for j in range(k_cache.shape[0]) if j not in used]
    k_cache[junk] = float("nan")
    v_cache[junk] = float("nan")
    for i, n in enumerate(need):
        table[i, n:] = junk[0] if junk else -1
    q = rnd((len(lens), hq, 128), "bf16", gen)
    out = torch.full_like(q, float("nan"))
    S.attention_decode(q, k_cache, v_cache, table, seq_lens, num_splits=1, out=out, config=dict(STATIC=static))
    ref = decode_ref(q, k, v, seq_lens)
    ref[seq_lens == 0] = 0
    assert rel(out, ref) <= TOL["bf16"]
    assert (out[seq_lens == 0] == 0).all()


def test_decode_f16_int64_cupy():
    cp = pytest.importorskip("cupy")
    gen = torch.Generator(device="cuda").manual_seed(11)
    lens = [333, 20, 129]
    k, v, k_cache, v_cache, table, seq_lens = paged(lens, 4, 128, 16, "f16", gen)
    q = rnd((3, 16, 128), "f16", gen)
    o = S.attention_decode(cp.asarray(q), cp.asarray(k_cache), cp.asarray(v_cache), cp.asarray(table.long()),
                           cp.asarray(seq_lens.long()), scale=0.1)
    assert isinstance(o, cp.ndarray)
    assert rel(torch.as_tensor(o, device="cuda"), decode_ref(q, k, v, seq_lens, scale=0.1)) <= TOL["f16"]


def test_decode_cuda_graph_replay():
    """Captured once, replayed with other lengths (as an engine's decode graph is)."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    lens = [700, 1500, 64, 999]
    k, v, k_cache, v_cache, table, seq_lens = paged(lens, 8, 128, 16, "bf16", gen)
    q = rnd((4, 40, 128), "bf16", gen)
    out = torch.empty_like(q)
    S.attention_decode(q, k_cache, v_cache, table, seq_lens, out=out)   # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        S.attention_decode(q, k_cache, v_cache, table, seq_lens, out=out)
    for new in ([700, 1500, 64, 999], [1, 1499, 63, 500]):
        seq_lens.copy_(torch.tensor(new, dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel(out, decode_ref(q, k, v, seq_lens)) <= TOL["bf16"]

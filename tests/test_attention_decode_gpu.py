"""GPU: tilex.stdlib.attention_decode against torch SDPA over GQA ratios, block sizes, head sizes and split counts.

A shuffled paged bf16 cache (junk blocks and junk table entries past each sequence) holding odd per-sequence
lengths (1, block multiples and not, a long one); SDPA in f32 sees the same keys contiguous with a padding mask.
Outputs and split workspaces are poisoned with NaN (`_launch.POISON`), so an element no kernel wrote is caught.
Tolerance: max |out - ref| / max |ref| <= 1e-2 (bf16 inputs, f32 reference).

Run: pytest -m gpu tests/test_attention_decode_gpu.py
"""
from __future__ import annotations

import itertools

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tilex.stdlib as S  # noqa: E402
from tilex.stdlib import _launch as L  # noqa: E402
from tilex.stdlib import decode_model as DM  # noqa: E402

TOL = 1e-2


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    monkeypatch.setattr(L, "POISON", True, raising=False)
    yield
    torch.cuda.synchronize()


def _paged(lens, hkv, d, bs, gen):
    """Contiguous K/V [B, Hkv, Lmax, D] and the same tokens in a shuffled paged cache with junk elsewhere."""
    b, lmax = len(lens), max(max(lens), 1)
    k = torch.randn((b, hkv, lmax, d), generator=gen, device="cuda").to(torch.bfloat16)
    v = torch.randn((b, hkv, lmax, d), generator=gen, device="cuda").to(torch.bfloat16)
    need = [-(-n // bs) for n in lens]
    maxb = max(max(need), 1) + 1
    nb = sum(need) + 5
    perm = torch.randperm(nb, generator=torch.Generator().manual_seed(nb)).tolist()
    k_cache = torch.randn((nb, bs, hkv, d), generator=gen, device="cuda").to(torch.bfloat16)
    v_cache = torch.randn((nb, bs, hkv, d), generator=gen, device="cuda").to(torch.bfloat16)
    table = torch.randint(-3, 2 * nb, (b, maxb), dtype=torch.int32)
    at = 0
    for i, n in enumerate(lens):
        blocks = perm[at:at + need[i]]
        at += need[i]
        table[i, :need[i]] = torch.tensor(blocks, dtype=torch.int32)
        t = torch.arange(n, device="cuda")
        blk = torch.tensor(blocks, dtype=torch.long, device="cuda")[t // bs] if n else t
        k_cache[blk, t % bs] = k[i, :, :n].transpose(0, 1)   # token t: row t % bs of its sequence's block t // bs
        v_cache[blk, t % bs] = v[i, :, :n].transpose(0, 1)
    return k, v, k_cache, v_cache, table.cuda(), torch.tensor(lens, dtype=torch.int32, device="cuda")


def _ref(q, k, v, lens):
    g = q.shape[1] // k.shape[1]
    mask = torch.arange(k.shape[2], device="cuda")[None, :] < lens[:, None]
    kk, vv = k.repeat_interleave(g, dim=1).float(), v.repeat_interleave(g, dim=1).float()
    o = F.scaled_dot_product_attention(q[:, :, None, :].float(), kk, vv, attn_mask=mask[:, None, None, :])
    return o[:, :, 0]


def _rel(out, ref):
    out, ref = out.double(), ref.double()
    assert out.shape == ref.shape
    assert torch.isfinite(out).all(), "output has NaN/inf: some element was not written"
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


LENS = [1, 31, 333, 1000, 17, 4097]  # odd lengths, one token, a block multiple plus one


@pytest.mark.parametrize("splits", [None, 5])
@pytest.mark.parametrize("g,bs,d", list(itertools.product((1, 4, 6, 8), (16, 32), (64, 128))),
                         ids=lambda x: str(x))
def test_decode_gqa_block_head_vs_sdpa(g, bs, d, splits):
    hkv = 2
    gen = torch.Generator(device="cuda").manual_seed(g * 1000 + bs * 10 + d)
    k, v, k_cache, v_cache, table, lens = _paged(LENS, hkv, d, bs, gen)
    q = torch.randn((len(LENS), g * hkv, d), generator=gen, device="cuda").to(torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    o = S.attention_decode(q, k_cache, v_cache, table, lens, num_splits=splits, out=out)
    assert o is out
    assert _rel(o, _ref(q, k, v, lens)) <= TOL


# the grid's shapes (bench_shapes' decode family) at an odd length per sequence, the wrapper's own choice
GRID = [(16, 12, 2, 128, 32767), (16, 40, 8, 128, 4095), (256, 64, 8, 128, 127), (1, 32, 8, 128, 129),
        (4, 28, 4, 128, 999), (1, 8, 4, 256, 4095), (64, 14, 2, 64, 2047), (1, 32, 8, 128, 32767)]


@pytest.mark.parametrize("b,hq,hkv,d,n", GRID, ids=lambda x: str(x))
def test_decode_grid_shapes_vs_sdpa(b, hq, hkv, d, n):
    gen = torch.Generator(device="cuda").manual_seed(b + hq + n)
    lens = [n - (i * 7919) % max(1, n // 2) for i in range(b)]   # mostly near n, all different
    k, v, k_cache, v_cache, table, lens_t = _paged(lens, hkv, d, 16, gen)
    q = torch.randn((b, hq, d), generator=gen, device="cuda").to(torch.bfloat16)
    o = S.attention_decode(q, k_cache, v_cache, table, lens_t)
    assert _rel(o, _ref(q, k, v, lens_t)) <= TOL


def test_decode_fast_path_replay_matches_full_path():
    """The per-layout fast path (recorded, then replayed with new data in the same buffers) against SDPA."""
    monkey = pytest.MonkeyPatch()
    monkey.setattr(L, "POISON", False)   # the fast path is off while poisoning
    try:
        gen = torch.Generator(device="cuda").manual_seed(7)
        lens = [700, 1500, 64, 999]
        k, v, k_cache, v_cache, table, lens_t = _paged(lens, 8, 128, 16, gen)
        q = torch.randn((4, 40, 128), generator=gen, device="cuda").to(torch.bfloat16)
        for _ in range(3):
            q.copy_(torch.randn(q.shape, generator=gen, device="cuda").to(torch.bfloat16))
            o = S.attention_decode(q, k_cache, v_cache, table, lens_t)
            assert _rel(o, _ref(q, k, v, lens_t)) <= TOL
    finally:
        monkey.undo()


# session 20's variants: a one- and a two-warp tile (a warp holds its block's whole softmax state; swept, not in the
# plan) at odd lengths, as one kernel (one share: DIRECT) and split in 7 (the combine); and
# attention_decode_split_qs (q streamed with K and V, the plan's kernel for STATIC walks) over one-share tables of
# <= 256 tokens and split in 3, with an empty sequence
WARP_TILES = [dict(BN=32, WARPS=1, STAGES=2), dict(BN=32, WARPS=2, STAGES=2)]
QS_TILES = [dict(BN=128, WARPS=8, STAGES=2), dict(BN=64, WARPS=4, STAGES=2), dict(BN=64, WARPS=4, STAGES=1),
            dict(BN=32, WARPS=2, STAGES=2)]


def _build(job):
    """Worker: one split kernel's cubin for `arch` into the shared cache (the tests below then load it)."""
    from tilex.stdlib import _launch as L2

    arch, kernel = job.pop("arch"), job.pop("kernel")
    L2.load("attention_decode", kernel=kernel, **job).kernel(kernel).cubin_for(arch)


@pytest.fixture(scope="module")
def _variants_built():
    """Build the kernels of the two tests below in parallel first (a cold cache would build them one by one);
    spawned workers, as this process already holds a CUDA context."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from tilex.runtime.nvrtc import default_arch

    base = dict(T="bf16", BS=16, GP=16, arch=default_arch())
    jobs = [dict(base, kernel="attention_decode_split", D=d, DIRECT=n == 1, STATIC=False, **t)
            for t in WARP_TILES for d in (64, 128) for n in (1, 7)]
    jobs += [dict(base, kernel="attention_decode_split_qs", D=d, DIRECT=n == 1, STATIC=n == 1, **t)
             for t in QS_TILES for d in (64, 128) for n in (1, 3)]
    try:
        with ProcessPoolExecutor(16, mp_context=multiprocessing.get_context("spawn")) as ex:
            list(ex.map(_build, jobs))
    except Exception:  # noqa: BLE001 - each test builds what is missing itself
        pass


@pytest.mark.parametrize("splits", [1, 7])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("tile", WARP_TILES, ids=lambda t: "BN{BN}_W{WARPS}_S{STAGES}".format(**t))
def test_decode_warp_tiles_vs_sdpa(tile, d, splits, _variants_built):
    hkv, g = 2, 6
    lens = [1, 31, 333, 17, 1000, 2049]
    gen = torch.Generator(device="cuda").manual_seed(d * 10 + splits)
    k, v, k_cache, v_cache, table, lens_t = _paged(lens, hkv, d, 16, gen)
    q = torch.randn((len(lens), g * hkv, d), generator=gen, device="cuda").to(torch.bfloat16)
    o = S.attention_decode(q, k_cache, v_cache, table, lens_t, num_splits=splits, config=tile)
    assert _rel(o, _ref(q, k, v, lens_t)) <= TOL


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("tile", QS_TILES, ids=lambda t: "BN{BN}_W{WARPS}_S{STAGES}".format(**t))
def test_decode_q_streamed_vs_sdpa(tile, d, splits, _variants_built):
    hkv, g = 4, 7
    lens = [0, 1, 31, 129, 200, 17]                      # a table of 14 blocks: 224 tokens
    gen = torch.Generator(device="cuda").manual_seed(d + splits)
    k, v, k_cache, v_cache, table, lens_t = _paged(lens, hkv, d, 16, gen)
    q = torch.randn((len(lens), g * hkv, d), generator=gen, device="cuda").to(torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    o = S.attention_decode(q, k_cache, v_cache, table, lens_t, num_splits=splits, config=dict(tile, QS=True), out=out)
    assert torch.equal(o[0], torch.zeros_like(o[0]))        # the empty sequence: zeros (SDPA's row is NaN)
    assert _rel(o[1:], _ref(q, k, v, lens_t)[1:]) <= TOL


@pytest.mark.parametrize("entry", sorted(DM.MEASURED.items(), key=str), ids=lambda e: f"Hkv{e[0].hkv}_D{e[0].d}")
def test_decode_measured_plans_vs_sdpa(entry):
    """decode_model.MEASURED's plans (their split counts and tiles) at odd lengths near their table width, two
    sequences."""
    sh, (ns, tile) = entry
    n = sh.width
    lens = [n - 1, n // 2 + 3]
    gen = torch.Generator(device="cuda").manual_seed(n + ns)
    k, v, k_cache, v_cache, table, lens_t = _paged(lens, sh.hkv, sh.d, sh.bs, gen)
    q = torch.randn((2, sh.g * sh.hkv, sh.d), generator=gen, device="cuda").to(torch.bfloat16)
    o = S.attention_decode(q, k_cache, v_cache, table, lens_t, num_splits=ns, config=tile)
    assert _rel(o, _ref(q, k, v, lens_t)) <= TOL

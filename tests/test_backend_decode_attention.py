"""tilex.backend's attention against a KV cache with a mask (decodeattn.py): the library's attention_decode over a
table of the keys each query row's mask allows, built on the device by the generated attention_mask_table; a float
mask with other values than 0 and -inf recomputes its marked rows with masked_attention. Against torch's SDPA on
fresh random data (CPU: the interpreter path), the pattern in compiled graphs and transformers' generate with
left padding; the causal-mask verdict of attention_prefill for a mask passed in as an input; golden sources, nvcc."""
from __future__ import annotations

import subprocess

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import tilex.backend as B  # noqa: E402,F401  (registers "tilex")
from tilex.backend import cachegen, decodeattn  # noqa: E402
from tilex.pipeline import Options  # noqa: E402
from tilex.translate import translate  # noqa: E402

from test_golden import check_golden  # noqa: E402
from test_nvcc import ARCHS  # noqa: E402

GOLDEN = __import__("pathlib").Path(__file__).parent / "golden" / "backend"


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _ref(q, k, v, mask, scale):
    g = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q.double(), k.double().repeat_interleave(g, 1),
                                          v.double().repeat_interleave(g, 1),
                                          attn_mask=mask if mask.dtype == torch.bool else mask.double(), scale=scale)


def _masks(gen, b, t, length):
    """Mask rows of every kind the table handles: random holes, a left-padded causal prefix, a row allowing
    nothing (zeros, as eager's SDPA), the whole cache."""
    allowed = torch.rand(b, 1, t, length, generator=gen) > 0.45
    allowed[0, 0, 0] = False                                     # a fully masked row
    pos = torch.arange(length)
    allowed[-1, 0, -1] = (pos >= 3) & (pos < length - 2)         # left padding + prefix
    if t > 1:
        allowed[-1, 0, 0] = True                                 # every key
    return allowed


class _Calls:
    """Counts cachegen.masked_attention calls (the per-row fallback) around the real function."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = cachegen.masked_attention

        def counted(*a, **kw):
            self.n += 1
            return real(*a, **kw)
        monkeypatch.setattr(cachegen, "masked_attention", counted)
        monkeypatch.setattr(decodeattn, "masked_attention", counted)


@pytest.mark.parametrize("t", [1, 3])
@pytest.mark.parametrize("kind", ["bool", "float", "bias"])
def test_decode_attention_matches_sdpa(kind, t, monkeypatch):
    gen = torch.Generator().manual_seed(100 + t)
    b, hq, hkv, length, d = 2, 6, 2, 37, 16                       # 37 keys: not a multiple of the table's tile
    q = torch.randn(b, t, hq, d, generator=gen).transpose(1, 2)  # HF's transposed q view
    k, v = torch.randn(b, hkv, length, d, generator=gen), torch.randn(b, hkv, length, d, generator=gen)
    allowed = _masks(gen, b, t, length)
    mask = allowed if kind == "bool" else torch.where(allowed, 0.0, float("-inf"))
    if kind == "bias":
        mask[1, 0, 0, 5] = 0.75                                   # one row with a bias value: recomputed
        mask[1, 0, 0, 6] = -2.0
    calls = _Calls(monkeypatch)
    o = decodeattn.decode_attention(q, k, v, mask, 0.3)
    ref = _ref(q, k, v, mask, 0.3)
    assert o.shape == (b, hq, t, d) and o.transpose(1, 2).is_contiguous()   # token-major, as eager's SDPA
    torch.testing.assert_close(o.double(), ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(o[0, :, 0], torch.zeros_like(o[0, :, 0]))          # the row that allows nothing
    assert calls.n == (1 if kind != "bool" else 0)


@pytest.mark.parametrize("dtype, fill", [(torch.float32, "finfo"), (torch.bfloat16, "finfo"), (torch.float16, "finfo"),
                                         (torch.bfloat16, -65504.0), (torch.float32, -65504.0)])
def test_decode_attention_finfo_min_mask_stays_on_the_library(dtype, fill, monkeypatch):
    """HF's additive masks remove keys with finfo(dtype).min, and PyTorch's cuDNN SDPA makes a bool mask additive
    with -65504 (-65536 in bf16; the mask a compiled bf16 decode step on the H200 hands over): such rows stay on
    the library kernel (lens >= 0, no double work); a row whose keys are all removed is recomputed (eager averages
    its values: every score + the fill rounds to the same number) and matches eager's SDPA."""
    gen = torch.Generator().manual_seed(31)
    b, hq, hkv, t, length, d = 2, 4, 2, 2, 29, 16
    q = torch.randn(b, t, hq, d, generator=gen).transpose(1, 2).to(dtype)
    k, v = (torch.randn(b, hkv, length, d, generator=gen).to(dtype) for _ in range(2))
    allowed = _masks(gen, b, t, length)                           # [0, 0, 0] allows no key
    value = torch.finfo(dtype).min if fill == "finfo" else fill
    mask = torch.where(allowed, 0.0, value).to(dtype)
    mv, (mb, _, mt) = cachegen._rows(mask, 4)
    seqs = b * t * hkv
    table, lens = torch.empty(seqs * length, dtype=torch.int32), torch.empty(seqs, dtype=torch.int32)
    cachegen.kernels.launch_generated(decodeattn.mask_table_source(mask.dtype), "attention_mask_table", {"BL": 16},
                                      [mv, table, lens], {"nq": t, "hkv": hkv, "mb": mb, "mt": mt,
                                                          "kb": hkv * length, "kh": length})
    want = [int(allowed[s // (t * hkv), 0, (s // hkv) % t].sum()) for s in range(seqs)]
    assert lens.tolist() == [-1 if n == 0 else n for n in want]  # only the row allowing nothing is recomputed
    o = decodeattn.decode_attention(q, k, v, mask, 0.3)
    ref = _ref(q, k, v, mask.float(), 0.3)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    rest = torch.ones(b, t, dtype=torch.bool)
    rest[0, 0] = False                                            # every row but the one allowing nothing
    torch.testing.assert_close(o.double().transpose(1, 2)[rest], ref.transpose(1, 2)[rest], rtol=tol, atol=tol)
    # the row allowing nothing averages its values with weights exp(s + fill - max) rounded at |fill|: f32's ulp
    # at 65504 is 2^-8, so each weight is within 0.4% of the float64 reference's (finfo.min: all exactly equal)
    full = 5e-3 if (dtype, fill) == (torch.float32, -65504.0) else tol
    torch.testing.assert_close(o.double()[0, :, 0], ref[0, :, 0], rtol=full, atol=full)
    assert not torch.equal(o[0, :, 0].float(), torch.zeros_like(o[0, :, 0].float()))  # eager's average, not zeros


def test_decode_attention_table_and_lens():
    """The table kernel's output: each sequence's allowed cache rows in key order, lens their count; -1 for
    a float row with a bias value."""
    gen = torch.Generator().manual_seed(7)
    b, hkv, t, length = 2, 3, 2, 21
    allowed = torch.rand(b, 1, t, length, generator=gen) > 0.5
    mask = torch.where(allowed, 0.0, float("-inf"))
    mask[1, 0, 1, 4] = 1.0
    seqs = b * t * hkv
    table = torch.full((seqs * length,), -7, dtype=torch.int32)
    lens = torch.empty(seqs, dtype=torch.int32)
    mv, (mb, _, mt) = cachegen._rows(mask, 4)
    kb, kh = hkv * length, length
    cachegen.kernels.launch_generated(decodeattn.mask_table_source(mask.dtype), "attention_mask_table", {"BL": 16},
                                      [mv, table, lens], {"nq": t, "hkv": hkv, "mb": mb, "mt": mt, "kb": kb, "kh": kh})
    table = table.view(seqs, length)
    for bi in range(b):
        for ti in range(t):
            for h in range(hkv):
                s = (bi * t + ti) * hkv + h
                keys = torch.nonzero(allowed[bi, 0, ti]).flatten()
                if bi == 1 and ti == 1:
                    assert lens[s] == -1
                    continue
                assert lens[s] == len(keys)
                assert torch.equal(table[s, :len(keys)], (bi * kb + h * kh + keys).to(torch.int32))


def test_decode_attention_layouts_it_does_not_take_use_masked_attention(monkeypatch):
    """A mask that differs between heads, and k/v of different layouts: masked_attention, values right."""
    gen = torch.Generator().manual_seed(8)
    q = torch.randn(1, 4, 1, 32, generator=gen)
    k, v = torch.randn(1, 2, 20, 32, generator=gen), torch.randn(1, 2, 20, 32, generator=gen)
    per_head = torch.rand(1, 4, 1, 20, generator=gen) > 0.3
    per_head[..., 0] = True
    calls = _Calls(monkeypatch)
    o = decodeattn.decode_attention(q, k, v, per_head, 0.2)
    torch.testing.assert_close(o.double(), _ref(q, k, v, per_head, 0.2), rtol=1e-5, atol=1e-5)
    assert calls.n == 1
    vt = torch.randn(1, 20, 2, 32, generator=gen).transpose(1, 2)   # another layout than k's
    mask = per_head[:, :1]
    o = decodeattn.decode_attention(q, k, vt, mask, 0.2)
    torch.testing.assert_close(o.double(), _ref(q, k, vt, mask, 0.2), rtol=1e-5, atol=1e-5)
    assert calls.n == 2


def _cache_step(mask_kind):
    def f(q, k, v, kc, vc, pos, mask):
        kc.index_copy_(2, pos, k)
        vc.index_copy_(2, pos, v)
        kr = kc[:, :, None].expand(2, 2, 2, 24, 16).reshape(2, 4, 24, 16)
        vr = vc[:, :, None].expand(2, 2, 2, 24, 16).reshape(2, 4, 24, 16)
        m = mask if mask_kind == "bool" else torch.where(mask, 0.0, float("-inf"))
        return F.scaled_dot_product_attention(q, kr, vr, attn_mask=m)
    return f


@pytest.mark.parametrize("mask_kind", ["bool", "where"])
def test_compiled_cache_attention_is_attention_decode(mask_kind, monkeypatch):
    """SDPA against a cache written by index_copy_ with a mask input: attention_decode, values as eager's over
    three calls with new mask contents (a prefix, left padding, holes); a float mask the graph builds from a bool
    (where(b, 0, -inf)) is read as the bool: no masked_attention pass."""
    gen = torch.Generator().manual_seed(9)
    f = _cache_step(mask_kind)
    kc, vc = torch.randn(2, 2, 24, 16, generator=gen), torch.randn(2, 2, 24, 16, generator=gen)
    ekc, evc = kc.clone(), vc.clone()
    progs = []
    cf = torch.compile(f, backend="tilex", options={"programs": progs, "strict": True})
    calls = _Calls(monkeypatch)
    mask = torch.zeros(2, 1, 1, 24, dtype=torch.bool)
    for step, p in enumerate((5, 6, 7)):
        pos = torch.tensor([p])
        mask.zero_()
        if step == 0:
            mask[..., : p + 1] = True
        elif step == 1:
            mask[0, ..., 2: p + 1] = True
            mask[1, ..., : p + 1] = True
        else:
            mask[..., : p + 1] = torch.rand(2, 1, 1, p + 1, generator=gen) > 0.5
            mask[..., p] = True
        q = torch.randn(2, 4, 1, 16, generator=gen)
        k, v = torch.randn(2, 2, 1, 16, generator=gen), torch.randn(2, 2, 1, 16, generator=gen)
        with torch.no_grad():
            out = cf(q, k, v, kc, vc, pos, mask)
        ref = f(q, k, v, ekc, evc, pos, mask)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    assert torch.equal(kc, ekc) and torch.equal(vc, evc)
    (p,) = progs
    assert [s.label for s in p.steps if s.kind == "library"].count("attention_decode") == 1
    assert p.fallbacks() == [] and calls.n == 0


def test_table_too_big_or_odd_head_size_stays_masked_attention(monkeypatch):
    """A query whose key table would pass MAX_TABLE_BYTES (a long prefill into the cache; the limit lowered here
    to 9 query rows of this shape) and a head size the library lacks: masked_attention."""
    gen = torch.Generator().manual_seed(10)
    monkeypatch.setattr(decodeattn, "MAX_TABLE_BYTES", 4 * 9 * 2 * 40)

    def f(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for t, d in ((10, 16), (1, 24)):
        q = torch.randn(1, 2, t, d, generator=gen)
        k, v = torch.randn(1, 2, 40, d, generator=gen), torch.randn(1, 2, 40, d, generator=gen)
        mask = torch.rand(1, 1, t, 40, generator=gen) > 0.3
        mask[..., 0] = True
        progs = []
        cf = torch.compile(f, backend="tilex", options={"programs": progs, "strict": True})
        with torch.no_grad():
            out = cf(q, k, v, mask)
        torch.testing.assert_close(out, f(q, k, v, mask), rtol=1e-5, atol=1e-5)
        assert [s.label for s in progs[0].steps if s.kind == "library"] == ["masked_attention"]
        torch._dynamo.reset()


# ------------------------------------------------- attention_prefill's causal verdict for an input mask

def test_causal_verdict_of_an_input_mask_is_not_stale():
    """A mask passed in as an input and reused with new contents: the causal check reads it again (it cached
    its verdict by the mask's id: a causal first call made the second, non-causal one run causal)."""
    gen = torch.Generator().manual_seed(11)

    def f(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    q, k, v = (torch.randn(1, 2, 12, 16, generator=gen) for _ in range(3))
    # an additive mask reaches SDPA as the input itself (a bool one is made additive in the graph: a new value)
    mask = torch.where(torch.ones(12, 12, dtype=torch.bool).tril(), 0.0, float("-inf"))[None, None].clone()
    progs = []
    cf = torch.compile(f, backend="tilex", options={"programs": progs})
    with torch.no_grad():
        torch.testing.assert_close(cf(q, k, v, mask), f(q, k, v, mask), rtol=1e-5, atol=1e-5)
        mask[..., 0, 1] = 0.0                                    # no longer causal: the same tensor object
        mask[..., 5, :3] = float("-inf")
        torch.testing.assert_close(cf(q, k, v, mask), f(q, k, v, mask), rtol=1e-5, atol=1e-5)
    (p,) = progs
    step = next(s for s in p.steps if s.kind == "library" and s.label == "attention_prefill")
    assert step.calls == 2 and step.fallbacks == 1


# ------------------------------------------------------------------- generated sources: golden, nvcc

SOURCES = {
    "attention_mask_table_bool": (lambda: decodeattn.mask_table_source(torch.bool), {"BL": 256}),
    "attention_mask_table_float": (lambda: decodeattn.mask_table_source(torch.bfloat16), {"BL": 1024}),
    "attention_q_rows": (lambda: decodeattn.q_rows_source(torch.bfloat16), {"DP": 128}),
    "masked_attention_rows": (lambda: decodeattn.masked_rows_source(torch.bfloat16, torch.bfloat16),
                              {"BN": 64, "DP": 128}),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_decode_attention_golden_tile(name, update_golden):
    check_golden(GOLDEN / f"{name}.tile", SOURCES[name][0](), update_golden)


@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_decode_attention_kernel_builds_with_nvcc(name, tmp_path, nvcc):
    src, defines = SOURCES[name]
    t = translate(src(), f"{name}.tile", Options(defines=defines, arch="sm_90a"))
    (tmp_path / "k.cu").write_text(t.cuda)
    proc = subprocess.run([nvcc, *ARCHS["sm_90a"], "k.cu", "-o", "k.cubin"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


# the library kernel at the configurations the backend's table (blocks of one token) asks for
LIBRARY_VARIANTS = [
    dict(T="bf16", D=128, BS=1, GP=16, BN=64, DIRECT=False, STAGES=2, WARPS=4),
    dict(T="bf16", D=128, BS=1, GP=16, BN=128, DIRECT=True, STATIC=True, STAGES=2, WARPS=8),
    dict(T="f32", D=128, BS=1, GP=16, BN=64, DIRECT=False, STAGES=2, WARPS=4),
    dict(T="f32", D=16, BS=1, GP=16, BN=64, DIRECT=True, STATIC=True, STAGES=1, WARPS=4),
]


@pytest.mark.nvcc
@pytest.mark.parametrize("defines", LIBRARY_VARIANTS, ids=lambda d: ",".join(f"{k}={x}" for k, x in d.items()))
def test_library_decode_kernel_with_one_token_blocks_builds_with_nvcc(defines, tmp_path, nvcc):
    from tilex.stdlib import _launch

    t = translate(_launch.source("attention_decode"), "attention_decode", Options(defines=defines, arch="sm_90a"))
    (tmp_path / "k.cu").write_text(t.cuda)
    proc = subprocess.run([nvcc, *ARCHS["sm_90a"], "k.cu", "-o", "k.cubin"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


# ------------------------------------------------------------------ transformers' generate, left padding

def _generate(model, ids, attention_mask, compiled: bool, tokens: int):
    progs = []
    fwd = model.forward
    if compiled:
        model.forward = torch.compile(fwd, backend="tilex", options={"programs": progs, "strict": True})
    try:
        with torch.no_grad():
            out = model.generate(ids, attention_mask=attention_mask, max_new_tokens=tokens, do_sample=False,
                                 cache_implementation="static", output_logits=True, return_dict_in_generate=True,
                                 pad_token_id=0)
    finally:
        model.forward = fwd
    return out.sequences, torch.stack(out.logits), progs


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_generate_left_padded_batch_on_attention_decode(arch):
    """A batch with left padding (HF's decode masks are then no prefix: [0, 0, 1, 1, ..., 0]): every decode step's
    attention is attention_decode; greedy tokens equal eager's, logits within 1e-4 (CPU, the interpreter path)."""
    pytest.importorskip("transformers")
    from test_backend_hf import rel_err, tiny

    model = tiny(arch)
    ids = torch.randint(1, 96, (2, 6), generator=torch.Generator().manual_seed(31))
    attention_mask = torch.ones_like(ids)
    attention_mask[0, :3] = 0
    ids[0, :3] = 0
    ref_seq, ref_logits, _ = _generate(model, ids, attention_mask, False, 4)
    seq, logits, progs = _generate(model, ids, attention_mask, True, 4)
    assert torch.equal(seq, ref_seq)
    assert rel_err(logits, ref_logits) < 1e-4
    prefill, decode = progs
    assert [s.label for s in decode.steps if s.kind == "library"].count("attention_decode") == 2
    # the prefill into the cache (6 query rows) runs on it too
    assert [s.label for s in prefill.steps if s.kind == "library"].count("attention_decode") == 2
    assert all(p.fallbacks() == [] for p in progs)


# ------------------------------------------------------------------------------ GPU

def _rel(a, b) -> float:
    return float((a.double() - b).abs().max() / b.abs().max())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 1e-2), (torch.float32, 1e-4)])
@pytest.mark.parametrize("t,d", [(1, 128), (2, 64)])
@pytest.mark.parametrize("kind", ["bool", "float", "bias"])
def test_decode_attention_on_cuda_matches_sdpa(kind, t, d, dtype, tol):
    """Odd sizes (B 3, Hq 12, Hkv 4, 301 keys) on the GPU against SDPA in float64 (max error over max |ref|)."""
    gen = torch.Generator("cuda").manual_seed(200 + t)
    b, hq, hkv, length = 3, 12, 4, 301
    q = torch.randn(b, t, hq, d, generator=gen, device="cuda").to(dtype).transpose(1, 2)
    k = torch.randn(b, hkv, length, d, generator=gen, device="cuda").to(dtype)
    v = torch.randn(b, hkv, length, d, generator=gen, device="cuda").to(dtype)
    allowed = _masks(torch.Generator().manual_seed(5), b, t, length).cuda()
    mask = allowed if kind == "bool" else torch.where(allowed, 0.0, float("-inf")).to(dtype)
    if kind == "bias":
        mask[1, 0, 0, 5] = 0.75
    o = decodeattn.decode_attention(q, k, v, mask, d ** -0.5)
    ref = _ref(q, k, v, mask, d ** -0.5)
    err = _rel(o, ref)
    print(f"decode_attention {kind} t={t} d={d} {dtype}: max rel err {err:.2e}")
    assert err <= tol
    assert (o[0, :, 0] == 0).all()


@pytest.mark.gpu
def test_decode_attention_replays_in_a_cuda_graph_with_new_masks():
    """Captured once, replayed with new mask contents (the table is rebuilt on the device each replay)."""
    gen = torch.Generator("cuda").manual_seed(210)
    b, hq, hkv, length, d = 2, 28, 4, 176, 128
    q = torch.randn(b, 1, hq, d, generator=gen, device="cuda").to(torch.bfloat16).transpose(1, 2)
    k = torch.randn(b, hkv, length, d, generator=gen, device="cuda").to(torch.bfloat16)
    v = torch.randn(b, hkv, length, d, generator=gen, device="cuda").to(torch.bfloat16)
    mask = torch.zeros(b, 1, 1, length, dtype=torch.bool, device="cuda")
    mask[..., :50] = True
    out = {}

    def run():
        out["o"] = decodeattn.decode_attention(q, k, v, mask, d ** -0.5)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for used, pad in ((51, 0), (120, 4), (176, 9)):
        mask.zero_()
        mask[..., pad:used] = True
        graph.replay()
        torch.cuda.synchronize()
        err = _rel(out["o"], _ref(q, k, v, mask, d ** -0.5))
        print(f"replay used={used} pad={pad}: max rel err {err:.2e}")
        assert err <= 1e-2

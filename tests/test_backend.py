"""tilex.backend on CPU: pattern matching, fusion grouping, generated .tile (golden files, nvcc
builds), strict mode, and every lowered program checked against torch eager on fresh random data
(the CPU path runs the same program through the NumPy interpreter)."""
from __future__ import annotations

import subprocess

import pytest

torch = pytest.importorskip("torch")  # a venv without torch (CI's today) skips the backend tests

import torch.nn.functional as F  # noqa: E402

import tilex.backend as B  # noqa: E402,F401  (registers "tilex")
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


def compiled(fn, *args, **options):
    """(result of fn compiled with the tilex backend, the Programs it lowered)."""
    progs = []
    cfn = torch.compile(fn, backend="tilex", options={"programs": progs, **options}, dynamic=False)
    with torch.no_grad():
        out = cfn(*args)
    return out, progs


def kinds(prog):
    return [s.kind for s in prog.steps if s.kind not in ("view", "folded")]


def labels(prog, kind):
    return [s.label for s in prog.steps if s.kind == kind]


def close(a, b, rtol=1e-5, atol=1e-6):
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


# ----------------------------------------------------------------- library patterns

def test_linear_addmm_mm_bmm():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 24, generator=g)
    w = torch.randn(16, 24, generator=g)
    b = torch.randn(16, generator=g)
    m = torch.randn(24, 8, generator=g)
    a3 = torch.randn(3, 5, 24, generator=g)
    b3 = torch.randn(3, 24, 8, generator=g)

    mb = torch.randn(3, 8, 24, generator=g)
    x30, m30, b30 = torch.randn(5, 30, generator=g), torch.randn(30, 19, generator=g), torch.randn(19, generator=g)

    def f(x, w, b, m, a3, b3, mb, x30, m30, b30):  # x @ m and the bmms read their operands as stored (no m.T copy)
        return (F.linear(x, w, b), F.linear(x, w), x @ m, torch.bmm(a3, b3), a3 @ mb.transpose(1, 2),
                torch.addmm(b30, x30, m30))
    out, (p,) = compiled(f, x, w, b, m, a3, b3, mb, x30, m30, b30)
    for o, r in zip(out, f(x, w, b, m, a3, b3, mb, x30, m30, b30)):
        close(o, r, rtol=1e-4, atol=1e-4)
    assert labels(p, "library") == ["linear", "linear", "matmul", "bmm", "bmm", "matmul"]
    assert p.fallbacks() == []


class HFRMSNorm(torch.nn.Module):
    """transformers' LlamaRMSNorm / Qwen2RMSNorm, verbatim in structure."""

    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def test_rms_norm_pattern():
    torch.manual_seed(2)
    norm = HFRMSNorm(40).eval()
    x = torch.randn(3, 7, 40)
    out, (p,) = compiled(norm, x)
    close(out, norm(x))
    assert labels(p, "library") == ["rms_norm"] and kinds(p) == ["library"]


def test_rms_norm_bf16_cast_pattern():
    torch.manual_seed(3)
    norm = HFRMSNorm(64).eval().to(torch.bfloat16)
    x = torch.randn(4, 64).to(torch.bfloat16)
    out, (p,) = compiled(norm, x)
    ref = HFRMSNorm.forward(norm.float(), x.float())  # f32 reference; kernel rounds once
    assert labels(p, "library") == ["rms_norm"]
    close(out.float(), ref, rtol=2e-2, atol=2e-2)


def test_softmax_layer_norm_embedding_argmax():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 33, generator=g)
    w, b = torch.randn(33, generator=g), torch.randn(33, generator=g)
    table = torch.randn(50, 16, generator=g)
    ids = torch.randint(0, 50, (2, 5), generator=g)

    def f(x, w, b, table, ids):
        return (torch.softmax(x, -1), F.layer_norm(x, (33,), w, b, 1e-5), F.embedding(ids, table),
                torch.argmax(x, -1))
    out, (p,) = compiled(f, x, w, b, table, ids)
    ref = f(x, w, b, table, ids)
    for o, r in zip(out[:3], ref[:3]):
        close(o, r, rtol=1e-5, atol=1e-5)
    assert torch.equal(out[3], ref[3])
    assert sorted(labels(p, "library")) == ["argmax", "embedding", "layer_norm", "softmax"]


def repeat_kv(h, n_rep):
    """transformers' repeat_kv."""
    b, hkv, s, d = h.shape
    return h[:, :, None, :, :].expand(b, hkv, n_rep, s, d).reshape(b, hkv * n_rep, s, d)


@pytest.mark.parametrize("masked", [False, True])
def test_sdpa_causal_gqa(masked):
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 8, 4, 16, generator=g)      # [B, S, Hq, D] then transposed, as HF does
    k = torch.randn(2, 8, 2, 16, generator=g)
    v = torch.randn(2, 8, 2, 16, generator=g)

    def f(q, k, v):
        qt, kt, vt = q.transpose(1, 2), repeat_kv(k.transpose(1, 2), 2), repeat_kv(v.transpose(1, 2), 2)
        if masked:
            mask = torch.ones(8, 8, dtype=torch.bool).tril()[None, None]
            return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask)
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
    out, (p,) = compiled(f, q, k, v)
    close(out, f(q, k, v), rtol=1e-4, atol=1e-5)
    assert "attention_prefill" in labels(p, "library")
    assert p.fallbacks() == [] and all(s.fallbacks == 0 for s in p.steps)


@pytest.mark.parametrize("fill, taken", [(torch.finfo(torch.float32).min, True), (float("-inf"), True),
                                         (-65504.0, True), (-1e4, False)])
def test_sdpa_additive_causal_mask(fill, taken):
    """HF's additive causal mask: where(tril, 0, finfo(dtype).min). A removed key's value at or below
    patterns_attention.MASKED_AT contributes exactly 0, so the causal kernel runs; -1e4 does not remove a key
    exactly (exp(-1e4) underflows only relative to the scores), so the check declines it and eager SDPA runs."""
    g = torch.Generator().manual_seed(15)
    q, k, v = (torch.randn(1, 2, 8, 16, generator=g) for _ in range(3))
    tril = torch.ones(8, 8, dtype=torch.bool).tril()[None, None]

    def f(q, k, v):
        mask = torch.zeros(8, 8).masked_fill(~tril, fill)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out, (p,) = compiled(f, q, k, v)
    close(out, f(q, k, v), rtol=1e-4, atol=1e-5)
    step = next(s for s in p.steps if s.kind == "library" and s.label == "attention_prefill")
    assert step.fallbacks == (0 if taken else 1)


def test_sdpa_non_causal_mask_runs_eager_and_agrees():
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 2, 8, 16, generator=g) for _ in range(3))
    mask = torch.ones(8, 8, dtype=torch.bool)
    mask[:, 5:] = False                           # not causal: the kernel's check declines it

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.clone())
    out, (p,) = compiled(f, q, k, v)
    close(out, f(q, k, v), rtol=1e-5, atol=1e-6)
    step = next(s for s in p.steps if s.kind == "library" and s.label == "attention_prefill")
    assert step.fallbacks == 1


def test_gated_mlp_pattern():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 3, 32, generator=g)
    wg, wu, wd = torch.randn(48, 32, generator=g), torch.randn(48, 32, generator=g), torch.randn(32, 48, generator=g)

    def f(x):
        return F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)
    out, (p,) = compiled(f, x)
    close(out, f(x), rtol=1e-4, atol=1e-4)
    assert labels(p, "library") == ["gated_mlp", "linear"] and p.fallbacks() == []


# ------------------------------------------------------------------- fusion groups

def _generated(p):
    return [s.kernel for s in p.steps if s.kind == "generated"]


def test_elementwise_chain_is_one_group_with_broadcasts():
    g = torch.Generator().manual_seed(8)
    x = torch.randn(3, 4, 40, generator=g)
    w = torch.randn(40, generator=g)         # vec
    c = torch.randn(1, 4, 40, generator=g)   # gather (leading dim broadcast)
    s = torch.randn(3, 4, 1, generator=g)    # col

    def f(x, w, c, s):
        return (torch.sigmoid(x) * w + c) / (s.abs() + 1.0) - x.to(torch.bfloat16).to(torch.float32)
    out, (p,) = compiled(f, x, w, c, s)
    close(out, f(x, w, c, s), rtol=1e-5, atol=1e-5)
    (k,) = _generated(p)
    assert kinds(p) == ["generated"]
    assert sorted(op.rows + "/" + op.last for op in k.inputs) == ["gather/N", "rows/1", "rows/N", "vec/N"]


def test_row_reductions_fuse_with_their_consumers():
    g = torch.Generator().manual_seed(9)
    x = torch.randn(5, 37, generator=g)

    def f(x):  # a hand-written softmax, minus the row mean: max, sum and mean inside one kernel
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True) - x.mean(-1, keepdim=True), e
    out, (p,) = compiled(f, x)
    for o, r in zip(out, f(x)):
        close(o, r)
    (k,) = _generated(p)
    assert k.has_reduction and len(k.outputs) == 2


def test_no_cycle_through_a_library_kernel():
    g = torch.Generator().manual_seed(10)
    x = torch.randn(4, 16, generator=g)
    w = torch.randn(16, 16, generator=g)

    def f(x):
        a = x * 2.0 + 1.0
        return a * F.linear(a, w)      # the mul cannot join a's group (linear sits between): linear's epilogue
    out, (p,) = compiled(f, x)
    close(out, f(x), rtol=1e-5, atol=1e-5)
    assert kinds(p) == ["generated", "library"] and p.steps[-1].match.kernel.startswith("linear + epilogue")

    def h(x):  # the product read twice outside one group (the mul, and the output): no epilogue
        a = x * 2.0 + 1.0
        y = F.linear(a, w)
        return a * y, y
    out, (p,) = compiled(h, x)
    for o, r in zip(out, h(x)):
        close(o, r, rtol=1e-5, atol=1e-5)
    assert kinds(p) == ["generated", "library", "generated"]


def test_strict_reports_eager_nodes():
    x = torch.randn(4, 8)

    def f(x):
        return torch.cat([x, x.flip(-1)], -1) * 2.0
    with pytest.raises(Exception, match="strict=True.*no tilex kernel: .*aten.flip.default"):
        compiled(f, x, strict=True)
    torch._dynamo.reset()
    out, (p,) = compiled(f, x)
    close(out, f(x))
    assert {t for _, t in p.fallbacks()} == {"aten.flip.default"}   # the cat is fused


def rotate_half(x):
    """transformers' rotate_half."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def test_rotary_is_one_kernel_reading_a_transposed_view():
    g = torch.Generator().manual_seed(11)
    q = torch.randn(2, 6, 3, 16, generator=g)      # [B, S, H, D]: read as [B, H, S, D] through strides
    cos, sin = torch.randn(1, 1, 6, 16, generator=g), torch.randn(1, 1, 6, 16, generator=g)

    def f(q, cos, sin):
        qt = q.transpose(1, 2)
        return qt * cos + rotate_half(qt) * sin
    out, (p,) = compiled(f, q, cos, sin)
    close(out, f(q, cos, sin))
    (k,) = _generated(p)
    assert kinds(p) == ["generated"] and p.fallbacks() == []
    step = next(s for s in p.steps if s.kind == "generated")
    assert step.copies == 0 and {op.rows for op in k.inputs} == {"gather"}
    # stored in eager's layout (token-major, as q is): attention reading q.transpose(1, 2) needs no copy; the
    # group iterates in that order ([B, S, H, D]), so its rows are stored consecutively
    assert k.perm == (0, 2, 1, 3) and [op.rows for op in k.outputs] == ["rows"]
    assert out.stride() == f(q, cos, sin).stride() and out.transpose(1, 2).is_contiguous()


@pytest.mark.parametrize("shape,perm", [((2, 5, 3, 24), (0, 2, 1, 3)), ((3, 1, 4, 40), (2, 0, 1, 3)),
                                        ((2, 3, 4, 5, 16), (0, 3, 1, 2, 4)), ((1, 7, 1, 9), (0, 2, 1, 3))])
def test_elementwise_over_a_permuted_view_keeps_eager_strides(shape, perm):
    """A group over a dense permutation iterates in its output's storage order (eager's layout), at odd sizes,
    several leading dims and size-1 dims, a bias read as a vec; values and strides against eager."""
    g = torch.Generator().manual_seed(13)
    x = torch.randn(shape, generator=g)
    b = torch.randn(x.permute(perm).shape[-1], generator=g)

    def f(x, b):
        return torch.sigmoid(x.permute(perm)) * 2.0 + b
    out, (p,) = compiled(f, x, b)
    ref = f(x, b)
    close(out, ref)
    assert (_generated(p)[0].perm is None) == ref.is_contiguous()   # size-1 dims can leave it contiguous
    assert out.shape == ref.shape
    assert [st for st, n in zip(out.stride(), out.shape) if n > 1] == [st for st, n in zip(ref.stride(), ref.shape)
                                                                     if n > 1]   # a size-1 dim's stride is free


def test_cat_of_inputs_along_the_last_dim():
    g = torch.Generator().manual_seed(12)
    a, b = torch.randn(4, 5, generator=g), torch.randn(4, 11, generator=g)

    def f(a, b):
        return torch.cat([a, b * 2.0], -1).exp()
    out, (p,) = compiled(f, a, b)
    close(out, f(a, b))
    assert kinds(p) == ["generated", "generated"] and p.fallbacks() == []


def test_unknown_option_is_an_error():
    with pytest.raises(Exception, match="unknown option 'strickt'"):
        compiled(lambda x: x + 1, torch.randn(3), strickt=True)


# -------------------------------------------------- generated source: golden files, nvcc

GOLDEN_CASES = {
    "broadcast_chain": (lambda x, w, c, s: (torch.sigmoid(x) * w + c) / (s.abs() + 1.0),
                        [(3, 4, 40), (40,), (1, 4, 40), (3, 4, 1)]),
    "rotary": (lambda q, c, s: q.transpose(1, 2) * c + rotate_half(q.transpose(1, 2)) * s,
               [(2, 6, 3, 16), (1, 1, 6, 16), (1, 1, 6, 16)]),
    "softmax_rows": (lambda x: (lambda e: e / e.sum(-1, keepdim=True))(torch.exp(x - x.amax(-1, keepdim=True))),
                     [(5, 37)]),
}


def _golden_kernel(name):
    fn, shapes = GOLDEN_CASES[name]
    args = [torch.randn(*s) for s in shapes]
    _, (p,) = compiled(fn, *args)
    (k,) = _generated(p)
    return k


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_tile(name, update_golden):
    check_golden(GOLDEN / f"{name}.tile", _golden_kernel(name).source, update_golden)


@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_generated_kernel_builds_with_nvcc(name, tmp_path, nvcc):
    k = _golden_kernel(name)
    cfg = {"RB": 4, "CB": 64}
    t = translate(k.source, f"{name}.tile", Options(defines=cfg, arch="sm_90a"))
    (tmp_path / "k.cu").write_text(t.cuda)
    proc = subprocess.run([nvcc, *ARCHS["sm_90a"], "k.cu", "-o", "k.cubin"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_memory_plan_peak_below_eager():
    from tilex.backend.memory import eager_peak_bytes

    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(13))

    def f(x):  # eager holds x*sigmoid(x), exp(x) and their sum at once; the fused plan only the result
        return torch.sigmoid(x) * x + torch.exp(x) * 0.5
    out, (p,) = compiled(f, x, memory=True)
    close(out, f(x))
    assert p.peak_bytes == x.numel() * 4
    assert eager_peak_bytes(p.gm, [x]) >= 2 * x.numel() * 4


def test_report_lists_steps_sources_and_fallbacks(tmp_path):
    from html.parser import HTMLParser

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(14))
    w = torch.randn(8, 8, generator=torch.Generator().manual_seed(15))

    def f(x):
        return torch.flip(F.linear(x, w), [-1]) * 2.0 + 1.0
    out, (p,) = compiled(f, x, report=str(tmp_path), memory=True, profile=True)
    close(out, f(x), rtol=1e-5, atol=1e-5)
    (path,) = tmp_path.glob("graph_*.html")
    text = path.read_text()

    class Rows(HTMLParser):
        rows: list = []

        def handle_starttag(self, tag, attrs):
            if tag == "tr" and dict(attrs).get("class"):
                self.rows.append(dict(attrs)["class"])
    parser = Rows()
    parser.feed(text)
    assert parser.rows.count("library") == 1 and parser.rows.count("generated") == 1
    assert parser.rows.count("eager") == 1 and "aten.flip.default" in text
    k = _generated(p)[0]
    assert __import__("html").escape(k.source) in text          # the generated .tile, readable
    assert "torch.flip(F.linear(x, w), [-1])" in text             # the model's source line
    assert f"peak live bytes of the plan (values freed at last use, inputs excluded): {p.peak_bytes}" in text
    shares = p.time_shares()
    assert abs(sum(shares.values()) - 1.0) < 1e-9 and shares["library"] > 0 and shares["generated"] > 0
    assert "time per kernel: not measured" in text               # the CPU interpreter's time is not a kernel's
    assert len(p.live_trace) == len(p.steps) and max(p.live_trace) == p.peak_bytes
    assert text.count("class='bar'") == len(p.steps)


def test_graph_cache_second_compile_hits(tmp_cache_dir):
    x = torch.randn(6, 24, generator=torch.Generator().manual_seed(16))

    def f(x):
        return torch.tanh(x) * 3.0 - x.amax(-1, keepdim=True)
    out, (p,) = compiled(f, x)
    close(out, f(x))
    assert p.cache["hit"] is False and p.cache["reused"] == 0
    (rec,) = (tmp_cache_dir / "graphs").glob("*.json")
    assert p.cache["fingerprint"] in rec.name
    torch._dynamo.reset()
    out2, (p2,) = compiled(f, x)                    # a fresh Dynamo trace of the same graph
    close(out2, f(x))
    assert (p2.cache["fingerprint"], p2.cache["hit"], p2.cache["reused"]) == (p.cache["fingerprint"], True, 1)
    torch._dynamo.reset()
    _, (p3,) = compiled(f, torch.randn(6, 40))     # another shape: another fingerprint
    assert p3.cache["hit"] is False and p3.cache["fingerprint"] != p.cache["fingerprint"]


def test_prepare_builds_each_distinct_kernel_once_and_prewarm_resolves_library_gemms():
    """Program.prepare: the same generated group twice is one build; prewarm replays the stdlib's choice
    for a static linear (translated here; on CUDA its binary compiles in the build pool)."""
    from tilex.backend import prewarm

    g = torch.Generator().manual_seed(31)
    x, w, b = torch.randn(512, 64, generator=g), torch.randn(128, 64, generator=g), torch.randn(128, generator=g)

    def f(x, w, b):  # (y + y2 reads both products again: no tail is a GEMM epilogue, both are generated)
        y, y2 = F.linear(x, w, b), F.linear(x * 0.5, w, b)
        return torch.sigmoid(y) * 2.0 + 1.0, torch.sigmoid(y2) * 2.0 + 1.0, y + y2
    out, (p,) = compiled(f, x, w, b)
    ref = f(x, w, b)
    for o, r in zip(out, ref):
        close(o, r, rtol=1e-4, atol=1e-4)
    st = p.build_stats
    gen = [s for s in p.steps if s.kind == "generated"]
    tails = [s for s in gen if "aten.sigmoid.default" in s.kernel.members]
    assert len(tails) == 2 and tails[0].kernel.source == tails[1].kernel.source   # one text, one name
    assert st["generated_steps"] == len(gen) and st["builds"] == len(gen) - 1
    jobs = prewarm.library_jobs(p.steps, 132)
    assert [label for label, _ in jobs] == ["linear_bias 512x128x64"]   # the two linears: one shape, one job
    kern = jobs[0][1]()
    assert kern.spec.name == "linear_bias" and hasattr(kern, "cubin_for")


def test_gemm_epilogue_residual_add_and_norm():
    """rms_norm(residual + x @ w.T) with the sum read again later (HF's o_proj / down_proj, residual add,
    next norm): one linear_add_rms_norm step with two outputs, no generated add."""
    g = torch.Generator().manual_seed(32)
    norm = HFRMSNorm(48)
    x, w, res = torch.randn(2, 5, 32, generator=g), torch.randn(48, 32, generator=g), torch.randn(2, 5, 48, generator=g)

    def f(x, w, res):
        h = res + F.linear(x, w)
        return norm(h), h * 2.0
    out, (p,) = compiled(f, x, w, res)
    for o, r in zip(out, f(x, w, res)):
        close(o, r, rtol=1e-4, atol=1e-4)
    assert labels(p, "library") == ["linear_add_rms_norm"] and p.fallbacks() == []
    assert [s.kernel.members for s in p.steps if s.kind == "generated"] == [("aten.mul.Tensor",)]


def test_bmm_with_inner_size_one_is_elementwise():
    """HF's rotary table inv_freq[None, :, None] @ positions[:, None, :] (K = 1) is an outer product: a generated
    kernel (fused with its neighbours), not a GEMM; a bmm with K > 1 stays the library's."""
    g = torch.Generator().manual_seed(19)
    inv = torch.rand(8, generator=g)
    pos = torch.arange(12)[None].expand(2, -1)
    a3, b3 = torch.randn(2, 5, 3, generator=g), torch.randn(2, 3, 7, generator=g)

    def f(inv, pos, a3, b3):
        fr = (inv[None, :, None].float().expand(pos.shape[0], -1, 1) @ pos[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((fr, fr), dim=-1)
        return emb.cos() * 2.0, emb.sin(), torch.bmm(a3, b3)
    out, (p,) = compiled(f, inv, pos, a3, b3)
    for o, r in zip(out, f(inv, pos, a3, b3)):
        close(o, r, rtol=1e-5, atol=1e-5)
    assert labels(p, "library") == ["bmm"]  # the K = 3 bmm
    assert any(s.kind == "generated" and "aten.bmm.default" in s.kernel.members for s in p.steps)
    assert p.fallbacks() == []


def test_outputs_of_two_layouts_are_stored_through_their_row_strides():
    """One group, two outputs of different eager layouts (one permuted, one contiguous): no single iteration order
    serves both, so the permuted one is a `scatter` output (row offsets from its own strides); values and strides."""
    g = torch.Generator().manual_seed(14)
    x = torch.randn(3, 5, 4, 24, generator=g)
    y = torch.randn(3, 4, 5, 24, generator=g)

    def f(x, y):
        a = torch.sigmoid(x.transpose(1, 2))   # [3, 4, 5, 24], eager: permuted
        return a * 2.0, y + a                   # the second follows y's contiguous layout (its first operand)
    (o1, o2), (p,) = compiled(f, x, y)
    r1, r2 = f(x, y)
    close(o1, r1)
    close(o2, r2)
    (k,) = _generated(p)
    assert k.perm is None and sorted(op.rows for op in k.outputs) == ["rows", "scatter"]
    assert o1.stride() == r1.stride() and o2.stride() == r2.stride()

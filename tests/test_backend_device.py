"""Graphs of tensors on a device, lowered on CPU: Dynamo + AOTAutograd trace fake tensors on the `meta`
device (like CUDA's graphs, a 0-d tensor there is device data, not a host scalar: HF StaticCache's
`cumulative_length` counter), Program.lower lowers them, and the Program then runs on real CPU tensors
through the interpreter. Checks that on a device the counter's arithmetic is a generated kernel, its
write-back `copy_` the generated copy_into, the counter's move to the device a copy step, and that the
tiny Llama/Qwen2 static-cache graphs keep no eager node (session 17's CUDA-only gaps)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import tilex.backend as B  # noqa: E402
from tilex.backend.program import Program  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402



@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def lower_on_meta(fn, *make_args):
    """Programs of `fn` traced with fake meta tensors (each of make_args() -> the call's arguments, in
    FakeTensorMode), one per graph Dynamo compiles."""
    from torch._dynamo.backends.common import aot_autograd

    progs = []

    def fw(gm, inputs):
        progs.append(Program.lower(gm))
        return gm  # runs on the fake tensors
    cf = torch.compile(fn, backend=aot_autograd(fw_compiler=fw, keep_inference_input_mutations=True,
                                                decompositions=B._decompositions()))
    fm = FakeTensorMode(allow_non_fake_inputs=True)
    with torch.no_grad(), fm:
        for make in make_args:
            cf(*make(fm))
    return progs


def _fake(fm, t: torch.Tensor) -> torch.Tensor:
    return fm.fake_tensor_converter.from_meta_and_device(fm, t.to("meta"), torch.device("meta"))


def test_device_counter_arithmetic_and_write_back_are_generated_kernels():
    """A 0-d device tensor incremented in place (StaticCache's counter): its add is a generated kernel over one
    element and the copy_ into the input the generated copy_into; run on CPU tensors, values as eager's."""
    def f(x, counter):
        pos = counter + 3
        counter.add_(2)
        return x * pos
    (p,) = lower_on_meta(f, lambda fm: (_fake(fm, torch.zeros(4)), _fake(fm, torch.tensor(0))))
    assert p.fallbacks() == []
    lib = [s.label for s in p.steps if s.kind == "library"]
    assert lib == ["copy_into"]
    gen = [s for s in p.steps if s.kind == "generated"]
    assert any(s.kernel.shape == (1,) for s in gen)            # the 0-d adds: one-element groups
    g = torch.Generator().manual_seed(41)
    for start in (5, -3):
        x, counter = torch.randn(4, generator=g), torch.tensor(start)
        ex, ecounter = x.clone(), counter.clone()
        # Dynamo orders the graph's inputs by first use: the counter comes first here
        (out,) = p(*[counter if pl.meta["val"].dim() == 0 else x for pl in p.placeholders])
        ref = f(ex, ecounter)
        torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
        assert counter.dtype == torch.int64 and int(counter) == int(ecounter) == start + 2


def test_copy_into_casts_and_reads_strided_sources():
    from tilex.backend import cachegen

    g = torch.Generator().manual_seed(42)
    dst = torch.zeros(3, 5, dtype=torch.bfloat16)
    src = torch.randn(5, 3, generator=g).t()                    # a transposed f32 view
    assert cachegen.copy_into(dst, src) is dst
    assert torch.equal(dst, src.to(torch.bfloat16))


def test_cpu_host_scalars_stay_host_work():
    """The same function on CPU tensors: the 0-d counter is a host scalar, its arithmetic and write-back view
    steps (no kernel), as before."""
    def f(x, counter):
        counter.add_(2)
        return x * counter
    progs = []
    cf = torch.compile(f, backend="tilex", options={"programs": progs, "strict": True})
    x, counter = torch.randn(4, generator=torch.Generator().manual_seed(43)), torch.tensor(1)
    with torch.no_grad():
        out = cf(x, counter)
    torch.testing.assert_close(out, x * 3, rtol=1e-6, atol=1e-6)
    assert int(counter) == 3
    (p,) = progs
    assert not any(s.kind == "library" and s.label == "copy_into" for s in p.steps)


# ---------------------------------------------------------------- transformers' static-cache graphs

def _sdpa_as_on_cuda(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention as CUDA dispatches it to the memory-efficient kernel (attention.cpp: a bool
    mask made additive, a mask whose rows are not 16-element aligned padded and sliced back, then expanded):
    on meta tensors torch would decompose it into the math path instead."""
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_mask = torch.where(attn_mask, 0.0, float("-inf")).to(q.dtype)
        n = attn_mask.shape[-1]
        if any(st % 16 for st in attn_mask.stride()[:-1]):
            attn_mask = F.pad(attn_mask, (0, 16 - n % 16))[..., :n]
        attn_mask = attn_mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, attn_mask, False, dropout_p, is_causal,
                                                                  scale=scale)[0]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_static_cache_graphs_on_a_device_keep_no_eager_node(arch, monkeypatch):
    """The prefill (lazily creating the cache and moving its counter to the device) and decode graphs of HF's
    StaticCache traced on meta tensors: no eager node (session 17 on the H200: aten._to_copy, aten.add.Tensor
    on the int64 counter, aten.copy_ stayed eager); the counter's write-back is copy_into, its move a copy step."""
    transformers = pytest.importorskip("transformers")
    from test_backend_hf import tiny

    model = tiny(arch)
    fm_holder = {}

    def to_meta(fm):
        if "done" not in fm_holder:
            for mod in model.modules():
                for name, prm in list(mod._parameters.items()):
                    if prm is not None:
                        mod._parameters[name] = torch.nn.Parameter(_fake(fm, prm.data), requires_grad=False)
                for name, b in list(mod._buffers.items()):
                    if b is not None:
                        mod._buffers[name] = _fake(fm, b)
            # 24 keys: CUDA's efficient SDPA pads the mask's rows to 32 (a pad + slice the patterns see through)
            fm_holder["cache"] = transformers.StaticCache(config=model.config, max_cache_len=24)
            fm_holder["done"] = True
        return fm_holder["cache"]

    def prefill(fm):
        cache = to_meta(fm)
        return (torch.zeros(2, 16, dtype=torch.long, device="meta"), cache, torch.arange(16, device="meta"))

    def step(pos):
        def make(fm):
            return (torch.zeros(2, 1, dtype=torch.long, device="meta"), fm_holder["cache"],
                    torch.tensor([pos], device="meta"))
        return make

    def fwd(ids, cache, positions):
        return model(ids, past_key_values=cache, cache_position=positions, use_cache=True).logits
    monkeypatch.setattr(F, "scaled_dot_product_attention", _sdpa_as_on_cuda)
    progs = lower_on_meta(fwd, prefill, step(16), step(17))
    assert len(progs) == 2
    for p in progs:
        assert p.fallbacks() == []
    first, decode = progs
    assert sum(s.kind == "copy" for s in first.steps) == 2          # each layer's counter moved to the device
    lib = [s.label for s in decode.steps if s.kind == "library"]
    assert lib.count("copy_into") == 2 and lib.count("cache_write") == 4 and lib.count("attention_decode") == 2


@pytest.mark.parametrize("q_len", [1, 24])
def test_padded_and_sliced_mask_is_read_unpadded(q_len):
    """expand(pad(mask)[..., :n]) (CUDA's efficient-SDPA preprocessing) as the mask of attention_decode (q_len 1)
    and of a causal prefill (q_len = n): the kernels read the unpadded mask, no pad runs; values as eager's."""
    g = torch.Generator().manual_seed(44)
    n = 24
    q = torch.randn(2, 4, q_len, 16, generator=g)
    k, v = torch.randn(2, 4, n, 16, generator=g), torch.randn(2, 4, n, 16, generator=g)
    if q_len == 1:
        mask = torch.where(torch.rand(2, 1, 1, n, generator=g) > 0.3, 0.0, float("-inf"))
        mask[..., 0] = 0.0
    else:
        mask = torch.where(torch.ones(n, n, dtype=torch.bool).tril(), 0.0, float("-inf"))[None, None]

    def f(q, k, v, mask):
        m = F.pad(mask, (0, 32 - n))[..., :n].expand(2, 4, q_len, n)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    progs = []
    cf = torch.compile(f, backend="tilex", options={"programs": progs, "strict": True})
    with torch.no_grad():
        out = cf(q, k, v, mask)
    torch.testing.assert_close(out, f(q, k, v, mask), rtol=1e-5, atol=1e-5)
    (p,) = progs
    assert [s.label for s in p.steps if s.kind == "library"] == [
        "attention_decode" if q_len == 1 else "attention_prefill"]
    assert not any(str(n.target) == "aten.constant_pad_nd.default" for s in p.steps for n in s.nodes)


def test_math_sdpa_path_lowers_safe_softmax_and_clones():
    """SDPA's math path (CUDA's choice for f32 with grouped-query heads; every SDPA on meta tensors): its
    _safe_softmax (a row that is all -inf gives 0) and contiguous clones are generated kernels; values on CPU."""
    g = torch.Generator().manual_seed(45)
    x = torch.randn(3, 5, 12, generator=g)
    x[0, 1] = float("-inf")                      # a fully masked row
    x[2, 3, :7] = float("-inf")

    def f(x, y):
        return torch.ops.aten._safe_softmax(x, -1) * 2.0 + y.transpose(1, 2).clone(
            memory_format=torch.contiguous_format).sum(-1, keepdim=True)
    y = torch.randn(3, 12, 5, generator=g)
    progs = []
    cf = torch.compile(f, backend="tilex", options={"programs": progs, "strict": True})
    with torch.no_grad():
        out = cf(x, y)
    ref = f(x, y)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(out[0, 1], ref[0, 1]) and not out.isnan().any()
    (p,) = progs
    assert all(s.kind in ("generated", "view", "folded") for s in p.steps)
    (lib_free,) = {s.kind for s in p.steps if s.kind not in ("view", "folded")}
    assert lib_free == "generated"
    progs = lower_on_meta(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                          lambda fm: tuple(_fake(fm, torch.zeros(1, 2, 8, 16)) for _ in range(3)))
    assert progs[0].fallbacks() == []

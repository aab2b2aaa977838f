"""transformers' own Qwen2 (QKV bias) and Llama modeling code, tiny random configs (no network),
under torch.compile(backend="tilex") vs eager. On CPU the lowered program runs through the NumPy
interpreter; the GPU tests run the same models on CUDA (f32 and bf16)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tilex.backend  # noqa: F401,E402  (registers "tilex")


def tiny(arch: str, layers: int = 2):
    common = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  attn_implementation="sdpa")
    torch.manual_seed(0)
    if arch == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    return model.eval()


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def rel_err(a, b) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def run(model, ids, **options):
    progs = []
    cm = torch.compile(model, backend="tilex", options={"programs": progs, **options})
    with torch.no_grad():
        out = cm(ids, use_cache=False).logits
        ref = model(ids, use_cache=False).logits
    return out, ref, progs


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_tiny_model_forward_matches_eager_on_cpu(arch):
    model = tiny(arch)
    ids = torch.randint(0, 96, (2, 8), generator=torch.Generator().manual_seed(1))
    out, ref, progs = run(model, ids)
    assert rel_err(out, ref) < 1e-4
    assert torch.equal(out.argmax(-1), ref.argmax(-1))
    (prog,) = progs
    lib = [s.label for s in prog.steps if s.kind == "library"]
    # every projection, norm, attention and MLP is a library kernel; the rest is generated
    assert lib.count("attention_prefill") == 2 and lib.count("gated_mlp") == 2
    # o_proj and down_proj with their residual add and the next norm: one GEMM-with-epilogue each
    assert lib.count("linear_add_rms_norm") == 2 * 2 and lib.count("rms_norm") == 1 and lib.count("embedding") == 1
    assert lib.count("linear") == 2 * 3 + 1   # q, k, v per layer; lm_head
    assert all(s.fallbacks == 0 for s in prog.steps)
    assert any(s.kind == "generated" for s in prog.steps)
    # nothing runs as torch eager (the mask is a folded constant); no input is copied: the rotary table's
    # transposed outer product is written in its transposed layout (fusion.transpose_outer_products)
    assert prog.fallbacks() == []
    assert [s.label for s in prog.steps if s.copies] == []
    # the same group in every layer is one kernel (named by its text), built once before the first call:
    # the rotary table's outer product (a K=1 bmm: elementwise, no GEMM), its cos/sin, q/k rotary (one source
    # at two tile configurations: q and k differ in heads); 6 generated steps in all (the residual adds are
    # GEMM epilogues)
    st = prog.build_stats
    assert st["generated_steps"] == 6 and st["distinct_kernels"] == 3 and st["builds"] == 4
    gen = [s.kernel.name for s in prog.steps if s.kind == "generated"]
    assert len(set(gen)) == 3 and all(n.startswith("fused_") for n in gen)
    assert "linear (per batch)" not in lib and any("aten.bmm.default" in s.kernel.members
                                                   for s in prog.steps if s.kind == "generated")


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_tiny_model_bf16_error_within_eager_bf16_on_cpu(arch):
    """Issue 19's bf16 bar: the compiled bf16 model's error against f32 eager is at most 1.25x eager
    bf16's own (measured at this seed: qwen2 1.04x, llama 1.23x; the attention kernel rounds the
    probabilities to bf16 before P @ V, as flash attention does)."""
    model = tiny(arch)
    ids = torch.randint(0, 96, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref32 = model(ids, use_cache=False).logits
    out, ref16, progs = run(model.to(torch.bfloat16), ids)
    assert rel_err(out, ref32) <= 1.25 * rel_err(ref16, ref32)
    assert progs[0].fallbacks() == []


def test_tiny_model_bf16_with_grad_enabled_on_cpu():
    """Outside no_grad, AOTAutograd's forward graph also returns the norms' saved f32 values (rsqrt, x.to(f32)):
    the rms_norm kernel then keeps only the nodes no one else reads, and the residual add it reads through
    its own cast lands in a generated group, which must export it (it crashed with KeyError: add_18)."""
    model = tiny("qwen2").to(torch.bfloat16)
    ids = torch.randint(0, 96, (1, 8), generator=torch.Generator().manual_seed(3))
    progs = []
    out = torch.compile(model, backend="tilex", options={"programs": progs})(ids, use_cache=False).logits
    with torch.no_grad():
        ref = model(ids, use_cache=False).logits
    assert out.requires_grad and rel_err(out.detach(), ref) < 2e-2
    assert any(s.label == "rms_norm" for s in progs[0].steps if s.kind == "library")


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_tiny_model_strict(arch):
    model = tiny(arch, layers=1)
    ids = torch.randint(0, 96, (1, 8), generator=torch.Generator().manual_seed(2))
    cm = torch.compile(model, backend="tilex", options={"strict": True})
    with torch.no_grad():
        out = cm(ids, use_cache=False).logits
        assert rel_err(out, model(ids, use_cache=False).logits) < 1e-4


# ------------------------------------------------------------------------------ GPU

@pytest.mark.gpu
@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_tiny_model_on_cuda_f32(arch):
    model = tiny(arch).cuda()
    ids = torch.randint(0, 96, (2, 64), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    out, ref, _ = run(model, ids)
    assert rel_err(out, ref) < 1e-4
    assert torch.equal(out.argmax(-1), ref.argmax(-1))


@pytest.mark.gpu
def test_tiny_model_on_cuda_bf16_error_within_eager_bf16():
    model = tiny("qwen2").cuda()
    ids = torch.randint(0, 96, (2, 64), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    with torch.no_grad():
        ref32 = model(ids, use_cache=False).logits
    model = model.to(torch.bfloat16)
    out, ref16, _ = run(model, ids)
    assert rel_err(out, ref32) <= 1.25 * rel_err(ref16, ref32) + 1e-3


def test_dynamic_sequence_length_compiles_once():
    model = tiny("qwen2", layers=1)
    progs = []
    cm = torch.compile(model, backend="tilex", dynamic=True, options={"programs": progs})
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for t in (8, 12, 5):
            ids = torch.randint(0, 96, (1, t), generator=g)
            assert rel_err(cm(ids, use_cache=False).logits, model(ids, use_cache=False).logits) < 1e-4
    assert len(progs) == 1  # one graph for every length: the sizes are symbols
    (prog,) = progs
    assert prog.fallbacks() == []  # the same patterns as with static shapes (eps, repeat_kv)
    lib = [s.label for s in prog.steps if s.kind == "library"]
    assert lib.count("rms_norm") + lib.count("linear_add_rms_norm") == 3 and lib.count("attention_prefill") == 1


@pytest.mark.gpu
def test_tiny_model_cuda_graphs_replay_matches_eager():
    model = tiny("llama").cuda()
    progs = []
    cm = torch.compile(model, backend="tilex", options={"programs": progs, "cuda_graphs": True})
    g = torch.Generator("cuda").manual_seed(4)
    with torch.no_grad():
        for _ in range(4):  # warm-up, capture, two more replays with new tokens
            ids = torch.randint(0, 96, (2, 32), device="cuda", generator=g)
            assert rel_err(cm(ids, use_cache=False).logits, model(ids, use_cache=False).logits) < 1e-4
    (prog,) = progs
    # call 2 warms up (its result) and captures (which runs nothing); calls 3 and 4 replay
    assert prog.graph_runner.replays == 2


def test_cuda_graphs_option_on_cpu_runs_the_program():
    """On CPU tensors the runner has nothing to capture: it runs the program (no graph)."""
    model = tiny("qwen2", layers=1)
    ids = torch.randint(0, 96, (1, 8), generator=torch.Generator().manual_seed(5))
    out, ref, _ = run(model, ids, cuda_graphs=True)
    assert rel_err(out, ref) < 1e-4

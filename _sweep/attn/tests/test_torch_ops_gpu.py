"""tilex.torch on CUDA tensors (the generated kernels): opcheck and values vs float64 torch references for
every op at odd sizes (plus sizes that take the GPU-only paths: split-K / swapped / persistent linear, bf16),
torch.compile(fullgraph=True) with inductor, dynamic=True without recompiles, mode="reduce-overhead" (CUDA
graphs) replaying the toy decoder layer of benchmarks/bench_torch_ops.py correctly, and a side stream."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from test_torch_ops import (_assert_close, _clone, _layer, _layer_args, _ref_layer, check_values,  # noqa: E402
                            make_cases, rand, ref_attention, ref_rms, _gen, f64)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device for torch")]
ops = torch.ops.tilex
BF = torch.bfloat16


def _gpu_only_cases():
    g = _gen(11)
    r = lambda *s, dtype=BF, scale=1.0: rand(g, *s, dtype=dtype, device="cuda", scale=scale)  # noqa: E731
    lin = lambda x, w, b=None: x.to(f64) @ w.to(f64).T + (0 if b is None else b.to(f64))  # noqa: E731
    out = []
    for m, k, n in ((5, 64, 72), (33, 256, 136), (130, 128, 200)):  # swap, split-K, persistent/tiles
        out.append(pytest.param("linear", (r(m, k, scale=0.2), r(n, k, scale=0.2), r(n)), {}, lin, 3e-2,
                                id=f"linear-bf16-{m}x{k}x{n}"))
        out.append(pytest.param("linear", (r(m, k, scale=0.2), r(n, k, scale=0.2)), {}, lin, 3e-2,
                                id=f"linear-bf16-nobias-{m}x{k}x{n}"))
    out.append(pytest.param("rms_norm", (r(37, 1000), r(1000), 1e-6), {}, ref_rms, 3e-2, id="rms_norm-bf16-37x1000"))
    out.append(pytest.param("attention_prefill", (r(1, 8, 77, 128), r(1, 2, 77, 128), r(1, 2, 77, 128), True), {},
                            lambda q, k, v, c: ref_attention(q, k, v, c), 3e-2, id="attention_prefill-bf16-77"))
    out.append(pytest.param("gated_mlp", (r(19, 64, scale=0.3), r(40, 64, scale=0.3), r(40, 64, scale=0.3)), {},
                            lambda x, a, b: torch.nn.functional.silu(x.to(f64) @ a.to(f64).T) * (x.to(f64) @ b.to(f64).T),
                            3e-2, id="gated_mlp-bf16-19"))
    return out


GPU_CASES = make_cases("cuda", seed=1) + _gpu_only_cases() if torch.cuda.is_available() else []  # built on the GPU only


@pytest.mark.parametrize("name,args,kwargs,ref,tol", GPU_CASES)
def test_values_vs_torch_float64_cuda(name, args, kwargs, ref, tol):
    check_values(name, args, kwargs, ref, tol)


@pytest.mark.parametrize("name,args,kwargs,ref,tol", GPU_CASES)
def test_opcheck_cuda(name, args, kwargs, ref, tol):
    torch.library.opcheck(getattr(ops, name), _clone(args), kwargs)


def _cuda(args):
    return tuple(a.cuda() for a in args)


def test_compile_inductor_fullgraph_and_dynamic():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    args = _cuda(_layer_args(5))
    assert torch._dynamo.explain(_layer)(*args).graph_break_count == 0
    _assert_close(torch.compile(_layer, fullgraph=True)(*args), _ref_layer(*args))
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("inductor")
    fn = torch.compile(_layer, fullgraph=True, dynamic=True, backend=cnt)
    for s in (5, 7, 11):
        a = _cuda(_layer_args(s, seed=s))
        _assert_close(fn(*a), _ref_layer(*a))
    assert cnt.frame_count == 1


def _bench_module():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_torch_ops.py"
    spec = importlib.util.spec_from_file_location("bench_torch_ops", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_reduce_overhead_replays_the_decoder_layer():
    """CUDA graphs of PyTorch (cudagraph trees) record the tilex kernels and replay them on new inputs; the
    caches (module buffers) are mutated in the graph. Compared with the eager op layer each replay."""
    from torch._dynamo.utils import counters

    B = _bench_module()
    torch._dynamo.reset()
    counters.clear()
    layer = B.ToyDecoderLayer(hidden=256, heads=4, kv_heads=2, head_dim=64, inter=512, blocks=32, block_size=16)
    compiled = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
    for step in range(5):  # warm-up, record, then replays with fresh data in the same shapes
        inputs = B.layer_inputs(layer, 3, context=40 + step, seed=step)
        y, res = compiled(*inputs)
        y, res = y.clone(), res.clone()
        y_eager, res_eager = layer(*inputs)
        torch.cuda.synchronize()
        assert torch.allclose(y.float(), y_eager.float(), atol=2e-2, rtol=2e-2), step
        assert torch.equal(res, res_eager)
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


def test_ops_run_on_the_current_stream():
    g = _gen(12)
    x, w = rand(g, 257, 96, device="cuda"), rand(g, 96, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        big = torch.randn(4096, 4096, device="cuda") @ torch.randn(4096, 4096, device="cuda")  # keeps s busy
        y = ops.rms_norm(x + big[:257, :96] * 0, w, 1e-6)
    torch.cuda.current_stream().wait_stream(s)
    assert ((y.to(f64) - ref_rms(x, w, 1e-6)).abs() / (1 + ref_rms(x, w, 1e-6).abs())).max() <= 1e-5


def test_user_kernel_op_cuda():
    import tilex
    import tilex.torch as tt

    rmsnorm = tt.op(tilex.compile("examples/rmsnorm.tile", BLOCK=256), "rmsnorm", name="tilexgputest::rmsnorm")
    g = _gen(13)
    x, w = rand(g, 37, 1000, dtype=BF, device="cuda"), rand(g, 1000, dtype=BF, device="cuda")
    want = ref_rms(x, w, 1e-6)
    assert ((rmsnorm(x, w, 1e-6).to(f64) - want).abs() / (1 + want.abs())).max() <= 3e-2
    torch.library.opcheck(rmsnorm, (x, w, 1e-6))
    torch._dynamo.reset()
    fn = torch.compile(lambda a, b: rmsnorm(a, b) * 2, fullgraph=True, mode="reduce-overhead")
    for m in (37, 37, 37, 37):  # warm-up, record, replays
        x = rand(g, m, 1000, dtype=BF, device="cuda")
        y = fn(x, w).clone()
        want = ref_rms(x, w, 1e-6) * 2
        assert ((y.to(f64) - want).abs() / (1 + want.abs())).max() <= 3e-2

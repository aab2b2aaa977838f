"""tilex.torch on CPU tensors (the NumPy interpreter): opcheck for every op, values against float64
torch references, torch.compile(fullgraph=True) with no graph break, dynamic=True without recompiles,
trace-time errors with the launch-time messages, the backward error, and user kernels as ops.

Shapes are tiny and odd (the interpreter is slow). CASES is shared with tests/test_torch_ops_gpu.py.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import tilex  # noqa: E402
import tilex.torch as tt  # noqa: E402
from tilex import stdlib as S  # noqa: E402
from tilex.torch._convert import to_numpy  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

ops = torch.ops.tilex
f64 = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def rand(g, *shape, dtype=torch.float32, device="cpu", scale=1.0):
    return (torch.randn(*shape, generator=g, dtype=f64) * scale).to(dtype).to(device)


# ------------------------------------------------------------------ float64 references

def ref_rms(x, w, eps):
    x = x.to(f64)
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return y * w.to(f64) if w is not None else y


def ref_rope(x, pos, theta, r=None):
    x = x.to(f64)
    d = x.shape[-1]
    r = d if r is None else r
    half = r // 2
    inv = theta ** (-2.0 * torch.arange(half, dtype=f64) / r)
    ang = pos.to(f64).cpu()[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :].to(x.device), ang.sin()[:, None, :].to(x.device)
    a, b = x[..., :half], x[..., half:r]
    out = x.clone()
    out[..., :half] = a * cos - b * sin
    out[..., half:r] = b * cos + a * sin
    return out


def ref_attention(q, k, v, causal, scale=None):
    """q [B, Hq, S, D], k, v [B, Hkv, S, D] (GQA), float64."""
    q, k, v = (t.to(f64) for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return s.softmax(-1) @ v


def ref_decode(q, kc, vc, table, lens):
    b, hq, d = q.shape
    bs, hkv = kc.shape[1], kc.shape[2]
    out = torch.zeros(b, hq, d, dtype=f64, device=q.device)
    for i in range(b):
        n = int(lens[i])
        idx = torch.arange(n, device=q.device)
        blocks = table[i].long()[idx // bs]
        k = kc[blocks, idx % bs].to(f64).transpose(0, 1)  # [Hkv, n, D]
        v = vc[blocks, idx % bs].to(f64).transpose(0, 1)
        out[i] = ref_attention(q[i, :, None].to(f64)[None], k[None], v[None], False)[0, :, 0]
    return out


def ref_gelu_mul(x, approximate):
    x = x.to(f64)
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]


# ------------------------------------------------------------------ the cases
# each: (op name, args, kwargs, reference(args) -> expected outputs (mutated args for in-place ops), tol)

def _rope_args(g, dev, dt=torch.float32):
    return (rand(g, 3, 2, 8, dtype=dt, device=dev), rand(g, 3, 1, 8, dtype=dt, device=dev),
            torch.tensor([0, 5, 17], device=dev))


def _decode_args(g, dev):
    q = rand(g, 2, 4, 16, device=dev)
    kc, vc = rand(g, 5, 16, 2, 16, device=dev), rand(g, 5, 16, 2, 16, device=dev)
    table = torch.tensor([[3, 1], [0, 4]], dtype=torch.int32, device=dev)
    lens = torch.tensor([7, 20], dtype=torch.int32, device=dev)
    return q, kc, vc, table, lens


def _qkv_rope_cache_args(g, dev):
    x, w = rand(g, 3, 16, device=dev), rand(g, 32, 16, device=dev, scale=0.25)
    pos = torch.tensor([1, 4, 9], device=dev)
    kc, vc = torch.zeros(2, 4, 1, 8, device=dev), torch.zeros(2, 4, 1, 8, device=dev)
    slots = torch.tensor([6, -1, 1], device=dev)
    return x, w, 16, 8, pos, kc, vc, slots


def _ref_qkv_rope_cache(x, w, qs, kvs, pos, kc, vc, slots, theta=10000.0, bias=None):
    y = x.to(f64) @ w.to(f64).T
    q = ref_rope(y[:, :qs].reshape(3, 2, 8), pos, theta)
    k = ref_rope(y[:, qs:qs + kvs].reshape(3, 1, 8), pos, theta)
    v = y[:, qs + kvs:].reshape(3, 1, 8)
    kc2, vc2 = kc.to(f64).clone(), vc.to(f64).clone()
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            kc2[s // 4, s % 4], vc2[s // 4, s % 4] = k[t], v[t]
    return q, kc2, vc2


def _ref_cache_write(k, v, kc, vc, slots):
    kc2, vc2 = kc.to(f64).clone(), vc.to(f64).clone()
    bs = kc.shape[1]
    for t, s in enumerate(slots.tolist()):
        if 0 <= s < kc.shape[0] * bs:
            kc2[s // bs, s % bs], vc2[s // bs, s % bs] = k[t].to(f64), v[t].to(f64)
    return kc2, vc2


def make_cases(dev="cpu", seed=0):
    g = _gen(seed)
    r = lambda *s, **kw: rand(g, *s, device=dev, **kw)  # noqa: E731
    bf = torch.bfloat16
    cases = []

    def add(name, args, kwargs, ref, tol, label=None):
        cases.append(pytest.param(name, args, kwargs, ref, tol, id=label or name))

    add("rms_norm", (r(5, 7), r(7), 1e-6), {}, lambda x, w, e: ref_rms(x, w, e), 1e-5)
    add("rms_norm", (r(3, 2, 9, dtype=bf), r(9, dtype=bf), 1e-6), {}, lambda x, w, e: ref_rms(x, w, e), 3e-2,
        "rms_norm-bf16")
    add("fused_add_rms_norm", (r(5, 7), r(5, 7), r(7), 1e-6), {},
        lambda x, res, w, e: (ref_rms(x + res, w, e), x.to(f64) + res.to(f64)), 1e-5)
    add("fused_add_rms_norm_inplace", (r(5, 7), r(5, 7), r(7), 1e-6), {},
        lambda x, res, w, e: (ref_rms(x + res, w, e), x.to(f64) + res.to(f64)), 1e-5)
    add("layer_norm", (r(5, 7), r(7), r(7), 1e-5), {},
        lambda x, w, b, e: F.layer_norm(x.to(f64), (7,), w.to(f64), b.to(f64), e), 1e-5)
    add("rope", _rope_args(g, dev) + (10000.0,), {},
        lambda q, k, p, t: (ref_rope(q, p, t), ref_rope(k, p, t)), 1e-5)
    add("rope", _rope_args(g, dev) + (500.0, 4), {},
        lambda q, k, p, t, rd: (ref_rope(q, p, t, rd), ref_rope(k, p, t, rd)), 1e-5, "rope-partial")
    add("rope_inplace", _rope_args(g, dev, bf) + (10000.0,), {},
        lambda q, k, p, t: (ref_rope(q, p, t), ref_rope(k, p, t)), 3e-2, "rope_inplace-bf16")
    add("silu_and_mul", (r(5, 14),), {}, lambda x: F.silu(x.to(f64)[..., :7]) * x.to(f64)[..., 7:], 1e-5)
    add("gelu_and_mul", (r(2, 3, 10),), {"approximate": "tanh"}, lambda x, approximate: ref_gelu_mul(x, "tanh"),
        1e-5)
    add("gelu_and_mul", (r(5, 10),), {}, lambda x: ref_gelu_mul(x, "none"), 1e-5, "gelu_and_mul-erf")
    add("softmax", (r(3, 5, 7), 1), {}, lambda x, d: x.to(f64).softmax(d), 1e-5)
    add("embedding", (torch.tensor([[3, 0, 10], [7, 7, 1]], device=dev), r(11, 5)), {},
        lambda i, t: t.to(f64)[i], 0.0)
    add("kv_cache_write", (r(3, 2, 4), r(3, 2, 4), torch.zeros(2, 4, 2, 4, device=dev),
                           torch.zeros(2, 4, 2, 4, device=dev), torch.tensor([5, -1, 2], device=dev)), {},
        _ref_cache_write, 0.0)
    add("argmax", (r(3, 37),), {}, lambda x: x.to(f64).argmax(-1), 0.0)
    add("sample", (r(3, 37), 0.7, 1e-6, 5), {}, lambda x, t, p, s: x.to(f64).argmax(-1), 0.0, "sample-top1")
    add("linear", (r(2, 3, 16), r(9, 16), r(9)), {}, lambda x, w, b: x.to(f64) @ w.to(f64).T + b.to(f64), 1e-4)
    add("linear", (r(5, 13), r(6, 13)), {}, lambda x, w: x.to(f64) @ w.to(f64).T, 1e-4, "linear-k13")
    add("matmul", (r(2, 3, 16), r(16, 24), r(24)), {}, lambda a, b, c: a.to(f64) @ b.to(f64) + c.to(f64), 1e-4)
    add("bmm", (r(3, 5, 16), r(3, 16, 8)), {}, lambda a, b: a.to(f64) @ b.to(f64), 1e-4)
    add("linear_qkv", (r(5, 16), r(64, 16), 32, 16), {},
        lambda x, w, qs, kvs: tuple((x.to(f64) @ w.to(f64).T).split([qs, kvs, kvs], -1)), 1e-4)
    add("gated_mlp", (r(5, 16), r(24, 16), r(24, 16)), {},
        lambda x, a, b: F.silu(x.to(f64) @ a.to(f64).T) * (x.to(f64) @ b.to(f64).T), 1e-4)
    add("attention_prefill", (r(1, 4, 5, 16), r(1, 2, 5, 16), r(1, 2, 5, 16), True), {},
        lambda q, k, v, c: ref_attention(q, k, v, c), 1e-4)
    add("attention_prefill", (r(2, 3, 4, 16), r(2, 3, 1, 16), r(2, 3, 1, 16), False, 0.3), {"layout": "bshd"},
        lambda q, k, v, c, s, layout: ref_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), c, s)
        .transpose(1, 2), 1e-4, "attention_prefill-bshd")
    add("attention_decode", _decode_args(g, dev), {}, ref_decode, 1e-4)
    add("linear_qkv_rope_cache", _qkv_rope_cache_args(g, dev), {}, _ref_qkv_rope_cache, 1e-4)
    add("linear_add_rms_norm", (r(3, 16), r(7, 16), r(3, 7), r(7), 1e-6), {},
        lambda x, w, res, nw, e: (ref_rms((x.to(f64) @ w.to(f64).T + res.to(f64)), nw, e),
                                  x.to(f64) @ w.to(f64).T + res.to(f64)), 1e-4)
    add("topk", (r(3, 77), 5), {}, lambda x, k: tuple(torch.topk(x.to(f64), k, dim=-1)), 0.0)
    return cases


MUTATED = {"fused_add_rms_norm_inplace": (0, 1), "rope_inplace": (0, 1), "kv_cache_write": (2, 3)}
ALSO_MUTATED = {"linear_qkv_rope_cache": (5, 6)}  # returns q and writes the caches
CASES = make_cases()


def _clone(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def check_values(name, args, kwargs, ref, tol):
    """Run the op on copies of args and compare what it returns (or writes) with `ref` in float64."""
    call_args = _clone(args)
    got = getattr(ops, name)(*call_args, **kwargs)
    want = ref(*_clone(args), **kwargs)
    if name in MUTATED:
        assert got is None
        got = tuple(call_args[i] for i in MUTATED[name])
    elif name in ALSO_MUTATED:
        got = (got,) + tuple(call_args[i] for i in ALSO_MUTATED[name])
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape, (a.shape, b.shape)
        if not a.dtype.is_floating_point:
            assert torch.equal(a.cpu(), b.to(a.dtype).cpu())
            continue
        err = ((a.to(f64) - b).abs() / (1 + b.abs())).max().item() if a.numel() else 0.0
        assert err <= tol, f"{name}: max relative error {err:.3g} > {tol}"
    return got


@pytest.mark.parametrize("name,args,kwargs,ref,tol", CASES)
def test_values_vs_torch_float64(name, args, kwargs, ref, tol):
    check_values(name, args, kwargs, ref, tol)


# opcheck's test_aot_dispatch_dynamic runs the op on fake tensors with symbolic sizes (the fake rule's checks
# must hold symbolically); one case per op (the value test has the variants)
OPCHECK = [c for c in CASES if c.id not in ("rms_norm-bf16", "rope-partial", "gelu_and_mul-erf", "linear-k13")]


@pytest.mark.parametrize("name,args,kwargs,ref,tol", OPCHECK)
def test_opcheck_cpu(name, args, kwargs, ref, tol):
    torch.library.opcheck(getattr(ops, name), _clone(args), kwargs)


def test_every_stdlib_function_is_an_op():
    want = set(S.__all__) | {"fused_add_rms_norm_inplace", "rope_inplace"}
    assert set(tt.OPS) == want
    assert {c.values[0] for c in CASES} == want
    assert {c.values[0] for c in OPCHECK} == want
    for name in want:
        assert hasattr(ops, name)


def test_non_contiguous_inputs():
    g = _gen(13)
    x, w = rand(g, 9, 5).t(), rand(g, 9)
    assert not x.is_contiguous()
    check_values("rms_norm", (x, w, 1e-6), {}, ref_rms, 1e-5)
    a, b = rand(g, 16, 4).t(), rand(g, 16, 6)[:, ::2].t()
    check_values("linear", (a, b), {}, lambda a, b: a.to(f64) @ b.to(f64).T, 1e-4)
    check_values("softmax", (rand(g, 4, 6)[:, 1:], -1), {}, lambda x, d: x.to(f64).softmax(d), 1e-5)
    x = rand(g, 5, 7).t()
    with pytest.raises(ValueError, match=re.escape("fused_add_rms_norm(inplace=True) needs contiguous")):
        ops.fused_add_rms_norm_inplace(x, x.clone(), None, 1e-6)
    mode = torch._subclasses.fake_tensor.FakeTensorMode()
    fx, fr = mode.from_tensor(x), mode.from_tensor(x.clone())
    with mode, pytest.raises(ValueError, match=re.escape("fused_add_rms_norm(inplace=True) needs contiguous")):
        ops.fused_add_rms_norm_inplace(fx, fr, None, 1e-6)


def test_outputs_never_alias_inputs():
    x = rand(_gen(1), 4, 6)
    for out in (ops.rms_norm(x), ops.softmax(x, -1), ops.linear(x, rand(_gen(2), 3, 6))):
        assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


# ------------------------------------------------------------------ torch.compile

def _layer(x, res, w_norm, w_qkv, w_gate, w_up, w_down):
    """A toy decoder block on tilex ops (prefill-style attention over one sequence)."""
    h, res = ops.fused_add_rms_norm(x, res, w_norm, 1e-6)
    q, k, v = ops.linear_qkv(h, w_qkv, 32, 16)
    s = x.shape[0]
    o = ops.attention_prefill(q.view(1, s, 2, 16), k.view(1, s, 1, 16), v.view(1, s, 1, 16), True, None, "bshd")
    h2 = ops.linear(o.view(s, 32), w_down[:, :32].contiguous())
    y = ops.silu_and_mul(torch.cat([ops.gated_mlp(h2, w_gate, w_up), h2[:, :8].contiguous()], -1)[:, :16]
                         .contiguous())
    return ops.softmax(y, -1) + 1, res


def _layer_args(s, seed=3):
    g = _gen(seed)
    r = lambda *sh: rand(g, *sh, scale=0.5)  # noqa: E731
    return (r(s, 16), r(s, 16), r(16), r(64, 16), r(8, 16), r(8, 16), r(16, 40))


def _ref_layer(x, res, w_norm, w_qkv, w_gate, w_up, w_down):
    h = x.to(f64) + res.to(f64)
    hn = ref_rms(h, w_norm, 1e-6)
    q, k, v = (hn @ w_qkv.to(f64).T).split([32, 16, 16], -1)
    s = x.shape[0]
    o = ref_attention(q.view(1, s, 2, 16).transpose(1, 2), k.view(1, s, 1, 16).transpose(1, 2),
                      v.view(1, s, 1, 16).transpose(1, 2), True).transpose(1, 2).reshape(s, 32)
    h2 = o @ w_down[:, :32].to(f64).T
    gm = F.silu(h2 @ w_gate.to(f64).T) * (h2 @ w_up.to(f64).T)
    cat = torch.cat([gm, h2[:, :8]], -1)[:, :16]
    y = F.silu(cat[:, :8]) * cat[:, 8:]
    return y.softmax(-1) + 1, h


def _assert_close(got, want, tol=1e-4):
    for a, b in zip(got, want):
        assert ((a.to(f64) - b).abs() / (1 + b.abs())).max().item() <= tol


def test_compile_fullgraph_no_graph_break():
    args = _layer_args(5)
    explained = torch._dynamo.explain(_layer)(*args)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained
    torch._dynamo.reset()
    got = torch.compile(_layer, fullgraph=True, backend="aot_eager")(*args)
    _assert_close(got, _ref_layer(*args))


def test_compile_dynamic_no_recompile():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("aot_eager")
    fn = torch.compile(_layer, fullgraph=True, dynamic=True, backend=cnt)
    for s in (5, 7):
        args = _layer_args(s, seed=s)
        _assert_close(fn(*args), _ref_layer(*args))
    assert cnt.frame_count == 1, f"recompiled: {cnt.frame_count} compiles for two sizes"


def test_compile_dynamic_every_dimension():
    """Every size of these ops changes between the two calls (within the constraints): one compile."""
    from torch._dynamo.testing import CompileCounterWithBackend

    def fn(x, w, wl, ids, table, logits):
        h = ops.rms_norm(x, w, 1e-6)
        y = ops.linear(ops.silu_and_mul(h), wl)
        return ops.softmax(y, -1), ops.layer_norm(y, None, None, 1e-5), ops.embedding(ids, table), ops.argmax(logits)

    def ref(x, w, wl, ids, table, logits):
        h = ref_rms(x, w, 1e-6)
        d = h.shape[-1] // 2
        y = (F.silu(h[:, :d]) * h[:, d:]) @ wl.to(f64).T
        return (y.softmax(-1), F.layer_norm(y, (y.shape[-1],)), table.to(f64)[ids], logits.argmax(-1))

    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("aot_eager")
    cfn = torch.compile(fn, fullgraph=True, dynamic=True, backend=cnt)
    g = _gen(14)
    for m, n, o, v in ((3, 16, 5, 7), (5, 32, 9, 11)):
        args = (rand(g, m, n), rand(g, n), rand(g, o, n // 2), torch.randint(0, v, (m + 1, 2), generator=g),
                rand(g, v, o), rand(g, m + 3, v))  # no two sizes equal (duck sizing would tie them)
        got, want = cfn(*args), ref(*args)
        _assert_close(got[:3], want[:3])
        assert torch.equal(got[3], want[3])
    assert cnt.frame_count == 1, f"recompiled: {cnt.frame_count} compiles for two sizes"


def test_compile_inplace_ops_and_cache_write():
    """Mutating ops under compile: functionalization must keep the writes (caches, in-place rope)."""
    def step(q, k, v, kc, vc, slots, pos):
        ops.rope_inplace(q, k, pos, 10000.0, None)
        ops.kv_cache_write(k, v, kc, vc, slots)
        return q * 2

    torch._dynamo.reset()
    g = _gen(4)
    q, k, pos = _rope_args(g, "cpu")
    v = rand(g, 3, 1, 8)
    kc, vc = torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8)
    slots = torch.tensor([0, 7, 3])
    want_q, want_k = ref_rope(q, pos, 10000.0), ref_rope(k, pos, 10000.0)
    want_kc, want_vc = _ref_cache_write(want_k, v, kc, vc, slots)
    assert torch._dynamo.explain(step)(*_clone((q, k, v, kc, vc, slots, pos))).graph_break_count == 0
    out = torch.compile(step, fullgraph=True, backend="aot_eager")(q, k, v, kc, vc, slots, pos)
    _assert_close((out, q, k, kc, vc), (2 * want_q, want_q, want_k, want_kc, want_vc))


# ------------------------------------------------------------------ errors

def _launch_message(fn, *args, **kwargs):
    """The message the stdlib raises at launch for these arguments (as NumPy arrays)."""
    with pytest.raises((ValueError, TypeError)) as e:
        fn(*(to_numpy(a) if isinstance(a, torch.Tensor) else a for a in args), **kwargs)
    return str(e.value)


BAD = [
    ("rms_norm", S.rms_norm, lambda r: (r(4, 6), r(5))),
    ("silu_and_mul", S.silu_and_mul, lambda r: (r(4, 7),)),
    ("linear", S.linear, lambda r: (r(3, 16), r(5, 12))),
    ("matmul", S.matmul, lambda r: (r(3, 16), r(12, 4))),
    ("bmm", S.bmm, lambda r: (r(2, 3, 16), r(3, 16, 4))),
    ("gated_mlp", S.gated_mlp, lambda r: (r(3, 12), r(5, 12), r(5, 12))),
    ("attention_prefill", S.attention_prefill, lambda r: (r(1, 4, 5, 16), r(1, 3, 5, 16), r(1, 3, 5, 16))),
    ("attention_prefill", S.attention_prefill, lambda r: (r(1, 2, 5, 24), r(1, 2, 5, 24), r(1, 2, 5, 24))),
    ("fused_add_rms_norm", S.fused_add_rms_norm, lambda r: (r(4, 6), r(4, 5))),
    ("embedding", S.embedding, lambda r: (r(3), r(5, 4))),
]


@pytest.mark.parametrize("name,fn,make", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
@pytest.mark.parametrize("dynamic", [False, True])
def test_bad_shape_fails_at_trace_time_with_launch_message(name, fn, make, dynamic):
    g = _gen(5)
    args = make(lambda *s: rand(g, *s))
    msg = _launch_message(fn, *args)
    op = getattr(ops, name)
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a: op(*a), fullgraph=True, dynamic=dynamic, backend="eager")
    with pytest.raises(Exception) as e:
        compiled(*args)
    assert msg in str(e.value)
    exc = type(_exc(fn, args))
    with pytest.raises(exc) as e:  # eager call: the CPU implementation says the same
        op(*args)
    assert str(e.value) == msg
    mode = torch._subclasses.fake_tensor.FakeTensorMode()
    fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
    with mode, pytest.raises(exc) as e:  # the fake rule alone raises the launch's exception type and text
        op(*fake)
    assert str(e.value) == msg


def _exc(fn, args):
    try:
        fn(*(to_numpy(a) for a in args))
    except Exception as e:  # noqa: BLE001
        return e
    raise AssertionError("no error")


def test_dynamic_guard_rejects_a_later_bad_size():
    """Under dynamic=True the fake rule's checks are guards: a size that breaks them retraces and fails."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("eager")
    fn = torch.compile(lambda x: ops.silu_and_mul(x), fullgraph=True, dynamic=True, backend=cnt)
    g = _gen(6)
    for n in (6, 10):
        x = rand(g, 3, n)
        assert torch.allclose(fn(x), F.silu(x[:, :n // 2]) * x[:, n // 2:], atol=1e-5)
    assert cnt.frame_count == 1
    with pytest.raises(Exception, match=re.escape(_launch_message(S.silu_and_mul, rand(g, 3, 9)))):
        fn(rand(g, 3, 9))


def test_backward_raises_naming_the_op():
    g = _gen(7)
    x, w = rand(g, 3, 8).requires_grad_(), rand(g, 5, 8).requires_grad_()
    y = ops.linear(x, w)  # the forward runs with tensors that require grad
    assert torch.allclose(y, x @ w.T, atol=1e-5)
    with pytest.raises(RuntimeError, match=r"tilex::linear is inference-only: no backward"):
        y.sum().backward()
    with torch.no_grad():
        ops.linear(x, w)
    torch._dynamo.reset()
    z = torch.compile(lambda a: ops.rms_norm(a, None, 1e-6).sum(), fullgraph=True, backend="aot_eager")(x)
    with pytest.raises(RuntimeError, match=r"tilex::rms_norm is inference-only: no backward"):
        z.backward()


def test_in_place_ops_refuse_inputs_that_require_grad():
    """torch takes no backward formula for ops that write their inputs; without this check gradients would
    flow through rope_inplace as if it were the identity."""
    g = _gen(15)
    q, k, pos = _rope_args(g, "cpu")
    leaf = q.clone().requires_grad_()
    with pytest.raises(RuntimeError, match=r"tilex::rope_inplace is inference-only: no backward"):
        ops.rope_inplace(leaf * 1, k, pos, 10000.0, None)
    x, r = rand(g, 5, 7).requires_grad_(), rand(g, 5, 7)
    with pytest.raises(RuntimeError, match=r"tilex::fused_add_rms_norm_inplace is inference-only"):
        ops.fused_add_rms_norm_inplace(x * 1, r, None, 1e-6)
    with torch.no_grad():  # inference: fine, and the writes happen
        q2 = leaf * 1
        ops.rope_inplace(q2, k, pos, 10000.0, None)
    _assert_close((q2,), (ref_rope(q, pos, 10000.0),))
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"tilex::rope_inplace is inference-only"):
        torch.compile(lambda a, b, p: ops.rope_inplace(a * 1, b, p, 10000.0, None), fullgraph=True,
                      backend="aot_eager")(leaf, k, pos)


# ------------------------------------------------------------------ user kernels

@pytest.fixture(scope="module")
def user_ops():
    # the example with a `where` constraint of its own (the shipped file has none): its launch-time message is
    # what the op's fake rule must give at trace time
    src = (ROOT / "examples" / "rmsnorm.tile").read_text().replace("    grid (M,)", "    where N % 8 == 0\n    grid (M,)")
    assert "where N % 8 == 0" in src
    rms = tilex.compile(src, BLOCK=16)
    add = tilex.compile(str(ROOT / "examples" / "vector_add.tile"), BLOCK=8)
    return (tt.op(rms, "rmsnorm", name="tilextest::rmsnorm"), tt.op(add, "vector_add", name="tilextest::vadd"))


def test_user_kernel_op_values_and_opcheck(user_ops):
    rmsnorm, vadd = user_ops
    g = _gen(8)
    x, w = rand(g, 3, 24, dtype=torch.bfloat16), rand(g, 24, dtype=torch.bfloat16)
    y = rmsnorm(x, w, 1e-6)
    assert y.dtype == torch.bfloat16 and y.shape == (3, 24)
    err = ((y.to(f64) - ref_rms(x, w, 1e-6)).abs() / (1 + ref_rms(x, w, 1e-6).abs())).max()
    assert err <= 3e-2
    a, b = rand(g, 13), rand(g, 13)
    assert torch.equal(vadd(a, b), a + b)
    assert torch.equal(torch.ops.tilextest.vadd(a, b), a + b)
    torch.library.opcheck(vadd, (a, b))
    torch.library.opcheck(rmsnorm, (x, w, 1e-6))


def test_user_kernel_op_compiles_dynamic_and_checks_constraints(user_ops):
    from torch._dynamo.testing import CompileCounterWithBackend

    rmsnorm, vadd = user_ops
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("aot_eager")
    fn = torch.compile(lambda x, w, a, b: (rmsnorm(x, w), vadd(a, b) * 2), fullgraph=True, dynamic=True,
                       backend=cnt)
    g = _gen(9)
    for m, n, k in ((3, 16, 5), (5, 24, 9)):
        x, w = rand(g, m, n, dtype=torch.bfloat16), rand(g, n, dtype=torch.bfloat16)
        a, b = rand(g, k), rand(g, k)
        y, z = fn(x, w, a, b)
        assert torch.equal(z, (a + b) * 2)
        assert ((y.to(f64) - ref_rms(x, w, 1e-6)).abs() / (1 + ref_rms(x, w, 1e-6).abs())).max() <= 3e-2
    assert cnt.frame_count == 1
    x, w = rand(g, 3, 12, dtype=torch.bfloat16), rand(g, 12, dtype=torch.bfloat16)
    with pytest.raises(Exception) as launch:  # N % 8 != 0: the kernel's `where` constraint
        rmsnorm(x, w)
    assert "constraint `N % 8 == 0`" in str(launch.value)
    with pytest.raises(Exception) as traced:
        fn(x, w, a, b)
    assert str(launch.value) in str(traced.value)
    with pytest.raises(Exception, match="inconsistent size for symbol N"):
        torch.compile(lambda a, b: vadd(a, b), fullgraph=True, backend="eager")(rand(g, 5), rand(g, 6))


def test_user_kernel_op_errors_and_backward(user_ops):
    _, vadd = user_ops
    mod = tilex.compile(str(ROOT / "examples" / "vector_add.tile"), BLOCK=8)
    with pytest.raises(ValueError, match="no kernel named 'nope'"):
        tt.op(mod, "nope", name="tilextest::nope")
    with pytest.raises(ValueError, match="namespace::opname"):
        tt.op(mod, "vector_add", name="vadd")
    with pytest.raises(ValueError, match="mutates_args: 'q' is not a tensor parameter"):
        tt.op(mod, "vector_add", name="tilextest::vadd2", mutates_args=("q",))
    g = _gen(10)
    a = rand(g, 9).requires_grad_()
    with pytest.raises(RuntimeError, match="tilextest::vadd is inference-only"):
        vadd(a, a).sum().backward()


def test_import_tilex_without_torch_keeps_working(tmp_path):
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"
            "import tilex, tilex.stdlib, numpy as np\n"
            "x = np.ones((2, 8), np.float32); print(tilex.stdlib.rms_norm(x).shape)\n"
            "try:\n    import tilex.torch\nexcept ImportError as e:\n    print('ImportError:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "(2, 8)" in out.stdout and "pip install 'tilex[torch]'" in out.stdout


def test_bench_toy_decoder_layer_compiles_on_cpu():
    """benchmarks/bench_torch_ops.py's layer (tiny, f32, CPU): one graph, compiled == eager, cache writes kept."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_torch_ops.py"
    spec = importlib.util.spec_from_file_location("bench_torch_ops", path)
    B = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(B)
    torch.manual_seed(0)
    layer = B.ToyDecoderLayer(hidden=16, heads=2, kv_heads=1, head_dim=16, inter=24, blocks=4, block_size=16,
                              dtype=torch.float32, device="cpu")
    inputs = B.layer_inputs(layer, 2, context=9)
    assert torch._dynamo.explain(layer)(*inputs).graph_break_count == 0
    caches = layer.k_cache.clone(), layer.v_cache.clone()
    torch._dynamo.reset()
    y, res = torch.compile(layer, fullgraph=True, backend="aot_eager")(*inputs)
    kc, vc = layer.k_cache.clone(), layer.v_cache.clone()
    layer.k_cache.copy_(caches[0])
    layer.v_cache.copy_(caches[1])
    y2, res2 = layer(*inputs)
    assert torch.equal(y, y2) and torch.equal(res, res2)
    assert torch.equal(kc, layer.k_cache) and kc.abs().sum() > 0  # the compiled graph kept the cache writes


def test_user_kernel_op_writing_out_parameters_in_place():
    """An `out` parameter named in mutates_args is taken, not allocated: stdlib's kv_cache_write kernel as
    a user op writes the caches it is given."""
    from tilex.stdlib import _launch as L

    mod = L.load("kv_cache_write", T="f32", I="i64", BLOCK=8, WARPS=1)
    with pytest.raises(ValueError, match="the size NB of out parameter 'k_cache'.*mutates_args"):
        tt.op(mod, "kv_cache_write", name="tilextest::cache_write_alloc")
    write = tt.op(mod, "kv_cache_write", name="tilextest::cache_write", mutates_args=("k_cache", "v_cache"))
    g = _gen(16)
    k, v = rand(g, 3, 2, 4), rand(g, 3, 2, 4)
    kc, vc = torch.zeros(2, 4, 2, 4), torch.zeros(2, 4, 2, 4)
    slots = torch.tensor([5, -1, 2])
    want = _ref_cache_write(k, v, kc, vc, slots)
    assert write(k.view(3, 8), v.view(3, 8), kc.view(2, 4, 8), vc.view(2, 4, 8), slots) is None
    assert torch.equal(kc, want[0].float()) and torch.equal(vc, want[1].float())
    torch.library.opcheck(write, (k.view(3, 8), v.view(3, 8), kc.view(2, 4, 8).clone(), vc.view(2, 4, 8).clone(),
                                  slots))
    torch._dynamo.reset()
    kc2, vc2 = torch.zeros(2, 4, 8), torch.zeros(2, 4, 8)
    torch.compile(lambda *a: write(*a), fullgraph=True, backend="aot_eager")(k.view(3, 8), v.view(3, 8), kc2, vc2,
                                                                             slots)
    assert torch.equal(kc2, kc.view(2, 4, 8)) and torch.equal(vc2, vc.view(2, 4, 8))
    with pytest.raises(RuntimeError, match="tilextest::cache_write is inference-only"):
        write(k.view(3, 8).requires_grad_(), v.view(3, 8), kc2, vc2, slots)


def test_attention_decode_num_splits_checked_like_the_launch():
    args = _decode_args(_gen(17), "cpu")
    msg = _launch_message(S.attention_decode, *args, num_splits=0)
    mode = torch._subclasses.fake_tensor.FakeTensorMode()
    fake = [mode.from_tensor(a) for a in args]
    with mode, pytest.raises(ValueError) as e:
        ops.attention_decode(*fake, None, 0)
    assert str(e.value) == msg
    empty = (args[0][:0], *args[1:3], args[3][:0], args[4][:0])  # no sequences: nothing to split, no error
    assert ops.attention_decode(*empty, None, 0).shape == (0, 4, 16)
    with mode:
        assert ops.attention_decode(*[mode.from_tensor(a) for a in empty], None, 0).shape == (0, 4, 16)


def test_topk_op_matches_torch_topk_on_cpu():
    """torch.ops.tilex.topk (the interpreter on CPU tensors) against torch.topk: values and int64 indices (random
    floats have no ties), and its fake rule's shapes under FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(2, 3, 777)
    v, i = torch.ops.tilex.topk(x, 9)
    rv, ri = torch.topk(x, 9)
    assert torch.equal(v, rv) and torch.equal(i, ri)
    with FakeTensorMode() as mode:
        fv, fi = torch.ops.tilex.topk(mode.from_tensor(x), 9)
    assert fv.shape == (2, 3, 9) and fi.dtype == torch.int64

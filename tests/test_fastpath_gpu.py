"""GPU: the stdlib's per-call fast path (`tilex.stdlib._launch.fastpath`) computes what the full wrappers compute.

Each wrapper is called on fresh random inputs at odd sizes three times (the first call records, the next two
replay: new addresses each time, so pointers and TMA maps are patched), and every result is compared with a
torch float32 reference (max |out - ref| / max |ref| <= 1e-2 for bf16 outputs) and bitwise with the full wrapper
(`fn.full`, the same kernels) on the same inputs. The same replays run inside a torch CUDA-graph capture
(replayed on new data) and on a side stream. Every test runs on the C replay (`tilex.cfast`: "c", checked to have
replayed in C) and on the Python fast path ("py"); after a replayed layout, calls of other layouts get the full
wrapper's errors.

Run: pytest -m gpu tests/test_fastpath_gpu.py
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tilex.stdlib as S  # noqa: E402
from tilex import cfast  # noqa: E402
from tilex.runtime import driver  # noqa: E402
from tilex.stdlib import _launch as L  # noqa: E402

TOL = 1e-2
MODE = ["py"]  # the running test's mode


@pytest.fixture(autouse=True, params=["c", "py"], ids=["cpath", "pypath"])
def _cuda(request, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    if driver.launcher() is None:
        pytest.skip("no direct launch here (libcuda not loadable or TILEX_DIRECT_LAUNCH=0)")
    if request.param == "c" and not cfast.ready():
        pytest.skip(f"the C fast path is off here: {cfast.why()}")
    MODE[0] = request.param
    monkeypatch.setattr(L, "FASTPATH", True)
    monkeypatch.setattr(L, "POISON", False)
    monkeypatch.setattr(L, "CFAST", request.param == "c")
    L.clear_fastpath()
    yield
    torch.cuda.synchronize()


def c_hits() -> int:
    mod = cfast.module()
    return mod.hits() if mod is not None else 0


def replayed(hits: int, chits: int, n: int = 1) -> bool:
    """n calls since (STATS hits, C hits) were read were fast-path hits, on the C path in mode "c"."""
    return L.STATS["hit"] == hits + n and c_hits() == chits + (n if MODE[0] == "c" else 0)


_SEED = [0]


def rnd(*shape, dtype=torch.bfloat16, scale=1.0):
    _SEED[0] += 1
    g = torch.Generator(device="cuda").manual_seed(_SEED[0])
    return (torch.randn(shape, generator=g, device="cuda", dtype=torch.float32) * scale).to(dtype)


def ints(*shape, high, low=0, dtype=torch.int32):
    _SEED[0] += 1
    g = torch.Generator(device="cuda").manual_seed(_SEED[0])
    return torch.randint(low, high, shape, generator=g, device="cuda", dtype=dtype)


def rel(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def rms_ref(x, w, eps):
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def rope_ref(x, pos, theta):
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, device="cuda", dtype=torch.float64) / d)
    ang = pos.double()[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]
    xf = x.double()
    rot = torch.cat([-xf[..., d // 2:], xf[..., :d // 2]], -1)
    return xf * cos + rot * sin


def attn_ref(q, k, v, scale):  # bshd, causal, GQA
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    o = F.scaled_dot_product_attention(qf, kf, vf, is_causal=True, scale=scale, enable_gqa=True)
    return o.transpose(1, 2)


def _cases():
    """(name, wrapper, make() -> (args, kwargs), reference(args, kwargs) -> tensors)."""
    out = []
    n = 1000
    out.append(("rms_norm", S.rms_norm, lambda: ((rnd(37, n), rnd(n)), dict(eps=1e-5)),
                lambda a, k: [rms_ref(a[0], a[1], 1e-5)]))

    def fused_ref(a, k):
        h = (a[0].float() + a[1].float()).to(a[0].dtype)
        return [rms_ref(h, a[2], 1e-6), h]
    out.append(("fused_add_rms_norm", S.fused_add_rms_norm, lambda: ((rnd(37, 5120), rnd(37, 5120), rnd(5120)), {}),
                fused_ref))
    for m in (1, 13, 37, 300):
        out.append((f"linear M={m}", S.linear, lambda m=m: ((rnd(m, 1024), rnd(712, 1024, scale=0.03)), {}),
                    lambda a, k: [F.linear(a[0].float(), a[1].float())]))
    out.append(("linear bias", S.linear, lambda: ((rnd(3, 100, 512), rnd(392, 512, scale=0.05), rnd(392)), {}),
                lambda a, k: [F.linear(a[0].float(), a[1].float(), a[2].float())]))
    out.append(("linear odd K", S.linear, lambda: ((rnd(21, 100), rnd(72, 100, scale=0.1)), {}),
                lambda a, k: [F.linear(a[0].float(), a[1].float())]))
    out.append(("gated_mlp", S.gated_mlp, lambda: ((rnd(100, 512), rnd(264, 512, scale=0.05), rnd(264, 512, scale=0.05)), {}),
                lambda a, k: [F.silu(F.linear(a[0].float(), a[1].float())) * F.linear(a[0].float(), a[2].float())]))

    def qkv_ref(a, k):
        y = F.linear(a[0].float(), a[1].float(), a[4].float())
        return [y[:, :512], y[:, 512:640], y[:, 640:]]
    out.append(("linear_qkv", S.linear_qkv, lambda: ((rnd(100, 512), rnd(768, 512, scale=0.05), 512, 128,
                                                      rnd(768)), {}), qkv_ref))
    out.append(("silu_and_mul", S.silu_and_mul, lambda: ((rnd(19, 2 * 700),), {}),
                lambda a, k: [F.silu(a[0][:, :700].float()) * a[0][:, 700:].float()]))
    out.append(("softmax", S.softmax, lambda: ((rnd(3, 40000),), {}), lambda a, k: [F.softmax(a[0].float(), -1)]))
    out.append(("rope", S.rope, lambda: ((rnd(77, 5, 128), rnd(77, 1, 128), ints(77, high=4000, dtype=torch.int64)),
                                         dict(theta=1e6)),
                lambda a, k: [rope_ref(a[0], a[2], 1e6), rope_ref(a[1], a[2], 1e6)]))
    out.append(("embedding", S.embedding, lambda: ((ints(3, 11, high=1000), rnd(1000, 136)), {}),
                lambda a, k: [F.embedding(a[0].long(), a[1].float())]))

    def prefill_make():
        s = 133
        return (rnd(1, s, 8, 128), rnd(1, s, 2, 128), rnd(1, s, 2, 128)), dict(
            causal=True, scale=0.09, out=torch.empty(1, s, 8, 128, device="cuda", dtype=torch.bfloat16), layout="bshd")
    out.append(("attention_prefill bshd", S.attention_prefill, prefill_make,
                lambda a, k: [attn_ref(a[0], a[1], a[2], 0.09)]))
    out.append(("argmax", S.argmax, lambda: ((rnd(5, 50000),), {}), lambda a, k: [a[0].float().argmax(-1)]))
    return out


CASES = _cases()


def _check(name, args, kwargs, got, reference):
    ref = reference(args, kwargs)
    got = S_flat(got)
    assert len(got) == len(ref), name
    for g, r in zip(got, ref):
        if g.dtype == torch.int64:  # argmax: the same index, or a tie of equal values
            rows = torch.arange(len(g), device="cuda")
            assert bool((args[0][rows, g] == args[0][rows, r]).all()), name
        else:
            assert rel(g, r) <= TOL, (name, rel(g, r))


def S_flat(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fast_path_matches_torch_and_the_full_wrapper(case):
    name, fn, make, reference = case
    for i in range(3):
        args, kwargs = make()
        hits, chits = L.STATS["hit"], c_hits()
        got = fn(*args, **kwargs)
        if i:
            assert replayed(hits, chits), f"{name}: call {i} was not replayed ({MODE[0]})"
        got = [t.clone() for t in S_flat(got)]
        _check(name, args, kwargs, got, reference)
        if "out" in kwargs:
            kwargs = dict(kwargs, out=torch.empty_like(kwargs["out"]))
        full = S_flat(fn.full(*args, **kwargs))
        assert all(torch.equal(a, b) for a, b in zip(got, full)), f"{name}: fast path != full wrapper"


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in ("rms_norm", "linear M=13", "linear M=300",
                                                               "fused_add_rms_norm", "attention_prefill bshd",
                                                               "rope", "gated_mlp")],
                         ids=lambda c: c[0])
def test_fast_path_under_graph_capture(case):
    name, fn, make, reference = case
    args, kwargs = make()
    fn(*args, **kwargs)  # compile and load outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn(*args, **kwargs)  # recorded on the capture stream
        hits, chits = L.STATS["hit"], c_hits()
        out = fn(*args, **kwargs)  # replayed into the graph
        assert replayed(hits, chits)
    fresh, _ = make()
    for a, b in zip(args, fresh):
        if torch.is_tensor(a):
            a.copy_(b)
    g.replay()
    torch.cuda.synchronize()
    _check(name, args, kwargs, S_flat(out), reference)


def test_fast_path_on_a_side_stream():
    s = torch.cuda.Stream()
    for name, fn, make, reference in [c for c in CASES if c[0] in ("rms_norm", "linear M=37", "silu_and_mul")]:
        args, kwargs = make()
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            outs = [S_flat(fn(*args, **kwargs)) for _ in range(3)]
        s.synchronize()
        for out in outs:
            _check(name, args, kwargs, out, reference)


def _outcome(fn, args, kwargs):
    try:
        r = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - compared with the full wrapper's
        return ("error", type(e), str(e))
    torch.cuda.synchronize()
    return ("ok", [t.clone() for t in S_flat(r)])


def test_other_layouts_after_a_replay_get_the_full_wrappers_outcome():
    """rms_norm and linear replayed (C or Python), then calls that change a dtype, a shape, a device, a stride
    or an option: each gets exactly what the full wrapper gives (its error, or equal results)."""
    x, w = rnd(37, 1000), rnd(1000)
    for _ in range(2):
        S.rms_norm(x, w, 1e-5)
    hits, chits = L.STATS["hit"], c_hits()
    S.rms_norm(x, w, 1e-5)
    assert replayed(hits, chits)
    xl, wl = rnd(13, 1024), rnd(712, 1024, scale=0.03)
    for _ in range(2):
        S.linear(xl, wl)
    cases = [(S.rms_norm, (x, w.half(), 1e-5)), (S.rms_norm, (x, rnd(999), 1e-5)), (S.rms_norm, (x, w.cpu(), 1e-5)),
             (S.rms_norm, (x.cpu(), w.cpu(), 1e-5)), (S.rms_norm, (x.float(), w, 1e-5)),
             (S.rms_norm, (x, w, float("nan"))), (S.rms_norm, (x, w, "1e-5")), (S.rms_norm, (x[:, ::2], w[::2], 1e-5)),
             (S.linear, (xl, rnd(712, 512))), (S.linear, (rnd(13, 2048)[:, ::2], wl)), (S.linear, (xl, wl.half())),
             (S.linear, (xl, wl, rnd(713)))]
    for fn, args in cases:
        got, full = _outcome(fn, args, {}), _outcome(fn.full, args, {})
        assert got[0] == full[0], (got, [getattr(a, "shape", a) for a in args])
        if got[0] == "error":
            assert got == full
        else:
            assert all(torch.equal(a, b) for a, b in zip(got[1], full[1]))

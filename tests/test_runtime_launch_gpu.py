"""GPU: the direct launch of replayed launch plans (runtime/plan.py, runtime/driver.py) against torch and
against the CuPy path (TILEX_DIRECT_LAUNCH off), at odd sizes; inside torch CUDA-graph capture and CuPy
stream capture.

Each wrapper is called several times on fresh inputs and outputs (new addresses: pointers and TMA maps are
rewritten in the plan's buffer), and the driver's cuLaunchKernelEx is counted so a test fails when the
replays did not take the direct path. Tolerance: max |out - ref| / max |ref| against a float64 reference
(torch's float32/float64 math on the same inputs), 1e-2 for bf16; direct vs CuPy path: bitwise equal
(the same kernel on the same inputs).

Run: pytest -m gpu tests/test_runtime_launch_gpu.py
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tilex.stdlib as S  # noqa: E402
from tilex.runtime import Kernel, driver  # noqa: E402
from tilex.spec import KernelSpec, ParamSpec  # noqa: E402

TOL = 1e-2  # bf16 outputs


@pytest.fixture(autouse=True)
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    if driver.launcher() is None:
        pytest.skip("no direct launch here (libcuda not loadable or TILEX_DIRECT_LAUNCH=0)")
    yield
    torch.cuda.synchronize()


@pytest.fixture
def counted(monkeypatch):
    """Counts the driver launches (the real cuLaunchKernelEx underneath)."""
    real = driver.launcher()
    calls = []

    def launch(*a):
        calls.append(a[0])
        return real(*a)

    monkeypatch.setattr(driver, "launcher", lambda: launch)
    return calls


def rnd(shape, seed, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)


def rel(out, ref) -> float:
    out, ref = out.double().cpu().numpy(), ref.double().cpu().numpy()
    assert out.shape == ref.shape and np.isfinite(out).all()
    return float(np.abs(out - ref).max(initial=0.0) / max(np.abs(ref).max(initial=0.0), 1e-30))


def rms_ref(x, w, eps):
    xf = x.double()
    return xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps) * w.double()


# (name, make inputs(seed), tilex call, float64 reference)
CASES = {
    "linear_m1": (lambda s: (rnd((1, 1032), s), rnd((520, 1032), s + 1)), S.linear,
                  lambda x, w: x.double() @ w.double().T),
    "linear_m37": (lambda s: (rnd((37, 264), s), rnd((200, 264), s + 1)), S.linear,
                   lambda x, w: x.double() @ w.double().T),
    "linear_m203": (lambda s: (rnd((203, 136), s), rnd((328, 136), s + 1)), S.linear,  # TMA + wgmma
                    lambda x, w: x.double() @ w.double().T),
    "linear_oddk": (lambda s: (rnd((19, 77), s), rnd((45, 77), s + 1)), S.linear,
                    lambda x, w: x.double() @ w.double().T),
    "rms_norm": (lambda s: (rnd((77, 1000), s), rnd((1000,), s + 1)), lambda x, w: S.rms_norm(x, w, 1e-5),
                 lambda x, w: rms_ref(x, w, 1e-5)),
    "silu_and_mul": (lambda s: (rnd((45, 2 * 333), s),), S.silu_and_mul,
                     lambda x: F.silu(x.double()[:, :333]) * x.double()[:, 333:]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_replays_match_torch_and_the_cupy_path(name, counted, monkeypatch):
    make, call, ref = CASES[name]
    outs = []
    for seed in range(0, 8, 2):  # new inputs and outputs each call: new addresses in the plan's buffer
        args = make(seed)
        out = call(*args)
        assert rel(out, ref(*args)) <= TOL, f"{name} seed {seed}"
        outs.append((args, out))
    assert len(counted) >= 4, "the calls did not launch through the driver"
    monkeypatch.setattr(driver, "launcher", lambda: None)  # the CuPy path
    for args, out in outs:
        assert torch.equal(call(*args), out), f"{name}: the direct launch and CuPy's launch disagree"


def test_kernel_scalars_change_between_replays(counted):
    src = r"""
extern "C" __global__ void axpb(const float* x, float* out, float a, long long b, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = a * x[i] + (float)b;
}
"""
    spec = KernelSpec("axpb", (ParamSpec("x", "tensor", "f32", ("N",)), ParamSpec("out", "tensor", "f32", ("N",)),
                               ParamSpec("a", "scalar", "f32"), ParamSpec("b", "scalar", "i64", default=0)),
                      ("N",), (), ("cdiv(N, 128)",), 128, 0)
    k = Kernel(spec, src, cache_dir=False)
    rng = np.random.default_rng()
    n = int(rng.integers(1, 5000))
    x = torch.randn(n, device="cuda")
    for _ in range(4):
        out = torch.empty_like(x)
        a, b = float(rng.standard_normal()), int(rng.integers(-2**40, 2**40))
        k(x, out, a, b=b)
        torch.testing.assert_close(out, a * x + float(b), rtol=1e-6, atol=abs(b) * 1e-6 + 1e-6)
    k(x, out, 0.5)  # b's default
    torch.testing.assert_close(out, 0.5 * x)
    assert len(counted) == 5 and len(k._plans) == 2


def test_inside_torch_cuda_graph_capture(counted):
    x, w = rnd((203, 136), 1), rnd((328, 136), 2)
    xn, wn = rnd((77, 1000), 3), rnd((1000,), 4)
    static_x, static_xn = x.clone(), xn.clone()
    for _ in range(2):  # warm up before capturing (compile, load, make the plans)
        S.linear(static_x, w), S.rms_norm(static_xn, wn)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    before = len(counted)
    with torch.cuda.graph(graph):
        y = S.linear(static_x, w)
        yn = S.rms_norm(static_xn, wn)
    assert len(counted) == before + 2  # captured through the direct launch
    for seed in (10, 20):
        static_x.copy_(rnd(static_x.shape, seed))
        static_xn.copy_(rnd(static_xn.shape, seed + 1))
        graph.replay()
        torch.cuda.synchronize()
        assert rel(y, static_x.double() @ w.double().T) <= TOL
        assert rel(yn, rms_ref(static_xn, wn, 1e-6)) <= TOL


def test_inside_cupy_stream_capture(counted):
    cp = pytest.importorskip("cupy")
    src = r"""
extern "C" __global__ void scale(const float* x, float* out, float a, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = a * x[i];
}
"""
    spec = KernelSpec("scale", (ParamSpec("x", "tensor", "f32", ("N",)), ParamSpec("out", "tensor", "f32", ("N",)),
                                ParamSpec("a", "scalar", "f32")), ("N",), (), ("cdiv(N, 256)",), 256, 0)
    k = Kernel(spec, src, cache_dir=False)
    n = 1000 + int(np.random.default_rng().integers(0, 1000))
    x = cp.random.standard_normal(n, dtype=cp.float32)
    out = cp.empty_like(x)
    s = cp.cuda.Stream(non_blocking=True)
    k(x, out, 2.0, stream=s)  # the plan is made outside the capture
    s.synchronize()
    s.begin_capture()
    k(x, out, 3.0, stream=s)
    graph = s.end_capture()
    out[...] = 0
    graph.launch(s)
    s.synchronize()
    cp.testing.assert_allclose(out, 3.0 * x, rtol=1e-6)
    assert len(counted) == 2


def test_tma_maps_follow_alternating_pointers(counted):
    w = rnd((328, 136), 5)
    xs = [rnd((203, 136), s) for s in (6, 7)]
    for i in range(6):  # the plan re-encodes x's map whenever x's address changes
        x = xs[i % 2]
        assert rel(S.linear(x, w), x.double() @ w.double().T) <= TOL
    assert len(counted) >= 6


def test_threads_share_a_plan(counted):
    """Several threads replaying one plan at once (the buffer is filled and launched under the plan's lock;
    ctypes drops the GIL during cuLaunchKernel): every output is its own input's."""
    import threading

    src = r"""
extern "C" __global__ void addc(const float* x, float* out, float c, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = x[i] + c;
}
"""
    spec = KernelSpec("addc", (ParamSpec("x", "tensor", "f32", ("N",)), ParamSpec("out", "tensor", "f32", ("N",)),
                               ParamSpec("c", "scalar", "f32")), ("N",), (), ("cdiv(N, 256)",), 256, 0)
    k = Kernel(spec, src, cache_dir=False)
    n = 4099
    x0 = torch.randn(n, device="cuda")
    k(x0, torch.empty_like(x0), 0.0)  # compile, load and make the plan before the threads start
    torch.cuda.synchronize()
    results, errors = {}, []

    def work(t):
        try:
            torch.cuda.set_device(x0.device)
            outs = []
            for i in range(50):
                x = torch.full((n,), float(t * 1000 + i), device="cuda")
                out = torch.empty_like(x)
                k(x, out, 0.5)
                outs.append((x, out, t * 1000 + i))
            torch.cuda.synchronize()
            results[t] = outs
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for t, outs in results.items():
        for x, out, v in outs:
            assert torch.equal(out, torch.full_like(x, v + 0.5)), (t, v)
    assert len(k._plans) == 1 and len(counted) >= 1 + 4 * 50

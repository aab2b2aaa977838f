"""GPU tests of the CuPy runtime: NVRTC compile, cache, load, launch, torch interop, bench.

Marked `gpu`: conftest skips them where CuPy or a CUDA device is missing. The kernels
are hand-written CUDA in the shape codegen emits (extern "C", no headers).
"""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from tilex.diagnostics import LaunchError, TilexError
from tilex.runtime import Kernel, compile_cubin
from tilex.runtime import nvrtc as tnvrtc
from tilex.spec import ConstraintSpec, KernelSpec, ParamSpec

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng()

AXPY_SRC = r"""
extern "C" __global__ void axpy(const float* x, const float* y, float* out, float alpha, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = alpha * x[i] + y[i];
}
"""
AXPY = KernelSpec("axpy", (ParamSpec("x", "tensor", "f32", ("N",)),
                           ParamSpec("y", "tensor", "f32", ("N",)),
                           ParamSpec("out", "tensor", "f32", ("N",), is_out=True),
                           ParamSpec("alpha", "scalar", "f32", default=2.0)),
                  ("N",), (), ("cdiv(N, 256)",), 256, 0, source_file="axpy.tile", line=1)

# Row-wise RMSNorm on bf16 stored as unsigned short (no cuda_bf16.h needed).
RMSNORM_SRC = r"""
__device__ float bf2f(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }
__device__ unsigned short f2bf(float f) {
    unsigned int u = __float_as_uint(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
extern "C" __global__ void rmsnorm(const unsigned short* x, const unsigned short* w,
                                   unsigned short* out, float eps, int M, int N) {
    __shared__ float partial[128];
    int row = blockIdx.x;
    float acc = 0.f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) {
        float v = bf2f(x[(long long)row * N + j]);
        acc += v * v;
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    float r = rsqrtf(partial[0] / N + eps);
    for (int j = threadIdx.x; j < N; j += blockDim.x)
        out[(long long)row * N + j] = f2bf(bf2f(x[(long long)row * N + j]) * r * bf2f(w[j]));
}
"""
RMSNORM = KernelSpec("rmsnorm", (ParamSpec("x", "tensor", "bf16", ("M", "N")),
                                 ParamSpec("w", "tensor", "bf16", ("N",)),
                                 ParamSpec("out", "tensor", "bf16", ("M", "N"), is_out=True),
                                 ParamSpec("eps", "scalar", "f32", default=1e-6)),
                     ("M", "N"), (ConstraintSpec("N % 8 == 0", "N % 8 == 0", 2),), ("M",), 128, 0,
                     source_file="rmsnorm.tile", line=1)


@pytest.fixture
def cp():
    return pytest.importorskip("cupy")


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache"


def rmsnorm_ref(x, w, eps):
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    r = 1.0 / np.sqrt((xf * xf).mean(axis=1, keepdims=True) + eps)
    return (xf * r * wf).astype(ml_dtypes.bfloat16)


def test_default_arch_and_cubin(cp, cache_dir):
    cc = cp.cuda.Device().compute_capability
    arch = tnvrtc.default_arch()
    assert arch == ("sm_90a" if cc == "90" else f"sm_{cc}")
    k = Kernel(AXPY, AXPY_SRC, cache_dir=cache_dir)
    assert k.cubin[:4] == b"\x7fELF"
    assert len(list(cache_dir.iterdir())) == 1


def test_axpy_matches_numpy(cp, cache_dir):
    n = int(RNG.integers(1, 100_000))
    x, y = (cp.asarray(RNG.standard_normal(n, dtype=np.float32)) for _ in range(2))
    out = cp.empty_like(x)
    k = Kernel(AXPY, AXPY_SRC, cache_dir=cache_dir)
    alpha = float(RNG.standard_normal())
    k(x, y, out, alpha)
    np.testing.assert_allclose(out.get(), alpha * x.get() + y.get(), rtol=1e-6, atol=1e-6)
    k(x, y, out)  # default alpha = 2
    np.testing.assert_allclose(out.get(), 2.0 * x.get() + y.get(), rtol=1e-6, atol=1e-6)


def test_rmsnorm_bf16_cupy(cp, cache_dir):
    m, n = int(RNG.integers(1, 300)), 8 * int(RNG.integers(1, 200))
    x = RNG.standard_normal((m, n)).astype(ml_dtypes.bfloat16)
    w = RNG.standard_normal(n).astype(ml_dtypes.bfloat16)
    xd, wd = cp.asarray(x), cp.asarray(w)
    out = cp.empty_like(xd)
    Kernel(RMSNORM, RMSNORM_SRC, cache_dir=cache_dir)(xd, wd, out, eps=1e-5)
    got = out.get().astype(np.float32)
    np.testing.assert_allclose(got, rmsnorm_ref(x, w, 1e-5).astype(np.float32), rtol=2e-2, atol=2e-2)


def test_rmsnorm_bf16_torch_on_current_stream(cache_dir):
    torch = pytest.importorskip("torch")
    m, n = int(RNG.integers(1, 300)), 8 * int(RNG.integers(1, 200))
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    k = Kernel(RMSNORM, RMSNORM_SRC, cache_dir=cache_dir)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        k(x, w, out)
    s.synchronize()
    ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float())
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
    for stream in (s, s.cuda_stream):  # explicit torch stream, raw handle
        out2 = torch.zeros_like(x)
        k(x, w, out2, stream=stream)
        s.synchronize()
        torch.testing.assert_close(out2, out)
    with pytest.raises(LaunchError, match="argument 'x': expected dtype bf16, got torch.float32"):
        k(x.float(), w, out)
    with pytest.raises(LaunchError, match="argument 'w': expected a CUDA tensor, got a tensor on cpu"):
        k(x, w.cpu(), out)
    with pytest.raises(LaunchError, match=r"constraint `N % 8 == 0` \(rmsnorm.tile:2\) failed: N = "):
        k(x[:, 1:].contiguous(), w[1:], out[:, 1:].contiguous())


def test_launch_errors_on_real_arrays(cp, cache_dir):
    k = Kernel(AXPY, AXPY_SRC, cache_dir=cache_dir)
    n = int(RNG.integers(2, 1000))
    x = cp.zeros(n, cp.float32)
    with pytest.raises(LaunchError, match="argument 'y': expected a CUDA array .* got a NumPy array"):
        k(x, np.zeros(n, np.float32), x)
    with pytest.raises(LaunchError, match=f"'x' has N = {n} .* but 'y' has N = {n - 1}"):
        k(x, x[1:].copy(), x)
    with pytest.raises(LaunchError, match="argument 'out': expected a C-contiguous"):
        k(x[::2].copy(), x[::2].copy(), x[::2])
    with pytest.raises(LaunchError, match="argument 'x': expected dtype f32, got float16"):
        k(x.astype(cp.float16), x, x)


def test_scalar_types_and_symbol_order(cp, cache_dir):
    # the parameters in their declared order (a scalar may come before a tensor), then the symbols (M, N)
    src = r"""
    extern "C" __global__ void scal(long long* out, float a, long long b, bool c, int d, int* t,
                                    int M, int N) {
        out[0] = (long long)(a * 4.0f); out[1] = b; out[2] = c ? 1 : 0; out[3] = d;
        out[4] = M; out[5] = N; t[N - 1] = 7;
    }"""
    spec = KernelSpec("scal", (ParamSpec("out", "tensor", "i64", ("M",)),
                               ParamSpec("a", "scalar", "bf16"), ParamSpec("b", "scalar", "i64"),
                               ParamSpec("c", "scalar", "bool"), ParamSpec("d", "scalar", "i32"),
                               ParamSpec("t", "tensor", "i32", ("N",))),
                      ("M", "N"), (), ("1",), 1, 0)
    m, n = int(RNG.integers(6, 50)), int(RNG.integers(1, 50))
    b, d = int(RNG.integers(2**33, 2**40)), int(RNG.integers(-2**31, 2**31))
    out = cp.zeros(m, cp.int64)
    t = cp.zeros(n, cp.int32)
    Kernel(spec, src, cache_dir=cache_dir)(out, 1.25, b, True, d, t)
    assert out.get()[:6].tolist() == [5, b, 1, d, m, n]
    assert int(t.get()[n - 1]) == 7


def test_large_dynamic_shared_memory(cp, cache_dir):
    smem = 200 * 1024
    src = r"""
    extern "C" __global__ void big_smem(const float* x, float* out, int N) {
        extern __shared__ float buf[];
        int n = 200 * 1024 / 4;
        for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[i % N] + (float)i;
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) if (i < N) out[i] = buf[n - 1 - i];
    }"""
    spec = KernelSpec("big_smem", (ParamSpec("x", "tensor", "f32", ("N",)),
                                   ParamSpec("out", "tensor", "f32", ("N",))),
                      ("N",), (), ("1",), 256, smem)
    n = int(RNG.integers(1, 1000))
    x = cp.asarray(RNG.standard_normal(n, dtype=np.float32))
    out = cp.zeros_like(x)
    Kernel(spec, src, cache_dir=cache_dir)(x, out)
    k = 200 * 1024 // 4
    idx = k - 1 - np.arange(n)
    np.testing.assert_allclose(out.get(), x.get()[idx % n] + idx.astype(np.float32), rtol=1e-6)


def test_empty_grid_skips_launch(cp, cache_dir):
    src = r"""
    extern "C" __global__ void flag(const float* x, int* hit, int M) { hit[0] = 1; }"""
    spec = KernelSpec("flag", (ParamSpec("x", "tensor", "f32", ("M",)),
                               ParamSpec("hit", "tensor", "i32", (1,))),
                      ("M",), (), ("cdiv(M, 128)",), 128, 0)
    k = Kernel(spec, src, cache_dir=cache_dir)
    hit = cp.zeros(1, cp.int32)
    k(cp.zeros(0, cp.float32), hit)
    cp.cuda.Device().synchronize()
    assert int(hit.get()[0]) == 0
    k(cp.zeros(3, cp.float32), hit)
    assert int(hit.get()[0]) == 1


def test_compile_error_reports_log(cp, cache_dir):
    src = 'extern "C" __global__ void broken(float* x) { x[0] = undefined_name; }'
    with pytest.raises(TilexError) as e:
        compile_cubin(src, cache_dir=cache_dir)
    msg = str(e.value)
    assert msg.startswith("internal compiler error: NVRTC failed")
    assert "undefined_name" in msg


def test_cache_hit_skips_compiler(cp, cache_dir, monkeypatch):
    src = AXPY_SRC + f"\n// {os.urandom(4).hex()}\n"
    first = compile_cubin(src, cache_dir=cache_dir)

    def no_compile(*a, **k):
        raise AssertionError("compiled although the cache holds the cubin")

    monkeypatch.setattr(tnvrtc, "compile_with_nvrtc", no_compile)
    k = Kernel(AXPY, src, cache_dir=cache_dir)
    assert k.cubin == first
    n = int(RNG.integers(1, 5000))
    x = cp.ones(n, cp.float32)
    out = cp.empty_like(x)
    k(x, x, out, 3.0)
    assert float(out.sum()) == pytest.approx(4.0 * n)


def test_explicit_cupy_stream_and_bench(cp, cache_dir):
    n = 1 << 20
    x = cp.asarray(RNG.standard_normal(n, dtype=np.float32))
    out = cp.empty_like(x)
    k = Kernel(AXPY, AXPY_SRC, cache_dir=cache_dir)
    s = cp.cuda.Stream(non_blocking=True)
    k(x, x, out, 0.5, stream=s)
    s.synchronize()
    np.testing.assert_allclose(out.get(), 1.5 * x.get(), rtol=1e-6)
    ms = k.bench(x, x, out, warmup=3, rep=20)
    assert 0.0 < ms < 100.0


@pytest.mark.nvcc
def test_nvcc_backend(cp, cache_dir):
    k = Kernel(AXPY, AXPY_SRC, cache_dir=cache_dir, backend="nvcc")
    assert k.cubin[:4] == b"\x7fELF"
    n = int(RNG.integers(1, 5000))
    x = cp.asarray(RNG.standard_normal(n, dtype=np.float32))
    out = cp.empty_like(x)
    k(x, x, out, 1.0)
    np.testing.assert_allclose(out.get(), 2.0 * x.get(), rtol=1e-6)

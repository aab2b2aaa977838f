"""fp8 (e4m3) products on wgmma (issue 20 item 4): `a @ b.T` of f8e4m3 tiles with an f32 accumulator is a wgmma
main loop on sm_90a (m64nNk32.f32.e4m3.e4m3, both operands K-major, TMA boxes of 128 one-byte elements);
elsewhere, or N-major, the generic product with the reason. Interpreter against float64 NumPy; nvcc builds;
GPU against torch._scaled_mm and the interpreter (marked gpu)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilex
from tilex.explain import explain
from tilex.pipeline import Options, compile_program
from tilex.translate import translate

F8 = ml_dtypes.float8_e4m3fn

GEMM = """
kernel mm8<BM: int = 128, BN: int = 128, BK: int = 128, STAGES: int = 4>(a: f8e4m3[M, K], b: f8e4m3[N, K], c: out f32[M, N])
    where K % 16 == 0
    grid (cdiv(M, BM), cdiv(N, BN))
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    acc = zeros(f32[BM, BN])
    for k in pipeline(0, K, BK, stages = STAGES) {
        acc += a[m : m + BM, k : k + BK] @ b[n : n + BN, k : k + BK].T
    }
    c[m : m + BM, n : n + BN] = acc
}
"""

N_MAJOR = """
kernel mm8n(a: f8e4m3[M, K], b: f8e4m3[K, N], c: out f32[M, N])
    where K % 16 == 0, N % 16 == 0
    grid (cdiv(M, 128), cdiv(N, 128))
{
    m = program_id(0) * 128
    n = program_id(1) * 128
    acc = zeros(f32[128, 128])
    for k in pipeline(0, K, 128, stages = 3) {
        acc += a[m : m + 128, k : k + 128] @ b[k : k + 128, n : n + 128]
    }
    c[m : m + 128, n : n + 128] = acc
}
"""


def _loop(src, arch="sm_90a", **defines):
    prog = compile_program(src, "mm8.tile", Options(arch=arch, defines=defines))
    return explain(prog)[0]["matmul_loops"]


def _e5m2(src):
    return src.replace("f8e4m3", "f8e5m2")


@pytest.mark.parametrize("ptx", ["e4m3", "e5m2"])
def test_fp8_product_is_a_wgmma_main_loop_on_sm90a(ptx):
    src = GEMM if ptx == "e4m3" else _e5m2(GEMM)
    (loop,) = _loop(src)
    assert loop["strategy"] == "wgmma", loop
    cuda = translate(src, "mm8.tile", Options(arch="sm_90a")).cuda
    assert f"wgmma.mma_async.sync.aligned.m64n128k32.f32.{ptx}.{ptx}" in cuda
    assert ", p, 1, 1;" in cuda  # fp8 wgmma has no transpose operands
    assert "tx_kk < 64; tx_kk += 16" in cuda  # 128 fp8 columns: four k32 steps of 32 bytes
    spec = translate(src, "mm8.tile", Options(arch="sm_90a")).specs["mm8"]
    assert [m.box_cols for m in spec.tma] == [128, 128]  # one 128-byte swizzled row of fp8 elements


@pytest.mark.parametrize("src, arch, defines", [(GEMM, "sm_90a", {"BK": 64}), (GEMM, "sm_89", {}), (N_MAJOR, "sm_90a", {})])
def test_elsewhere_the_generic_product(src, arch, defines):
    """BK not a multiple of 128 fp8 columns, no wgmma (sm_89), or an N-major right operand: no main loop (fp8 has
    no mma.sync path here), the generic product; it still compiles (nvcc below) and computes the same."""
    assert _loop(src, arch, **defines) == []
    assert "wgmma.mma_async" not in translate(src, "mm8.tile", Options(arch=arch, defines=defines)).cuda
    # explain says why the loop is not a tensor-core main loop (it used to say nothing)
    (why,) = explain(compile_program(src, "mm8.tile", Options(arch=arch, defines=defines)))[0]["unplanned_loops"]
    assert why["why"].startswith("f8e4m3 products run on tensor cores only as wgmma"), why


@pytest.mark.parametrize("f8", [F8, ml_dtypes.float8_e5m2])
@pytest.mark.parametrize("m,n,k", [(1, 16, 16), (130, 200, 272), (256, 128, 1024)])
def test_interpreter_against_float64(m, n, k, f8):
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(f8)
    b = rng.standard_normal((n, k)).astype(f8)
    c = np.full((m, n), np.nan, np.float32)
    tilex.compile(GEMM if f8 is F8 else _e5m2(GEMM)).interp("mm8", a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    assert np.max(np.abs(c - ref)) / np.max(np.abs(ref)) <= 1e-5  # fp8 products are exact in f32; f32 sums


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("src, defines", [(GEMM, {}), (GEMM, {"BM": 64, "BN": 256, "BK": 128}),
                                          (GEMM, {"BM": 128, "BN": 256, "BK": 256, "STAGES": 3}), (GEMM, {"BK": 64}),
                                          (N_MAJOR, {}), (_e5m2(GEMM), {})])
def test_builds_with_nvcc(src, defines, tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(translate(src, "mm8.tile", Options(arch="sm_90a", defines=defines)).cuda)
    r = subprocess.run(["nvcc", "-cubin", "-gencode=arch=compute_90a,code=sm_90a", str(cu), "-o",
                        str(tmp_path / "k.cubin")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_e5m2_conversions_saturate_like_e4m3():
    src = """kernel k(x: f32[N], y: out f8e5m2[N], z: out f32[N]) grid (1,) {
        t = x[0 : 8]
        y[0 : 8] = t.to(f8e5m2)
        z[0 : 8] = t.to(f8e5m2).to(f32) * 2.0
    }"""
    x = np.array([1e6, -1e6, np.inf, 3.0, 0.1, -57344.0, np.nan, 60000.0], np.float32)
    y, z = np.zeros(8, ml_dtypes.float8_e5m2), np.zeros(8, np.float32)
    tilex.compile(src).interp("k", x, y, z)
    want = np.clip(x, -57344, 57344).astype(ml_dtypes.float8_e5m2)  # cvt.rn.satfinite: +-57344, NaN stays
    assert np.array_equal(y.astype(np.float32), want.astype(np.float32), equal_nan=True)
    assert np.array_equal(z, want.astype(np.float32) * 2, equal_nan=True)


SHAPES = [(1, 16, 16), (130, 200, 272), (512, 384, 1024), (4096, 4096, 4096)]


def _gpu_errors(e5m2: bool) -> dict:
    """Per shape, the relative errors of the GPU result against float64, torch._scaled_mm (e4m3, 16-multiple
    shapes) and the interpreter (the smaller shapes): run in a child process by the test below."""
    import torch

    out = {}
    mod = tilex.compile(_e5m2(GEMM) if e5m2 else GEMM)
    tdt = torch.float8_e5m2 if e5m2 else torch.float8_e4m3fn
    one = torch.ones((), device="cuda")
    for m, n, k in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(m + n + k)
        a = torch.randn(m, k, device="cuda", generator=g).to(tdt)
        b = torch.randn(n, k, device="cuda", generator=g).to(tdt)
        c = torch.full((m, n), float("nan"), device="cuda")
        mod.mm8(a, b, c)
        torch.cuda.synchronize()
        ref64 = a.double() @ b.double().T
        scale = ref64.abs().max().item()
        got = {"float64": (c.double() - ref64).abs().max().item() / scale}
        if m % 16 == 0 and n % 16 == 0 and k % 16 == 0 and not e5m2:  # cuBLASLt: e4m3 x e4m3
            ref = torch._scaled_mm(a, b.T, scale_a=one, scale_b=one, out_dtype=torch.float32)
            got["torch"] = (c - ref).abs().max().item() / scale
        if m * n * k <= 512 * 384 * 1024:
            f8 = ml_dtypes.float8_e5m2 if e5m2 else F8
            host = np.full((m, n), np.nan, np.float32)
            mod.interp("mm8", a.cpu().view(torch.uint8).numpy().view(f8), b.cpu().view(torch.uint8).numpy().view(f8),
                       host)
            got["interp"] = float(np.max(np.abs(c.cpu().numpy() - host)) / scale)
        out[f"{m}x{n}x{k}"] = got
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("e5m2", [False, True])
def test_gpu_against_float64_torch_and_the_interpreter(e5m2):
    """In a child process with a time limit: a faulting or hanging new kernel cannot take the suite's CUDA
    context with it. wgmma's fp8 accumulation keeps fewer bits than an f32 FMA chain (Hopper): 2e-2 of max|ref|."""
    import json
    import sys

    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_fp8_wgmma as t; "
            f"print('RESULT ' + json.dumps(t._gpu_errors({e5m2})))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    errors = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert set(errors) == {f"{m}x{n}x{k}" for m, n, k in SHAPES}
    for shape, got in errors.items():
        assert all(v <= 2e-2 for v in got.values()), (shape, got)

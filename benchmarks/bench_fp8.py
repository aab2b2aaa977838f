"""fp8 (e4m3) GEMM on wgmma against torch._scaled_mm (cuBLASLt), and the bf16 wgmma GEMM of the same source shape.

    python benchmarks/bench_fp8.py [--shapes 4096x4096x4096,8192x8192x8192]

CUDA events after warm-up, the median of 50 timed runs each, the baselines in the same process. C = A @ B.T with
A [M, K], B [N, K] (both K-major), f32 output. Needs an sm_90a GPU, torch and CuPy."""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

import tilex

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_fp8_wgmma import GEMM  # noqa: E402

BF16 = GEMM.replace("f8e4m3", "bf16").replace("BK: int = 128", "BK: int = 64").replace("mm8", "mm16")


def _time(fn, rep=50, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rep):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4096x4096x4096,8192x8192x8192")
    args = ap.parse_args()
    mod8, mod16 = tilex.compile(GEMM), tilex.compile(BF16)
    one = torch.ones((), device="cuda")
    for shape in args.shapes.split(","):
        m, n, k = map(int, shape.split("x"))
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        c = torch.empty(m, n, device="cuda")
        a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
        t8 = _time(lambda: mod8.mm8(a, b, c))
        tref = _time(lambda: torch._scaled_mm(a, b.T, scale_a=one, scale_b=one, out_dtype=torch.float32))
        t16 = _time(lambda: mod16.mm16(a16, b16, c))
        ref = torch._scaled_mm(a, b.T, scale_a=one, scale_b=one, out_dtype=torch.float32)
        mod8.mm8(a, b, c)
        err = ((c - ref).abs().max() / ref.abs().max()).item()
        tf = 2 * m * n * k / 1e9
        print(f"{shape}: tilex fp8 {t8:.3f} ms ({tf / t8:.0f} TFLOP/s), torch._scaled_mm {tref:.3f} ms "
              f"({tf / tref:.0f}), ratio {tref / t8:.2f}x; tilex bf16 {t16:.3f} ms ({tf / t16:.0f}); max rel err {err:.2e}")


if __name__ == "__main__":
    main()

"""One launch each of linear_persistent (128x128 and 128x256 tiles) and of cuBLAS at one GEMM shape, for ncu.

    ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
        -k regex:'linear|gemm|nvjet|sm90' -c 6 python3 benchmarks/prof_gemm_tiles.py --shape 4096x2048x2304

Without ncu it prints the cuBLAS kernel names (torch.profiler) and CUDA-event medians of the three, so the
question "is the 128x128 tile's main loop bound by L2 (bytes per FLOP of the tile) or by shared memory (wgmma
operand reads + TMA writes)" can be read from ncu's L2 / shared-memory throughput against the tensor pipe.
"""
from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

from tilex.stdlib import _launch as L


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4096x2048x2304", help="MxKxN of y = x @ w.T")
    ap.add_argument("--reps", type=int, default=1, help="launches of each (1 under ncu)")
    args = ap.parse_args()
    m, k, n = (int(v) for v in args.shape.split("x"))
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    runs = {}
    for bn in (128, 256):
        mod = L.load("linear", kernel="linear_persistent", T="bf16", BM=128, BN=bn, BK=64, STAGES=4, PROGRAMS=sms)
        runs[f"linear_persistent 128x{bn}"] = lambda mod=mod: L.run(mod, "linear_persistent", x, w, y)
    runs["cublas"] = lambda: F.linear(x, w)
    ref = F.linear(x.float(), w.float())
    for name, fn in runs.items():
        fn()
        torch.cuda.synchronize()
        if name != "cublas":
            err = float((y.float() - ref).norm() / ref.norm())
            print(f"{name}: rel. error {err:.2e}")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        F.linear(x, w)
        torch.cuda.synchronize()
    print("cuBLAS kernels:", sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}))
    for name, fn in runs.items():
        ts = []
        for _ in range(args.reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1))
        print(f"{name}: median {statistics.median(ts):.4f} ms over {args.reps} eager launches")


if __name__ == "__main__":
    main()

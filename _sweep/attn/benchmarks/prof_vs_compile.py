"""One launch each of tilex and torch.compile on the library rows where torch.compile is faster, for ncu:

    ncu --profile-from-start off --clock-control none --set detailed \
        python benchmarks/prof_vs_compile.py [--only embedding,fused_add_rms_norm]

The inputs, the tilex calls and the compiled functions are bench_stdlib.py's (same shapes, same data),
so ncu's rows line up with the benchmark's. Only the launches between cudaProfilerStart and Stop are
profiled (ncu --profile-from-start off): inductor's autotuning launches during warm-up stay out. What
the two kernels of a row do differently (DRAM throughput, instructions executed, registers, occupancy,
stall reasons) is what closes the gap.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_stdlib import cases  # noqa: E402

DEFAULT = "embedding,fused_add_rms_norm,silu_and_mul,gelu_and_mul(tanh),rms_norm"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=DEFAULT, help=f"comma-separated bench_stdlib row names (default {DEFAULT})")
    ap.add_argument("--copy", action="store_true", help="also profile a 1 GiB device copy (the roofline's reference)")
    args = ap.parse_args()
    keep = set(args.only.split(","))
    rows = [c for c in cases(argparse.Namespace(only=args.only)) if c[0].split()[0] in keep]
    seen, fns = set(), []
    for name, _shape, _bytes, f_tilex, _f_torch, comp, _check in rows:
        key = name.split()[0]
        if key in seen or comp is None:  # one shape per kernel: the first (the benchmark's large one)
            continue
        seen.add(key)
        fn, inputs = comp
        cf = torch.compile(fn)
        fns.append((key, f_tilex, lambda cf=cf, inputs=inputs: cf(*inputs)))
    if args.copy:  # the reference every row is measured against: a device copy of the bench's size
        src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()  # as bench_stdlib.copy_bandwidth
        dst = torch.empty_like(src)
        fns.append(("copy", lambda: dst.copy_(src), lambda: None))
    for _ in range(3):  # warm-up: tilex compiles and caches its kernels, inductor its Triton kernels
        for _key, ft, fc in fns:
            ft()
            fc()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for key, ft, fc in fns:  # the profiled launches, tilex then torch.compile, row by row
        print(f"profiling {key}", file=sys.stderr)
        ft()
        fc()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

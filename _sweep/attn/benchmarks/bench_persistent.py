"""A/B of the two large-M GEMM schedules against cuBLAS, in one process (H200):
`linear` (one block per 128x256 tile) and `linear_persistent` (one block per SM walking the tiles),
both with the library's default tiles, y = x @ w.T in bf16; then the same pair for the gated MLP
(`gated_mlp` and `gated_mlp_persistent`, silu(x @ wg.T) * (x @ wu.T)) against two cuBLAS GEMMs + silu * mul.

    python3 benchmarks/bench_persistent.py [--shapes 4096x5120x5120,...] [--gated 4096x5120x13824,...]
Timing: bench_matmul's Timer (device events around each call after warm-up, median).
"""
import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_matmul import Timer, parse_label  # noqa: E402

import tilex.stdlib._launch as L  # noqa: E402
from tilex.stdlib.linear import _GATED, _LARGE  # noqa: E402

SHAPES = "8192x8192x8192,4096x5120x13824,4096x13824x5120,4096x5120x5120,512x5120x5120,512x5120x27648,512x13824x5120"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--gated", default="4096x5120x13824,2048x5120x13824,512x5120x13824")
    args = ap.parse_args()
    timer = Timer(torch, 100.0, 400.0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bf = lambda *shape: torch.randn(*shape, device="cuda").to(torch.bfloat16)  # noqa: E731

    def linear_case(m, k, n):
        x, w = bf(m, k), bf(n, k)
        return (x, w), F.linear(x.float(), w.float()), lambda: F.linear(x, w), 2

    def gated_case(m, k, n):
        x, wg, wu = bf(m, k), bf(n, k), bf(n, k)
        ref = F.silu(F.linear(x.float(), wg.float())) * F.linear(x.float(), wu.float())
        return (x, wg, wu), ref, lambda: F.silu(F.linear(x, wg)) * F.linear(x, wu), 4

    cases = (("linear", _LARGE, "MxKxN", args.shapes, linear_case),
             ("gated_mlp", _GATED, "gated MxKxN", args.gated, gated_case))
    for kernel, tiles, title, labels, case in cases:
        one = L.load("linear", kernel=kernel, T="bf16", **tiles)
        per = L.load("linear", kernel=kernel + "_persistent", T="bf16", PROGRAMS=sms, **tiles)
        print(f"{title:>18} {'cuBLAS ms':>10} {'per-tile ms':>12} {'persistent ms':>14} {'TFLOP/s':>8} "
              f"{'per-tile x':>10} {'persistent x':>12} {'err':>8}")
        for s in filter(None, labels.split(",")):
            m, k, n = parse_label(s)
            ins, ref, baseline, flop_per_mnk = case(m, k, n)
            y1, y2 = (torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            L.run(one, kernel, *ins, y1)
            L.run(per, kernel + "_persistent", *ins, y2)
            err = max(float((y.float() - ref).norm() / ref.norm()) for y in (y1, y2))
            tc = timer(baseline)["ms"]
            t1 = timer(lambda: L.run(one, kernel, *ins, y1))["ms"]
            t2 = timer(lambda: L.run(per, kernel + "_persistent", *ins, y2))["ms"]
            print(f"{s:>18} {tc:10.4f} {t1:12.4f} {t2:14.4f} {flop_per_mnk * m * n * k / t2 / 1e9:8.1f} "
                  f"{tc / t1:10.3f} {tc / t2:12.3f} {err:8.1e}", flush=True)
            assert err <= 1e-2, f"{s}: relative error {err:.2e}"
    return 0


if __name__ == "__main__":
    sys.exit(main())

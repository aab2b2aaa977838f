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
    one = L.load("linear", kernel="linear", T="bf16", **_LARGE)
    per = L.load("linear", kernel="linear_persistent", T="bf16", PROGRAMS=sms, **_LARGE)
    print(f"{'MxKxN':>18} {'cuBLAS ms':>10} {'per-tile ms':>12} {'persistent ms':>14} {'TFLOP/s':>8} "
          f"{'per-tile x':>10} {'persistent x':>12} {'err':>8}")
    for s in args.shapes.split(","):
        m, k, n = parse_label(s)
        x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        y1, y2 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16), torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = F.linear(x.float(), w.float())
        L.run(one, "linear", x, w, y1)
        L.run(per, "linear_persistent", x, w, y2)
        err = max(float((y.float() - ref).norm() / ref.norm()) for y in (y1, y2))
        tc = timer(lambda: F.linear(x, w))["ms"]
        t1 = timer(lambda: L.run(one, "linear", x, w, y1))["ms"]
        t2 = timer(lambda: L.run(per, "linear_persistent", x, w, y2))["ms"]
        print(f"{s:>18} {tc:10.4f} {t1:12.4f} {t2:14.4f} {2 * m * n * k / t2 / 1e9:8.1f} "
              f"{tc / t1:10.3f} {tc / t2:12.3f} {err:8.1e}", flush=True)
        assert err <= 1e-2, f"{s}: relative error {err:.2e}"
    one = L.load("linear", kernel="gated_mlp", T="bf16", **_GATED)
    per = L.load("linear", kernel="gated_mlp_persistent", T="bf16", PROGRAMS=sms, **_GATED)
    print(f"{'gated MxKxN':>18} {'cuBLAS ms':>10} {'per-tile ms':>12} {'persistent ms':>14} {'TFLOP/s':>8} "
          f"{'per-tile x':>10} {'persistent x':>12} {'err':>8}")
    for s in filter(None, args.gated.split(",")):
        m, k, n = parse_label(s)
        x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        wg, wu = (torch.randn(n, k, device="cuda").to(torch.bfloat16) for _ in range(2))
        y1, y2 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16), torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = F.silu(F.linear(x.float(), wg.float())) * F.linear(x.float(), wu.float())
        L.run(one, "gated_mlp", x, wg, wu, y1)
        L.run(per, "gated_mlp_persistent", x, wg, wu, y2)
        err = max(float((y.float() - ref).norm() / ref.norm()) for y in (y1, y2))
        tc = timer(lambda: F.silu(F.linear(x, wg)) * F.linear(x, wu))["ms"]
        t1 = timer(lambda: L.run(one, "gated_mlp", x, wg, wu, y1))["ms"]
        t2 = timer(lambda: L.run(per, "gated_mlp_persistent", x, wg, wu, y2))["ms"]
        print(f"{s:>18} {tc:10.4f} {t1:12.4f} {t2:14.4f} {4 * m * n * k / t2 / 1e9:8.1f} "
              f"{tc / t1:10.3f} {tc / t2:12.3f} {err:8.1e}", flush=True)
        assert err <= 1e-2, f"{s}: relative error {err:.2e}"
    return 0


if __name__ == "__main__":
    sys.exit(main())

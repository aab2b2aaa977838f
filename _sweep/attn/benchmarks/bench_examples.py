"""Time the examples against PyTorch on the GPU (same process, CUDA events, medians).

    python benchmarks/bench_examples.py [--json OUT.json]

Each row: tilex time, torch time, the ratio torch/tilex (>1: tilex faster), and achieved
GB/s (bytes read + written once) or TFLOP/s. Correctness is checked first.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import tilex


def _bench(fn):
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def _rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = "cuda"
    torch.manual_seed(0)
    rows = []

    def row(name, shape, t_tilex, t_torch, nbytes=None, flops=None, err=None):
        r = dict(kernel=name, shape=shape, tilex_ms=t_tilex, torch_ms=t_torch, ratio=t_torch / t_tilex, rel_err=err)
        if nbytes:
            r["tilex_gb_s"] = nbytes / t_tilex / 1e6
            r["torch_gb_s"] = nbytes / t_torch / 1e6
        if flops:
            r["tilex_tflop_s"] = flops / t_tilex / 1e9
            r["torch_tflop_s"] = flops / t_torch / 1e9
        rows.append(r)

    # copy bandwidth (the memory roofline of this card, this run)
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev).random_()
    dst = torch.empty_like(src)
    t = _bench(lambda: dst.copy_(src))
    copy_gb_s = 2 * src.numel() / t / 1e6
    del src, dst

    mod = tilex.compile("examples/vector_add.tile")
    n = 1 << 28
    x, y = torch.randn(n, device=dev), torch.randn(n, device=dev)
    z = torch.empty_like(x)
    mod.vector_add(x, y, z)
    err = _rel(z, x + y)
    row("vector_add f32", f"N={n}", _bench(lambda: mod.vector_add(x, y, z)), _bench(lambda: torch.add(x, y, out=z)), 12 * n, err=err)
    del x, y, z

    m, n = 32768, 5120
    x = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, device=dev, dtype=torch.bfloat16)
    yy = torch.empty_like(x)
    mod = tilex.compile("examples/rmsnorm.tile")
    mod.rmsnorm(x, w, yy, eps=1e-6)
    err = _rel(yy, F.rms_norm(x.float(), (n,), w.float(), 1e-6))
    row("rmsnorm bf16", f"{m}x{n}", _bench(lambda: mod.rmsnorm(x, w, yy, eps=1e-6)),
        _bench(lambda: F.rms_norm(x, (n,), w, 1e-6)), 2 * 2 * m * n, err=err)

    mod = tilex.compile("examples/softmax.tile")
    mod.softmax(x, yy)
    err = _rel(yy, torch.softmax(x.float(), -1))
    row("softmax bf16", f"{m}x{n}", _bench(lambda: mod.softmax(x, yy)), _bench(lambda: torch.softmax(x, -1)), 2 * 2 * m * n, err=err)

    g, u = torch.randn(m, n, device=dev, dtype=torch.bfloat16), torch.randn(m, n, device=dev, dtype=torch.bfloat16)
    mod = tilex.compile("examples/swiglu.tile")
    mod.swiglu(g, u, yy)
    err = _rel(yy, F.silu(g.float()) * u.float())
    row("swiglu bf16", f"{m}x{n}", _bench(lambda: mod.swiglu(g, u, yy)), _bench(lambda: F.silu(g) * u), 3 * 2 * m * n, err=err)
    del x, yy, g, u

    s = 4096
    a = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    b = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    c = torch.empty(s, s, device=dev, dtype=torch.bfloat16)
    mod = tilex.compile("examples/matmul.tile")
    mod.matmul(a, b, c)
    err = _rel(c, a.float() @ b.float())
    row("matmul bf16 (as shipped, auto)", f"{s}^3", _bench(lambda: mod.matmul(a, b, c)), _bench(lambda: torch.matmul(a, b)), flops=2 * s ** 3, err=err)

    print(f"GPU: {torch.cuda.get_device_name()}  copy bandwidth {copy_gb_s:.0f} GB/s (read+write)")
    print(f"{'kernel':28} {'shape':>14} {'tilex ms':>9} {'torch ms':>9} {'torch/tilex':>11} {'tilex':>14} {'torch':>14} {'rel err':>8}")
    for r in rows:
        unit = "GB/s" if "tilex_gb_s" in r else "TFLOP/s"
        a_, b_ = (r["tilex_gb_s"], r["torch_gb_s"]) if unit == "GB/s" else (r["tilex_tflop_s"], r["torch_tflop_s"])
        print(f"{r['kernel']:28} {r['shape']:>14} {r['tilex_ms']:9.3f} {r['torch_ms']:9.3f} {r['ratio']:11.2f} "
              f"{a_:9.1f} {unit:<4} {b_:9.1f} {unit:<4} {r['rel_err']:8.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), copy_gb_s=copy_gb_s, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

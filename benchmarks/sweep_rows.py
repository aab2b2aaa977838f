"""Sweep the row kernels' launch shapes on the GPU: warps, blocks per SM (the persistent grid is
SMs x MIN_BLOCKS programs), pipeline stages, and the non-persistent grid (one row per program),
each checked against PyTorch and timed with torch eager and torch.compile in the same process.

    python benchmarks/sweep_rows.py [--only rms_norm,softmax] [--whole] [--json OUT.json]

Times are medians of CUDA-graph replays (bench_stdlib.bench); % of copy uses the minimum bytes
(inputs read once, outputs written once) over a 1 GiB device copy measured in this run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_stdlib import bench, copy_bandwidth, rel  # noqa: E402

from tilex.stdlib import _launch as L  # noqa: E402

BF16 = torch.bfloat16
HUGE = 1 << 30  # PROGRAMS: one step per program (the grid covers every row)


def configs(n: int, one_pass: bool, per_thread=(8, 16), blocks=(2, 3, 4), stages=(2, 3, 4)):
    """(label, defines) candidates for an [M, n] row kernel (one row per step)."""
    block = max(8, L.next_pow2(n)) if one_pass else 4096
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for per in per_thread:
        warps = max(1, min(32, block // (32 * per)))
        threads = 32 * warps
        base = dict(BLOCK=block, R=1, ONE_PASS=one_pass, WARPS=warps)
        out.append((f"W{warps} grid=all", dict(base, MIN_BLOCKS=0, PROGRAMS=HUGE, STAGES=2)))
        # one row per program read straight into registers (no shared-memory ring), as torch.compile's kernels do
        out.append((f"W{warps} grid=all S1", dict(base, MIN_BLOCKS=0, PROGRAMS=HUGE, STAGES=1)))
        for b in blocks:
            for st in stages:
                if threads * b <= 2048:
                    out.append((f"W{warps} {b}/SM S{st}", dict(base, MIN_BLOCKS=b, PROGRAMS=sms * b, STAGES=st)))
    return out


def whole_row_configs(n: int, per_thread=(32, 64), stages=(2, 3)):
    """One-pass candidates for rows longer than row_config's one_pass_max: the whole row is one
    step, held in registers (32 or 64 elements per thread), one block per SM (its ring of a whole
    bf16 row per stage takes most of shared memory)."""
    block = L.next_pow2(n)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for per in per_thread:
        warps = max(1, min(32, block // (32 * per)))
        for st in stages:
            if st * block * 2 <= 200 * 1024:
                out.append((f"whole W{warps} 1/SM S{st}", dict(BLOCK=block, R=1, ONE_PASS=True, WARPS=warps,
                                                              MIN_BLOCKS=1, PROGRAMS=sms, STAGES=st)))
    return out


def cases():
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(shape, generator=g, device="cuda").to(BF16)

    out = []
    for m, n in ((16384, 4096), (4096, 8192)):
        x, w = randn(m, n), randn(n)
        ref = lambda x=x, w=w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)
        out.append(("rms_norm", m, n, 4 * m * n + 2 * n, (x, w), ref, lambda x=x: (L.empty(x, x.shape),)))
    m, n = 16384, 4096
    x, r, w, b = randn(m, n), randn(m, n), randn(n), randn(n)

    def farn(x=x, r=r, w=w):
        h = x + r
        return F.rms_norm(h, (n,), w, 1e-6), h
    out.append(("fused_add_rms_norm", m, n, 8 * m * n + 2 * n, (x, r, w), farn,
                lambda: (L.empty(x, x.shape), L.empty(x, x.shape))))
    out.append(("layer_norm", m, n, 4 * m * n + 4 * n, (x, w, b),
                lambda: F.layer_norm(x, (n,), w, b, 1e-5), lambda: (L.empty(x, x.shape),)))
    ms, ns = 4096, 32000
    xs = randn(ms, ns)
    out.append(("softmax", ms, ns, 4 * ms * ns, (xs,), lambda: torch.softmax(xs, -1),
                lambda: (L.empty(xs, xs.shape),)))
    xs2 = randn(16384, 4096)
    out.append(("softmax", 16384, 4096, 4 * 16384 * 4096, (xs2,), lambda: torch.softmax(xs2, -1),
                lambda: (L.empty(xs2, xs2.shape),)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default=None)
    ap.add_argument("--whole", action="store_true",
                    help="rows past one_pass_max: only the whole-row candidates and the wrapper's own config")
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    copy = copy_bandwidth()
    print(f"{torch.cuda.get_device_name(0)}; copy bandwidth {copy:.0f} GB/s", flush=True)
    rows = []
    for name, m, n, nbytes, ins, ref, outs in cases():
        if only and name not in only:
            continue
        want = ref()
        want = want if isinstance(want, tuple) else (want,)
        t_eager, _ = bench(ref)
        t_comp, _ = bench(lambda f=torch.compile(ref): f())
        print(f"\n{name} {m}x{n}: torch {t_eager:.4f} ms, compile {t_comp:.4f} ms "
              f"({nbytes / t_comp / 1e6 / copy:.1%} of copy)", flush=True)
        one = n <= 16384
        wide = whole_row_configs(n) if name == "softmax" and not one else []
        if args.whole and not wide:
            continue
        cands = configs(n, one) + wide
        if args.whole:
            mine = L.row_config(n, m, torch.cuda.get_device_properties(0).multi_processor_count,
                                threads_per_sm=768, stages=3)
            cands = [("wrapper (chunked)", mine)] + wide
        for label, cfg in cands:
            try:
                mod = L.load(name, kernel=name, T="bf16", **cfg)
            except Exception as e:  # noqa: BLE001 - a config that does not compile is reported, not fatal
                print(f"  {label:22s} compile failed: {str(e).splitlines()[0]}")
                continue
            o = outs()
            run = lambda o=o, mod=mod: L.run(mod, name, *ins, *o)
            run()
            torch.cuda.synchronize()
            err = max(rel(a, b) for a, b in zip(o, want))
            t, _ = bench(run)
            frac = nbytes / t / 1e6 / copy
            rows.append(dict(kernel=name, shape=f"{m}x{n}", config=label, defines=cfg, ms=t, err=err,
                             copy_frac=frac, torch_ms=t_eager, compile_ms=t_comp))
            print(f"  {label:22s} {t:8.4f} ms  {frac:6.1%} of copy  torch/x {t_eager / t:5.2f}  "
                  f"compile/x {t_comp / t:5.2f}  err {err:.1e}{'  BAD' if err > 2e-2 else ''}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(copy_gb_s=copy, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sweep the row kernels' launch shapes on the GPU: warps, blocks per SM (the persistent grid is
SMs x MIN_BLOCKS programs), pipeline stages, and the non-persistent grid (one row per program),
each checked against PyTorch and timed with torch eager and torch.compile in the same process.

    python benchmarks/sweep_rows.py [--only rms_norm,softmax] [--whole] [--pieces] [--json OUT.json]

--pieces sweeps the `<kernel>_k2` pieces kernels (transpiler/stdlib/rows.py) at N = 5120 (M = 4096
and 32768) and 2560, 3072 (M = 16384): W = 1024 and 512 (5120 = 1024 x (4 + 1) = 512 x (8 + 2)),
stages 1 to 3, persistent grids of 3 to 6 blocks per SM and a program per row, with the model's own
choice ("model") and the power-of-two configuration used before rows.py ("pow2") as references.

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


def pieces_configs(n: int, registers: bool):
    """(label, kernel suffix, defines) candidates for the pieces kernels at row length n."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for w in (1024, 512):
        if n % w:
            continue
        k = n // w
        p1 = 1 << (k.bit_length() - 1)
        if (k - p1) & (k - p1 - 1) or k == p1:
            continue
        base = dict(W=w, P1=p1, P2=k - p1, WARPS=max(1, w // 256), MIN_BLOCKS=0)
        for st in ((1, 2) if registers else (2, 3)):
            out.append((f"k2 W{w} grid=all S{st}", "_k2", dict(base, PROGRAMS=HUGE, STAGES=st)))
            if st > 1:
                for b in ((4,) if registers else (3, 4, 6)):
                    if b * w // 8 <= 2048:
                        out.append((f"k2 W{w} {b}/SM S{st}", "_k2", dict(base, PROGRAMS=sms * b, STAGES=st)))
    return out


def pieces_cases():
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(shape, generator=g, device="cuda").to(BF16)

    out = []
    for m, n in ((4096, 5120), (32768, 5120), (16384, 2560), (16384, 3072)):
        x, r, w, b = randn(m, n), randn(m, n), randn(n), randn(n)

        def farn(x=x, r=r, w=w, n=n):
            h = x + r
            return F.rms_norm(h, (n,), w, 1e-6), h
        out.append(("rms_norm", m, n, 4 * m * n + 2 * n, (x, w),
                    lambda x=x, w=w, n=n: F.rms_norm(x, (n,), w, 1e-6), lambda x=x: (L.empty(x, x.shape),)))
        out.append(("fused_add_rms_norm", m, n, 8 * m * n + 2 * n, (x, r, w), farn,
                    lambda x=x: (L.empty(x, x.shape), L.empty(x, x.shape))))
        out.append(("layer_norm", m, n, 4 * m * n + 4 * n, (x, w, b),
                    lambda x=x, w=w, b=b, n=n: F.layer_norm(x, (n,), w, b, 1e-5), lambda x=x: (L.empty(x, x.shape),)))
    return out


def run_pieces(only: set, copy: float) -> list:
    from tilex.stdlib import rows as model

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for name, m, n, nbytes, ins, ref, outs in pieces_cases():
        if only and name not in only:
            continue
        want = ref()
        want = want if isinstance(want, tuple) else (want,)
        t_eager, _ = bench(ref)
        t_comp, _ = bench(lambda f=torch.compile(ref): f())
        print(f"\n{name} {m}x{n}: torch {t_eager:.4f} ms, compile {t_comp:.4f} ms "
              f"({nbytes / t_comp / 1e6 / copy:.1%} of copy); model: {model.explain(name, n, m, 2, sms)}", flush=True)
        mname, mcfg = model.plan(name, n, m, 2, sms)
        registers = model.TRAITS[name].registers
        pow2 = L.row_config(n, m, sms, threads_per_sm=model.TRAITS[name].threads_per_sm,
                            stages=model.TRAITS[name].stages)
        if registers:
            pow2 = dict(pow2, STAGES=1, PROGRAMS=HUGE, MIN_BLOCKS=0)
        cands = [("model", mname[len(name):], mcfg), ("pow2", "", pow2)] + pieces_configs(n, registers)
        for label, suffix, cfg in cands:
            kernel = name + suffix
            try:
                mod = L.load(name, kernel=kernel, T="bf16", **cfg)
            except Exception as e:  # noqa: BLE001 - reported, not fatal
                print(f"  {label:22s} compile failed: {str(e).splitlines()[0]}")
                continue
            o = outs()
            args = (*ins, *o)
            if suffix:  # [m, n] as [m * K, W], [n] as [K, W]
                k = n // cfg["W"]
                args = tuple(a.view(m * k, cfg["W"]) if a.dim() == 2 else a.view(k, cfg["W"]) for a in args)
            run = lambda args=args, mod=mod, kernel=kernel: L.run(mod, kernel, *args)
            run()
            torch.cuda.synchronize()
            err = max(rel(a, b) for a, b in zip(o, want))
            t, _ = bench(run)
            frac = nbytes / t / 1e6 / copy
            out.append(dict(kernel=kernel, shape=f"{m}x{n}", config=label, defines=cfg, ms=t, err=err,
                            copy_frac=frac, torch_ms=t_eager, compile_ms=t_comp))
            print(f"  {label:22s} {t:8.4f} ms  {frac:6.1%} of copy  torch/x {t_eager / t:5.2f}  "
                  f"compile/x {t_comp / t:5.2f}  err {err:.1e}{'  BAD' if err > 2e-2 else ''}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default=None)
    ap.add_argument("--whole", action="store_true",
                    help="rows past one_pass_max: only the whole-row candidates and the wrapper's own config")
    ap.add_argument("--pieces", action="store_true", help="the pieces kernels' candidates (module docstring)")
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    copy = copy_bandwidth()
    print(f"{torch.cuda.get_device_name(0)}; copy bandwidth {copy:.0f} GB/s", flush=True)
    rows = []
    if args.pieces:
        rows = run_pieces(only, copy)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(copy_gb_s=copy, rows=rows), f, indent=1)
        return 0
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

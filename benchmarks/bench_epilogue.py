"""GEMM epilogues under torch.compile (issue 19): a GELU MLP block, HF GPT-NeoX / Phi style
(y = x + fc2(gelu_tanh(fc1(x) + b1)) + b2), whose two GEMMs each carry an elementwise epilogue. One process, one GPU:

  eager        the module as written
  inductor-ro  torch.compile(mode="reduce-overhead") (CUDA graphs; Triton epilogues fused into its GEMM templates
               only under max-autotune: this row is Inductor's default lowering, cuBLAS + Triton pointwise kernels)
  tilex        backend="tilex", cuda_graphs="borrow" (the same CUDA-graph mode), epilogues on (the default)
  tilex-sep    the same with options={"epilogues": False}: each epilogue a generated kernel of its own

Per shape (tokens x d, hidden h; bf16):
  kernel_us  the GPU time of one call: the sum of its kernels' durations under torch.profiler (10 calls), which is
             what a CUDA-graph replay costs the GPU whatever the host does; with the launches per call and the kernels
  call_ms    one call from an idle GPU to its end (CUDA events around each call after warm-up, median of --rep): host
             time included where the host is slower than the kernels (a single call's latency)
  loop_ms    20 calls back to back between two events, per call (host and GPU overlapped: throughput)
every row's output checked against float64 (max |a - b| / max |b|, and against eager bf16's own error), the paths
tilex's fused GEMMs took, and the ratios tilex / inductor-ro and tilex / tilex-sep by kernel time (> 1: tilex
faster).

    python3 benchmarks/bench_epilogue.py [--shapes 1x2560x10240,512x2560x10240] [--rep 50] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from bench_backend import median_ms as _median_ms  # noqa: E402  (CUDA events around each call, median)

DEFAULT = "1x2560x10240,16x2560x10240,512x2560x10240,2048x2560x10240,1x1024x4096,512x1024x4096"


class GeluMLP(torch.nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, h), torch.nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


def loop_ms(fn, n: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def reference(m: GeluMLP, x):
    d = lambda t: t.detach().double()  # noqa: E731
    h = F.gelu(d(x) @ d(m.fc1.weight).T + d(m.fc1.bias), approximate="tanh")
    return d(x) + h @ d(m.fc2.weight).T + d(m.fc2.bias)


def rel(a, ref) -> float:
    return float((a.double() - ref).abs().max() / ref.abs().max())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=DEFAULT, help="tokens x d x h, comma-separated (default: %(default)s)")
    ap.add_argument("--rep", type=int, default=50, help="timed calls per row (median)")
    ap.add_argument("--only", default="eager,inductor-ro,tilex,tilex-sep", help="rows to run")
    ap.add_argument("--total", type=float, default=0, help="stop starting shapes after this many seconds (0: no limit)")
    ap.add_argument("--json", help="write every row here")
    args = ap.parse_args(argv)
    import tilex.backend  # noqa: F401  (registers "tilex")
    from tilex.backend import epilogue
    from tilex.backend.kernel_kinds import profile_kernels

    torch.manual_seed(0)
    rows, t_start = [], time.perf_counter()
    only = args.only.split(",")
    for spec in args.shapes.split(","):
        if args.total and time.perf_counter() - t_start > args.total:
            print(f"## {spec}: skipped (over --total)", file=sys.stderr)
            continue
        t, d, h = (int(v) for v in spec.split("x"))
        m = GeluMLP(d, h).cuda().to(torch.bfloat16)
        x = torch.randn(t, d, device="cuda", dtype=torch.bfloat16)
        ref = reference(m, x)
        with torch.no_grad():
            e_err = rel(m(x), ref)
        row = {"shape": spec, "eager_err": e_err}
        fns = {"eager": m}
        if "inductor-ro" in only:
            fns["inductor-ro"] = torch.compile(m, mode="reduce-overhead", dynamic=False)
        progs: dict = {}
        for name, ep in (("tilex", True), ("tilex-sep", False)):
            if name in only:
                progs[name] = []
                fns[name] = torch.compile(m, backend="tilex", dynamic=False, options={
                    "cuda_graphs": "borrow", "epilogues": ep, "programs": progs[name]})
        for name, fn in fns.items():
            if name not in only:
                continue
            t0 = time.perf_counter()
            with torch.no_grad():
                out = fn(x).clone()
                row[f"{name}_first_s"] = round(time.perf_counter() - t0, 2)
                row[f"{name}_err"] = rel(out, ref)
                row[f"{name}_ms"] = _median_ms(lambda: fn(x), "cuda", warmup=5, rep=args.rep)
                row[f"{name}_loop_ms"] = loop_ms(lambda: fn(x))
                table = profile_kernels(lambda: fn(x), 10)
                row[f"{name}_kernel_us"] = round(sum(t for _, t in table.values()), 2)
                row[f"{name}_launches"] = round(sum(c for c, _ in table.values()), 1)
                row[f"{name}_kernels"] = {k[:70]: round(t, 2) for k, (_, t) in
                                          sorted(table.items(), key=lambda kv: -kv[1][1])[:6]}
                row[f"{name}_err_after"] = rel(fn(x).clone(), ref)
            print(f"{spec} {name}: kernels {row[f'{name}_kernel_us']:.1f} us in {row[f'{name}_launches']} launches, "
                  f"call {row[f'{name}_ms']:.4f} ms, loop {row[f'{name}_loop_ms']:.4f} ms, err {row[f'{name}_err']:.2e} "
                  f"(eager {e_err:.2e}), first call {row[f'{name}_first_s']} s; {row[f'{name}_kernels']}",
                  file=sys.stderr)
        for name, ps in progs.items():
            fused = [s for p in ps for s in p.steps if s.kind == "library" and isinstance(s.match.call, epilogue.FusedGemm)]
            row[f"{name}_paths"] = [s.match.call.paths for s in fused]
            row[f"{name}_steps"] = [p.summary() for p in ps]
        if "tilex_kernel_us" in row and "inductor-ro_kernel_us" in row:
            row["tilex_vs_inductor_ro"] = round(row["inductor-ro_kernel_us"] / row["tilex_kernel_us"], 3)
        if "tilex_kernel_us" in row and "tilex-sep_kernel_us" in row:
            row["fused_vs_separate"] = round(row["tilex-sep_kernel_us"] / row["tilex_kernel_us"], 3)
        rows.append(row)
        print(json.dumps(row))
        torch._dynamo.reset()
    print("\n## summary (kernel us per call [launches]; call ms; ratios by kernel time, > 1: tilex faster)")
    print("| shape | eager | inductor-ro | tilex | tilex-sep | tilex / inductor-ro | fused / separate | call ms "
          "ind-ro / tilex | paths | err tilex (eager) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        f = lambda k: f"{r[k + '_kernel_us']:.1f} [{r[k + '_launches']:.0f}]" if k + "_kernel_us" in r else "-"  # noqa: E731
        c = lambda k: f"{r[k + '_ms']:.4f}" if k + "_ms" in r else "-"  # noqa: E731
        print(f"| {r['shape']} | {f('eager')} | {f('inductor-ro')} | {f('tilex')} | {f('tilex-sep')} | "
              f"{r.get('tilex_vs_inductor_ro', '-')} | {r.get('fused_vs_separate', '-')} | {c('inductor-ro')} / "
              f"{c('tilex')} | {r.get('tilex_paths', '-')} | {r.get('tilex_err', 0):.2e} ({r['eager_err']:.2e}) |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

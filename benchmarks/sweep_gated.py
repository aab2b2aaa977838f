"""Sweep the gated MLP's tiles against cuBLAS at decode and small-batch sizes (H200), to check the model's pick.

    python benchmarks/sweep_gated.py [--shapes MxKxN,...] [--jobs 14] [--budget-s 200] [--json OUT.json]

For each shape (x [M, K], w_gate and w_up [N, K], bf16): every configuration of `tilex.stdlib.linear`'s
`_GATED_SPACE` and of EXTRA for the `gated_mlp` kernel of stdlib_kernels/linear.tile, each checked against a float32 torch
reference (silu(x @ wg.T) * (x @ wu.T), rel. error < 1e-2) and then timed; the wrapper (`S.gated_mlp`: what the
model picks today); and cuBLAS: the two products alone (`F.linear` twice, no activation: the bytes a fused MLP
must at least read, as Inductor's decode graph runs them) and with the eager activation. Each candidate also
carries the model's prediction (autoconfig.choose over the same space: predicted us, work us, programs, per SM).
Times as sweep_gemm.py: CUDA-graph replays, median per launch (ms). Prints per shape the best few, the model's
pick and its rank, and at M <= 16 the swapped-operand path of stdlib/gated.py (`_SWAP`: two linear_swap_splitk
launches into f32 partials + gated_sum); `--json` (default $OUT/sweep_gated.json) keeps every row.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_gemm import _jkey, build_all, graph_ms  # noqa: E402

# (K, N): Qwen2.5-7B, Llama-3-8B / Mistral-7B, Qwen2.5-14B, Qwen2.5-0.5B, Qwen2.5-3B, Llama-3-70B, Qwen2.5-32B
FAMILIES = [(3584, 18944), (4096, 14336), (5120, 13824), (896, 4864), (2048, 11008), (8192, 28672), (5120, 27648)]
MS = (1, 16, 48)
# beyond the wrapper's space: 256-wide tiles, BK=128 and 2-stage rings (more programs resident per SM)
EXTRA = dict(BM=(16, 64), BN=(32, 64, 128, 256), BK=(64, 128), STAGES=(2, 3, 4, 6))
T = "bf16"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", help="comma list of MxKxN (default: MS x FAMILIES)")
    ap.add_argument("--jobs", type=int, default=14)
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    t_start = time.time()
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",")] if args.shapes else \
        [(m, k, n) for (k, n), m in itertools.product(FAMILIES, MS)]

    import importlib

    from tilex.autoconfig import choose
    from tilex.stdlib import _launch as L

    lin = importlib.import_module("tilex.stdlib.linear")
    G = importlib.import_module("tilex.stdlib.gated")
    space = lin._GATED_SPACE
    cands = []
    for sp in (space, EXTRA):
        for v in itertools.product(*sp.values()):
            c = dict(zip(sp, v))
            if c not in cands:
                cands.append(c)
    jobs = {_jkey(("linear", "gated_mlp", c, ())): ("linear", "gated_mlp", c, ()) for c in cands}
    print(f"{len(shapes)} shapes x {len(cands)} configurations ({len(jobs)} kernels, {args.jobs} workers)", flush=True)
    refused = build_all(list(jobs.values()), args.jobs, t_start + 0.4 * args.budget_s)
    print(f"built in {time.time() - t_start:.0f} s", flush=True)

    import torch
    import torch.nn.functional as F

    import tilex.stdlib as S

    stream = torch.cuda.Stream()
    path = args.json or (os.path.join(os.environ["OUT"], "sweep_gated.json") if os.environ.get("OUT") else None)
    rows, summary = [], []
    share = max(4.0, (t_start + args.budget_s - time.time()) / max(1, len(shapes)))
    for m, k, n in shapes:
        t_shape = time.time()
        torch.manual_seed(0)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        wg = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        wu = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = F.silu(x.float() @ wg.float().T) * (x.float() @ wu.float().T)

        def rel(t):
            return float((t.float() - ref).norm() / max(float(ref.norm()), 1e-30))

        two = graph_ms(lambda: (F.linear(x, wg), F.linear(x, wu)), stream)
        eager = graph_ms(lambda: F.silu(F.linear(x, wg)) * F.linear(x, wu), stream)
        picked = lin._model_config("gated_mlp", T, m, n, k, space, {})
        wrapper = graph_ms(lambda: S.gated_mlp(x, wg, wu), stream) if rel(S.gated_mlp(x, wg, wu)) < 1e-2 else None
        ch = choose(L.source("linear"), "linear.tile", "gated_mlp", dict(M=m, N=n, K=k), "sm_90a",
                    defines=dict(T=T), space=space, tuned=False)
        pred = {tuple(sorted(c.defines.items())): c.estimate for c in ch.candidates if c.estimate is not None}
        res = []
        for c in cands:
            est = pred.get(tuple(sorted(c.items())))
            row = dict(defines=c, model_us=est and round(est.time_us, 2), model_work_us=est and round(est.work_us, 2),
                       programs=est and est.programs, per_sm=est and est.per_sm)
            e = refused.get(_jkey(("linear", "gated_mlp", c, ())))
            if e or time.time() - t_shape > share:
                res.append(dict(row, ms=None, error=e or "budget"))
                continue
            try:
                mod = L.load("linear", kernel="gated_mlp", T=T, **c)

                def fn(mod=mod):
                    L.run(mod, "gated_mlp", x, wg, wu, y)
                y.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                err = rel(y)
                if not err < 1e-2:
                    res.append(dict(row, ms=None, error=f"rel err {err:.2e}"))
                    continue
                res.append(dict(row, ms=graph_ms(fn, stream), rel_err=err))
            except Exception as ex:  # noqa: BLE001 - reported, the next candidate runs
                res.append(dict(row, ms=None, error=f"{type(ex).__name__}: {str(ex).strip().splitlines()[0][:120]}"))
        swap, swap_note = None, ""  # the decode path stdlib/gated.py's _SWAP would take: 2 linear_swap_splitk + gated_sum
        if m <= 16:
            def fn_swap():
                G._swap_partials(x, wg, wu, y, T, m, n, k)
            try:
                y.fill_(float("nan"))
                fn_swap()
                torch.cuda.synchronize()
                err = rel(y)
                swap = graph_ms(fn_swap, stream) if err < 1e-2 else None
                swap_note = f"{swap * 1e3:.1f} us" if swap else f"rel err {err:.2e}"
            except Exception as ex:  # noqa: BLE001 - reported; the sweep goes on
                swap_note = f"{type(ex).__name__}: {str(ex).strip().splitlines()[0][:120]}"
        timed = sorted((r for r in res if r["ms"]), key=lambda r: r["ms"])
        mb = 2 * n * k * 2 / 1e6
        print(f"\ngated_mlp M={m} K={k} N={n} ({mb:.0f} MB of weights): cuBLAS two GEMMs {two * 1e3:.1f} us, "
              f"+ eager activation {eager * 1e3:.1f} us, wrapper {picked} "
              f"{wrapper and round(wrapper * 1e3, 1)} us", flush=True)
        for i, r in enumerate(timed[:5]):
            print(f"  {i + 1}. {r['defines']} {r['ms'] * 1e3:.1f} us ({two / r['ms']:.3f}x two GEMMs, "
                  f"{mb / r['ms'] / 1e3:.2f} TB/s), model {r['model_work_us']} us", flush=True)
        if swap_note:
            print(f"  swap path (linear_swap_splitk x2 + gated_sum): {swap_note}", flush=True)
        rank = next((i + 1 for i, r in enumerate(timed) if r["defines"] == picked), None)
        best = timed[0]["ms"] if timed else None
        summary.append((m, k, n, two, wrapper, best, rank, swap))
        rows.append(dict(M=m, K=k, N=n, cublas_two_ms=two, cublas_eager_ms=eager, wrapper_ms=wrapper, picked=picked,
                         pick_rank=rank, swap_ms=swap, candidates=res))
        if path:
            with open(path + ".tmp", "w") as f:
                json.dump(dict(gpu=torch.cuda.get_device_name(), rows=rows), f, indent=1, default=str)
            os.replace(path + ".tmp", path)
    print("\n| M | K | N | cuBLAS two GEMMs us | wrapper us | best us | wrapper / best | pick rank | swap path us |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m, k, n, two, wrapper, best, rank, swap in summary:
        ratio = f"{best / wrapper:.3f}" if wrapper and best else "-"
        print(f"| {m} | {k} | {n} | {two * 1e3:.1f} | {wrapper and round(wrapper * 1e3, 1)} | "
              f"{best and round(best * 1e3, 1)} | {ratio} | {rank} | {swap and round(swap * 1e3, 1)} |")
    print(f"total {time.time() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

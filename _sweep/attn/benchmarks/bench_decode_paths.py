"""Decode-shape GEMM (M <= 16): every path tilex.stdlib.linear could take, timed side by side.

    python benchmarks/bench_decode_paths.py [--json out.json]

For y = x @ w.T with x [M, K], w [N, K] bf16, the 16-row mma.sync kernel (`linear` with
the wrapper's skinny tiles) and the split-K kernels (`linear_splitk` + `splitk_sum`, 64x256
TMA/wgmma tiles) at several split factors S, including S = 1 and the wrapper's `_splits`,
and the one-pass `linear` kernel with those 64x256 tiles, against cuBLAS (F.linear). Each path is checked first (relative Frobenius error <= 1e-2
against F.linear in f32). Time: median of CUDA-event timings (the stream sleeps before each call so that host launch
cost is not counted) over rotating weight copies
(more than 2x the L2 in total, so weights stream from HBM as in a real decode step).
GB/s counts weight + x + y bytes; `% copy` is that over the copy bandwidth of the same run.
This is the measurement behind linear()'s choice of decode path (see linear.py, RESULTS.md).
"""
from __future__ import annotations

import argparse
import json
import statistics

SHAPES = [  # (M, K, N): Qwen2.5-14B decode projections and the LM head
    (1, 5120, 27648), (1, 5120, 7168), (1, 5120, 5120), (1, 13824, 5120), (1, 5120, 152064),
    (16, 5120, 27648), (16, 13824, 5120),
    (1, 5120, 13824), (16, 5120, 13824),  # issue 3's decode shapes (0.91-0.95x cuBLAS with S = 2 on 108 blocks)
]
GATED = [(1, 5120, 13824), (16, 5120, 13824)]  # (M, K, intermediate): the decode MLP's gate/up half


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--swap", action="store_true",
                    help="only cuBLAS, the wrapper's path and the swapped-operand kernels (linear_swap*) at several tiles")
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F

    from tilex.stdlib import _launch as L
    import importlib

    lin = importlib.import_module("tilex.stdlib.linear")  # the module: tilex.stdlib.linear is also the function

    dev = torch.cuda.get_device_properties(0)
    l2 = getattr(dev, "L2_cache_size", 50 << 20)

    def timed(fn) -> float:
        for _ in range(3):
            fn()
        ts = []
        for _ in range(args.reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1_000_000)  # ~0.5 ms of GPU work: the host launches fn meanwhile
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        return statistics.median(ts)

    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    copy_ms = timed(lambda: big.clone())
    copy_gb_s = 2 * big.numel() / copy_ms / 1e6
    del big
    rows = []

    def measure(tag, m, k, n, paths, w0, pick, y, ref, nbytes):
        """Check each path against `ref` on w0, then time it on rotating weights; a row each."""
        for name, fn in paths.items():
            out = fn(w0)
            out = y if out is None else out
            err = float((out.float() - ref).norm() / ref.norm())
            ms = timed(lambda: fn(pick()))
            gb_s = (nbytes + 2 * m * (k + n)) / ms / 1e6
            rows.append(dict(m=m, k=k, n=n, path=tag + name, ms=ms, gb_s=gb_s, pct_copy=gb_s / copy_gb_s,
                             rel_err=err, ok=err <= 1e-2))
            print(f"{tag}{m}x{k}x{n:<7} {name:32} {ms:8.4f} ms {gb_s:7.0f} GB/s {100 * gb_s / copy_gb_s:5.1f}% "
                  f"err {err:.1e}{'' if err <= 1e-2 else '  FAIL'}", flush=True)
    for m, k, n in SHAPES:
        nbytes = n * k * 2
        sets = max(2, -(-2 * l2 // nbytes))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        it = iter(range(1 << 62))
        pick = lambda: ws[next(it) % sets]  # noqa: E731
        ref = F.linear(x.float(), ws[0].float())
        paths = {"cublas": lambda w: F.linear(x, w)}
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        if args.swap:
            paths["wrapper (linear)"] = lambda w: lin.linear(x, w)
            for bn, bk, st in ((64, 128, 4), (64, 128, 6), (64, 64, 8), (128, 128, 4), (128, 64, 6)):
                mod = L.load("linear", kernel="linear_swap", T="bf16", BN=bn, BM=16, BK=bk, STAGES=st)
                paths[f"swap {bn}x16x{bk} s{st}"] = lambda w, mod=mod: L.run(mod, "linear_swap", x, w, y)
            for s in (2, 4):
                if k // s < 512:
                    continue
                mod = L.load("linear", kernel="linear_swap_splitk", T="bf16", BN=64, BM=16, BK=128, STAGES=4)
                summ = L.load("linear", kernel="splitk_sum", T="bf16")
                part = torch.empty(s, m, n, device="cuda", dtype=torch.float32)

                def run(w, part=part, mod=mod, summ=summ):
                    L.run(mod, "linear_swap_splitk", x, w, part)
                    L.run(summ, "splitk_sum", part, y)
                paths[f"swap_splitk 64x16x128 s4 S={s}"] = run
            measure("", m, k, n, paths, ws[0], pick, y, ref, nbytes)
            del ws
            continue
        skinny = L.load("linear", kernel="linear", T="bf16", **lin._SKINNY)
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        paths["mma16"] = lambda w: L.run(skinny, "linear", x, w, y)
        # the one-pass GEMM with the split-K tiles: what S = 1 would cost without the sum kernel
        wide = L.load("linear", kernel="linear", T="bf16", **lin._SPLITK)
        split_path = lin._use_split_kernels(m, n, k)
        paths["linear 64x256" + ("" if split_path else " (wrapper)")] = lambda w: L.run(wide, "linear", x, w, y)
        split = L.load("linear", T="bf16", **lin._SPLITK)
        for s in sorted({1, 2, 3, 4, 5, lin._splits(m, n, k), 8}):
            if k // s < lin._SPLITK["BK"]:
                continue
            part = torch.empty(s, m, n, device="cuda", dtype=torch.float32)

            def run(w, part=part):
                L.run(split, "linear_splitk", x, w, part)
                L.run(split, "splitk_sum", part, y)
            paths[f"splitk S={s}" + (" (wrapper)" if split_path and s == lin._splits(m, n, k) else "")] = run
        if n <= 16384:  # narrow projections: 128-wide tiles give twice the tiles, so fewer K shares
            narrow = L.load("linear", T="bf16", BM=64, BN=128, BK=64, STAGES=6)
            for s in (1, 2, 3, 4):
                part = torch.empty(s, m, n, device="cuda", dtype=torch.float32)

                def run(w, part=part):
                    L.run(narrow, "linear_splitk", x, w, part)
                    L.run(narrow, "splitk_sum", part, y)
                paths[f"splitk 64x128 s6 S={s}"] = run
        measure("", m, k, n, paths, ws[0], pick, y, ref, nbytes)
        del ws
    # the decode MLP's first half, silu(x @ wg.T) * (x @ wu.T) with [wg | wu] one fused weight:
    # the engine's linear + silu_and_mul against gated_mlp (one kernel) at several tile shapes
    from tilex.stdlib import silu_and_mul

    for m, k, n in ([] if args.swap else GATED):
        nbytes = 2 * n * k * 2
        sets = max(2, -(-2 * l2 // nbytes))
        ws = [torch.randn(2 * n, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        it = iter(range(1 << 62))
        pick = lambda: ws[next(it) % sets]  # noqa: E731
        r = F.linear(x.float(), ws[0].float())
        ref = F.silu(r[:, :n]) * r[:, n:]
        paths = {"cublas + torch silu*mul": lambda w: F.silu(F.linear(x, w[:n])) * F.linear(x, w[n:]),
                 "linear + silu_and_mul (engine)": lambda w: silu_and_mul(lin.linear(x, w))}
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for cfg in (lin._GATED_SKINNY, dict(BM=64, BN=128, BK=64, STAGES=4), dict(BM=64, BN=64, BK=64, STAGES=6)):
            mod = L.load("linear", kernel="gated_mlp", T="bf16", **cfg)
            paths[f"gated_mlp {cfg['BM']}x{cfg['BN']}x{cfg['BK']} s{cfg['STAGES']}"] = \
                lambda w, mod=mod: L.run(mod, "gated_mlp", x, w[:n], w[n:], y)
        measure("gated: ", m, k, n, paths, ws[0], pick, y, ref, nbytes)
        del ws
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(copy_gb_s=copy_gb_s, rows=rows), f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

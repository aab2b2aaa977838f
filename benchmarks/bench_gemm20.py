"""Issue 17's losing linear shapes (session 20): candidate kernels per shape against cuBLAS, in one process.

    python3 benchmarks/bench_gemm20.py [--shapes MxKxN,...] [--only-lib] [--json OUT.json] [--jobs 14]

For each shape (M x K x N, y = x @ w.T with w [N, K], bf16; w scaled by 1/sqrt(K) as trained weights are): cuBLAS
(F.linear), the library call (`tilex.stdlib.linear`, what it picks now) and the shape's candidates, each candidate
first checked against torch (f32 reference, relative Frobenius error <= 1e-2; a candidate that fails is reported,
not timed), then timed as a CUDA graph of R back-to-back launches (R ~ 2 ms of work) replayed 5 times after a
warm-up: median ms per launch (sweep_gemm.graph_ms). ratio = cuBLAS ms / tilex ms (> 1: tilex faster). The
one-kernel split-K (`linear_splitk_last`) and the stream-K kernel (`linear_streamk`) are checked again after their
timed launches (their tile counters must be back at zero and y still right). Kernels are built first in `--jobs`
worker processes (the cache is cold on a fresh machine), with the variants tests/test_linear_streamk20_gpu.py
and the library's decode paths use. Also prints the library's path choice per shape (linear.path_choice).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SMS = 132
# the 7 losers of the session-19 grid, then 5 shapes at ~1.0
SHAPES = [(100, 896, 9728), (100, 14336, 3584), (256, 5120, 55296), (100, 3584, 37888), (4096, 2048, 2560),
          (4096, 2048, 2304), (256, 5120, 5120),
          (8192, 8192, 8192), (4096, 4096, 14336), (1, 4096, 4096), (16, 5120, 13824), (511, 13824, 5120)]

P = "linear_persistent_tma"
P3 = "linear_persistent_tma3"
P5 = "linear_persistent_tma5"
SL = "linear_splitk_last"
SK = "linear_splitk_tiles"  # + splitk_sum: the library's two-kernel split-K
ST = "linear_streamk"


def _t(bm, bn, st=4):
    return dict(BM=bm, BN=bn, BK=64, STAGES=st)


def _c(bm, bc, st=4):
    return dict(BM=bm, BC=bc, BK=64, STAGES=st)


# shape -> [(label, kernel, defines, S or PROGRAMS multiplier)]; persistent kernels get PROGRAMS = mult * SMs
CANDIDATES = {
    (100, 896, 9728): [
        ("stream 128x128 s4", ST, _t(128, 128), 1),
        ("stream 128x64 s4", ST, _t(128, 64), 1),
        ("split2 128x128 S=2", SK, _t(128, 128), 2),
        ("last 128x128 s4 S=2", SL, _t(128, 128), 2),
        ("last 128x128 s3 S=2", SL, _t(128, 128, 3), 2),
        ("last 128x64 s4 S=2", SL, _t(128, 64), 2),
        ("tma 128x64 s4 P2", P, _t(128, 64), 2),
        ("tc 64x128 s4", "linear", _t(64, 128), 0),
        ("tc 128x64 s4", "linear", _t(128, 64), 0),
    ],
    (100, 14336, 3584): [
        ("stream 128x128 s4", ST, _t(128, 128), 1),
        ("stream 128x128 s6", ST, _t(128, 128, 6), 1),
        ("split2 128x128 S=4", SK, _t(128, 128), 4),
        ("last 128x128 s4 S=4", SL, _t(128, 128), 4),
        ("last 128x128 s3 S=9", SL, _t(128, 128, 3), 9),
        ("last 128x128 s4 S=8", SL, _t(128, 128), 8),
        ("last 128x64 s4 S=4", SL, _t(128, 64), 4),
        ("last 128x64 s6 S=4", SL, _t(128, 64, 6), 4),
        ("last 128x256 s4 S=9", SL, _t(128, 256), 9),
    ],
    (256, 5120, 55296): [
        ("stream 128x128 s4", ST, _t(128, 128), 1),
        ("stream 128x128 s5", ST, _t(128, 128, 5), 1),
        ("stream 128x256 s4", ST, _t(128, 256), 1),
        ("tma 128x128 s5", P, _t(128, 128, 5), 1),
        ("tma 128x128 s6", P, _t(128, 128, 6), 1),
        ("tma 128x256 s4", P, _t(128, 256), 1),
        ("tma 256x128 s4", P, _t(256, 128), 1),
        ("tma3 128x192 s4", P3, _c(128, 64), 1),
        ("tma3 128x96 s6", P3, _c(128, 32, 6), 1),
        ("tma5 128x160 s4", P5, _c(128, 32), 1),
    ],
    (100, 3584, 37888): [
        ("stream 128x128 s4", ST, _t(128, 128), 1),
        ("stream 128x256 s4", ST, _t(128, 256), 1),
        ("tma3 128x96 s4", P3, _c(128, 32), 1),
        ("tma3 128x96 s6", P3, _c(128, 32, 6), 1),
        ("tma 128x128 s4", P, _t(128, 128), 1),
        ("tma3 128x192 s4", P3, _c(128, 64), 1),
        ("tma 128x64 s4 P2", P, _t(128, 64), 2),
    ],
    (4096, 2048, 2560): [
        ("stream 128x128 s4", ST, _t(128, 128), 1),
        ("stream 128x256 s4", ST, _t(128, 256), 1),
        ("tma5 128x160 s4", P5, _c(128, 32), 1),
        ("tma 128x128 s5", P, _t(128, 128, 5), 1),
        ("tma3 128x192 s4", P3, _c(128, 64), 1),
        ("tma3 128x96 s6", P3, _c(128, 32, 6), 1),
    ],
    (4096, 2048, 2304): [
        ("stream 128x128 s4", ST, _t(128, 128), 1),
        ("tma 128x128 s4", P, _t(128, 128), 1),
    ],
    (256, 5120, 5120): [
        ("stream 128x128 s4", ST, _t(128, 128), 1),
        ("stream 128x256 s4", ST, _t(128, 256), 1),
        ("last 128x128 s3 S=3", SL, _t(128, 128, 3), 3),
        ("last 128x128 s4 S=2", SL, _t(128, 128), 2),
        ("last 128x256 s4 S=3", SL, _t(128, 256), 3),
        ("tma3 128x96 s6", P3, _c(128, 32, 6), 1),
        ("tma5 64x160 s6", P5, _c(64, 32, 6), 1),
        ("tma 128x128 s6", P, _t(128, 128, 6), 1),
    ],
    (8192, 8192, 8192): [
        ("stream 128x256 s4", ST, _t(128, 256), 1),
    ],
    (4096, 4096, 14336): [
        ("stream 128x256 s4", ST, _t(128, 256), 1),
    ],
    (511, 13824, 5120): [
        ("stream 128x128 s4", ST, _t(128, 128), 1),
        ("stream 128x256 s4", ST, _t(128, 256), 1),
        ("last 128x256 s4 S=3", SL, _t(128, 256), 3),
    ],
}


# request 2 (after request 1: stream-K and the one-launch split-K lost everywhere, 6 stages won at M=256): deeper rings
# for the split-K path at M=100 K=14336 N=3584; the library's default against its old one with --ab
CANDIDATES_R2 = {
    (100, 14336, 3584): [
        ("split2 128x128 S=4", SK, _t(128, 128), 4),
        ("split2 128x128 s6 S=4", SK, _t(128, 128, 6), 4),
        ("split2 128x128x128 s3 S=4", SK, dict(BM=128, BN=128, BK=128, STAGES=3), 4),
        ("last 128x128 s6 S=4", SL, _t(128, 128, 6), 4),
        ("split2 128x256 s4 S=9", SK, _t(128, 256), 9),
    ],
}

# built with the candidates: the GPU tests' other variants, the library's decode kernels at the two decode shapes
EXTRA_BUILDS = [(ST, dict(BM=128, BN=128, BK=64, STAGES=4, PROGRAMS=132, BIAS=True)),
                (ST, dict(BM=128, BN=128, BK=64, STAGES=4, PROGRAMS=5)),
                (SL, dict(BM=128, BN=128, BK=64, STAGES=4, BIAS=True)),
                ("linear_swap", dict(BN=64, BM=16, BK=128, STAGES=6)),
                ("linear_swap", dict(BN=128, BM=16, BK=64, STAGES=6))]


def _defines(kernel, d, mult):
    if kernel in (P, P3, P5, ST):
        return dict(d, PROGRAMS=mult * SMS)
    return dict(d)


def lib_kernels(lin, m: int, k: int, n: int) -> list:
    """(kernel, defines) that tilex.stdlib.linear loads at M x K x N without a bias (mirrors linear(); for the
    parallel builds only: a miss costs a build in the timed process, not a wrong result)."""
    if lin._use_swap(m, k, True):
        return [("linear_swap", lin._swap_config(n))]
    if lin._use_split_kernels(m, n, k):
        return []
    path, tiles, _, _ = lin.path_choice("linear", "bf16", m, n, k)
    if path == "streamk":
        return [(ST, dict(tiles, PROGRAMS=SMS))]
    if path == "splitk":
        return [(SL, dict(tiles))] if lin._SPLIT_LAST else [(SK, dict(tiles)), ("splitk_sum", {})]
    if path == "persistent":
        return [(P if n % 8 == 0 else "linear_persistent", dict(tiles, PROGRAMS=SMS))]
    if path in lin._WIDE:
        return [(lin._WIDE[path][1], dict(tiles, PROGRAMS=SMS))]
    return [("linear", dict(tiles))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", help="comma list of MxKxN")
    ap.add_argument("--only-lib", action="store_true", help="cuBLAS and the library call only")
    ap.add_argument("--ab", action="store_true",
                    help="also the library with session 20's switches off (_STREAMK, _SPLIT_LAST, _DEEP_ROWS)")
    ap.add_argument("--jobs", type=int, default=14)
    ap.add_argument("--set", choices=("r1", "r2"), default="r1", help="the candidates of request 1 or of request 2")
    ap.add_argument("--json")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    t0 = time.time()
    cands = CANDIDATES if args.set == "r1" else CANDIDATES_R2

    import importlib

    from sweep_gemm import build_all, graph_ms

    lin = importlib.import_module("tilex.stdlib.linear")
    jobs = []
    for m, k, n in shapes:
        jobs += [("linear", kern, d, ()) for kern, d in lib_kernels(lin, m, k, n)]
        if args.ab:
            saved = (lin._STREAMK, lin._SPLIT_LAST, lin._DEEP_ROWS)
            lin._STREAMK, lin._SPLIT_LAST, lin._DEEP_ROWS = False, False, False
            jobs += [("linear", kern, d, ()) for kern, d in lib_kernels(lin, m, k, n)]
            lin._STREAMK, lin._SPLIT_LAST, lin._DEEP_ROWS = saved
    if not args.only_lib:
        for sh in shapes:
            for _, kernel, d, mult in cands.get(sh, []):
                jobs.append(("linear", kernel, _defines(kernel, d, mult), ()))
                if kernel == SK:
                    jobs.append(("linear", "splitk_sum", {}, ()))
        jobs += [("linear", kernel, d, ()) for kernel, d in EXTRA_BUILDS]
    seen, uniq = set(), []
    for j in jobs:
        key = (j[1], tuple(sorted(j[2].items())))
        if key not in seen:
            seen.add(key)
            uniq.append(j)
    errs = build_all(uniq, args.jobs, time.time() + 60)
    print(f"built {len(uniq)} kernels in {time.time() - t0:.0f} s ({len(errs)} refused: {errs})", flush=True)

    import torch
    import torch.nn.functional as F

    import tilex.stdlib as S
    from tilex.stdlib import _launch as L

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert sms == SMS, f"{sms} SMs: the candidates' PROGRAMS assume {SMS}"
    stream = torch.cuda.Stream()
    print(f"GPU: {torch.cuda.get_device_name()}, {sms} SMs, start {time.time() - t0:.0f} s", flush=True)

    def ms_of(fn) -> float:
        return graph_ms(fn, stream)

    def err_of(y, ref) -> float:
        return float((y.float() - ref).norm() / ref.norm())

    rows = []
    for m, k, n in shapes:
        torch.manual_seed(0)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
        ref = F.linear(x.float(), w.float())
        cb = ms_of(lambda: F.linear(x, w))
        row = dict(shape=[m, k, n], cublas_ms=cb, results={})
        try:
            path = lin.path_choice("linear", "bf16", m, n, k) if m > 16 else ("swap",)
            row["path"] = [path[0], path[1], path[2], {a: round(b, 1) for a, b in path[3].items()}] \
                if len(path) > 1 else list(path)
        except Exception as e:  # noqa: BLE001
            row["path"] = [f"{type(e).__name__}: {e}"]
        got = S.linear(x, w)
        row["lib_err"] = err_of(got, ref)
        row["lib_ms"] = ms_of(lambda: S.linear(x, w))
        row["lib_err_after"] = err_of(S.linear(x, w), ref)  # after the timed replays (the counters reset)
        line = [f"{m}x{k}x{n}: cuBLAS {cb:.4f} ms, lib {row['lib_ms']:.4f} ({cb / row['lib_ms']:.3f}x, err "
                f"{row['lib_err']:.1e}, after {row['lib_err_after']:.1e}) path {row['path'][:3]}"]
        if args.ab:
            saved = (lin._STREAMK, lin._SPLIT_LAST, lin._DEEP_ROWS)
            lin._STREAMK, lin._SPLIT_LAST, lin._DEEP_ROWS = False, False, False
            L.clear_fastpath()
            old = S.linear(x, w)
            row["old_err"] = err_of(old, ref)
            row["old_ms"] = ms_of(lambda: S.linear(x, w))
            row["old_path"] = list(lin.path_choice("linear", "bf16", m, n, k)[:3]) if m > 16 else ["swap"]
            lin._STREAMK, lin._SPLIT_LAST, lin._DEEP_ROWS = saved
            L.clear_fastpath()
            line.append(f"  switches off: {row['old_ms']:.4f} ({cb / row['old_ms']:.3f}x, err {row['old_err']:.1e}) "
                        f"path {row['old_path']}")
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for label, kernel, d, mult in ([] if args.only_lib else cands.get((m, k, n), [])):
            dd = _defines(kernel, d, mult)
            try:
                mod = L.load("linear", kernel=kernel, T="bf16", **dd)
                if kernel == SL:
                    tiles = -(-m // d["BM"]) * -(-n // d["BN"])
                    part = torch.empty(mult, m, n, device="cuda", dtype=torch.float32)
                    count = torch.zeros(tiles, device="cuda", dtype=torch.int32)
                    bias = w.reshape(-1)[:n]

                    def fn(mod=mod, part=part, count=count, bias=bias):
                        L.run(mod, SL, x, w, bias, part, count, y)
                elif kernel == ST:
                    tiles = -(-m // d["BM"]) * -(-n // d["BN"])
                    part = torch.empty(2 * mult * SMS, d["BM"], d["BN"], device="cuda", dtype=torch.float32)
                    count = torch.zeros(tiles, device="cuda", dtype=torch.int32)
                    bias = w.reshape(-1)[:n]

                    def fn(mod=mod, part=part, count=count, bias=bias):
                        L.run(mod, ST, x, w, bias, part, count, y)
                elif kernel == SK:
                    part = torch.empty(mult, m, n, device="cuda", dtype=torch.float32)
                    summ = L.load("linear", kernel="splitk_sum", T="bf16")

                    def fn(mod=mod, part=part, summ=summ):
                        L.run(mod, SK, x, w, part)
                        L.run(summ, "splitk_sum", part, y)
                else:
                    def fn(mod=mod, kernel=kernel):
                        L.run(mod, kernel, x, w, y)
                y.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                e = err_of(y, ref)
                if not e <= 1e-2:
                    row["results"][label] = dict(error=f"rel. error {e:.3g}")
                    line.append(f"  {label:<24} FAILED rel. error {e:.3g}")
                    continue
                t = ms_of(fn)
                r = dict(ms=t, err=e, ratio=cb / t)
                if kernel in (SL, ST):
                    y.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    r["err_after"] = err_of(y, ref)
                    r["count_zero"] = bool((count == 0).all().item())
                row["results"][label] = r
                extra = f" after {r['err_after']:.1e} counters zero {r['count_zero']}" if kernel in (SL, ST) else ""
                line.append(f"  {label:<24} {t:.4f} ms {cb / t:.3f}x err {e:.1e}{extra}")
            except Exception as ex:  # noqa: BLE001 - reported in the table
                row["results"][label] = dict(error=f"{type(ex).__name__}: {str(ex).splitlines()[0][:160]}")
                line.append(f"  {label:<24} ERROR {row['results'][label]['error']}")
        print("\n".join(line), flush=True)
        rows.append(row)
        del x, w, ref, y, got
    import math

    libs = [r["cublas_ms"] / r["lib_ms"] for r in rows]
    if args.ab:
        olds = [r["cublas_ms"] / r["old_ms"] for r in rows]
        print(f"lib, switches off: geomean {math.exp(sum(map(math.log, olds)) / len(olds)):.3f} min {min(olds):.3f}")
    best = [max([r["cublas_ms"] / r["lib_ms"]] + [v["ratio"] for v in r["results"].values() if "ratio" in v])
            for r in rows]
    for name, v in (("lib", libs), ("best of lib and candidates", best)):
        print(f"{name}: geomean {math.exp(sum(map(math.log, v)) / len(v)):.3f} min {min(v):.3f}")
    path = args.json or (os.path.join(os.environ["OUT"], "bench_gemm20.json") if os.environ.get("OUT") else None)
    if path:
        with open(path, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), seconds=time.time() - t0, rows=rows), f, indent=1)
    print(f"done in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

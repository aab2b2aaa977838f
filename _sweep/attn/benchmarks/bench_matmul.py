"""tilex GEMM (`tilex.stdlib.linear`) and fused gated MLP against cuBLAS, in one process.

    python benchmarks/bench_matmul.py                      # every shape of issue 3 item 7
    python benchmarks/bench_matmul.py --quick              # smoke pass: 3 rows, short timing
    python benchmarks/bench_matmul.py --shapes 8192x8192x8192,1x5120x13824,mlp --json out.json

Every row is y = x @ w.T with x [M, K] bf16 and w [N, K] bf16 (weights stored [out, in], as
in every checkpoint): tilex through `tilex.stdlib.linear(x, w)`, cuBLAS through
`torch.nn.functional.linear(x, w)`. Shapes are named MxKxN. The `mlp` row is the fused gated
MLP at M=4096, K=5120, N=13824: `tilex.stdlib.gated_mlp(x, wg, wu)` = silu(x @ wg.T) *
(x @ wu.T) against two cuBLAS F.linear calls plus a `torch.compile`d silu(g) * u.

Method:
* correctness first: relative Frobenius error ||y - ref|| / ||ref|| against an f32 reference
  (F.linear on f32 copies) must be <= 1e-2, for tilex (and is reported for cuBLAS);
* time: median of CUDA-event timings of single calls after warm-up. Before each timed call
  the stream runs `torch.cuda._sleep` (no memory traffic) so the CPU is ahead of the GPU and
  host launch overhead is not counted; the host cost per call is reported separately
  (`host us`, tilex only). Inputs rotate over several buffer sets so that one call's
  operands are not left in L2 by the previous call (enough sets to span >= 4x the L2 size);
* TFLOP/s = 2*M*N*K / time (x2 for the two GEMMs of the MLP); GB/s = (x + w + y bytes) / time;
  `% copy` (skinny rows, M <= 16) = weight bytes / time as a fraction of the device-to-device
  copy bandwidth measured in the same run (bytes read + written);
* ratio = cuBLAS time / tilex time: > 1 means tilex is faster.

The table prints as Markdown, ready for benchmarks/RESULTS.md, with date, commit, command
and device above it.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (label, M, K, N): issue 3 item 7
SHAPES = [
    (8192, 8192, 8192),
    (4096, 5120, 13824),
    (4096, 13824, 5120),
    (4096, 5120, 5120),
    (1, 5120, 13824),
    (1, 5120, 152064),
    (16, 5120, 13824),
    (16, 5120, 152064),
]
MLP = (4096, 5120, 13824)
QUICK = ["4096x5120x5120", "16x5120x13824", "mlp"]
TOL = 1e-2


def label(m: int, k: int, n: int) -> str:
    return f"{m}x{k}x{n}"


ALL_LABELS = [label(*s) for s in SHAPES] + ["mlp"]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Benchmark tilex.stdlib.linear / gated_mlp against cuBLAS (torch) on the GPU.",
        epilog="shapes: " + ", ".join(ALL_LABELS) + " (MxKxN; any MxKxN is accepted)")
    ap.add_argument("--shapes", metavar="LIST",
                    help="comma-separated subset of the shapes (MxKxN labels, or 'mlp'); default: all")
    ap.add_argument("--quick", action="store_true",
                    help="smoke pass: short timing, and only " + ", ".join(QUICK) + " unless --shapes is given")
    ap.add_argument("--json", metavar="PATH", help="also write every number to PATH as JSON")
    ap.add_argument("--warmup-ms", type=float, default=None, help="warm-up per measurement (default 100, quick 10)")
    ap.add_argument("--rep-ms", type=float, default=None, help="time spent in timed calls (default 500, quick 30)")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness check (not for RESULTS.md)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.shapes:
        args.selected = [s.strip() for s in args.shapes.split(",") if s.strip()]
    else:
        args.selected = list(QUICK) if args.quick else list(ALL_LABELS)
    for s in args.selected:
        if s != "mlp" and parse_label(s) is None:
            ap.error(f"--shapes: {s!r} is neither 'mlp' nor MxKxN (e.g. 4096x5120x13824)")
    args.warmup_ms = args.warmup_ms if args.warmup_ms is not None else (10.0 if args.quick else 100.0)
    args.rep_ms = args.rep_ms if args.rep_ms is not None else (30.0 if args.quick else 500.0)
    return args


def parse_label(s: str):
    parts = s.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        return None
    return tuple(int(p) for p in parts)


# ---------------------------------------------------------------- environment
def git_commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except Exception:
        return "unknown"


def load_tilex():
    """tilex and the two library entry points, or exit with a clear message."""
    try:
        import tilex
        import tilex.stdlib as stdlib
    except Exception as e:
        sys.exit(f"error: cannot import tilex.stdlib ({type(e).__name__}: {e})")
    missing = [n for n in ("linear", "gated_mlp") if not hasattr(stdlib, n)]
    if missing:
        why = ""
        try:
            import tilex.stdlib.linear  # noqa: F401  (surface the real import error)
        except Exception as e:
            why = f" ({type(e).__name__}: {e})"
        sys.exit(f"error: tilex.stdlib has no {' / '.join(missing)}: transpiler/stdlib/linear.py and "
                 f"stdlib_kernels/linear.tile are needed{why}")
    return tilex, stdlib.linear, stdlib.gated_mlp


# ---------------------------------------------------------------- timing
class Timer:
    """Median GPU time of one call: CUDA events around each call, a `_sleep` kernel before it
    so the CPU runs ahead (host overhead excluded), warm-up first."""

    def __init__(self, torch, warmup_ms: float, rep_ms: float):
        self.torch = torch
        self.warmup_ms = warmup_ms
        self.rep_ms = rep_ms
        self.cycles_per_us = self._calibrate()

    def _calibrate(self) -> float:
        torch = self.torch
        cycles = 10_000_000
        torch.cuda._sleep(1000)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.cuda._sleep(cycles)
        e.record()
        e.synchronize()
        return cycles / max(s.elapsed_time(e) * 1e3, 1.0)

    def host_us(self, fn, n: int = 50) -> float:
        """CPU microseconds per call (launch path only; the GPU may still be running)."""
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return (t1 - t0) / n * 1e6

    def __call__(self, fn) -> dict:
        torch = self.torch
        host = self.host_us(fn, 20)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
        for _ in range(5):
            fn()
        e.record()
        e.synchronize()
        est = max(s.elapsed_time(e) / 5, 1e-3)
        for _ in range(max(1, int(self.warmup_ms / est))):
            fn()
        n = min(max(int(self.rep_ms / est), 10), 2000)
        sleep = int(self.cycles_per_us * max(50.0, 2.0 * host + 20.0))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for a, b in events:
            torch.cuda._sleep(sleep)
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) for a, b in events]
        return {"ms": statistics.median(times), "min_ms": min(times), "reps": n, "host_us": host}


def copy_bandwidth(torch, timer: Timer) -> float:
    """Device-to-device copy of 2 GiB, GB/s counting bytes read + written."""
    src = torch.empty(1 << 31, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    t = timer(lambda: dst.copy_(src))["ms"]
    del src, dst
    torch.cuda.empty_cache()
    return 2 * (1 << 31) / (t * 1e-3) / 1e9


def rotation(nbytes: int, l2_bytes: int) -> int:
    """Buffer sets to rotate over: enough that they span >= 4x L2 (at most 32)."""
    return max(1, min(32, math.ceil(4 * l2_bytes / max(nbytes, 1))))


def cycler(sets):
    state = {"i": 0}

    def nxt():
        i = state["i"]
        state["i"] = (i + 1) % len(sets)
        return sets[i]
    return nxt


def rel_fro(y, ref) -> float:
    y = y.float()
    return float((y - ref).norm() / ref.norm())


# ---------------------------------------------------------------- rows
def bench_linear(torch, F, linear, timer, m, k, n, l2, check) -> dict:
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(m, k, device=dev, dtype=bf)
    w = (torch.randn(n, k, device=dev, dtype=torch.float32) / math.sqrt(k)).to(bf)
    row = {"name": label(m, k, n), "M": m, "K": k, "N": n, "kind": "linear"}
    if check:
        ref = F.linear(x.float(), w.float())
        y = linear(x, w)
        torch.cuda.synchronize()
        if tuple(y.shape) != (m, n) or y.dtype != bf:
            raise SystemExit(f"error: tilex.stdlib.linear returned {tuple(y.shape)} {y.dtype}, expected ({m}, {n}) bf16")
        row["tilex_rel_err"] = rel_fro(y, ref)
        row["cublas_rel_err"] = rel_fro(F.linear(x, w), ref)
        del ref, y
    set_bytes = (m * k + n * k + m * n) * 2
    r = rotation(set_bytes, l2)
    sets = [(x, w)] + [(torch.randn(m, k, device=dev, dtype=bf),
                        (torch.randn(n, k, device=dev, dtype=torch.float32) / math.sqrt(k)).to(bf))
                       for _ in range(r - 1)]
    nt, nc = cycler(sets), cycler(sets)

    def run_tilex():
        a, b = nt()
        linear(a, b)

    def run_cublas():
        a, b = nc()
        F.linear(a, b)

    row["rotate"] = r
    row["flop"] = 2.0 * m * n * k
    row["bytes"] = set_bytes
    row["weight_bytes"] = n * k * 2
    t, c = timer(run_tilex), timer(run_cublas)
    row.update(tilex_ms=t["ms"], tilex_min_ms=t["min_ms"], tilex_host_us=t["host_us"],
               cublas_ms=c["ms"], cublas_min_ms=c["min_ms"], cublas_host_us=c["host_us"], reps=t["reps"])
    del sets, x, w
    torch.cuda.empty_cache()
    return row


def bench_mlp(torch, F, gated_mlp, timer, l2, check) -> dict:
    m, k, n = MLP
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(m, k, device=dev, dtype=bf)
    wg = (torch.randn(n, k, device=dev, dtype=torch.float32) / math.sqrt(k)).to(bf)
    wu = (torch.randn(n, k, device=dev, dtype=torch.float32) / math.sqrt(k)).to(bf)
    row = {"name": "mlp", "M": m, "K": k, "N": n, "kind": "gated_mlp"}
    baseline = "cuBLAS F.linear x2 + torch.compile(silu(g) * u)"
    try:
        act = torch.compile(lambda g, u: F.silu(g) * u)
        act(F.linear(x, wg), F.linear(x, wu))
    except Exception as e:  # no triton / inductor: eager, and say so
        print(f"note: torch.compile failed ({type(e).__name__}: {e}); the baseline uses eager silu * mul",
              file=sys.stderr)
        act = lambda g, u: F.silu(g) * u  # noqa: E731
        baseline = "cuBLAS F.linear x2 + eager silu(g) * u"
    row["baseline"] = baseline

    def torch_mlp(a, g, u):
        return act(F.linear(a, g), F.linear(a, u))

    if check:
        xf = x.float()
        ref = F.silu(F.linear(xf, wg.float())) * F.linear(xf, wu.float())
        y = gated_mlp(x, wg, wu)
        torch.cuda.synchronize()
        if tuple(y.shape) != (m, n):
            raise SystemExit(f"error: tilex.stdlib.gated_mlp returned shape {tuple(y.shape)}, expected ({m}, {n})")
        row["tilex_rel_err"] = rel_fro(y, ref)
        row["cublas_rel_err"] = rel_fro(torch_mlp(x, wg, wu), ref)
        del ref, y, xf
    set_bytes = (m * k + 2 * n * k + m * n) * 2
    r = rotation(set_bytes, l2)
    sets = [(x, wg, wu)] + [(torch.randn(m, k, device=dev, dtype=bf),
                             (torch.randn(n, k, device=dev, dtype=torch.float32) / math.sqrt(k)).to(bf),
                             (torch.randn(n, k, device=dev, dtype=torch.float32) / math.sqrt(k)).to(bf))
                            for _ in range(r - 1)]
    nt, nc = cycler(sets), cycler(sets)
    t = timer(lambda: gated_mlp(*nt()))
    c = timer(lambda: torch_mlp(*nc()))
    row.update(rotate=r, flop=4.0 * m * n * k, bytes=set_bytes, weight_bytes=2 * n * k * 2,
               tilex_ms=t["ms"], tilex_min_ms=t["min_ms"], tilex_host_us=t["host_us"],
               cublas_ms=c["ms"], cublas_min_ms=c["min_ms"], cublas_host_us=c["host_us"], reps=t["reps"])
    del sets, x, wg, wu
    torch.cuda.empty_cache()
    return row


def finish(row: dict, copy_gb_s: float) -> dict:
    for who in ("tilex", "cublas"):
        ms = row[f"{who}_ms"]
        row[f"{who}_tflop_s"] = row["flop"] / (ms * 1e-3) / 1e12
        row[f"{who}_gb_s"] = row["bytes"] / (ms * 1e-3) / 1e9
        row[f"{who}_pct_copy"] = row["weight_bytes"] / (ms * 1e-3) / 1e9 / copy_gb_s * 100
    row["ratio"] = row["cublas_ms"] / row["tilex_ms"]
    return row


# ---------------------------------------------------------------- report
def _f(v, spec):
    return "-" if v is None else format(v, spec)


def markdown(rows) -> str:
    head = ("| shape MxKxN | tilex ms | tilex TFLOP/s | tilex GB/s | tilex % copy | cuBLAS ms | cuBLAS TFLOP/s "
            "| cuBLAS GB/s | cuBLAS % copy | cuBLAS/tilex | tilex host us | rel err tilex | rel err cuBLAS |")
    out = [head, "|" + "---|" * 13]
    for r in rows:
        skinny = r["kind"] == "linear" and r["M"] <= 16
        out.append("| " + " | ".join([
            r["name"] + (" (gated MLP)" if r["kind"] == "gated_mlp" else ""),
            _f(r["tilex_ms"], ".4f"), _f(r["tilex_tflop_s"], ".1f"), _f(r["tilex_gb_s"], ".0f"),
            _f(r["tilex_pct_copy"], ".0f") + "%" if skinny else "-",
            _f(r["cublas_ms"], ".4f"), _f(r["cublas_tflop_s"], ".1f"), _f(r["cublas_gb_s"], ".0f"),
            _f(r["cublas_pct_copy"], ".0f") + "%" if skinny else "-",
            _f(r["ratio"], ".2f"), _f(r["tilex_host_us"], ".0f"),
            _f(r.get("tilex_rel_err"), ".1e"), _f(r.get("cublas_rel_err"), ".1e")]) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:
        sys.exit(f"error: this benchmark needs PyTorch with CUDA ({type(e).__name__}: {e})")
    if not torch.cuda.is_available():
        sys.exit("error: this benchmark needs a CUDA GPU (torch.cuda.is_available() is False)")
    tilex, linear, gated_mlp = load_tilex()
    torch.manual_seed(args.seed)
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0) or 60 << 20)
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "command": "python " + " ".join([str(Path(sys.argv[0]))] + (argv if argv is not None else sys.argv[1:])),
        "gpu": props.name, "l2_bytes": l2, "torch": torch.__version__, "cuda": torch.version.cuda,
        "tilex": tilex.__version__, "python": platform.python_version(),
        "warmup_ms": args.warmup_ms, "rep_ms": args.rep_ms, "quick": args.quick,
    }
    print(f"# {meta['date']}  commit {meta['commit']}  {meta['gpu']}  torch {meta['torch']}  CUDA {meta['cuda']}",
          flush=True)
    print(f"# command: {meta['command']}", flush=True)
    timer = Timer(torch, args.warmup_ms, args.rep_ms)
    copy = copy_bandwidth(torch, timer)
    meta["copy_gb_s"] = copy
    print(f"# copy bandwidth (read + write): {copy:.0f} GB/s; L2 {l2 >> 20} MiB", flush=True)

    rows, failed = [], []
    for name in args.selected:
        print(f"... {name}", file=sys.stderr, flush=True)
        if name == "mlp":
            row = bench_mlp(torch, F, gated_mlp, timer, l2, not args.no_check)
        else:
            m, k, n = parse_label(name)
            row = bench_linear(torch, F, linear, timer, m, k, n, l2, not args.no_check)
        row = finish(row, copy)
        err = row.get("tilex_rel_err")
        row["ok"] = err is None or (math.isfinite(err) and err <= TOL)
        if not row["ok"]:
            failed.append(f"{name}: tilex rel Frobenius error {err:.3g} > {TOL}")
        rows.append(row)
        print(f"    tilex {row['tilex_ms']:.4f} ms, cuBLAS {row['cublas_ms']:.4f} ms, ratio {row['ratio']:.2f}"
              + (f", rel err {err:.1e}" if err is not None else ""), file=sys.stderr, flush=True)

    print()
    print(markdown(rows))
    print()
    print("ratio = cuBLAS time / tilex time (> 1: tilex faster); % copy = weight bytes / time vs the copy bandwidth; "
          "GB/s counts x + w + y.")
    for f in failed:
        print(f"FAIL: {f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

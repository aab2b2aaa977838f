"""tilex batched matmul (`examples/bmm.tile`) against torch.bmm (cuBLAS), in one process.

    python benchmarks/bench_bmm.py                       # the shapes of issue 17 item 4, every config
    python benchmarks/bench_bmm.py --quick               # short timing
    python benchmarks/bench_bmm.py --shapes 32x1024x1024x1024 --configs default --json out.json

Every row is c[z] = a[z] @ b[z] with a [B, M, K], b [B, K, N], c [B, M, N] bf16 (shapes named BxMxNxK):
tilex through `tilex.compile("examples/bmm.tile", **config).bmm(a, b, c)` or examples/bmm_persistent.tile (on
sm_90a: TMA with 3-D tensor maps + wgmma), cuBLAS through `torch.bmm(a, b, out=c)`. Each tile configuration (`--configs`) is compiled
once; the row reports each and the best.

Method (the Timer of bench_matmul.py): correctness first (relative Frobenius error against torch.bmm on f32
copies <= 1e-2, else the row fails); GPU time = median of CUDA-event timings of single calls after warm-up,
each preceded by `torch.cuda._sleep` so that host launch overhead is not counted (`host us`: the CPU cost of
one eager call, reported separately); TFLOP/s = 2*B*M*N*K / time; ratio = torch time / tilex time (> 1:
tilex faster). The operands are not rotated between calls: the same buffers serve torch and tilex.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_matmul import Timer, git_commit  # noqa: E402

SHAPES = [(32, 1024, 1024, 1024), (8, 4096, 4096, 128), (64, 128, 128, 4096), (12, 1000, 1000, 1000), (16, 512, 512, 64)]
# name: (kernel of examples/bmm.tile, compile-time parameters)
CONFIGS = {
    "default": ("bmm", {}),  # 128x128x64, 4 stages (the example's defaults), one block per output tile
    "64x128": ("bmm", dict(BM=64, BN=128, BK=64, STAGES=4)),
    "128x256": ("bmm", dict(BM=128, BN=256, BK=64, STAGES=3)),
    "persistent": ("bmm_persistent", {}),  # examples/bmm_persistent.tile  # 132 blocks walk the tiles; the next tile's loads overlap this one's stores
}
TOL = 1e-2


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Benchmark examples/bmm.tile against torch.bmm on the GPU.")
    ap.add_argument("--shapes", help="comma-separated BxMxNxK (default: " + ", ".join("x".join(map(str, s)) for s in SHAPES) + ")")
    ap.add_argument("--configs", help="comma-separated subset of " + ", ".join(CONFIGS) + " (default: all)")
    ap.add_argument("--quick", action="store_true", help="short timing")
    ap.add_argument("--json", metavar="PATH", help="also write every number to PATH as JSON")
    args = ap.parse_args(argv)
    args.shape_list = SHAPES
    if args.shapes:
        try:
            args.shape_list = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes.split(",") if s.strip()]
        except ValueError:
            ap.error(f"--shapes: expected BxMxNxK, e.g. 32x1024x1024x1024, got {args.shapes!r}")
        if any(len(s) != 4 or min(s) < 1 for s in args.shape_list):
            ap.error(f"--shapes: expected BxMxNxK with four positive sizes, got {args.shapes!r}")
    args.config_list = list(CONFIGS) if not args.configs else [c.strip() for c in args.configs.split(",")]
    bad = [c for c in args.config_list if c not in CONFIGS]
    if bad:
        ap.error(f"--configs: unknown {bad}; choose from {list(CONFIGS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    import tilex

    if not torch.cuda.is_available():
        sys.exit("error: bench_bmm.py needs a CUDA GPU")
    timer = Timer(torch, 10.0 if args.quick else 100.0, 30.0 if args.quick else 300.0)
    kernels = {c: getattr(tilex.compile(str(ROOT / "examples" / f"{CONFIGS[c][0]}.tile"), **CONFIGS[c][1]), CONFIGS[c][0])
               for c in args.config_list}
    rows, failed = [], False
    print(f"# bench_bmm.py, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {git_commit()}, "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}, python {platform.python_version()}")
    print(f"# command: python benchmarks/bench_bmm.py {' '.join(argv if argv is not None else sys.argv[1:])}\n")
    print("| BxMxNxK | torch ms | torch TFLOP/s | " + " | ".join(f"{c} ms (ratio)" for c in args.config_list)
          + " | best ratio | host us |")
    print("|---|---|---|" + "---|" * len(args.config_list) + "---|---|")
    for bc, m, n, k in args.shape_list:
        g = torch.Generator(device="cuda").manual_seed(bc * 7 + m)
        a = torch.randn(bc, m, k, generator=g, device="cuda").to(torch.bfloat16)
        b = torch.randn(bc, k, n, generator=g, device="cuda").to(torch.bfloat16)
        ref = torch.bmm(a.float(), b.float())
        c_t = torch.empty(bc, m, n, device="cuda", dtype=torch.bfloat16)
        t_torch = timer(lambda: torch.bmm(a, b, out=c_t))
        flops = 2 * bc * m * n * k
        row = {"shape": [bc, m, n, k], "torch_ms": t_torch["ms"], "configs": {}}
        cells = []
        for cname, fn in kernels.items():
            c = torch.full((bc, m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            fn(a, b, c)
            torch.cuda.synchronize()
            err = float((c.float() - ref).norm() / ref.norm())
            if not (err <= TOL):
                failed = True
                cells.append(f"FAIL (err {err:.2e})")
                row["configs"][cname] = {"error": err}
                continue
            t = timer(lambda: fn(a, b, c))
            row["configs"][cname] = {"ms": t["ms"], "ratio": t_torch["ms"] / t["ms"], "host_us": t["host_us"], "error": err}
            cells.append(f"{t['ms']:.3f} ({t_torch['ms'] / t['ms']:.2f}x)")
        ok = [v for v in row["configs"].values() if "ms" in v]
        best = max((v["ratio"] for v in ok), default=float("nan"))
        host = min((v["host_us"] for v in ok), default=float("nan"))
        row["best_ratio"] = best
        rows.append(row)
        print(f"| {bc}x{m}x{n}x{k} | {t_torch['ms']:.3f} | {flops / t_torch['ms'] / 1e9:.0f} | " + " | ".join(cells)
              + f" | {best:.2f}x | {host:.0f} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""A/B of the persistent GEMM's epilogue: register stores (`linear_persistent`) against stores through shared memory
by TMA (`linear_persistent_tma`), same tiles, same process, with cuBLAS and what `tilex.stdlib.linear` picks (opted in
to the TMA stores, `linear._TMA_STORE = True`, and as on main).

    python benchmarks/bench_tma_store.py [--shapes MxKxN,...] [--json OUT.json]

Each candidate is first checked against torch (f32 reference, relative Frobenius error <= 1e-2), then timed as a
CUDA graph of R back-to-back launches (R ~ 2 ms of work), replayed 5 times after warm-up: median ms per launch.
Weights are scaled by 1/sqrt(K) as trained weights are (the clock depends on the data). ratio = cuBLAS / tilex.

On the H200 (session 18, c96ce2f) this benchmark hung in its first synchronize, at the 256x128 candidate (four
consumer warpgroups asked more registers by setmaxnreg than the block held; fixed in session 19, codegen/matmul.py
`register_split`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

# issue 17's losing linear shapes (M x K x N), then controls
SHAPES = [(4096, 2048, 2304), (4096, 2048, 2560), (256, 5120, 55296), (100, 896, 9728), (511, 13824, 5120),
          (16384, 4864, 896), (511, 1536, 151936), (256, 5120, 5120), (128, 4096, 14336), (4096, 8192, 8192)]
# (label, kernel, defines)
CANDIDATES = [("pers 128x128 s4", "linear_persistent", dict(BM=128, BN=128, BK=64, STAGES=4)),
              ("tma 128x128 s4", "linear_persistent_tma", dict(BM=128, BN=128, BK=64, STAGES=4)),
              ("tma 128x128 s6", "linear_persistent_tma", dict(BM=128, BN=128, BK=64, STAGES=6)),
              ("tma 128x128x128 s3", "linear_persistent_tma", dict(BM=128, BN=128, BK=128, STAGES=3)),
              ("pers 128x256 s4", "linear_persistent", dict(BM=128, BN=256, BK=64, STAGES=4)),
              ("tma 128x256 s4", "linear_persistent_tma", dict(BM=128, BN=256, BK=64, STAGES=4)),
              ("tma 128x256 s3", "linear_persistent_tma", dict(BM=128, BN=256, BK=64, STAGES=3)),
              ("tma 256x128 s4", "linear_persistent_tma", dict(BM=256, BN=128, BK=64, STAGES=4)),
              ("tma3 128x192 s4", "linear_persistent_tma3", dict(BM=128, BC=64, BK=64, STAGES=4)),
              ("tma5 128x160 s4", "linear_persistent_tma5", dict(BM=128, BC=32, BK=64, STAGES=4)),
              ("tma5 64x160 s6", "linear_persistent_tma5", dict(BM=64, BC=32, BK=64, STAGES=6)),
              # half-size tiles: 4x the tile count of 128x256 (wave quantization), more bytes per FLOP
              ("tma 128x64 s6", "linear_persistent_tma", dict(BM=128, BN=64, BK=64, STAGES=6)),
              ("tc 128x128 s6", "linear", dict(BM=128, BN=128, BK=64, STAGES=6))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", help="comma list of MxKxN")
    ap.add_argument("--json")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES

    import torch
    import torch.nn.functional as F

    import importlib

    import tilex.stdlib as S
    from tilex.stdlib import _launch as L

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sweep_gemm import graph_ms

    lin = importlib.import_module("tilex.stdlib.linear")

    t0 = time.time()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    stream = torch.cuda.Stream()

    def ms_of(fn) -> float:
        return graph_ms(fn, stream)

    rows = []
    print(f"GPU: {torch.cuda.get_device_name()}, {sms} SMs", flush=True)
    head = ["shape", "cublas ms", "wrapper", "wrapper (register stores)"] + [c[0] for c in CANDIDATES]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for m, k, n in shapes:
        torch.manual_seed(0)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
        ref = F.linear(x.float(), w.float())
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        row = dict(shape=[m, k, n], cublas_ms=ms_of(lambda: F.linear(x, w)), results={})
        default = lin._TMA_STORE
        lin._TMA_STORE = True  # the wrapper opted in: TMA stores on its persistent path
        L.clear_fastpath()
        got = S.linear(x, w)
        row["wrapper_err"] = float((got.float() - ref).norm() / ref.norm())
        row["wrapper_ms"] = ms_of(lambda: S.linear(x, w))
        lin._TMA_STORE = False  # the wrapper as on main: register stores
        L.clear_fastpath()
        row["wrapper_reg_ms"] = ms_of(lambda: S.linear(x, w))
        lin._TMA_STORE = default
        L.clear_fastpath()
        for label, kernel, defines in CANDIDATES:
            d = dict(defines, PROGRAMS=sms) if kernel != "linear" else dict(defines)
            try:
                mod = L.load("linear", kernel=kernel, T="bf16", **d)
                y.fill_(float("nan"))
                L.run(mod, kernel, x, w, y)
                torch.cuda.synchronize()
                err = float((y.float() - ref).norm() / ref.norm())
                if not err <= 1e-2:
                    row["results"][label] = dict(error=f"rel. error {err:.3g}")
                    continue
                row["results"][label] = dict(ms=ms_of(lambda: L.run(mod, kernel, x, w, y)), err=err)
            except Exception as e:  # noqa: BLE001 - reported in the table
                row["results"][label] = dict(error=f"{type(e).__name__}: {str(e).splitlines()[0][:120]}")
        rows.append(row)
        cb = row["cublas_ms"]

        def cell(r):
            return f"{r['ms']:.4f} ({cb / r['ms']:.2f}x)" if "ms" in r else r["error"][:40]
        cells = [f"{m}x{k}x{n}", f"{cb:.4f}", cell(dict(ms=row["wrapper_ms"])), cell(dict(ms=row["wrapper_reg_ms"]))]
        cells += [cell(row["results"][c[0]]) for c in CANDIDATES]
        print("| " + " | ".join(cells) + " |", flush=True)
        del x, w, ref, y, got
    path = args.json or (os.path.join(os.environ["OUT"], "bench_tma_store.json") if os.environ.get("OUT") else None)
    if path:
        with open(path, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), seconds=time.time() - t0, rows=rows), f, indent=1)
    print(f"done in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

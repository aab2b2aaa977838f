"""tilex.stdlib.topk against torch.topk on CUDA (bf16 logits [B, 152064]): medians of CUDA-event timings after
warm-up (bench_attention.bench), in one process; tilex at first-pass chunks of 1024, 2048 and 4096 elements
(transpiler/stdlib/topk.py CHUNK). Run: python benchmarks/bench_topk.py [--full] (without --full: rows 1 and 64,
k = 50, chunks 1024 and 4096)"""
from __future__ import annotations

import importlib

import torch
from bench_attention import bench as median_ms  # median ms: CUDA events after warm-up (or triton's do_bench)

import tilex.stdlib as S
from tilex.stdlib import _launch as L

T = importlib.import_module("tilex.stdlib.topk")


def main(full: bool = False):
    default = T.CHUNK
    for b in ((1, 8, 64) if full else (1, 64)):
        for k in ((50, 1024) if full else (50,)):
            x = torch.randn((b, 152064), device="cuda").to(torch.bfloat16)
            ref_v, _ = torch.topk(x, k, dim=-1)
            cols = []
            for chunk in ((1024, 2048, 4096) if full else (1024, 4096)):
                T.CHUNK = chunk
                L.clear_fastpath()  # the memoized launches were planned at the previous chunk
                v, _ = S.topk(x, k)
                assert torch.equal(v, ref_v), (b, k, chunk)
                cols.append(f"chunk {chunk} {median_ms(lambda: S.topk(x, k)) * 1e3:.1f} us")
            T.CHUNK = default
            L.clear_fastpath()
            t_torch = median_ms(lambda: torch.topk(x, k, dim=-1))
            print(f"topk [{b}, 152064] k={k}: tilex {', '.join(cols)}; torch {t_torch * 1e3:.1f} us")


if __name__ == "__main__":
    import sys

    main(full="--full" in sys.argv)

"""tilex.stdlib.topk against torch.topk on CUDA (bf16 logits [B, 152064], k = 50): CUDA events after
warm-up, the median of 50 runs each, in one process. Run: python benchmarks/bench_topk.py"""
from __future__ import annotations

import statistics

import torch

import tilex.stdlib as S


def median_ms(fn, n=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    for b in (1, 8, 64):
        for k in (50, 1024):
            x = torch.randn((b, 152064), device="cuda").to(torch.bfloat16)
            t_tilex = median_ms(lambda: S.topk(x, k))
            t_torch = median_ms(lambda: torch.topk(x, k, dim=-1))
            print(f"topk [{b}, 152064] k={k}: tilex {t_tilex * 1e3:.1f} us, torch {t_torch * 1e3:.1f} us")


if __name__ == "__main__":
    main()

"""Host (Python) cost of one eager prefill: cProfile of Engine.prefill on a few layers.

    python benchmarks/prof_host.py --config qwen2.5-14b --layers 4 --tokens 512

Prints the wall time of an eager prefill against its GPU time (CUDA events) and the
functions where the host spends it. The GPU work is real (random weights on the GPU).
`--no-fastpath` runs the whole stdlib wrapper every call (no per-layout fast path, `tilex.stdlib._launch.fastpath`).
`--no-direct` launches through CuPy every call (bind + RawModule call, as before launch plans;
the same as TILEX_DIRECT_LAUNCH=0), for an A/B in one process.
"""
from __future__ import annotations

import argparse
import cProfile
import dataclasses
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from llm.backend import TorchCudaBackend  # noqa: E402
from llm.config import load_config  # noqa: E402
from llm.engine import Engine, Sequence  # noqa: E402
from llm.weights import random_weights  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="qwen2.5-14b")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--top", type=int, default=35)
    ap.add_argument("--no-direct", action="store_true", help="no launch plans / direct driver launch")
    ap.add_argument("--no-fastpath", action="store_true",
                    help="the whole stdlib wrapper every call (no per-layout fast path; TILEX_FASTPATH=0)")
    args = ap.parse_args()
    import torch

    if args.no_fastpath:
        from tilex.stdlib import _launch as L

        L.FASTPATH = False
    if args.no_direct:
        from tilex.runtime import driver

        driver.launcher = lambda: None

    cfg = dataclasses.replace(load_config(args.config), num_layers=args.layers)
    be = TorchCudaBackend()
    eng = Engine(cfg, random_weights(cfg, be, "bf16"), be, num_blocks=args.tokens // 16 + 4, block_size=16,
                 max_batch=1, max_seq_len=args.tokens + 1, use_graph=False)
    prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, args.tokens).tolist()

    def run():
        s = [Sequence(list(prompt))]
        eng.prefill(s)
        eng.cache.release(s[0].blocks)

    for _ in range(3):
        run()
    torch.cuda.synchronize()
    walls, gpus = [], []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t = time.perf_counter()
        a.record()
        run()
        b.record()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t) * 1e3)
        gpus.append(a.elapsed_time(b))
    from tilex.stdlib import _launch as L

    hits, recs = L.STATS["hit"], L.STATS["record"]
    run()
    torch.cuda.synchronize()
    print(f"{args.layers} layers, {args.tokens} tokens: wall {np.median(walls):.2f} ms, "
          f"GPU (events) {np.median(gpus):.2f} ms; one prefill: {L.STATS['hit'] - hits} fast-path calls, "
          f"{L.STATS['record'] - recs} recorded")
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    pr.disable()
    st = pstats.Stats(pr)
    st.sort_stats("tottime").print_stats(args.top)
    st.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Find a library call that writes memory it does not own: bench_eager.py's cases, each path in turn, with
sentinel tensors (copies checked after every path) allocated before and after the case tensors.

    python benchmarks/diag_eager_writes.py [--reps 20]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    import torch

    import tilex.stdlib as S
    from bench_eager import library_cases
    from tilex.runtime import driver
    from tilex.stdlib import _launch as L

    g = torch.Generator(device="cuda").manual_seed(1)
    before = [torch.randint(0, 1 << 20, (1 << 16,), device="cuda", dtype=torch.int32, generator=g) for _ in range(8)]
    cases = library_cases(torch, S)
    after = [torch.randint(0, 1 << 20, (1 << 16,), device="cuda", dtype=torch.int32, generator=g) for _ in range(8)]
    sentinels = [(t, t.clone()) for t in before + after]
    direct = driver.launcher()
    bad = 0
    for name, tilex_fn, torch_fn in cases:
        for path, fn in (("tilex", tilex_fn), ("tilex-full", tilex_fn), ("tilex-cupy", tilex_fn), ("torch", torch_fn)):
            driver.launcher = (lambda: None) if path == "tilex-cupy" else (lambda: direct)
            fast = L.FASTPATH
            L.FASTPATH = fast and path == "tilex"
            try:
                for _ in range(args.reps):
                    fn()
                torch.cuda.synchronize()
            finally:
                L.FASTPATH = fast
            hit = [i for i, (t, ref) in enumerate(sentinels) if not torch.equal(t, ref)]
            if hit:
                bad += 1
                print(f"WRITE OUTSIDE: {name} [{path}] changed sentinels {hit}", flush=True)
                for t, ref in sentinels:
                    t.copy_(ref)
            else:
                print(f"ok: {name} [{path}]", flush=True)
        driver.launcher = lambda: direct
    print(f"{bad} path(s) wrote outside their outputs; fast-path stats {dict(L.STATS)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

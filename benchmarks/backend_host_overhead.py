"""The tilex backend's own host time per forward, on a CPU: the tiny transformers Qwen2 (--layers) is
compiled with backend="tilex", then its Program runs with every kernel stubbed out (generated launches do
nothing, library calls return empty tensors of the right shapes), so what is timed is the executor's own
work: views, folded constants, the generated steps' launch preparation, the step loop. A diagnostic
(it patches the Program in this process), not a test.

    python benchmarks/backend_host_overhead.py [--layers 4] [--tokens 32] [--profile]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--profile", action="store_true", help="cProfile 20 forwards, top 15 by own time")
    args = ap.parse_args()
    import tilex.backend  # noqa: F401
    from tilex.backend import kernels
    from test_backend_hf import tiny

    model = tiny("qwen2", layers=args.layers)
    progs: list = []
    cm = torch.compile(model, backend="tilex", options={"programs": progs})
    ids = torch.randint(0, 96, (1, args.tokens))
    with torch.no_grad():
        cm(ids, use_cache=False)
    (prog,) = progs
    captured = {}
    cls_call = type(prog).__call__

    def spy(self, *a):
        captured["args"] = a
        return cls_call(self, *a)
    type(prog).__call__ = spy
    with torch.no_grad():
        cm(ids, use_cache=False)
    type(prog).__call__ = cls_call
    kernels.launch_generated = lambda *a, **k: None
    kernels.generated_launcher = lambda *a, **k: (lambda arrays, scalars: None)
    for s in prog.steps:
        s.plans.clear()  # launch plans made before the stub hold the real launcher
    for s in prog.steps:
        if s.kind == "library":
            v = s.match.root.meta["val"]
            extra = [torch.empty(tuple(e.meta["val"].shape), dtype=e.meta["val"].dtype) for e in s.match.extra]

            def call(*_, shape=tuple(v.shape), dt=v.dtype, extra=extra):
                out = torch.empty(shape, dtype=dt)
                return (out, *extra) if extra else out
            s.match.call, s.match.native, s.match.check = call, True, None
    a = captured["args"]
    with torch.no_grad():
        for _ in range(3):
            prog(*a)
        t0 = time.perf_counter()
        for _ in range(args.reps):
            prog(*a)
        dt = (time.perf_counter() - t0) / args.reps
    kinds: dict = {}
    for s in prog.steps:
        kinds[s.kind] = kinds.get(s.kind, 0) + 1
    print(f"{len(prog.steps)} steps {kinds}: {dt * 1e3:.3f} ms per forward, {dt * 1e6 / len(prog.steps):.1f} us a step")
    if args.profile:
        import cProfile
        import pstats

        pr = cProfile.Profile()
        pr.enable()
        with torch.no_grad():
            for _ in range(20):
                prog(*a)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()

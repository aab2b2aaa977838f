"""Host (Python) cost of tilex's launch path, measured on the CPU (no GPU, CuPy or torch needed).

    python benchmarks/host_overhead_cpu.py [--reps 2000] [--stand-in] [--cpu-time]

Times, per call (median of `--reps` calls, the best of 5 such rounds; microseconds):
- `bind_arguments` of an rms_norm-like spec with NumPy arrays (allow_numpy) and with stand-in
  torch tensors (objects whose type module is `torch`, as the runtime recognises them);
- the stdlib wrappers' calls (`linear`, `rms_norm`, `rope`, `silu_and_mul`) with stand-in torch
  tensors, `(fast path)`: a repeated call of a memoized layout (`_launch.fastpath`: key, output allocation,
  pointers patched into the plans, the launch), `(full)`: the whole wrapper (every check, output allocation,
  kernel choice, tuned-config lookup and the launch plan's replay: runtime/plan.py's signature, scalar checks,
  parameter buffer, stream); only the driver's cuLaunchKernelEx, the module load and TMA encoding are stubbed
  out. The stand-in `torch.empty` is NumPy's (a [512, 5120] one maps fresh pages: the small shapes show the
  wrapper's own cost better);
- with torch installed (`--stand-in`), torch's own CPU calls on tiny tensors and a `torch.empty`, for scale
  (what a torch call's dispatch costs on this CPU; not the same work as a GPU launch);
- `_launch.kernel_path` and `linear._tuned` (with the arch fixed to sm_90a, as on an H200, and a
  tuned-configuration store in a temporary TILEX_CACHE_DIR).

When torch is not installed, a minimal stand-in `torch` module (NumPy-backed tensors) is put in
`sys.modules` (tests/fake_torch.py); `--stand-in` uses it even when torch is installed. The numbers are only
indicative of the host cost on a GPU machine: real torch attribute access (`.device`, `.shape`) costs a
little more than the stand-ins', and cuLaunchKernelEx itself is not included (benchmarks/bench_eager.py
measures the real thing on a GPU).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np


# the stand-in torch of the tests (tests/fake_torch.py)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import fake_torch  # noqa: E402


def tensor(shape, dtype="bfloat16"):
    """A stand-in torch CUDA tensor with an address of its own (tests/fastpath_stand_ins.py)."""
    import torch

    from fastpath_stand_ins import AddrTensor

    t = torch.tensor(shape, dtype)
    return AddrTensor(t._a, t.dtype, t.device)


# ----------------------------------------------------------------- timing
def per_call_us(fn, reps: int, rounds: int = 5, cpu: bool = False) -> float:
    """The median time of one call over `reps` calls, the lowest of `rounds` such medians (a
    shared machine's noise only ever adds time). cpu: the thread's CPU time of `reps` calls over reps
    instead (time.thread_time: steadier on a loaded machine, where other processes preempt this one)."""
    for _ in range(min(reps, 200)):
        fn()
    if cpu:
        best = float("inf")
        for _ in range(rounds):
            t = time.thread_time()
            for _ in range(reps):
                fn()
            best = min(best, (time.thread_time() - t) / reps)
        return best * 1e6
    medians = []
    for _ in range(rounds):
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        medians.append(statistics.median(times))
    return min(medians) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--stand-in", action="store_true", help="use the stand-in torch even when torch is installed")
    ap.add_argument("--cpu-time", action="store_true",
                    help="the thread's CPU time per call instead of the wall time (steadier on a loaded machine)")
    args = ap.parse_args()
    try:
        if args.stand_in:
            raise ImportError
        import torch  # noqa: F401
        print("torch is installed: run this with --stand-in (or on a machine without torch)")
        return 1
    except ImportError:
        real_torch = None
        if args.stand_in:  # torch's own CPU calls, for scale (the stand-in replaces it for tilex below)
            try:
                import torch as real_torch
            except ImportError:
                pass
        sys.modules["torch"] = fake_torch.module()

    import tilex.runtime.nvrtc as nvrtc
    from tilex.runtime import Kernel
    from tilex.runtime.args import bind_arguments
    from tilex.spec import KernelSpec, ParamSpec
    from tilex.stdlib import _launch as L
    from tilex.stdlib import linear, rms_norm, rope, silu_and_mul
    from tilex.tune import TuneStore

    linear_mod = sys.modules["tilex.stdlib.linear"]  # tilex.stdlib.linear is also the function

    nvrtc.default_arch = lambda: "sm_90a"  # an H200's arch, without a GPU
    # a tuned-configuration store with one entry (for another kernel), as `tilex tune` leaves it
    cache_dir = tempfile.mkdtemp(prefix="tilex-host-overhead-")
    os.environ["TILEX_CACHE_DIR"] = cache_dir
    TuneStore(cache_dir).put("other|0|M=1|sm_90a", {"defines": {"BM": 64}})
    # everything but the driver: cuLaunchKernelEx, the module load (CuPy) and cuTensorMapEncodeTiled stubbed
    import types

    from tilex.runtime import driver, tma

    sys.modules["torch"]._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: 0)
    from fastpath_stand_ins import AddrTensor

    sys.modules["torch"].empty = lambda shape, dtype, device=None: AddrTensor(np.empty(shape, dtype.np), dtype, device)
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(Device=lambda i=None: types.SimpleNamespace(id=0),
                                      runtime=types.SimpleNamespace(getDevice=lambda: 0))
    sys.modules["cupy"] = cupy
    driver.launcher = lambda: (lambda *a: 0)
    tma._encoder = lambda: (lambda *a: 0)
    Kernel._function = lambda self, device: types.SimpleNamespace(ptr=1)

    spec = KernelSpec("rms_norm", (ParamSpec("x", "tensor", "bf16", ("M", "N")),
                                   ParamSpec("w", "tensor", "bf16", ("N",)),
                                   ParamSpec("y", "tensor", "bf16", ("M", "N"), is_out=True),
                                   ParamSpec("eps", "scalar", "f32", default=1e-6)),
                      ("M", "N"), (), ("cdiv(M, 2)",), 256, 0)
    m, n = 512, 5120
    xn, wn, yn = (np.zeros(s, ml_dtypes.bfloat16) for s in ((m, n), (n,), (m, n)))
    xt, wt, yt = tensor((m, n)), tensor((n,)), tensor((m, n))
    w_lin = tensor((n, n))
    q, k = tensor((m, 40, 128)), tensor((m, 8, 128))
    pos = tensor((m,), "int64")
    gate_up = tensor((m, 2 * 1024))

    kernel = Kernel(spec, "// stand-in: never compiled")
    rows = [
        ("Kernel call, replayed plan, torch tensors", lambda: kernel(xt, wt, yt, eps=1e-5)),
        ("bind_arguments, NumPy arrays", lambda: bind_arguments(spec, (xn, wn, yn), {"eps": 1e-5}, allow_numpy=True)),
        ("bind_arguments, torch tensors", lambda: bind_arguments(spec, (xt, wt, yt), {"eps": 1e-5})),
        ("_launch.kernel_path('linear')", lambda: L.kernel_path("linear")),
        ("linear._tuned (bf16, M=512 N=K=5120)",
         lambda: linear_mod._tuned("linear", "bf16", m, n, n, linear_mod._LARGE)),
        ("linear._tuned (f16, M=512 N=K=5120)",
         lambda: linear_mod._tuned("linear", "f16", m, n, n, linear_mod._LARGE)),
    ]
    x16 = tensor((16, n))
    xt4, wt4 = tensor((4, n)), tensor((n,))
    for fn, label, call in ((linear, "linear, torch, M=512 N=K=5120", lambda f: f(xt, w_lin)),
                            (linear, "linear, torch, M=16 N=K=5120", lambda f: f(x16, w_lin)),
                            (rms_norm, "rms_norm, torch, [512, 5120]", lambda f: f(xt, wt)),
                            (rms_norm, "rms_norm, torch, [4, 5120]", lambda f: f(xt4, wt4)),
                            (rope, "rope, torch, q [512, 40, 128]", lambda f: f(q, k, pos)),
                            (silu_and_mul, "silu_and_mul, torch, [512, 2048]", lambda f: f(gate_up))):
        rows.append((f"stdlib.{label} (fast path)", lambda fn=fn, call=call: call(fn)))
        rows.append((f"stdlib.{label} (full)", lambda fn=fn, call=call: call(fn.full)))
    # the parts of one fast-path hit (rms_norm [4, 5120]): the key, the memo lookup, the replay (allocation, launch)
    rms_norm(xt4, wt4)
    key, ptrs, _ = L._call_key((xt4, wt4), {})
    entry = rms_norm.memo[key]
    rows += [("  fast-path part: _call_key (rms_norm [4, 5120])", lambda: L._call_key((xt4, wt4), {})),
             ("  fast-path part: memo lookup", lambda: rms_norm.memo.get(key)),
             ("  fast-path part: replay (allocation + launch)", lambda: entry.replay((xt4, wt4), ptrs, driver.launcher())),
             ("  of which the stand-in allocation (torch.empty)",
              lambda: [entry.empty(a, dtype=b, device=c) for a, b, c in entry.allocs])]
    if real_torch is not None:
        F = real_torch.nn.functional
        a, b = real_torch.randn(1, 8), real_torch.randn(8, 8)
        rows += [("torch F.linear [1, 8] x [8, 8] f32 CPU (for scale)", lambda: F.linear(a, b)),
                 ("torch.empty [512, 5120] bf16 CPU (for scale)",
                  lambda: real_torch.empty((512, 5120), dtype=real_torch.bfloat16))]
    what = "CPU time of" if args.cpu_time else "median of"
    print(f"host cost per call on this CPU ({what} {args.reps} calls, best of 5 rounds; the driver stubbed out):")
    try:
        for name, fn in rows:
            fn()  # compile / warm the caches
            print(f"  {name:<56} {per_call_us(fn, args.reps, cpu=args.cpu_time):8.1f} us")
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

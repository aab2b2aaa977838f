"""The host's floor for an eager library call, and where a tilex call spends above it (GPU, one process).

    python benchmarks/host_floor.py [--reps 300] [--json F]
    python benchmarks/host_floor.py --alloc-ab [--rounds 5]   (only the C replay's torch.empty / empty_strided A/B)

Per call, in microseconds of host time (bench_eager.measure: the median wall time of one Python call, the launch
queue drained before each batch of 50 so no call waits for the GPU):
- the floor: a bare launch of an empty kernel with six parameters (three pointers, a float, two ints: an
  rms_norm's) through cuda-python's cuLaunchKernel (when installed), through ctypes (cuLaunchKernel's eleven
  arguments, and cuLaunchKernelEx's four with a prebuilt CUlaunchConfig), through `_cfast.Launcher` (the same
  call in C: what driver.launcher() returns with TILEX_CFAST_LAUNCHER=1), through CuPy's RawKernel; the C fast
  path's layout read of three tensors; torch.empty / torch.empty_strided / new_empty of a [1, 5120] and a
  [512, 5120] bf16 tensor; torch's `a + b` (an empty and an add) and F.rms_norm;
- the pieces a fast-path hit is made of: tensor attribute reads, torch's current-stream query, the current
  device query, a lock, time.monotonic;
- tilex library calls (rms_norm [1, 5120] and [512, 5120], embedding, linear_qkv, silu_and_mul): the whole call
  on the C fast path (`tilex.cfast`, when loaded: `call`) and on the Python fast path (`call, Python path`), the
  C call with its driver functions replaced by no-ops (`C call, driver stubbed`: the C side's own cost plus the
  allocations), the C side's layout read and lookup alone (`C lookup`), then the Python path's parts: the key
  (`_launch._call_key`), the memo lookup, the replay (allocation + launches) with the real driver, the replay
  with the driver stubbed (Python alone), and the outputs' allocation alone.
`above floor` = the Python path call's host time minus (its allocations + its launches through
driver.launcher(), ctypes unless TILEX_CFAST_LAUNCHER=1); `C above floor` the same for the C path's call.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_eager import measure  # noqa: E402

EMPTY_KERNEL = r'''extern "C" __global__ void tilex_floor_empty(const void* a, const void* b, void* c, float eps,
                                                 int m, int n) {}'''


def floor_rows(torch, reps: int, log) -> dict:
    import cupy

    from tilex.runtime import driver

    rows = {}

    def row(name, fn):
        r = measure(torch, fn, reps)["host"]
        rows[name] = r
        log(f"  {name:<64} {r:7.2f} us")

    dev = torch.device("cuda", 0)
    a, b, c = (torch.empty(5120, device=dev, dtype=torch.bfloat16) for _ in range(3))
    kern = cupy.RawKernel(EMPTY_KERNEL, "tilex_floor_empty")
    kern.compile()
    fn_ptr = int(kern.kernel.ptr)
    stream = torch.cuda.current_stream().cuda_stream
    slots = [ctypes.c_uint64(t.data_ptr()) for t in (a, b, c)] + [ctypes.c_float(1e-6), ctypes.c_int32(1),
                                                                  ctypes.c_int32(5120)]
    params = (ctypes.c_void_p * 6)(*(ctypes.addressof(s) for s in slots))
    lib = ctypes.CDLL(driver.LIBRARY)
    launch11 = lib.cuLaunchKernel
    launch11.restype = ctypes.c_int
    f, st = ctypes.c_void_p(fn_ptr), ctypes.c_void_p(stream)
    row("ctypes cuLaunchKernel (11 arguments), empty kernel", lambda: launch11(f, 1, 1, 1, 32, 1, 1, 0, st, params, None))
    launch_ex = lib.cuLaunchKernelEx
    launch_ex.restype = ctypes.c_int
    cfg = driver.LaunchConfig(1, 1, 1, 32, 1, 1, 0, stream, None, 0)
    cfg_ptr = ctypes.pointer(cfg)
    row("ctypes cuLaunchKernelEx (4 arguments, prebuilt config)", lambda: launch_ex(cfg_ptr, f, params, None))
    from tilex import cfast

    mod = cfast.module()
    if mod is not None:
        c_launch = mod.Launcher(driver.LIBRARY)
        row("_cfast.Launcher cuLaunchKernelEx (same arguments, from C)",
            lambda: c_launch(cfg_ptr, f, params, None))
        fc = mod.FastCall(lambda *a: None, {})  # its lookup: the C side's layout read of three tensors
        row("_cfast layout read + lookup, 3 tensors (FastCall.lookup)", lambda: fc.lookup(a, b, c))
    try:
        from cuda.bindings import driver as cb  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cuda as cb  # older cuda-python
        except ImportError:
            cb = None
    if cb is not None:
        try:
            cf, cs = cb.CUfunction(fn_ptr), cb.CUstream(stream)
            row("cuda-python cuLaunchKernel (ctypes parameter array)",
                lambda: cb.cuLaunchKernel(cf, 1, 1, 1, 32, 1, 1, 0, cs, ctypes.addressof(params), 0))
        except Exception as e:  # noqa: BLE001 - an API difference of this cuda-python: say so, keep going
            log(f"  (cuda-python launch failed: {type(e).__name__}: {e})")
    else:
        log("  (cuda-python is not installed: no cuda-python row)")
    cst = cupy.cuda.ExternalStream(stream)
    eps, m, n = cupy.float32(1e-6), cupy.int32(1), cupy.int32(5120)
    cfn = kern.kernel  # the cupy.cuda.function.Function a tilex Kernel's CuPy path calls

    def cupy_launch():
        cfn((1, 1, 1), (32, 1, 1), (a.data_ptr(), b.data_ptr(), c.data_ptr(), eps, m, n), stream=cst)
    row("CuPy Function call (RawKernel's), empty kernel", cupy_launch)
    bf = torch.bfloat16
    for shape in ((1, 5120), (512, 5120)):
        strides = (shape[1], 1)
        row(f"torch.empty({shape}, dtype=, device=)", lambda s=shape: torch.empty(s, dtype=bf, device=dev))
        row(f"torch.empty_strided({shape}, strides, dtype=, device=)",
            lambda s=shape, t=strides: torch.empty_strided(s, t, dtype=bf, device=dev))
        row(f"x.new_empty({shape})", lambda s=shape: a.new_empty(s))
    x1, x2 = torch.randn(512, 5120, device=dev).to(bf), torch.randn(512, 5120, device=dev).to(bf)
    w = torch.randn(5120, device=dev).to(bf)
    row("torch a + b [512, 5120] (an empty and an add)", lambda: x1 + x2)
    row("torch F.rms_norm [512, 5120]", lambda: torch.nn.functional.rms_norm(x1, (5120,), w, 1e-6))
    xs = torch.randn(1, 5120, device=dev).to(bf)
    row("torch F.rms_norm [1, 5120]", lambda: torch.nn.functional.rms_norm(xs, (5120,), w, 1e-6))
    raw = torch._C._cuda_getCurrentRawStream
    lock = threading.Lock()

    def with_lock():
        with lock:
            pass
    for name, fn in (("x.shape", lambda: x1.shape), ("x.stride()", lambda: x1.stride()), ("x.dtype", lambda: x1.dtype),
                     ("x.device", lambda: x1.device), ("x.data_ptr()", lambda: x1.data_ptr()),
                     ("x.get_device()", lambda: x1.get_device()),
                     ("torch._C._cuda_getCurrentRawStream(0)", lambda: raw(0)),
                     ("cupy.cuda.runtime.getDevice()", cupy.cuda.runtime.getDevice),
                     ("torch.cuda.current_device()", torch.cuda.current_device),
                     ("with lock: pass", with_lock), ("lock.acquire(); lock.release()",
                                                      lambda: (lock.acquire(), lock.release())),
                     ("time.monotonic()", time.monotonic), ("(lambda: None)()", lambda: None)):
        row(name, fn)
    return rows


def library_rows(torch, reps: int, log) -> dict:
    import tilex.stdlib as S
    from tilex import cfast
    from tilex.runtime import driver
    from tilex.stdlib import _launch as L

    mod = cfast.module()
    log(f"  C fast path: {cfast.why()}; driver: {'loaded' if cfast.ready() else 'NOT loaded'}")

    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape):
        return torch.randn(shape, generator=g, device=dev, dtype=torch.float32).to(bf)

    x1, x512, w = rnd(1, 5120), rnd(512, 5120), rnd(5120)
    ids, table = torch.randint(0, 152064, (512,), device=dev, dtype=torch.int32), rnd(152064, 5120)
    wqkv, bqkv = rnd(7168, 5120), rnd(7168)
    gu = rnd(512, 2 * 13824)
    cases = [("rms_norm [1, 5120]", S.rms_norm, (x1, w, 1e-6)), ("rms_norm [512, 5120]", S.rms_norm, (x512, w, 1e-6)),
             ("embedding 512 ids, V=152064 D=5120", S.embedding, (ids, table)),
             ("linear_qkv M=512 K=5120 q5120 kv1024", S.linear_qkv, (x512, wqkv, 5120, 1024, bqkv)),
             ("silu_and_mul [512, 2x13824]", S.silu_and_mul, (gu,))]
    launch = driver.launcher()
    rows = {}
    for name, fn, args in cases:
        fn(*args)
        fn(*args)
        got = L._call_key(args, {})
        entry = fn.memo.get(got[0]) if got is not None else None
        if not isinstance(entry, L._Entry):
            log(f"  {name}: not memoized ({entry!r}); skipped")
            continue
        key, ptrs, _ = got
        r = {}
        cfast_on = mod is not None and L.CFAST and getattr(fn, "lookup", None) is not None
        if cfast_on and fn.lookup(*args) is not None:
            c0 = mod.hits()
            r["call"] = measure(torch, lambda: fn(*args), reps)["host"]
            r["C hits"] = mod.hits() - c0
            r["C lookup (layout read, hash, dict)"] = measure(torch, lambda: fn.lookup(*args), reps)["host"]
            real = mod.get_driver()
            mod.set_driver(*mod.noop_driver())
            try:
                r["C call, driver stubbed"] = measure(torch, lambda: fn(*args), reps)["host"]
            finally:
                mod.set_driver(*real)
            L.CFAST = False
            try:
                r["call, Python path"] = measure(torch, lambda: fn(*args), reps)["host"]
            finally:
                L.CFAST = True
        else:
            log(f"  {name}: no C entry (C path {'on' if cfast_on else 'off'}): the Python path only")
            r["call"] = r["call, Python path"] = measure(torch, lambda: fn(*args), reps)["host"]
        r.update({
             "key": measure(torch, lambda: L._call_key(args, {}), reps)["host"],
             "lookup": measure(torch, lambda: fn.memo.get(key), reps)["host"],
             "replay": measure(torch, lambda: entry.replay(args, ptrs, launch), reps)["host"],
             "replay, driver stubbed": measure(torch, lambda: entry.replay(args, ptrs, lambda *a: 0), reps)["host"],
             "allocations": measure(torch, lambda: [entry.empty(s, dtype=d, device=v) for s, d, v in entry.allocs],
                                    reps)["host"]})
        plans = [p for p, *_ in entry.launches]
        r["launches (driver alone)"] = measure(
            torch, lambda: [launch(p._config_ptr, p._function, p.params, None) for p in plans], reps)["host"]
        r["outputs"], r["kernels"] = len(entry.allocs), len(plans)
        r["above floor"] = r["call, Python path"] - r["allocations"] - r["launches (driver alone)"]
        r["C above floor"] = r["call"] - r["allocations"] - r["launches (driver alone)"]
        rows[name] = r
        log(f"  {name}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))
    return rows


def alloc_ab(torch, reps: int, log, rounds: int = 5) -> dict:
    """The C replay's output allocation, torch.empty against torch.empty_strided (tilex.cfast.ALLOC), interleaved
    in `rounds` rounds in this process (the host's noise moves both alike): the raw calls, then library calls
    re-registered under each choice. Median over rounds of each round's median host time, us."""
    import tilex.stdlib as S
    from tilex import cfast
    from tilex.stdlib import _launch as L

    dev, bf = torch.device("cuda", 0), torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape):
        return torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(bf)
    x1, w, gu = rnd(1, 5120), rnd(5120), rnd(512, 2 * 13824)
    x512, wqkv, bqkv = rnd(512, 5120), rnd(7168, 5120), rnd(7168)
    ids, table = torch.randint(0, 152064, (512,), device="cuda", dtype=torch.int32), rnd(152064, 5120)
    raw = {"torch.empty((1, 5120), dtype=, device=)": lambda: torch.empty((1, 5120), dtype=bf, device=dev),
           "torch.empty_strided((1, 5120), (5120, 1), dtype=, device=)":
               lambda: torch.empty_strided((1, 5120), (5120, 1), dtype=bf, device=dev),
           "x.new_empty((1, 5120))": lambda: x1.new_empty((1, 5120))}
    calls = [("rms_norm [1, 5120]", S.rms_norm, (x1, w, 1e-6)), ("silu_and_mul [512, 2x13824]", S.silu_and_mul, (gu,)),
             ("embedding 512 ids", S.embedding, (ids, table)),
             ("linear_qkv M=512 (3 outputs)", S.linear_qkv, (x512, wqkv, 5120, 1024, bqkv))]
    got: dict = {}
    before = cfast.ALLOC
    try:
        for _ in range(rounds):
            for name, fn in raw.items():
                got.setdefault(name, []).append(measure(torch, fn, reps)["host"])
            for name, fn, args in calls:
                for mode in ("empty", "empty_strided"):
                    cfast.ALLOC = mode
                    L.clear_fastpath()
                    fn(*args)
                    fn(*args)
                    if getattr(fn, "lookup", None) is None or fn.lookup(*args) is None:
                        log(f"  {name}: no C entry; skipped")
                        continue
                    got.setdefault(f"{name} C path, {mode}", []).append(measure(torch, lambda: fn(*args), reps)["host"])
    finally:
        cfast.ALLOC = before
        L.clear_fastpath()
    out = {k: statistics.median(v) for k, v in got.items()}
    for k, v in out.items():
        log(f"  {k:<64} {v:7.2f} us  (rounds: {', '.join(f'{t:.2f}' for t in got[k])})")
    for name, _, _ in calls:
        a, b = out.get(f"{name} C path, empty"), out.get(f"{name} C path, empty_strided")
        if a and b:
            log(f"  {name}: empty_strided / empty = {b / a:.3f} ({b - a:+.2f} us)")
    return {"median": out, "rounds": got}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--json", default="")
    ap.add_argument("--alloc-ab", action="store_true", help="only the C replay's allocation A/B (alloc_ab)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import torch

    if args.alloc_ab:
        print(f"C replay allocation A/B on {torch.cuda.get_device_name()} (torch {torch.__version__}), median us:")
        res = alloc_ab(torch, args.reps, print, args.rounds)
        torch.cuda.synchronize()
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=1))
        return 0

    print(f"host floor on {torch.cuda.get_device_name()} (torch {torch.__version__}, Python {sys.version.split()[0]}); "
          f"median us per call over {args.reps} calls:")
    res = {"floor": floor_rows(torch, args.reps, print)}
    print("tilex library calls (fast path) and their parts, us:")
    res["library"] = library_rows(torch, args.reps, print)
    torch.cuda.synchronize()
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

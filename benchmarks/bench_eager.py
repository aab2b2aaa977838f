"""Eager (no CUDA graph) cost of tilex library calls and of the engine's prefill, against torch, in one process.

    python benchmarks/bench_eager.py [--reps 200] [--no-engine] [--layers 4] [--config qwen2.5-14b] [--json F]

Library calls (bf16; a compiled kernel called directly (the runtime alone: examples/rmsnorm.tile with
preallocated tensors); linear at M = 1, 16, 64, 512 with K = N = 4096; rms_norm, fused_add_rms_norm,
silu_and_mul, gated_mlp, linear_qkv, rope, embedding, kv_cache_write, attention_prefill and attention_decode at
Qwen2.5-14B shapes), each as
- `tilex`: the default path: the wrapper's per-layout fast path (`tilex.stdlib._launch.fastpath`: key, torch.empty
  of the outputs, pointers patched into the launch plans, cuLaunchKernelEx), replayed by the C extension
  (`tilex.cfast`) when it is loaded,
- `tilex-py`: the same fast path in Python (the C replay off, as with TILEX_NO_CFAST=1),
- `tilex-full`: the whole wrapper every call (checks, configuration choice, launch plans replayed through the
  driver's cuLaunchKernelEx: the path before the fast path),
- `tilex-cupy`: the same calls with the direct launch off (bind + CuPy's launch every call, as before plans),
- `torch`: torch's equivalent (F.linear, F.rms_norm, silu(x1) * x2, rotate-half rope, SDPA over a
  contiguous cache with enable_gqa for attention_decode's paged cache: the host cost of a torch call, not
  the same kernel),
with per call, in microseconds:
- `host`: the median wall time of one Python call without synchronising (what the caller's thread spends;
  the launch queue is drained before each batch so it never blocks),
- `cpu`: the thread's CPU time per call over the same calls (time.thread_time),
- `wall`: the time of `reps` back-to-back calls, synchronised at the end, per call (max of host and GPU).
The target (issue 17) is host <= 10 us per library call; `vs torch` is tilex's host time over torch's. The floor on the
H200 host (benchmarks/host_floor.py, 2026-12-02): one torch.empty 3.7-3.9 us + one bare driver launch 5.9-6.0 us, i.e.
~9.6-9.9 us for a one-output, one-kernel call before any key or check (torch's own F.rms_norm: 11.7-12.1 us).
Predicted on the H200 host (session 16 measured tilex-full 23-74 us, torch 9-18 us): `tilex` 9-14 us for the
one-kernel calls (about torch's own host time; two-kernel calls such as attention_decode or split-K linears
~3 us more per extra launch). Session 19 measured the Python fast path (now `tilex-py`) at 16.6-19.1 us for
one-output, one-kernel calls; predicted for the C replay (`tilex`, session 20): one torch.empty (3.7-3.9 us) +
one driver launch (~5-5.5 us without ctypes) + ~1-1.5 us of C (reading ~0.5 us per tensor argument), i.e.
~10-11 us, and ~3.8 us more per extra output, ~5.5 us more per extra launch.

Engine: `examples/llm` with a Qwen2.5-14B-shaped model cut to `--layers` layers (random weights; the ratio
eager / graph is what matters, and a few layers show it, since both scale per layer): prefill 1x512 eager
(tilex, tilex-full, tilex-cupy) against the same prefill replayed from a CUDA graph (median ms). Target: eager
within 1.5x of the graph. Predicted: `tilex` eager 1.05-1.3x the graph (the host issues a layer's ~8 calls in
~0.1 ms against ~0.6 ms of GPU work; session 16's 2.37x was the full wrappers' ~50-100 us per call).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))


def measure(torch, fn, reps: int, batch: int = 50) -> dict:
    """host / cpu / wall microseconds per call of fn (see the module docstring)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    host = []
    cpu0, n = time.thread_time(), 0
    for start in range(0, reps, batch):
        torch.cuda.synchronize()  # an empty queue: no call below waits for the GPU
        for _ in range(min(batch, reps - start)):
            t = time.perf_counter()
            fn()
            host.append(time.perf_counter() - t)
            n += 1
    cpu = (time.thread_time() - cpu0) / n
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / reps
    return {"host": statistics.median(host) * 1e6, "cpu": cpu * 1e6, "wall": wall * 1e6}


def library_cases(torch, S):
    F = torch.nn.functional
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape, dtype=bf):
        return torch.randn(shape, generator=g, device=dev, dtype=torch.float32).to(dtype)

    cases = []
    # the runtime alone: a compiled kernel called with preallocated torch tensors (no stdlib wrapper), against
    # a torch call of about the same GPU work
    import tilex

    root = Path(__file__).resolve().parent.parent
    kr = tilex.compile(str(root / "examples" / "rmsnorm.tile"), BLOCK=1024).kernel("rmsnorm")
    xr, wr = rnd(256, 1000), rnd(1000)
    yr = torch.empty_like(xr)
    cases.append(("Kernel call, examples/rmsnorm.tile [256, 1000]", lambda: kr(xr, wr, yr, eps=1e-6),
                  lambda: F.rms_norm(xr, (1000,), wr, 1e-6)))
    for m in (1, 16, 64, 512):
        x, w = rnd(m, 4096), rnd(4096, 4096)
        cases.append((f"linear M={m} K=N=4096", lambda x=x, w=w: S.linear(x, w), lambda x=x, w=w: F.linear(x, w)))
    for m in (1, 512):
        x, w = rnd(m, 5120), rnd(5120)
        cases.append((f"rms_norm [{m}, 5120]", lambda x=x, w=w: S.rms_norm(x, w, 1e-6),
                      lambda x=x, w=w: F.rms_norm(x, (5120,), w, 1e-6)))
    h, r, wn = rnd(512, 5120), rnd(512, 5120), rnd(5120)
    cases.append(("fused_add_rms_norm [512, 5120]", lambda: S.fused_add_rms_norm(h, r, wn, 1e-6),
                  lambda: (F.rms_norm(h + r, (5120,), wn, 1e-6), h + r)))
    xg, wg, wu = rnd(512, 5120), rnd(13824, 5120), rnd(13824, 5120)
    cases.append(("gated_mlp M=512 K=5120 N=13824", lambda: S.gated_mlp(xg, wg, wu),
                  lambda: F.silu(F.linear(xg, wg)) * F.linear(xg, wu)))
    wqkv, bqkv = rnd(7168, 5120), rnd(7168)
    cases.append(("linear_qkv M=512 K=5120 q5120 kv1024", lambda: S.linear_qkv(xg, wqkv, 5120, 1024, bqkv),
                  lambda: F.linear(xg, wqkv, bqkv).split([5120, 1024, 1024], -1)))
    # the lambdas bind their tensors as defaults: a name reused further down (the decode case's block `table`)
    # would otherwise be what a case reads when it runs (it did: F.embedding on a block table, out of bounds)
    ids, table = torch.randint(0, 152064, (512,), device=dev, dtype=torch.int32), rnd(152064, 5120)
    cases.append(("embedding 512 ids, V=152064 D=5120", lambda ids=ids, table=table: S.embedding(ids, table),
                  lambda ids=ids, table=table: F.embedding(ids, table)))
    kc1, vc1 = rnd(64, 16, 8, 128), rnd(64, 16, 8, 128)
    k1, v1 = rnd(512, 8, 128), rnd(512, 8, 128)
    slots = torch.arange(512, device=dev, dtype=torch.int32)
    cases.append(("kv_cache_write 512 tokens, 8x128", lambda: S.kv_cache_write(k1, v1, kc1, vc1, slots),
                  lambda: (kc1.view(-1, 8, 128).index_copy_(0, slots.long(), k1),
                           vc1.view(-1, 8, 128).index_copy_(0, slots.long(), v1))))
    qp, kp, vp = rnd(1, 512, 40, 128), rnd(1, 512, 8, 128), rnd(1, 512, 8, 128)
    op = torch.empty_like(qp)
    cases.append(("attention_prefill S=512 40/8 heads bshd", lambda: S.attention_prefill(
        qp, kp, vp, causal=True, scale=0.088, out=op, layout="bshd"),
        lambda: F.scaled_dot_product_attention(qp.transpose(1, 2), kp.transpose(1, 2), vp.transpose(1, 2),
                                               is_causal=True, enable_gqa=True)))
    gu = rnd(512, 2 * 13824)
    cases.append(("silu_and_mul [512, 2x13824]", lambda: S.silu_and_mul(gu),
                  lambda: F.silu(gu[:, :13824]) * gu[:, 13824:]))
    q, k = rnd(512, 40, 128), rnd(512, 8, 128)
    pos = torch.arange(512, device=dev)
    inv = 1.0 / (1e6 ** (torch.arange(0, 128, 2, device=dev, dtype=torch.float32) / 128))

    def rope_torch():
        ang = pos[:, None].float() * inv[None]
        cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]

        def rot(t):
            t1, t2 = t[..., :64], t[..., 64:]
            return (t.float() * cos + torch.cat([-t2, t1], -1).float() * sin).to(t.dtype)
        return rot(q), rot(k)
    cases.append(("rope q [512, 40, 128] k [512, 8, 128]", lambda: S.rope(q, k, pos, 1e6), rope_torch))
    b, ctx, bs = 16, 1024, 16
    qd = rnd(b, 40, 128)
    kc, vc = rnd(b * ctx // bs, bs, 8, 128), rnd(b * ctx // bs, bs, 8, 128)
    table = torch.arange(b * ctx // bs, device=dev, dtype=torch.int32).reshape(b, ctx // bs)
    lens = torch.full((b,), ctx, device=dev, dtype=torch.int32)
    kd, vd = rnd(b, 8, ctx, 128), rnd(b, 8, ctx, 128)
    cases.append((f"attention_decode B={b} ctx={ctx} 40/8 heads", lambda: S.attention_decode(qd, kc, vc, table, lens),
                  lambda: F.scaled_dot_product_attention(qd[:, :, None], kd, vd, enable_gqa=True)))
    return cases


def bench_library(torch, args, log) -> list:
    import tilex.stdlib as S
    from tilex.runtime import driver
    from tilex.stdlib import _launch as L

    from tilex import cfast

    direct = driver.launcher()
    own = driver.launcher  # restored as this function itself: the C replay runs only under it (_CFAST_LAUNCHER)
    cmod = cfast.module()
    log(f"direct launch: {'on' if direct is not None else 'OFF (libcuda not loadable or TILEX_DIRECT_LAUNCH=0)'}"
        f"; wrapper fast path: {'on' if L.FASTPATH else 'OFF (TILEX_FASTPATH=0)'}"
        f"; C replay: {'on' if L.CFAST and cmod is not None else 'OFF'} ({cfast.why()})")
    rows = []
    log(f"{'call':<42} {'path':<11} {'host us':>8} {'cpu us':>8} {'wall us':>8} {'vs torch':>8}")
    for name, tilex_fn, torch_fn in library_cases(torch, S):
        got = {}
        for path, fn in (("torch", torch_fn), ("tilex", tilex_fn), ("tilex-py", tilex_fn), ("tilex-full", tilex_fn),
                         ("tilex-cupy", tilex_fn)):
            driver.launcher = (lambda: None) if path == "tilex-cupy" else own
            fast, cf = L.FASTPATH, L.CFAST
            L.FASTPATH = fast and path in ("tilex", "tilex-py")
            L.CFAST = cf and path == "tilex"
            hits, chits = L.STATS["hit"], cmod.hits() if cmod is not None else 0
            try:
                r = measure(torch, fn, args.reps)
            finally:
                L.FASTPATH, L.CFAST = fast, cf
            r["fast_path_hits"] = L.STATS["hit"] - hits
            r["c_hits"] = (cmod.hits() if cmod is not None else 0) - chits
            r["vs_torch"] = r["host"] / got["torch"]["host"] if "torch" in got else 1.0
            got[path] = r
            rows.append({"call": name, "path": path, **r})
            log(f"{name:<42} {path:<11} {r['host']:8.1f} {r['cpu']:8.1f} {r['wall']:8.1f} {r['vs_torch']:8.2f}"
                + (" (no fast-path hits: not memoized)" if path == "tilex" and not r["fast_path_hits"]
                   and name.split()[0] not in ("Kernel",) else "")
                + (f" (C replayed {r['c_hits']} of {r['fast_path_hits']} hits)"
                   if path == "tilex" and cmod is not None and r["c_hits"] < r["fast_path_hits"] else ""))
        driver.launcher = own
    return rows


def bench_engine(torch, args, log) -> dict:
    from llm.backend import TorchCudaBackend
    from llm.config import load_config
    from llm.engine import Engine, Sequence
    from llm.weights import random_weights
    from tilex.runtime import driver

    own = driver.launcher
    cfg = dataclasses.replace(load_config(args.config), num_layers=args.layers)
    be = TorchCudaBackend()
    eng = Engine(cfg, random_weights(cfg, be, "bf16"), be, num_blocks=args.tokens // 16 + 4, block_size=16,
                 max_batch=1, max_seq_len=args.tokens + 1, use_graph=True)
    prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, args.tokens).tolist()

    def run():
        s = [Sequence(list(prompt))]
        eng.prefill(s)
        eng.cache.release(s[0].blocks)

    def median_ms():
        for _ in range(3):
            run()
        times = []
        for _ in range(args.engine_reps):
            torch.cuda.synchronize()
            t = time.perf_counter()
            run()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1e3)
        return float(np.median(times))

    from tilex.stdlib import _launch as L

    out = {}
    fast, cf = L.FASTPATH, L.CFAST
    for path in ("tilex", "tilex-py", "tilex-full", "tilex-cupy"):
        driver.launcher = (lambda: None) if path == "tilex-cupy" else own
        L.FASTPATH = fast and path in ("tilex", "tilex-py")
        L.CFAST = cf and path == "tilex"
        try:
            out[f"eager {path}"] = median_ms()
        finally:
            L.FASTPATH, L.CFAST = fast, cf
    driver.launcher = own
    eng.graph_prefill = True
    out["graph"] = median_ms()
    eng.graph_prefill = False
    label = f"{args.config} cut to {args.layers} layers, prefill 1x{args.tokens}"
    for k, v in out.items():
        log(f"engine {label}: {k} {v:.2f} ms ({v / out['graph']:.2f}x the graph)")
    return {"label": label, **out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--no-engine", action="store_true")
    ap.add_argument("--config", default="qwen2.5-14b")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--engine-reps", type=int, default=10)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    import torch

    res = {"library": bench_library(torch, args, print)}
    if not args.no_engine:
        res["engine"] = bench_engine(torch, args, print)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark tilex.stdlib attention against PyTorch SDPA on the GPU (H200 targets).

    python benchmarks/bench_attention.py [--json PATH] [--quick] [--no-sweep]

Prefill (bf16, causal and not): tilex.stdlib.attention_prefill vs SDPA with the flash
and the cuDNN backends (KV heads expanded for SDPA, outside the timing). TFLOP/s count
4 * B * Hq * S^2 * D, halved when causal. Target: B4 Hq40 Hkv8 S4096 D128 causal >= the
flash backend (322 TFLOP/s on H200).

Decode (bf16): tilex.stdlib.attention_decode over a paged cache (shuffled block table)
vs SDPA on contiguous, expanded KV ([B, Hq, ctx, D]). GB/s = bytes of K and V the
sequence holds (B * ctx * Hkv * D * 2 * 2), the same count for both (SDPA actually reads
Hq/Hkv times more). Target: Hq40 Hkv8 D128, batch 16, context 4096 >= 3 TB/s.

Timing: medians of triton.testing.do_bench (L2 flushed between runs) when triton is
importable, else of CUDA events. Decode is also timed as a replayed CUDA graph (what a
serving engine runs; it removes the Python launch overhead); both are reported.
Correctness is checked before timing (max |tilex - SDPA| / max |SDPA| <= 1e-2); the exit
status is 1 if any check fails. --no-sweep times only the default configuration;
--quick runs one prefill and one decode shape. JSON goes to PATH, or to
$OUT/bench_attention.json when $OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

import tilex.stdlib as S

try:
    from triton.testing import do_bench as _do_bench
except Exception:  # pragma: no cover - no triton
    _do_bench = None

DEV = "cuda"
TOL = 1e-2


def bench(fn, rep_ms: int = 200) -> float:
    """Median milliseconds of fn()."""
    if _do_bench is not None:
        return float(_do_bench(fn, warmup=25, rep=rep_ms, return_mode="median"))
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    n = max(5, min(1000, int(rep_ms / 1e3 / max(time.perf_counter() - t0, 1e-6))))
    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def bench_graph(fn, rep_ms: int = 200) -> float | None:
    """Median ms of a CUDA graph replay of fn() (None when capture fails)."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        return bench(g.replay, rep_ms)
    except Exception:
        print("  (graph capture failed: " + traceback.format_exc().strip().splitlines()[-1] + ")")
        return None


def rel(a, b) -> float:
    a, b = a.float(), b.float()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def sdpa_backend(name):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                        "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name])


def sdpa_call(backend, q, k, v, causal):
    def fn():
        with sdpa_backend(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


# ------------------------------------------------------------------------------ prefill

PREFILL_SHAPES = [
    # B, Hq, Hkv, S, D, causal
    (4, 40, 8, 4096, 128, True),     # the target
    (4, 40, 8, 4096, 128, False),
    (1, 32, 8, 8192, 128, True),
    (8, 32, 8, 2048, 64, True),
]
PREFILL_SWEEP = [dict(BM=bm, BN=bn, WARPS=w) for bm, bn, w in
                 [(128, 64, 8), (128, 128, 8), (64, 64, 4), (128, 32, 8), (64, 128, 4), (128, 64, 4), (128, 32, 4)]]


def run_prefill(shape, sweep, results, failures):
    b, hq, hkv, s, d, causal = shape
    g = hq // hkv
    name = f"prefill B{b} Hq{hq} Hkv{hkv} S{s} D{d} {'causal' if causal else 'full'}"
    print(name)
    torch.manual_seed(0)
    q = torch.randn(b, hq, s, d, device=DEV, dtype=torch.bfloat16)
    k = torch.randn(b, hkv, s, d, device=DEV, dtype=torch.bfloat16)
    v = torch.randn(b, hkv, s, d, device=DEV, dtype=torch.bfloat16)
    ke, ve = k.repeat_interleave(g, 1).contiguous(), v.repeat_interleave(g, 1).contiguous()
    flops = 4 * b * hq * s * s * d * (0.5 if causal else 1.0)
    tf = lambda ms: flops / ms / 1e9  # noqa: E731
    row = dict(kind="prefill", name=name, B=b, Hq=hq, Hkv=hkv, S=s, D=d, causal=causal, flops=flops)

    ref = None
    for backend in ("flash", "cudnn"):
        try:
            fn = sdpa_call(backend, q, ke, ve, causal)
            out = fn()
            ref = out if ref is None else ref
            ms = bench(fn)
            row[f"sdpa_{backend}_ms"], row[f"sdpa_{backend}_tflop_s"] = ms, tf(ms)
            print(f"  sdpa {backend:6} {ms:9.3f} ms {tf(ms):7.1f} TFLOP/s")
        except Exception as e:
            row[f"sdpa_{backend}_error"] = f"{type(e).__name__}: {e}"[:300]
            print(f"  sdpa {backend:6} unavailable: {type(e).__name__}: {str(e)[:120]}")
    if ref is None:
        ref = F.scaled_dot_product_attention(q.float(), ke.float(), ve.float(), is_causal=causal)

    out = torch.empty_like(q)
    configs = [None] + (sweep or [])
    best = None
    row["tilex"] = []
    for cfg in configs:
        label = "default" if cfg is None else ",".join(f"{k_}={v_}" for k_, v_ in cfg.items())
        try:
            out.fill_(float("nan"))
            fn = lambda cfg=cfg: S.attention_prefill(q, k, v, causal=causal, out=out, config=cfg)  # noqa: E731
            fn()
            err = rel(out, ref)
            ok = err <= TOL
            if not ok:
                failures.append(f"{name} [{label}]: rel err {err:.2e}")
            ms = bench(fn)
            row["tilex"].append(dict(config=label, ms=ms, tflop_s=tf(ms), rel_err=err, ok=ok))
            print(f"  tilex  {label:24} {ms:9.3f} ms {tf(ms):7.1f} TFLOP/s  rel err {err:.1e}{'' if ok else '  FAIL'}")
            if ok and (best is None or ms < best["ms"]):
                best = row["tilex"][-1]
        except Exception as e:
            row["tilex"].append(dict(config=label, error=f"{type(e).__name__}: {e}"[:300]))
            print(f"  tilex  {label:24} error: {type(e).__name__}: {str(e).splitlines()[0][:150]}")
    row["tilex_best"] = best
    if best and "sdpa_flash_ms" in row:
        row["tilex_vs_flash"] = row["sdpa_flash_ms"] / best["ms"]
        print(f"  best tilex {best['config']}: {best['tflop_s']:.1f} TFLOP/s = {row['tilex_vs_flash']:.2f}x flash")
    results.append(row)


# ------------------------------------------------------------------------------- decode

DECODE_SHAPES = [
    # B, Hq, Hkv, ctx, D, block size
    (16, 40, 8, 4096, 128, 16),      # the target
    (16, 40, 8, 4096, 128, 32),
    (1, 40, 8, 4096, 128, 16),
    (1, 40, 8, 32768, 128, 16),
    (64, 40, 8, 4096, 128, 16),
    (256, 40, 8, 4096, 128, 16),
    (16, 32, 8, 32768, 128, 16),
]
DECODE_SPLITS = [1, 2, 4, 8, 16, 32, 64]   # swept, besides the default (auto, WARPS=4) and WARPS=2/8


def run_decode(shape, sweep, results, failures):
    b, hq, hkv, ctx, d, bs = shape
    g = hq // hkv
    name = f"decode B{b} Hq{hq} Hkv{hkv} ctx{ctx} D{d} BS{bs}"
    print(name)
    torch.manual_seed(0)
    nblk = ctx // bs
    nb = b * nblk
    k_cache = torch.randn(nb, bs, hkv, d, device=DEV, dtype=torch.bfloat16)
    v_cache = torch.randn(nb, bs, hkv, d, device=DEV, dtype=torch.bfloat16)
    table = torch.randperm(nb, device=DEV).to(torch.int32).reshape(b, nblk)
    seq_lens = torch.full((b,), ctx, dtype=torch.int32, device=DEV)
    q = torch.randn(b, hq, d, device=DEV, dtype=torch.bfloat16)
    kv_bytes = b * ctx * hkv * d * 2 * 2
    gbs = lambda ms: kv_bytes / ms / 1e6  # noqa: E731
    row = dict(kind="decode", name=name, B=b, Hq=hq, Hkv=hkv, ctx=ctx, D=d, block_size=bs, kv_bytes=kv_bytes)

    # the same tokens contiguous and expanded for SDPA: [B, Hq, ctx, D]
    def contiguous_kv(cache):
        t = cache[table.long()]                        # [B, nblk, bs, Hkv, D]
        return t.reshape(b, ctx, hkv, d).permute(0, 2, 1, 3).repeat_interleave(g, 1).contiguous()
    ke, ve = contiguous_kv(k_cache), contiguous_kv(v_cache)
    q4 = q[:, :, None, :]
    ref = F.scaled_dot_product_attention(q4, ke, ve)[:, :, 0]
    for backend in ("flash", "cudnn", "efficient"):
        try:
            fn = sdpa_call(backend, q4, ke, ve, False)
            fn()
            ms = bench(fn)
            msg = bench_graph(fn)
            row[f"sdpa_{backend}_ms"], row[f"sdpa_{backend}_graph_ms"] = ms, msg
            print(f"  sdpa {backend:9} {ms:9.4f} ms {gbs(ms):8.0f} GB/s" +
                  (f"   graph {msg:9.4f} ms {gbs(msg):8.0f} GB/s" if msg else ""))
        except Exception as e:
            row[f"sdpa_{backend}_error"] = f"{type(e).__name__}: {e}"[:300]
            print(f"  sdpa {backend:9} unavailable: {type(e).__name__}: {str(e)[:120]}")
    del ke, ve  # free the expanded copies before timing tilex
    torch.cuda.empty_cache()

    out = torch.empty_like(q)
    row["tilex"] = []
    best = None
    runs = [(None, None)]
    if sweep:
        runs += [(None, dict(WARPS=w, BN=bn, STAGES=st)) for w in (4, 8) for bn in (32, 64, 128) for st in (1, 2)
                 if (w, bn) != (4, 64)] + [(None, dict(STAGES=1))] + [(x, None) for x in DECODE_SPLITS]
    for ns, cfg in runs:
        label = "auto" if ns is None else f"splits={ns}"
        if ns is None:
            label += f" ({S.attention.decode_plan(b, hq, hkv, d, nblk, bs, 'bf16', torch.cuda.get_device_properties(0).multi_processor_count).splits})"
        if cfg:
            label += " " + ",".join(f"{k_}={v_}" for k_, v_ in cfg.items())
        try:
            out.fill_(float("nan"))
            fn = lambda ns=ns, cfg=cfg: S.attention_decode(q, k_cache, v_cache, table, seq_lens,  # noqa: E731
                                                           num_splits=ns, out=out, config=cfg)
            fn()
            err = rel(out, ref)
            ok = err <= TOL
            if not ok:
                failures.append(f"{name} [{label}]: rel err {err:.2e}")
            ms = bench(fn)
            msg = bench_graph(fn)
            r = dict(config=label, ms=ms, gb_s=gbs(ms), graph_ms=msg, graph_gb_s=gbs(msg) if msg else None,
                     rel_err=err, ok=ok)
            row["tilex"].append(r)
            print(f"  tilex {label:18} {ms:9.4f} ms {gbs(ms):8.0f} GB/s" +
                  (f"   graph {msg:9.4f} ms {gbs(msg):8.0f} GB/s" if msg else "") +
                  f"  rel err {err:.1e}{'' if ok else '  FAIL'}")
            t = msg or ms
            if ok and (best is None or t < (best["graph_ms"] or best["ms"])):
                best = r
        except Exception as e:
            row["tilex"].append(dict(config=label, error=f"{type(e).__name__}: {e}"[:300]))
            print(f"  tilex {label:18} error: {type(e).__name__}: {str(e).splitlines()[0][:150]}")
    row["tilex_best"] = best
    results.append(row)


def copy_bandwidth() -> float:
    """GB/s of a 1 GiB device copy, read + write: the memory roofline of this card, this run."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    dst = torch.empty_like(src)
    return 2 * src.numel() / bench(lambda: dst.copy_(src)) / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true", help="one prefill and one decode shape (the targets)")
    ap.add_argument("--no-sweep", action="store_true", help="time only the default configuration")
    ap.add_argument("--only", choices=["prefill", "decode"])
    args = ap.parse_args()
    sweep = not args.no_sweep
    props = torch.cuda.get_device_properties(0)
    print(f"GPU: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}; "
          f"timing with {'triton do_bench' if _do_bench else 'CUDA events'}")
    copy_gb_s = copy_bandwidth()
    print(f"copy bandwidth {copy_gb_s:.0f} GB/s (read + write)")
    results, failures = [], []
    if args.only != "decode":
        for shape in PREFILL_SHAPES[:1] if args.quick else PREFILL_SHAPES:
            run_prefill(shape, PREFILL_SWEEP if sweep else None, results, failures)
            torch.cuda.empty_cache()
    if args.only != "prefill":
        for shape in DECODE_SHAPES[:1] if args.quick else DECODE_SHAPES:
            run_decode(shape, sweep, results, failures)
            torch.cuda.empty_cache()
    out = dict(gpu=props.name, sms=props.multi_processor_count, torch=torch.__version__,
               timing="triton.do_bench median" if _do_bench else "cuda events median",
               copy_gb_s=copy_gb_s, results=results, failures=failures)
    path = args.json or (os.path.join(os.environ["OUT"], "bench_attention.json") if os.environ.get("OUT") else None)
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {path}")
    if failures:
        print("CORRECTNESS FAILURES:\n  " + "\n  ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

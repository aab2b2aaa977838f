"""Prefill attention candidates against SDPA at issue 17's losing shapes (session 20), in one process.

    python3 benchmarks/bench_prefill20.py [--budget-s 135] [--only I,J,...] [--tilings] [--json PATH]

Shapes (B, Hq, Hkv, S, D, causal, bf16, head-major): the five of the brief (B128 S128 D128, B4 S4096 D128, B16 S1000
D128, B32 S512 D256, B1 S4096 D256) and B1 S16384 D128, B8 S2048 D64. Candidates at each shape: the library's
default (`tilex`), the flash kernel before 7bc35b8 (`div`: the output divided per element, benchmarks/
prefill20_div.tile, default tiling), flash tilings (`fBMxBN`), the whole-sequence kernel (S <= 128) and the stream
kernel (`stream64`: BM = 64, 4 warps; `stream128`: BM = 128, 8 warps). Every kernel is compiled first in worker
processes (NVRTC is CPU-bound), each candidate is checked against SDPA's output (max |diff| / max |ref| <= 2e-2;
a failing one is reported, not timed), then timed: medians of CUDA-graph replays (bench_attention.bench_graph),
SDPA flash, cuDNN and memory-efficient in the same process (KV heads expanded outside the timing). ratio = best
SDPA / candidate. --tilings: TILING_SHAPES (short S at D 128, D 64 at S 128-16384), the default against each
flash tiling (a tiling equal to the default is not timed twice). Causal FLOPs 2 B Hq S^2 D (half of 4 B Hq S^2 D). JSON to PATH or $OUT/bench_prefill20.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SHAPES = [  # B, Hq, Hkv, S, D (causal)
    (128, 32, 8, 128, 128), (16, 28, 4, 1000, 128), (32, 8, 4, 512, 256), (4, 40, 8, 4096, 128),
    (1, 8, 4, 4096, 256), (8, 14, 2, 2048, 64), (1, 32, 8, 16384, 128),
]
TILING_SHAPES = [  # --tilings: where the flash tiling rules (attention_plan.prefill_config) change, and around
    (64, 28, 4, 100, 128), (128, 32, 8, 128, 128), (64, 32, 8, 256, 128), (32, 32, 8, 512, 128),
    (128, 32, 8, 128, 64), (32, 32, 8, 512, 64), (4, 32, 8, 4096, 64), (1, 16, 2, 16384, 64),
]
TILINGS = [("f128x64", dict(KERNEL="flash", BM=128, BN=64, WARPS=8)), ("f64x32", dict(KERNEL="flash", BM=64, BN=32, WARPS=4)),
           ("f64x64", dict(KERNEL="flash", BM=64, BN=64, WARPS=4))]
DIV_TILE = str(HERE / "prefill20_div.tile")
DIV_CFG = dict(BM=128, BN=64, WARPS=8)


def candidates(s: int, d: int, tilings: bool = False) -> list:
    """(label, config) at a shape; config None is the library default, "div" the pre-7bc35b8 flash kernel."""
    if tilings:
        return [("tilex", None)] + TILINGS
    out = [("tilex", None), ("flash", dict(KERNEL="flash")), ("div", "div")]  # flash: dropped where it is the default
    out += [("f64x64", dict(KERNEL="flash", BM=64, BN=64, WARPS=4)), ("f64x32", dict(KERNEL="flash", BM=64, BN=32, WARPS=4))]
    if d == 256:
        out.append(("f128x32", dict(KERNEL="flash", BM=128, BN=32, WARPS=8)))
    if s <= 128 and d <= 128:
        out.append(("whole", dict(KERNEL="whole")))
    out.append(("stream64", dict(KERNEL="stream")))
    if d <= 128:
        out.append(("stream128", dict(KERNEL="stream", BM=128, WARPS=8)))
    return out


def jobs(sms: int, shapes: list, tilings: bool = False) -> list:
    """Every (kind, kernel name, defines) the timing phase loads, once each."""
    from tilex.stdlib.attention import PREFILL_KERNELS, prefill_launch_config

    out, seen = [], set()
    for b, hq, hkv, s, d in shapes:
        for _, cfg in candidates(s, d, tilings):
            if cfg == "div":
                job = ("div", "attention_prefill_div", dict(T="bf16", D=d, CAUSAL=True, **DIV_CFG))
            else:
                kind, c = prefill_launch_config(b, hq, hkv, s, d, True, "bhsd", "bf16", cfg, sms, "sm_90a")
                c = {k: v for k, v in c.items() if k != "KERNEL"}
                job = ("lib", PREFILL_KERNELS[kind], dict(T="bf16", D=d, CAUSAL=True, **c))
            key = (job[0], job[1], tuple(sorted(job[2].items())))
            if key not in seen:
                seen.add(key)
                out.append(job)
    return out


def _compile(job):
    """Worker: build one kernel's cubin for sm_90a into the on-disk cache."""
    src, name, defines = job
    try:
        if src == "div":
            import tilex

            tilex.compile(DIV_TILE, **defines).kernel(name).cubin_for("sm_90a")
        else:
            from tilex.stdlib import _launch as L

            L.load(name, **defines).kernel(name).cubin_for("sm_90a")
        return None
    except Exception as e:  # noqa: BLE001 - reported; the candidate then fails its check
        return f"{name} {defines}: {type(e).__name__}: {str(e).splitlines()[0][:160]}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-s", type=float, default=135.0, help="stop timing new candidates after this")
    ap.add_argument("--only", help="comma-separated shape indices")
    ap.add_argument("--jobs", type=int, default=14)
    ap.add_argument("--tilings", action="store_true", help="TILING_SHAPES: the default against the flash tilings")
    ap.add_argument("--json")
    args = ap.parse_args()
    t0 = time.time()
    import torch

    from bench_attention import bench_graph, sdpa_call

    import tilex
    import tilex.stdlib as S

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{torch.cuda.get_device_name()}  {sms} SMs  torch {torch.__version__}", flush=True)
    pool = TILING_SHAPES if args.tilings else SHAPES
    shapes = pool if not args.only else [pool[int(i)] for i in args.only.split(",")]
    todo = jobs(sms, shapes, args.tilings)
    with ProcessPoolExecutor(args.jobs) as ex:
        errs = [e for e in ex.map(_compile, todo) if e]
    print(f"compiled {len(todo)} kernels in {time.time() - t0:.0f} s", flush=True)
    for e in errs:
        print("  compile failed:", e, flush=True)
    div_mods = {}
    rows, ok = [], True
    for b, hq, hkv, s, d in shapes:
        g = torch.Generator(device="cuda").manual_seed(s + d)
        q = torch.randn(b, hq, s, d, generator=g, device="cuda").to(torch.bfloat16)
        k, v = (torch.randn(b, hkv, s, d, generator=g, device="cuda").to(torch.bfloat16) for _ in range(2))
        ke, ve = k.repeat_interleave(hq // hkv, dim=1), v.repeat_interleave(hq // hkv, dim=1)
        flops = 2.0 * b * hq * s * s * d
        mb = 2 * b * s * d * 2 * (hq + hkv) / 1e6
        row = dict(shape=[b, hq, hkv, s, d], flops=flops, mbytes=mb)
        ref = None
        for name in ("cudnn", "flash", "efficient"):
            try:
                fn = sdpa_call(name, q, ke, ve, True)
                out = fn()
                torch.cuda.synchronize()
                ref = out if ref is None else ref
                row[f"sdpa_{name}"] = bench_graph(fn)
            except Exception as e:  # noqa: BLE001 - a backend that does not take the shape
                row[f"sdpa_{name}"] = None
                print(f"  sdpa {name}: {type(e).__name__}: {str(e).splitlines()[0][:100]}", flush=True)
        best = min(x for x in (row.get(f"sdpa_{n}") for n in ("cudnn", "flash", "efficient")) if x)
        refmax = float(ref.float().abs().max())
        line = [f"B{b} Hq{hq} Hkv{hkv} S{s} D{d} causal ({mb:.0f} MB, {flops / 1e9:.1f} GFLOP): SDPA " + " ".join(
            f"{n} {row[f'sdpa_{n}']:.4f}" for n in ("cudnn", "flash", "efficient") if row.get(f"sdpa_{n}"))]
        from tilex.stdlib.attention import prefill_launch_config

        default = prefill_launch_config(b, hq, hkv, s, d, True, "bhsd", "bf16", None, sms, "sm_90a")
        row["default"] = [default[0], {k: v for k, v in default[1].items() if k != "KERNEL"}]
        line[0] += f"  | default {default[0]} {row['default'][1]}"
        for label, cfg in candidates(s, d, args.tilings):
            if label != "tilex" and cfg != "div" and default == prefill_launch_config(
                    b, hq, hkv, s, d, True, "bhsd", "bf16", cfg, sms, "sm_90a"):
                continue  # the default's own tiling: timed once, as `tilex`
            if time.time() - t0 > args.budget_s:
                line.append(f"{label} (budget)")
                continue
            try:
                o = torch.empty_like(q)
                if cfg == "div":
                    if d not in div_mods:
                        div_mods[d] = tilex.compile(DIV_TILE, T="bf16", D=d, CAUSAL=True, **DIV_CFG)
                    mod = div_mods[d]
                    views = [x.reshape(-1, s, 1, d) for x in (q, k, v, o)]
                    fn = lambda mod=mod, views=views: mod.attention_prefill_div(*views, scale=d ** -0.5)  # noqa: E731
                else:
                    fn = lambda cfg=cfg, o=o: S.attention_prefill(q, k, v, causal=True, out=o, config=cfg)  # noqa: E731
                fn()
                torch.cuda.synchronize()
                err = float((o.float() - ref.float()).abs().max()) / max(refmax, 1e-30)
                if not err <= 2e-2:
                    ok = False
                    line.append(f"{label} FAIL err {err:.1e}")
                    row[label] = dict(err=err)
                    continue
                ms = bench_graph(fn)
                row[label] = dict(ms=ms, err=err)
                line.append(f"{label} {ms:.4f} ({best / ms:.3f}x, {flops / ms / 1e9:.0f} TF/s)")
            except Exception as e:  # noqa: BLE001 - reported, the others still run
                ok = False
                row[label] = dict(error=f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
                line.append(f"{label} ERROR {row[label]['error']}")
        print("\n   ".join(line), flush=True)
        rows.append(row)
        del q, k, v, ke, ve, ref
        torch.cuda.empty_cache()
    path = args.json or (os.path.join(os.environ["OUT"], "bench_prefill20.json") if os.environ.get("OUT") else None)
    if path:
        Path(path).write_text(json.dumps(rows, indent=1))
    print(f"{'ALL CHECKS PASS' if ok else 'SOME CHECKS FAILED'} ({time.time() - t0:.0f} s)", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

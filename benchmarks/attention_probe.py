"""Prefill attention on the H200: correctness against torch first, then CUDA-graph timings in one process.

    python benchmarks/attention_probe.py [--quick] [--json PATH]

1. Correctness (PASS/FAIL with the max relative error vs float64 torch, bf16, tolerance 1e-2): the library's
   default kernel at S = 1, 77, 1000, D = 64/128/256, causal and not, GQA; the whole-sequence kernel
   (KERNEL="whole") at S = 1, 77, 100, 128, D = 64/128.
2. Timing (medians of CUDA-graph replays, bench_attention.bench_graph; triton do_bench when importable): at each
   shape the library's default (`tilex`: the model's choice), the flash kernel forced where the default may be
   another (S <= 64), the whole-sequence kernel where S <= 128, SDPA flash and cuDNN (KV heads expanded outside
   the timing); ratio = best SDPA / tilex. --small times the shapes where the default is the whole kernel.

Exit status 1 when a check fails. JSON to PATH or $OUT/attention_probe.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_attention import bench_graph, sdpa_call  # noqa: E402

import tilex.stdlib as S  # noqa: E402

CHECKS = [  # B, Hq, Hkv, S, D, causal, config
    (2, 8, 2, 1, 128, True, None), (2, 8, 2, 77, 128, True, None), (2, 8, 2, 77, 128, False, None),
    (1, 8, 4, 1000, 128, True, None), (1, 8, 4, 1000, 64, False, None), (1, 4, 2, 1000, 256, True, None),
    (2, 4, 4, 77, 256, False, None), (3, 32, 8, 128, 128, True, "whole"), (3, 32, 8, 128, 128, False, "whole"),
    (5, 28, 4, 100, 128, True, "whole"), (2, 8, 8, 77, 64, True, "whole"), (4, 16, 2, 1, 128, True, "whole"),
    (2, 8, 4, 61, 64, False, "whole"),
]
SMALL = [  # --small: where the library's default is the whole-sequence kernel (S <= 64)
    (32, 32, 8, 64, 128), (16, 28, 4, 64, 128), (64, 32, 8, 50, 64), (128, 8, 2, 33, 128), (8, 40, 8, 64, 128),
]
TIMES = [  # B, Hq, Hkv, S, D (causal)
    (128, 32, 8, 128, 128), (128, 32, 8, 128, 64), (64, 28, 4, 100, 128), (32, 32, 8, 64, 128),
    (4, 40, 8, 4096, 128), (16, 28, 4, 1000, 128), (32, 8, 4, 512, 256), (1, 8, 4, 4096, 256),
]


def f64_ref(q, k, v, causal):
    g = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.repeat_interleave(g, dim=1).double(), v.repeat_interleave(g, dim=1).double()
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def rel(out, ref):
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def inputs(b, hq, hkv, s, d, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(sh, generator=g, device="cuda").to(torch.bfloat16)
            for sh in ((b, hq, s, d), (b, hkv, s, d), (b, hkv, s, d))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="time only the first four shapes")
    ap.add_argument("--small", action="store_true", help="time the SMALL shapes only (default vs flash vs whole)")
    ap.add_argument("--no-checks", action="store_true", help="skip the correctness list (timed runs are still checked)")
    ap.add_argument("--json")
    args = ap.parse_args()
    ok, rows = True, []
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    for b, hq, hkv, s, d, causal, kind in () if args.no_checks else CHECKS:
        q, k, v = inputs(b, hq, hkv, s, d, seed=s * 7 + d)
        try:
            out = torch.full_like(q, float("nan"))
            S.attention_prefill(q, k, v, causal=causal, out=out, config=None if kind is None else dict(KERNEL=kind))
            torch.cuda.synchronize()
            err = rel(out, f64_ref(q, k, v, causal))
        except Exception:  # noqa: BLE001 - report and go on
            traceback.print_exc()
            err = float("inf")
        good = err <= 1e-2
        ok &= good
        print(f"{'PASS' if good else 'FAIL'} check {kind or 'default':7s} B{b} Hq{hq} Hkv{hkv} S{s} D{d} "
              f"{'causal' if causal else 'full'}: max rel err {err:.2e}")
        rows.append(dict(check=[b, hq, hkv, s, d, causal, kind], err=err, ok=good))
    for b, hq, hkv, s, d in SMALL if args.small else TIMES[:4] if args.quick else TIMES:
        q, k, v = inputs(b, hq, hkv, s, d)
        ke, ve = k.repeat_interleave(hq // hkv, dim=1), v.repeat_interleave(hq // hkv, dim=1)
        t = {}
        for name, cfg in (("tilex", None), ("flash", dict(KERNEL="flash")), ("whole", dict(KERNEL="whole"))):
            if (name == "whole" and s > 128) or (name == "flash" and s > 64):  # flash is the default past 64
                continue
            try:
                out = torch.empty_like(q)
                fn = lambda cfg=cfg, out=out: S.attention_prefill(q, k, v, causal=True, out=out, config=cfg)  # noqa: E731
                fn()
                torch.cuda.synchronize()
                g = hq // hkv  # checked on the first KV head's query heads of batch row 0
                err = rel(out[:1, :g], f64_ref(q[:1, :g], k[:1, :1], v[:1, :1], True))
                t[name + "_err"] = err
                ok &= err <= 1e-2
                print(f"{'PASS' if err <= 1e-2 else 'FAIL'} timed {name} B{b} Hq{hq} S{s} D{d}: max rel err {err:.2e}")
                t[name] = bench_graph(fn)
            except Exception:  # noqa: BLE001
                traceback.print_exc()
                t[name] = None
        for name in ("flash", "cudnn"):
            try:
                t["sdpa_" + name] = bench_graph(sdpa_call(name, q, ke, ve, True))
            except Exception:  # noqa: BLE001
                t["sdpa_" + name] = None
        best = min(x for x in (t.get("sdpa_flash"), t.get("sdpa_cudnn")) if x is not None)
        line = f"time B{b} Hq{hq} Hkv{hkv} S{s} D{d} causal: " + "  ".join(
            f"{n} {t[n]:.4f} ms" for n in ("tilex", "flash", "whole", "sdpa_flash", "sdpa_cudnn") if t.get(n) is not None)
        line += "  | best SDPA / tilex " + "  ".join(
            f"{n} {best / t[n]:.3f}" for n in ("tilex", "flash", "whole") if t.get(n))
        flash = t.get("flash") or t.get("tilex")
        if t.get("whole") and flash:
            line += f"  | whole / flash speedup {flash / t['whole']:.3f}"
        print(line, flush=True)
        rows.append(dict(time=[b, hq, hkv, s, d], **t))
    path = args.json or (os.path.join(os.environ["OUT"], "attention_probe.json") if os.environ.get("OUT") else None)
    if path:
        Path(path).write_text(json.dumps(rows, indent=1))
    print("ALL CHECKS PASS" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

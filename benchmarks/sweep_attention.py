"""Sweep attention_prefill / attention_decode configurations at the shapes where the defaults lose (H200).

    python benchmarks/sweep_attention.py [--only prefill|decode] [--jobs 12] [--json OUT.json]

The shape grid (bench_shapes.py, 2026-12-01) found prefill at 0.23x cuDNN for head size 256 (Gemma-2), 0.53x at
short sequences (B=128 S=128) and 0.79x at S=1000, and decode at 0.23x SDPA for D=256 and 0.60x at B=1 ctx=128.
This times every configuration in `PREFILL_SPACE` / `DECODE_SPACE` at those shapes and at the tuned ones (B4 Hq40
Hkv8 S4096 D128; decode B16 ctx4096), checks each against SDPA first, and prints a table per shape with the
default's rank. Kernels are compiled first in `--jobs` worker processes (NVRTC is CPU-bound; the cubins land in
the cache directory the timing process reads), so a cold cache costs seconds, not minutes.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor

PREFILL = [  # B, Hq, Hkv, S, D
    (128, 32, 8, 128, 128), (16, 28, 4, 1000, 128), (32, 8, 4, 512, 256), (1, 8, 4, 4096, 256),
    (4, 40, 8, 4096, 128), (8, 14, 2, 2048, 64),
]
PREFILL_SPACE = [dict(BM=bm, BN=bn, WARPS=w, STAGES=st) for bm, bn, w, st in
                 itertools.product((64, 128), (32, 64, 128), (4, 8), (1, 2, 3)) if not (bm == 128 and w == 4)]
DECODE = [  # B, Hq, Hkv, ctx, D
    (1, 8, 4, 4096, 256), (1, 32, 8, 128, 128), (4, 28, 4, 1000, 128), (16, 40, 8, 4096, 128), (1, 40, 8, 4096, 128),
]
DECODE_SPACE = [dict(BN=bn, WARPS=w, STAGES=st) for bn, w, st in itertools.product((16, 32, 64), (4, 8), (1, 2))]
DECODE_SPLITS = (None, 1, 4, 16)


def _compile(job):
    """Worker: build the cubin of one (kernel file, kernel, defines) for sm_90a into the cache."""
    name, kernel, defines = job
    from tilex.stdlib import _launch as L

    try:
        mod = L.load(name, kernel=kernel, **defines)
        mod.kernel(kernel).cubin_for("sm_90a")
        return None
    except Exception as e:  # noqa: BLE001 - reported, the config is skipped later
        return f"{name} {defines}: {type(e).__name__}: {str(e).splitlines()[0][:160]}"


def precompile(jobs, workers: int) -> None:
    with ProcessPoolExecutor(workers) as ex:
        errs = [e for e in ex.map(_compile, jobs) if e]
    print(f"compiled {len(jobs)} kernels ({len(errs)} refused: shared memory or registers)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("prefill", "decode"))
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--json")
    args = ap.parse_args()
    jobs = []
    if args.only != "decode":
        for (_, _, _, _, d), cfg in itertools.product(PREFILL, PREFILL_SPACE):
            jobs.append(("attention_prefill", "attention_prefill", dict(T="bf16", D=d, CAUSAL=True, **cfg)))
    if args.only != "prefill":
        for (_, hq, hkv, _, d), cfg in itertools.product(DECODE, DECODE_SPACE):
            g = max(16, 1 << max(0, hq // hkv - 1).bit_length())
            for direct in (True, False):
                jobs.append(("attention_decode", "attention_decode_split",
                             dict(T="bf16", BS=16, D=d, GP=g, DIRECT=direct, **cfg)))
    seen, uniq = set(), []
    for j in jobs:
        key = (j[0], j[1], tuple(sorted(j[2].items())))
        if key not in seen:
            seen.add(key)
            uniq.append(j)
    precompile(uniq, args.jobs)

    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench_cudagraph

    import tilex.stdlib as S

    def ms_of(fn):
        fn()
        with torch.cuda.stream(torch.cuda.Stream()):
            fn()
            return float(do_bench_cudagraph(fn, rep=40, return_mode="median"))

    def rel(a, b):
        return float((a.double() - b.double()).abs().max() / b.double().abs().max())

    rows = []
    if args.only != "decode":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        for b, hq, hkv, s, d in PREFILL:
            torch.manual_seed(0)
            q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True)
            base = {}
            for nm, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                def f(be=be):
                    with sdpa_kernel(be):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                try:
                    base[nm] = ms_of(f)
                except Exception:  # noqa: BLE001
                    pass
            res = []
            for cfg in [None] + PREFILL_SPACE:
                fn = lambda cfg=cfg: S.attention_prefill(q, k, v, causal=True, config=cfg)  # noqa: E731
                try:
                    err = rel(fn(), ref)
                    if err > 2e-2:
                        res.append((cfg, None, f"rel err {err:.2e}"))
                        continue
                    res.append((cfg, ms_of(fn), None))
                except Exception as e:  # noqa: BLE001
                    res.append((cfg, None, f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"))
            ok = sorted((r for r in res if r[1]), key=lambda r: r[1])
            best_base = min(base.values()) if base else float("nan")
            dflt = next(r for r in res if r[0] is None)
            print(f"prefill B{b} Hq{hq} Hkv{hkv} S{s} D{d}: sdpa {base}  default {dflt[1]}  "
                  f"({dflt[2] or ''})", flush=True)
            for cfg, ms, _ in ok[:6]:
                print(f"   {ms:.4f} ms  x{best_base / ms:.3f}  {cfg}", flush=True)
            rows.append(dict(kind="prefill", shape=[b, hq, hkv, s, d], sdpa=base,
                             results=[dict(config=c, ms=m, error=e) for c, m, e in res]))
    if args.only != "prefill":
        for b, hq, hkv, ctx, d in DECODE:
            torch.manual_seed(0)
            bs, nblk = 16, -(-ctx // 16)
            q = torch.randn(b, hq, d, device="cuda", dtype=torch.bfloat16)
            kc, vc = (torch.randn(b * nblk, bs, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            table = torch.randperm(b * nblk, device="cuda").to(torch.int32).view(b, nblk)
            lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
            kk = kc[table.long()].reshape(b, nblk * bs, hkv, d)[:, :ctx].transpose(1, 2).contiguous()
            vv = vc[table.long()].reshape(b, nblk * bs, hkv, d)[:, :ctx].transpose(1, 2).contiguous()
            ref = F.scaled_dot_product_attention(q[:, :, None].float(), kk.float(), vv.float(), enable_gqa=True)[:, :, 0]
            base = ms_of(lambda: F.scaled_dot_product_attention(q[:, :, None], kk, vv, enable_gqa=True))
            res = []
            for cfg, ns in [(None, None)] + list(itertools.product(DECODE_SPACE, DECODE_SPLITS)):
                fn = lambda cfg=cfg, ns=ns: S.attention_decode(q, kc, vc, table, lens, num_splits=ns, config=cfg)  # noqa: E731,E501
                try:
                    err = rel(fn(), ref)
                    if err > 2e-2:
                        res.append((cfg, ns, None, f"rel err {err:.2e}"))
                        continue
                    res.append((cfg, ns, ms_of(fn), None))
                except Exception as e:  # noqa: BLE001
                    res.append((cfg, ns, None, f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"))
            ok = sorted((r for r in res if r[2]), key=lambda r: r[2])
            dflt = res[0]
            print(f"decode B{b} Hq{hq} Hkv{hkv} ctx{ctx} D{d}: sdpa {base:.4f}  default {dflt[2]} ({dflt[3] or ''})",
                  flush=True)
            for cfg, ns, ms, _ in ok[:6]:
                print(f"   {ms:.4f} ms  x{base / ms:.3f}  {cfg} splits={ns}", flush=True)
            rows.append(dict(kind="decode", shape=[b, hq, hkv, ctx, d], sdpa=base,
                             results=[dict(config=c, splits=n, ms=m, error=e) for c, n, m, e in res]))
    path = args.json or (os.path.join(os.environ["OUT"], "sweep_attention.json") if os.environ.get("OUT") else None)
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

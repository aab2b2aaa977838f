"""Time tilex.stdlib's memory-bound kernels against PyTorch on the GPU (same process).

    python benchmarks/bench_stdlib.py [--json OUT.json] [--no-compile] [--only NAME,...] [--rows]

For each kernel at a large LLM-like size: tilex, torch eager and torch.compile
(mode="max-autotune-no-cudagraphs" is not used: the default mode), each timed as the
median of CUDA-graph replays (`triton.testing.do_bench_cudagraph`: GPU time, no Python
launch overhead; falls back to `do_bench` when a function cannot be captured), plus the
tilex wrapper called eagerly (`do_bench`, so launch overhead shows if the GPU outruns it).
Columns: ms, the ratios torch/tilex and compile/tilex (>1: tilex faster), GB/s from the
minimum bytes the kernel must move (inputs read once, outputs written once), and that
as a fraction of the copy bandwidth measured in this run (a 1 GiB device-to-device
copy, bytes read + written). Each row first checks tilex against torch (rel err).
The JSON goes to --json, else to $OUT/bench_stdlib.json when $OUT is set.

--rows runs the row-kernel grid instead (issue 17: transpiler/stdlib/rows.py's choices at public
decoder sizes): rms_norm, fused_add_rms_norm and layer_norm at N = 5120, 3584, 896, 8192 with
M = 4096 and 32768 (and, at 5120, the power-of-two configuration the library used before, marked
"pow2", for an A/B in one run), silu_and_mul at d = 4864 and 18944, softmax (bf16) and argmax (f32)
over 1 and 16 rows of 152064, sample(top_p=1) over 1 row. Each line names the configuration
rows.explain gives. Predicted (H200, bf16, 2026-12-01, before any run): rms_norm 5120 >= 0.85 of
copy (was 0.49-0.57) and >= 1.0x torch.compile, "pow2" lines as before; fused_add 5120 >= 0.9 of
copy (was 0.58-0.64); 3584/896/8192 within 3% of before; softmax 1x152064 ~8-10 us and 16x152064
~10-14 us (was ~40 us; torch.compile 15 us).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import tilex.stdlib as S

try:
    from triton.testing import do_bench_cudagraph
except ImportError:  # pragma: no cover - old triton
    do_bench_cudagraph = None

DEV = "cuda"
BF16 = torch.bfloat16


def bench(fn):
    """Median ms of fn: CUDA-graph replays when capturable, else do_bench."""
    fn()
    torch.cuda.synchronize()
    if do_bench_cudagraph is not None:
        try:
            with torch.cuda.stream(torch.cuda.Stream()):  # graphs are captured off the default stream
                fn()
                return float(do_bench_cudagraph(fn, rep=100, return_mode="median")), "graph"
        except Exception:  # noqa: BLE001 - not capturable: time it eagerly
            torch.cuda.synchronize()
    return float(do_bench(fn, warmup=25, rep=200, return_mode="median")), "eager"


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


# ----------------------------------------------------------------------------- cases
# Each case: name, shape text, bytes, tilex fn, torch fn, compile target (or None),
# and a check (tilex output, torch output) -> error measure.

def cases(args):
    g = torch.Generator(device=DEV).manual_seed(0)

    def randn(*shape, dtype=BF16, scale=1.0):
        return (torch.randn(shape, generator=g, device=DEV) * scale).to(dtype)

    out = []
    m, n = 16384, 4096
    x, r, w, b = randn(m, n), randn(m, n), randn(n), randn(n)
    eps = 1e-6

    def t_rms(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    out.append(("rms_norm bf16", f"{m}x{n}", 2 * 2 * m * n + 2 * n,
                lambda: S.rms_norm(x, w, eps), lambda: t_rms(x, w), (t_rms, (x, w)), rel))

    m2, n2 = 4096, 8192
    x2, w2 = randn(m2, n2), randn(n2)
    out.append(("rms_norm bf16", f"{m2}x{n2}", 2 * 2 * m2 * n2 + 2 * n2,
                lambda: S.rms_norm(x2, w2, eps), lambda: t_rms(x2, w2), (t_rms, (x2, w2)), rel))

    def t_farn(x, r, w):
        h = x + r
        return F.rms_norm(h, (h.shape[-1],), w, eps), h
    out.append(("fused_add_rms_norm bf16", f"{m}x{n}", 4 * 2 * m * n + 2 * n,
                lambda: S.fused_add_rms_norm(x, r, w, eps), lambda: t_farn(x, r, w), (t_farn, (x, r, w)),
                lambda a, b: max(rel(a[0], b[0]), rel(a[1], b[1]))))

    def t_ln(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
    out.append(("layer_norm bf16", f"{m}x{n}", 2 * 2 * m * n + 4 * n,
                lambda: S.layer_norm(x, w, b, 1e-5), lambda: t_ln(x, w, b), (t_ln, (x, w, b)), rel))

    tok, hq, hk, d = 16384, 32, 8, 128
    q, k = randn(tok, hq, d), randn(tok, hk, d)
    pos = torch.randint(0, 8192, (tok,), device=DEV)
    theta = 500000.0

    def t_rope(q, k, pos):
        inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=DEV, dtype=torch.float32) / d))
        ang = pos.float()[:, None] * inv[None, :]
        c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]

        def rot(x):
            a, bb = x[..., : d // 2].float(), x[..., d // 2:].float()
            return torch.cat([a * c - bb * s, bb * c + a * s], -1).to(x.dtype)
        return rot(q), rot(k)
    out.append(("rope bf16", f"T={tok} Hq={hq} Hk={hk} D={d}", 2 * 2 * tok * (hq + hk) * d + 8 * tok,
                lambda: S.rope(q, k, pos, theta), lambda: t_rope(q, k, pos), (t_rope, (q, k, pos)),
                lambda a, b: max(rel(a[0], b[0]), rel(a[1], b[1]))))
    out.append(("rope bf16 inplace", f"T={tok} Hq={hq} Hk={hk} D={d}", 2 * 2 * tok * (hq + hk) * d + 8 * tok,
                lambda: S.rope(q, k, pos, theta, inplace=True), lambda: t_rope(q, k, pos), None, None))

    mm, dd = 4096, 14336
    gu = randn(mm, 2 * dd)

    def t_silu(x):
        h = x.shape[-1] // 2
        return F.silu(x[..., :h]) * x[..., h:]

    def t_gelu(x):
        h = x.shape[-1] // 2
        return F.gelu(x[..., :h], approximate="tanh") * x[..., h:]
    out.append(("silu_and_mul bf16", f"{mm}x2x{dd}", 3 * 2 * mm * dd,
                lambda: S.silu_and_mul(gu), lambda: t_silu(gu), (t_silu, (gu,)), rel))
    out.append(("gelu_and_mul(tanh) bf16", f"{mm}x2x{dd}", 3 * 2 * mm * dd,
                lambda: S.gelu_and_mul(gu, "tanh"), lambda: t_gelu(gu), (t_gelu, (gu,)), rel))

    ms, ns = 4096, 32000
    xs = randn(ms, ns, scale=3.0)

    def t_softmax(x):
        return torch.softmax(x, -1)
    out.append(("softmax bf16", f"{ms}x{ns}", 2 * 2 * ms * ns,
                lambda: S.softmax(xs), lambda: t_softmax(xs), (t_softmax, (xs,)), rel))

    vocab, hid, ntok = 128256, 4096, 16384
    table = randn(vocab, hid)
    ids = torch.randint(0, vocab, (ntok,), device=DEV)

    def t_emb(ids, table):
        return F.embedding(ids, table)
    out.append(("embedding bf16", f"T={ntok} V={vocab} D={hid}", 2 * 2 * ntok * hid + 8 * ntok,
                lambda: S.embedding(ids, table), lambda: t_emb(ids, table), (t_emb, (ids, table)), rel))

    nb, bs = 4096, 16
    kc, vc = randn(nb, bs, hk, d), randn(nb, bs, hk, d)
    slots = torch.randperm(nb * bs, device=DEV)[:tok]
    kk, vv = randn(tok, hk, d), randn(tok, hk, d)

    def t_kv(k, v, kc, vc, slots):
        kc.view(-1, hk, d)[slots] = k
        vc.view(-1, hk, d)[slots] = v
        return kc, vc
    out.append(("kv_cache_write bf16", f"T={tok} Hkv={hk} D={d} blocks={nb}x{bs}", 4 * 2 * tok * hk * d + 8 * tok,
                lambda: S.kv_cache_write(kk, vv, kc, vc, slots), lambda: t_kv(kk, vv, kc, vc, slots),
                (t_kv, (kk, vv, kc, vc, slots)), None))

    for bsz, voc in ((64, 128256), (1, 151936)):
        lg = randn(bsz, voc, dtype=torch.float32, scale=3.0)

        def t_argmax(x):
            return torch.argmax(x, -1)
        out.append(("argmax f32", f"{bsz}x{voc}", 4 * bsz * voc,
                    (lambda lg=lg: S.argmax(lg)), (lambda lg=lg: t_argmax(lg)), (t_argmax, (lg,)),
                    lambda a, b: float((a != b).float().mean())))

    lg = randn(64, 128256, dtype=torch.float32, scale=3.0)

    def t_sample(x):
        probs = torch.softmax(x / 0.8, -1)
        sp, si = probs.sort(-1, descending=True)
        cum = sp.cumsum(-1)
        sp = sp.masked_fill(cum - sp > 0.9, 0.0)
        qx = torch.empty_like(sp).exponential_()
        return si.gather(-1, (sp / qx).argmax(-1, keepdim=True)).squeeze(-1)
    out.append(("sample(T=0.8, top_p=0.9) f32", "64x128256", 4 * 64 * 128256,
                lambda: S.sample(lg, 0.8, 0.9, 1), lambda: t_sample(lg), (t_sample, (lg,)), None))
    if args.only:
        keep = set(args.only.split(","))
        out = [c for c in out if c[0].split()[0] in keep]
    return out


def row_cases(args):
    """The --rows grid (see the module docstring)."""
    from tilex.stdlib import _launch as L
    from tilex.stdlib import rows as model

    g = torch.Generator(device=DEV).manual_seed(0)

    def randn(*shape, dtype=BF16, scale=1.0):
        return (torch.randn(shape, generator=g, device=DEV) * scale).to(dtype)

    eps = 1e-6

    def t_rms(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, eps)

    def t_farn(x, r, w):
        h = x + r
        return F.rms_norm(h, (h.shape[-1],), w, eps), h

    def t_ln(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)

    def pow2_rms(x, w):  # the configuration before rows.py: BLOCK = next power of two
        m, n = x.shape
        y = torch.empty_like(x)
        L.run(L.load("rms_norm", kernel="rms_norm", T="bf16", **L.row_config(n, m, 132)), "rms_norm", x, w, y, eps=eps)
        return y

    def pow2_farn(x, r, w):
        m, n = x.shape
        cfg = dict(L.row_config(n, m, 132), STAGES=1, PROGRAMS=1 << 30, MIN_BLOCKS=0)
        y, h = torch.empty_like(x), torch.empty_like(x)
        L.run(L.load("fused_add_rms_norm", kernel="fused_add_rms_norm", T="bf16", **cfg), "fused_add_rms_norm",
              x, r, w, y, h, eps=eps)
        return y, h

    both = lambda a, b: max(rel(a[0], b[0]), rel(a[1], b[1]))  # noqa: E731
    out = []
    for n in (5120, 3584, 896, 8192):
        for m in (4096, 32768):
            x, r, w, b = randn(m, n), randn(m, n), randn(n), randn(n)
            how = lambda k, n=n, m=m: model.explain(k, n, m).split(":", 1)[1].strip()  # noqa: E731
            out.append(("rms_norm bf16", f"{m}x{n} [{how('rms_norm')}]", 4 * m * n + 2 * n,
                        lambda x=x, w=w: S.rms_norm(x, w, eps), lambda x=x, w=w: t_rms(x, w), (t_rms, (x, w)), rel))
            out.append(("fused_add_rms_norm bf16", f"{m}x{n} [{how('fused_add_rms_norm')}]", 8 * m * n + 2 * n,
                        lambda x=x, r=r, w=w: S.fused_add_rms_norm(x, r, w, eps), lambda x=x, r=r, w=w: t_farn(x, r, w),
                        (t_farn, (x, r, w)), both))
            out.append(("layer_norm bf16", f"{m}x{n} [{how('layer_norm')}]", 4 * m * n + 4 * n,
                        lambda x=x, w=w, b=b: S.layer_norm(x, w, b, 1e-5), lambda x=x, w=w, b=b: t_ln(x, w, b),
                        (t_ln, (x, w, b)), rel))
            if n == 5120:
                out.append(("rms_norm bf16 pow2", f"{m}x{n} [BLOCK 8192, before rows.py]", 4 * m * n + 2 * n,
                            lambda x=x, w=w: pow2_rms(x, w), lambda x=x, w=w: t_rms(x, w), None, None))
                out.append(("fused_add_rms_norm bf16 pow2", f"{m}x{n} [BLOCK 8192, before rows.py]", 8 * m * n + 2 * n,
                            lambda x=x, r=r, w=w: pow2_farn(x, r, w), lambda x=x, r=r, w=w: t_farn(x, r, w), None, None))
    for d in (4864, 18944):
        gu = randn(4096, 2 * d)

        def t_silu(x):
            h = x.shape[-1] // 2
            return F.silu(x[..., :h]) * x[..., h:]
        out.append(("silu_and_mul bf16", f"4096x2x{d} [BLOCK {model.column_block(d)}]", 6 * 4096 * d,
                    lambda gu=gu: S.silu_and_mul(gu), lambda gu=gu: t_silu(gu), (t_silu, (gu,)), rel))
    for m in (1, 16):
        xs = randn(m, 152064, scale=3.0)
        lg = randn(m, 152064, dtype=torch.float32, scale=3.0)

        def t_softmax(x):
            return torch.softmax(x, -1)

        def t_argmax(x):
            return torch.argmax(x, -1)
        out.append(("softmax bf16", f"{m}x152064 [split]", 4 * m * 152064,
                    lambda xs=xs: S.softmax(xs), lambda xs=xs: t_softmax(xs), (t_softmax, (xs,)), rel))
        out.append(("argmax f32", f"{m}x152064 [split]", 4 * m * 152064,
                    lambda lg=lg: S.argmax(lg), lambda lg=lg: t_argmax(lg), (t_argmax, (lg,)),
                    lambda a, b: float((a != b).float().mean())))
    lg1 = randn(1, 152064, dtype=torch.float32, scale=3.0)

    def t_sample1(x):
        probs = torch.softmax(x / 0.8, -1)
        qx = torch.empty_like(probs).exponential_()
        return (probs / qx).argmax(-1)
    out.append(("sample(T=0.8, top_p=1) f32", "1x152064 [split]", 4 * 152064,
                lambda: S.sample(lg1, 0.8, 1.0, 1), lambda: t_sample1(lg1), (t_sample1, (lg1,)), None))
    if args.only:
        keep = set(args.only.split(","))
        out = [c for c in out if c[0].split()[0] in keep]
    return out


def copy_bandwidth() -> float:
    """GB/s of a 1 GiB device-to-device copy, bytes read + written."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=DEV).random_()
    dst = torch.empty_like(src)
    t = float(do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median"))
    gb_s = 2 * src.numel() / t / 1e6
    del src, dst
    torch.cuda.empty_cache()
    return gb_s


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--only", help="comma-separated kernel names (rms_norm,rope,...)")
    ap.add_argument("--rows", action="store_true", help="the row-kernel grid of issue 17 (module docstring)")
    args = ap.parse_args()
    torch.manual_seed(0)

    copy_gb_s = copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"copy bandwidth (read+write): {copy_gb_s:.0f} GB/s")

    rows = []
    for name, shape, nbytes, f_tilex, f_torch, comp, check in (row_cases if args.rows else cases)(args):
        t0 = time.time()
        err = None
        if check is not None:
            err = check(f_tilex(), f_torch())
        t_x, how = bench(f_tilex)
        t_eager_call = float(do_bench(f_tilex, warmup=25, rep=100, return_mode="median"))
        t_t, _ = bench(f_torch)
        t_c = None
        if comp is not None and not args.no_compile:
            fn, fargs = comp
            try:
                cf = torch.compile(fn)
                cf(*fargs)
                t_c, _ = bench(lambda: cf(*fargs))
            except Exception as e:  # noqa: BLE001
                print(f"  {name}: torch.compile failed: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
        gbs = nbytes / t_x / 1e6
        r = dict(kernel=name, shape=shape, bytes=nbytes, tilex_ms=t_x, timing=how,
                 tilex_eager_call_ms=t_eager_call, torch_ms=t_t, compile_ms=t_c,
                 torch_over_tilex=t_t / t_x, compile_over_tilex=(t_c / t_x) if t_c else None,
                 tilex_gb_s=gbs, torch_gb_s=nbytes / t_t / 1e6,
                 compile_gb_s=(nbytes / t_c / 1e6) if t_c else None,
                 roofline=gbs / copy_gb_s, err=err)
        rows.append(r)
        print(f"{name:32s} {shape:36s}" + ("\n    " if args.rows else "") + f" tilex {t_x:8.4f} ms ({gbs:6.0f} GB/s, {100 * r['roofline']:5.1f}% of copy) "
              f"torch {t_t:8.4f} ms (x{r['torch_over_tilex']:.2f}) "
              + (f"compile {t_c:8.4f} ms (x{r['compile_over_tilex']:.2f}) " if t_c else "compile - ")
              + f"eager call {t_eager_call:.4f} ms"
              + (f"  err {err:.2e}" if err is not None else "") + f"  [{time.time() - t0:.0f}s]", flush=True)

    print()
    print("| kernel | shape | tilex ms | torch ms | compile ms | torch/tilex | compile/tilex | tilex GB/s | % of copy | err |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        c = f"{r['compile_ms']:.4f}" if r["compile_ms"] else "-"
        cr = f"{r['compile_over_tilex']:.2f}" if r["compile_over_tilex"] else "-"
        e = f"{r['err']:.1e}" if r["err"] is not None else "-"
        print(f"| {r['kernel']} | {r['shape']} | {r['tilex_ms']:.4f} | {r['torch_ms']:.4f} | {c} | "
              f"{r['torch_over_tilex']:.2f} | {cr} | {r['tilex_gb_s']:.0f} | {100 * r['roofline']:.1f}% | {e} |")
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, copy_gb_s=copy_gb_s, rows=rows)
    path = args.json or (os.path.join(os.environ["OUT"], "bench_stdlib.json") if os.environ.get("OUT") else None)
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {path}")
    bad = [r["kernel"] for r in rows if r["err"] is not None and not (r["err"] <= 2e-2 or math.isnan(r["err"]))]
    if bad:
        print(f"WARNING: large error vs torch in {bad}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

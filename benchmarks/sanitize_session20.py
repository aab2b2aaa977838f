"""The library paths added in sessions 20-21 under compute-sanitizer, at odd sizes, against torch in float64.

    compute-sanitizer --tool memcheck --leak-check no python3 benchmarks/sanitize_session20.py [--only NAME,...]

Paths: the rows' PREFETCH persistent grids (rms_norm, fused_add_rms_norm, layer_norm in bf16 at sizes where a
program has a second step), GEMMs with 6 stages at 128 < M <= 256 and the one-launch split-K kernels forced on
(`linear._SPLIT_LAST`, `linear._STREAMK`), attention prefill's measured tilings (D128 S <= 128, D64 S <= 2048, odd
S), embedding's 16-elements-a-thread gather with ids out of range, `rope` and the `rope_token` kernel, and a
measured decode plan (B1 ctx4096 D256). Each case prints PASS/FAIL with its error (max |out - ref| / max |ref|,
limit 2e-2 for bf16 outputs); exit 1 on any failure. The sanitizer reports out-of-bounds or misaligned accesses
itself (its summary line at the end).
"""
from __future__ import annotations

import argparse
import math
import sys

import importlib

import torch
import torch.nn.functional as F

import tilex.stdlib as S
from tilex.stdlib import _launch as L
LIN = importlib.import_module("tilex.stdlib.linear")  # the module (tilex.stdlib.linear is also the function)

BF = torch.bfloat16
G = torch.Generator(device="cuda").manual_seed(0)


def rnd(*shape, dtype=BF):
    return torch.randn(*shape, generator=G, device="cuda", dtype=torch.float32).to(dtype)


def err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def rows():
    for m, n in ((4097, 5120), (1024, 8192), (16383, 2048)):
        x, w = rnd(m, n), rnd(n)
        xf = x.double()
        yield f"rms_norm {m}x{n}", S.rms_norm(x, w, 1e-6), xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6) * w.double()
        r = rnd(m, n)
        y, h = S.fused_add_rms_norm(x, r, w, 1e-6)
        hf = (x + r).double()  # h rounded to bf16 before the norm, as the wrapper states
        hb = (x + r).to(BF).double()
        yield f"fused_add_rms_norm h {m}x{n}", h, hf
        yield f"fused_add_rms_norm y {m}x{n}", y, hb * torch.rsqrt((hb * hb).mean(-1, keepdim=True) + 1e-6) * w.double()
        b = rnd(n)
        yield f"layer_norm {m}x{n}", S.layer_norm(x, w, b, 1e-5), F.layer_norm(xf, (n,), w.double(), b.double(), 1e-5)


def gemm():
    cases = ((200, 5120, 5120, False), (129, 896, 4864, True), (100, 896, 9728, False), (37, 3584, 4608, True),
             (1000, 2048, 2560, False), (333, 14336, 3584, True))
    for flag in (None, "_SPLIT_LAST", "_STREAMK"):
        old = getattr(LIN, flag) if flag else None
        if flag:
            setattr(LIN, flag, True)
        try:
            for m, k, n, bias in cases:
                x, w = rnd(m, k), rnd(n, k)
                b = rnd(n) if bias else None
                ref = x.double() @ w.double().t() + (b.double() if bias else 0)
                yield f"linear{' ' + flag if flag else ''} {m}x{k}x{n}{' bias' if bias else ''}", S.linear(x, w, b), ref
        finally:
            if flag:
                setattr(LIN, flag, old)


def prefill():
    for b, hq, hkv, s, d in ((3, 8, 2, 77, 128), (2, 4, 4, 128, 128), (1, 12, 2, 1000, 64), (2, 6, 3, 2047, 64),
                             (4, 8, 8, 50, 128)):
        q, k, v = rnd(b, hq, s, d), rnd(b, hkv, s, d), rnd(b, hkv, s, d)
        ref = F.scaled_dot_product_attention(q.double(), k.double().repeat_interleave(hq // hkv, 1),
                                             v.double().repeat_interleave(hq // hkv, 1), is_causal=True)
        yield f"attention_prefill B{b} Hq{hq}/{hkv} S{s} D{d}", S.attention_prefill(q, k, v, causal=True), ref


def embedding():
    for t, v, n in ((100, 151936, 2048), (7, 32000, 4096), (1, 1000, 896)):
        table = rnd(v, n)
        ids = torch.randint(-5, v + 5, (t,), device="cuda", generator=G)
        inside = (ids >= 0) & (ids < v)
        ref = torch.where(inside[:, None], table[ids.clamp(0, v - 1)].double(), torch.zeros((), dtype=torch.float64,
                                                                                              device="cuda"))
        yield f"embedding T{t} V{v} N{n} (ids out of range)", S.embedding(ids, table), ref


def _rope_ref(x, pos, theta):
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, device="cuda", dtype=torch.float64) / d)
    ang = pos.double()[:, None] * inv[None, :]
    c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
    a, b = x[..., : d // 2].double(), x[..., d // 2:].double()
    return torch.cat([a * c - b * s, b * c + a * s], -1)


def rope():
    theta = 1e6
    for t, hq, hk, d in ((1, 32, 8, 128), (1000, 28, 4, 128), (333, 14, 2, 64), (4099, 40, 8, 128)):
        q, k = rnd(t, hq, d), rnd(t, hk, d)
        pos = torch.randint(0, 8192, (t,), device="cuda", generator=G)
        qo, ko = S.rope(q, k, pos, theta)
        yield f"rope q T{t} Hq{hq}/{hk} D{d}", qo, _rope_ref(q, pos, theta)
        yield f"rope k T{t} Hq{hq}/{hk} D{d}", ko, _rope_ref(k, pos, theta)
        half = d // 2
        mod = L.load("rope", kernel="rope_token", T="bf16", I="i64", QB=L.next_pow2(hq), KB=L.next_pow2(hk),
                     HALFB=L.next_pow2(half), WARPS=4)
        qt, kt = torch.full_like(q, float("nan")), torch.full_like(k, float("nan"))
        L.run(mod, "rope_token", q.view(t, hq, 2, half), k.view(t, hk, 2, half), pos, qt.view(t, hq, 2, half),
              kt.view(t, hk, 2, half), nlog2=-2.0 * math.log2(theta) / d)
        yield f"rope_token q T{t} Hq{hq}/{hk} D{d}", qt, _rope_ref(q, pos, theta)
        yield f"rope_token k T{t} Hq{hq}/{hk} D{d}", kt, _rope_ref(k, pos, theta)


def decode():
    b, hq, hkv, d, bs, ctx = 1, 8, 1, 256, 16, 4096
    nb = ctx // bs + 3
    kc, vc = rnd(nb, bs, hkv, d), rnd(nb, bs, hkv, d)
    table = torch.randperm(nb, device="cuda", generator=G)[: ctx // bs + 2].view(1, -1).int()
    lens = torch.tensor([ctx - 3], device="cuda", dtype=torch.int32)
    q = rnd(b, hq, d)
    n = ctx - 3
    tt = torch.arange(n, device="cuda")
    blk = table[0, tt // bs].long()
    kk, vv = kc[blk, tt % bs].double(), vc[blk, tt % bs].double()  # [n, Hkv, D]
    s = torch.einsum("hd,nd->hn", q[0].double(), kk[:, 0]) / math.sqrt(d)
    ref = (torch.softmax(s, -1) @ vv[:, 0])[None]
    yield f"attention_decode B1 ctx{n} Hq{hq}/{hkv} D{d} (measured plan)", S.attention_decode(q, kc, vc, table, lens), ref


GROUPS = dict(rows=rows, gemm=gemm, prefill=prefill, embedding=embedding, rope=rope, decode=decode)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help=f"comma-separated groups of {', '.join(GROUPS)}")
    args = ap.parse_args()
    only = [g for g in args.only.split(",") if g] or list(GROUPS)
    failed = 0
    for g in only:
        for name, out, ref in GROUPS[g]():
            torch.cuda.synchronize()
            e = err(out, ref)
            ok = e <= 2e-2
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {name}: err {e:.2e}", flush=True)
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

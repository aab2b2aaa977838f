"""Sweep the row kernels' launch shapes on the GPU: warps, blocks per SM (the persistent grid is
SMs x MIN_BLOCKS programs), pipeline stages, and the non-persistent grid (one row per program),
each checked against PyTorch and timed with torch eager and torch.compile in the same process.

    python benchmarks/sweep_rows.py [--only rms_norm,softmax] [--whole] [--pieces] [--json OUT.json]
    python benchmarks/sweep_rows.py --misses [--only rope,...] [--cases "FAM:T=..,N=..;..."] [--lean|--lib-only] [--jobs 14]
                                    [--budget-s 220] [--json OUT.json]

--misses times issue 17's losing shapes (`MISSES`: the norms, gated activations, rope and embedding at 1-100
tokens, where they ran at 0.69-0.95x torch.compile in bench_shapes.py, layer_norm at 32768 x 3584 / 896, 49-63%
of copy, and a few shapes that win today as guards) over every candidate configuration of their kernels
(`miss_candidates`: warps, stages, a program per step or a persistent grid, rows per step, the pieces path,
persistent grids that load the next step's rows into registers during this one (PREFETCH, both paths);
the gated kernels' and embedding's column block, rows and warps; rope's heads per block and warps for `rope`
and for `rope_heads`, the heads spread over programs,
and `rope_token`'s warps: all of a token's heads in one program). Kernels are built first in --jobs spawned worker
processes (NVRTC is CPU-bound; the cubins land in the cache this process reads); then, case by case until
--budget-s, each candidate's output is checked against torch (rel. error <= 2e-2, else WRONG) and timed
with the same CUDA-graph timer (`gpu_us`) as torch eager, torch.compile and the library's own call.
The JSON (written after each case; $OUT/sweep_rows_misses.json by default when $OUT is set) keeps every
candidate's time or error.

--pieces sweeps the `<kernel>_k2` pieces kernels (transpiler/stdlib/rows.py) at N = 5120 (M = 4096
and 32768) and 2560, 3072 (M = 16384): W = 1024 and 512 (5120 = 1024 x (4 + 1) = 512 x (8 + 2)),
stages 1 to 3, persistent grids of 3 to 6 blocks per SM and a program per row, with the model's own
choice ("model") and the power-of-two configuration used before rows.py ("pow2") as references.

Times are medians of CUDA-graph replays (bench_stdlib.bench); % of copy uses the minimum bytes
(inputs read once, outputs written once) over a 1 GiB device copy measured in this run.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_stdlib import bench, copy_bandwidth, rel  # noqa: E402

from tilex.stdlib import _launch as L  # noqa: E402

BF16 = torch.bfloat16
HUGE = 1 << 30  # PROGRAMS: one step per program (the grid covers every row)


def configs(n: int, one_pass: bool, per_thread=(8, 16), blocks=(2, 3, 4), stages=(2, 3, 4)):
    """(label, defines) candidates for an [M, n] row kernel (one row per step)."""
    block = max(8, L.next_pow2(n)) if one_pass else 4096
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for per in per_thread:
        warps = max(1, min(32, block // (32 * per)))
        threads = 32 * warps
        base = dict(BLOCK=block, R=1, ONE_PASS=one_pass, WARPS=warps)
        out.append((f"W{warps} grid=all", dict(base, MIN_BLOCKS=0, PROGRAMS=HUGE, STAGES=2)))
        # one row per program read straight into registers (no shared-memory ring), as torch.compile's kernels do
        out.append((f"W{warps} grid=all S1", dict(base, MIN_BLOCKS=0, PROGRAMS=HUGE, STAGES=1)))
        for b in blocks:
            for st in stages:
                if threads * b <= 2048:
                    out.append((f"W{warps} {b}/SM S{st}", dict(base, MIN_BLOCKS=b, PROGRAMS=sms * b, STAGES=st)))
    return out


def whole_row_configs(n: int, per_thread=(32, 64), stages=(2, 3)):
    """One-pass candidates for rows longer than row_config's one_pass_max: the whole row is one
    step, held in registers (32 or 64 elements per thread), one block per SM (its ring of a whole
    bf16 row per stage takes most of shared memory)."""
    block = L.next_pow2(n)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for per in per_thread:
        warps = max(1, min(32, block // (32 * per)))
        for st in stages:
            if st * block * 2 <= 200 * 1024:
                out.append((f"whole W{warps} 1/SM S{st}", dict(BLOCK=block, R=1, ONE_PASS=True, WARPS=warps,
                                                              MIN_BLOCKS=1, PROGRAMS=sms, STAGES=st)))
    return out


def cases():
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(shape, generator=g, device="cuda").to(BF16)

    out = []
    for m, n in ((16384, 4096), (4096, 8192)):
        x, w = randn(m, n), randn(n)
        ref = lambda x=x, w=w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)
        out.append(("rms_norm", m, n, 4 * m * n + 2 * n, (x, w), ref, lambda x=x: (L.empty(x, x.shape),)))
    m, n = 16384, 4096
    x, r, w, b = randn(m, n), randn(m, n), randn(n), randn(n)

    def farn(x=x, r=r, w=w):
        h = x + r
        return F.rms_norm(h, (n,), w, 1e-6), h
    out.append(("fused_add_rms_norm", m, n, 8 * m * n + 2 * n, (x, r, w), farn,
                lambda: (L.empty(x, x.shape), L.empty(x, x.shape))))
    out.append(("layer_norm", m, n, 4 * m * n + 4 * n, (x, w, b),
                lambda: F.layer_norm(x, (n,), w, b, 1e-5), lambda: (L.empty(x, x.shape),)))
    ms, ns = 4096, 32000
    xs = randn(ms, ns)
    out.append(("softmax", ms, ns, 4 * ms * ns, (xs,), lambda: torch.softmax(xs, -1),
                lambda: (L.empty(xs, xs.shape),)))
    xs2 = randn(16384, 4096)
    out.append(("softmax", 16384, 4096, 4 * 16384 * 4096, (xs2,), lambda: torch.softmax(xs2, -1),
                lambda: (L.empty(xs2, xs2.shape),)))
    return out


def pieces_configs(n: int, registers: bool):
    """(label, kernel suffix, defines) candidates for the pieces kernels at row length n."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for w in (1024, 512):
        if n % w:
            continue
        k = n // w
        p1 = 1 << (k.bit_length() - 1)
        if (k - p1) & (k - p1 - 1) or k == p1:
            continue
        base = dict(W=w, P1=p1, P2=k - p1, WARPS=max(1, w // 256), MIN_BLOCKS=0)
        for st in ((1, 2) if registers else (2, 3)):
            out.append((f"k2 W{w} grid=all S{st}", "_k2", dict(base, PROGRAMS=HUGE, STAGES=st)))
            if st > 1:
                for b in ((4,) if registers else (3, 4, 6)):
                    if b * w // 8 <= 2048:
                        out.append((f"k2 W{w} {b}/SM S{st}", "_k2", dict(base, PROGRAMS=sms * b, STAGES=st)))
    return out


def pieces_cases():
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(shape, generator=g, device="cuda").to(BF16)

    out = []
    for m, n in ((4096, 5120), (32768, 5120), (16384, 2560), (16384, 3072)):
        x, r, w, b = randn(m, n), randn(m, n), randn(n), randn(n)

        def farn(x=x, r=r, w=w, n=n):
            h = x + r
            return F.rms_norm(h, (n,), w, 1e-6), h
        out.append(("rms_norm", m, n, 4 * m * n + 2 * n, (x, w),
                    lambda x=x, w=w, n=n: F.rms_norm(x, (n,), w, 1e-6), lambda x=x: (L.empty(x, x.shape),)))
        out.append(("fused_add_rms_norm", m, n, 8 * m * n + 2 * n, (x, r, w), farn,
                    lambda x=x: (L.empty(x, x.shape), L.empty(x, x.shape))))
        out.append(("layer_norm", m, n, 4 * m * n + 4 * n, (x, w, b),
                    lambda x=x, w=w, b=b, n=n: F.layer_norm(x, (n,), w, b, 1e-5), lambda x=x: (L.empty(x, x.shape),)))
    return out


def run_pieces(only: set, copy: float) -> list:
    from tilex.stdlib import rows as model

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for name, m, n, nbytes, ins, ref, outs in pieces_cases():
        if only and name not in only:
            continue
        want = ref()
        want = want if isinstance(want, tuple) else (want,)
        t_eager, _ = bench(ref)
        t_comp, _ = bench(lambda f=torch.compile(ref): f())
        print(f"\n{name} {m}x{n}: torch {t_eager:.4f} ms, compile {t_comp:.4f} ms "
              f"({nbytes / t_comp / 1e6 / copy:.1%} of copy); model: {model.explain(name, n, m, 2, sms)}", flush=True)
        mname, mcfg = model.plan(name, n, m, 2, sms)
        registers = model.TRAITS[name].registers
        pow2 = L.row_config(n, m, sms, threads_per_sm=model.TRAITS[name].threads_per_sm,
                            stages=model.TRAITS[name].stages)
        if registers:
            pow2 = dict(pow2, STAGES=1, PROGRAMS=HUGE, MIN_BLOCKS=0)
        cands = [("model", mname[len(name):], mcfg), ("pow2", "", pow2)] + pieces_configs(n, registers)
        for label, suffix, cfg in cands:
            kernel = name + suffix
            try:
                mod = L.load(name, kernel=kernel, T="bf16", **cfg)
            except Exception as e:  # noqa: BLE001 - reported, not fatal
                print(f"  {label:22s} compile failed: {str(e).splitlines()[0]}")
                continue
            o = outs()
            args = (*ins, *o)
            if suffix:  # [m, n] as [m * K, W], [n] as [K, W]
                k = n // cfg["W"]
                args = tuple(a.view(m * k, cfg["W"]) if a.dim() == 2 else a.view(k, cfg["W"]) for a in args)
            run = lambda args=args, mod=mod, kernel=kernel: L.run(mod, kernel, *args)
            run()
            torch.cuda.synchronize()
            err = max(rel(a, b) for a, b in zip(o, want))
            t, _ = bench(run)
            frac = nbytes / t / 1e6 / copy
            out.append(dict(kernel=kernel, shape=f"{m}x{n}", config=label, defines=cfg, ms=t, err=err,
                            copy_frac=frac, torch_ms=t_eager, compile_ms=t_comp))
            print(f"  {label:22s} {t:8.4f} ms  {frac:6.1%} of copy  torch/x {t_eager / t:5.2f}  "
                  f"compile/x {t_comp / t:5.2f}  err {err:.1e}{'  BAD' if err > 2e-2 else ''}", flush=True)
    return out


# ------------------------------------------------------------------------------------------------------
# --misses: the shapes of issue 17 where the row kernels lose to torch.compile (bench_shapes.py, session 16)
# and the layer_norm shapes under 0.85 of copy; every candidate configuration of the kernels involved,
# compiled first in --jobs worker processes, then each checked against torch and timed (CUDA-graph
# replays, the same timer for tilex, torch eager and torch.compile) in this process.

MISSES = [  # (family, sizes): the misses first (a run cut short by --budget-s keeps them), then guards
    ("rms_norm", dict(T=1, N=4096)), ("rope", dict(T=1, Hq=32, Hkv=8, D=128)), ("silu_and_mul", dict(T=1, N=4864)),
    ("rms_norm", dict(T=16, N=1536)), ("rope", dict(T=16, Hq=8, Hkv=4, D=256)), ("gelu_and_mul", dict(T=1, N=29568)),
    ("fused_add_rms_norm", dict(T=16, N=1536)), ("rms_norm", dict(T=100, N=5120)),
    ("layer_norm", dict(T=32768, N=3584)), ("layer_norm", dict(T=32768, N=896)),
    ("fused_add_rms_norm", dict(T=1024, N=8192)), ("rms_norm", dict(T=1024, N=8192)),
    ("embedding", dict(T=100, V=151936, N=2048)), ("silu_and_mul", dict(T=1, N=29568)),
    ("silu_and_mul", dict(T=1, N=11008)), ("gelu_and_mul", dict(T=1, N=4864)), ("silu_and_mul", dict(T=1, N=14336)),
    ("layer_norm", dict(T=1, N=4096)), ("fused_add_rms_norm", dict(T=1, N=4096)),
    ("layer_norm", dict(T=16, N=1536)), ("fused_add_rms_norm", dict(T=100, N=5120)),
    ("layer_norm", dict(T=100, N=5120)), ("rms_norm", dict(T=100, N=896)),
    ("rope", dict(T=100, Hq=28, Hkv=4, D=128)), ("rope", dict(T=1024, Hq=12, Hkv=2, D=128)),
    ("rope", dict(T=4096, Hq=64, Hkv=8, D=128)), ("silu_and_mul", dict(T=100, N=13824)),
    ("silu_and_mul", dict(T=4096, N=14336)),
    ("embedding", dict(T=1, V=128256, N=4096)), ("embedding", dict(T=16, V=151936, N=896)),
    ("embedding", dict(T=1024, V=152064, N=5120)), ("rms_norm", dict(T=4096, N=2048)),
    ("layer_norm", dict(T=32768, N=5120)), ("rms_norm", dict(T=32768, N=3584)), ("rms_norm", dict(T=32768, N=896)),
]


def miss_text(fam: str, s: dict) -> str:
    return f"{fam} " + " ".join(f"{k}={v}" for k, v in s.items())


def miss_bytes(fam: str, s: dict) -> int:
    """Minimum bytes moved (bf16; as bench_shapes.bytes_moved)."""
    t = s["T"]
    if fam in ("rms_norm", "layer_norm"):
        return 2 * (2 * t * s["N"] + s["N"])
    if fam == "fused_add_rms_norm":
        return 2 * (4 * t * s["N"] + s["N"])
    if fam in ("silu_and_mul", "gelu_and_mul"):
        return 2 * 3 * t * s["N"]
    if fam == "rope":
        return 2 * 2 * t * (s["Hq"] + s["Hkv"]) * s["D"] + 8 * t
    return 2 * 2 * t * s["N"] + 8 * t  # embedding


def _per_thread_ok(elems: int) -> bool:
    return 4 <= elems <= 64


def row_candidates(fam: str, m: int, n: int, sms: int) -> list:
    """(label, kernel, defines) for the norm kernels over [m, n]: the power-of-two path with 1..32 warps,
    1..3 stages, a program per step or a persistent grid, R rows per step; the pieces path where n splits."""
    from tilex.stdlib import rows as model

    out = []
    if n <= model.ONE_PASS_MAX:
        block = max(8, L.next_pow2(n))
        extra = dict(EXACT=block == n) if fam == "layer_norm" else {}
        for r in (1, 2, 4):
            if r > 1 and (block * r > 4096 or m < 4 * sms * r):
                continue
            for warps in (1, 2, 4, 8, 16, 32):
                threads = 32 * warps
                if not _per_thread_ok(block * r // threads) or (r > 1 and block * r // threads > 32):
                    continue
                base = dict(BLOCK=block, R=r, ONE_PASS=True, WARPS=warps, **extra)
                tag = f"pow2 B{block} R{r} W{warps}"
                out.append((f"{tag} all S1", fam, dict(base, MIN_BLOCKS=0, PROGRAMS=HUGE, STAGES=1)))
                out.append((f"{tag} all S2", fam, dict(base, MIN_BLOCKS=0, PROGRAMS=HUGE, STAGES=2)))
                steps = -(-m // r)
                for b in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32):
                    if threads * b not in (1024, 1536, 2048) or steps < 2 * sms * b:  # only where programs loop
                        continue
                    for st in (2, 3):
                        out.append((f"{tag} {b}/SM S{st}", fam,
                                    dict(base, MIN_BLOCKS=b, PROGRAMS=sms * b, STAGES=st)))
                # persistent programs whose next step's rows are loaded into registers during this step
                # (PREFETCH: no shared-memory ring), b resident blocks per SM (the launch bound), where some
                # program has a second step to prefetch
                for b in (1, 2, 3, 4, 6, 8, 12, 16):
                    if not 512 <= threads * b <= 2048 or steps <= sms * b:
                        continue
                    out.append((f"{tag} {b}/SM pf", fam,
                                dict(base, MIN_BLOCKS=b, PROGRAMS=sms * b, STAGES=1, PREFETCH=True)))
    if fam == "layer_norm" and m >= 4096:  # w and b read again each step instead of held (layer_norm.tile)
        out += [(label + " reload", kernel, dict(d, HOLD=False)) for label, kernel, d in list(out)
                if not d.get("PREFETCH")]  # (the PREFETCH path holds w and b)
    if n >= 4096 and m <= 4096:  # the chunked path (a row in BLOCK-wide steps, read twice) at 1..4096 rows
        for chunk in (1024, 2048, 4096):
            for warps in (4, 8):
                if not _per_thread_ok(chunk // (32 * warps)) or chunk >= n:
                    continue
                base = dict(BLOCK=chunk, R=1, ONE_PASS=False, WARPS=warps, MIN_BLOCKS=0, PROGRAMS=HUGE)
                if fam == "layer_norm":
                    base["EXACT"] = False
                for st in (1, 2):
                    out.append((f"chunked B{chunk} W{warps} all S{st}", fam, dict(base, STAGES=st)))
    for w in (2048, 1024, 512, 256):
        if n % w or n // w < 2:
            continue
        k = n // w
        p1 = 1 << (k.bit_length() - 1)
        p2 = k - p1
        if p2 == 0 or p2 & (p2 - 1) or k > 16:
            continue
        for warps in (w // 256, w // 512, w // 128):
            if warps < 1 or warps > 32:
                continue
            base = dict(W=w, P1=p1, P2=p2, WARPS=warps, MIN_BLOCKS=0)
            tag = f"k2 W{w}({p1}+{p2}) W{warps}"
            sts = (1,) if fam == "fused_add_rms_norm" else (1, 2)
            for st in sts:
                out.append((f"{tag} all S{st}", fam + "_k2", dict(base, PROGRAMS=HUGE, STAGES=st)))
            if fam != "fused_add_rms_norm" and m >= 4 * sms:
                for b in (2, 4):
                    if 32 * warps * b <= 2048:
                        out.append((f"{tag} {b}/SM S2", fam + "_k2", dict(base, PROGRAMS=sms * b, STAGES=2)))
            if fam != "fused_add_rms_norm":  # the next row's pieces into registers (PREFETCH), b blocks per SM
                for b in (2, 3, 4, 6, 8, 12, 16):
                    if 256 <= 32 * warps * b <= 2048 and m > sms * b:
                        out.append((f"{tag} {b}/SM pf", fam + "_k2",
                                    dict(base, MIN_BLOCKS=b, PROGRAMS=sms * b, STAGES=1, PREFETCH=True)))
    return out


def gated_candidates(fam: str, m: int, d: int) -> list:
    out = []
    extra = dict(TANH=True) if fam == "gelu_and_mul" else {}
    for block in (256, 512, 1024, 2048, 4096):
        if block > 2 * L.next_pow2(d):
            continue
        for rows in (1, 2):
            if rows > 1 and m < 1024:
                continue
            for warps in (1, 2, 4, 8, 16):
                per = block * rows // (32 * warps)
                if not 4 <= per <= 32 or block // (32 * warps) < 1:
                    continue
                for mb in ((0, 2048 // (32 * warps)) if m >= 1024 else (0,)):
                    out.append((f"B{block} R{rows} W{warps} MB{mb}", fam,
                                dict(BLOCK=block, ROWS=rows, WARPS=warps, MIN_BLOCKS=mb, **extra)))
    return out


def rope_candidates(s: dict) -> list:
    half = s["D"] // 2
    halfb = L.next_pow2(half)
    out = []
    for kern in ("rope", "rope_heads"):
        for hb in (1, 2, 4, 8, 16, 32):
            if hb > 2 * L.next_pow2(max(s["Hq"], s["Hkv"])):
                continue
            for warps in (1, 2, 4, 8):
                per = hb * halfb // (32 * warps)
                if not 2 <= per <= 32:
                    continue
                out.append((f"{kern} HB{hb} W{warps}", kern, dict(HB=hb, HALFB=halfb, WARPS=warps)))
    qb, kb = L.next_pow2(s["Hq"]), L.next_pow2(s["Hkv"])  # rope_token: all of a token's heads at once
    for warps in (2, 4, 8, 16):
        if 2 <= qb * halfb // (32 * warps) <= 64:
            out.append((f"rope_token W{warps}", "rope_token", dict(QB=qb, KB=kb, HALFB=halfb, WARPS=warps)))
    return out


def embedding_candidates(m: int, d: int) -> list:
    out = []
    for block in (256, 512, 1024, 2048, 4096):
        if block > 2 * L.next_pow2(d):
            continue
        for rows in (1, 2, 4):
            if rows > 1 and m < 1024:
                continue
            for warps in (1, 2, 4, 8, 16):
                per = block // (32 * warps)
                if 4 <= per <= 32:
                    out.append((f"B{block} R{rows} W{warps}", "embedding", dict(BLOCK=block, ROWS=rows, WARPS=warps)))
                # embedding_tile: the ROWS rows as one gather (every row's loads in flight together)
                if rows > 1 and 8 <= per * rows <= 32:
                    out.append((f"tile B{block} R{rows} W{warps}", "embedding_tile",
                                dict(BLOCK=block, ROWS=rows, WARPS=warps)))
        for rows in (8,):
            for warps in (4, 8):
                per = block * rows // (32 * warps)
                if m >= 1024 and 8 <= per <= 32:
                    out.append((f"tile B{block} R{rows} W{warps}", "embedding_tile",
                                dict(BLOCK=block, ROWS=rows, WARPS=warps)))
    return out


def parse_cases(text: str) -> list:
    """--cases "layer_norm:T=32768,N=896;rms_norm:T=1024,N=8192" as [(family, sizes), ...]."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(";"))):
        fam, _, sizes = item.partition(":")
        if fam not in TILE_OF or not sizes:
            raise SystemExit(f"--cases: {item!r} is not FAMILY:T=..,N=.. (families: {', '.join(TILE_OF)})")
        out.append((fam, {k: int(v) for k, v in (kv.split("=") for kv in sizes.split(","))}))
    return out


def lean(cands: list) -> list:
    """--lean: the norm candidates with 8, 16 or 32 elements per thread, persistent grids of 1024 or 2048
    threads per SM, and layer_norm's reload variant only on a program per step (a third of the builds)."""
    out = []
    for label, kernel, d in cands:
        if "BLOCK" in d and "R" in d:
            per = d["BLOCK"] * d["R"] // (32 * d["WARPS"])
            threads = 32 * d["WARPS"] * d.get("MIN_BLOCKS", 0)
            if per not in (8, 16, 32) or (d.get("MIN_BLOCKS") and threads not in (1024, 2048)
                                          and not d.get("PREFETCH")):
                continue
            if d.get("HOLD") is False and not label.endswith("all S1 reload"):
                continue
        out.append((label, kernel, d))
    return out


def miss_candidates(fam: str, s: dict, sms: int) -> list:
    """(label, kernel, defines) candidates of one case; defines without the dtype placeholders."""
    if fam in ("rms_norm", "fused_add_rms_norm", "layer_norm"):
        return row_candidates(fam, s["T"], s["N"], sms)
    if fam in ("silu_and_mul", "gelu_and_mul"):
        return gated_candidates(fam, s["T"], s["N"])
    if fam == "rope":
        return rope_candidates(s)
    return embedding_candidates(s["T"], s["N"])


TILE_OF = {"rms_norm": "rms_norm", "fused_add_rms_norm": "fused_add_rms_norm", "layer_norm": "layer_norm",
           "silu_and_mul": "silu_and_mul", "gelu_and_mul": "gelu_and_mul", "rope": "rope", "embedding": "embedding"}


def _placeholders(fam: str) -> dict:
    return dict(T="bf16", I="i64") if fam in ("rope", "embedding") else dict(T="bf16")


def _compile_job(job):
    """Worker: translate and build one (tile file, kernel, defines) for sm_90a into the cache."""
    tile, kernel, defines = job
    from tilex.stdlib import _launch as L2

    try:
        L2.load(tile, kernel=kernel, **defines).kernel(kernel).cubin_for("sm_90a")
        return None
    except Exception as e:  # noqa: BLE001 - reported; the candidate is skipped when timed
        return f"{tile}/{kernel} {defines}: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def gpu_us(fn, target_ms: float = 1.5, reps: int = 11) -> float:
    """Median µs per call of `fn` replayed from one CUDA graph of n back-to-back calls (n so that a
    replay takes about target_ms); the same timer for every candidate and baseline."""
    fn()
    torch.cuda.synchronize()
    st = torch.cuda.Stream()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(st):
        fn()
        e0.record()
        for _ in range(3):
            fn()
        e1.record()
        e1.synchronize()
        est = max(e0.elapsed_time(e1) / 3, 1e-3)
        n = int(min(1000, max(3, target_ms / est * 8)))  # eager time overstates tiny kernels (host-bound)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=st):
            for _ in range(n):
                fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3 / n)
    del g
    ts.sort()
    return ts[len(ts) // 2]


def build_miss(fam: str, s: dict):
    """(inputs, torch fn over inputs, outputs factory, args(cand kernel, defines, outs) -> launch args,
    scalars, the library wrapper call)."""
    import tilex.stdlib as S

    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(shape, generator=g, device="cuda").to(BF16)

    if fam in ("rms_norm", "fused_add_rms_norm", "layer_norm"):
        m, n = s["T"], s["N"]
        x, r, w, b = randn(m, n), randn(m, n), randn(n), randn(n)
        if fam == "rms_norm":
            ins, fn, nout = (x, w), (lambda x, w: F.rms_norm(x, (n,), w, 1e-6)), 1
            lib, sc = (lambda: S.rms_norm(x, w, 1e-6)), dict(eps=1e-6)
        elif fam == "layer_norm":
            ins, fn, nout = (x, w, b), (lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5)), 1
            lib, sc = (lambda: S.layer_norm(x, w, b, 1e-5)), dict(eps=1e-5)
        else:
            def fn(x, r, w):
                h = x + r
                return F.rms_norm(h, (n,), w, 1e-6), h
            ins, nout = (x, r, w), 2
            lib, sc = (lambda: S.fused_add_rms_norm(x, r, w, 1e-6)), dict(eps=1e-6)
        outs = lambda: tuple(torch.empty_like(x) for _ in range(nout))  # noqa: E731

        def args(kernel, d, o):
            a = (*ins, *o)
            if kernel.endswith("_k2"):
                k = n // d["W"]
                a = tuple(t.view(m * k, d["W"]) if t.dim() == 2 else t.view(k, d["W"]) for t in a)
            return a
        return ins, fn, outs, args, sc, lib
    if fam in ("silu_and_mul", "gelu_and_mul"):
        m, d = s["T"], s["N"]
        x = randn(m, 2 * d)
        act = F.silu if fam == "silu_and_mul" else (lambda a: F.gelu(a, approximate="tanh"))
        fn = lambda x: act(x[..., :d]) * x[..., d:]  # noqa: E731
        lib = (lambda: S.silu_and_mul(x)) if fam == "silu_and_mul" else (lambda: S.gelu_and_mul(x, "tanh"))
        return ((x,), fn, lambda: (x.new_empty(m, d),), lambda kernel, df, o: (x.view(m, 2, d), *o), {}, lib)
    if fam == "rope":
        t, hq, hk, d = s["T"], s["Hq"], s["Hkv"], s["D"]
        theta = 1e6
        q, k = randn(t, hq, d), randn(t, hk, d)
        pos = torch.randint(0, 8192, (t,), device="cuda", generator=g)

        def fn(q, k, pos):
            inv = 1.0 / (theta ** (torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d))
            ang = pos.float()[:, None] * inv[None, :]
            c, sn = ang.cos()[:, None, :], ang.sin()[:, None, :]

            def rot(x):
                a, bb = x[..., : d // 2].float(), x[..., d // 2:].float()
                return torch.cat([a * c - bb * sn, bb * c + a * sn], -1).to(x.dtype)
            return rot(q), rot(k)
        half = d // 2
        outs = lambda: (torch.empty_like(q), torch.empty_like(k))  # noqa: E731
        args = lambda kernel, df, o: (q.view(t, hq, 2, half), k.view(t, hk, 2, half), pos,  # noqa: E731
                                      o[0].view(t, hq, 2, half), o[1].view(t, hk, 2, half))
        return ((q, k, pos), fn, outs, args, dict(nlog2=-2.0 * math.log2(theta) / d),
                lambda: S.rope(q, k, pos, theta))
    m, v, d = s["T"], s["V"], s["N"]
    table = randn(v, d)
    ids = torch.randint(0, v, (m,), device="cuda", generator=g)
    return ((ids, table), (lambda ids, table: F.embedding(ids, table)), lambda: (table.new_empty(m, d),),
            lambda kernel, df, o: (ids, table, *o), {}, lambda: S.embedding(ids, table))


def run_misses(args) -> list:
    import time
    from concurrent.futures import ProcessPoolExecutor

    import tilex.stdlib  # noqa: F401

    import torch._dynamo

    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):  # one compile per case, the same functions at other shapes
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 100000)
    t0 = time.perf_counter()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    only = {x for x in args.only.split(",") if x}
    cases = [(f, s) for f, s in (parse_cases(args.cases) if args.cases else MISSES) if not only or f in only]
    cands = {i: miss_candidates(f, s, sms) for i, (f, s) in enumerate(cases)}
    if args.lean:
        cands = {i: lean(c) for i, c in cands.items()}
    if args.lib_only:
        cands = {i: [] for i in cands}
    jobs, seen = [], set()
    for i, (f, _) in enumerate(cases):
        for _, kernel, d in cands[i]:
            key = (TILE_OF[f], kernel, tuple(sorted(d.items())))
            if key not in seen:
                seen.add(key)
                jobs.append((TILE_OF[f], kernel, dict(d, **_placeholders(f))))
    print(f"{len(cases)} cases, {sum(map(len, cands.values()))} candidates, {len(jobs)} kernels to build "
          f"with {args.jobs} jobs", flush=True)
    import multiprocessing

    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
        errs = [e for e in ex.map(_compile_job, jobs, chunksize=4) if e]
    for e in errs[:20]:
        print("  refused:", e, flush=True)
    print(f"built in {time.perf_counter() - t0:.0f} s ({len(errs)} refused)", flush=True)
    args.copy_gb_s = copy_bandwidth()
    print(f"{torch.cuda.get_device_name(0)}; copy bandwidth {args.copy_gb_s:.0f} GB/s", flush=True)
    rows = []
    for i, (fam, s) in enumerate(cases):
        if time.perf_counter() - t0 > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s spent: {len(cases) - i} cases not timed", flush=True)
            break
        text = miss_text(fam, s)
        try:
            ins, fn, outs, argf, sc, lib = build_miss(fam, s)
            want = fn(*ins)
            want = want if isinstance(want, tuple) else (want,)
            base = {"eager": gpu_us(lambda: fn(*ins))}
            if not args.no_compile:
                c = torch.compile(fn, dynamic=False)
                c(*ins)
                base["compile"] = gpu_us(lambda: c(*ins))
            got = lib()
            got = got if isinstance(got, tuple) else (got,)
            lib_err = max(rel(a, b) for a, b in zip(got, want))
            lib_us = gpu_us(lib)
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on
            print(f"\n{text}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            rows.append(dict(family=fam, sizes=s, error=f"{type(e).__name__}: {str(e)[:300]}"))
            continue
        best_base = min(base.values())
        nbytes = miss_bytes(fam, s)
        row = dict(family=fam, sizes=s, case=text, bytes=nbytes, baselines_us=base, library_us=lib_us,
                   library_err=lib_err, candidates=[])
        if fam in ("rms_norm", "fused_add_rms_norm", "layer_norm"):
            from tilex.stdlib import rows as model

            row["model"] = model.explain(fam, s["N"], s["T"], 2, sms)
        print(f"\n[{time.perf_counter() - t0:5.0f} s] {text}: eager {base['eager']:.2f} us, compile "
              f"{base.get('compile', float('nan')):.2f} us; library {lib_us:.2f} us (x{best_base / lib_us:.3f}, "
              f"err {lib_err:.1e}); {len(cands[i])} candidates", flush=True)
        if "model" in row:
            print("  model:", row["model"], flush=True)
        for label, kernel, d in cands[i]:
            try:
                mod = L.load(TILE_OF[fam], kernel=kernel, **d, **_placeholders(fam))
                o = outs()
                a = argf(kernel, d, o)
                run = lambda mod=mod, kernel=kernel, a=a: L.run(mod, kernel, *a, **sc)  # noqa: E731
                run()
                torch.cuda.synchronize()
                err = max(rel(x, y) for x, y in zip(o, want))
                if not err <= 2e-2:
                    row["candidates"].append(dict(label=label, kernel=kernel, defines=d, error=f"rel err {err:.2e}"))
                    print(f"  {label:34s} WRONG: rel err {err:.2e}", flush=True)
                    continue
                us = gpu_us(run)
                row["candidates"].append(dict(label=label, kernel=kernel, defines=d, us=us, err=err))
            except Exception as e:  # noqa: BLE001 - refused by the compiler or at launch: recorded
                row["candidates"].append(dict(label=label, kernel=kernel, defines=d,
                                              error=f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"))
        ok = sorted((c for c in row["candidates"] if "us" in c), key=lambda c: c["us"])
        for c in ok[: args.top]:
            frac = nbytes / (c["us"] * 1e-6) / 1e9 / args.copy_gb_s
            print(f"  {c['label']:34s} {c['us']:8.2f} us  x{best_base / c['us']:.3f} best baseline  "
                  f"{frac:6.1%} of copy", flush=True)
        rows.append(row)
        if args.json:  # written after every case: a run cut short keeps what it measured
            with open(args.json, "w") as f:
                json.dump(dict(copy_gb_s=args.copy_gb_s, sms=sms, rows=rows), f, indent=1)
        torch.cuda.empty_cache()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default=None)
    ap.add_argument("--whole", action="store_true",
                    help="rows past one_pass_max: only the whole-row candidates and the wrapper's own config")
    ap.add_argument("--pieces", action="store_true", help="the pieces kernels' candidates (module docstring)")
    ap.add_argument("--misses", action="store_true",
                    help="issue 17's losing shapes (MISSES): every candidate, built with --jobs, timed vs torch")
    ap.add_argument("--jobs", type=int, default=12, help="--misses: worker processes that build the kernels")
    ap.add_argument("--budget-s", type=float, default=220.0,
                    help="--misses: stop starting new cases after this many seconds (building included)")
    ap.add_argument("--top", type=int, default=8, help="--misses: candidates printed per case (all go to --json)")
    ap.add_argument("--no-compile", action="store_true", help="--misses: leave torch.compile out")
    ap.add_argument("--cases", default="", help='--misses: these cases instead of MISSES, e.g. '
                    '"layer_norm:T=32768,N=896;silu_and_mul:T=1,N=29568"')
    ap.add_argument("--lean", action="store_true", help="--misses: fewer norm candidates (`lean`)")
    ap.add_argument("--lib-only", action="store_true", help="--misses: only the library's own call vs torch")
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    if args.misses:
        if args.json is None and os.environ.get("OUT"):
            args.json = os.path.join(os.environ["OUT"], "sweep_rows_misses.json")
        return 0 if run_misses(args) is not None else 1
    copy = copy_bandwidth()
    print(f"{torch.cuda.get_device_name(0)}; copy bandwidth {copy:.0f} GB/s", flush=True)
    rows = []
    if args.pieces:
        rows = run_pieces(only, copy)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(copy_gb_s=copy, rows=rows), f, indent=1)
        return 0
    for name, m, n, nbytes, ins, ref, outs in cases():
        if only and name not in only:
            continue
        want = ref()
        want = want if isinstance(want, tuple) else (want,)
        t_eager, _ = bench(ref)
        t_comp, _ = bench(lambda f=torch.compile(ref): f())
        print(f"\n{name} {m}x{n}: torch {t_eager:.4f} ms, compile {t_comp:.4f} ms "
              f"({nbytes / t_comp / 1e6 / copy:.1%} of copy)", flush=True)
        one = n <= 16384
        wide = whole_row_configs(n) if name == "softmax" and not one else []
        if args.whole and not wide:
            continue
        cands = configs(n, one) + wide
        if args.whole:
            mine = L.row_config(n, m, torch.cuda.get_device_properties(0).multi_processor_count,
                                threads_per_sm=768, stages=3)
            cands = [("wrapper (chunked)", mine)] + wide
        for label, cfg in cands:
            try:
                mod = L.load(name, kernel=name, T="bf16", **cfg)
            except Exception as e:  # noqa: BLE001 - a config that does not compile is reported, not fatal
                print(f"  {label:22s} compile failed: {str(e).splitlines()[0]}")
                continue
            o = outs()
            run = lambda o=o, mod=mod: L.run(mod, name, *ins, *o)
            run()
            torch.cuda.synchronize()
            err = max(rel(a, b) for a, b in zip(o, want))
            t, _ = bench(run)
            frac = nbytes / t / 1e6 / copy
            rows.append(dict(kernel=name, shape=f"{m}x{n}", config=label, defines=cfg, ms=t, err=err,
                             copy_frac=frac, torch_ms=t_eager, compile_ms=t_comp))
            print(f"  {label:22s} {t:8.4f} ms  {frac:6.1%} of copy  torch/x {t_eager / t:5.2f}  "
                  f"compile/x {t_comp / t:5.2f}  err {err:.1e}{'  BAD' if err > 2e-2 else ''}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(copy_gb_s=copy, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""attention_decode over bench_shapes.py's decode family: splits x tiles, the combine's cost, occupancy, host time.

    python benchmarks/bench_attention_decode.py [--shapes quick|grid|NAME,...] [--budget-s 80] [--jobs 16]
                                                [--no-sweep] [--tiles BNxWxS,...] [--diag NAME,...|long]
                                                [--json OUT.json] [--list]

For each shape (batch, context, query / KV heads, head size; a paged bf16 cache of 16-token blocks in a shuffled
order, every sequence `ctx` tokens, as bench_shapes.py builds it) this times, as CUDA-graph replay medians
(bench_shapes.gpu_ms; the sweep's candidates with 25 ms graphs instead of 60) in one process with the copy
bandwidth (bench_shapes.copy_bandwidth):
- SDPA over the gathered, contiguous KV (enable_gqa): bench_shapes.py's baseline for the family;
- tilex.stdlib.attention_decode as shipped (its own split count and tiles);
- for the `--diag` shapes, the wrapper's plan over two other layouts of the same bytes (an identity block table;
  a head-major cache of one KV head per sequence): what the gather and the interleaved heads cost (layouts());
- unless --no-sweep: candidate (num_splits, BN / WARPS / STAGES) pairs (`TILES`, see candidates()): each tile at
  the most shares that run in one wave of its program slots, every tile at the wrapper's split count, then each
  at 2-3 waves, 1, 2, 4 and the wrapper's count, in that priority order while the shape's share of `--budget-s`
  lasts;
- the combine kernel alone at the wrapper's split count (its launch and run inside a graph: what a second
  kernel costs);
- the wrapper's host time per eager call (median of single calls, the launch queue drained every 50) and SDPA's.
Every configuration is checked against SDPA in f32 first (max |err| / max |ref| <= 2e-2, printed as PASS/FAIL
with the error); a failing one is never timed, and the exit status is 1 when any failed.
Each line gives ms, GB/s of the bytes bench_shapes counts (q, o and the sequences' K/V), the fraction of the copy
bandwidth, the ratio SDPA / tilex (> 1: tilex faster), and for tilex the split kernel's resident blocks per SM
and registers (from the driver) and its shared memory. `--json` (default $OUT/bench_attention_decode.json when
$OUT is set) holds every row.
"""
from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_shapes import copy_bandwidth, gpu_ms, rel_err  # noqa: E402

BS = 16
# (B, ctx, Hq, Hkv, D): bench_shapes' decode family (DECODE x CONFIGS), the shapes that lost first
SHAPES = {
    "b16-32k-12/2": (16, 32768, 12, 2, 128), "b16-4k-40/8": (16, 4096, 40, 8, 128),
    "b256-128-64/8": (256, 128, 64, 8, 128), "b1-128-32/8": (1, 128, 32, 8, 128),
    "b4-1000-28/4": (4, 1000, 28, 4, 128), "b1-4k-8/4-d256": (1, 4096, 8, 4, 256),
    "b1-32k-32/8": (1, 32768, 32, 8, 128), "b64-2k-14/2-d64": (64, 2048, 14, 2, 64),
    "b256-1k-16/8-d256": (256, 1024, 16, 8, 256), "b256-4k-32/8": (256, 4096, 32, 8, 128),
    "b16-1k-40/8": (16, 1024, 40, 8, 128), "b256-1k-14/2-d64": (256, 1024, 14, 2, 64),
}
QUICK = ("b16-32k-12/2", "b16-4k-40/8", "b256-128-64/8", "b1-128-32/8", "b4-1000-28/4", "b1-4k-8/4-d256")
# the tiles swept, in priority order: session 20's one- and two-warp blocks first (a warp holds its block's whole
# softmax state, so the key loop has no cross-warp reduction or exchange of P through shared memory), then the
# four-warp ones the plan chose among in session 19 (32 keys by 4 warps and 64 by 8 were 5-10x slower there and
# 3 stages of 64 bought nothing: left out)
TILES = [dict(BN=32, WARPS=1, STAGES=3), dict(BN=32, WARPS=1, STAGES=2), dict(BN=16, WARPS=1, STAGES=4),
         dict(BN=64, WARPS=1, STAGES=2), dict(BN=32, WARPS=2, STAGES=2), dict(BN=64, WARPS=2, STAGES=2),
         dict(BN=64, WARPS=4, STAGES=2), dict(BN=64, WARPS=4, STAGES=1), dict(BN=128, WARPS=8, STAGES=2)]
TOL = 2e-2


def bytes_moved(b, ctx, hq, hkv, d) -> int:
    """bench_shapes.bytes_moved for the family: q read, o written, each sequence's K and V read once (bf16)."""
    return 2 * b * (2 * hq * d + 2 * ctx * hkv * d)


def fits(tile, d) -> bool:
    """Whether the tile is swept at head size d: 128 keys only up to D = 128 (a ring of 256-wide rows does not fit)."""
    return not (d == 256 and tile["BN"] == 128)


def slots_per_sm(tile, hq, hkv, d) -> int:
    """Split programs an SM holds with `tile` (decode_model.resident over the compiled kernel's shared memory and the
    register table)."""
    from tilex.stdlib import attention as A
    from tilex.stdlib import decode_model as DM

    gp = max(16, 1 << max(0, hq // hkv - 1).bit_length())
    smem = A._split_smem("bf16", BS, d, gp, tuple(sorted(tile.items())))
    return DM.resident(smem, DM.regs(tile, d), 32 * tile["WARPS"]) if smem is not None else 0


def split_counts(b, hkv, ctx, rule, sms, per_sm=None) -> list:
    """1, the wrapper's count, the counts that fill k = 1..3 waves of the tile's program slots (`per_sm` an SM: the
    most programs that run in k rounds) and 2, 4 or, without `per_sm`, the counts filling k = 1..4 single slots an
    SM and the powers of two; within [1, min(64, blocks)]."""
    blocks = -(-ctx // BS)
    if per_sm:
        fill = {max(1, k * per_sm * sms // (b * hkv)) for k in (1, 2, 3)}
        extra = {2, 4}
    else:
        fill = {-(-k * sms // (b * hkv)) for k in (1, 2, 3, 4)}
        extra = {2, 4, 8, 16, 32}
    return sorted(n for n in {1, rule} | fill | extra if 1 <= n <= min(64, blocks))


def candidates(shape, rule, rule_cfg, sms) -> list:
    """(splits, tiles) in priority order: each tile at the most shares that run in one wave of its program slots
    (the rule's tiles first), then every tile at the rule's count, then each at the counts of 2-3 waves, 1 and the
    rule's; with a table of at most decode_model.STATIC_TOKENS, first each tile as one share with q streamed (QS)."""
    from tilex.stdlib import decode_model as DM

    b, ctx, hq, hkv, d = shape
    tiles = [t for t in TILES if fits(t, d)]
    base = dict(BN=rule_cfg["BN"], WARPS=rule_cfg["WARPS"], STAGES=rule_cfg["STAGES"])
    counts = {tuple(sorted(t.items())): split_counts(b, hkv, ctx, rule, sms, slots_per_sm(t, hq, hkv, d))
              for t in [base] + tiles}
    blocks = -(-ctx // BS)

    def fill1(t):
        return min(64, blocks, max(1, slots_per_sm(t, hq, hkv, d) * sms // (b * hkv)))
    out = [(fill1(t), t) for t in [base] + tiles] + [(rule, t) for t in tiles]
    if -(-ctx // BS) * BS <= DM.STATIC_TOKENS:  # one share walks the whole table: q streamed with K, V (QS) too
        out = out[:1] + [(1, dict(t, QS=True)) for t in [base] + tiles] + out[1:]
    for t in [base] + tiles:
        out += [(n, t) for n in counts[tuple(sorted(t.items()))]]
    seen, uniq = set(), []
    for n, t in out:
        key = (n, tuple(sorted(t.items())))
        if key not in seen:
            seen.add(key)
            uniq.append((n, t))
    return uniq


def _compile(job):
    """Worker: the cubin of one attention_decode kernel for sm_90a, into the shared cache."""
    kernel, defines = job
    from tilex.stdlib import _launch as L

    try:
        L.load("attention_decode", kernel=kernel, **defines).kernel(kernel).cubin_for("sm_90a")
        return None
    except Exception as e:  # noqa: BLE001 - reported; the configuration fails its check later
        return f"{kernel} {defines}: {type(e).__name__}: {str(e).splitlines()[0][:160]}"


def jobs_for(shapes, sweep: bool) -> list:
    from tilex.stdlib import attention as A
    from tilex.stdlib import decode_model as DM

    jobs = []
    for shape in shapes:
        b, ctx, hq, hkv, d = shape
        maxb = -(-ctx // BS)
        pl = A.decode_plan(b, hq, hkv, d, maxb, BS)
        rule, cfg = pl.splits, dict(pl.config, QS=pl.qs)
        gp = max(16, 1 << max(0, hq // hkv - 1).bit_length())
        for n, t in (candidates(shape, rule, cfg, 132) if sweep
                     else [(rule, {k: v for k, v in cfg.items() if k != "STATIC"})]):
            static = n == 1 and maxb * BS <= DM.STATIC_TOKENS
            t = dict(t)
            kname = "attention_decode_split_qs" if t.pop("QS", False) else "attention_decode_split"
            jobs.append((kname, dict(T="bf16", BS=BS, D=d, GP=gp, DIRECT=n == 1, STATIC=static, **t)))
            if n > 1:
                nsp = 1 << max(0, n - 1).bit_length()
                jobs.append(("attention_decode_combine", dict(T="bf16", D=d, NSP=nsp,
                                                              WARPS=8 if nsp * d >= 8192 else 4)))
    seen, uniq = set(), []
    for k, dfs in jobs:
        key = (k, tuple(sorted(dfs.items())))
        if key not in seen:
            seen.add(key)
            uniq.append((k, dfs))
    return uniq


def layouts(name, shape, measure, q, kc, vc, ns, cfg):
    """The wrapper's plan (`ns` shares, `cfg` tiles) over two other layouts of the same bytes, to tell the gather's
    cost from the kernel's: 'identity table' (each sequence's blocks in order: its K, V are one contiguous run of
    its Hkv heads' rows); 'head-major' (a cache of B * Hkv sequences of one KV head each, [blocks, BS, 1, D]: every
    program reads whole 4 KB blocks of its own, none interleaved with another head's rows; the same programs, q's
    G heads over each). Each checked against SDPA over its own gathered K/V first."""
    import torch
    import torch.nn.functional as F

    b, ctx, hq, hkv, d = shape
    nblk = -(-ctx // BS)
    g = hq // hkv
    lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
    tid = torch.arange(b * nblk, dtype=torch.int32, device="cuda").view(b, nblk)
    kk = kc[tid.long()].reshape(b, nblk * BS, hkv, d)[:, :ctx].transpose(1, 2)
    vv = vc[tid.long()].reshape(b, nblk * BS, hkv, d)[:, :ctx].transpose(1, 2)
    ref = F.scaled_dot_product_attention(q[:, :, None].float(), kk.float(), vv.float(), enable_gqa=True)[:, :, 0]
    del kk, vv
    measure(f"layout: identity table NS={ns}", ns, cfg and {k: cfg[k] for k in ("BN", "WARPS", "STAGES")},
            (q, kc, vc, tid, lens), ref)
    del ref
    gen = torch.Generator(device="cuda").manual_seed(99)
    kh = torch.randn(b * hkv * nblk, BS, 1, d, device="cuda", generator=gen).to(torch.bfloat16)
    vh = torch.randn(b * hkv * nblk, BS, 1, d, device="cuda", generator=gen).to(torch.bfloat16)
    th = torch.randperm(b * hkv * nblk, device="cuda", generator=gen).to(torch.int32).view(b * hkv, nblk)
    qh = q.reshape(b * hkv, g, d)
    lh = torch.full((b * hkv,), ctx, dtype=torch.int32, device="cuda")
    kk = kh[th.long()].reshape(b * hkv, nblk * BS, 1, d)[:, :ctx].transpose(1, 2)
    vv = vh[th.long()].reshape(b * hkv, nblk * BS, 1, d)[:, :ctx].transpose(1, 2)
    ref = F.scaled_dot_product_attention(qh[:, :, None].float(), kk.float(), vv.float(), enable_gqa=True)[:, :, 0]
    del kk, vv
    measure(f"layout: head-major NS={ns}", ns, cfg and {k: cfg[k] for k in ("BN", "WARPS", "STAGES")},
            (qh, kh, vh, th, lh), ref)
    del kh, vh, ref
    torch.cuda.empty_cache()


class Occupancy:
    """Resident blocks per SM and registers of a loaded kernel, from the driver (ctypes)."""

    def __init__(self):
        try:
            self.cu = ctypes.CDLL("libcuda.so.1")
        except OSError:
            self.cu = None

    def __call__(self, kern, threads: int, smem: int):
        if self.cu is None:
            return None, None
        try:
            fn = ctypes.c_void_p(int(kern._function(0).ptr))
            n, regs = ctypes.c_int(0), ctypes.c_int(0)
            self.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), fn, threads, ctypes.c_size_t(smem))
            self.cu.cuFuncGetAttribute(ctypes.byref(regs), 4, fn)  # CU_FUNC_ATTRIBUTE_NUM_REGS
            return int(n.value), int(regs.value)
        except Exception:  # noqa: BLE001 - informational only
            return None, None


def sweep_ms(fn, rep: int = 25) -> float:
    """bench_shapes.gpu_ms with graphs of `rep` ms instead of 60 (the sweep's candidates: more of them per budget;
    the wrapper and SDPA keep gpu_ms)."""
    import torch
    from triton.testing import do_bench_cudagraph

    fn()
    torch.cuda.synchronize()
    with torch.cuda.stream(torch.cuda.Stream()):
        fn()
        return float(do_bench_cudagraph(fn, rep=rep, return_mode="median"))


def host_us(fn, calls: int = 200) -> float:
    """Median wall time of one eager call without synchronizing (the queue drained every 50 calls)."""
    import torch

    fn()
    torch.cuda.synchronize()
    ts = []
    for i in range(calls):
        if i % 50 == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(ts) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="quick", help="quick, grid (all of SHAPES) or comma-separated names")
    ap.add_argument("--budget-s", type=float, default=80.0, help="seconds for the timing phase, shared by shapes")
    ap.add_argument("--jobs", type=int, default=16, help="compile workers")
    ap.add_argument("--no-sweep", action="store_true", help="only SDPA, the wrapper and the combine")
    ap.add_argument("--json", default=None)
    ap.add_argument("--tiles", default="",
                    help="the tiles swept instead of TILES, as BNxWARPSxSTAGES,... (e.g. 64x4x3,64x4x2)")
    ap.add_argument("--diag", default="",
                    help="shapes (comma-separated names, or 'long': those moving >= 64 MB) whose wrapper plan also runs "
                         "over the two other cache layouts (see layouts())")
    ap.add_argument("--list", action="store_true", help="print the shapes and candidates, then exit (no GPU)")
    args = ap.parse_args(argv)
    names = (QUICK if args.shapes == "quick" else tuple(SHAPES) if args.shapes == "grid"
             else tuple(s.strip() for s in args.shapes.split(",") if s.strip()))
    bad = [n for n in names if n not in SHAPES]
    if bad:
        ap.error(f"--shapes: unknown {bad} (known: {', '.join(SHAPES)})")
    shapes = [SHAPES[n] for n in names]
    if args.tiles:
        try:
            TILES[:] = [dict(zip(("BN", "WARPS", "STAGES"), (int(x) for x in t.split("x"))))
                        for t in args.tiles.split(",") if t.strip()]
        except ValueError:
            ap.error(f"--tiles: expected BNxWARPSxSTAGES,..., got {args.tiles!r}")
        if not TILES or any(len(t) != 3 for t in TILES):
            ap.error(f"--tiles: expected BNxWARPSxSTAGES,..., got {args.tiles!r}")
    diag = ({n for n in names if bytes_moved(*SHAPES[n]) >= 64e6} if args.diag == "long"
            else {x.strip() for x in args.diag.split(",") if x.strip()})
    from tilex.stdlib import attention as A

    if args.list:
        for n, s in zip(names, shapes):
            maxb = -(-s[1] // BS)
            pl = A.decode_plan(s[0], s[2], s[3], s[4], maxb, BS)
            cands = candidates(s, pl.splits, pl.config, 132)
            print(f"{n:<20} {s}  plan {pl.splits} splits {pl.config}{' QS' if pl.qs else ''} ({pl.us:.1f} us, {pl.resident}/SM); "
                  f"{len(cands)} candidates; {bytes_moved(*s) / 1e6:.1f} MB")
        print(f"{len(jobs_for(shapes, not args.no_sweep))} kernels to build")
        return 0

    import torch
    import torch.nn.functional as F
    from concurrent.futures import ProcessPoolExecutor

    import tilex.stdlib as S
    from tilex.stdlib import _launch as L

    t0 = time.time()
    jobs = jobs_for(shapes, not args.no_sweep)
    with ProcessPoolExecutor(args.jobs) as ex:
        errs = [e for e in ex.map(_compile, jobs) if e]
    print(f"built {len(jobs)} kernels in {time.time() - t0:.0f} s; {len(errs)} refused", flush=True)
    for e in errs:
        print("  refused:", e, flush=True)
    copy = copy_bandwidth()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"GPU {torch.cuda.get_device_name()}, {sms} SMs, copy {copy:.0f} GB/s", flush=True)
    occ = Occupancy()
    seen_split: list = []
    real_load = L.load

    def spy(name, **kw):
        if kw.get("kernel") in ("attention_decode_split", "attention_decode_split_qs"):
            seen_split.append(kw)
        return real_load(name, **kw)
    L.load = spy
    rows, failed = [], 0
    end = time.time() + args.budget_s
    for i, (name, shape) in enumerate(zip(names, shapes)):
        b, ctx, hq, hkv, d = shape
        deadline = time.time() + max(0.0, end - time.time()) / (len(shapes) - i)
        g = torch.Generator(device="cuda").manual_seed(1234 + i)
        nblk = -(-ctx // BS)
        q = torch.randn(b, hq, d, device="cuda", generator=g).to(torch.bfloat16)
        kc = torch.randn(b * nblk, BS, hkv, d, device="cuda", generator=g).to(torch.bfloat16)
        vc = torch.randn(b * nblk, BS, hkv, d, device="cuda", generator=g).to(torch.bfloat16)
        table = torch.randperm(b * nblk, device="cuda", generator=g).to(torch.int32).view(b, nblk)
        lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
        kk = kc[table.long()].reshape(b, nblk * BS, hkv, d)[:, :ctx].transpose(1, 2).contiguous()
        vv = vc[table.long()].reshape(b, nblk * BS, hkv, d)[:, :ctx].transpose(1, 2).contiguous()
        qq = q[:, :, None, :]
        ref = F.scaled_dot_product_attention(qq.float(), kk.float(), vv.float(), enable_gqa=True)[:, :, 0]
        nbytes = bytes_moved(*shape)
        sdpa = gpu_ms(lambda: F.scaled_dot_product_attention(qq, kk, vv, enable_gqa=True))
        pl = A.decode_plan(b, hq, hkv, d, nblk, BS, "bf16", sms)
        rule, rule_cfg = pl.splits, pl.config
        gbs = lambda ms: nbytes / (ms * 1e-3) / 1e9  # noqa: E731
        print(f"\n{name}: B={b} ctx={ctx} Hq={hq} Hkv={hkv} D={d}, {nbytes / 1e6:.1f} MB; SDPA {sdpa:.4f} ms "
              f"{gbs(sdpa):.0f} GB/s {gbs(sdpa) / copy:.1%} copy; wrapper: {rule} splits {rule_cfg}, model "
              f"{pl.us / 1e3:.4f} ms", flush=True)
        row = dict(name=name, shape=shape, bytes=nbytes, sdpa_ms=sdpa, rule=rule, rule_cfg=rule_cfg, model_ms=pl.us / 1e3,
                   runs=[])

        def measure(tag, ns, cfg, inputs=None, want=None):
            nonlocal failed
            seen_split.clear()
            args_ = inputs or (q, kc, vc, table, lens)
            fn = lambda: S.attention_decode(*args_, num_splits=ns, config=cfg)  # noqa: E731
            try:
                err = rel_err(fn(), ref if want is None else want)
            except Exception as e:  # noqa: BLE001 - reported
                print(f"  {tag:<34} ERROR {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
                failed += 1
                return None
            if not err <= TOL:
                print(f"  {tag:<34} FAIL max err {err:.2e} > {TOL}", flush=True)
                failed += 1
                return None
            ms = gpu_ms(fn) if tag == "wrapper" else sweep_ms(fn)
            kw = seen_split[-1] if seen_split else {}
            res, regs, smem = None, None, None
            if kw:
                mod = real_load("attention_decode", **kw)
                spec = mod.specs[kw["kernel"]]
                smem = int(spec.smem_bytes)
                res, regs = occ(mod.kernel(kw["kernel"]), int(spec.threads), smem)
            run = dict(tag=tag, splits=ns, cfg=cfg, ms=ms, err=err, gb_s=gbs(ms), ratio=sdpa / ms, blocks_per_sm=res,
                       regs=regs, smem=smem, defines={k: v for k, v in kw.items() if k not in ("kernel",)})
            print(f"  {tag:<34} PASS err {err:.1e}  {ms:.4f} ms {gbs(ms):5.0f} GB/s {gbs(ms) / copy:6.1%} copy "
                  f"x{sdpa / ms:.3f}  {res} blk/SM {regs} regs {smem} B smem", flush=True)
            row["runs"].append(run)
            return run
        measure("wrapper", None, None)
        if name in diag:
            layouts(name, shape, measure, q, kc, vc, rule, rule_cfg)
        if rule > 1:
            nsp = 1 << max(0, rule - 1).bit_length()
            comb = real_load("attention_decode", kernel="attention_decode_combine", T="bf16", D=d, NSP=nsp,
                             WARPS=8 if nsp * d >= 8192 else 4)
            part = torch.zeros(b, hq, rule, d, device="cuda")
            lse = torch.zeros(b, hq, rule, device="cuda")
            o = torch.empty_like(q)
            row["combine_ms"] = gpu_ms(lambda: L.run(comb, "attention_decode_combine", part, lse, o))
            print(f"  combine alone ({rule} shares)           {row['combine_ms']:.4f} ms", flush=True)
        row["host_us"] = host_us(lambda: S.attention_decode(q, kc, vc, table, lens))
        row["sdpa_host_us"] = host_us(lambda: F.scaled_dot_product_attention(qq, kk, vv, enable_gqa=True))
        print(f"  host per eager call: tilex {row['host_us']:.1f} us, SDPA {row['sdpa_host_us']:.1f} us", flush=True)
        if not args.no_sweep:
            cands = candidates(shape, rule, rule_cfg, sms)
            for j, (ns, cfg) in enumerate(cands):
                if time.time() > deadline:
                    print(f"  ({len(cands) - j} candidates not timed: the shape's budget is spent)", flush=True)
                    break
                measure(f"NS={ns} BN={cfg['BN']} W={cfg['WARPS']} S={cfg['STAGES']}" + (" QS" if cfg.get("QS") else ""),
                        ns, cfg)
        ok = [r for r in row["runs"] if r["tag"] != "wrapper" and not r["tag"].startswith("layout:")]
        if ok:
            best = min(ok, key=lambda r: r["ms"])
            print(f"  best: {best['tag']} {best['ms']:.4f} ms x{best['ratio']:.3f} (wrapper "
                  f"x{row['runs'][0]['ratio'] if row['runs'] else float('nan'):.3f})", flush=True)
        rows.append(row)
        del kc, vc, kk, vv
        torch.cuda.empty_cache()
    L.load = real_load
    print("\nsummary: shape, wrapper ms, x SDPA, % copy, best candidate, x SDPA")
    for row in rows:
        w = row["runs"][0] if row["runs"] and row["runs"][0]["tag"] == "wrapper" else None
        cands = [r for r in row["runs"] if r["tag"] != "wrapper" and not r["tag"].startswith("layout:")]
        best = min(cands, key=lambda r: r["ms"]) if cands else None
        print(f"{row['name']:<20} " + (f"{w['ms']:.4f} x{w['ratio']:.3f} {w['gb_s'] / copy:6.1%}" if w else "-")
              + (f"   {best['tag']:<28} {best['ms']:.4f} x{best['ratio']:.3f}" if best else ""))
    path = args.json or (os.path.join(os.environ["OUT"], "bench_attention_decode.json") if os.environ.get("OUT")
                         else None)
    if path:
        with open(path, "w") as f:
            json.dump(dict(copy_gbs=copy, rows=rows), f, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Sweep attention_prefill / attention_decode kernels and configurations at the grid's attention shapes (H200).

    python benchmarks/sweep_attention.py [--only prefill|decode] [--jobs 14] [--total-s 540] [--budget-s S]
                                         [--rep 20] [--probes] [--no-canary] [--json OUT.json]

The shapes are bench_shapes.py's attention rows (2026-12-01, main dc00841: prefill B128 S128 Hq32 Hkv8 0.50x cuDNN,
B32 S512 D256 0.54x, B16 S1000 Hq28 Hkv4 0.79x, B2 S8192 Hq64 0.91x, B4 S4096 Hq12 0.95x; decode B1 ctx128 0.77x
SDPA, B256 ctx128 0.88x, B16 ctx32768 0.88x, B4 ctx1000 0.96x, B1 ctx4096 D256 0.97x) and the tuned ones.
Prefill times three kernels: KERNEL="flash" (attention_prefill.tile: one query head per program), "gqa"
(attention_prefill_gqa.tile: the G query heads of a KV head packed into the rows of one tile, so K/V are read
once per group and a causal program walks only the keys its BM / G queries see) and, where S <= BN, "short"
(attention_prefill_short.tile: persistent, the scores one TMA + wgmma main loop over the head size whose producer
streams the next tile's Q and K while the consumers run this tile's softmax and P @ V). Decode times the streamed split
kernel's BN / WARPS / STAGES and the split count (DECODE_SPLITS and the counts that fill 1-4 program slots per SM),
and where one share walks the whole table by default (STATIC, tables <= 256 tokens) the walk to seq_len too, in a
fixed shuffled order.

Every configuration is checked against SDPA in float32 (max |err| / max |ref| <= 2e-2) before it is timed; a
wrong one is reported, never timed. Kernels are compiled first in `--jobs` worker processes (NVRTC is CPU-bound;
the cubins land in the cache directory the timing process reads). `--total-s` (default 540) bounds the whole run
and `--budget-s` the timing phase: each shape gets an equal share of what is left, the default configuration and
the new kernels' configurations are timed first, and configurations past a shape's share are listed as skipped.
Timings are CUDA-graph replay medians (triton's do_bench_cudagraph). Prints one table per shape (best six, the default's rank) and, at the end, one line
per shape: default, best, best SDPA, ratios. `--json` (default $OUT/sweep_attention.json when $OUT is set) holds
every result, error and skip; it is rewritten after every shape.

Before timing, every run of the new kernels (each shape's default, which may be one, and each "short" / "gqa"
configuration) is checked once in a child process (`--no-canary` skips it): a wrong result or a CUDA fault there
is reported and that run left out of the sweep, so one bad configuration cannot end the whole run.

`--probes` first times pieces of attention_prefill's program at the prefill shapes (benchmarks/attention_probe.tile:
Q read and O written alone; the key loop without the softmax) against torch's copy of the same bytes, to show where
a short sequence's time goes. The probes compute no attention and are not checked.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

PREFILL = [  # B, Hq, Hkv, S, D: the grid's losing shapes first
    (128, 32, 8, 128, 128), (64, 28, 4, 100, 128), (32, 8, 4, 512, 256), (16, 28, 4, 1000, 128), (2, 64, 8, 8192, 128),
    (4, 12, 2, 4096, 128), (1, 8, 4, 4096, 256), (4, 40, 8, 4096, 128), (8, 14, 2, 2048, 64),
]
PROBED = PREFILL[:4] + [(4, 12, 2, 4096, 128)]  # --probes: the shapes that lose, and a long one for scale
# the new kernels first (what this sweep is for), then the former one's space; "short" only where S <= BN
PREFILL_SPACE = (
    [dict(KERNEL="short", BM=bm, BN=bn, BK=bk, STAGES=st, PROGRAMS=p)
     for bm, bn, bk, st, p in itertools.product((64, 128), (64, 128), (64,), (1, 2, 3), (132, 264))]
    + [dict(KERNEL="gqa", BM=bm, BN=bn, WARPS=bm // 16, STAGES=st)
     for bm, bn, st in itertools.product((64, 128), (32, 64, 128), (1, 2, 3))]
    + [dict(KERNEL="flash", BM=bm, BN=bn, WARPS=w, STAGES=st)
       for bm, bn, w, st in itertools.product((64, 128), (32, 64, 128), (4, 8), (1, 2, 3)) if not (bm == 128 and w == 4)]
)
DECODE = [  # B, Hq, Hkv, ctx, D
    (1, 32, 8, 128, 128), (256, 64, 8, 128, 128), (16, 12, 2, 32768, 128), (4, 28, 4, 1000, 128),
    (1, 8, 4, 4096, 256), (16, 40, 8, 4096, 128), (1, 40, 8, 4096, 128),
]
DECODE_SPACE = [dict(BN=bn, WARPS=w, STAGES=st) for bn, w, st in itertools.product((32, 64, 128), (4, 8), (1, 2, 3, 4))]
DECODE_SPLITS = (None, 1, 2, 4, 8, 16, 32)
STATIC_TOKENS = 256  # tilex.stdlib.attention.STATIC_TOKENS: one-share tables this narrow are walked whole


def decode_splits_for(b: int, hkv: int, ctx: int, sms: int = 132) -> list:
    """DECODE_SPLITS and the counts that fill k = 1..4 program slots per SM (ceil(k * sms / (b * hkv))), each at
    most the context's 16-token blocks."""
    blocks = -(-ctx // 16)
    fill = {-(-k * sms // (b * hkv)) for k in (1, 2, 3, 4)}
    return [None] + sorted({n for n in set(DECODE_SPLITS[1:]) | fill if 1 <= n <= min(64, blocks)})


def decode_candidates(b: int, hkv: int, ctx: int) -> list:
    """(config, splits) pairs in a fixed shuffled order, so a budget cut samples the space evenly."""
    import random

    cands = [(c, ns) for ns, c in itertools.product(decode_splits_for(b, hkv, ctx), DECODE_SPACE)]
    if -(-ctx // 16) * 16 <= STATIC_TOKENS:  # one share walks the whole table by default there: A/B it
        cands += [(dict(c, STATIC=False), 1) for c in DECODE_SPACE]
    random.Random(0).shuffle(cands)
    return cands


def prefill_candidates(s: int) -> list:
    """PREFILL_SPACE's configurations that take sequence length s (the short kernel's key block holds S)."""
    return [c for c in PREFILL_SPACE if c["KERNEL"] != "short" or s <= c["BN"]]


def _group_rows(hq: int, hkv: int) -> int:
    """attention_decode's GP: the group's query heads rounded up to a power of two, at least 16."""
    return max(16, 1 << max(0, hq // hkv - 1).bit_length())


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


def compile_jobs(only: str | None) -> list:
    """Every (file, kernel, defines) the timing phase loads, each once."""
    from tilex.stdlib.attention import PREFILL_KERNELS

    jobs = []
    if only != "decode":
        for (_, hq, hkv, s, d) in PREFILL:
            for cfg in map(dict, prefill_candidates(s)):
                name = PREFILL_KERNELS[cfg.pop("KERNEL")]
                if name.endswith("_gqa"):
                    cfg["G"] = hq // hkv
                jobs.append((name, name, dict(T="bf16", D=d, CAUSAL=True, **cfg)))
    if only != "prefill":
        for (_, hq, hkv, ctx, d), cfg in itertools.product(DECODE, DECODE_SPACE):
            narrow = -(-ctx // 16) * 16 <= STATIC_TOKENS
            for direct, static in ((True, False), (False, False)) + (((True, True),) if narrow else ()):
                jobs.append(("attention_decode", "attention_decode_split",
                             dict(T="bf16", BS=16, D=d, GP=_group_rows(hq, hkv), DIRECT=direct, STATIC=static,
                                  **cfg)))
    seen, uniq = set(), []
    for j in jobs:
        key = (j[0], j[1], tuple(sorted(j[2].items())))
        if key not in seen:
            seen.add(key)
            uniq.append(j)
    return uniq


def precompile(jobs, workers: int) -> None:
    t0 = time.time()
    with ProcessPoolExecutor(workers) as ex:
        errs = [e for e in ex.map(_compile, jobs) if e]
    print(f"compiled {len(jobs)} kernels in {time.time() - t0:.0f} s ({len(errs)} refused: shared memory or "
          f"registers)", flush=True)
    for e in errs[:20]:
        print("   refused:", e, flush=True)


class Budget:
    """Seconds left for timing, shared out equally over the shapes still to run."""

    def __init__(self, seconds: float | None, shapes: int):
        self.end = None if seconds is None else time.time() + seconds
        self.shapes = shapes

    def shape_deadline(self) -> float | None:
        if self.end is None:
            return None
        now = time.time()
        share = max(0.0, self.end - now) / max(1, self.shapes)
        self.shapes -= 1
        return now + share


def probes(ms_of, faulty: dict) -> list:
    """Time attention_probe.tile's kernels and attention_prefill's default at the PROBED shapes, with torch's
    copy of Q into O (the same bytes as probe_qo) and the megabytes each tensor pair moves."""
    import pathlib

    import torch

    import tilex
    import tilex.stdlib as S

    path = str(pathlib.Path(__file__).with_name("attention_probe.tile"))
    out = []
    for b, hq, hkv, s, d in PROBED:
        torch.manual_seed(0)
        q = torch.randn(b * hq, s, 1, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b * hkv, s, 1, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        o = torch.empty_like(q)
        qo_mb = 2 * q.numel() * 2 / 1e6
        row = dict(shape=[b, hq, hkv, s, d], qo_mb=qo_mb, kv_mb=2 * k.numel() * 2 / 1e6)
        row["torch_copy"] = ms_of(lambda: o.copy_(q))
        for bm in (64, 128):
            try:
                mod = tilex.compile(path, BM=bm, D=d, WARPS=bm // 16)
                row[f"probe_qo BM{bm}"] = ms_of(lambda mod=mod: mod.probe_qo(q, o))
            except Exception as e:  # noqa: BLE001 - reported
                row[f"probe_qo BM{bm}"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        try:
            mod = tilex.compile(path, BM=128, BN=64, D=d, WARPS=8)
            row["probe_nosoftmax"] = ms_of(lambda: mod.probe_nosoftmax(q, k, v, o))
        except Exception as e:  # noqa: BLE001 - reported
            row["probe_nosoftmax"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        q4, k4, v4 = (x.view(b, -1, s, d) for x in (q, k, v))
        if (PREFILL.index((b, hq, hkv, s, d)), 0) not in faulty:  # the default passed the canary
            row["attention_prefill"] = ms_of(lambda: S.attention_prefill(q4, k4, v4, causal=True))
        print("probe", " ".join(f"{key}={val:.4f}" if isinstance(val, float) else f"{key}={val}"
                                for key, val in row.items()), flush=True)
        out.append(row)
        del q, k, v, o
    return out


NEW_KERNELS = ("short", "gqa")  # checked in a child process first: a fault there cannot end the sweep


def canary_list() -> list:
    """(shape index, candidate index) of every prefill run the canary checks: each shape's default (which may
    be a new kernel) and every configuration of a new kernel, in the order the sweep runs them."""
    out = []
    for i, (_, _, _, s, _) in enumerate(PREFILL):
        for j, c in enumerate([None] + prefill_candidates(s)):
            if c is None or c["KERNEL"] in NEW_KERNELS:
                out.append((i, j))
    return out


def canary_child(start: int) -> int:
    """Run canary_list()[start:] once each against SDPA, printing `CANARY i j ok|bad err` per run (flushed), so
    the parent knows where a fault stopped it."""
    import torch
    import torch.nn.functional as F

    import tilex.stdlib as S

    todo = canary_list()[start:]
    tensors = {}
    for i, j in todo:
        b, hq, hkv, s, d = PREFILL[i]
        if i not in tensors:
            tensors.clear()
            torch.manual_seed(0)
            q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True)
            tensors[i] = (q, k, v, ref)
        q, k, v, ref = tensors[i]
        cfg = ([None] + prefill_candidates(s))[j]
        try:
            o = S.attention_prefill(q, k, v, causal=True, config=cfg)
            torch.cuda.synchronize()
            err = float((o.double() - ref.double()).abs().max() / ref.double().abs().max())
            print(f"CANARY {i} {j} {'ok' if err <= 2e-2 else 'bad'} {err:.3e}", flush=True)
        except Exception as e:  # noqa: BLE001 - a refusal (shared memory) is reported, not a fault
            print(f"CANARY {i} {j} bad {type(e).__name__}: {str(e).splitlines()[0][:100]}", flush=True)
            if "CUDA" in str(e) or "illegal" in str(e):  # the context is lost: the parent restarts after it
                return 3
    return 0


def canary(timeout_s: float = 240.0) -> dict:
    """{(shape index, candidate index): why} for the canary runs that were wrong or faulted, each fault in a
    fresh child process (the sweep then skips them)."""
    import subprocess

    todo = canary_list()
    bad, start, t0, faults = {}, 0, time.time(), 0
    while start < len(todo) and time.time() - t0 < timeout_s:
        if faults >= 8:  # something is broken beyond one configuration: leave the rest out
            bad.update((t, "canary stopped after 8 faults") for t in todo[start:])
            break
        proc = subprocess.run([sys.executable, __file__, "--canary-child", str(start)], capture_output=True,
                              text=True, timeout=max(10.0, timeout_s - (time.time() - t0)))
        done = [ln.split(maxsplit=4) for ln in proc.stdout.splitlines() if ln.startswith("CANARY ")]
        for _, i, j, verdict, why in done:
            if verdict != "ok":
                bad[(int(i), int(j))] = why
        start += len(done)
        faults += proc.returncode != 0
        if proc.returncode == 3:  # the last reported run faulted (reported bad): restart after it
            continue
        if proc.returncode != 0 and start < len(todo):  # the next run killed the child unreported: skip it
            bad[todo[start]] = f"fault (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}"
            start += 1
        elif proc.returncode != 0:
            break
    bad.update((t, "canary ran out of time") for t in todo[start:] if t not in bad)
    print(f"canary: {len(todo)} runs of the new kernels checked in {time.time() - t0:.0f} s, {len(bad)} wrong "
          f"or faulted", flush=True)
    for (i, j), why in list(bad.items())[:30]:
        print(f"   canary: prefill {PREFILL[i]} {([None] + prefill_candidates(PREFILL[i][3]))[j]}: {why}", flush=True)
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("prefill", "decode"))
    ap.add_argument("--jobs", type=int, default=12, help="compile worker processes")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="seconds for the timing phase (default: what --total-s leaves)")
    ap.add_argument("--total-s", type=float, default=540.0,
                    help="wall-clock seconds for the whole run, compiles included (default 540: a 600 s device call)")
    ap.add_argument("--rep", type=int, default=20, help="milliseconds of replays per timing")
    ap.add_argument("--probes", action="store_true", help="time attention_probe.tile's pieces first")
    ap.add_argument("--no-canary", action="store_true", help="skip the child-process check of the new kernels")
    ap.add_argument("--canary-child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.canary_child is not None:
        return canary_child(args.canary_child)
    t_start = time.time()
    precompile(compile_jobs(args.only), args.jobs)
    faulty = {} if args.no_canary or args.only == "decode" else canary()

    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench_cudagraph

    import tilex.stdlib as S

    def ms_of(fn):
        fn()
        with torch.cuda.stream(torch.cuda.Stream()):
            fn()
            return float(do_bench_cudagraph(fn, rep=args.rep, return_mode="median"))

    def rel(a, b):
        return float((a.double() - b.double()).abs().max() / b.double().abs().max())

    def sweep(label, cands, run, ref, deadline):
        """[(cand, ms or None, error or None)] for every candidate: checked, then timed, until the deadline."""
        res = []
        for i, cand in enumerate(cands):
            if deadline is not None and i > 0 and time.time() > deadline:
                res.extend((c, None, "skipped (budget)") for c in cands[i:])
                break
            try:
                err = rel(run(cand), ref)
                if not err <= 2e-2:
                    res.append((cand, None, f"rel err {err:.2e}"))
                    continue
                res.append((cand, ms_of(lambda c=cand: run(c)), None))
            except Exception as e:  # noqa: BLE001 - reported per candidate
                res.append((cand, None, f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"))
        return res

    def report(label, base, res, fmt):
        ok = sorted((r for r in res if r[1]), key=lambda r: r[1])
        best_base = min(base.values()) if base else float("nan")
        dflt = res[0]
        rank = next((i for i, r in enumerate(ok) if r[0] is dflt[0]), None)
        skipped = sum(1 for r in res if r[2] == "skipped (budget)")
        bad = [r for r in res if r[2] and r[2] != "skipped (budget)"]
        print(f"{label}: sdpa {', '.join(f'{k} {v:.4f}' for k, v in base.items())}  default "
              f"{dflt[1] if dflt[1] is None else round(dflt[1], 4)} {dflt[2] or ''} (rank {rank}); "
              f"{len(ok)} timed, {skipped} skipped, {len(bad)} failed  [{time.time() - t_start:.0f} s]", flush=True)
        for cand, ms, _ in ok[:6]:
            print(f"   {ms:.4f} ms  x{best_base / ms:.3f}  {fmt(cand)}", flush=True)
        for cand, _, e in bad[:4]:
            print(f"   FAILED {fmt(cand)}: {e}", flush=True)
        best = ok[0] if ok else (None, None, None)
        return dict(label=label, sdpa_best=best_base, default_ms=dflt[1], best_ms=best[1], best=fmt(best[0]))

    rows, summary = [], []
    if args.probes and args.only != "decode":
        rows.append(dict(kind="probes", results=probes(ms_of, faulty)))
    shapes = (0 if args.only == "decode" else len(PREFILL)) + (0 if args.only == "prefill" else len(DECODE))
    left = args.total_s - (time.time() - t_start) - 15.0
    budget = Budget(left if args.budget_s is None else min(args.budget_s, left), shapes)
    print(f"timing {shapes} shapes in {budget.end - time.time():.0f} s", flush=True)
    path = args.json or (os.path.join(os.environ["OUT"], "sweep_attention.json") if os.environ.get("OUT") else None)

    def save():  # after every shape: a run cut short still leaves what it measured
        if path:
            with open(path, "w") as f:
                json.dump(dict(rows=rows, summary=summary, seconds=time.time() - t_start), f, indent=1)

    n = 0
    if args.only != "decode":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        for b, hq, hkv, s, d in PREFILL:
            n += 1
            label = f"[{n}/{shapes}] prefill B{b} Hq{hq} Hkv{hkv} S{s} D{d}"
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
                except Exception:  # noqa: BLE001 - a backend that does not take the shape
                    pass
            cands = [None] + prefill_candidates(s)
            skip = {j for (i, j) in faulty if i == n - 1}
            if 0 in skip:
                print(f"{label}: the default faulted or was wrong in the canary ({faulty[(n - 1, 0)]}): shape "
                      f"skipped", flush=True)
                rows.append(dict(kind="prefill", shape=[b, hq, hkv, s, d], error=faulty[(n - 1, 0)]))
                continue
            res = sweep(label, [c for j, c in enumerate(cands) if j not in skip],
                        lambda c: S.attention_prefill(q, k, v, causal=True, config=c), ref, budget.shape_deadline())
            res += [(cands[j], None, f"canary: {faulty[(n - 1, j)]}") for j in sorted(skip)]
            summary.append(report(label, base, res, lambda c: "default" if c is None else str(c)))
            rows.append(dict(kind="prefill", shape=[b, hq, hkv, s, d], sdpa=base,
                             results=[dict(config=c, ms=m, error=e) for c, m, e in res]))
            save()
            del q, k, v, ref
    if args.only != "prefill":
        for b, hq, hkv, ctx, d in DECODE:
            n += 1
            label = f"[{n}/{shapes}] decode B{b} Hq{hq} Hkv{hkv} ctx{ctx} D{d}"
            torch.manual_seed(0)
            bs, nblk = 16, -(-ctx // 16)
            q = torch.randn(b, hq, d, device="cuda", dtype=torch.bfloat16)
            kc, vc = (torch.randn(b * nblk, bs, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            table = torch.randperm(b * nblk, device="cuda").to(torch.int32).view(b, nblk)
            lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
            kk = kc[table.long()].reshape(b, nblk * bs, hkv, d)[:, :ctx].transpose(1, 2).contiguous()
            vv = vc[table.long()].reshape(b, nblk * bs, hkv, d)[:, :ctx].transpose(1, 2).contiguous()
            ref = F.scaled_dot_product_attention(q[:, :, None].float(), kk.float(), vv.float(), enable_gqa=True)[:, :, 0]
            base = {"sdpa": ms_of(lambda: F.scaled_dot_product_attention(q[:, :, None], kk, vv, enable_gqa=True))}
            cands = [None] + decode_candidates(b, hkv, ctx)

            def run(c):
                cfg, ns = c if c is not None else (None, None)
                return S.attention_decode(q, kc, vc, table, lens, num_splits=ns, config=cfg)

            res = sweep(label, cands, run, ref, budget.shape_deadline())
            summary.append(report(label, base, res,
                                  lambda c: "default" if c is None else f"{c[0]} splits={c[1]}"))
            rows.append(dict(kind="decode", shape=[b, hq, hkv, ctx, d], sdpa=base["sdpa"],
                             results=[dict(config=None if c is None else c[0], splits=None if c is None else c[1],
                                           ms=m, error=e) for c, m, e in res]))
            save()
            del q, kc, vc, kk, vv, ref
    print("\nsummary (ratio = best SDPA / tilex):", flush=True)
    for r in summary:
        d, bst, sd = r["default_ms"], r["best_ms"], r["sdpa_best"]
        print(f"{r['label']:<44} default {d or float('nan'):.4f} x{sd / d if d else float('nan'):.3f}  best "
              f"{bst or float('nan'):.4f} x{sd / bst if bst else float('nan'):.3f}  {r['best']}", flush=True)
    save()
    if path:
        print("wrote", path, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

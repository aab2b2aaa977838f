"""tilex.stdlib over the shape families of public decoder configs, against the best of torch in one process.

    python benchmarks/bench_shapes.py [--grid quick|full] [--families linear,rms_norm,...] [--budget-s S]
                                      [--no-compile] [--json OUT.json] [--list]

The grid (`grid()`) is built from the hidden, intermediate, head and vocabulary sizes of Llama-3 8B/70B,
Qwen2.5 0.5B-72B, Mistral-7B and Gemma-2 2B/9B (`CONFIGS`) and token counts from 1 to 16384, non-powers of two
included (`TOKENS`). Families: linear (every projection of every config: qkv, o, gate_up, down, lm_head),
gated_mlp, rms_norm, fused_add_rms_norm, layer_norm, silu_and_mul, gelu_and_mul, softmax and argmax over
vocabulary rows, rope, embedding, attention_prefill (S 128-16384, head dims of the configs: 64, 128, 256) and
attention_decode (batch 1-256, context 128-32768, paged cache of 16-token blocks). `--grid quick` takes a
deterministic strided sample of every family (about 80 cases, a few minutes); `--grid full` all of it.

Each case first checks tilex against torch's reference (relative error against an f32 computation), then
times (1) GPU time: median of CUDA-graph replays (`triton.testing.do_bench_cudagraph`), and (2) eager wall
time per call: N back-to-back calls, synchronized once at the end, divided by N (what a caller without graphs
sees: host launch cost where it exceeds the GPU time). Baselines, in the same process: torch eager, the same
function under torch.compile (a fresh compile per shape; the recompile limit is raised so none falls back to
eager), cuBLAS (F.linear) and SDPA (flash and cuDNN, the faster one) where they apply. The ratio is
best baseline / tilex (> 1: tilex faster), for GPU time and for eager wall time separately. For memory-bound
families the minimum bytes moved are also given as a fraction of the copy bandwidth measured in this run.

The run ends with one line per family: cases, geometric mean and minimum GPU ratio (with the worst shape),
geometric mean eager ratio, and the worst fraction of copy among shapes moving >= 64 MB. `--budget-s` stops
starting new cases after that many seconds (the summary covers what ran). `--list` prints the grid and exits
(no GPU needed).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from typing import Callable

# ------------------------------------------------------------------------------------------- the grid


@dataclasses.dataclass(frozen=True)
class Config:
    """The sizes of one public decoder config that the kernels see."""
    name: str
    hidden: int
    inter: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int


CONFIGS = (
    Config("llama3-8b", 4096, 14336, 32, 8, 128, 128256),
    Config("llama3-70b", 8192, 28672, 64, 8, 128, 128256),
    Config("qwen2.5-0.5b", 896, 4864, 14, 2, 64, 151936),
    Config("qwen2.5-1.5b", 1536, 8960, 12, 2, 128, 151936),
    Config("qwen2.5-3b", 2048, 11008, 16, 2, 128, 151936),
    Config("qwen2.5-7b", 3584, 18944, 28, 4, 128, 152064),
    Config("qwen2.5-14b", 5120, 13824, 40, 8, 128, 152064),
    Config("qwen2.5-32b", 5120, 27648, 40, 8, 128, 152064),
    Config("qwen2.5-72b", 8192, 29568, 64, 8, 128, 152064),
    Config("mistral-7b", 4096, 14336, 32, 8, 128, 32000),
    Config("gemma2-2b", 2304, 9216, 8, 4, 256, 256000),
    Config("gemma2-9b", 3584, 14336, 16, 8, 256, 256000),
)
TOKENS = (1, 7, 16, 64, 100, 256, 511, 1024, 2048, 4096, 8192, 16384)
PREFILL_S = (128, 512, 1000, 2048, 4096, 8192, 16384)
DECODE = ((1, 128), (1, 4096), (1, 32768), (4, 1000), (16, 4096), (16, 32768), (64, 2048), (256, 128),
          (256, 1024), (256, 4096))
QUICK_PER_FAMILY = {"linear": 17, "default": 5}  # the quick grid: about 80 cases, a few minutes on an H200
VOCAB_ROWS = (1, 16, 256, 4096)
MEMORY_FAMILIES = ("rms_norm", "fused_add_rms_norm", "layer_norm", "silu_and_mul", "gelu_and_mul", "softmax",
                   "argmax", "rope", "embedding", "attention_decode")
FAMILIES = ("linear", "gated_mlp", "rms_norm", "fused_add_rms_norm", "layer_norm", "silu_and_mul",
            "gelu_and_mul", "softmax", "argmax", "rope", "embedding", "attention_prefill", "attention_decode")
MAX_BYTES = 24 << 30  # no case allocates more than this (the H200 has 141 GB; baselines allocate too)


@dataclasses.dataclass(frozen=True)
class Case:
    """One measurement: a family at one size. `sizes` names every dimension the kernel sees."""
    family: str
    config: str
    sizes: tuple  # ((name, value), ...)

    @property
    def size(self) -> dict:
        return dict(self.sizes)

    @property
    def text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.sizes)


def _case(family: str, cfg: str, **sizes) -> Case:
    return Case(family, cfg, tuple(sizes.items()))


def bytes_moved(case: Case) -> int:
    """The minimum bytes a kernel must move for `case` (bf16 tensors read once, outputs written once)."""
    s, f = case.size, case.family
    if f == "linear":
        return 2 * (s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"])
    if f == "gated_mlp":
        return 2 * (s["M"] * s["K"] + 2 * s["K"] * s["N"] + s["M"] * s["N"])
    if f in ("rms_norm", "layer_norm"):
        return 2 * (2 * s["T"] * s["N"] + s["N"])
    if f == "fused_add_rms_norm":
        return 2 * (4 * s["T"] * s["N"] + s["N"])
    if f in ("silu_and_mul", "gelu_and_mul"):
        return 2 * 3 * s["T"] * s["N"]
    if f == "softmax":
        return 2 * 2 * s["T"] * s["V"]
    if f == "argmax":
        return 2 * s["T"] * s["V"] + 8 * s["T"]
    if f == "rope":
        return 2 * 2 * s["T"] * (s["Hq"] + s["Hkv"]) * s["D"] + 8 * s["T"]
    if f == "embedding":
        return 2 * 2 * s["T"] * s["N"] + 8 * s["T"]
    if f == "attention_prefill":
        return 2 * s["B"] * s["S"] * (2 * s["Hq"] + 2 * s["Hkv"]) * s["D"]
    if f == "attention_decode":
        return 2 * s["B"] * (2 * s["Hq"] * s["D"] + 2 * s["ctx"] * s["Hkv"] * s["D"])
    raise ValueError(f"unknown family {f}")


def flops(case: Case) -> float:
    s, f = case.size, case.family
    if f == "linear":
        return 2.0 * s["M"] * s["N"] * s["K"]
    if f == "gated_mlp":
        return 4.0 * s["M"] * s["N"] * s["K"]
    if f == "attention_prefill":  # causal: half of the score matrix
        return 4.0 * s["B"] * s["Hq"] * s["S"] * s["S"] * s["D"] / 2
    return 0.0


def _full(fam: str) -> list[Case]:
    """Every case of one family over all configs, token counts and sizes."""
    out: list[Case] = []
    for c in CONFIGS:
        qkv = (c.heads + 2 * c.kv_heads) * c.head_dim
        if fam == "linear":
            projections = ((c.hidden, qkv), (c.heads * c.head_dim, c.hidden), (c.hidden, 2 * c.inter),
                           (c.inter, c.hidden), (c.hidden, c.vocab))
            out += [_case(fam, c.name, M=t, K=k, N=n) for t in TOKENS for k, n in projections
                    if not (n == c.vocab and t > 4096)]  # lm_head runs over the last token(s) only
        elif fam == "gated_mlp":
            out += [_case(fam, c.name, M=t, K=c.hidden, N=c.inter) for t in TOKENS]
        elif fam in ("rms_norm", "fused_add_rms_norm", "layer_norm"):
            out += [_case(fam, c.name, T=t, N=c.hidden) for t in TOKENS]
        elif fam in ("silu_and_mul", "gelu_and_mul"):
            out += [_case(fam, c.name, T=t, N=c.inter) for t in TOKENS]
        elif fam in ("softmax", "argmax"):
            out += [_case(fam, c.name, T=t, V=c.vocab) for t in VOCAB_ROWS]
        elif fam == "rope":
            out += [_case(fam, c.name, T=t, Hq=c.heads, Hkv=c.kv_heads, D=c.head_dim) for t in TOKENS]
        elif fam == "embedding":
            out += [_case(fam, c.name, T=t, V=c.vocab, N=c.hidden) for t in TOKENS]
        elif fam == "attention_prefill":  # batches of 16384 tokens in all (one sequence from S = 16384)
            out += [_case(fam, c.name, B=max(1, 16384 // s), S=s, Hq=c.heads, Hkv=c.kv_heads, D=c.head_dim)
                    for s in PREFILL_S]
        elif fam == "attention_decode":
            out += [_case(fam, c.name, B=b, ctx=ctx, Hq=c.heads, Hkv=c.kv_heads, D=c.head_dim)
                    for b, ctx in DECODE]
        else:
            raise ValueError(f"--families: unknown family {fam!r} (known: {', '.join(FAMILIES)})")
    seen, uniq = set(), []
    for case in out:  # configs share sizes (e.g. rms_norm at 4096): measure each size once
        if case.sizes not in seen and 3 * bytes_moved(case) <= MAX_BYTES:
            seen.add(case.sizes)
            uniq.append(case)
    return uniq


def grid(kind: str = "quick", families=FAMILIES) -> list[Case]:
    """The cases of `families`: all of them (full), or for quick an evenly strided sample of each family's
    full list (`QUICK_PER_FAMILY` cases, so configs and token counts both vary), in a stable order."""
    if kind not in ("quick", "full"):
        raise ValueError(f"--grid: expected quick or full, got {kind!r}")
    out: list[Case] = []
    for fam in families:
        every = _full(fam)
        if kind == "quick":
            want = QUICK_PER_FAMILY.get(fam, QUICK_PER_FAMILY["default"])
            stride = max(1, len(every) / want)
            every = [every[int(i * stride)] for i in range(min(want, len(every)))]
        out += every
    return out


# ------------------------------------------------------------------------------------ summary math


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summarize(rows: list[dict], copy_gbs: float | None) -> list[dict]:
    """One entry per family: cases, GPU ratio geomean/min (worst shape), eager ratio geomean, worst % of copy
    among shapes moving >= 64 MB. A row is a dict with family, case, ratio, eager_ratio, bytes, tilex_ms."""
    out = []
    for fam in FAMILIES:
        rs = [r for r in rows if r["family"] == fam and r.get("ratio")]
        if not rs:
            continue
        worst = min(rs, key=lambda r: r["ratio"])
        entry = dict(family=fam, cases=len(rs), geomean=geomean(r["ratio"] for r in rs), min=worst["ratio"],
                     worst=worst["case"], eager_geomean=geomean(r.get("eager_ratio") for r in rs),
                     errors=sum(1 for r in rows if r["family"] == fam and r.get("error")))
        big = [r for r in rs if r["bytes"] >= 64 << 20]
        if fam in MEMORY_FAMILIES and big and copy_gbs:
            frac = [(r["bytes"] / (r["tilex_ms"] * 1e-3) / 1e9 / copy_gbs, r["case"]) for r in big]
            entry["min_copy_fraction"], entry["min_copy_case"] = min(frac)
        out.append(entry)
    return out


def summary_lines(summary: list[dict]) -> list[str]:
    lines = [f"{'family':<20} {'cases':>5} {'geomean':>8} {'min':>6}  {'eager gm':>8}  {'min %copy':>9}  worst"]
    for e in summary:
        copy = f"{100 * e['min_copy_fraction']:8.1f}%" if "min_copy_fraction" in e else f"{'-':>9}"
        lines.append(f"{e['family']:<20} {e['cases']:>5} {e['geomean']:8.3f} {e['min']:6.3f}  "
                     f"{e['eager_geomean']:8.3f}  {copy}  {e['worst']}" + (f"  ({e['errors']} failed)" if e["errors"]
                                                                         else ""))
    return lines


# ------------------------------------------------------------------------------------ GPU harness


def _torch():
    import torch
    import torch.nn.functional as F

    return torch, F


def gpu_ms(fn) -> float:
    """Median ms of CUDA-graph replays of fn (do_bench when it cannot be captured)."""
    torch, _ = _torch()
    from triton.testing import do_bench

    fn()
    torch.cuda.synchronize()
    try:
        from triton.testing import do_bench_cudagraph

        with torch.cuda.stream(torch.cuda.Stream()):
            fn()
            return float(do_bench_cudagraph(fn, rep=60, return_mode="median"))
    except Exception:  # noqa: BLE001 - not capturable: time it eagerly
        torch.cuda.synchronize()
    return float(do_bench(fn, warmup=10, rep=60, return_mode="median"))


def eager_ms(fn, target_s: float = 0.05) -> float:
    """Wall ms per call of back-to-back eager calls, synchronized once at the end (median of 5 batches)."""
    torch, _ = _torch()
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = max(time.perf_counter() - t0, 1e-6)
    n = int(min(500, max(5, target_s / one)))
    per = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) / n * 1e3)
    per.sort()
    return per[len(per) // 2]


def copy_bandwidth() -> float:
    """GB/s of a 1 GiB device-to-device copy (bytes read + written)."""
    torch, _ = _torch()
    from triton.testing import do_bench

    a = torch.empty(1 << 29, dtype=torch.float16, device="cuda")
    b = torch.empty_like(a)
    # timed eagerly, not from a CUDA graph: a captured device-to-device copy_ becomes a memcpy node that the copy
    # engine runs (2771 GB/s on the H200, twice in session 16), while an eager one runs as a kernel (~4250 GB/s)
    ms = min(float(do_bench(lambda: b.copy_(a), warmup=25, rep=100, return_mode="median")) for _ in range(2))
    return 2 * a.numel() * 2 / (ms * 1e-3) / 1e9


def rel_err(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def compiled(fn: Callable):
    """fn under torch.compile (default mode, static shapes): each case compiles its own."""
    torch, _ = _torch()
    return torch.compile(fn, dynamic=False)


def build(case: Case, compile_baselines: bool):
    """(tilex fn, {baseline name: fn}, check() -> error, tolerance) for one case; tensors on the GPU."""
    torch, F = _torch()
    import tilex.stdlib as S

    s, f = case.size, case.family
    g = torch.Generator(device="cuda").manual_seed(hash(case.sizes) & 0xFFFF)
    bf = torch.bfloat16

    def randn(*shape, scale=1.0):
        return (torch.randn(shape, generator=g, device="cuda") * scale).to(bf)

    base: dict[str, Callable] = {}
    if f in ("linear", "gated_mlp"):
        x = randn(s["M"], s["K"])
        w = randn(s["N"], s["K"], scale=s["K"] ** -0.5)
        if f == "linear":
            tx = lambda: S.linear(x, w)  # noqa: E731
            ref = lambda: F.linear(x, w)  # noqa: E731
            base["cublas"] = ref
            check = lambda: rel_err(tx(), F.linear(x.float(), w.float()))  # noqa: E731
            return tx, base, check, 2e-2
        wu = randn(s["N"], s["K"], scale=s["K"] ** -0.5)
        wgu = torch.cat([w, wu], 0)
        tx = lambda: S.gated_mlp(x, w, wu)  # noqa: E731

        def eager():
            gu = F.linear(x, wgu)
            return F.silu(gu[:, : s["N"]]) * gu[:, s["N"]:]
        base["cublas+eager"] = eager
        if compile_baselines:
            base["compile"] = (lambda c: (lambda: c(x, wgu)))(
                compiled(lambda x, wgu: F.silu(F.linear(x, wgu)[:, : s["N"]]) * F.linear(x, wgu)[:, s["N"]:]))
        check = lambda: rel_err(tx(), F.silu(F.linear(x.float(), w.float())) * F.linear(x.float(), wu.float()))  # noqa: E731,E501
        return tx, base, check, 3e-2
    if f in ("rms_norm", "fused_add_rms_norm", "layer_norm"):
        x, w, b = randn(s["T"], s["N"]), randn(s["N"]), randn(s["N"])
        r = randn(s["T"], s["N"])
        if f == "rms_norm":
            tx = lambda: S.rms_norm(x, w, 1e-6)  # noqa: E731
            fn = lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)  # noqa: E731
            args = (x, w)
            check = lambda: rel_err(tx(), fn(x.float(), w.float()))  # noqa: E731
        elif f == "layer_norm":
            tx = lambda: S.layer_norm(x, w, b, 1e-5)  # noqa: E731
            fn = lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)  # noqa: E731
            args = (x, w, b)
            check = lambda: rel_err(tx(), fn(x.float(), w.float(), b.float()))  # noqa: E731
        else:
            tx = lambda: S.fused_add_rms_norm(x, r, w, 1e-6)  # noqa: E731

            def fn(x, r, w):
                h = x + r
                return F.rms_norm(h, (h.shape[-1],), w, 1e-6), h
            args = (x, r, w)
            check = lambda: rel_err(tx()[0], F.rms_norm((x + r).float(), (s["N"],), w.float(), 1e-6))  # noqa: E731,E501
    elif f in ("silu_and_mul", "gelu_and_mul"):
        x = randn(s["T"], 2 * s["N"])
        act = (lambda a: F.silu(a)) if f == "silu_and_mul" else (lambda a: F.gelu(a, approximate="tanh"))
        fn = lambda x: act(x[..., : s["N"]]) * x[..., s["N"]:]  # noqa: E731
        tx = (lambda: S.silu_and_mul(x)) if f == "silu_and_mul" else (lambda: S.gelu_and_mul(x, "tanh"))
        args = (x,)
        check = lambda: rel_err(tx(), fn(x.float()))  # noqa: E731
    elif f in ("softmax", "argmax"):
        x = randn(s["T"], s["V"], scale=3.0)
        if f == "softmax":
            fn = lambda x: torch.softmax(x, -1)  # noqa: E731
            tx = lambda: S.softmax(x)  # noqa: E731
            check = lambda: rel_err(tx(), fn(x.float()))  # noqa: E731
        else:
            fn = lambda x: torch.argmax(x, -1)  # noqa: E731
            tx = lambda: S.argmax(x)  # noqa: E731
            check = lambda: float((tx().long().view(-1) != fn(x).view(-1)).sum())  # noqa: E731
        args = (x,)
    elif f == "rope":
        d, theta = s["D"], 1e6
        q, k = randn(s["T"], s["Hq"], d), randn(s["T"], s["Hkv"], d)
        pos = torch.randint(0, 8192, (s["T"],), device="cuda", generator=g)

        def fn(q, k, pos):
            inv = 1.0 / (theta ** (torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d))
            ang = pos.float()[:, None] * inv[None, :]
            c, sn = ang.cos()[:, None, :], ang.sin()[:, None, :]

            def rot(t):
                a, bb = t[..., : d // 2].float(), t[..., d // 2:].float()
                return torch.cat([a * c - bb * sn, bb * c + a * sn], -1).to(t.dtype)
            return rot(q), rot(k)
        tx = lambda: S.rope(q, k, pos, theta)  # noqa: E731
        args = (q, k, pos)
        check = lambda: max(rel_err(a, b) for a, b in zip(tx(), fn(q.float(), k.float(), pos)))  # noqa: E731
    elif f == "embedding":
        table = randn(s["V"], s["N"])
        ids = torch.randint(0, s["V"], (s["T"],), device="cuda", generator=g)
        fn = lambda ids, table: F.embedding(ids, table)  # noqa: E731
        tx = lambda: S.embedding(ids, table)  # noqa: E731
        args = (ids, table)
        check = lambda: rel_err(tx(), fn(ids, table))  # noqa: E731
    elif f == "attention_prefill":
        q = randn(s["B"], s["Hq"], s["S"], s["D"])
        k, v = randn(s["B"], s["Hkv"], s["S"], s["D"]), randn(s["B"], s["Hkv"], s["S"], s["D"])
        tx = lambda: S.attention_prefill(q, k, v, causal=True)  # noqa: E731
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def sdpa(backend):
            def run():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return run
        base["sdpa_flash"] = sdpa(SDPBackend.FLASH_ATTENTION)
        base["sdpa_cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)
        check = lambda: rel_err(tx(), F.scaled_dot_product_attention(  # noqa: E731
            q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True))
        return tx, base, check, 2e-2
    elif f == "attention_decode":
        bsz, ctx, hq, hkv, d, bs = s["B"], s["ctx"], s["Hq"], s["Hkv"], s["D"], 16
        nblk = -(-ctx // bs)
        q = randn(bsz, hq, d)
        kc, vc = randn(bsz * nblk, bs, hkv, d), randn(bsz * nblk, bs, hkv, d)
        table = torch.randperm(bsz * nblk, device="cuda", generator=g).to(torch.int32).view(bsz, nblk)
        lens = torch.full((bsz,), ctx, dtype=torch.int32, device="cuda")
        tx = lambda: S.attention_decode(q, kc, vc, table, lens)  # noqa: E731
        # SDPA over the gathered, contiguous KV: what a caller without a paged kernel would run (the gather
        # is done once, outside the timed call, which favours the baseline)
        kk = kc[table.long()].reshape(bsz, nblk * bs, hkv, d)[:, :ctx].transpose(1, 2).contiguous()
        vv = vc[table.long()].reshape(bsz, nblk * bs, hkv, d)[:, :ctx].transpose(1, 2).contiguous()
        qq = q[:, :, None, :]
        base["sdpa"] = lambda: F.scaled_dot_product_attention(qq, kk, vv, enable_gqa=True)
        check = lambda: rel_err(tx(), F.scaled_dot_product_attention(  # noqa: E731
            qq.float(), kk.float(), vv.float(), enable_gqa=True)[:, :, 0])
        return tx, base, check, 2e-2
    else:
        raise ValueError(f)
    base["eager"] = lambda: fn(*args)
    if compile_baselines:
        c = compiled(fn)
        base["compile"] = lambda: c(*args)
    tol = 0.5 if f == "argmax" else 3e-2  # argmax: mismatches allowed only at bf16 ties (<= 0 here is exact)
    return tx, base, check, tol


def run_case(case: Case, compile_baselines: bool) -> dict:
    torch, _ = _torch()
    row = dict(family=case.family, config=case.config, case=case.text, sizes=case.size, bytes=bytes_moved(case))
    try:
        tx, base, check, tol = build(case, compile_baselines)
        err = check()
        row["err"] = err
        if not err <= tol:
            row["error"] = f"tilex differs from torch: error {err:.3g} > {tol}"
            return row
        row["tilex_ms"] = gpu_ms(tx)
        row["tilex_eager_ms"] = eager_ms(tx)
        times, eager = {}, {}
        for name, fn in base.items():
            try:
                times[name] = gpu_ms(fn)
                eager[name] = eager_ms(fn)
            except Exception as e:  # noqa: BLE001 - a baseline that cannot run at this shape is left out
                row.setdefault("baseline_errors", {})[name] = f"{type(e).__name__}: {str(e)[:120]}"
        row["baselines_ms"], row["baselines_eager_ms"] = times, eager
        if times:
            best = min(times, key=times.get)
            row["best"], row["ratio"] = best, times[best] / row["tilex_ms"]
            beste = min(eager, key=eager.get)
            row["best_eager"], row["eager_ratio"] = beste, eager[beste] / row["tilex_eager_ms"]
    except Exception as e:  # noqa: BLE001 - recorded, the run goes on
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        torch.cuda.empty_cache()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", default="quick", choices=("quick", "full"), help="quick subset or the full grid")
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated families (default: all)")
    ap.add_argument("--budget-s", type=float, default=0.0, help="start no new case after this many seconds (0: none)")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out of the baselines")
    ap.add_argument("--json", default=None, help="write every row and the summary here "
                    "(default: $OUT/bench_shapes.json when $OUT is set)")
    ap.add_argument("--list", action="store_true", help="print the grid and exit (no GPU needed)")
    args = ap.parse_args(argv)
    fams = [f.strip() for f in args.families.split(",") if f.strip()]
    try:
        cases = grid(args.grid, fams)
    except ValueError as e:
        ap.error(str(e))
    if args.list:
        for c in cases:
            print(f"{c.family:<20} {c.config:<14} {c.text}  ({bytes_moved(c) / 1e6:.1f} MB)")
        print(f"{len(cases)} cases")
        return 0
    torch, _ = _torch()
    import torch._dynamo

    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 100000)
    copy = copy_bandwidth()
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, copy {copy:.0f} GB/s; "
          f"{len(cases)} cases ({args.grid} grid)", flush=True)
    t0, rows = time.time(), []
    for i, case in enumerate(cases):
        if args.budget_s and time.time() - t0 > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s spent: {len(cases) - i} cases not run", flush=True)
            break
        row = run_case(case, not args.no_compile)
        rows.append(row)
        if "error" in row:
            print(f"{case.family:<20} {case.text:<44} FAILED: {row['error']}", flush=True)
            continue
        gbs = row["bytes"] / (row["tilex_ms"] * 1e-3) / 1e9
        tf = flops(case) / (row["tilex_ms"] * 1e-3) / 1e12
        perf = f"{tf:6.1f} TF/s" if tf else f"{100 * gbs / copy:5.1f}%copy"
        print(f"{case.family:<20} {case.text:<44} tilex {row['tilex_ms']:.4f} ms {perf}  "
              f"best {row.get('best', '-')} {row['baselines_ms'].get(row.get('best'), float('nan')):.4f}  "
              f"x{row.get('ratio', float('nan')):.3f}  eager {1e3 * row['tilex_eager_ms']:.1f} us "
              f"x{row.get('eager_ratio', float('nan')):.3f}", flush=True)
    summary = summarize(rows, copy)
    print()
    print("\n".join(summary_lines(summary)))
    path = args.json or (os.path.join(os.environ["OUT"], "bench_shapes.json") if os.environ.get("OUT") else None)
    if path:
        with open(path, "w") as f:
            json.dump(dict(copy_gbs=copy, grid=args.grid, rows=rows, summary=summary), f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

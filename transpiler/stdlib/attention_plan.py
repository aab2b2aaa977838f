"""Which attention_prefill kernel and tiling a shape gets: a cost model of each candidate's programs.

Candidates are kernels with a tiling: "flash" (attention_prefill.tile, one query head per program), "gqa"
(attention_prefill_gqa.tile, the query heads of a KV head in one tile), "short" (attention_prefill_short.tile,
persistent, S <= BN, head-major bf16/f16 only (f32 has no wgmma), sm_90a), "whole" (attention_prefill_whole.tile,
S <= 64 as a candidate); "stream" (attention_prefill_stream.tile) is config-only (measured slower everywhere).
`prefill_cost` predicts a candidate's time from the shape alone:

* flash / gqa: programs of BM rows; an SM holds `resident` of them (shared memory: Q + STAGES K/V tiles;
  registers: the f32 accumulator and scores); each program costs a fixed chain (launch, Q load, first K/V,
  store; it grows with D) plus one step per key block it walks (causal: up to its last query), a step being
  `resident` programs sharing the SM's tensor rate, or a latency floor. Programs run heaviest first, so the
  time is max(sum of the programs' times / slots, the longest program). Never below the bytes at bandwidth.
* short: about one program per SM walks its ceil(tiles / programs) tiles; each tile costs its products (QK^T by
  wgmma, P@V by mma.sync) and the exposed V load and store, plus one ring fill.
* whole: S <= 128, persistent programs (as many as fit, `whole_resident`) walk the B * Hq tiles of a whole head
  each; Q, K and V of the next tile stream in while this one computes, so a tile costs max(its dependent chain,
  its DRAM bytes at the program's bandwidth share), plus one fill. The chain is a table per tiling fitted to eight
  H200 CUDA-graph medians (session 19, benchmarks/attention_probe.py at a66ebe6 and --small at 5a35cf3; whole /
  flash ms): B128 S128 Hq32 Hkv8 D128 0.2361 / 0.2107, D64 0.1517 / 0.1417, B64 S100 Hq28 Hkv4 0.1076 / 0.0948;
  S <= 64 (BM = 64): B32 S64 Hq32 Hkv8 D128 0.0317 / 0.0400, B16 S64 Hq28 Hkv4 0.0187 / 0.0220, B64 S50 Hq32 Hkv8
  D64 0.0277 / 0.0327, B128 S33 Hq8 Hkv2 0.0307 / 0.0375, B8 S64 Hq40 Hkv8 0.0182 / 0.0219. About 6-9 us a tile
  whatever its size: a tile's chain is latency-bound with one or two programs per SM. The flash model is optimistic
  at those small S <= 64 grids (12.6-25.3 us predicted where 21.9-32.7 were measured), so the choice does not rank
  the two there: a kernel of PREFERRED that is a candidate is taken (whole: 5 of 5 shapes faster, 1.18-1.26x).

Fitted to H200 CUDA-graph medians of the flash kernel at 128 x 64 tiles with the reciprocal epilogue (session 20,
benchmarks/bench_prefill20.py at 79f46bd): B128 S128 Hq32 D128 0.1794 ms (model 0.178), B16 S1000 Hq28 0.3286
(0.342), B32 S512 D256 0.1592 (0.148), B4 S4096 Hq40 1.419 (1.39), B1 S4096 Hq8 D256 0.1340 (0.143), B8 S2048 Hq14
D64 0.1833 (0.172), B1 S16384 Hq32 4.049 (4.01). The model ranks the flash tilings only to about 15% (64 x 32 and
64 x 64 within -15..+20% of their seven measurements), less than the gaps between them, so prefill_config picks
the tiling by measured rule, not by the model.
The short kernel's per-tile cost is fitted to its two measurements (B128 S128 Hq32 Hkv8: 0.259 ms
over 31 tiles a program; B64 S100 Hq28 Hkv4: 0.1005 over 12): 8.4 us a tile, where its products alone would take
1.8 (the epilogue's V load, register-to-shared staging, barriers and store are the rest).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

SM_SMEM = 227 * 1024          # shared memory one block may use on an SM (H100/H200)
SM_REGS = 65536
BANDWIDTH = 4.0e12            # bytes/s the kernels stream at (H200 copy ~4.2e12)
CHAIN_US = (5.8, 1.8)         # flash program's fixed chain: a + b * D / 128 (us; session 20, reciprocal epilogue)
STEP_FLOOR_US = 1.1           # one key step's latency when the SM is not the limit
SM_TENSOR_FLOPS = 4.3e12      # one SM's rate through the synchronous QK^T -> softmax -> PV step
SHORT_MMA_FLOPS = (7.0e12, 3.5e12)  # the short kernel's QK^T (wgmma main loop) and P@V (mma.sync) rates per SM
SHORT_EXPOSED_US = 6.6        # its per-tile rest (V load, staging, barriers, store) at D=128: measured 8.4 us a tile
SHORT_FILL_US = 4.0           # its first ring fill and last store
WHOLE_FILL_US = 4.0           # the whole-sequence kernel's first tile load and last store
# its chain per tile, (BM, D) -> us, with the programs an SM holds at that tiling (1 at 128/128, else 2-4); H200,
# session 19, (CUDA-graph median - WHOLE_FILL_US) / tiles per program at the 8 shapes of the module docstring
WHOLE_TILE_US = {(128, 128): 7.2, (128, 64): 9.2, (64, 128): 7.1, (64, 64): 5.9}


@dataclass(frozen=True)
class Shape:
    """One attention_prefill call: batch, query heads, KV heads, sequence length, head size, causal, layout,
    dtype."""
    b: int
    hq: int
    hkv: int
    s: int
    d: int
    causal: bool = True
    layout: str = "bhsd"
    dtype: str = "bf16"

    @property
    def g(self) -> int:
        return self.hq // self.hkv

    def bytes(self) -> int:
        """Q, O, K and V once each."""
        return (4 if self.dtype == "f32" else 2) * self.b * self.s * self.d * 2 * (self.hq + self.hkv)


def resident(smem: int, regs_per_thread: int, threads: int) -> int:
    """Blocks an SM holds at once (at least 1)."""
    by_smem = SM_SMEM // max(1, smem)
    by_regs = SM_REGS // max(1, min(255, regs_per_thread) * threads)
    return max(1, min(by_smem, by_regs, 32))


def _flash_like(sh: Shape, cfg: dict, sms: int, packed: bool) -> dict:
    """Programs of BM rows walking key blocks of BN; packed (gqa): a row is a (query, head) pair of a KV head."""
    bm, bn, warps, stages = cfg["BM"], cfg["BN"], cfg["WARPS"], cfg.get("STAGES", 2)
    smem = 2 * (bm * sh.d + stages * 2 * bn * sh.d)
    regs = (bm * sh.d + bm * bn) // (32 * warps) + 32 + (48 if sh.d > 128 else 0)
    r = resident(smem, regs, 32 * warps)
    per_row = sh.g if packed else 1                   # rows per query
    rows = sh.s * per_row
    nblk = -(-rows // bm)
    groups = sh.b * (sh.hkv if packed else sh.hq)
    step = max(STEP_FLOOR_US, r * 4 * bm * bn * sh.d / SM_TENSOR_FLOPS * 1e6)
    chain = CHAIN_US[0] + CHAIN_US[1] * sh.d / 128
    times = []
    for i in range(nblk):
        last_query = (min(rows, (i + 1) * bm) - 1) // per_row
        keys = min(sh.s, last_query + 1) if sh.causal else sh.s
        times.append(chain + -(-keys // bn) * step)
    us = max(groups * sum(times) / (r * sms), max(times))
    return dict(us=max(us, sh.bytes() / BANDWIDTH * 1e6), programs=groups * nblk, resident=r, step_us=step,
                program_us=sum(times) / len(times))


def _short(sh: Shape, cfg: dict, sms: int) -> dict:
    bm, bn = cfg["BM"], cfg["BN"]
    programs = min(cfg.get("PROGRAMS", sms), sms)
    tiles = sh.b * sh.hkv * -(-sh.g * sh.s // bm)
    flops = 2 * bm * bn * sh.d
    tile_us = (flops / SHORT_MMA_FLOPS[0] + flops / SHORT_MMA_FLOPS[1]) * 1e6 + SHORT_EXPOSED_US * sh.d / 128
    us = SHORT_FILL_US + -(-tiles // programs) * tile_us
    return dict(us=max(us, sh.bytes() / BANDWIDTH * 1e6), programs=min(tiles, programs), tiles=tiles)


def prefill_config(d: int, s: int) -> dict:
    """The flash kernel's tiling for head size d and sequence length s (an H200's shared memory; the wrapper
    steps down where the target has less): measured rules (H200, session 20, bench_prefill20.py at 79f46bd, ms
    against 128 x 64 / 8 warps):
    * S <= 64: 64 x 64, 4 warps (one 64-row block holds the sequence).
    * D = 64, S <= 2048: 64 x 64, 4 warps: B8 S2048 Hq14 0.1658 against 0.1833 (0.996x cuDNN; session 16's sweep:
      0.180 vs 0.188). Longer D = 64 sequences were not timed (at D = 128 the 64-row tiles lose at S >= 1000), so
      they keep 128 x 64.
    * D = 128, S <= 128: 64 x 32, 4 warps (48 KB, four blocks an SM): B128 S128 Hq32 0.1691 against 0.1794
      (session 16: 0.196 vs 0.204); at S = 1000-16384 it loses by 17-31%.
    * otherwise 128 x 64, 8 warps (D = 256 too: B1 S4096 0.134, B32 S512 0.159 against 64 x 32's 0.170, 0.167)."""
    if s <= 64 or (d == 64 and s <= 2048):
        return dict(BM=64, BN=64, WARPS=4)
    if d == 128 and s <= 128:
        return dict(BM=64, BN=32, WARPS=4)
    return dict(BM=128, BN=64, WARPS=8)


def whole_config(s: int, d: int) -> dict:
    """The whole-sequence kernel's tiling for s <= 128: one tile of 64 or 128 rows holds a head's queries, one key
    block its keys (wgmma: one warp per 16 rows)."""
    bm = 64 if s <= 64 else 128
    return dict(BM=bm, BN=bm, WARPS=bm // 16, STAGES=2)


def whole_resident(cfg: dict, d: int) -> int:
    """Programs of the whole-sequence kernel an SM holds: its ring (q, k, v tiles, STAGES of them) and registers
    (ptxas, nvcc 13.0: 177 at BM=BN=D=128, 128 at D=64)."""
    bm, bn, warps, stages = cfg["BM"], cfg["BN"], cfg.get("WARPS", cfg["BM"] // 16), cfg.get("STAGES", 2)
    smem = stages * 2 * d * (bm + 2 * bn) + 2048
    regs = (bm * d + bm * bn) // (32 * warps) + 32
    return resident(smem, regs, 32 * warps)


def stream_config(s: int, d: int) -> dict:
    """The stream kernel's tiling: query and key blocks of BM = 64 rows (one warpgroup), two stages of Q, K and V
    (96 KB at D = 128: two programs an SM)."""
    return dict(BM=64, WARPS=4, STAGES=2)


def stream_resident(cfg: dict, d: int) -> int:
    """Programs of the stream kernel an SM holds: its ring (STAGES x the q, k and v tiles of BM rows) and
    registers (the [BM, D] accumulator and [BM, BM] scores over 32 x WARPS threads)."""
    bm, warps, stages = cfg["BM"], cfg.get("WARPS", cfg["BM"] // 16), cfg.get("STAGES", 2)
    smem = stages * 2 * d * 3 * bm + 2048
    regs = (bm * d + bm * bm) // (32 * warps) + 32
    return resident(smem, regs, 32 * warps)


def _whole(sh: Shape, cfg: dict, sms: int) -> dict:
    """Persistent programs over the B * Hq tiles, the next tile's Q, K, V in flight while this one computes: a tile
    costs the larger of its chain (WHOLE_TILE_US: the dependent wait -> QK^T -> softmax -> PV -> store -> barrier of
    one tile, measured per tiling) and its DRAM bytes at the program's share of the bandwidth (Q, O, and K, V once
    per G heads)."""
    r = whole_resident(cfg, sh.d)
    programs = min(cfg.get("PROGRAMS", sms * r), sms * r, sh.b * sh.hq)
    tiles = sh.b * sh.hq
    size = 4 if sh.dtype == "f32" else 2
    tile_bytes = size * sh.s * sh.d * (2 + 2 / sh.g)
    chain = WHOLE_TILE_US.get((cfg["BM"], sh.d), WHOLE_TILE_US[(128, 128)])
    tile_us = max(chain, tile_bytes / (BANDWIDTH / programs) * 1e6)
    us = WHOLE_FILL_US + -(-tiles // programs) * tile_us
    return dict(us=max(us, sh.bytes() / BANDWIDTH * 1e6), programs=programs, resident=r, tile_us=tile_us)


def short_config(s: int, d: int) -> dict:
    """The short kernel's tiling for s <= 128: one key block of 64 or 128 keys, 128 rows a tile, Q and K
    streamed in slices of 64 of the head size (the TMA + wgmma main loop; ptxas: 168 registers, no spills at
    D <= 128)."""
    return dict(BM=128, BN=64 if s <= 64 else 128, BK=64, STAGES=2)


def candidates(sh: Shape, sms: int = 132, arch: str = "sm_90a") -> list:
    """(kernel, config) pairs that can take the shape on the target, each at the tiling it runs best at."""
    out = [("flash", prefill_config(sh.d, sh.s))]
    if sh.g > 1 and sh.d <= 128:
        out.append(("gqa", dict(BM=128, BN=64, WARPS=8)))
    if arch == "sm_90a" and sh.layout == "bhsd" and sh.s <= 128 and 64 <= sh.d <= 128 and sh.dtype != "f32":
        out.append(("short", dict(short_config(sh.s, sh.d), PROGRAMS=sms)))
    # whole: only its 64-row tiling (S <= 64) measured faster than flash; the 128-row one lost at every shape timed
    # (S = 100, 128), so it is there for config=dict(KERNEL="whole") only
    if arch == "sm_90a" and sh.s <= 64 and 64 <= sh.d <= 128 and sh.dtype != "f32":
        cfg = whole_config(sh.s, sh.d)
        out.append(("whole", dict(cfg, PROGRAMS=sms * whole_resident(cfg, sh.d))))
    # stream (attention_prefill_stream.tile) is not a candidate: measured 2-170x slower than flash at all seven
    # shapes timed (session 20; see its header): config=dict(KERNEL="stream") only
    return out


# the kernels the default choice may take: one joins once a sweep on the GPU has measured it winning where the
# model says it wins. Measured (H200, sweep_attention.py at ccb34ea, /work/mail/attn/sweep_attn.log): short
# 0.259 ms best at B128 S128 Hq32 Hkv8 (flash 0.205), 0.1005 at B64 S100 Hq28 Hkv4 (flash ~0.10); gqa slower than
# flash at every shape timed (B16 S1000 Hq28: 0.536 vs 0.358; B2 S8192: 4.71 vs 4.21; B8 S2048 D64: 0.229 vs
# 0.187). Neither is enabled.
# whole (attention_prefill_whole.tile, session 19, H200): 1.18-1.26x flash at the five S <= 64 shapes timed (its
# 64-row tiling, the only one candidates() offers), 0.88-0.93x at S = 100-128 (the 128-row tiling: config only).
ENABLED = {"flash": True, "short": False, "gqa": False, "whole": True}
# enabled kernels measured faster than the others at every shape timed where they are candidates: taken there
PREFERRED = ("whole",)


def prefill_cost(kernel: str, cfg: dict, sh: Shape, sms: int = 132) -> dict:
    """Predicted time (`us`) of one candidate and the quantities behind it."""
    if kernel == "short":
        return _short(sh, cfg, sms)
    if kernel == "whole":
        return _whole(sh, cfg, sms)
    return _flash_like(sh, cfg, sms, packed=kernel == "gqa")


def choose_prefill(sh: Shape, sms: int = 132, arch: str = "sm_90a") -> tuple:
    """(kernel, config, cost) of the cheapest enabled candidate (memoized: see choose)."""
    return choose(sh.b, sh.hq, sh.hkv, sh.s, sh.d, sh.causal, sh.layout, sh.dtype, sms, arch)


@functools.lru_cache(maxsize=4096)
def choose(b: int, hq: int, hkv: int, s: int, d: int, causal: bool, layout: str, dtype: str, sms: int,
           arch: str) -> tuple:
    """choose_prefill on plain values, memoized per shape (a call's host path pays one tuple hash, not the
    model). The config returned is shared: copy it before changing it. After changing ENABLED or a constant,
    call reset()."""
    sh = Shape(b, hq, hkv, s, d, causal, layout, dtype)
    scored = [(k, c, prefill_cost(k, c, sh, sms)) for k, c in candidates(sh, sms, arch) if ENABLED[k]]
    preferred = [t for t in scored if t[0] in PREFERRED]
    return min(preferred or scored, key=lambda t: t[2]["us"])


def reset() -> None:
    """Forget the memoized choices (after changing ENABLED or the model's constants)."""
    choose.cache_clear()


def explain(sh: Shape, sms: int = 132, arch: str = "sm_90a") -> str:
    """One line per candidate (the chosen one starred): predicted time and what it comes from."""
    pick = choose_prefill(sh, sms, arch)
    lines = []
    for kernel, cfg in candidates(sh, sms, arch):
        c = prefill_cost(kernel, cfg, sh, sms)
        facts = "  ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in c.items() if k != "us")
        lines.append(f"{'*' if (kernel, cfg) == pick[:2] else ' '} {kernel:<5} {cfg}  {c['us']:.1f} us  {facts}"
                     + ("" if ENABLED[kernel] else "  (not enabled)"))
    return "\n".join(lines)

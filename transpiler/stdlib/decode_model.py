"""How attention_decode is laid over the GPU: split count and tiles from a model of the split kernel's programs.

`choose(...)` scores every (tiles, split count) candidate with `estimate` and keeps the fastest (ties: the earlier
tiles of `TILES`, then fewer shares), except for the exact shapes of `MEASURED` on a 132-SM GPU, whose plans were
measured faster than the model's choice by more than the model can resolve. Decided from shapes only (the block table's width, never seq_lens), so a plan
is fixed under CUDA-graph capture (tilex.stdlib.attention.decode_plan memoizes it per shape).

The model of attention_decode_split (grid B * Hkv x NS; a program walks one share of a sequence's keys, BN at a
time, K/V streamed STAGES - 1 iterations ahead, or loaded in order with STAGES = 1):

* an SM holds `resident` programs: its shared memory over the kernel's (read from the compiled kernel's spec, what
  the compiler decided), its registers over the kernel's (`REGS`, ptxas counts) and 2048 threads;
* a program costs a fixed chain T0 (seq_lens and block-table reads, the first tile's arrival, the store) plus per
  iteration its dependent compute chain (`T_ITER_US` for 64 keys at D <= 128 by 4 warps, scaled by the work per
  warp) and the part of the next tile's latency that the ring does not hide (`LATENCY_US` in full with STAGES = 1,
  LATENCY_US / (STAGES - 1) beyond the compute with a ring);
* programs run in ceil(programs / (resident * SMs)) rounds, and never faster than T0 + the K/V bytes of the table's
  width at the tile's streaming rate (`STREAM`: measured; the 2-stage ring of 64 keys `BANDWIDTH`; twice that for
  K/V of at most `L2_BYTES`, which a benchmark's repeated calls, and the same layer's next call, find in the L2);
* with NS > 1 a second kernel merges the shares: `COMBINE_US` (its launch and latency) plus each of its programs'
  NS x D f32 partials read at one SM's share of the bandwidth, in rounds over the SMs.

Fitted to H200 CUDA-graph medians (bench_attention_decode.py at 2780b42, session 19, copy 4225 GB/s; SDPA over
contiguous KV in the same process): B16 Hq12 Hkv2 ctx32768, 8 shares 0.1417 ms (model 0.1446); B16 Hq40 Hkv8
ctx4096, 2 shares 0.0747 (0.0757); B16 Hq40 Hkv8 ctx1024, 2 shares 0.0250 (0.0241); B256 Hq64 Hkv8 ctx128, 1 share
0.0550 (0.0520), in order (STAGES 1) 0.0491 (0.0465); B1 Hq32 Hkv8 ctx128, 128 keys by 8 warps 0.0045 (0.0045);
B4 Hq28 Hkv4 ctx1000, 16 shares 0.0081 (0.0081); B1 Hq8 Hkv4 D256 ctx4096, 64 shares, STAGES 1 0.0121 (0.0117);
B64 Hq14 Hkv2 D64 ctx2048, 4 shares 0.0258 (0.0241; the former rule's 2 shares 0.0292).
What the sweep there showed, and the model keeps: a third stage buys nothing (not latency-bound: 0.1433 vs 0.1417
ms), 32 keys or 8 warps at 64 keys are 5-10x slower (not candidates), 128 keys by 8 warps only win a one-iteration
share at a few programs.
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_SPLITS = 64               # the combine reads its shares as one [NSP, D] tile
STATIC_TOKENS = 256           # one-share tables at most this wide are walked whole (attention_decode_split's STATIC)
QS_STATIC = False             # True: such walks run attention_decode_split_qs (q streamed with K and V, so its load
                              # no longer waits ahead of the first block-table read; predicted ~0.5 us on B1 ctx128,
                              # never timed on a GPU: off; set it before the first plan, plans are memoized)
T0_US = 3.6                   # a program's fixed chain (B1 Hq32 Hkv8 ctx128: one 128-key iteration in 4.5 us)
T_ITER_US = 0.9               # one iteration's compute chain: 64 keys, D <= 128, 4 warps (B1 ctx128: 2 x 64 keys 5.4)
LATENCY_US = 2.0              # a K/V tile's DRAM latency under load (what a ring of STAGES - 1 tiles hides)
BANDWIDTH = 3.9e12            # bytes/s the split kernel streams K/V at (B16 ctx4096 / ctx32768: 3.87-3.89e12)
COMBINE_US = 3.2              # the combine kernel in a graph, launch included (H200: 0.0031-0.0033 ms alone)
L2_BYTES = 32 << 20           # K/V this small stay in the L2 between calls (H200: 60 MB) and stream twice as fast
SM_SMEM = 233472              # shared memory per SM (H100/H200), 1 KB of it reserved per resident block
SM_REGS = 65536
SM_THREADS = 2048

# tiles the model chooses among, in order of preference on a tie
TILES = (dict(BN=64, WARPS=4, STAGES=2), dict(BN=64, WARPS=4, STAGES=1), dict(BN=128, WARPS=8, STAGES=2))

# bytes/s each tile streams K/V at over the whole GPU (H200, bench_attention_decode.py, session 19): 64 keys with
# a 2-stage ring 3.9e12; in order (STAGES = 1: K, then V, each waited for) 3.13e12 (B256 ctx128 0.0491 ms); 128 keys
# by 8 warps, one block an SM, 3.2e12 (B16 ctx4096 0.0916 ms, ctx32768 0.1724: 0.69-0.72x of 64 keys)
STREAM = {(64, 4, 2): BANDWIDTH, (64, 4, 1): 3.13e12, (128, 8, 2): 3.2e12}

# registers per thread of attention_decode_split (ptxas, nvcc 13.0, sm_90a, bf16, GP = 16), by (BN, WARPS, STAGES)
# and head size; other head sizes take the nearest row (D < 64: 64's). tests/test_decode_model.py checks them.
REGS = {
    (64, 4, 2): {64: 56, 128: 80, 256: 96},
    (64, 4, 1): {64: 71, 128: 127, 256: 254},
    (64, 4, 3): {64: 56, 128: 72, 256: 96},   # swept by the bench (session 20), not a plan candidate
    (128, 8, 2): {64: 64, 128: 64, 256: 255},
    # one- and two-warp blocks (session 20; bench_attention_decode.py sweeps them, the plan does not choose them yet)
    (32, 1, 2): {64: 95, 128: 163, 256: 239},
    (32, 1, 3): {64: 123, 128: 159, 256: 236},
    (16, 1, 4): {64: 95, 128: 124, 256: 204},
    (64, 1, 2): {64: 128, 128: 168, 256: 253},
    (32, 2, 2): {64: 72, 128: 124, 256: 128},
    (64, 2, 2): {64: 80, 128: 96, 256: 162},
}


@dataclass(frozen=True)
class Shape:
    """One attention_decode call as the plan sees it: batch, KV heads, query heads per KV head, head size, block
    table width (blocks), block size, element bytes."""
    b: int
    hkv: int
    g: int
    d: int
    maxb: int
    bs: int
    esize: int = 2

    @property
    def width(self) -> int:
        return self.maxb * self.bs

    def kv_bytes(self) -> int:
        """K and V of every sequence at the table's full width."""
        return 2 * self.b * self.hkv * self.width * self.d * self.esize


@dataclass(frozen=True)
class Plan:
    splits: int
    config: dict            # BN, WARPS, STAGES, STATIC: attention_decode_split's defines
    us: float               # the model's time
    resident: int           # split programs per SM
    qs: bool = False        # run attention_decode_split_qs (q read inside the key loop) instead


def regs(tile: dict, d: int) -> int:
    row = REGS[(tile["BN"], tile["WARPS"], tile["STAGES"])]
    return row[min(row, key=lambda k: (abs(k - max(d, 64)), k))]


def resident(smem: int, regs_per_thread: int, threads: int) -> int:
    """Blocks an SM holds at once (at least 1): shared memory (1 KB reserved each), registers (allocated per warp
    in units of 256), threads."""
    by_smem = SM_SMEM // (smem + 1024)
    per_warp = -(-min(255, regs_per_thread) * 32 // 256) * 256
    by_regs = SM_REGS // (per_warp * (threads // 32))
    return max(1, min(by_smem, by_regs, SM_THREADS // threads, 32))


def t_iter(tile: dict, d: int) -> float:
    """One iteration's compute chain (us): T_ITER_US up to 64 keys x 128 columns a 4-warp block, then the work
    per warp."""
    return T_ITER_US * max(1.0, tile["BN"] * d / (tile["WARPS"] * 2048))


def estimate(sh: Shape, tile: dict, splits: int, smem: int, sms: int = 132) -> tuple[float, int]:
    """(us, resident programs per SM) of attention_decode with `tile` and `splits` shares (see the module text)."""
    r = resident(smem, regs(tile, sh.d), 32 * tile["WARPS"])
    programs = sh.b * sh.hkv * splits
    share = -(-sh.maxb // splits) * sh.bs
    iters = max(1, -(-share // tile["BN"]))
    step = t_iter(tile, sh.d)
    stall = LATENCY_US if tile["STAGES"] == 1 else max(0.0, LATENCY_US / (tile["STAGES"] - 1) - step)
    program = T0_US + iters * step + (iters - 1) * stall
    rounds = -(-programs // (r * sms))
    rate = STREAM[(tile["BN"], tile["WARPS"], tile["STAGES"])] * (2 if sh.kv_bytes() <= L2_BYTES else 1)
    us = max(rounds * program, T0_US + sh.kv_bytes() / rate * 1e6)
    if splits > 1:
        heads = sh.b * sh.hkv * sh.g
        per_sm = BANDWIDTH / sms
        us += COMBINE_US + -(-heads // (4 * sms)) * splits * sh.d * 4 / per_sm * 1e6
    return us, r


def candidates(sh: Shape) -> list[dict]:
    """TILES that apply: 128 keys only where their ring fits one block (D <= 128)."""
    return [t for t in TILES if not (t["BN"] == 128 and sh.d > 128)]


# Plans measured faster than the model's choice, for these exact shapes on the H200 (132 SMs): bench_attention_decode.py
# at eea1021 (session 20, CUDA-graph medians, each checked against SDPA first; the wrapper's own plan timed twice
# within 0.3%). The model misjudges both: it rates the first 178.6 us (its in-order rate, STREAM, was fitted to a
# latency-bound B256 ctx128 call; 4 long programs an SM stream faster) and the second within 2% of its own choice.
# A refit needs more measurements of in-order tiles over long shares. Shape -> (splits, tiles).
MEASURED = {
    # B16 ctx32768 Hq12/2 D128: 16 shares of in-order 64-key tiles (4 programs an SM) 0.1371 ms, 3917 GB/s, x0.905
    # SDPA; the model's 8 shares of the 2-stage ring 0.1429-0.1431 (x0.869)
    Shape(16, 2, 6, 128, 2048, 16): (16, dict(BN=64, WARPS=4, STAGES=1)),
    # B1 ctx4096 Hq8/4 D256: 33 shares of the 2-stage ring 0.0118 ms (x1.000); the model's 64 in order 0.0122 (x0.968)
    Shape(1, 4, 2, 256, 256, 16): (33, dict(BN=64, WARPS=4, STAGES=2)),
}
MEASURED_SMS = 132


def choose(sh: Shape, smem_of, sms: int = 132, splits: int | None = None) -> Plan:
    """The fastest (tiles, splits) by `estimate`; `smem_of(tile)` is the compiled kernel's shared memory (None: that
    tile does not build). `splits` fixed: only the tiles are chosen. A shape of `MEASURED` on a GPU of
    `MEASURED_SMS` SMs takes its measured plan (when its tile builds)."""
    hit = MEASURED.get(sh) if splits is None and sms == MEASURED_SMS else None
    if hit is not None and smem_of(hit[1]) is not None:
        ns, tile = hit
        us, r = estimate(sh, tile, ns, smem_of(tile), sms)
        static = ns == 1 and sh.width <= STATIC_TOKENS
        return Plan(ns, dict(tile, STATIC=static), us, r, qs=static and QS_STATIC)
    best = None
    counts = [splits] if splits is not None else range(1, min(MAX_SPLITS, max(1, sh.maxb)) + 1)
    for tile in candidates(sh):
        smem = smem_of(tile)
        if smem is None:
            continue
        for ns in counts:
            us, r = estimate(sh, tile, ns, smem, sms)
            if best is None or us < best[0] - 1e-9:
                best = (us, ns, tile, r)
    if best is None:
        raise ValueError(f"attention_decode: no tile of {TILES} builds for D={sh.d}, block size {sh.bs}")
    us, ns, tile, r = best
    static = ns == 1 and sh.width <= STATIC_TOKENS
    # with QS_STATIC, a STATIC walk reads q inside its key loop (attention_decode_split_qs): off until measured
    return Plan(ns, dict(tile, STATIC=static), us, r, qs=static and QS_STATIC)

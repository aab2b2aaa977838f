"""The launch model of the library's row kernels: how a [M, N] row-wise kernel is laid over the GPU.

One job: from (kernel, N, M, dtype, SM count) to the compile-time parameters of the row kernels
(rms_norm, fused_add_rms_norm, layer_norm; softmax's one-pass rows use `row_config`, and
softmax, argmax and sample split few long rows with `split_segments`; silu_and_mul, gelu_and_mul
and embedding take their column tile from `column_block`), from a small table of measured kernel
traits and of the target's per-SM resources. No GPU is needed; `explain(...)` says why.

The model, in the order it decides:

1. **Row shape.** A row of N <= ONE_PASS_MAX elements is read once. Its tile is the next power of
   two (`BLOCK`, the language's tiles are powers of two) unless that leaves more than
   `IDLE_MAX` of the tile idle and N = K * W with W a power of two and K = P1 + P2 a sum of two
   powers of two (5120 = 1024 * (4 + 1)): the *pieces* path (`<kernel>_k2`, x viewed as
   [M * K, W], two tiles of sub-rows per row, W / 8 threads (W / 4 where 8 * K elements a thread would
   spill: `pieces_elems`), every thread busy). Longer rows go
   in CHUNK-wide steps (`ONE_PASS=False`).
2. **Threads.** 16 elements per thread on the power-of-two path (measured best, row_config), 32 to
   1024 threads; exactly W / 8 (or W / 4) threads on the pieces path (8 * K or 4 * K elements each).
3. **Rows per step** (`R`): short rows are taken up to 8 at a time while a step is under 2048
   elements and there are at least two steps per SM.
4. **Programs per wave.** Blocks resident per SM = the least of the thread budget
   (`Traits.threads_per_sm`, 1024 or 768 measured), 32 blocks, the register file
   (registers per thread from the kernel's measured registers per held element) and shared
   memory (STAGES ring stages of a step); the grid is persistent: PROGRAMS = SMs x that.
   A kernel whose one-pass rows go straight into registers (`Traits.registers`, fused_add_rms_norm:
   x and residual loads in flight together) instead gets a program per step (`STAGES=1`, a grid
   past the row count), the blocks resident per SM bounded by threads and registers. So does any
   kernel whose steps are no more than that grid's programs: a ring only overlaps a program's next
   step with this one, and a program of one step would pay its shared-memory hop and barrier for
   nothing (decode: 1-100 tokens). Those grids are latency-bound, not bandwidth-bound: their rows
   take FEW_ELEMS (8) elements per thread, up to FEW_THREADS (512) threads (more elements per
   thread past 4096: 1024 threads would cap registers at 64, and layer_norm spilled), and rows fewer than
   the SMs keep the power-of-two tile (its idle lanes cost no bandwidth there; the pieces path's
   two tiles measured slower).
5. **PREFETCH instead of the ring.** Where a program of the persistent grid has a second step, rms_norm and
   layer_norm (and fused_add_rms_norm where its program-per-step grid would take 1-4 waves:
   `Traits.prefetch_waves`) run persistent programs that load the next step's rows into registers while
   this step reduces and stores (`PREFETCH=True`, `STAGES=1`): PF_THREADS (1024) threads per SM at 16
   elements a thread, `MIN_BLOCKS` = the blocks that makes (layer_norm's rows of BLOCK <= 1024: 8
   elements a thread, SHORT_THREADS); on the pieces path PIECES_THREADS per SM, fewer where the
   registers of a thread's two rows (`Traits.prefetch_pieces` a held element) would not fit. The ring's
   shared-memory hop costs 25-46 thread-instructions per element (sass_loops.py) against a budget of ~32
   for a bf16 stream at 4.2 TB/s; PREFETCH costs 10-17 (measured figures at PF_THREADS).
6. **Bytes in flight per SM.** Where the ring remains, it is `STAGES` deep, at least the kernel's measured default,
   deepened (up to the kernel's `max_stages`, past which ptxas spilled) until resident blocks x
   (STAGES - 1) steps ahead x the bytes a step reads reaches IN_FLIGHT (32 KB: rms_norm at 4096 and 8192, 0.85-0.87 of copy, has 32 KB;
   at 5120 with BLOCK 8192 it had 20 KB and reached 0.49-0.57).

`split_segments` is the model of a reduction over few long rows (softmax, argmax, sample): a row
is cut into segments, one program each, when the rows alone leave SMs idle.
"""
from __future__ import annotations

from dataclasses import dataclass

ONE_PASS_MAX = 16384  # a row up to this long is one step (rms_norm's measured range)
CHUNK = 4096  # the step of longer rows
IDLE_MAX = 0.20  # a power-of-two tile may leave this much of itself idle before the pieces path is taken
IN_FLIGHT = 32 * 1024  # bytes a SM should have requested and not yet received (see 5. above)
MAX_STAGES = 4
ELEMS_PER_THREAD = 16
# Grids of one step per program (decode-sized: 1-100 rows): 8 elements (one 16-byte vector) per thread,
# at most 512 threads. sweep_rows.py --misses on an H200 (2026-12-01, bf16, CUDA-graph replays): rms_norm
# T=1 N=4096 512 threads x 8 1.64 us, 256 x 16 1.72, 128 x 32 1.91 (torch.compile 1.76); T=16 N=1536
# 256 x 8 1.53, 128 x 16 1.70, 512 x 4 1.64, the pieces path 1.79-1.95 (compile 1.71); T=100 N=5120
# 512 x 16 2.16, 1024 x 8 2.39, pieces 2.24 (compile 2.28); fused_add_rms_norm T=16 N=1536 256 x 8 1.85,
# 128 x 16 2.02, pieces 1.98 (compile 1.84)
FEW_ELEMS = 8
FEW_THREADS = 512


@dataclass(frozen=True)
class Target:
    """Per-SM resources the model counts (an H100/H200, sm_90)."""
    threads: int = 2048
    blocks: int = 32
    registers: int = 65536
    smem: int = 227 * 1024


H100 = Target()


@dataclass(frozen=True)
class Traits:
    """What the model knows of one row kernel (measured on an H200 / from ptxas, see the notes)."""
    reads: int  # tensors of [M, N] streamed in (bytes in flight per element = reads * itemsize)
    threads_per_sm: int  # thread budget of the power-of-two path (sweep_rows.py, 2026-11-30)
    stages: int  # ring depth of the power-of-two path (ditto)
    regs_per_elem: float  # registers per element a thread holds on the pieces path (ptxas, bf16)
    pieces: bool  # has a `<name>_k2` kernel
    max_stages: int = 4  # deepest ring the model may choose (deeper ones spilled in ptxas)
    registers: bool = False  # one-pass rows go straight into registers: a program per step, no ring
    # PREFETCH (persistent programs that load their next step's rows into registers during this step) replaces
    # the ring wherever a program has a second step, and the program-per-step grid of a `registers` kernel
    # where that grid would take more than one and at most `prefetch_waves` waves (0: never)
    prefetch_waves: float = float("inf")
    prefetch_short: bool = False  # rows of BLOCK <= 1024: 8 elements a thread, SHORT_THREADS per SM (layer_norm)
    prefetch_pieces: float = 0.0  # > 0: the pieces path prefetches too, at this many registers per element held


# ptxas 13.0, sm_90a, bf16, no register cap (rows.py tests rebuild these): rms_norm_k2 K=3/5/9 at
# 72/120/208 registers, fused_add_rms_norm_k2 (STAGES=1) 61/114/164, layer_norm_k2 115/196/255+spills
TRAITS = {
    "rms_norm": Traits(reads=1, threads_per_sm=1024, stages=2, regs_per_elem=3.0, pieces=True, prefetch_pieces=3.1),
    # one-pass rows in registers: 97% of copy at 16384x4096 where the persistent ring reached 88% (RESULTS.md s15);
    # PREFETCH where that grid is 1-4 waves (1024x8192 18.47 vs 20.38 us, 4096x2048 17.67 vs 18.12; at 16384x4096,
    # 31 waves, 141.0 vs 132.5)
    "fused_add_rms_norm": Traits(reads=2, threads_per_sm=1024, stages=2, regs_per_elem=3.0, pieces=True,
                                 registers=True, prefetch_waves=4.0),
    # layer_norm at BLOCK 4096 spills 36 bytes at 4 stages where 3 spill 24 (test_stdlib_rows.py)
    # sweep_rows.py --misses on an H200 (2026-12-02, after the kernel's instruction cut: 1/N once, an FFMA column
    # mask): 1024 threads per SM beat 768 at every row length timed: 32768x896 8/SM S3 43.4 us vs 6/SM S3
    # 50.5; 8192x3584 4/SM S2 38.8 vs 3/SM S3 40.7; 16384x8192 2/SM S2 145.7 vs 1/SM S3 150.9 (compile 145.6).
    # 2 stages at most: at 4 blocks of 256 threads (a 64-register cap) BLOCK 4096 spills 20 bytes at 3 (ptxas), and
    # 3 stages gained 1.6% where they fit (896: 43.4 vs 44.2 us)
    "layer_norm": Traits(reads=1, threads_per_sm=1024, stages=2, regs_per_elem=5.0, pieces=True, max_stages=2,
                         prefetch_short=True, prefetch_pieces=4.5),
}

# PREFETCH grids. sweep_rows.py --misses on an H200 (2026-12-02, bf16, CUDA-graph medians; the ring / the library
# before -> PREFETCH at PF_THREADS, us): rms_norm 1024x8192 8.27 -> 6.65 (512 threads x 2; compile 6.93), 4096x2048
# 6.88 -> 6.15 (128 x 8; best 6.05); layer_norm 1024x8192 10.11 -> 8.47 (512 x 2; best 7.90 at 256 x 2), 32768x3584
# 149.7 -> 135.4 (256 x 4, the best); fused_add_rms_norm 1024x8192 20.38 -> 18.47 (512 x 2, the best; compile
# 17.64). Past the register file's share (more blocks under a register cap) they collapsed: rms_norm 1024x8192 at
# 4 x 512 threads 26.7, layer_norm 32768x3584 at 8 x 256 332.3.
PF_THREADS = 1024  # threads per SM, 16 elements a thread (row_config's threads and R): 56-94 registers (ptxas)
# layer_norm 32768x896: 8 elements a thread, 128 threads x 12 33.73 us; 16 a thread (R 2, 128 x 8) 36.29; the ring
# 44.16; torch.compile 30.39
SHORT_THREADS = 1536
# The pieces path: PIECES_THREADS threads per SM, fewer where the registers of a thread's elements (the row's and
# the next row's, `Traits.prefetch_pieces` registers per element held: ptxas, bf16, rms_norm_k2 24 / 40 elements
# at 80 / 121, layer_norm_k2 36 at 162) would not fit (a cap spilled: K = 9 at 128 registers, 32-272 bytes).
# layer_norm_k2 16384x2304 = 256 x (8 + 1), 64 threads: 6 per SM 42.12 us, 8 (32 bytes of spills) 42.33, 4 47.09,
# 12 80.40; the ring (5 per SM) 47.31. rms_norm_k2: not measured, the same rule
PIECES_THREADS = 512
REGS_MAX = 232  # a pieces configuration needing more (255 is ptxas's limit) would spill


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def pieces(n: int, kernel: str = "rms_norm", w_max: int = 4096) -> tuple[int, int, int] | None:
    """(W, P1, P2) with n == W * (P1 + P2), all powers of two and P1 > P2, W the largest power of two
    dividing n (at most w_max: W / 8 <= 512 threads), when the power-of-two tile of n would be more
    than IDLE_MAX idle and the kernel's registers allow it (at 4 elements a thread per sub-row at least,
    `pieces_elems`); else None."""
    t = TRAITS[kernel]
    if not t.pieces or n > ONE_PASS_MAX or n % 8 or 1 - n / next_pow2(n) <= IDLE_MAX:
        return None
    w = min(n & -n, w_max)
    k = n // w
    p1 = 1 << (k.bit_length() - 1)
    p2 = k - p1
    if w < 256 or not _is_pow2(p2) or t.regs_per_elem * PIECE_ELEMS[-1] * k > REGS_MAX:
        return None
    return w, p1, p2


# Elements a thread holds per sub-row on the pieces path: 8 (one 16-byte vector, W / 8 threads), or 4 (W / 4
# threads) where 8 would need more than REGS_MAX registers. sweep_rows.py --misses on an H200 (2026-12-02):
# layer_norm 16384x2304 = 256 x (8 + 1) at 4 a thread (64 threads, 4/SM, 2 stages) 54.3 us, the power-of-two
# tile (4096, 44% idle) 89.9, torch eager 66.7, torch.compile 124.9
PIECE_ELEMS = (8, 4)


def pieces_elems(n: int, kernel: str = "rms_norm") -> int:
    """Elements per thread per sub-row of `kernel`'s pieces path at row length n (PIECE_ELEMS)."""
    k = n // pieces(n, kernel)[0]
    return next(e for e in PIECE_ELEMS if TRAITS[kernel].regs_per_elem * e * k <= REGS_MAX)


def _resident(threads: int, regs: int, stage_bytes: int, stages: int, budget: int, tgt: Target) -> int:
    by_regs = tgt.registers // max(1, threads * regs) if regs else tgt.blocks
    by_smem = tgt.smem // max(1, stage_bytes * stages)
    return max(1, min(tgt.blocks, budget // threads, by_regs, by_smem))


def _deepen(stages: int, blocks: int, step_bytes: int, tgt: Target, threads: int, regs: int, budget: int,
            most: int = MAX_STAGES) -> int:
    """The shallowest ring from `stages` on with IN_FLIGHT bytes ahead per SM (`most` at most)."""
    while stages < min(most, MAX_STAGES) and blocks * (stages - 1) * step_bytes < IN_FLIGHT:
        deeper = _resident(threads, regs, step_bytes, stages + 1, budget, tgt)
        if deeper < blocks:  # a deeper ring that costs resident blocks buys nothing
            break
        stages += 1
    return stages


def row_config(n: int, m: int, sms: int = 132, one_pass_max: int = ONE_PASS_MAX, chunk: int = CHUNK,
               threads_per_sm: int = 1024, stages: int = 2) -> dict:
    """Compile-time parameters of the power-of-two path of a streamed row kernel over [m, n]:
    BLOCK, R, ONE_PASS, WARPS, MIN_BLOCKS, PROGRAMS, STAGES (steps 1-4 of the module docstring with
    the thread budget and ring depth given; MIN_BLOCKS = the blocks the budget allows, the
    `__launch_bounds__` request that keeps them resident). sweep_rows.py on an H200 (2026-11-30,
    bf16): 16 elements per thread, 1024 threads per SM and 2 stages were best or within 3% for
    rms_norm, fused_add_rms_norm and softmax at 16384x4096 and rms_norm at 4096x8192; layer_norm
    and the chunked softmax (4096x32000) ran best with 768 threads per SM and 3 stages."""
    one = n <= one_pass_max
    block = max(8, next_pow2(n)) if one else chunk
    rows = 1
    while one and rows < 8 and block * rows < 2048 and m >= rows * 2 * sms:
        rows *= 2
    warps = min(32, max(1, block * rows // (32 * ELEMS_PER_THREAD)))
    blocks = max(1, min(32, threads_per_sm // (32 * warps)))
    return dict(BLOCK=block, R=rows, ONE_PASS=one, WARPS=warps, MIN_BLOCKS=blocks, PROGRAMS=sms * blocks,
                STAGES=stages)


def plan(kernel: str, n: int, m: int, itemsize: int = 2, sms: int = 132, tgt: Target = H100,
         prefetch: bool = True) -> tuple[str, dict]:
    """(kernel name, compile-time parameters) for `kernel` (a TRAITS key) over [m, n] rows of
    `itemsize`-byte elements on `sms` SMs. The name is `kernel` (power-of-two or chunked path) or
    `kernel + "_k2"` (pieces path: the caller views its [m, n] tensors as [m * K, W] and its [n]
    vectors as [K, W], K = P1 + P2). `prefetch=False` keeps the ring and the program-per-step grids (the
    wrappers' choice for f16 and f32: their PREFETCH grids spilled 28-216 bytes under the launch bound, ptxas)."""
    t = TRAITS[kernel]
    pc = pieces(n, kernel) if m >= sms else None  # under a wave of rows idle lanes cost no bandwidth
    if pc is None:
        cfg = row_config(n, m, sms, threads_per_sm=t.threads_per_sm, stages=t.stages)
        steps = -(-m // cfg["R"])
        if cfg["ONE_PASS"] and steps <= cfg["PROGRAMS"]:  # a step per program at most
            warps = max(1, min(FEW_THREADS // 32, cfg["BLOCK"] * cfg["R"] // (32 * FEW_ELEMS)))
            cfg.update(STAGES=1, PROGRAMS=1 << 30, WARPS=warps, MIN_BLOCKS=0)  # as measured: no register cap
        elif cfg["ONE_PASS"] and prefetch and (pf := _prefetch(t, cfg, m, sms)) is not None:
            cfg = pf
        elif cfg["ONE_PASS"] and t.registers:
            cfg.update(STAGES=1, PROGRAMS=1 << 30)
        elif cfg["ONE_PASS"]:
            step = cfg["R"] * n * itemsize * t.reads
            threads = 32 * cfg["WARPS"]
            blocks = cfg["MIN_BLOCKS"]
            cfg["STAGES"] = _deepen(cfg["STAGES"], blocks, step, tgt, threads, 0, t.threads_per_sm, t.max_stages)
        return kernel, cfg
    w, p1, p2 = pc
    k = p1 + p2
    e = pieces_elems(n, kernel)
    threads = w // e
    regs = int(t.regs_per_elem * e * k + 0.5)
    step = n * itemsize * t.reads
    blocks = _resident(threads, regs, step, t.stages, tgt.threads, tgt)
    if t.registers or m <= sms * blocks:
        return kernel + "_k2", dict(W=w, P1=p1, P2=p2, WARPS=threads // 32, MIN_BLOCKS=0, PROGRAMS=1 << 30,
                                    STAGES=1)
    held = -(-int(t.prefetch_pieces * e * k) // 8) * 8  # registers a thread of the PREFETCH path holds (ptxas rounds to 8)
    pf = max(1, min(tgt.blocks, PIECES_THREADS // threads, tgt.registers // max(1, threads * held)))
    if prefetch and t.prefetch_pieces and m > sms * pf:  # a program has a second row to prefetch
        # no register cap (MIN_BLOCKS 0): bf16 fits the estimate's blocks uncapped (the nvcc test); under a cap
        # ptxas sometimes spilled instead (f16 layer_norm_k2 2304 at 6 blocks: 60 bytes)
        return kernel + "_k2", dict(W=w, P1=p1, P2=p2, WARPS=threads // 32, MIN_BLOCKS=0, PROGRAMS=sms * pf,
                                    STAGES=1, PREFETCH=True)
    stages = _deepen(t.stages, blocks, step, tgt, threads, regs, tgt.threads, t.max_stages)
    return kernel + "_k2", dict(W=w, P1=p1, P2=p2, WARPS=threads // 32, MIN_BLOCKS=0, PROGRAMS=sms * blocks,
                                STAGES=stages)


def _prefetch(t: Traits, cfg: dict, m: int, sms: int) -> dict | None:
    """The PREFETCH configuration of a one-pass row kernel (see PF_THREADS), or None where the kernel keeps the
    ring or its program-per-step grid: `cfg` is row_config's."""
    block, rows = cfg["BLOCK"], cfg["R"]
    per, budget = ELEMS_PER_THREAD, PF_THREADS
    if t.prefetch_short and block <= 1024:
        rows, per, budget = 1, FEW_ELEMS, SHORT_THREADS
    threads = max(32, min(1024, block * rows // per))
    blocks = max(1, min(32, budget // threads))
    steps = -(-m // rows)
    if steps <= sms * blocks:  # no program would have a second step to prefetch
        return None
    if t.registers:  # instead of a grid of a program per step: only where that grid is a few waves
        s1 = max(1, min(32, t.threads_per_sm // (32 * cfg["WARPS"])))
        if -(-m // cfg["R"]) > t.prefetch_waves * sms * s1:
            return None
    return dict(BLOCK=block, R=rows, ONE_PASS=True, WARPS=threads // 32, MIN_BLOCKS=blocks, PROGRAMS=sms * blocks,
                STAGES=1, PREFETCH=True)


def explain(kernel: str, n: int, m: int, itemsize: int = 2, sms: int = 132, tgt: Target = H100,
            prefetch: bool = True) -> str:
    """One line: the configuration `plan` picks and the numbers it came from."""
    name, cfg = plan(kernel, n, m, itemsize, sms, tgt, prefetch)
    t = TRAITS[kernel]
    if name.endswith("_k2"):
        threads, elems = 32 * cfg["WARPS"], n // (32 * cfg["WARPS"])
        regs = int(t.regs_per_elem * (cfg["W"] // threads) * (cfg["P1"] + cfg["P2"]) + 0.5)
        blocks = _resident(threads, regs, n * itemsize * t.reads, max(1, cfg["STAGES"]), tgt.threads, tgt)
        step = n * itemsize * t.reads
        tile = f"{n} = {cfg['W']} x ({cfg['P1']} + {cfg['P2']}), 0% idle"
    else:
        threads = 32 * cfg["WARPS"]
        blocks = cfg["MIN_BLOCKS"] or max(1, min(tgt.blocks, t.threads_per_sm // threads))
        elems = cfg["BLOCK"] * cfg["R"] // threads
        step = cfg["R"] * min(n, cfg["BLOCK"]) * itemsize * t.reads
        tile = (f"BLOCK {cfg['BLOCK']} x R {cfg['R']}, {1 - n / cfg['BLOCK']:.0%} idle" if cfg["ONE_PASS"]
                else f"chunks of {cfg['BLOCK']}")
    if cfg.get("PREFETCH"):  # every resident block's next step is in flight during this one
        blocks = cfg["PROGRAMS"] // sms
        ahead, how = blocks * step, "persistent, the next step prefetched into registers"
        grid = f"{cfg['PROGRAMS']} programs"
    elif cfg["STAGES"] == 1:  # straight into registers: every resident block's step is in flight
        ahead, how = blocks * step, "a program per step, loads into registers"
        grid = f"{-(-m // cfg.get('R', 1))} programs"
    else:
        ahead, how = blocks * (cfg["STAGES"] - 1) * step, f"{cfg['STAGES']} stages"
        grid = f"{cfg['PROGRAMS']} programs"
    return (f"{name} [{m}, {n}]: {tile}; {threads} threads x {elems} elements; {blocks} blocks/SM, "
            f"{grid}; {how}, {ahead // 1024} KB in flight per SM")


def split_segments(m: int, n: int, block: int, sms: int = 132, waves: int = 4, most: int = 256,
                   fill: bool = False, min_chunks: int = 1) -> int:
    """Programs per row for a reduction over m rows of n, in `block`-wide chunks (the last one
    masked): enough for about `waves` programs per SM in all, at most `most` and one per chunk; 1
    means a program per row. With `fill`, rows that alone give every SM a program (m >= sms) are not
    split (a split kernel reads its segment twice, the second time from L2), nor rows of fewer than
    `min_chunks` chunks (a second launch costs more than the few idle SMs: a guess, not measured)."""
    chunks = -(-n // block)
    if (fill and m >= sms) or chunks < min_chunks:
        return 1
    return max(1, min(chunks, most, (waves * sms) // max(1, m)))


def segment(n: int, block: int, ns: int) -> tuple[int, int]:
    """(seg, ns): a segment length that is a multiple of `block` for about `ns` segments per row of
    n, and the number of segments that covers the row with it."""
    chunks = -(-n // block)
    seg = -(-chunks // ns) * block
    return seg, -(-n // seg)


PAD_MAX = 0.08  # a column block may pad the row by this much before a narrower one is taken


def column_block(d: int, most: int = 2048, least: int = 256) -> int:
    """The column tile of a kernel that cuts [M, d] rows into column blocks (silu_and_mul, gelu_and_mul,
    embedding): the widest power of two from `most` down to `least` whose blocks pad the row by at
    most PAD_MAX (4864 -> 1024: 5 blocks, 5.3% padding, where 2048 pads 21%), else the least padded
    (the widest on a tie), starting from the row's next power of two when that is narrower."""
    b = min(most, max(8, next_pow2(d)))
    best, pad_best = b, None
    while b >= least:
        pad = (-(-d // b) * b - d) / d
        if pad <= PAD_MAX:
            return b
        if pad_best is None or pad < pad_best:
            best, pad_best = b, pad
        b //= 2
    return best


COLUMN_WAVES = 4  # rows per program are only added while a grid of >= this many programs per SM remains
# A grid of fewer programs than SMs (one token) halves its column block down to this: sweep_rows.py --misses on
# an H200 (2026-12-02), silu_and_mul T=1 D=29568: BLOCK 2048 (15 programs) 1.50 us, 1024 1.46, 512 (58) 1.43,
# 256 1.44; gelu_and_mul 1.62 / 1.60 / 1.54 / 1.58 (torch.compile 1.30 / 1.26)
NARROW_MIN = 512


# embedding over many tokens: 16 elements (two 16-byte vectors) a thread where the grid keeps COLUMN_WAVES programs
# per SM. sweep_rows.py --misses on an H200 (2026-12-02), T=4096 D=4096: BLOCK 2048 at 16 a thread 17.35 us, at 8
# (the rule before) 18.96; BLOCK 1024 at 16 17.05 (torch.compile 18.02). T=100 D=2048 (200 programs): 8 a thread
# 1.47-1.48 us, 16 1.50-1.53
MANY_ELEMS = 16


def column_config(d: int, m: int, sms: int = 132, rows_in_warps: bool = True, many_elems: int = 8) -> dict:
    """BLOCK, ROWS, WARPS of a kernel that cuts [m, d] rows into column blocks (silu_and_mul and
    gelu_and_mul: `rows_in_warps`, a program's ROWS rows spread over its warps; embedding: a row at a
    time, the warps cover one BLOCK). BLOCK is `column_block(d)`, halved (down to NARROW_MIN) while the grid
    has fewer programs than SMs; ROWS doubles (to 8 at most, while a
    program's step stays <= 2048 elements of each input) only while the grid keeps COLUMN_WAVES programs per
    SM, so no SM goes idle for the sake of fewer, longer programs; 8 elements (one 16-byte vector) a thread,
    `many_elems` where the grid keeps COLUMN_WAVES programs per SM (embedding: MANY_ELEMS), at most 8 warps."""
    block = column_block(d)
    while block > NARROW_MIN and m * -(-d // block) < sms:  # fewer programs than SMs: narrower blocks, more SMs
        block //= 2
    rows = 1
    while rows < 8 and block * rows * 2 <= 2048 and m >= rows * 2 * COLUMN_WAVES * sms:
        rows *= 2
    many = -(-m // rows) * -(-d // block) >= COLUMN_WAVES * sms
    elems = many_elems if many else 8
    warps = max(1, min(8, block * (rows if rows_in_warps else 1) // (32 * elems)))
    return dict(BLOCK=block, ROWS=rows, WARPS=warps)


"""The resource model of autoconfig: the machine's constants (H200 SXM, bf16 dense), what one program of a
translated kernel does (`program_work`: FLOPs, bytes, the main loop) and the predicted time of a launch
(`estimate`: programs per SM, waves, the compute / L2 / DRAM bounds). The model and its constants are
documented in docs/language.md ("Compile-time parameters tilex chooses").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from . import ast as A
from .explain import stmt_exprs as _stmt_exprs, walk_exprs as _walk
from .types import StrEnum

# ---------------------------------------------------------------- the machine (H200 SXM, bf16 dense)
SMS = 132  # streaming multiprocessors
PEAK_SM = 989e12 / SMS  # tensor-core FLOP/s per SM
L2_BW_SM = 100e9  # bytes/s one SM reads from L2 (achieved, TMA or cp.async)
DRAM_BW = 4.0e12  # bytes/s from HBM (achieved copy bandwidth)
LATENCY_BYTES = 64 << 10  # bytes one SM must have in flight to cover memory latency under load (H200 sweep, 2026-12-01)
WAVE_US = 3.0  # fixed cost of one wave of programs (pipeline fill, epilogue, tail), microseconds (H200 sweep, 2026-12-01)
SMEM_SM = 228 << 10  # shared memory per SM
THREADS_SM = 2048
REGS_SM = 65536
BLOCKS_SM = 32
FMA_PEAK_SM = 67e12 / SMS  # f32 FMA FLOP/s per SM (a product not on tensor cores)
# bytes/s one warp moves with cp.async (the mma path's ring: the compute warps issue every 16-byte chunk themselves,
# where TMA is one engine per SM). H200, matmul.tile at M=16 K=N=5120 with 16x16x128 tiles (one warp a block, 2.4
# blocks an SM): 21 GB/s an SM, ~9 GB/s a warp
CP_ASYNC_WARP_BW = 9e9
CLOCK = 1.83e9


class ProductPath(StrEnum):
    """How a program's products run: a planned tensor-core loop (the values of `MmaStrategy`), FMAs, or none."""

    WGMMA = "wgmma"
    MMA = "mma"
    GENERIC = "generic"  # an `@` off tensor cores
    NONE = "none"  # no product


# fraction of the tensor-core peak a main loop reaches, per strategy; a wgmma warpgroup's k-step also pays a
# fixed ~WGMMA_STEP_CYCLES (barrier waits, fences) against 2*64*N*BK / (PEAK_SM / CLOCK) cycles of math
STRATEGY_EFF = {ProductPath.WGMMA: 0.95, ProductPath.MMA: 0.45}
WGMMA_STEP_CYCLES = 32
# the per-SM cost of one main-loop k-step (64 columns of K), whatever its bytes: ns per row of a ring stage,
# the left operand's BM rows counted whole (a TMA box fills the rows past M too) and each right operand's BN rows
# weighted by the second number; the steps of the programs sharing an SM add up. Fitted to the gated MLP's tile
# sweep on the H200 (2026-12-03, tests/data/gated_sweep_h200.json: 1077 timed launches slower than 1.3x the
# DRAM floor, rms error 20% / 40% for wgmma / mma.sync): where memory binds, a 64 x 32 wgmma tile streams 0.5 us
# a step an SM, a 64 x 128 tile 0.8 us for four times the weight bytes, so wide tiles win at decode sizes
STEP_NS_ROW = {ProductPath.WGMMA: (4.52, 0.525), ProductPath.MMA: (15.1, 0.225)}
STAGE_TRIP_US = 1.5  # a ring stage's round trip (issue, fill, wait): a program runs at most stages-ahead steps per trip
# the step terms are measured only on main loops of two products sharing their left operand; one-product loops keep
# the bandwidth model that tests/data/gemm_sweep_h200.json checks (with the step terms 8 of its picks got worse)
STEP_MIN_PRODUCTS = 2
# ... and only at the rows measured (M = 1, 16, 48): larger products keep the bandwidth / compute model, which the
# step terms would overestimate (M=4096 K=5120 N=13824: 2.7 ms predicted against 1.5-1.8 measured)
STEP_MAX_ROWS = 64


# ---------------------------------------------------------------- what one program does
_ARITH = {A.BinOpKind.ADD: lambda a, b: a + b, A.BinOpKind.SUB: lambda a, b: a - b,
          A.BinOpKind.MUL: lambda a, b: a * b, A.BinOpKind.FLOORDIV: lambda a, b: a // b if b else None,
          A.BinOpKind.MOD: lambda a, b: a % b if b else None}


def value(e: A.Expr, env: Mapping[str, int]) -> int | None:
    """An integer scalar expression over symbols, constants and `program_id` (taken as 0), or None."""
    if isinstance(e, A.IntLit):
        return e.value
    if isinstance(e, A.Name):
        return env.get(e.id)
    if isinstance(e, A.BinOp) and e.op in _ARITH:
        a, b = value(e.lhs, env), value(e.rhs, env)
        return None if a is None or b is None else _ARITH[e.op](a, b)
    if isinstance(e, A.UnaryOp) and e.op.value == "-":
        v = value(e.operand, env)
        return None if v is None else -v
    if isinstance(e, A.Call):
        args = [value(a, env) for a in e.args]
        if e.func == "program_id":
            return 0
        if e.func == "num_programs" and len(e.args) == 1 and isinstance(e.args[0], A.IntLit):
            return env.get(f"num_programs({e.args[0].value})")  # the grid, when program_work was given it
        if None in args:
            return None
        if e.func == "cdiv" and len(args) == 2 and args[1]:
            return -(-args[0] // args[1])
        if e.func in ("min", "max") and args:
            return (min if e.func == "min" else max)(args)
    return None


@dataclass
class Work:
    """Per program: FLOPs of tile products, bytes read or written in global memory, and the main loop."""

    flops: float = 0.0
    bytes: float = 0.0
    strategy: ProductPath = ProductPath.NONE  # how its products run
    tile: tuple = ()  # the main loop's BM, BN, BK
    stages: int = 1
    ring_bytes: int = 0  # bytes of one stage of the main loop's ring (or a streamed loop's)
    steps: float = 0.0  # k-steps of the planned main loop where the step terms apply (else 0), all trips counted
    step_ns: float = 0.0  # one such step's per-SM cost: STEP_NS_ROW's ns x (BM + w * nb * BN) x BK / 64


def program_work(k: A.Kernel, symbols: Mapping[str, int], grid: Sequence[int] = ()) -> Work:
    """Count what one program does: every global load and store of a tile (its elements x the dtype size) and
    every `@` (2 m n k), times the trip counts of the loops around it (bounds evaluated with `symbols`, scalar
    locals, `program_id` as 0 and `num_programs` from `grid`: a persistent kernel's tile loop counts its trips)."""
    env = dict(symbols)
    env.update({f"num_programs({i})": int(g) for i, g in enumerate(grid)})
    env.update({n: v for n, v in k.defines if isinstance(v, int) and not isinstance(v, bool)})
    dims = {p.name: p.type.dims for p in k.params if p.type.dims is not None}
    w = Work()

    def elements(x: A.Index) -> float:
        """Elements of a tile access inside the tensor, on average over the programs: a tile axis sliced from a
        tensor axis of size D covers D / cdiv(D, T) of its T (an M = 1 product reads one row of its 64-row tile;
        TMA and masked loads move nothing for the rest)."""
        shape = x.ty.shape or (1,)
        axes = [d for d, item in zip(dims[x.base.id], x.items) if isinstance(item, A.Slice)]
        if len(axes) != len(shape):
            return float(math.prod(shape))
        out = 1.0
        for d, t in zip(axes, shape):
            size = d.value if isinstance(d, A.IntLit) else env.get(d.id) if isinstance(d, A.Name) else None
            out *= size / -(-size // t) if isinstance(size, int) and 0 < size and t > 0 else t
        return out

    def left_rows(a) -> int | None:
        """The extent of the left operand's row axis (M of the product) with these symbols, if known."""
        d = dims.get(a.tensor)
        if not d or len(d) < 2:
            return None
        size = d[-2 if a.kmajor else -1]
        return size.value if isinstance(size, A.IntLit) else env.get(size.id) if isinstance(size, A.Name) else None

    def count(e, mult):
        for x in _walk(e):
            if isinstance(x, A.Index) and isinstance(x.base, A.Name) and x.base.id in dims and x.ty is not None:
                w.bytes += elements(x) * x.ty.dtype.itemsize * mult
            elif isinstance(x, A.BinOp) and x.op is A.BinOpKind.MATMUL and x.lhs.ty is not None:
                (m, kk), (_, n) = x.lhs.ty.shape, x.rhs.ty.shape
                w.flops += 2.0 * m * n * kk * mult
                if w.strategy is ProductPath.NONE:
                    w.strategy = ProductPath.GENERIC

    def block(b, mult):
        for s in b.stmts:
            if isinstance(s, A.For):
                lo, hi, st = value(s.start, env), value(s.stop, env), value(s.step, env)
                trips = max(0, -(-(hi - lo) // st)) if None not in (lo, hi, st) and st > 0 else 1
                plan = s.plan
                if plan is not None:
                    w.strategy, w.tile, w.stages = ProductPath(plan.strategy), (plan.bm, plan.bn, plan.bk), plan.stages
                    w.ring_bytes = (plan.bm + plan.nb * plan.bn) * plan.bk * plan.dtype.itemsize
                    per_row = STEP_NS_ROW.get(w.strategy)
                    rows = left_rows(plan.products[0].a)
                    if per_row is not None and plan.nb >= STEP_MIN_PRODUCTS and rows is not None \
                            and rows <= STEP_MAX_ROWS:
                        w.steps += mult * trips
                        w.step_ns = per_row[0] * (plan.bm + per_row[1] * plan.nb * plan.bn) * plan.bk / 64
                elif s.stream:
                    w.stages = max(w.stages, max(t.stages for t in s.stream))
                    w.ring_bytes = max(w.ring_bytes, sum(t.stage_bytes for t in s.stream))
                mma = getattr(s, "mma", None)
                before = w.strategy
                block(s.body, mult * trips)
                if mma is not None and before in (ProductPath.NONE, ProductPath.GENERIC) \
                        and w.strategy is ProductPath.GENERIC:
                    w.strategy = ProductPath(mma.strategy)
            elif isinstance(s, A.If):
                count(s.cond, mult)
                block(s.then, mult)
                if s.orelse is not None:
                    block(s.orelse, mult)
            else:
                if isinstance(s, A.Assign) and s.op is None and not (s.value.ty is not None and s.value.ty.shape):
                    got = value(s.value, env)  # a scalar local (a K share's bounds): loop bounds may use it
                    if got is not None:
                        env[s.name] = got
                    else:
                        env.pop(s.name, None)
                for e in _stmt_exprs(s):
                    count(e, mult)
    block(k.body, 1)
    return w


# ---------------------------------------------------------------- the model
@dataclass
class Estimate:
    time_us: float
    programs: int
    per_sm: int  # programs resident on one SM (shared memory, threads, registers)
    waves: float  # programs / (SMS x per_sm)
    limit: str  # what bounds the time: compute | L2 | steps (the per-step terms) | DRAM | waves
    eff: float  # fraction of the tensor-core (or FMA) peak the loop reaches
    work: Work
    threads: int
    smem_bytes: int
    regs: int
    work_us: float = 0.0  # the time without the DRAM floor (breaks ties between DRAM-bound candidates)

    def as_dict(self) -> dict:
        return {"time_us": round(self.time_us, 3), "work_us": round(self.work_us, 3), "programs": self.programs, "per_sm": self.per_sm,
                "waves": round(self.waves, 3), "limit": self.limit, "eff": round(self.eff, 3),
                "strategy": self.work.strategy, "tile": list(self.work.tile), "stages": self.work.stages,
                "threads": self.threads, "smem_bytes": self.smem_bytes, "regs_per_thread": self.regs,
                "flops_per_program": self.work.flops, "bytes_per_program": self.work.bytes}


def _regs(k: A.Kernel, threads: int, work: Work) -> int:
    """Registers per thread: what the memory pass counted for the tiles, else the accumulator's share + 32."""
    info = k.info
    got = getattr(info, "regs_per_thread", None) if info is not None else None
    if isinstance(got, int) and got > 0:
        return min(255, got)
    acc = work.tile[0] * work.tile[1] if work.tile else 0
    consumers = max(32, threads - getattr(info, "producers", 0))
    return 32 + acc // consumers  # above 255 the accumulators spill: `_evaluate` rejects it


def estimate(k: A.Kernel, threads: int, smem_bytes: int, grid: Sequence[int], symbols: Mapping[str, int],
             total_bytes: float) -> Estimate:
    """Predicted microseconds of one launch (see docs/language.md, "Compile-time parameters tilex chooses")."""
    work = program_work(k, symbols, grid)
    programs = max(1, math.prod(grid))
    regs = _regs(k, threads, work)
    per_sm = max(1, min(SMEM_SM // max(smem_bytes, 1), THREADS_SM // max(threads, 1),
                        REGS_SM // max(threads * regs, 1), BLOCKS_SM))
    if work.strategy in (ProductPath.WGMMA, ProductPath.MMA):
        eff = STRATEGY_EFF[work.strategy]
        if work.strategy is ProductPath.WGMMA and work.tile:
            bn, bk = work.tile[1], work.tile[2]
            math_cycles = 2 * 64 * bn * bk / (PEAK_SM / CLOCK)
            eff *= math_cycles / (math_cycles + WGMMA_STEP_CYCLES)
        peak = PEAK_SM * eff
    else:
        eff = 1.0
        peak = FMA_PEAK_SM * (0.5 if work.strategy is ProductPath.GENERIC else 1.0)
    # bytes in flight per SM: the ring's stages ahead (a wgmma ring: less the stage being read and the one whose
    # wgmma is still in flight, at least half a stage), else one 16-byte access per thread
    if work.strategy is ProductPath.WGMMA:
        ahead_stages = max(0.5, work.stages - 2)
    else:
        ahead_stages = max(1, work.stages - 1)
    ahead = work.ring_bytes * ahead_stages if work.ring_bytes else threads * 16

    def wave(c: int, active: int = SMS) -> tuple[float, str]:  # c programs sharing one SM, `active` SMs busy
        hide = min(1.0, c * ahead / LATENCY_BYTES)
        comp = c * work.flops / peak if work.flops else 0.0
        bw = L2_BW_SM if work.strategy is not ProductPath.MMA \
            else min(L2_BW_SM, c * max(1, threads // 32) * CP_ASYNC_WARP_BW)
        mem = c * work.bytes / (bw * hide)
        steps = work.steps * max(c * work.step_ns * 1e-9 * min(1.0, active / SMS) / hide,
                                 STAGE_TRIP_US * 1e-6 / ahead_stages)
        if comp >= max(mem, steps):
            return comp * 1e6 + WAVE_US, "compute"
        return max(mem, steps) * 1e6 + WAVE_US, "L2" if mem >= steps else "steps"

    slots = SMS * per_sm
    full, rem = divmod(programs, slots)
    t, limit = 0.0, "compute"
    if full:
        tw, limit = wave(per_sm)
        t += full * tw
    if rem:
        tw, lim = wave(-(-rem // SMS), min(rem, SMS))
        t += tw
        limit = limit if full else lim
    work_us = t
    dram = total_bytes / DRAM_BW * 1e6
    if dram > t:
        t, limit = dram, "DRAM"
    return Estimate(t, programs, per_sm, programs / slots, limit, eff, work, threads, smem_bytes, regs, work_us)

"""Compile-time parameters tilex chooses: a resource model ranks every configuration of a kernel's search
space at a shape bucket and picks the fastest it predicts.

A kernel leaves a parameter to tilex with `<BM: int = auto>` (the space is implied by the parameter's role,
`implied_space`) or `<BM: int in (64, 128, 256)>` (declared). `choose(source, kernel, shapes)` translates
each candidate once (passes only, cached per source digest, kernel, defines, arch and launch facts), reads
what the translation decided (tensor-core strategy, threads, shared memory: the memory pass's own budget,
registers), works out the per-program FLOPs and bytes from the IR (`program_work`) and scores it with
`estimate` at the model bucket of the sizes (`model_bucket`). A configuration `tilex tune` timed and stored
for that (source, kernel, shape bucket, arch, toolkit) wins over the model. The model and its constants are
documented in docs/language.md ("Compile-time parameters tilex chooses").
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from . import ast as A
from .diagnostics import CompileError
from .dtype_params import changed_dtypes
from .explain import stmt_exprs as _stmt_exprs, walk_exprs as _walk, walk_stmts

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
# fraction of the tensor-core peak a main loop reaches, per strategy; a wgmma warpgroup's k-step also pays a
# fixed ~WGMMA_STEP_CYCLES (barrier waits, fences) against 2*64*N*BK / (PEAK_SM / CLOCK) cycles of math
STRATEGY_EFF = {"wgmma": 0.95, "mma": 0.45, "generic": None}
CLOCK = 1.83e9
WGMMA_STEP_CYCLES = 32

IMPLIED = {  # role -> candidate values when a parameter says `= auto`
    "tile": (16, 32, 64, 128, 256),
    "step": (32, 64, 128),
    "stages": (2, 3, 4),
    "warps": (4, 8),
}
NOMINAL_SIZE = 4096  # the size of every symbol when no shapes are known (`tilex translate`, module.cuda)


# ---------------------------------------------------------------- search spaces
def auto_params(k: A.Kernel) -> list[A.CParam]:
    return [c for c in k.cparams if c.auto]


def role(k: A.Kernel, name: str) -> str | None:
    """What an `auto` parameter is, from how the (parsed) kernel uses it: the `stages` of a pipeline loop, the
    step of a loop (a K step), WARPS, or a tile size (a tile dimension or a slice extent); None otherwise."""
    if name.upper() in ("WARPS", "NUM_WARPS") or any(c.name == name and c.kind == "warps" for c in k.cparams):
        return "warps"
    roles: set[str] = set()

    def mentions(e) -> bool:
        return any(isinstance(x, A.Name) and x.id == name for x in _walk(e))

    for s, _ in walk_stmts(k.body):
        if isinstance(s, A.For):
            if s.pipelined and isinstance(s.stages, A.Expr) and mentions(s.stages):
                roles.add("stages")
            if mentions(s.step):
                roles.add("step")
        for top in _stmt_exprs(s):
            for e in _walk(top):
                if isinstance(e, A.Call) and e.func in ("pipeline", "range"):
                    if any(kw == "stages" and mentions(v) for kw, v in e.kwargs):
                        roles.add("stages")
                    if len(e.args) >= 3 and mentions(e.args[2]):
                        roles.add("step")
                elif isinstance(e, A.TileTypeExpr) and any(mentions(d) for d in e.dims):
                    roles.add("tile")
                elif isinstance(e, A.Slice) and e.stop is not None and mentions(e.stop):
                    roles.add("tile")
    for r in ("stages", "step", "tile"):
        if r in roles:
            return r
    return None


def declared_space(k: A.Kernel) -> dict[str, tuple]:
    """{auto parameter: its candidates}: the declared `in (...)` values, else the implied ones of its role."""
    from .passes.resolve_names import check_space

    out = {}
    for c in auto_params(k):
        check_space(c)
        if c.space is not None:
            out[c.name] = tuple(c.space)
            continue
        r = role(k, c.name)
        if r is None:
            raise CompileError(f"tilex cannot imply a search space for '{c.name}' (it is not a tile size, a loop "
                               "step, a pipeline depth or WARPS)", c.span,
                               (f"declare one: `{c.name}: {c.kind} in (V1, V2, ...)`",))
        out[c.name] = IMPLIED[r]
    return out


# ---------------------------------------------------------------- buckets
def model_bucket(n: int) -> int:
    """The size the model evaluates for `n`: up to 16 the next power of two, above it the next of 4, 5, 6 or 7
    times a power of two (four buckets an octave: 896, 5120 and 14336 are their own, 13824 -> 14336)."""
    n = int(n)
    if n <= 16:
        return 1 if n <= 1 else 1 << (n - 1).bit_length()
    p = 1 << (n.bit_length() - 3)  # n in [4p, 8p)
    return -(-n // p) * p


def bucket_of(shapes: Mapping[str, int]) -> dict[str, int]:
    return {s: model_bucket(v) for s, v in sorted(shapes.items())}


# ---------------------------------------------------------------- translating candidates (cached)
_PROGRAMS: dict[tuple, Any] = {}
_MAX_PROGRAMS = 4096


@functools.lru_cache(maxsize=64)  # a few sources, asked per call
def digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def translated(source: str, file: str, kernel: str, defines: Mapping[str, Any], arch: str,
               assume: tuple = (), src_digest: str | None = None):
    """The checked IR kernel of one candidate, or the CompileError that rejects it (both cached)."""
    from .pipeline import Options, compile_program

    key = (src_digest or digest(source), file, kernel, tuple(sorted(defines.items())), arch, tuple(assume))
    hit = _PROGRAMS.get(key)
    if hit is None:
        try:
            program = compile_program(source, file, Options(defines=dict(defines), arch=arch, kernel=kernel,
                                                            assume=tuple(assume)))
            hit = program.kernel(kernel)
        except CompileError as e:
            hit = e
        if len(_PROGRAMS) >= _MAX_PROGRAMS:
            _PROGRAMS.clear()
        _PROGRAMS[key] = hit
    return hit


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
    strategy: str = "none"  # wgmma | mma | generic (an `@` off tensor cores) | none (no product)
    tile: tuple = ()  # the main loop's BM, BN, BK
    stages: int = 1
    ring_bytes: int = 0  # bytes of one stage of the main loop's ring (or a streamed loop's)


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

    def count(e, mult):
        for x in _walk(e):
            if isinstance(x, A.Index) and isinstance(x.base, A.Name) and x.base.id in dims and x.ty is not None:
                w.bytes += elements(x) * x.ty.dtype.itemsize * mult
            elif isinstance(x, A.BinOp) and x.op is A.BinOpKind.MATMUL and x.lhs.ty is not None:
                (m, kk), (_, n) = x.lhs.ty.shape, x.rhs.ty.shape
                w.flops += 2.0 * m * n * kk * mult
                if w.strategy == "none":
                    w.strategy = "generic"

    def block(b, mult):
        for s in b.stmts:
            if isinstance(s, A.For):
                lo, hi, st = value(s.start, env), value(s.stop, env), value(s.step, env)
                trips = max(0, -(-(hi - lo) // st)) if None not in (lo, hi, st) and st > 0 else 1
                plan = s.plan
                if plan is not None:
                    w.strategy, w.tile, w.stages = plan.strategy, (plan.bm, plan.bn, plan.bk), plan.stages
                    w.ring_bytes = (plan.bm + plan.nb * plan.bn) * plan.bk * plan.dtype.itemsize
                elif s.stream:
                    w.stages = max(w.stages, max(t.stages for t in s.stream))
                    w.ring_bytes = max(w.ring_bytes, sum(t.stage_bytes for t in s.stream))
                mma = getattr(s, "mma", None)
                before = w.strategy
                block(s.body, mult * trips)
                if mma is not None and before in ("none", "generic") and w.strategy == "generic":
                    w.strategy = mma.strategy
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
    limit: str  # what bounds the time: compute | L2 | DRAM | waves
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
    if work.strategy in ("wgmma", "mma"):
        eff = STRATEGY_EFF[work.strategy]
        if work.strategy == "wgmma" and work.tile:
            bn, bk = work.tile[1], work.tile[2]
            math_cycles = 2 * 64 * bn * bk / (PEAK_SM / CLOCK)
            eff *= math_cycles / (math_cycles + WGMMA_STEP_CYCLES)
        peak = PEAK_SM * eff
    else:
        eff = 1.0
        peak = FMA_PEAK_SM * (0.5 if work.strategy == "generic" else 1.0)
    # bytes in flight per SM: the ring's stages ahead (a wgmma ring: less the stage being read and the one whose
    # wgmma is still in flight, at least half a stage), else one 16-byte access per thread
    if not work.ring_bytes:
        ahead = threads * 16
    elif work.strategy == "wgmma":
        ahead = work.ring_bytes * max(0.5, work.stages - 2)
    else:
        ahead = work.ring_bytes * max(1, work.stages - 1)

    def wave(c: int) -> tuple[float, str]:  # c programs sharing one SM
        hide = min(1.0, c * ahead / LATENCY_BYTES)
        comp = c * work.flops / peak if work.flops else 0.0
        bw = L2_BW_SM if work.strategy != "mma" else min(L2_BW_SM, c * max(1, threads // 32) * CP_ASYNC_WARP_BW)
        mem = c * work.bytes / (bw * hide)
        return (max(comp, mem) * 1e6 + WAVE_US), ("compute" if comp >= mem else "L2")

    slots = SMS * per_sm
    full, rem = divmod(programs, slots)
    t, limit = 0.0, "compute"
    if full:
        tw, limit = wave(per_sm)
        t += full * tw
    if rem:
        tw, lim = wave(-(-rem // SMS))
        t += tw
        limit = limit if full else lim
    work_us = t
    dram = total_bytes / DRAM_BW * 1e6
    if dram > t:
        t, limit = dram, "DRAM"
    return Estimate(t, programs, per_sm, programs / slots, limit, eff, work, threads, smem_bytes, regs, work_us)


# ---------------------------------------------------------------- choosing
@dataclass
class Candidate:
    defines: dict
    status: str  # "chosen" | "ok" | "rejected"
    reason: str = ""
    estimate: Estimate | None = None

    def as_dict(self) -> dict:
        d = {"defines": self.defines, "status": self.status}
        if self.reason:
            d["reason"] = self.reason
        if self.estimate is not None:
            d.update(self.estimate.as_dict())
        return d


@dataclass
class Choice:
    kernel: str
    shapes: dict
    bucket: dict
    arch: str
    defines: dict  # the chosen auto parameters
    source: str  # "model" | "tuned" | "fixed" (no auto parameter left to choose)
    candidates: list = field(default_factory=list)  # ranked: chosen first, then ok by time, then rejected
    space: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"kernel": self.kernel, "shapes": self.shapes, "bucket": self.bucket, "arch": self.arch,
                "chosen": self.defines, "by": self.source, "space": {k: list(v) for k, v in self.space.items()},
                "candidates": [c.as_dict() for c in self.candidates]}


_CHOICES: dict[tuple, Choice] = {}
_MAX_CHOICES = 4096


def _first_line(e: CompileError) -> str:
    lines = [ln for ln in e.message.strip().splitlines() if ln.strip()]
    return lines[0][:300] if lines else "compile error"


def choose(source: str, file: str, kernel: str, shapes: Mapping[str, int], arch: str = "sm_90a",
           defines: Mapping[str, Any] | None = None, assume: tuple = (), tuned: bool = True,
           cache_dir=None, space: Mapping[str, Sequence] | None = None) -> Choice:
    """The auto parameters of `kernel` for `shapes` (every symbol): a `tilex tune` winner stored for this
    bucket if there is one (with `tuned`), else the configuration the model predicts fastest at the model
    bucket of `shapes`. `defines` fixes parameters (not searched); `assume` are launch facts (sym, divisor).
    `space` searches these candidates instead of the declared ones (any parameters: a wrapper choosing the
    tiles of a kernel whose parameters have defaults, as tilex.stdlib.linear does).
    Cached per (source digest, kernel, bucket, arch, defines, facts, space)."""
    src_digest = digest(source)
    fixed = dict(defines or {})
    bucket = bucket_of(shapes)
    given = tuple((n, tuple(v)) for n, v in space.items()) if space is not None else None
    key = (src_digest, file, kernel, tuple(bucket.items()), arch, tuple(sorted(fixed.items())), tuple(assume), tuned,
           given)
    hit = _CHOICES.get(key)
    if hit is not None:
        return hit
    kdecl = _parsed(source, file, src_digest).kernel(kernel)
    space = {n: tuple(v) for n, v in (dict(given) if given is not None else declared_space(kdecl)).items()
             if n not in fixed}
    if tuned and space:
        stored = _tuned(source, kernel, shapes, arch, cache_dir, changed_dtypes(kdecl, fixed))
        if stored is not None and set(space) <= set(stored):
            choice = Choice(kernel, dict(shapes), bucket, arch, {n: stored[n] for n in space}, "tuned", [], space)
            return _remember(key, choice)
    names = list(space)
    cands: list[Candidate] = []
    for values in itertools.product(*(space[n] for n in names)):
        cfg = dict(zip(names, values))
        cands.append(_evaluate(source, file, kernel, {**fixed, **cfg}, cfg, bucket, arch, assume, src_digest))
    # fastest first; among equals (within 0.1%) the one with more slack under the DRAM floor, then the least work
    # (FLOPs of all programs: a 128-row tile over 64 rows ties in time where memory binds, but wastes half its math),
    # then fewer resources
    ok = sorted((c for c in cands if c.estimate is not None),
                key=lambda c: (round(math.log(max(c.estimate.time_us, 1e-6)) * 1000),
                               round(c.estimate.work_us, 3), c.estimate.work.flops * c.estimate.programs,
                               c.estimate.smem_bytes, c.estimate.threads))
    bad = [c for c in cands if c.estimate is None]
    if not ok:
        reasons = "; ".join(f"{_cfg_text(c.defines)}: {c.reason}" for c in bad[:4])
        raise CompileError(f"kernel '{kernel}': no configuration of its search space compiles ({reasons})",
                           kdecl.span)
    ok[0].status = "chosen"
    choice = Choice(kernel, dict(shapes), bucket, arch, dict(ok[0].defines), "model" if names else "fixed",
                    ok + bad, space)
    return _remember(key, choice)


@functools.lru_cache(maxsize=64)
def _parsed(source: str, file: str, src_digest: str):
    from .parser import parse

    return parse(source, file)


def _remember(key, choice):
    if len(_CHOICES) >= _MAX_CHOICES:
        _CHOICES.clear()
    _CHOICES[key] = choice
    return choice


def _cfg_text(cfg) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.items()) or "(defaults)"


def _evaluate(source, file, kernel, defines, cfg, bucket, arch, assume, src_digest) -> Candidate:
    from .launchspec import make_spec
    from .runtime.args import eval_grid

    k = translated(source, file, kernel, defines, arch, assume, src_digest)
    if isinstance(k, CompileError):
        return Candidate(cfg, "rejected", _first_line(k))
    spec = make_spec(k)
    symbols = {s: bucket.get(s, NOMINAL_SIZE) for s in spec.symbols}
    try:
        grid = eval_grid(spec, symbols)
    except Exception as e:  # a grid beyond CUDA's limits at these sizes
        return Candidate(cfg, "rejected", str(e).splitlines()[0])
    total = 0.0
    for p in spec.params:
        if p.kind == "tensor":
            total += math.prod(d if isinstance(d, int) else symbols[d] for d in p.dims) * _itemsize(p.dtype)
    est = estimate(k, spec.threads, spec.smem_bytes, grid, symbols, total)
    if est.regs > 255:
        return Candidate(cfg, "rejected", f"~{est.regs} registers per thread (the accumulators' share + 32): more "
                                          "than 255, the accumulators would spill", None)
    if est.regs * est.threads > REGS_SM:
        return Candidate(cfg, "rejected", f"{est.threads} threads x ~{est.regs} registers (the accumulators' share + "
                                          f"32) exceed the {REGS_SM} registers of an SM", None)
    return Candidate(cfg, "ok", "", est)


def _itemsize(dtype: str) -> int:
    from .types import DType

    return DType(dtype).itemsize


def _tuned(source, kernel, shapes, arch, cache_dir, dtypes=None):
    try:
        from .tune import best

        return best(source, kernel, shapes, arch, cache_dir=cache_dir, dtypes=dtypes)
    except Exception:  # an unreadable store never stops a launch (it warns)
        return None


def nominal_defines(program: A.Program, options) -> dict[str, dict]:
    """{kernel: chosen auto parameters} at NOMINAL_SIZE for every symbol: what a translation without shapes
    (`tilex translate`, `module.cuda`) uses for parameters left to tilex."""
    out = {}
    for k in program.kernels:
        if not any(c.auto and c.name not in options.defines for c in k.cparams):
            continue
        shapes = {}
        for p in k.params:
            for d in p.type.dims or ():
                if isinstance(d, A.Name) and d.id not in {c.name for c in k.cparams}:
                    shapes[d.id] = NOMINAL_SIZE
        fixed = {n: v for n, v in options.defines.items() if n in {c.name for c in k.cparams}}
        out[k.name] = choose(program.source, program.file, k.name, shapes, options.arch, fixed,
                             tuple(options.assume), tuned=False).defines
    return out

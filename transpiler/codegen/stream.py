"""Streamed pipeline loops: tiles copied global -> shared memory iterations ahead, into a ring of stages.

A loop's tiles (`For.stream`, planned by passes/plan_streams.py) are copied by cp.async (plain slices:
`stream_copy`; gathers: codegen/gather.py) or, in a wgmma loop whose every tile qualifies (plan_tma), by TMA
boxes completing on the stage's mbarrier (`stream_tma`). The body reads them in place (products) or into
registers (`stream_read`).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ast as A
from ..explain import has_product
from ..exprs import unparse_stmt
from ..passes.plan_tma import stream_source
from ..types import MmaStrategy
from .c import reg, storage
from .context import KernelFacts, Scope
from .env import macros
from .writer import Writer


@dataclass(frozen=True)
class Ring:
    """One streamed loop's ring, as its template (templates/stream_ring.j2) needs it."""
    loop: A.For
    S: int  # stages used (the loop's `stages`, or fewer when the ring did not fit)
    loads: dict  # tile name -> its tensor load
    tma: bool  # filled by TMA (else cp.async)
    wgmma: bool  # its products run as wgmma
    one_body: bool  # the body emitted once (tx_stage a register), else once per stage
    start: str  # the loop's bounds and step (C expressions, read once)
    stop: str
    step: str
    barrier: str  # the statement's barrier (plan_barriers)

    @property
    def var(self) -> str:
        return self.loop.var

    def at(self, t, stage: int | str) -> str:
        """The byte address of streamed tile `t`'s stage `stage` (a constant or a C expression)."""
        if isinstance(stage, int):
            return f"(tilex_smem + {t.offset + stage * t.stage_bytes})"
        return f"(tilex_smem + {t.offset} + ({stage}) * {t.stage_bytes})"


class StreamEmitter:
    """`streamed_loop` and its copies; index expressions from `expr`, subscripts from `access`, gathered
    copies from `gather` (a GatherEmitter), the body's statements from `stmt` (the Emitter's). The ring's
    skeleton is templates/stream_ring.j2, which calls back `copy` and `body` for the parts made of IR."""

    def __init__(self, facts: KernelFacts, out: Writer, scope: Scope, expr, access, gather, stmt):
        self.facts, self.out, self.scope = facts, out, scope
        self.expr, self.access, self.gather, self.stmt = expr, access, gather, stmt

    def streamed_loop(self, s: A.For, start: str, stop: str, step: str) -> None:
        """A pipeline loop whose tiles (s.stream) are copied global -> shared memory by cp.async
        S - 1 iterations ahead into a ring of S = s.stages stages. With S > 2 iteration i waits for
        its own copy, passes a barrier (every thread is then done with iteration i - 1, whose stage
        it refills), issues the copy of iteration i + S - 1, and runs the body; with S = 2 the copy
        of i + 1 goes out before the wait and a barrier after the body frees the stage (measured
        on the H200: attention lost 5-8% when the copy waited for the barrier). The body's products
        read the tiles in place (or it reads them into registers).

        A body with a tensor-core product (`@`) is emitted once, with the stage of the current
        iteration in a register (`tx_stage`): S copies of attention's key loops strained the
        instruction cache (prefill measured 165 -> 200 TFLOP/s on the H200). Other bodies are
        emitted once per stage, so every shared-memory address is a constant (layer_norm measured
        6% slower with one body).

        TMA (sm_90a, every tile of a wgmma loop qualifies: plan_tma.tma_obstacle): thread 0 issues each
        iteration's boxes S - 1 iterations ahead, they complete on the stage's mbarrier (tx_bars, set up at
        kernel start), and every thread waits on it; tx_phase bit s is the parity of stage s's next fill.
        A TMA stage is refilled only after the barrier that follows every thread's last read of it (each
        product waits for its wgmmas), so one thread may overwrite it; TMA writes and wgmma reads are both
        async-proxy accesses, so they need no proxy fence. With two stages a barrier orders the shared
        memory written before the loop (the resident tiles, fenced for wgmma) before the first iteration.
        The bounds are read once (as range() does: the body may change what they were computed from), in
        64 bits: the copies S - 1 steps ahead and the loop's stride of S steps never wrap around."""
        out = self.out
        S = s.stream[0].stages
        ring = Ring(s, S, {st.name: stream_source(st.value) for st in s.body.stmts if isinstance(st, A.Assign)},
                    tma=bool(s.stream) and all(t.tma_box for t in s.stream),
                    wgmma=s.mma is not None and s.mma.strategy == MmaStrategy.WGMMA, one_body=has_product(s.body),
                    start=start, stop=stop, step=step, barrier=self.scope.barrier)
        names = [t.name for t in s.stream]
        out.need("tilex_mma.cuh")
        fewer = f", {S} used: the ring did not fit" if S != s.stages else ""
        how = "the body once, tx_stage is this iteration's" if ring.one_body else "the body once per stage"
        by = "TMA (one thread, completion on the stage's mbarrier)" if ring.tma else "cp.async"
        out.emit(f"// pipeline(stages={s.stages}{fewer}): {', '.join(names)} go to shared memory by {by} {S - 1} "
                 f"iteration{'s' if S > 2 else ''} ahead ({S} stages, {how}); the rest of the body runs in order")
        if ring.tma:
            assert ring.wgmma and ring.one_body, "TMA rings are for wgmma loops, whose bodies are emitted once"
            out.need("tilex_tma.cuh")
        if ring.wgmma:
            out.need("tilex_sm90.cuh")
            swz = [t.name for t in s.stream if t.swizzled]
            out.emit(f"// tensor cores: wgmma (sm_90a) on {', '.join(swz)} in 128-byte swizzled rows, one warpgroup per 64 rows")
        out.text(_ring_macros().ring(ring, lambda stage, ahead: self.copy(ring, stage, ahead),
                              lambda stage: out.capture(self.body, ring, stage)))

    def body(self, ring: Ring, stage: int | str) -> None:
        """The loop's statements with its tiles at `stage`: the streamed ones are in shared memory already
        (or read from there into registers), the others as usual."""
        out, s = self.out, ring.loop
        tiles = {t.name: t for t in s.stream}
        wgmma = frozenset(t.name for t in s.stream if t.swizzled) if ring.wgmma else frozenset()
        with self.scope.streamed({t.name: (ring.at(t, stage), t.ld) for t in s.stream}, wgmma), self.scope.names(s.var):
            for st in s.body.stmts:
                if isinstance(st, A.Assign) and st.name in tiles:
                    t = tiles[st.name]
                    if t.regs:
                        out.emit(f"// {self.facts.file}:{st.span.line}  {unparse_stmt(st)}  (streamed above; into registers)")
                        self.stream_read(st, t, self.scope.streaming[st.name][0])
                    else:
                        out.emit(f"// {self.facts.file}:{st.span.line}  {unparse_stmt(st)}  (streamed above)")
                    continue
                self.stmt(st)

    def copy(self, ring: Ring, stage: int | str, ahead: str) -> str:
        """The lines copying iteration `ahead`'s tiles into `stage`: by cp.async, or by TMA from thread 0."""
        s, out = ring.loop, self.out
        if ring.tma:
            bar = f"tx_bars + ({stage})"
            tx_bytes = sum(t.rows * t.cols * 2 for t in s.stream)
            tiles = out.capture(lambda: [self.stream_tma(ring.loads[t.name], t, ring.at(t, stage), bar) for t in s.stream])
            return str(_ring_macros().tma_copy(s.var, ahead, bar, tx_bytes, tiles))
        return str(_ring_macros().cp_async_copy(s.var, ahead, out.capture(self.cp_async_tiles, ring, stage)))

    def cp_async_tiles(self, ring: Ring, stage: int | str) -> None:
        """cp.async of each tile into `stage`; the gathered ones with those of the same rows and geometry."""
        s = ring.loop
        done = set()
        for t in s.stream:
            if t.gather is None:
                self.stream_copy(ring.loads[t.name], t, ring.at(t, stage))
            elif t.name not in done:  # with the gathers of the same rows of the same geometry
                group = [u for u in s.stream if u.gather is not None and u.name not in done
                         and self.gather.gather_key(u) == self.gather.gather_key(t)]
                done |= {u.name for u in group}
                self.gather.gather_copy(group, [ring.at(u, stage) for u in group])

    def stream_read(self, st: A.Assign, t, src: str) -> None:
        """Declare the register tile `st.name` and fill it, in its layout, from its stage in shared
        memory at `src` (rows of t.ld elements), 16 bytes at a time where the layout allows."""
        e = st.value  # the load, or its exact widening .to(f32)
        layout = e.ty.layout
        S, R = storage(stream_source(e).ty.dtype), reg(e.ty.dtype)
        self.out.need("tilex_stream.cuh")
        self.scope.declare(st.name, layout)
        self.out.emit(f"{R} {st.name}[{layout.slots}];")
        vec = self.access.vector_width(layout) if len(layout.dims) == 2 else 1
        at = f"({layout.coord(0, 'tx_s')}) * {t.ld} + ({layout.coord(1, 'tx_s')})"
        self.out.unrolled(layout.slots, f"tilex_smem_chunk<{vec}, {S}, {R}>(&{st.name}[tx_s], "
                                        f"reinterpret_cast<const {S}*>({src}) + {at});", step=vec)

    def stream_copy(self, e: A.Index, t, dst: str) -> None:
        """cp.async of the [rows, cols] tile `e` (slices on one axis and the tensor's last) into
        shared memory at `dst` (rows of t.ld elements); rows outside the tensor become 0."""
        if t.gather is not None:
            return self.gather.gather_copy([t], [dst])
        f = self.facts
        name, axes = self.access.index_axes(e)
        dt = e.ty.dtype
        S = storage(dt)
        terms, oks, sl = [], [], []
        copy = (f"tilex_tile_to_smem_sw128<{t.rows}, {t.cols}, {f.T}, {S}>" if t.swizzled
                else f"tilex_tile_to_smem<{t.rows}, {t.cols}, {t.ld}, {f.T}, {S}>")
        for ax, item in axes:
            if isinstance(item, A.Slice):
                sl.append((ax, self.expr.scalar(item.start) if item.start is not None else "0"))
                continue
            i = f"(long long)({self.expr.scalar(item)})"
            st = f.stride(name, ax)
            terms.append(f"{i} * {st}" if st else i)
            oks.append(f"(unsigned long long){i} < (unsigned long long){f.dim(name, ax)}")
        (rax, r0), (cax, c0) = sl
        ok = " && ".join(oks) or "true"
        base = " + ".join(terms) or "0"
        self.out.emit(f"{{ const bool tx_ok = {ok}; {copy}("
                      f"reinterpret_cast<{S}*>({dst}), {name} + (tx_ok ? {base} : 0), (long long)({r0}), (long long)({c0}), "
                      f"tx_ok ? (long long){f.dim(name, rax)} : 0, (long long){f.dim(name, cax)}, "
                      f"(long long){f.stride(name, rax) or 1}); }}")

    def stream_tma(self, e: A.Index, t, dst: str, bar: str) -> None:
        """TMA boxes of the [rows, cols] tile `e` (slices on one axis and the tensor's last) into its
        128-byte swizzled stage at `dst`: one box of [rows, 64] per 64-column atom (t.tma_box in the tensor's
        dims, innermost first), landing ROWS * 128 bytes apart as tilex_sw128 lays them out. TMA fills what
        lies outside the tensor (rows past its end, an out-of-range scalar index) with zeros, the language's
        rule for a load. A tensor with a dim of 0 is encoded with that dim as 1 (runtime/tma.py): its boxes
        are then sent wholly before the row axis's start, so nothing is read."""
        f, scalar = self.facts, self.expr.scalar
        name, axes = self.access.index_axes(e)
        m = f.tma_map(name, t.rows, t.tma_box)
        empty = [f"{f.dim(name, ax)} > 0" for ax, _ in axes if not isinstance(f.tensors[name].type.dims[ax], A.IntLit)]
        coords = []  # outermost first
        for ax, item in axes:
            if isinstance(item, A.Slice):
                coords.append(f"(int)({scalar(item.start) if item.start is not None else '0'})")
            else:
                coords.append(f"(int)({scalar(item)})")
        last = len(axes) - 1
        row = next(ax for ax, item in axes if isinstance(item, A.Slice) and ax != last)
        if empty:
            coords[row] = f"({' && '.join(empty)}) ? {coords[row]} : {-t.rows}"
        with self.out.block():
            self.out.emit(f"const int tx_r = {coords[row]};")
            coords[row] = "tx_r"
            for j in range(t.cols // 64):
                c = list(coords)
                c[last] = f"{coords[last]} + {64 * j}" if j else coords[last]
                self.out.emit(f"tilex_tma_box({dst} + {j * t.rows * 128}, &{m}, {', '.join(reversed(c))}, {bar});")

    def ring_barriers(self) -> None:
        """Kernel-start code: the mbarriers of TMA-filled streamed rings (one per stage, shared by the
        loops, which run one after another), initialized once by thread 0."""
        info = self.facts.k.info
        n = getattr(info, "mbar_count", 0)
        if not n:
            return
        out = self.out
        out.need("tilex_sm90.cuh", "tilex_tma.cuh")
        out.emit("// mbarriers of the TMA-filled rings: stage s completes when its boxes' bytes have landed")
        out.emit(f"unsigned long long* const tx_bars = reinterpret_cast<unsigned long long*>(tilex_smem + {info.mbar_offset});")
        out.emit("unsigned tx_phase = 0;  // bit s: the parity of stage s's next fill")
        out.emit("if (threadIdx.x == 0) {")
        out.emit(f"  for (int tx_i = 0; tx_i < {n}; ++tx_i) tilex_mbar_init(tx_bars + tx_i, 1);")
        out.emit("  tilex_mbar_fence_init();")
        out.emit("}")
        out.emit(self.scope.barrier)


def _ring_macros():
    return macros("stream_ring.j2")

"""Kernel-body emission: the annotated IR of one kernel -> lines of CUDA C++.

Every tile is a per-thread register array in its layout (`tilex.layout`); elementwise
expressions are emitted inline, slot by slot, inside one unrolled loop; loads, stores,
reductions, layout conversions and matmuls are materialized as statements. Scalars are
uniform: every thread computes the same value, so all control flow is uniform and
barriers are always legal.
"""
from __future__ import annotations

from .. import ast as A
from ..builtins import CUDA_MATH, FUNCTIONS
from ..explain import has_product
from ..exprs import mentions, unparse, unparse_stmt
from ..layout import Layout, flat_index
from ..passes.infer_dtypes import operand_dtype
from ..passes.infer_memory import stream_source
from ..types import DType
from .access import GlobalAccess
from .c import C_BINOP, ROUND, barrier, flit, reg, rounded_scalar, storage
from .matmul import MatmulEmission
from .reduce import Reductions, is_reduction

B = A.BinOpKind
# integer ops emitted through the wrapping helpers of tilex_math.cuh
WRAPPING = {B.ADD: "add", B.SUB: "sub", B.MUL: "mul"}


class Emitter(GlobalAccess, Reductions, MatmulEmission):
    """Emits the body of one kernel; `helpers` collects the device helper files it needs."""

    def __init__(self, k: A.Kernel, file: str):
        self.k = k
        self.file = file
        self.T = k.info.threads
        self.lines: list[str] = []
        self.depth = 0
        self.tmp = 0
        self.helpers: set[str] = {"tilex_types.cuh"}
        self.tensors = {p.name: p for p in k.params if p.type.dims is not None}
        self.arrays: dict[str, Layout] = {}  # tile variables -> layout
        # the barrier of the statement being emitted (plan_barriers: a named barrier of the consumer warps once
        # the producers have left)
        self.sync = k.info.sync
        self.barrier = barrier(self.sync.start) if self.sync is not None else None
        self.functions: dict[str, str] = {}  # per-kernel device functions (wgmma wrappers), by name
        self.tma_maps = k.info.tma_maps  # plan_tma's TMA descriptors the host passes after the other arguments
        # tiles kept in shared memory for the whole kernel (matmul operands read in every loop iteration)
        self.resident = dict(getattr(k.info, "resident", {}) or {})
        base = getattr(k.info, "resident_bytes", 0)
        self.smem = f"(tilex_smem + {base})" if base else "tilex_smem"  # scratch space of one op at a time
        self.declared: list[set[str]] = [set()]
        # tiles a pipeline loop streams into shared memory: name -> (byte address of this iteration's stage, row pitch)
        self.streaming: dict[str, tuple[str, int]] = {}
        # of those, the 128-byte swizzled ones of a loop whose products run as wgmma; and the swizzled resident tiles
        self.wgmma_streams: frozenset = frozenset()
        self.swizzled = frozenset(getattr(k.info, "swizzled", ()) or ())

    # ---- output helpers
    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def fresh(self, prefix: str) -> str:
        self.tmp += 1
        return f"{prefix}{self.tmp}"

    def unrolled(self, n: int, body: str, var: str = "tx_s", step: int = 1) -> None:
        if n == 1 and step == 1:
            self.emit("{ const int " + var + " = 0; " + body + " }")
            return
        inc = f"++{var}" if step == 1 else f"{var} += {step}"
        self.emit("#pragma unroll")
        self.emit(f"for (int {var} = 0; {var} < {n}; {inc}) {{ {body} }}")

    # ---- prologue: strides of every tensor parameter
    def prologue(self) -> list[str]:
        out = []
        for p in self.k.params:
            if rounded_scalar(p):
                out.append(f"const float {p.name} = {self.round(f'tx_arg_{p.name}', DType(p.type.dtype))};")
        for p in self.tensors.values():
            dims = [str(d.value) if isinstance(d, A.IntLit) else d.id for d in p.type.dims]
            stride = "1LL"
            strides = []
            for d in reversed(dims):
                strides.append(stride)
                stride = f"{stride} * (long long){d}" if stride != "1LL" else f"(long long){d}"
            strides.reverse()
            for i, s in enumerate(strides):
                if s != "1LL":
                    out.append(f"const long long tx_{p.name}_s{i} = {s};")
        return out

    def stride(self, name: str, axis: int) -> str | None:
        p = self.tensors[name]
        return None if axis == len(p.type.dims) - 1 else f"tx_{name}_s{axis}"

    def dim(self, name: str, axis: int) -> str:
        d = self.tensors[name].type.dims[axis]
        return str(d.value) if isinstance(d, A.IntLit) else d.id

    # ---- statements
    def body(self) -> None:
        """The kernel's body: each top-level statement with the barrier plan_barriers chose for it."""
        self.declared.append(set())
        for s, b in zip(self.k.body.stmts, self.sync.stmts, strict=True):
            self.barrier = barrier(b)
            self.stmt(s)
        self.declared.pop()

    def block(self, b: A.Block) -> None:
        self.declared.append(set())
        for s in b.stmts:
            self.stmt(s)
        self.declared.pop()

    def is_declared(self, name: str) -> bool:
        return any(name in d for d in self.declared)

    def stmt(self, s: A.Stmt) -> None:
        self.emit(f"// {self.file}:{s.span.line}  {unparse_stmt(s)}")
        getattr(self, "stmt_" + type(s).__name__)(s)

    def stmt_Assign(self, s: A.Assign) -> None:
        v = s.value
        if s.name in self.resident:  # computed once into registers, then kept in shared memory
            offset, ld = self.resident[s.name]
            S = storage(v.ty.dtype)
            self.emit("{")
            self.depth += 1
            tmp, layout = self.materialize(v)
            swizzle = v.ty.shape[0] if s.name in self.swizzled else None
            self.stage(tmp, layout, f"reinterpret_cast<{S}*>(tilex_smem + {offset})", ld, False, S, swizzle)
            if swizzle:
                self.helpers |= {"tilex_mma.cuh", "tilex_sm90.cuh"}  # tilex_sw128; the proxy fence
                self.emit("tilex_fence_async_smem();  // wgmma reads it (the async proxy) after the next barrier")
            self.depth -= 1
            self.emit("}")
            return
        if not v.ty.shape and not (self.is_declared(s.name) and s.name in self.arrays):
            expr = self.scalar(v)
            if self.is_declared(s.name):
                self.emit(f"{s.name} = {expr};")
            else:
                self.declared[-1].add(s.name)
                self.emit(f"{reg(v.ty.dtype)} {s.name} = {expr};")
            return
        if self.is_declared(s.name):
            layout = self.arrays[s.name]
            dt = v.ty.dtype  # the dtype pass keeps one dtype per variable
            want = layout.view_for(v.ty.shape) if v.ty.shape else None
            reads_self = mentions(v, s.name)
            dest = self.fresh("tx_nx") if reads_self else s.name
            if reads_self and _only_identity(v, s.name, layout, want):
                dest = s.name
            if dest != s.name:
                self.emit(f"{reg(dt)} {dest}[{layout.slots}];")
            val = self.tile(v, want) if v.ty.shape else self.scalar(v)
            self.unrolled(layout.slots, f"{dest}[tx_s] = {self.cast(val, v.ty.dtype, dt)};")
            if dest != s.name:
                self.unrolled(layout.slots, f"{s.name}[tx_s] = {dest}[tx_s];")
            return
        layout = v.ty.layout
        self.declared[-1].add(s.name)
        self.arrays[s.name] = layout
        self.emit(f"{reg(v.ty.dtype)} {s.name}[{layout.slots}];")
        val = self.tile(v, layout)
        self.unrolled(layout.slots, f"{s.name}[tx_s] = {val};")

    def stmt_Store(self, s: A.Store) -> None:
        t = s.target
        dt = t.ty.dtype
        if not t.ty.shape:
            val = self.scalar(s.value)
            idx, ok = self.scalar_address(t)
            self.emit(f"if (threadIdx.x == 0 && {ok}) {t.base.id}[{idx}] = tilex_io<{storage(dt)}>::put({self.cast(val, s.value.ty.dtype, dt)});")
            return
        layout = t.ty.layout
        src = self.fresh("tx_st")
        self.emit(f"{reg(dt)} {src}[{layout.slots}];")
        v, vdt = s.value, s.value.ty.dtype
        if isinstance(v, A.Method) and v.name == "to" and vdt is dt and dt in (DType.BF16, DType.F16) \
                and v.obj.ty.dtype is DType.F32 and v.obj.ty.shape == v.ty.shape:
            # `x.to(bf16)` stored to bf16: the store's conversion (tilex_io::put) rounds to nearest even
            # as .to() does, so the f32 values go to it unrounded (one conversion per element, not two)
            v, vdt = v.obj, dt
        val = self.tile(v, layout.view_for(v.ty.shape)) if v.ty.shape else self.scalar(v)
        self.unrolled(layout.slots, f"{src}[tx_s] = {self.cast(val, vdt, dt)};")
        self.access(t, layout, src, store=True)

    def stmt_For(self, s: A.For) -> None:
        if s.plan is not None:
            return self.planned_loop(s)
        inner = next((st for st in s.body.stmts if isinstance(st, A.For) and st.plan is not None and st.plan.persistent), None)
        if inner is not None:
            return self.persistent_loop(s, inner)
        start, stop, step = self.scalar(s.start), self.scalar(s.stop), self.scalar(s.step)
        if s.stream:
            return self.streamed_loop(s, start, stop, step)
        if s.pipelined:
            self.emit(f"// pipeline(stages={s.stages}): staged sequentially in this version")
        self.emit(f"for (int {s.var} = {start}; {s.var} < {stop}; {s.var} += {step}) {{")
        self.depth += 1
        self.declared.append({s.var})
        self.block(s.body)
        self.declared.pop()
        self.depth -= 1
        self.emit("}")

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
        6% slower with one body)."""
        S = s.stream[0].stages  # the loop's `stages`, or fewer when its ring did not fit
        loads = {st.name: stream_source(st.value) for st in s.body.stmts if isinstance(st, A.Assign)}
        tiles = {t.name: t for t in s.stream}
        names = list(tiles)
        one_body = has_product(s.body)
        self.helpers.add("tilex_mma.cuh")
        fewer = f", {S} used: the ring did not fit" if S != s.stages else ""
        how = "the body once, tx_stage is this iteration's" if one_body else "the body once per stage"
        by = "TMA (one thread, completion on the stage's mbarrier)" if s.stream and all(t.tma_box for t in s.stream) \
            else "cp.async"
        self.emit(f"// pipeline(stages={s.stages}{fewer}): {', '.join(names)} go to shared memory by {by} {S - 1} "
                  f"iteration{'s' if S > 2 else ''} ahead ({S} stages, {how}); the rest of the body runs in order")

        def at(t, stage: int | str) -> str:
            if isinstance(stage, int):
                return f"(tilex_smem + {t.offset + stage * t.stage_bytes})"
            return f"(tilex_smem + {t.offset} + ({stage}) * {t.stage_bytes})"

        def copy(stage: int | str, ahead: str) -> None:
            """Iteration `ahead`'s tiles into `stage`, if it is one of the loop's; one commit group either way."""
            self.emit(f"if ({ahead} < tx_hi) {{")
            self.depth += 1
            self.emit(f"const int {s.var} = (int)({ahead});")
            done = set()
            for t in s.stream:
                if t.gather is None:
                    self.stream_copy(loads[t.name], t, at(t, stage))
                elif t.name not in done:  # with the gathers of the same rows of the same geometry
                    group = [u for u in s.stream if u.gather is not None and u.name not in done
                             and self.gather_key(u) == self.gather_key(t)]
                    done |= {u.name for u in group}
                    self.gather_copy(group, [at(u, stage) for u in group])
            self.depth -= 1
            self.emit("}")
            self.emit("tilex_cp_async_commit();")

        wgmma = s.mma is not None and s.mma.strategy == "wgmma"
        # TMA (sm_90a, every tile of a wgmma loop qualifies: infer_memory.tma_obstacle): thread 0 issues each
        # iteration's boxes S - 1 iterations ahead, they complete on the stage's mbarrier (tx_bars, set up at
        # kernel start), and every thread waits on it; tx_phase bit s is the parity of stage s's next fill
        tma = bool(s.stream) and all(t.tma_box for t in s.stream)
        if tma:
            assert wgmma and one_body, "TMA rings are for wgmma loops, whose bodies are emitted once"
            self.helpers.add("tilex_tma.cuh")
            tx_bytes = sum(t.rows * t.cols * 2 for t in s.stream)

            def copy(stage: int | str, ahead: str) -> None:  # noqa: F811 - the TMA form of copy()
                """Iteration `ahead`'s boxes into `stage`, by thread 0, if it is one of the loop's."""
                self.emit(f"if (threadIdx.x == 0 && {ahead} < tx_hi) {{")
                self.depth += 1
                self.emit(f"const int {s.var} = (int)({ahead});")
                bar = f"tx_bars + ({stage})"
                self.emit(f"tilex_mbar_expect_tx({bar}, {tx_bytes});  // every box's bytes, zeros outside the tensor included")
                for t in s.stream:
                    self.stream_tma(loads[t.name], t, at(t, stage), bar)
                self.depth -= 1
                self.emit("}")

            def wait(stage: str) -> None:
                self.emit(f"tilex_mbar_wait(tx_bars + {stage}, (tx_phase >> {stage}) & 1u);  // this iteration's tiles have landed")
                self.emit(f"tx_phase ^= 1u << {stage};")
        if wgmma:
            self.helpers.add("tilex_sm90.cuh")
            swz = [t.name for t in s.stream if t.swizzled]
            self.emit(f"// tensor cores: wgmma (sm_90a) on {', '.join(swz)} in 128-byte swizzled rows, one warpgroup per 64 rows")

        def iteration(stage: int | str, next_stage: int | str) -> None:
            """One iteration at `stage` (tx_cur), refilling `next_stage` (S - 1 iterations ahead)."""
            # two stages: the next copy goes out first, and the body's trailing barrier frees this stage;
            # more: this iteration's tiles are waited for, a barrier frees the previous stage, then its refill
            if S == 2:
                copy(next_stage, "tx_cur + tx_step")
            if tma:  # the mbarrier wait makes the stage visible to every thread
                wait(stage)
                if S > 2:
                    self.emit(self.barrier + "  // the previous iteration is done with its stage (wgmma waited)")
            else:
                self.emit(f"tilex_cp_async_wait<{1 if S == 2 else S - 2}>();  // this iteration's tiles have landed")
                if wgmma:
                    self.emit("tilex_fence_async_smem();  // visible to wgmma (the async proxy) after the barrier")
                self.emit(self.barrier + ("  // for every thread" if S == 2 else
                                          "  // for every thread, and the previous iteration is done with its stage"))
            if S > 2:
                copy(next_stage, f"tx_cur + {S - 1} * tx_step")
            self.emit(f"const int {s.var} = (int)tx_cur;")
            outer, outer_wg = self.streaming, self.wgmma_streams
            self.streaming = {**outer, **{t.name: (at(t, stage), t.ld) for t in s.stream}}
            if wgmma:
                self.wgmma_streams = outer_wg | {t.name for t in s.stream if t.swizzled}
            self.declared.append({s.var})
            for st in s.body.stmts:
                if isinstance(st, A.Assign) and st.name in names:
                    t = tiles[st.name]
                    if t.regs:
                        self.emit(f"// {self.file}:{st.span.line}  {unparse_stmt(st)}  (streamed above; into registers)")
                        self.stream_read(st, t, self.streaming[st.name][0])
                    else:
                        self.emit(f"// {self.file}:{st.span.line}  {unparse_stmt(st)}  (streamed above)")
                    continue
                self.stmt(st)
            self.declared.pop()
            self.streaming, self.wgmma_streams = outer, outer_wg
            if S == 2:
                self.emit(self.barrier + "  // every thread is done with this stage before it is refilled")

        self.emit("{")
        self.depth += 1
        # the bounds are read once (as range() does): the body may change what they were computed from
        # in 64 bits: the copies S - 1 steps ahead and the loop's stride of S steps never wrap around
        self.emit(f"const long long tx_lo = {start}, tx_hi = {stop}, tx_step = {step};")
        for stage in range(S - 1):
            copy(stage, "tx_lo" + (f" + {stage} * tx_step" if stage else ""))
        if tma:
            # A stage is refilled only after the barrier that follows every thread's last read of it (each
            # product waits for its wgmmas), so one thread may overwrite it; TMA writes and wgmma reads are both
            # async-proxy accesses, so they need no proxy fence. This barrier orders the shared memory written
            # before the loop (the resident tiles, fenced for wgmma) before the first iteration, which has none.
            if S == 2:
                self.emit(self.barrier + "  // what was written before the loop is visible to every thread")
        if one_body:
            self.emit("int tx_stage = 0;")
            self.emit("for (long long tx_cur = tx_lo; tx_cur < tx_hi; tx_cur += tx_step) {")
            self.depth += 1
            # the stage S - 1 iterations ahead is the one before this
            iteration("tx_stage", "tx_stage ^ 1" if S == 2 else f"(tx_stage == 0 ? {S - 1} : tx_stage - 1)")
            self.emit(f"tx_stage = tx_stage == {S - 1} ? 0 : tx_stage + 1;")
        else:
            self.emit(f"for (long long tx_it = tx_lo; tx_it < tx_hi; tx_it += {S} * tx_step) {{")
            self.depth += 1
            for stage in range(S):
                if stage:
                    self.emit(f"if (tx_it + {stage} * tx_step >= tx_hi) break;")
                self.emit("{")
                self.depth += 1
                self.emit(f"const long long tx_cur = tx_it{f' + {stage} * tx_step' if stage else ''};")
                iteration(stage, (stage + S - 1) % S)
                self.depth -= 1
                self.emit("}")
        self.depth -= 1
        self.emit("}")
        if not tma:  # every TMA copy issued was waited for by its iteration
            self.emit("tilex_cp_async_wait<0>();")
        if S > 2:
            self.emit(self.barrier + "  // the ring's memory is free for what follows")
        self.depth -= 1
        self.emit("}")

    def stream_read(self, st: A.Assign, t, src: str) -> None:
        """Declare the register tile `st.name` and fill it, in its layout, from its stage in shared
        memory at `src` (rows of t.ld elements), 16 bytes at a time where the layout allows."""
        e = st.value  # the load, or its exact widening .to(f32)
        layout = e.ty.layout
        S, R = storage(stream_source(e).ty.dtype), reg(e.ty.dtype)
        self.helpers.add("tilex_stream.cuh")
        self.declared[-1].add(st.name)
        self.arrays[st.name] = layout
        self.emit(f"{R} {st.name}[{layout.slots}];")
        vec = self.vector_width(layout) if len(layout.dims) == 2 else 1
        at = f"({layout.coord(0, 'tx_s')}) * {t.ld} + ({layout.coord(1, 'tx_s')})"
        self.unrolled(layout.slots, f"tilex_smem_chunk<{vec}, {S}, {R}>(&{st.name}[tx_s], "
                                    f"reinterpret_cast<const {S}*>({src}) + {at});", step=vec)

    def stream_copy(self, e: A.Index, t, dst: str) -> None:
        """cp.async of the [rows, cols] tile `e` (slices on one axis and the tensor's last) into
        shared memory at `dst` (rows of t.ld elements); rows outside the tensor become 0."""
        if t.gather is not None:
            return self.gather_copy([t], [dst])
        name, axes = self.index_axes(e)
        dt = e.ty.dtype
        S = storage(dt)
        terms, oks, sl = [], [], []
        copy = (f"tilex_tile_to_smem_sw128<{t.rows}, {t.cols}, {self.T}, {S}>" if t.swizzled
                else f"tilex_tile_to_smem<{t.rows}, {t.cols}, {t.ld}, {self.T}, {S}>")
        for ax, item in axes:
            if isinstance(item, A.Slice):
                sl.append((ax, self.scalar(item.start) if item.start is not None else "0"))
                continue
            i = f"(long long)({self.scalar(item)})"
            st = self.stride(name, ax)
            terms.append(f"{i} * {st}" if st else i)
            oks.append(f"(unsigned long long){i} < (unsigned long long){self.dim(name, ax)}")
        (rax, r0), (cax, c0) = sl
        ok = " && ".join(oks) or "true"
        base = " + ".join(terms) or "0"
        self.emit(f"{{ const bool tx_ok = {ok}; {copy}("
                  f"reinterpret_cast<{S}*>({dst}), {name} + (tx_ok ? {base} : 0), (long long)({r0}), (long long)({c0}), "
                  f"tx_ok ? (long long){self.dim(name, rax)} : 0, (long long){self.dim(name, cax)}, "
                  f"(long long){self.stride(name, rax) or 1}); }}")

    def stream_tma(self, e: A.Index, t, dst: str, bar: str) -> None:
        """TMA boxes of the [rows, cols] tile `e` (slices on one axis and the tensor's last) into its
        128-byte swizzled stage at `dst`: one box of [rows, 64] per 64-column atom (t.tma_box in the tensor's
        dims, innermost first), landing ROWS * 128 bytes apart as tilex_sw128 lays them out. TMA fills what
        lies outside the tensor (rows past its end, an out-of-range scalar index) with zeros, the language's
        rule for a load. A tensor with a dim of 0 is encoded with that dim as 1 (runtime/tma.py): its boxes
        are then sent wholly before the row axis's start, so nothing is read."""
        name, axes = self.index_axes(e)
        m = self.tma_map(name, t.rows, t.tma_box)
        empty = [f"{self.dim(name, ax)} > 0" for ax, _ in axes if not isinstance(self.tensors[name].type.dims[ax], A.IntLit)]
        coords = []  # outermost first
        for ax, item in axes:
            if isinstance(item, A.Slice):
                coords.append(f"(int)({self.scalar(item.start) if item.start is not None else '0'})")
            else:
                coords.append(f"(int)({self.scalar(item)})")
        last = len(axes) - 1
        row = next(ax for ax, item in axes if isinstance(item, A.Slice) and ax != last)
        if empty:
            coords[row] = f"({' && '.join(empty)}) ? {coords[row]} : {-t.rows}"
        self.emit("{")
        self.depth += 1
        self.emit(f"const int tx_r = {coords[row]};")
        coords[row] = "tx_r"
        for j in range(t.cols // 64):
            c = list(coords)
            c[last] = f"{coords[last]} + {64 * j}" if j else coords[last]
            self.emit(f"tilex_tma_box({dst} + {j * t.rows * 128}, &{m}, {', '.join(reversed(c))}, {bar});")
        self.depth -= 1
        self.emit("}")

    def setup(self) -> None:
        """Kernel-start code: the mbarriers of TMA-filled streamed rings (one per stage, shared by the
        loops, which run one after another), initialized once by thread 0."""
        n = getattr(self.k.info, "mbar_count", 0)
        if not n:
            return
        self.helpers |= {"tilex_sm90.cuh", "tilex_tma.cuh"}
        self.emit("// mbarriers of the TMA-filled rings: stage s completes when its boxes' bytes have landed")
        self.emit(f"unsigned long long* const tx_bars = reinterpret_cast<unsigned long long*>(tilex_smem + {self.k.info.mbar_offset});")
        self.emit("unsigned tx_phase = 0;  // bit s: the parity of stage s's next fill")
        self.emit("if (threadIdx.x == 0) {")
        self.emit(f"  for (int tx_i = 0; tx_i < {n}; ++tx_i) tilex_mbar_init(tx_bars + tx_i, 1);")
        self.emit("  tilex_mbar_fence_init();")
        self.emit("}")
        self.emit(self.barrier)

    def gather_key(self, t) -> tuple:
        """Gathered tiles with equal keys read the same rows at the same offsets (the same index
        expressions into tensors of the same dims and element type, copied in the same layout):
        one copy computes each row's indices and offset once for all of them."""
        name, axes = self.index_axes(t.gather)
        return (tuple(unparse(it) for _, it in axes), tuple(self.dim(name, ax) for ax in range(len(axes))),
                t.gather.ty.dtype, t.copy_layout)

    def gather_copy(self, ts: list, dsts: list[str]) -> None:
        """cp.async of the gathered [rows, cols] tiles `ts` (index tiles on the leading axes, scalars,
        a slice of the last; one gather_key) into shared memory at `dsts`, 16 bytes per copy, in the
        blocked layout copy_layout. Each thread evaluates the indices of the rows it copies once for
        all the tiles (one load of an index tile per row, e.g. one block-table read for k and v) and
        tests them in 32 bits (i32 indices, int dims); scalar indices are tested and multiplied once.
        A row whose index is outside the tensor becomes 0, as does a chunk past the last column.

        What is uniform is decided once per copy (`tx_whole`): the slice whole and 16-byte aligned
        (start >= 0, a multiple of 8, inside the row, the row length a multiple of 8 so that every row
        starts aligned), the tensors 16-byte aligned, and the strides (in bytes) of the index-tile
        axes below 2^32. Then a chunk's byte address is one 32 x 32 -> 64-bit multiply-add per index
        tile onto a base that holds the scalar indices' offset and the column, the other tensors' at
        a fixed distance, and each chunk is one cp.async, zero-filled (ignore-src, reading nothing)
        for a row outside the tensor, whose address stays inside it (its first out-of-range index
        counts as 0). Else (a tensor over 4 GiB per index step, a partial or unaligned slice) the
        offsets are 64-bit products and tilex_gather_chunk16 tests each chunk's columns and alignment."""
        t0 = ts[0]
        e = t0.gather
        name, axes = self.index_axes(e)
        names = [self.index_axes(t.gather)[0] for t in ts]
        layout = t0.copy_layout
        rows = layout.axes(0)
        S = storage(e.ty.dtype)
        self.helpers |= {"tilex_mma.cuh", "tilex_gather.cuh"}
        vec = layout.root.vec
        assert vec == 8 and layout.digits[-1] == layout.root.vec_digit, "a gathered copy moves 16-byte chunks"
        last = len(self.tensors[name].type.dims) - 1
        ncols = self.dim(name, last)
        self.emit("{  // " + ", ".join(t.name for t in ts) + ": gathered rows, indices and offset once per row"
                  + (" for all" if len(ts) > 1 else ""))
        self.depth += 1
        row_lines, row_oks, row_terms, uni_oks, uni_terms = [], [], [], [], []
        wide, small = [], []  # the whole path's row terms (in bytes), and its condition that they fit
        size = e.ty.dtype.itemsize
        c0 = "0"
        # the index of the first index tile counts as 0 unless the row is inside the tensor, each other one
        # unless inside its axis (often provably, so no select): a row outside has an address inside
        sel = lambda iv, own: f"tx_ok ? {iv} : 0" if not wide else f"{own} ? {iv} : 0"  # noqa: E731
        for ax, item in axes:
            iv = f"tx_i{ax}"
            dim, st = self.dim(name, ax), self.stride(name, ax)
            if isinstance(item, A.Slice):
                c0 = self.scalar(item.start) if item.start is not None else "0"
            elif item.ty.shape:  # a row's index: the index tile's loads are emitted here, once for the group
                val = self.tile(item, rows)
                if item.ty.dtype is DType.I64:
                    row_lines.append(f"const long long {iv} = {val};")
                    row_oks.append(f"(unsigned long long){iv} < (unsigned long long){dim}")
                    row_terms.append(f"{iv} * {st}")
                    wide.append(lambda acc, x=sel(iv, f"(unsigned long long){iv} < (unsigned long long){dim}"), st=st:
                                f"(unsigned long long)({x}) * (unsigned long long)({st} * {size}) + {acc}")
                else:  # 0 <= i < dim in 32 bits
                    row_lines.append(f"const int {iv} = (int)({val});")
                    row_oks.append(f"(unsigned){iv} < (unsigned){dim}")
                    row_terms.append(f"(long long)(unsigned){iv} * {st}")
                    # one 32 x 32 -> 64-bit multiply-add (IMAD.WIDE.U32) where the stride in bytes fits in 32 bits
                    bs = f"tx_b{ax}"
                    wide.append(lambda acc, x=sel(iv, f"(unsigned){iv} < (unsigned){dim}"), bs=bs:
                                f"tilex_mad_wide({x}, {bs}, {acc})")
                    small.append((bs, st))
            else:
                self.emit(f"const long long {iv} = (long long)({self.scalar(item)});")
                uni_oks.append(f"(unsigned long long){iv} < (unsigned long long){dim}")
                uni_terms.append(f"{iv} * {st}")
        self.emit(f"const long long tx_c0 = (long long)({c0});")
        if uni_oks:
            self.emit(f"const bool tx_uok = {' && '.join(uni_oks)};")
            self.emit(f"const long long tx_u = tx_uok ? {' + '.join(uni_terms)} : 0;")
        ok = " && ".join((["tx_uok"] if uni_oks else []) + row_oks)
        off = " + ".join(row_terms + (["tx_u"] if uni_oks else []))
        addr = lambda n: f"reinterpret_cast<unsigned long long>({n})"  # noqa: E731
        self.emit(f"const bool tx_whole = tx_c0 >= 0 && (tx_c0 & 7) == 0 && tx_c0 + {t0.cols} <= (long long){ncols} "
                  f"&& ({ncols}) % 8 == 0 && (({' | '.join(addr(n) for n in names)}) & 15ull) == 0"
                  + "".join(f" && (unsigned long long){st} * {size} <= 0xffffffffull" for _, st in small) + ";")
        smem = lambda t, dst: (f"reinterpret_cast<{S}*>({dst}) + ({layout.coord(0, 'tx_s')}) * {t.ld} "  # noqa: E731
                               f"+ ({layout.coord(1, 'tx_s')})")
        row = " ".join(row_lines) + f" const bool tx_ok = {ok};"
        col = f"const long long tx_col = tx_c0 + ({layout.coord(1, 'tx_s')});"
        self.emit("if (tx_whole) {  // each chunk one cp.async (zero-filled, reading nothing, for a row outside the tensor)")
        self.depth += 1
        # byte addresses: the first tensor's, the row's uniform part included; the others' at a fixed distance.
        # The distance is an unsigned 64-bit difference of addresses (exact modulo 2**64, no pointer arithmetic
        # across allocations), and it is the same for every row because the gather key requires identical dims
        # and the tensors are contiguous, so their strides are equal
        self.emit(f"const unsigned long long tx_a0 = {addr(names[0])} + (unsigned long long)({'tx_u + ' if uni_oks else ''}"
                  f"tx_c0) * {size};")
        for k, n in enumerate(names[1:], 1):
            self.emit(f"const unsigned long long tx_d{k} = {addr(n)} - {addr(names[0])};")
        if small:
            self.emit(f"const unsigned {', '.join(f'{bs} = (unsigned)({st} * {size})' for bs, st in small)};")
        fast = [f"tilex_cp_async16_or_zero({smem(t, d)}, reinterpret_cast<const void*>(tx_a{f' + tx_d{k}' if k else ''}), tx_ok);"
                for k, (t, d) in enumerate(zip(ts, dsts))]
        acc = f"tx_a0 + (unsigned long long)({layout.coord(1, 'tx_s')}) * {size}"
        for w in reversed(wide):
            acc = w(acc)
        self.unrolled(layout.slots, f"{row} const unsigned long long tx_a = {acc}; " + " ".join(fast), step=vec)
        self.depth -= 1
        self.emit("} else {  // chunks past the row's end or unaligned: element by element")
        self.depth += 1
        slow = [f"tilex_gather_chunk16<{S}>({smem(t, d)}, {n}, tx_ok ? {off} + tx_col : 0, tx_ok, tx_col, (long long){ncols});"
                for t, d, n in zip(ts, dsts, names)]
        self.unrolled(layout.slots, f"{row} {col} " + " ".join(slow), step=vec)
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")

    def stmt_If(self, s: A.If) -> None:
        self.emit(f"if ({self.scalar(s.cond)}) {{")
        self.depth += 1
        self.block(s.then)
        self.depth -= 1
        if s.orelse is not None:
            self.emit("} else {")
            self.depth += 1
            self.block(s.orelse)
            self.depth -= 1
        self.emit("}")

    # ---- conversions
    def cast(self, expr: str, src: DType, dst: DType) -> str:
        if src == dst or reg(src) == reg(dst) and dst not in ROUND and src not in ROUND:
            return expr
        if dst in ROUND:
            if src == dst:
                return expr
            return f"{ROUND[dst]}((float)({expr}))"
        if dst is DType.BOOL:
            return f"(({expr}) != 0)"
        if dst.is_int and src.is_float:
            self.helpers.add("tilex_math.cuh")
            return f"tilex_f2ll({expr})" if dst is DType.I64 else f"tilex_f2i({expr})"
        return f"({reg(dst)})({expr})"

    # ---- scalar expressions (uniform)
    def scalar(self, e: A.Expr) -> str:
        if isinstance(e, A.Name):
            return e.id
        if isinstance(e, A.IntLit):
            return f"{e.value}LL" if e.ty.dtype is DType.I64 or abs(e.value) >= 2**31 else str(e.value)
        if isinstance(e, A.FloatLit):
            return flit(e.value) if e.ty.dtype is not DType.F64 else repr(e.value)
        if isinstance(e, A.BoolLit):
            return "true" if e.value else "false"
        if isinstance(e, A.Index):
            idx, ok = self.scalar_address(e)
            other = e.kwarg("other")
            oth = self.cast(self.scalar(other), other.ty.dtype, e.ty.dtype) if other is not None else "0"
            return f"(({ok}) ? ({reg(e.ty.dtype)})tilex_io<{storage(e.ty.dtype)}>::get({e.base.id}[{idx}]) : ({reg(e.ty.dtype)})({oth}))"
        if isinstance(e, A.Call) and is_reduction(e):
            name, _ = self.reduction(e)
            return name
        return self.elementwise(e, lambda c: self.scalar(c))

    # ---- tile expressions: the value at slot `s` of layout `want`
    def tile(self, e: A.Expr, want: Layout) -> str:
        if not e.ty.shape:
            return self.scalar(e)
        if isinstance(e, A.Name):
            return self.read_array(e.id, self.arrays[e.id], want, e.ty.dtype)
        if isinstance(e, A.Index) and e.base.ty.what == "tensor":
            layout = e.ty.layout
            name = self.fresh("tx_ld")
            self.emit(f"{reg(e.ty.dtype)} {name}[{layout.slots}];  // {unparse(e)}")
            self.access(e, layout, name, store=False)
            return self.read_array(name, layout, want, e.ty.dtype)
        if (isinstance(e, A.Index) and isinstance(e.base, A.Call) and e.base.func == "arange"
                and all(isinstance(i, A.NewAxis) or isinstance(i, A.Slice) and i.start is None and i.stop is None
                        for i in e.items) and sum(isinstance(i, A.Slice) for i in e.items) == 1):
            # a view of an arange (arange(a, b)[None, :]): its value at the slot's coordinate, not an array
            self.helpers.add("tilex_math.cuh")
            axis = next(j for j, i in enumerate(e.items) if isinstance(i, A.Slice))
            return f"tilex_wadd<{reg(e.ty.dtype)}>({self.scalar(e.base.args[0])}, {want.coord(axis)})"
        if isinstance(e, (A.Index, A.Attr)):  # views of a tile: t[:, None], t.T
            base = e.base if isinstance(e, A.Index) else e.obj
            arr, _ = self.materialize(base)
            return self.read_array(arr, e.ty.layout, want, e.ty.dtype)
        if isinstance(e, A.BinOp) and e.op is B.MATMUL:
            name = self.matmul(e)
            return self.read_array(name, e.ty.layout, want, e.ty.dtype)
        fused = _accumulated_product(e)
        if fused is not None:  # c + a @ b (f32): the product accumulates onto c (acc * alpha + p @ v)
            product, c = fused
            name = self.matmul(product, init=self.tile(c, e.ty.layout))
            return self.read_array(name, e.ty.layout, want, e.ty.dtype)
        if isinstance(e, A.Call) and is_reduction(e):
            name, layout = self.reduction(e)
            return self.read_array(name, layout, want, e.ty.dtype)
        if isinstance(e, A.Call) and e.func == "zeros":
            return "0"
        if isinstance(e, A.Call) and e.func == "full":
            return self.cast(self.scalar(e.args[1]), e.args[1].ty.dtype, e.ty.dtype)
        if isinstance(e, A.Call) and e.func == "arange":
            self.helpers.add("tilex_math.cuh")
            return f"tilex_wadd<{reg(e.ty.dtype)}>({self.scalar(e.args[0])}, {want.coord(0)})"
        return self.elementwise(e, lambda c: self.tile(c, want.view_for(c.ty.shape)) if c.ty.shape else self.scalar(c))

    def materialize(self, e: A.Expr) -> tuple[str, Layout]:
        """An array holding tile `e` in its own layout."""
        if isinstance(e, A.Name):
            return e.id, self.arrays[e.id]
        layout = e.ty.layout
        name = self.fresh("tx_tv")
        self.emit(f"{reg(e.ty.dtype)} {name}[{layout.slots}];")
        val = self.tile(e, layout)
        self.unrolled(layout.slots, f"{name}[tx_s] = {val};")
        return name, layout

    def read_array(self, name: str, have: Layout, want: Layout, dt: DType) -> str:
        if have.compatible(want):
            return f"{name}[{have.slot_map(want)}]"
        # a layout conversion through shared memory
        self.helpers.add("tilex_types.cuh")
        out = self.fresh("tx_cv")
        shape = have.shape
        rt = reg(dt)
        self.emit(f"// layout conversion of {name} through shared memory")
        self.emit(self.barrier)
        self.unrolled(have.slots, f"reinterpret_cast<{rt}*>({self.smem})[{flat_index(have, shape)}] = {name}[tx_s];")
        self.emit(self.barrier)
        self.emit(f"{rt} {out}[{want.slots}];")
        self.unrolled(want.slots, f"{out}[tx_s] = reinterpret_cast<const {rt}*>({self.smem})[{flat_index(want, shape)}];")
        return f"{out}[tx_s]"

    # ---- elementwise operators (shared by scalar and tile paths)
    def elementwise(self, e: A.Expr, sub) -> str:
        dt = e.ty.dtype
        cdt = dt.compute
        if isinstance(e, A.BinOp):
            a, b = sub(e.lhs), sub(e.rhs)
            if e.op.is_compare:
                ct = operand_dtype(e.lhs, e.rhs).compute
                return f"({self.cast(a, e.lhs.ty.dtype, ct)} {C_BINOP[e.op]} {self.cast(b, e.rhs.ty.dtype, ct)})"
            if e.op.is_logical:
                return f"({a} {C_BINOP[e.op]} {b})"
            a, b = self.cast(a, e.lhs.ty.dtype, cdt), self.cast(b, e.rhs.ty.dtype, cdt)
            if e.op in WRAPPING and cdt in (DType.I32, DType.I64):  # ints wrap; C++ signed overflow is UB
                self.helpers.add("tilex_math.cuh")
                expr = f"tilex_w{WRAPPING[e.op]}<{reg(cdt)}>({a}, {b})"
            elif e.op in C_BINOP:
                expr = f"({a} {C_BINOP[e.op]} {b})"
            elif e.op is B.DIV:
                expr = f"({a} / {b})"
            elif e.op in (B.FLOORDIV, B.MOD) and cdt in (DType.I32, DType.I64) and _power_of_two(e.rhs):
                # by a power of two (two's complement): floor division is the arithmetic shift, the
                # floor modulo (the sign of the divisor, nonnegative) the low bits
                n = e.rhs.value
                expr = (f"({a} >> {n.bit_length() - 1})" if e.op is B.FLOORDIV
                        else f"({a} & {n - 1}{'LL' if cdt is DType.I64 else ''})")
            elif e.op is B.FLOORDIV:
                self.helpers.add("tilex_math.cuh")
                expr = f"tilex_floordiv<{reg(cdt)}>({a}, {b})"
            elif e.op is B.MOD:
                self.helpers.add("tilex_math.cuh")
                expr = f"tilex_floormod({a}, {b})" if cdt.is_float else f"tilex_floormod<{reg(cdt)}>({a}, {b})"
            elif e.op is B.POW:
                expr = f"powf({a}, {b})" if cdt is DType.F32 else f"({reg(cdt)})pow((double){a}, (double){b})"
            else:
                raise AssertionError(e.op)
            return self.round(expr, dt)
        if isinstance(e, A.UnaryOp):
            x = sub(e.operand)
            if e.op is A.UnaryOpKind.NOT:
                return f"(!{x})"
            if cdt in (DType.I32, DType.I64):
                self.helpers.add("tilex_math.cuh")
                return f"tilex_wneg<{reg(cdt)}>({self.cast(x, e.operand.ty.dtype, cdt)})"
            return self.round(f"(-{self.cast(x, e.operand.ty.dtype, cdt)})", dt)
        if isinstance(e, A.Method):  # .to(dtype)
            return self.cast(sub(e.obj), e.obj.ty.dtype, dt)
        if isinstance(e, A.Call):
            kind = FUNCTIONS[e.func].kind
            args = [sub(a) for a in e.args]
            if kind == "math":
                self.helpers.add("tilex_math.cuh")
                return self.round(CUDA_MATH[e.func].format(x=self.cast(args[0], e.args[0].ty.dtype, DType.F32)), dt)
            if kind == "abs":
                x = self.cast(args[0], e.args[0].ty.dtype, cdt)
                if cdt is DType.BOOL:  # abs of a bool is the bool (as NumPy's)
                    return x
                if cdt is DType.F32:
                    return self.round(f"fabsf({x})", dt)
                self.helpers.add("tilex_math.cuh")
                return f"({x} < 0 ? tilex_wneg<{reg(cdt)}>({x}) : {x})"  # abs(INT_MIN) wraps to INT_MIN
            if kind == "minmax":
                a, b = (self.cast(x, y.ty.dtype, cdt) for x, y in zip(args, e.args))
                if cdt.is_float:
                    return self.round(f"f{e.func}f({a}, {b})", dt)
                self.helpers.add("tilex_math.cuh")
                return f"tilex_i{e.func}<{reg(cdt)}>({a}, {b})"
            if kind == "where":
                return f"({args[0]} ? {self.cast(args[1], e.args[1].ty.dtype, dt)} : {self.cast(args[2], e.args[2].ty.dtype, dt)})"
            if e.func == "program_id":
                return f"(int)blockIdx.{'xyz'[int(e.args[0].value)]}"
            if e.func == "num_programs":
                return f"(int)gridDim.{'xyz'[int(e.args[0].value)]}"
            if e.func == "cdiv":
                self.helpers.add("tilex_math.cuh")
                return f"tilex_cdiv<{reg(dt)}>({self.cast(args[0], e.args[0].ty.dtype, dt)}, {self.cast(args[1], e.args[1].ty.dtype, dt)})"
        raise AssertionError(f"no emission rule for {type(e).__name__} {unparse(e)}")

    def round(self, expr: str, dt: DType) -> str:
        return f"{ROUND[dt]}({expr})" if dt in ROUND else expr


def _power_of_two(e: A.Expr) -> bool:
    """True if `e` is an integer literal 2^k (k >= 0) that fits in 32 bits."""
    return isinstance(e, A.IntLit) and 0 < e.value < 2**31 and e.value & (e.value - 1) == 0


def _accumulated_product(e: A.Expr):
    """(product, addend) when `e` is `c + a @ b` or `a @ b + c` with f32 tiles of one layout, else None."""
    if not (isinstance(e, A.BinOp) and e.op is B.ADD and e.ty.shape and e.ty.dtype is DType.F32):
        return None
    for p, c in ((e.rhs, e.lhs), (e.lhs, e.rhs)):
        if (isinstance(p, A.BinOp) and p.op is B.MATMUL and p.ty.dtype is DType.F32 and p.ty.layout == e.ty.layout
                and c.ty.shape == e.ty.shape and c.ty.dtype is DType.F32):
            return p, c
    return None


def _only_identity(e: A.Expr, name: str, layout: Layout, want) -> bool:
    """True if every read of `name` in `e` is at the same slot it is written (safe in place)."""
    if isinstance(e, A.Name):
        return e.id != name or (want is not None and layout.compatible(want) and layout.slot_map(want) == "tx_s")
    if isinstance(e, A.BinOp) and e.op is B.MATMUL or isinstance(e, (A.Index, A.Attr, A.Call)) and not _elementwise_call(e):
        return not mentions(e, name) or isinstance(e, A.Index) and e.base.ty.what == "tensor"
    return all(_only_identity(c, name, layout, want.view_for(c.ty.shape) if want is not None and c.ty.shape else None)
               for c in e.children() if isinstance(c, A.Expr) and c.ty is not None and c.ty.what == "value")


def _elementwise_call(e) -> bool:
    if isinstance(e, A.Call):
        kind = FUNCTIONS[e.func].kind
        return kind in ("math", "abs", "where", "scalar", "axis", "ctor", "arange") or (kind == "minmax" and len(e.args) == 2)
    return isinstance(e, A.Method)
